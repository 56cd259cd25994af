"""Watch trigger: turns changes of observed cluster objects into NodeObjectChanged events.

A node asks to observe one object (``Observe`` effect). One watch per (cluster, apiVersion, kind)
is opened lazily through the Playground and fans changes out to the nodes observing that object.
On registration the current state is delivered at once (level-based), so a change that happened
before the watch was opened is never missed; node handlers are idempotent about repeats.

A node may also observe a *set* of objects (``ObserveKind``: a kind in a namespace, optionally a
label selector or a name). The trigger lists the set once, keeps it up to date from the same
per-kind watch, and whenever the set changes (an object matching it changes, appears or
disappears) delivers NodeObjectChanged with an ``ObservedLists`` payload holding every set the
node observes. Watch callbacks may come from other threads (real clusters): set observers are
guarded by a lock.

Registration talks to the API server (discovery, opening the watch, the first get or list). When
that fails (API server down, a 5xx, a lost connection) and a ``retry`` scheduler is given (the
manager passes its trigger's ``call_later``), the registration is retried with backoff (1 s
doubling to 30 s) instead of the error reaching the engine loop; the node waits meanwhile and its
own timeout or deadline bounds the wait. A retry is dropped once the node stopped observing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.base import ActorError
from engine.phases import Event, EventType, ObservedLists

if TYPE_CHECKING:
    from actors.base import Playground, WatchHandle

log = logging.getLogger("chaosflow.watch")

#: registration retry backoff (seconds): first delay, cap
RETRY_FIRST, RETRY_MAX = 1.0, 30.0

ObjKey = tuple[str, str, str, str | None, str]  # cluster, apiVersion, kind, namespace, name
KindKey = tuple[str, str, str]
SetKey = tuple[str, str, str]  # workflow, node, key


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class _ObservedSet:
    """One ObserveKind registration and its current members ((namespace, name) -> object)."""

    kind: KindKey
    namespace: str | None
    name: str | None
    selector: Any  # actors.sim.selectors.LabelSelector
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.name is not None and meta.get("name") != self.name:
            return False
        return bool(self.selector.matches(meta.get("labels")))

    def sorted_items(self) -> list[dict[str, Any]]:
        return [self.items[k] for k in sorted(self.items)]


RetryScheduler = Callable[[float, Callable[[], None]], None]


class ObjectWatchTrigger:
    def __init__(
        self, playground: Playground, notify: Callable[[Event], None], retry: RetryScheduler | None = None
    ) -> None:
        self._pg = playground
        self._notify = notify
        self._retry = retry
        #: (workflow, node) -> registrations waiting for a retry (their retry counts)
        self._retrying: dict[tuple[str, str], dict[tuple[Any, ...], int]] = {}
        self._watches: dict[KindKey, WatchHandle] = {}
        self._observers: dict[ObjKey, set[tuple[str, str]]] = {}
        self._by_node: dict[tuple[str, str], set[ObjKey]] = {}
        self._sets: dict[KindKey, dict[SetKey, _ObservedSet]] = {}
        self._sets_by_node: dict[tuple[str, str], dict[str, _ObservedSet]] = {}
        self._sets_lock = threading.RLock()

    def observe(
        self,
        workflow: str,
        node: str,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
    ) -> None:
        who = (workflow, node)
        try:
            ns = None if not self._pg.namespaced(cluster, api_version, kind) else namespace
            okey: ObjKey = (cluster, api_version, kind, ns, name)
            self._observers.setdefault(okey, set()).add(who)
            self._by_node.setdefault(who, set()).add(okey)
            kkey: KindKey = (cluster, api_version, kind)
            if kkey not in self._watches:
                self._watches[kkey] = self._pg.watch(cluster, api_version, kind, None, self._handler(kkey))
            obj = self._pg.get(cluster, api_version, kind, ns, name)
        except ActorError as e:
            args = (workflow, node, cluster, api_version, kind, namespace, name)
            self._schedule_retry(who, ("object", *args[2:]), self.observe, args, e)
            return
        self._notify(Event(workflow, node, EventType.NODE_OBJECT_CHANGED, obj))

    def _schedule_retry(
        self,
        who: tuple[str, str],
        rkey: tuple[Any, ...],
        fn: Callable[..., None],
        args: tuple[Any, ...],
        error: ActorError,
    ) -> None:
        """Registration failed: retry it later (backoff), or raise when no scheduler is given."""
        if self._retry is None:
            raise error
        pending = self._retrying.setdefault(who, {})
        attempt = pending.get(rkey, 0) + 1
        pending[rkey] = attempt
        delay = min(RETRY_MAX, RETRY_FIRST * 2 ** (attempt - 1))
        log.warning(
            "watch registration failed, retrying",
            extra={
                "workflow": who[0],
                "node": who[1],
                "what": list(map(str, rkey)),
                "error": str(error),
                "attempt": attempt,
                "retryIn": delay,
            },
        )

        def again() -> None:
            waiting = self._retrying.get(who)
            if waiting is None or rkey not in waiting:
                return  # the node stopped observing meanwhile
            fn(*args)
            still = self._retrying.get(who)
            if still is not None and still.get(rkey) == attempt:  # succeeded (no new failure)
                del still[rkey]
                if not still:
                    del self._retrying[who]

        self._retry(delay, again)

    def observe_kind(
        self,
        workflow: str,
        node: str,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        name: str | None,
        key: str,
    ) -> None:
        """Observe the objects of a kind matching (namespace, selector, name) as the set ``key``."""
        from actors.sim.selectors import compile_label_selector

        who = (workflow, node)
        kkey: KindKey = (cluster, api_version, kind)
        try:
            ns = None if not self._pg.namespaced(cluster, api_version, kind) else namespace
            oset = _ObservedSet(kkey, ns, name, compile_label_selector(label_selector or None))
            with self._sets_lock:
                if kkey not in self._watches:
                    self._watches[kkey] = self._pg.watch(
                        cluster, api_version, kind, None, self._handler(kkey)
                    )
                if name is not None:
                    obj = self._pg.get(cluster, api_version, kind, ns, name)
                    found = [obj] if obj is not None and oset.matches(obj) else []
                else:
                    found = [
                        o
                        for o in self._pg.list(cluster, api_version, kind, ns, label_selector or None)
                        if oset.matches(o)
                    ]
                for o in found:
                    meta = o.get("metadata") or {}
                    oset.items[(meta.get("namespace") or "", meta.get("name") or "")] = o
                self._sets.setdefault(kkey, {})[(workflow, node, key)] = oset
                self._sets_by_node.setdefault(who, {})[key] = oset
                payload = self._lists_of(who)
        except ActorError as e:
            args = (workflow, node, cluster, api_version, kind, namespace, label_selector, name, key)
            self._schedule_retry(who, ("set", key), self.observe_kind, args, e)
            return
        self._notify(Event(workflow, node, EventType.NODE_OBJECT_CHANGED, payload))

    def _lists_of(self, who: tuple[str, str]) -> ObservedLists:
        sets = self._sets_by_node.get(who) or {}
        return ObservedLists({k: sets[k].sorted_items() for k in sorted(sets)})

    def _on_set_event(self, kkey: KindKey, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        okey = (meta.get("namespace") or "", meta.get("name") or "")
        changed: set[tuple[str, str]] = set()
        with self._sets_lock:
            for (wf, node, _), oset in (self._sets.get(kkey) or {}).items():
                old = oset.items.get(okey)
                if event_type != "DELETED" and oset.matches(obj):
                    if old is not None and _rv(obj) and _rv(obj) < _rv(old):
                        continue  # older than what the set already holds (a watch replay)
                    oset.items[okey] = obj
                elif old is not None:
                    del oset.items[okey]
                else:
                    continue
                changed.add((wf, node))
            payloads = [(who, self._lists_of(who)) for who in sorted(changed)]
        for (wf, node), payload in payloads:
            self._notify(Event(wf, node, EventType.NODE_OBJECT_CHANGED, payload))

    def unobserve_node(self, workflow: str, node: str) -> None:
        if self._retrying:
            self._retrying.pop((workflow, node), None)
        if self._sets_by_node:
            with self._sets_lock:
                sets = self._sets_by_node.pop((workflow, node), None)
                for key, oset in (sets or {}).items():
                    by_kind = self._sets.get(oset.kind)
                    if by_kind is not None:
                        by_kind.pop((workflow, node, key), None)
                        if not by_kind:
                            del self._sets[oset.kind]
        keys = self._by_node.pop((workflow, node), None)
        if not keys:
            return
        for okey in keys:
            obs = self._observers.get(okey)
            if obs is not None:
                obs.discard((workflow, node))
                if not obs:
                    del self._observers[okey]

    def observed(self) -> int:
        return len(self._observers)

    def observed_sets(self) -> int:
        return sum(len(s) for s in self._sets.values())

    def _handler(self, kkey: KindKey) -> Callable[[str, dict[str, Any]], None]:
        cluster, api_version, kind = kkey

        def on_event(event_type: str, obj: dict[str, Any]) -> None:
            if self._sets:
                self._on_set_event(kkey, event_type, obj)
            meta = obj.get("metadata") or {}
            okey: ObjKey = (cluster, api_version, kind, meta.get("namespace"), meta.get("name", ""))
            obs = self._observers.get(okey)
            if not obs:
                return
            payload = None if event_type == "DELETED" else obj
            for wf, node in sorted(obs):
                self._notify(Event(wf, node, EventType.NODE_OBJECT_CHANGED, payload))

        return on_event

    def close(self) -> None:
        for h in self._watches.values():
            h.stop()
        self._watches.clear()
