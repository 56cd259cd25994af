"""An in-memory, Kubernetes-shaped API server over unstructured objects.

:class:`SimAPIServer` keeps plain-dict objects (``apiVersion``/``kind``/``metadata``/``spec``/
``status``) and implements the API semantics chaosflow relies on: uid, a cluster-wide
``resourceVersion``, ``generation``, timestamps from the run's clock, label and field selectors,
optimistic concurrency, merge and JSON patch, the status subresource, finalizers and
``deletionTimestamp``, graceful pod deletion, ownerReference garbage collection (Background,
Foreground, Orphan), namespace and CRD lifecycle, and watches with a bounded replay history.

Determinism: no wall clock, no unseeded randomness, no threads. Lists come back sorted by
namespace/name (like etcd); every iteration order is insertion order or sorted.

Concurrency model: everything is synchronous. A write commits, then garbage collection runs to a
fixed point, then watch callbacks are called in resourceVersion order. A callback may write to the
server; its events are queued and delivered after the current event reached every watcher, so each
watcher sees events strictly in resourceVersion order.

Storage: stored objects are never mutated in place (a write stores a new dict, unchanged subtrees
may be shared with the previous version), so history entries and the store can share objects.
Data is copied once on the way in (normalized to plain JSON types) and once on the way out.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import jsonpatch

from actors.sim.errors import (
    AlreadyExistsError,
    APIError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    MethodNotAllowedError,
    NotFoundError,
)
from actors.sim.selectors import (
    FieldSelector,
    LabelSelector,
    compile_field_selector,
    compile_label_selector,
    validate_label_key,
    validate_label_value,
)
from actors.sim.types import BUILTIN_TYPES, ResourceType, split_api_version, version_priority_key
from actors.sim.util import copy_json, merge_patch, normalize_json
from engine.clock import Clock, parse_rfc3339, rfc3339

__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "CounterUIDSource",
    "LogProvider",
    "SimAPIServer",
    "Watch",
    "WatchCallback",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (gk, namespace, name)
Event = tuple[int, str, str, Obj, Obj | None]  # (rv, gk, type, object, previous object)
WatchCallback = Callable[[str, Obj], None]
#: ``(pod object, container name) -> log text``; installed by the simulated kubelet.
LogProvider = Callable[[Obj, str], str]
PatchType = Literal["merge", "json", "strategic"]
Propagation = Literal["Background", "Foreground", "Orphan"]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
NAMESPACE_FINALIZER = "kubernetes"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
SNAPSHOT_FORMAT = "chaosflow.io/sim-cluster/v1"

_NS = "Namespace."
_POD = "Pod."
_JOB = "Job.batch"
_CRD = "CustomResourceDefinition.apiextensions.k8s.io"

# metadata fields owned by the server: a client's value is ignored on create/update.
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class CounterUIDSource:
    """Deterministic uuid-shaped uids: ``<crc32(seed)>-0000-4000-8000-<counter>``.

    Same seed and same sequence of creates give the same uids; its state is saved in snapshots.
    """

    def __init__(self, seed: str = "") -> None:
        self._prefix = f"{zlib.crc32(seed.encode()):08x}"
        self._counter = 0

    def __call__(self) -> str:
        self._counter += 1
        return f"{self._prefix}-0000-4000-8000-{self._counter:012x}"

    def get_state(self) -> int:
        return self._counter

    def set_state(self, state: int) -> None:
        self._counter = int(state)


class _KindStore:
    """All objects of one group/kind (every served version shares the store)."""

    __slots__ = ("by_ns", "objects", "sorted_all", "sorted_ns")

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.by_ns: dict[str, dict[str, None]] = {}
        self.sorted_all: list[tuple[str, str]] | None = None
        self.sorted_ns: dict[str, list[str]] = {}

    def insert(self, ns: str, name: str, obj: Obj) -> None:
        self.objects[(ns, name)] = obj
        names = self.by_ns.get(ns)
        if names is None:
            names = self.by_ns[ns] = {}
        names[name] = None
        self.sorted_all = None
        self.sorted_ns.pop(ns, None)

    def remove(self, ns: str, name: str) -> None:
        del self.objects[(ns, name)]
        names = self.by_ns[ns]
        del names[name]
        if not names:
            del self.by_ns[ns]
        self.sorted_all = None
        self.sorted_ns.pop(ns, None)

    def keys_sorted(self, ns: str | None) -> list[tuple[str, str]]:
        if ns is None:
            if self.sorted_all is None:
                self.sorted_all = sorted(self.objects)
            return self.sorted_all
        names = self.sorted_ns.get(ns)
        if names is None:
            names = self.sorted_ns[ns] = sorted(self.by_ns.get(ns, ()))
        return [(ns, n) for n in names]


class Watch:
    """A running watch. ``stop()`` ends it; no callback is called after ``stop()`` returns."""

    __slots__ = (
        "_callback",
        "_copy",
        "_fields",
        "_labels",
        "_namespace",
        "_server",
        "resource_type",
        "resource_version",
        "start_rv",
        "stopped",
    )

    def __init__(
        self,
        server: SimAPIServer,
        *,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        callback: WatchCallback,
        start_rv: int,
        copy: bool = True,
    ) -> None:
        self._server = server
        self.resource_type = rt
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._callback = callback
        self.start_rv = start_rv
        self._copy = copy
        self.stopped = False
        #: resourceVersion of the last event delivered (or the start point).
        self.resource_version = str(start_rv)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._server._remove_watch(self)

    def _matches(self, obj: Obj) -> bool:
        if not self._labels.empty and not self._labels.matches(obj["metadata"].get("labels")):
            return False
        return self._fields.empty or self._fields.matches(obj)

    def _translate(self, etype: str, obj: Obj, old: Obj | None) -> str | None:
        """The event type this watcher sees (selector transitions become ADDED/DELETED), or None."""
        if self._namespace is not None and obj["metadata"].get("namespace", "") != self._namespace:
            return None
        if self._labels.empty and self._fields.empty:
            return etype
        now = self._matches(obj)
        if etype == MODIFIED and old is not None:
            before = self._matches(old)
            if now and before:
                return MODIFIED
            if now:
                return ADDED
            if before:
                return DELETED
            return None
        return etype if now else None

    def _deliver(self, etype: str, obj: Obj, rv: int) -> None:
        api_version = self.resource_type.api_version
        if self._copy:
            out = copy_json(obj)
            if out.get("apiVersion") != api_version:
                out["apiVersion"] = api_version
        elif obj.get("apiVersion") != api_version:
            out = {**obj, "apiVersion": api_version}
        else:
            out = obj  # read-only view of the stored object (trusted consumers only)
        self.resource_version = str(rv)
        self._callback(etype, out)

    def __repr__(self) -> str:
        return f"Watch({self.resource_type.resource}, namespace={self._namespace!r}, stopped={self.stopped})"


def _name_error(kind: str, name: str, msg: str) -> InvalidError:
    return InvalidError(
        f'{kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": {msg}',
        details={"name": name, "kind": kind},
    )


def _validate_name(rt: ResourceType, name: str) -> None:
    if rt.gk == _NS:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            raise _name_error(
                rt.kind,
                name,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
                "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            )
    elif rt.gk == "Service.":
        if len(name) > 63 or not _DNS1035_LABEL.match(name):
            raise _name_error(
                rt.kind,
                name,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
                "with an alphabetic character, and end with an alphanumeric character (e.g. "
                "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            )
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        raise _name_error(
            rt.kind,
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
            "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )


def _is_deleting(obj: Obj) -> bool:
    return "deletionTimestamp" in obj["metadata"]


def _pod_scheduled(pod: Obj) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return True
    return False


def _qos_class(spec: Obj) -> str:
    containers = list(spec.get("containers") or ()) + list(spec.get("initContainers") or ())
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            limit = lim.get(r)
            request = req.get(r, limit)
            if limit is None or request != limit:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _plural_of(kind: str) -> str:
    low = kind.lower()
    if low.endswith(("s", "x", "z", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


class SimAPIServer:
    """In-memory Kubernetes API server. See the module docstring for the semantics.

    ``clock`` gives timestamps (``clock.now()`` in epoch seconds); ``uid_source`` returns the next
    uid (default: :class:`CounterUIDSource` seeded by ``name``); ``history_size`` bounds the watch
    replay history (older resourceVersions get 410 Gone). With ``raise_callback_errors`` an
    exception from a watch callback is re-raised to the writer (after all events were delivered);
    otherwise it is logged and counted in ``metrics()["callbackErrors"]``.
    """

    def __init__(
        self,
        clock: Clock,
        uid_source: Callable[[], str] | None = None,
        name: str = "sim",
        *,
        history_size: int = 10_000,
        raise_callback_errors: bool = False,
    ) -> None:
        self.name = name
        self._clock = clock
        self._uid_source: Callable[[], str] = uid_source or CounterUIDSource(name)
        self._history_size = max(1, int(history_size))
        self._raise_callback_errors = raise_callback_errors
        self._log_provider: LogProvider | None = None
        self._ts_cache: tuple[float, str] = (float("nan"), "")
        self._reset()
        for ns in INITIAL_NAMESPACES:
            self._create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, None)

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        self._types: list[ResourceType] = []
        self._types_by_gvk: dict[tuple[str, str, str], ResourceType] = {}
        self._types_by_gk: dict[str, list[ResourceType]] = {}
        self._names: dict[str, list[ResourceType]] = {}
        self._resolve_cache: dict[tuple[str, str | None], ResourceType] = {}
        self._custom_types: list[ResourceType] = []
        self._stores: dict[str, _KindStore] = {}
        self._rv = 0
        self._history: deque[Event] = deque(maxlen=self._history_size)
        self._floor = 0
        self._pending: deque[Event] = deque()
        self._watchers: dict[str, list[Watch]] = {}
        self._dispatching = False
        self._by_uid: dict[str, Key] = {}
        self._dependents: dict[str, dict[Key, None]] = {}
        self._ns_counts: dict[str, int] = {}
        self._gc_queue: deque[tuple[str, Any]] = deque()
        self._gc_running = False
        self._requests: dict[tuple[str, int], int] = {}
        self._callback_errors = 0
        self._name_counter = 0
        for rt in BUILTIN_TYPES:
            self._add_type(rt)
        self._rebuild_names()

    # ---------------------------------------------------------------- registry

    def _add_type(self, rt: ResourceType) -> None:
        gvk = (rt.group, rt.version, rt.kind)
        if gvk in self._types_by_gvk:
            self._types.remove(self._types_by_gvk[gvk])
        self._types.append(rt)
        self._types_by_gvk[gvk] = rt
        versions = [t for t in self._types_by_gk.get(rt.gk, []) if t.version != rt.version]
        versions.append(rt)
        versions.sort(key=lambda t: version_priority_key(t.version))
        self._types_by_gk[rt.gk] = versions
        if rt.gk not in self._stores:
            self._stores[rt.gk] = _KindStore()

    def _remove_types(self, gk: str, versions: Iterable[str] | None = None) -> None:
        keep = []
        for rt in self._types_by_gk.get(gk, []):
            if versions is None or rt.version in versions:
                self._types.remove(rt)
                del self._types_by_gvk[(rt.group, rt.version, rt.kind)]
            else:
                keep.append(rt)
        if keep:
            self._types_by_gk[gk] = keep
        else:
            self._types_by_gk.pop(gk, None)
            for w in list(self._watchers.get(gk, ())):
                w.stop()

    def _rebuild_names(self) -> None:
        names: dict[str, list[ResourceType]] = {}
        seen: dict[str, None] = {}
        for rt in self._types:
            seen.setdefault(rt.gk, None)
        for gk in seen:
            for rt in self._types_by_gk.get(gk, ()):
                aliases = {rt.kind.lower(), rt.plural, rt.singular, *(s.lower() for s in rt.short_names)}
                if rt.group:
                    aliases |= {f"{a}.{rt.group}" for a in (rt.kind.lower(), rt.plural, rt.singular)}
                for alias in sorted(aliases):
                    names.setdefault(alias, []).append(rt)
        self._names = names
        self._resolve_cache.clear()

    def register_kind(
        self,
        group: str,
        version: str,
        kind: str,
        plural: str | None = None,
        *,
        namespaced: bool = True,
        has_status_subresource: bool = False,
        short_names: Sequence[str] = (),
    ) -> ResourceType:
        """Serve a new kind (without a CRD object). Saved in snapshots. Returns its type."""
        rt = ResourceType(
            group,
            version,
            kind,
            plural or _plural_of(kind),
            namespaced,
            has_status_subresource,
            tuple(short_names),
        )
        return self.register_type(rt)

    def register_type(self, rt: ResourceType) -> ResourceType:
        """Serve ``rt`` (replacing a type with the same group/version/kind)."""
        existing = self._types_by_gk.get(rt.gk)
        if existing and existing[0].namespaced != rt.namespaced:
            raise InvalidError(f"{rt.gk} is already registered with a different scope")
        self._custom_types = [
            t for t in self._custom_types if (t.group, t.version, t.kind) != (rt.group, rt.version, rt.kind)
        ]
        self._custom_types.append(rt)
        self._add_type(rt)
        self._rebuild_names()
        return rt

    def resource_types(self) -> list[ResourceType]:
        """Every served type, in registration order (like ``kubectl api-resources``)."""
        return list(self._types)

    def resolve(self, kind: str, api_version: str | None = None) -> ResourceType:
        """Find a served type by kind, plural, singular or short name, optionally qualified.

        Accepted: ``Pod``, ``pods``, ``po``, ``deployments.apps``, ``apps/v1/Deployment`` or
        ``kind`` plus ``api_version``. Unknown -> :class:`NotFoundError`.
        """
        ck = (kind, api_version)
        rt = self._resolve_cache.get(ck)
        if rt is not None:
            return rt
        rt = self._resolve_uncached(kind, api_version)
        self._resolve_cache[ck] = rt
        return rt

    def _resolve_uncached(self, kind: str, api_version: str | None) -> ResourceType:
        if api_version is None and "/" in kind:
            api_version, kind = kind.rsplit("/", 1)
        if api_version:
            group, version = split_api_version(api_version)
            rt = self._types_by_gvk.get((group, version, kind))
            if rt is not None:
                return rt
            low = kind.lower()
            for cand in self._types:
                if (cand.group, cand.version) == (group, version) and low in (
                    cand.kind.lower(),
                    cand.plural,
                    cand.singular,
                    *(s.lower() for s in cand.short_names),
                ):
                    return cand
        else:
            found = self._names.get(kind.lower())
            if found:
                exact = [t for t in found if t.kind == kind]
                return (exact or found)[0]
        raise NotFoundError(
            "the server could not find the requested resource",
            details={"kind": kind, "group": api_version or ""},
        )

    def _type_for_object(self, obj: Mapping[str, Any]) -> ResourceType:
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise BadRequestError("Object 'Kind' is missing in the request body")
        if not isinstance(api_version, str) or not api_version:
            raise BadRequestError(f"Object 'apiVersion' is missing in the {kind} object")
        group, version = split_api_version(api_version)
        rt = self._types_by_gvk.get((group, version, kind))
        if rt is None:
            raise NotFoundError(
                "the server could not find the requested resource",
                details={"kind": kind, "group": group},
            )
        return rt

    # ------------------------------------------------------------- utilities

    def _ts(self, t: float) -> str:
        cached_t, cached_s = self._ts_cache
        if cached_t == t:
            return cached_s
        s = rfc3339(t) or ""
        self._ts_cache = (t, s)
        return s

    def _count(self, verb: str, code: int) -> None:
        k = (verb, code)
        self._requests[k] = self._requests.get(k, 0) + 1

    def _out(self, obj: Obj, rt: ResourceType) -> Obj:
        out: Obj = copy_json(obj)
        if out.get("apiVersion") != rt.api_version:
            out["apiVersion"] = rt.api_version
        return out

    def _ns_of(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        return namespace or "default"

    def _lookup(self, rt: ResourceType, ns: str, name: str) -> Obj:
        obj = self._stores[rt.gk].objects.get((ns, name))
        if obj is None:
            raise NotFoundError(
                f'{rt.resource} "{name}" not found',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        return obj

    def _obj_at(self, key: Key) -> Obj | None:
        store = self._stores.get(key[0])
        return None if store is None else store.objects.get((key[1], key[2]))

    def _rt_of_key(self, key: Key) -> ResourceType:
        return self._types_by_gk[key[0]][0]

    def _generate_suffix(self) -> str:
        self._name_counter += 1
        digest = hashlib.blake2b(f"{self.name}/{self._name_counter}".encode(), digest_size=8).digest()
        n = int.from_bytes(digest, "big")
        out = []
        for _ in range(5):
            n, r = divmod(n, len(_GENERATE_ALPHABET))
            out.append(_GENERATE_ALPHABET[r])
        return "".join(out)

    def _settle(self) -> None:
        """Run garbage collection to a fixed point, then deliver pending watch events."""
        self._run_gc()
        if not self._dispatching:
            self._dispatch()

    # -------------------------------------------------------------- commits

    def _emit(self, ev: Event) -> None:
        history = self._history
        if len(history) == self._history_size:
            self._floor = history[0][0]
        history.append(ev)
        if self._watchers.get(ev[1]):
            self._pending.append(ev)

    def _index_owners(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        old_refs = (old["metadata"].get("ownerReferences") or ()) if old is not None else ()
        new_refs = (new["metadata"].get("ownerReferences") or ()) if new is not None else ()
        if old_refs == new_refs:
            return
        for ref in old_refs:
            uid = ref.get("uid", "")
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.pop(key, None)
                if not deps:
                    del self._dependents[uid]
            self._gc_queue.append(("fg", uid))
        for ref in new_refs:
            uid = ref.get("uid", "")
            self._dependents.setdefault(uid, {})[key] = None
        if new is not None and new_refs:
            self._gc_queue.append(("check", key))

    def _commit_put(self, rt: ResourceType, new: Obj, old: Obj | None) -> Obj:
        """Store ``new`` (whose metadata dict must be fresh) with the next resourceVersion."""
        self._rv += 1
        rv = self._rv
        meta = new["metadata"]
        meta["resourceVersion"] = str(rv)
        ns = meta.get("namespace", "")
        name = meta["name"]
        store = self._stores[rt.gk]
        key = (rt.gk, ns, name)
        if old is None:
            store.insert(ns, name, new)
            self._by_uid[meta["uid"]] = key
            if ns:
                self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        else:
            store.objects[(ns, name)] = new
        if (old is not None and old["metadata"].get("ownerReferences")) or meta.get("ownerReferences"):
            self._index_owners(key, old, new)
        self._emit((rv, rt.gk, MODIFIED if old is not None else ADDED, new, old))
        return new

    def _commit_remove(self, rt: ResourceType, base: Obj, old: Obj) -> Obj:
        """Remove the object; ``base`` is its final state (may equal ``old``). Returns that state."""
        self._rv += 1
        rv = self._rv
        final = dict(base)
        meta = final["metadata"] = dict(base["metadata"])
        meta["resourceVersion"] = str(rv)
        ns = meta.get("namespace", "")
        name = meta["name"]
        uid = meta["uid"]
        self._stores[rt.gk].remove(ns, name)
        self._by_uid.pop(uid, None)
        key = (rt.gk, ns, name)
        if old["metadata"].get("ownerReferences"):
            self._index_owners(key, old, None)
        for dep in self._dependents.get(uid, ()):
            self._gc_queue.append(("check", dep))
        if ns:
            left = self._ns_counts.get(ns, 0) - 1
            if left > 0:
                self._ns_counts[ns] = left
            else:
                self._ns_counts.pop(ns, None)
            ns_obj = self._stores[_NS].objects.get(("", ns))
            if ns_obj is not None and _is_deleting(ns_obj):
                self._gc_queue.append(("ns", ns))
        if rt.crd is not None:
            crd = self._stores[_CRD].objects.get(("", rt.crd))
            if crd is not None and _is_deleting(crd):
                self._gc_queue.append(("crd", rt.crd))
        self._emit((rv, rt.gk, DELETED, final, old))
        if rt.gk == _CRD:
            self._crd_unregister(old)
        return final

    # ---------------------------------------------------------------- create

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> Obj:
        """Create ``obj`` (``apiVersion``/``kind`` inside it). Returns the stored object.

        The namespace comes from ``metadata.namespace``, else ``namespace``, else ``default``.
        ``metadata.generateName`` without a name gets a deterministic 5-character suffix.
        """
        try:
            out = self._create(obj, namespace)
        except APIError as e:
            self._count("create", e.code)
            raise
        self._count("create", 201)
        self._settle()
        return out

    def _create(self, obj: Mapping[str, Any], namespace: str | None) -> Obj:
        if not isinstance(obj, Mapping):
            raise BadRequestError("the request body must be an object")
        rt = self._type_for_object(obj)
        new: Obj = normalize_json(obj)
        meta = new.get("metadata")
        if meta is None:
            meta = new["metadata"] = {}
        elif type(meta) is not dict:
            raise BadRequestError("metadata must be an object")
        if meta.get("resourceVersion"):
            raise BadRequestError("resourceVersion should not be set on objects to be created")
        if rt.namespaced:
            ns = meta.get("namespace") or namespace or "default"
            if namespace and ns != namespace:
                raise BadRequestError(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            ns_obj = self._stores[_NS].objects.get(("", ns))
            if ns_obj is None:
                raise NotFoundError(
                    f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
                )
            if _is_deleting(ns_obj):
                raise ForbiddenError(
                    f'{rt.resource} "{meta.get("name") or meta.get("generateName", "")}" is forbidden: '
                    f"unable to create new content in namespace {ns} because it is being terminated",
                    details={"name": meta.get("name", ""), "kind": rt.plural},
                )
        else:
            meta.pop("namespace", None)
            ns = ""
        if rt.crd is not None:
            crd = self._stores[_CRD].objects.get(("", rt.crd))
            if crd is not None and _is_deleting(crd):
                raise MethodNotAllowedError(
                    f"create not allowed while custom resource definition is terminating: {rt.crd}"
                )
        store = self._stores[rt.gk]
        name = meta.get("name")
        if not name:
            gen = meta.get("generateName")
            if not gen:
                raise InvalidError(
                    f'{rt.kind} "" is invalid: metadata.name: Required value: '
                    "name or generateName is required",
                    details={"kind": rt.kind},
                )
            for _ in range(16):
                name = f"{gen}{self._generate_suffix()}"
                if (ns, name) not in store.objects:
                    break
            meta["name"] = name
        elif type(name) is not str:
            raise BadRequestError("metadata.name must be a string")
        name = str(name)
        _validate_name(rt, name)
        if (ns, name) in store.objects:
            raise AlreadyExistsError(
                f'{rt.resource} "{name}" already exists',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        new["apiVersion"] = rt.api_version
        for f in _SERVER_META:
            meta.pop(f, None)
        meta.pop("selfLink", None)
        meta["uid"] = self._uid_source()
        meta["creationTimestamp"] = self._ts(self._clock.now())
        meta["generation"] = 1
        self._validate_meta(rt, meta, None)
        self._prepare_create(rt, new)
        self._commit_put(rt, new, None)
        if rt.gk == _CRD:
            self._crd_register(new)
        return self._out(new, rt)

    def _validate_meta(self, rt: ResourceType, meta: Obj, old_meta: Obj | None) -> None:
        name = meta.get("name", "")
        labels = meta.get("labels")
        if labels is not None and (old_meta is None or labels != old_meta.get("labels")):
            if type(labels) is not dict:
                raise InvalidError(f'{rt.kind} "{name}" is invalid: metadata.labels: must be an object')
            for k, v in labels.items():
                err = validate_label_key(k)
                if err is None:
                    if type(v) is not str:
                        err = "label values must be strings"
                    else:
                        err = validate_label_value(v)
                if err is not None:
                    raise InvalidError(
                        f'{rt.kind} "{name}" is invalid: metadata.labels: Invalid value: "{k}": {err}',
                        details={"name": name, "kind": rt.kind},
                    )
        annotations = meta.get("annotations")
        if annotations is not None and (old_meta is None or annotations != old_meta.get("annotations")):
            if type(annotations) is not dict:
                raise InvalidError(f'{rt.kind} "{name}" is invalid: metadata.annotations: must be an object')
            for k, v in annotations.items():
                err = validate_label_key(k)
                if err is None and type(v) is not str:
                    err = "annotation values must be strings"
                if err is not None:
                    raise InvalidError(
                        f'{rt.kind} "{name}" is invalid: metadata.annotations: Invalid value: "{k}": {err}',
                        details={"name": name, "kind": rt.kind},
                    )
        finalizers = meta.get("finalizers")
        if finalizers is not None and (old_meta is None or finalizers != old_meta.get("finalizers")):
            if type(finalizers) is not list or any(type(f) is not str or not f for f in finalizers):
                raise InvalidError(
                    f'{rt.kind} "{name}" is invalid: metadata.finalizers: must be a list of names'
                )
            if old_meta is not None and "deletionTimestamp" in old_meta:
                added = set(finalizers) - set(old_meta.get("finalizers") or ())
                if added:
                    raise InvalidError(
                        f'{rt.kind} "{name}" is invalid: metadata.finalizers: Forbidden: no new '
                        "finalizers can be added if the object is being deleted, found new finalizers "
                        f"{sorted(added)!r}",
                        details={"name": name, "kind": rt.kind},
                    )
        refs = meta.get("ownerReferences")
        if refs is not None and (old_meta is None or refs != old_meta.get("ownerReferences")):
            if type(refs) is not list:
                raise InvalidError(f'{rt.kind} "{name}" is invalid: metadata.ownerReferences: must be a list')
            controllers = 0
            for ref in refs:
                if type(ref) is not dict:
                    raise InvalidError(f'{rt.kind} "{name}" is invalid: metadata.ownerReferences: bad entry')
                for f in ("apiVersion", "kind", "name", "uid"):
                    if not ref.get(f):
                        raise InvalidError(
                            f'{rt.kind} "{name}" is invalid: metadata.ownerReferences.{f}: Required value',
                            details={"name": name, "kind": rt.kind},
                        )
                if ref.get("controller"):
                    controllers += 1
            if controllers > 1:
                raise InvalidError(
                    f'{rt.kind} "{name}" is invalid: metadata.ownerReferences: Invalid value: '
                    "Only one reference can have Controller set to true",
                    details={"name": name, "kind": rt.kind},
                )

    def _prepare_create(self, rt: ResourceType, new: Obj) -> None:
        gk = rt.gk
        if gk == _POD:
            spec = new.get("spec")
            if type(spec) is not dict:
                raise self._invalid(rt, new, "spec", "Required value")
            self._validate_pod_spec(rt, new, spec, "spec")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("schedulerName", "default-scheduler")
            new["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        elif gk == _NS:
            spec = new.get("spec")
            if type(spec) is not dict:
                spec = new["spec"] = {}
            fins = spec.get("finalizers")
            if not fins:
                spec["finalizers"] = [NAMESPACE_FINALIZER]
            new["status"] = {"phase": "Active"}
        elif gk == _JOB:
            self._prepare_job(rt, new)
        elif gk == _CRD:
            self._validate_crd(new)
            meta = new["metadata"]
            fins = meta.setdefault("finalizers", [])
            if CRD_CLEANUP_FINALIZER not in fins:
                fins.append(CRD_CLEANUP_FINALIZER)
            new["status"] = self._crd_status(new)
        elif gk == "Node.":
            pass  # nodes may carry status on create (kubelet registration)
        elif gk == "Service.":
            new["status"] = {"loadBalancer": {}}
        elif rt.has_status_subresource:
            new.pop("status", None)

    def _invalid(self, rt: ResourceType, obj: Obj, path: str, msg: str) -> InvalidError:
        name = obj["metadata"].get("name", "")
        return InvalidError(
            f'{rt.kind} "{name}" is invalid: {path}: {msg}', details={"name": name, "kind": rt.kind}
        )

    def _validate_pod_spec(self, rt: ResourceType, obj: Obj, spec: Obj, path: str) -> None:
        containers = spec.get("containers")
        if type(containers) is not list or not containers:
            raise self._invalid(rt, obj, f"{path}.containers", "Required value")
        seen: set[str] = set()
        for i, c in enumerate(list(containers) + list(spec.get("initContainers") or ())):
            if type(c) is not dict or not c.get("name"):
                raise self._invalid(rt, obj, f"{path}.containers[{i}].name", "Required value")
            if c["name"] in seen:
                raise self._invalid(
                    rt, obj, f"{path}.containers[{i}].name", f'Duplicate value: "{c["name"]}"'
                )
            seen.add(c["name"])
            if not c.get("image"):
                raise self._invalid(rt, obj, f"{path}.containers[{i}].image", "Required value")
        policy = spec.get("restartPolicy", "Always")
        if policy not in ("Always", "OnFailure", "Never"):
            raise self._invalid(
                rt,
                obj,
                f"{path}.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )

    def _prepare_job(self, rt: ResourceType, new: Obj) -> None:
        spec = new.get("spec")
        if type(spec) is not dict:
            raise self._invalid(rt, new, "spec", "Required value")
        template = spec.get("template")
        if type(template) is not dict or type(template.get("spec")) is not dict:
            raise self._invalid(rt, new, "spec.template", "Required value")
        pod_spec = template["spec"]
        self._validate_pod_spec(rt, new, pod_spec, "spec.template.spec")
        if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            raise self._invalid(
                rt,
                new,
                "spec.template.spec.restartPolicy",
                f'Unsupported value: "{pod_spec.get("restartPolicy", "Always")}": supported values: '
                '"OnFailure", "Never"',
            )
        if "completions" not in spec and "parallelism" not in spec:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        meta = new["metadata"]
        uid = meta["uid"]
        name = meta["name"]
        tmeta = template.get("metadata")
        if type(tmeta) is not dict:
            tmeta = template["metadata"] = {}
        tlabels = tmeta.get("labels")
        if type(tlabels) is not dict:
            tlabels = tmeta["labels"] = {}
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tlabels["batch.kubernetes.io/controller-uid"] = uid
            tlabels["batch.kubernetes.io/job-name"] = name
            tlabels["controller-uid"] = uid
            tlabels["job-name"] = name
        if not meta.get("labels"):
            meta["labels"] = dict(tlabels)
        new["status"] = {}

    # ------------------------------------------------------------------- CRDs

    def _validate_crd(self, crd: Obj) -> None:
        rt = self._types_by_gk[_CRD][0]
        spec = crd.get("spec")
        if type(spec) is not dict:
            raise self._invalid(rt, crd, "spec", "Required value")
        group = spec.get("group") or ""
        names = spec.get("names") or {}
        plural = names.get("plural") or ""
        kind = names.get("kind") or ""
        if "." not in group:
            raise self._invalid(
                rt, crd, "spec.group", f'Invalid value: "{group}": should be a domain with at least one dot'
            )
        if not plural or not kind:
            raise self._invalid(rt, crd, "spec.names", "Required value: plural and kind are required")
        if crd["metadata"]["name"] != f"{plural}.{group}":
            raise self._invalid(
                rt,
                crd,
                "metadata.name",
                f'Invalid value: "{crd["metadata"]["name"]}": must be spec.names.plural+"."+spec.group',
            )
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            raise self._invalid(
                rt, crd, "spec.scope", 'Unsupported value: supported values: "Cluster", "Namespaced"'
            )
        versions = spec.get("versions")
        if type(versions) is not list or not versions:
            raise self._invalid(
                rt,
                crd,
                "spec.versions",
                "Required value: must have exactly one version marked as storage version",
            )
        if sum(1 for v in versions if type(v) is dict and v.get("storage")) != 1:
            raise self._invalid(
                rt,
                crd,
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        for v in versions:
            if type(v) is not dict or not v.get("name"):
                raise self._invalid(rt, crd, "spec.versions.name", "Required value")
        gk = f"{kind}.{group}"
        for t in self._types_by_gk.get(gk, ()):
            if t.crd != crd["metadata"]["name"]:
                raise self._invalid(
                    rt, crd, "spec.names.kind", f'Invalid value: "{kind}": already served by another API'
                )

    def _crd_status(self, crd: Obj) -> Obj:
        spec = crd["spec"]
        now = self._ts(self._clock.now())
        storage = [v["name"] for v in spec["versions"] if v.get("storage")]
        return {
            "acceptedNames": dict(spec["names"]),
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "storedVersions": storage,
        }

    def _crd_types(self, crd: Obj) -> list[ResourceType]:
        spec = crd["spec"]
        names = spec["names"]
        out = []
        for v in spec["versions"]:
            if not v.get("served", True):
                continue
            out.append(
                ResourceType(
                    group=spec["group"],
                    version=v["name"],
                    kind=names["kind"],
                    plural=names["plural"],
                    namespaced=spec.get("scope") == "Namespaced",
                    has_status_subresource="status" in (v.get("subresources") or {}),
                    short_names=tuple(names.get("shortNames") or ()),
                    singular=names.get("singular") or names["kind"].lower(),
                    crd=crd["metadata"]["name"],
                )
            )
        return out

    def _crd_register(self, crd: Obj) -> None:
        types = self._crd_types(crd)
        if not types:
            return
        gk = types[0].gk
        stale = [
            t.version for t in self._types_by_gk.get(gk, ()) if t.version not in {x.version for x in types}
        ]
        if stale:
            self._remove_types(gk, stale)
        for rt in types:
            self._add_type(rt)
        self._rebuild_names()

    def _crd_unregister(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        gk = f"{(spec.get('names') or {}).get('kind', '')}.{spec.get('group', '')}"
        if gk in self._types_by_gk:
            self._remove_types(gk)
            store = self._stores.pop(gk, None)
            for (ns, _name), obj in store.objects.items() if store is not None else ():
                self._by_uid.pop(obj["metadata"]["uid"], None)
                if ns:
                    left = self._ns_counts.get(ns, 0) - 1
                    if left > 0:
                        self._ns_counts[ns] = left
                    else:
                        self._ns_counts.pop(ns, None)
            self._rebuild_names()

    # ------------------------------------------------------------------- read

    def get(
        self, kind: str, name: str, namespace: str | None = None, *, api_version: str | None = None
    ) -> Obj:
        """Get one object (a deep copy). Namespaced kinds default to namespace ``default``."""
        try:
            rt = self.resolve(kind, api_version)
            obj = self._lookup(rt, self._ns_of(rt, namespace), name)
        except APIError as e:
            self._count("get", e.code)
            raise
        self._count("get", 200)
        return self._out(obj, rt)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | Mapping[str, Any] | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        *,
        api_version: str | None = None,
    ) -> Obj:
        """List objects as a Kubernetes List (``items`` sorted by namespace/name).

        ``namespace=None`` lists all namespaces. ``metadata.resourceVersion`` of the list is the
        point to start a watch from.
        """
        try:
            rt = self.resolve(kind, api_version)
            labels = compile_label_selector(label_selector)
            fields = compile_field_selector(field_selector)
        except APIError as e:
            self._count("list", e.code)
            raise
        self._count("list", 200)
        items = [self._out(o, rt) for o in self._select(rt, namespace, labels, fields)]
        return {
            "apiVersion": rt.api_version,
            "kind": f"{rt.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _select(
        self, rt: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> builtins.list[Obj]:
        store = self._stores[rt.gk]
        objects = store.objects
        ns = namespace if (rt.namespaced and namespace) else None
        out = []
        for k in store.keys_sorted(ns):
            obj = objects[k]
            if not labels.empty and not labels.matches(obj["metadata"].get("labels")):
                continue
            if not fields.empty and not fields.matches(obj):
                continue
            out.append(obj)
        return out

    def count(self, kind: str, namespace: str | None = None, *, api_version: str | None = None) -> int:
        """Number of objects of a kind (in a namespace or in all); cheap, no copies."""
        rt = self.resolve(kind, api_version)
        store = self._stores[rt.gk]
        if rt.namespaced and namespace:
            return len(store.by_ns.get(namespace, ()))
        return len(store.objects)

    def resource_version(self) -> str:
        """The latest committed resourceVersion."""
        return str(self._rv)

    # ----------------------------------------------------------------- update

    def update(self, obj: Mapping[str, Any]) -> Obj:
        """Replace an object. A set ``metadata.resourceVersion`` must be current (else 409
        Conflict); without it the update is unconditional. Status changes are ignored for kinds
        with a status subresource. An update that changes nothing bumps nothing."""
        return self._public_update(obj, status_only=False, verb="update")

    def update_status(self, obj: Mapping[str, Any]) -> Obj:
        """Replace the status subresource: only ``status`` changes are taken from ``obj``."""
        return self._public_update(obj, status_only=True, verb="update_status")

    def _public_update(self, obj: Mapping[str, Any], *, status_only: bool, verb: str) -> Obj:
        try:
            if not isinstance(obj, Mapping):
                raise BadRequestError("the request body must be an object")
            rt = self._type_for_object(obj)
            if status_only and not rt.has_status_subresource:
                raise NotFoundError("the server could not find the requested resource")
            meta = obj.get("metadata") or {}
            name = meta.get("name") or ""
            if not name:
                raise BadRequestError("name is required for update")
            old = self._lookup(rt, self._ns_of(rt, meta.get("namespace")), name)
            if status_only:  # only metadata (preconditions) and status are looked at
                cand = {"kind": obj.get("kind"), "metadata": normalize_json(meta)}
                if obj.get("status") is not None:
                    cand["status"] = normalize_json(obj["status"])
            else:
                cand = normalize_json(obj)
            result = self._apply_update(rt, old, cand, status_only=status_only)
        except APIError as e:
            self._count(verb, e.code)
            raise
        self._count(verb, 200)
        out = self._out(result, rt)
        self._settle()
        return out

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        api_version: str | None = None,
    ) -> Obj:
        """Patch an object: ``merge`` (RFC 7386), ``json`` (RFC 6902) or ``strategic`` (treated
        as merge). A ``metadata.resourceVersion`` in the result acts as a precondition."""
        return self._public_patch(
            kind, name, patch, namespace, patch_type=patch_type, api_version=api_version, status_only=False
        )

    def patch_status(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        api_version: str | None = None,
    ) -> Obj:
        """Patch the status subresource (only ``status`` changes are kept)."""
        return self._public_patch(
            kind, name, patch, namespace, patch_type=patch_type, api_version=api_version, status_only=True
        )

    def _public_patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None,
        *,
        patch_type: str,
        api_version: str | None,
        status_only: bool,
    ) -> Obj:
        verb = "patch_status" if status_only else "patch"
        try:
            rt = self.resolve(kind, api_version)
            if status_only and not rt.has_status_subresource:
                raise NotFoundError("the server could not find the requested resource")
            old = self._lookup(rt, self._ns_of(rt, namespace), name)
            cand = self._apply_patch_doc(old, patch, patch_type)
            result = self._apply_update(rt, old, cand, status_only=status_only)
        except APIError as e:
            self._count(verb, e.code)
            raise
        self._count(verb, 200)
        out = self._out(result, rt)
        self._settle()
        return out

    def _apply_patch_doc(self, old: Obj, patch: Any, patch_type: str) -> Obj:
        if isinstance(patch, str | bytes):
            try:
                patch = json.loads(patch)
            except ValueError as e:
                raise BadRequestError(f"error decoding patch: {e}") from None
        if patch_type in ("merge", "strategic"):
            if not isinstance(patch, Mapping):
                raise BadRequestError("merge patch must be a JSON object")
            result = merge_patch(old, patch if type(patch) is dict else dict(patch))
        elif patch_type == "json":
            if not isinstance(patch, list | tuple):
                raise BadRequestError("json patch must be a JSON array of operations")
            try:
                ops = jsonpatch.JsonPatch(normalize_json(list(patch)))
                result = ops.apply(copy_json(old), in_place=True)
            except (jsonpatch.InvalidJsonPatch, TypeError, AttributeError) as e:
                raise BadRequestError(f"invalid json patch: {e}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise InvalidError(
                    f"the server rejected our request due to an error in our request: {e}"
                ) from None
            result = normalize_json(result)
        else:
            raise BadRequestError(
                f'unsupported patch type "{patch_type}": supported types are "merge", "json" and "strategic"'
            )
        if type(result) is not dict:
            raise BadRequestError("the patched object must be a JSON object")
        return result

    def _apply_update(self, rt: ResourceType, old: Obj, cand: Obj, *, status_only: bool) -> Obj:
        """Turn a candidate into the next stored version, commit it, return what is stored."""
        ometa = old["metadata"]
        cmeta = cand.get("metadata")
        if type(cmeta) is not dict:
            raise BadRequestError("metadata must be an object")
        name = ometa["name"]
        crv = cmeta.get("resourceVersion")
        if crv and crv != ometa["resourceVersion"]:
            raise ConflictError(
                f'Operation cannot be fulfilled on {rt.resource} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        kind = cand.get("kind")
        if kind is not None and kind != rt.kind:
            raise BadRequestError(f"kind {kind!r} does not match the resource {rt.resource}")
        for field in ("name", "namespace", "uid"):
            given = cmeta.get(field)
            if given and given != ometa.get(field, ""):
                raise InvalidError(
                    f'{rt.kind} "{name}" is invalid: metadata.{field}: Invalid value: "{given}": '
                    "field is immutable",
                    details={"name": name, "kind": rt.kind},
                )
        if status_only:
            result = dict(old)
            status = cand.get("status")
            if status is None:
                result.pop("status", None)
            else:
                result["status"] = status
            result["metadata"] = dict(ometa)
        else:
            result = dict(cand)
            result["apiVersion"] = rt.api_version
            result["kind"] = rt.kind
            meta = dict(cmeta)
            for f in _SERVER_META:
                if f in ometa:
                    meta[f] = ometa[f]
                else:
                    meta.pop(f, None)
            meta["name"] = name
            if "namespace" in ometa:
                meta["namespace"] = ometa["namespace"]
            else:
                meta.pop("namespace", None)
            meta["resourceVersion"] = ometa["resourceVersion"]
            meta.pop("selfLink", None)
            result["metadata"] = meta
            if rt.has_status_subresource:
                if "status" in old:
                    result["status"] = old["status"]
                else:
                    result.pop("status", None)
            self._validate_meta(rt, meta, ometa)
            if rt.gk == _CRD:
                self._validate_crd(result)
                if result["spec"] != old["spec"]:
                    result["status"] = self._crd_status(result)
            elif rt.gk == _NS and result.get("spec") != old.get("spec"):
                # spec.finalizers of a namespace only change through the namespace controller
                if "spec" in old:
                    result["spec"] = old["spec"]
                else:
                    result.pop("spec", None)
            if self._spec_changed(rt, old, result):
                meta["generation"] = int(ometa.get("generation") or 0) + 1
        if result == old:
            return old
        if (
            "deletionTimestamp" in ometa
            and ometa.get("deletionGracePeriodSeconds") == 0
            and self._finalized(rt, result)
        ):
            return self._commit_remove(rt, result, old)
        self._commit_put(rt, result, old)
        if rt.gk == _CRD and result["spec"] != old["spec"]:
            self._crd_register(result)
        return result

    @staticmethod
    def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
        skip_status = rt.has_status_subresource
        for k, v in new.items():
            if k in ("metadata", "apiVersion", "kind") or (skip_status and k == "status"):
                continue
            if old.get(k) != v:
                return True
        for k in old:
            if (
                k not in new
                and k not in ("metadata", "apiVersion", "kind")
                and not (skip_status and k == "status")
            ):
                return True
        return False

    @staticmethod
    def _finalized(rt: ResourceType, obj: Obj) -> bool:
        if obj["metadata"].get("finalizers"):
            return False
        return not (rt.gk == _NS and (obj.get("spec") or {}).get("finalizers"))

    # ------------------------------------------------------------------ bind

    def bind(
        self, namespace: str, name: str, node_name: str, *, annotations: Mapping[str, str] | None = None
    ) -> Obj:
        """The ``pods/binding`` subresource: assign a pod to a node (``spec.nodeName``, condition
        ``PodScheduled=True``), merging the binding's annotations into the pod."""
        try:
            rt = self._types_by_gk[_POD][0]
            old = self._lookup(rt, namespace, name)
            if _is_deleting(old):
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being '
                    "deleted, cannot be assigned to a host"
                )
            current = (old.get("spec") or {}).get("nodeName")
            if current or _pod_scheduled(old):
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already '
                    f'assigned to node "{current}"'
                )
            result = self._bind_result(old, node_name, annotations)
            self._commit_put(rt, result, old)
        except APIError as e:
            self._count("bind", e.code)
            raise
        self._count("bind", 201)
        out = self._out(result, rt)
        self._settle()
        return out

    def _bind_result(self, old: Obj, node_name: str, annotations: Mapping[str, str] | None) -> Obj:
        result = dict(old)
        meta = result["metadata"] = dict(old["metadata"])
        if annotations:
            merged = dict(meta.get("annotations") or {})
            merged.update({str(k): str(v) for k, v in annotations.items()})
            meta["annotations"] = merged
        spec = result["spec"] = dict(old.get("spec") or {})
        if node_name:
            spec["nodeName"] = node_name
        status = result["status"] = dict(old.get("status") or {})
        conds = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": self._ts(self._clock.now()),
            }
        )
        status["conditions"] = conds
        return result

    # ----------------------------------------------------------------- delete

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        api_version: str | None = None,
    ) -> Obj:
        """Delete an object; returns its last state (with ``deletionTimestamp`` if it lingers).

        ``propagation`` defaults to the kind's policy: ``Orphan`` for batch/v1 Jobs (as in
        Kubernetes), ``Background`` otherwise. Objects with finalizers stay (``deletionTimestamp``
        set) until their finalizers are removed. Running pods are deleted gracefully: they keep
        existing for ``grace_period_seconds`` (default ``spec.terminationGracePeriodSeconds``)
        until the kubelet removes them. ``preconditions`` may hold ``uid`` / ``resourceVersion``.
        """
        try:
            rt = self.resolve(kind, api_version)
            old = self._lookup(rt, self._ns_of(rt, namespace), name)
            if preconditions:
                self._check_preconditions(rt, old, preconditions)
            result, exists = self._delete_obj(rt, old, propagation, grace_period_seconds)
        except APIError as e:
            self._count("delete", e.code)
            raise
        self._count("delete", 202 if exists else 200)
        out = self._out(result, rt)
        self._settle()
        return out

    def delete_collection(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | Mapping[str, Any] | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        *,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
        api_version: str | None = None,
    ) -> Obj:
        """Delete every matching object; returns a List of their last states."""
        try:
            rt = self.resolve(kind, api_version)
            labels = compile_label_selector(label_selector)
            fields = compile_field_selector(field_selector)
            items = []
            for obj in self._select(rt, namespace, labels, fields):
                meta = obj["metadata"]
                current = self._stores[rt.gk].objects.get((meta.get("namespace", ""), meta["name"]))
                if current is None:
                    continue  # already removed by garbage collection of an earlier item
                result, _ = self._delete_obj(rt, current, propagation, grace_period_seconds)
                items.append(self._out(result, rt))
        except APIError as e:
            self._count("deletecollection", e.code)
            raise
        self._count("deletecollection", 200)
        self._settle()
        return {
            "apiVersion": rt.api_version,
            "kind": f"{rt.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _check_preconditions(self, rt: ResourceType, obj: Obj, pre: Mapping[str, str]) -> None:
        meta = obj["metadata"]
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want = pre.get(field)
            if want and want != meta.get(field):
                raise ConflictError(
                    f'Operation cannot be fulfilled on {rt.resource} "{meta["name"]}": Precondition '
                    f"failed: {label} in precondition: {want}, {label} in object meta: {meta.get(field)}",
                    details={"name": meta["name"], "group": rt.group, "kind": rt.plural},
                )

    def _default_propagation(self, rt: ResourceType, obj: Obj) -> str:
        fins = obj["metadata"].get("finalizers") or ()
        if ORPHAN_FINALIZER in fins:
            return "Orphan"
        if FOREGROUND_FINALIZER in fins:
            return "Foreground"
        if rt.gk == _JOB and rt.version == "v1":
            log.debug(
                "job %s deleted without propagationPolicy: its pods are orphaned", obj["metadata"]["name"]
            )
            return "Orphan"
        return "Background"

    def _delete_obj(
        self, rt: ResourceType, old: Obj, propagation: str | None, grace: int | None
    ) -> tuple[Obj, bool]:
        """Core delete. Returns (last state, still exists)."""
        if propagation is None:
            propagation = self._default_propagation(rt, old)
        elif propagation not in ("Background", "Foreground", "Orphan"):
            raise BadRequestError(f'invalid propagationPolicy "{propagation}"')
        ometa = old["metadata"]
        deleting = "deletionTimestamp" in ometa
        now = self._clock.now()
        if rt.gk == _NS:
            return self._delete_namespace(rt, old)
        if rt.gk == _POD:
            spec = old.get("spec") or {}
            g = grace if grace is not None else int(spec.get("terminationGracePeriodSeconds", 30))
            if g < 0:
                g = 1
            phase = (old.get("status") or {}).get("phase")
            if not _pod_scheduled(old) or phase in ("Succeeded", "Failed"):
                g = 0
            if (
                g == 0
                and deleting
                and ometa.get("finalizers")
                and ometa.get("deletionGracePeriodSeconds") != 0
            ):
                # the kubelet's final delete of a pod that finalizers keep around
                result = dict(old)
                meta = result["metadata"] = dict(ometa)
                meta["deletionGracePeriodSeconds"] = 0
                if parse_rfc3339(ometa["deletionTimestamp"]) > now:
                    meta["deletionTimestamp"] = self._ts(now)
                self._commit_put(rt, result, old)
                return result, True
            if g > 0:
                deadline = now + g
                if deleting:
                    current = parse_rfc3339(ometa["deletionTimestamp"])
                    if current <= deadline:
                        return old, True
                if propagation == "Orphan":
                    self._orphan_dependents(ometa["uid"])
                result = dict(old)
                meta = result["metadata"] = dict(ometa)
                meta["deletionTimestamp"] = self._ts(deadline)
                meta["deletionGracePeriodSeconds"] = g
                if not deleting:
                    meta["generation"] = int(meta.get("generation") or 0) + 1
                fins = list(meta.get("finalizers") or ())
                if (
                    propagation == "Foreground"
                    and FOREGROUND_FINALIZER not in fins
                    and self._dependents.get(ometa["uid"])
                ):
                    fins.append(FOREGROUND_FINALIZER)
                    meta["finalizers"] = fins
                self._commit_put(rt, result, old)
                if FOREGROUND_FINALIZER in fins:
                    self._start_foreground(ometa["uid"])
                return result, True
        if propagation == "Orphan":
            self._orphan_dependents(ometa["uid"])
        fins = list(ometa.get("finalizers") or ())
        foreground = False
        if propagation == "Foreground" and self._dependents.get(ometa["uid"]):
            foreground = True
            if FOREGROUND_FINALIZER not in fins:
                fins.append(FOREGROUND_FINALIZER)
        if fins:
            if deleting and fins == list(ometa.get("finalizers") or ()):
                if foreground:
                    self._start_foreground(ometa["uid"])
                return old, True
            result = dict(old)
            meta = result["metadata"] = dict(ometa)
            meta["finalizers"] = fins
            if not deleting:
                meta["deletionTimestamp"] = self._ts(now)
                meta["deletionGracePeriodSeconds"] = 0
                meta["generation"] = int(meta.get("generation") or 0) + 1
            if rt.gk == _CRD:
                self._crd_terminating(result)
            self._commit_put(rt, result, old)
            if foreground:
                self._start_foreground(ometa["uid"])
            if rt.gk == _CRD:
                self._gc_queue.append(("crd", ometa["name"]))
            return result, True
        return self._commit_remove(rt, old, old), False

    def _crd_terminating(self, crd: Obj) -> None:
        status = crd["status"] = dict(crd.get("status") or {})
        conds = [c for c in status.get("conditions") or () if c.get("type") != "Terminating"]
        conds.append(
            {
                "type": "Terminating",
                "status": "True",
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; "
                "CustomResource deletion will begin soon",
                "lastTransitionTime": self._ts(self._clock.now()),
            }
        )
        status["conditions"] = conds

    def _delete_namespace(self, rt: ResourceType, old: Obj) -> tuple[Obj, bool]:
        name = old["metadata"]["name"]
        if name in UNDELETABLE_NAMESPACES:
            raise ForbiddenError(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        if _is_deleting(old):
            return old, True
        result = dict(old)
        meta = result["metadata"] = dict(old["metadata"])
        meta["deletionTimestamp"] = self._ts(self._clock.now())
        meta["deletionGracePeriodSeconds"] = 0
        result["status"] = {**(old.get("status") or {}), "phase": "Terminating"}
        if self._finalized(rt, result):
            return self._commit_remove(rt, result, old), False
        self._commit_put(rt, result, old)
        self._gc_queue.append(("ns", name))
        return result, True

    def _orphan_dependents(self, owner_uid: str) -> None:
        for key in list(self._dependents.get(owner_uid, ())):
            dep = self._obj_at(key)
            if dep is None:
                continue
            refs = [r for r in dep["metadata"].get("ownerReferences") or () if r.get("uid") != owner_uid]
            self._set_owner_refs(key, dep, refs)

    def _set_owner_refs(self, key: Key, dep: Obj, refs: builtins.list[Obj]) -> None:
        rt = self._rt_of_key(key)
        result = dict(dep)
        meta = result["metadata"] = dict(dep["metadata"])
        if refs:
            meta["ownerReferences"] = refs
        else:
            meta.pop("ownerReferences", None)
        self._commit_put(rt, result, dep)

    def _start_foreground(self, owner_uid: str) -> None:
        for key in self._dependents.get(owner_uid, ()):
            self._gc_queue.append(("check", key))
        self._gc_queue.append(("fg", owner_uid))

    # ------------------------------------------------------- garbage collector

    def _run_gc(self) -> None:
        if self._gc_running:
            return
        self._gc_running = True
        try:
            queue = self._gc_queue
            while queue:
                op, arg = queue.popleft()
                try:
                    if op == "check":
                        self._gc_check(arg)
                    elif op == "fg":
                        self._gc_foreground(arg)
                    elif op == "ns":
                        self._gc_namespace(arg)
                    elif op == "crd":
                        self._gc_crd(arg)
                except APIError as e:  # pragma: no cover - defensive
                    log.warning("garbage collector: %s %s failed: %s", op, arg, e)
        finally:
            self._gc_running = False

    def _owner_state(self, dep_ns: str, ref: Obj) -> str:
        """``solid``, ``dangling`` or ``waiting`` (owner is deleting in the foreground)."""
        key = self._by_uid.get(ref.get("uid", ""))
        if key is None:
            return "dangling"
        owner = self._obj_at(key)
        if owner is None:
            return "dangling"
        owner_ns = key[1]
        if owner_ns and owner_ns != dep_ns:
            return "dangling"
        if owner["metadata"]["name"] != ref.get("name"):
            return "dangling"
        if "deletionTimestamp" in owner["metadata"] and FOREGROUND_FINALIZER in (
            owner["metadata"].get("finalizers") or ()
        ):
            return "waiting"
        return "solid"

    def _gc_check(self, key: Key) -> None:
        dep = self._obj_at(key)
        if dep is None:
            return
        refs = dep["metadata"].get("ownerReferences") or ()
        if not refs:
            return
        states = [self._owner_state(key[1], r) for r in refs]
        if "solid" in states:
            if len(set(states)) > 1:
                solid = [r for r, s in zip(refs, states, strict=True) if s == "solid"]
                self._set_owner_refs(key, dep, solid)
            return
        if _is_deleting(dep):
            return
        rt = self._rt_of_key(key)
        fins = dep["metadata"].get("finalizers") or ()
        if "waiting" in states and self._dependents.get(dep["metadata"]["uid"]):
            policy = "Foreground"
        elif ORPHAN_FINALIZER in fins:
            policy = "Orphan"
        elif FOREGROUND_FINALIZER in fins:
            policy = "Foreground"
        else:
            policy = "Background"
        self._delete_obj(rt, dep, policy, None)

    def _gc_foreground(self, owner_uid: str) -> None:
        key = self._by_uid.get(owner_uid)
        if key is None:
            return
        owner = self._obj_at(key)
        if owner is None:
            return
        ometa = owner["metadata"]
        fins = ometa.get("finalizers") or ()
        if "deletionTimestamp" not in ometa or FOREGROUND_FINALIZER not in fins:
            return
        for dkey in self._dependents.get(owner_uid, ()):
            dep = self._obj_at(dkey)
            if dep is None:
                continue
            for ref in dep["metadata"].get("ownerReferences") or ():
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        rt = self._rt_of_key(key)
        result = dict(owner)
        meta = result["metadata"] = dict(ometa)
        left = [f for f in fins if f != FOREGROUND_FINALIZER]
        if left:
            meta["finalizers"] = left
        else:
            meta.pop("finalizers", None)
        if self._finalized(rt, result):
            self._commit_remove(rt, result, owner)
        else:
            self._commit_put(rt, result, owner)

    def _gc_namespace(self, name: str) -> None:
        ns_obj = self._stores[_NS].objects.get(("", name))
        if ns_obj is None or not _is_deleting(ns_obj):
            return
        for rt in self._preferred_types():
            if not rt.namespaced:
                continue
            store = self._stores[rt.gk]
            for ns, obj_name in store.keys_sorted(name):
                obj = store.objects.get((ns, obj_name))
                if obj is not None and not _is_deleting(obj):
                    self._delete_obj(rt, obj, "Background", None)
        if self._ns_counts.get(name, 0) == 0:
            ns_obj = self._stores[_NS].objects[("", name)]
            rt = self._types_by_gk[_NS][0]
            result = dict(ns_obj)
            result["metadata"] = dict(ns_obj["metadata"])
            result["spec"] = {**(ns_obj.get("spec") or {}), "finalizers": []}
            if self._finalized(rt, result):
                self._commit_remove(rt, result, ns_obj)
            elif result != ns_obj:
                self._commit_put(rt, result, ns_obj)

    def _gc_crd(self, name: str) -> None:
        crd = self._stores[_CRD].objects.get(("", name))
        if crd is None or not _is_deleting(crd):
            return
        spec = crd["spec"]
        gk = f"{spec['names']['kind']}.{spec['group']}"
        types = self._types_by_gk.get(gk)
        store = self._stores.get(gk)
        if types and store is not None:
            rt = types[0]
            for k in list(store.keys_sorted(None)):
                obj = store.objects.get(k)
                if obj is not None and not _is_deleting(obj):
                    self._delete_obj(rt, obj, "Background", None)
            if store.objects:
                return
        fins = [f for f in crd["metadata"].get("finalizers") or () if f != CRD_CLEANUP_FINALIZER]
        rt = self._types_by_gk[_CRD][0]
        result = dict(crd)
        meta = result["metadata"] = dict(crd["metadata"])
        if fins:
            meta["finalizers"] = fins
            if result != crd:
                self._commit_put(rt, result, crd)
        else:
            meta.pop("finalizers", None)
            self._commit_remove(rt, result, crd)

    def _preferred_types(self) -> builtins.list[ResourceType]:
        """One type per group/kind (its preferred version), in registration order."""
        seen: dict[str, None] = {}
        for rt in self._types:
            seen.setdefault(rt.gk, None)
        return [self._types_by_gk[gk][0] for gk in seen]

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | Mapping[str, Any] | LabelSelector | None = None,
        resource_version: str | int | None = None,
        *,
        callback: WatchCallback,
        field_selector: str | FieldSelector | None = None,
        api_version: str | None = None,
        copy: bool = True,
    ) -> Watch:
        """Watch a kind. ``callback(event_type, obj)`` is called synchronously after each change.

        Like Kubernetes: with ``resource_version`` None/""/"0" the watch first delivers a
        synthetic ``ADDED`` for every existing matching object, then changes. With a specific
        resourceVersion it replays the changes after it from the history (410 :class:`GoneError`
        when that point was compacted away), then continues. With selectors, an object that starts
        (stops) matching is delivered as ``ADDED`` (``DELETED``).

        Each callback gets its own deep copy. ``copy=False`` hands out the stored object itself:
        faster, for trusted consumers (the simulated controllers) that never mutate it.
        """
        try:
            rt = self.resolve(kind, api_version)
            labels = compile_label_selector(label_selector)
            fields = compile_field_selector(field_selector)
            ns = namespace if (rt.namespaced and namespace) else None
            rv_text = "" if resource_version is None else str(resource_version)
            if rv_text in ("", "0"):
                initial: builtins.list[Event] = [
                    (self._rv, rt.gk, ADDED, o, None) for o in self._select(rt, ns, labels, fields)
                ]
                start = self._rv
            else:
                try:
                    since = int(rv_text)
                except ValueError:
                    raise BadRequestError(f'invalid resource version "{rv_text}"') from None
                if since < self._floor:
                    raise GoneError(f"too old resource version: {since} ({self._floor})")
                initial = [ev for ev in self._history if ev[0] > since and ev[1] == rt.gk]
                start = max(self._rv, since)
        except APIError as e:
            self._count("watch", e.code)
            raise
        self._count("watch", 200)
        w = Watch(
            self,
            rt=rt,
            namespace=ns,
            labels=labels,
            fields=fields,
            callback=callback,
            start_rv=start,
            copy=copy,
        )
        self._watchers.setdefault(rt.gk, []).append(w)
        first_error: BaseException | None = None
        for rv, _gk, etype, obj, old in initial:
            if w.stopped:
                break
            seen = w._translate(etype, obj, old)
            if seen is None:
                continue
            try:
                w._deliver(seen, obj, rv)
            except Exception as e:
                first_error = first_error or e
                self._callback_failed(w, e)
        w.resource_version = str(start)
        self._settle()
        if first_error is not None and self._raise_callback_errors:
            raise first_error
        return w

    def _remove_watch(self, w: Watch) -> None:
        watchers = self._watchers.get(w.resource_type.gk)
        if watchers is not None and w in watchers:
            watchers.remove(w)

    def _callback_failed(self, w: Watch, e: BaseException) -> None:
        self._callback_errors += 1
        log.error("watch callback for %s failed", w.resource_type.resource, exc_info=e)

    def _dispatch(self) -> None:
        if self._dispatching:
            return
        self._dispatching = True
        first_error: BaseException | None = None
        try:
            pending = self._pending
            while pending:
                rv, gk, etype, obj, old = pending.popleft()
                watchers = self._watchers.get(gk)
                if not watchers:
                    continue
                for w in tuple(watchers):
                    if w.stopped or rv <= w.start_rv:
                        continue
                    seen = w._translate(etype, obj, old)
                    if seen is None:
                        continue
                    try:
                        w._deliver(seen, obj, rv)
                    except Exception as e:
                        first_error = first_error or e
                        self._callback_failed(w, e)
        finally:
            self._dispatching = False
        if first_error is not None and self._raise_callback_errors:
            raise first_error

    def compact(self) -> None:
        """Drop the watch history (like an etcd compaction): older resourceVersions now get 410."""
        self._history.clear()
        self._floor = self._rv

    # ------------------------------------------------------------------- logs

    def set_log_provider(self, provider: LogProvider | None) -> None:
        """Install the function that produces container logs (the simulated kubelet does)."""
        self._log_provider = provider

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """The ``pods/log`` subresource: the current output of a pod's container."""
        try:
            rt = self._types_by_gk[_POD][0]
            obj = self._lookup(rt, namespace, pod)
            spec = obj.get("spec") or {}
            names = [c.get("name", "") for c in spec.get("containers") or ()]
            init_names = [c.get("name", "") for c in spec.get("initContainers") or ()]
            if container is None:
                if len(names) != 1:
                    msg = f"a container name must be specified for pod {pod}, choose one of: "
                    msg += f"[{' '.join(names)}]"
                    if init_names:
                        msg += f" or one of the init containers: [{' '.join(init_names)}]"
                    raise BadRequestError(msg)
                container = names[0]
            elif container not in names and container not in init_names:
                raise BadRequestError(f"container {container} is not valid for pod {pod}")
            text = self._log_provider(copy_json(obj), container) if self._log_provider else ""
        except APIError as e:
            self._count("logs", e.code)
            raise
        self._count("logs", 200)
        return text

    # ---------------------------------------------------------------- metrics

    def request_counts(self) -> dict[str, dict[str, int]]:
        """Requests served so far: ``{verb: {http code: count}}``."""
        out: dict[str, dict[str, int]] = {}
        for (verb, code), n in sorted(self._requests.items()):
            out.setdefault(verb, {})[str(code)] = n
        return out

    def object_counts(self) -> dict[str, int]:
        """Stored objects per resource (``pods``, ``jobs.batch``, ...), like apiserver_storage_objects."""
        out: dict[str, int] = {}
        for rt in self._preferred_types():
            out[rt.resource] = len(self._stores[rt.gk].objects)
        return out

    def metrics(self) -> dict[str, Any]:
        return {
            "requests": self.request_counts(),
            "objects": self.object_counts(),
            "resourceVersion": self._rv,
            "watches": sum(len(ws) for ws in self._watchers.values()),
            "historySize": len(self._history),
            "callbackErrors": self._callback_errors,
        }

    # ------------------------------------------------------- snapshot/restore

    def snapshot(self) -> dict[str, Any]:
        """The whole cluster state as JSON-serializable data (objects, counters, custom kinds)."""
        objects: builtins.list[Obj] = []
        for rt in self._preferred_types():
            store = self._stores[rt.gk]
            objects.extend(copy_json(store.objects[k]) for k in store.keys_sorted(None))
        get_state = getattr(self._uid_source, "get_state", None)
        return {
            "format": SNAPSHOT_FORMAT,
            "name": self.name,
            "resourceVersion": self._rv,
            "uidState": get_state() if callable(get_state) else None,
            "nameCounter": self._name_counter,
            "kinds": [rt.to_dict() for rt in self._custom_types],
            "objects": objects,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace the whole state with a :meth:`snapshot`. Running watches are stopped (like a
        restored etcd, the history starts empty: watching from an older resourceVersion gets 410)."""
        if data.get("format") != SNAPSHOT_FORMAT:
            raise BadRequestError(f"not a sim cluster snapshot (format {data.get('format')!r})")
        for watchers in list(self._watchers.values()):
            for w in list(watchers):
                w.stop()
        self._reset()
        for kd in data.get("kinds") or ():
            rt = ResourceType.from_dict(kd)
            self._custom_types.append(rt)
            self._add_type(rt)
        self._rebuild_names()
        objects = [normalize_json(o) for o in data.get("objects") or ()]
        crds = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
        for crd in crds:
            self._load(crd)
            self._crd_register(crd)
        for obj in objects:
            if obj.get("kind") != "CustomResourceDefinition":
                self._load(obj)
        self._rv = int(data.get("resourceVersion") or 0)
        self._floor = self._rv
        self._name_counter = int(data.get("nameCounter") or 0)
        set_state = getattr(self._uid_source, "set_state", None)
        if callable(set_state) and data.get("uidState") is not None:
            set_state(data["uidState"])
        self._gc_queue.clear()

    def _load(self, obj: Obj) -> None:
        rt = self._type_for_object(obj)
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if rt.namespaced else ""
        key = (rt.gk, ns, meta["name"])
        self._stores[rt.gk].insert(ns, meta["name"], obj)
        self._by_uid[meta["uid"]] = key
        if ns:
            self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        for ref in meta.get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), {})[key] = None
