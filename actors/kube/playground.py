"""The Playground over real clusters, through the official ``kubernetes`` client.

``KubePlayground({"default": ClusterConfig(kubeconfig=...), "parent": ClusterConfig(...)})``
implements :class:`actors.base.Playground` with the same semantics as the simulated one:

- ``create`` returns the existing object when it already exists (idempotent actors);
- ``get`` returns None for a missing object; ``delete`` returns True when the object is gone
  (NotFound included) and False while it is still terminating (finalizers, graceful deletion);
- cluster-scoped kinds ignore any namespace given (``create`` strips ``metadata.namespace``);
  namespaced kinds default to the ``default`` namespace, except ``list``/``watch`` where no
  namespace means all namespaces;
- errors are :class:`actors.kube.errors.KubeError` (an ``ActorError``) with a message naming the
  cluster, verb and object; 5xx, 429, timeouts and connection errors are ``transient`` and were
  already retried with backoff; 409 Conflict is never retried blindly;
- ``watch`` callbacks are called **from a background watch thread** (see
  :mod:`actors.kube.watch`); the engine's trigger queue is thread-safe.

Each cluster has its own ApiClient (never the global default configuration), DynamicClient,
discovery cache, token-bucket rate limiter and retry policy (:class:`ClusterConfig`). Requests
are counted by (cluster, verb, code) — :meth:`KubePlayground.request_counts` — and logged on the
``chaosflow.kube`` logger with structured ``extra`` fields.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from kubernetes.dynamic.resource import Resource

from actors.base import ActorError, WatchCallback
from actors.kube.client import CounterKey, KubeCluster, RequestCounters, decode
from actors.kube.config import ClusterConfig
from actors.kube.errors import KubeError
from actors.kube.watch import KubeWatch, WatchKey, WatchSubscription

log = logging.getLogger("chaosflow.kube")

T = TypeVar("T")
DEFAULT_NAMESPACE = "default"
LIST_PAGE_SIZE = 500
PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


def _what(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _object_404(e: KubeError) -> bool:
    """A 404 about the object itself (a Status naming it), as opposed to a path the server does
    not serve at all ("404 page not found": stale discovery, e.g. a CRD deleted since)."""
    if e.code != 404 or e.failure is None:
        return False
    status = e.failure.status
    return status is not None and bool((status.get("details") or {}).get("name"))


def _stale_resource(e: KubeError) -> bool:
    return e.code == 404 and not _object_404(e)


class KubePlayground:
    """Named real clusters behind the Playground protocol; see the module docstring.

    ``seed``/``rng`` drive the jitter of retry backoffs (deterministic by default); ``sleep`` and
    ``clock`` are injectable for tests. Call :meth:`close` (or use ``with``) to stop watches."""

    def __init__(
        self,
        clusters: Mapping[str, ClusterConfig],
        *,
        seed: int | str = 0,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not clusters:
            raise ActorError("KubePlayground needs at least one cluster")
        self._counters = RequestCounters()
        self._clusters: dict[str, KubeCluster] = {}
        for name, cfg in clusters.items():
            if not isinstance(cfg, ClusterConfig):
                raise ActorError(f'cluster "{name}": expected a ClusterConfig, got {type(cfg).__name__}')
            self._clusters[name] = KubeCluster(
                name,
                cfg,
                counters=self._counters,
                rng=rng if rng is not None else random.Random(f"{seed}:{name}"),
                sleep=sleep,
                clock=clock,
            )
        self._watches: dict[WatchKey, KubeWatch] = {}
        self._watch_lock = threading.Lock()
        for name, c in sorted(self._clusters.items()):
            log.info(
                "cluster %s: %s (qps=%s burst=%s)",
                name,
                c.host,
                c.config.qps,
                c.config.burst,
                extra={"cluster": name, "host": c.host},
            )

    # ------------------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stops every watch and closes the clients."""
        with self._watch_lock:
            watches = list(self._watches.values())
            self._watches.clear()
        for w in watches:
            w.stop()
        for c in self._clusters.values():
            c.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------ introspection

    def cluster(self, name: str) -> KubeCluster:
        """The clients of one named cluster (``api_client``, ``dynamic``, ``discovery``, ``limiter``)."""
        try:
            return self._clusters[name]
        except KeyError:
            known = ", ".join(sorted(self._clusters))
            raise ActorError(f'unknown cluster "{name}" (known: {known})') from None

    def request_counts(self) -> dict[CounterKey, int]:
        """HTTP requests so far by (cluster, verb, code); ``code`` is the status or ``error``.
        Verbs: get, list, create, patch, delete, logs, watch, discovery (retries count each)."""
        return self._counters.snapshot()

    def active_watches(self) -> list[KubeWatch]:
        with self._watch_lock:
            return list(self._watches.values())

    # ------------------------------------------------------------------------------ protocol

    def clusters(self) -> list[str]:
        return sorted(self._clusters)

    def namespaced(self, cluster: str, api_version: str, kind: str) -> bool:
        """From discovery. An unknown kind counts as namespaced (as in the sim); transient
        failures to reach the cluster raise."""
        try:
            return bool(self.cluster(cluster).resource(api_version, kind).namespaced)
        except KubeError as e:
            if e.transient:
                raise
            return True

    def create(self, cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
        c = self.cluster(cluster)
        if not isinstance(obj, dict):
            raise ActorError(f'cluster "{cluster}": create needs an object (dict), got {type(obj).__name__}')
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name and not meta.get("generateName"):
            raise KubeError(f'cluster "{cluster}": create {kind}: metadata.name is required', transient=False)

        def op(res: Resource) -> dict[str, Any]:
            body = copy.deepcopy(obj)
            body_meta = body.setdefault("metadata", {})
            ns: str | None = None
            if res.namespaced:
                ns = str(body_meta.get("namespace") or DEFAULT_NAMESPACE)
                body_meta["namespace"] = ns
            else:
                body_meta.pop("namespace", None)
            what = _what(kind, ns, name or f"{body_meta.get('generateName')}*")

            def post() -> dict[str, Any]:
                return self._doc(
                    c.call(
                        "create",
                        what,
                        lambda: c.dynamic.create(
                            res, body=body, namespace=ns, serialize=False, _request_timeout=c.timeout
                        ),
                    )
                )

            for _ in range(3):
                try:
                    return post()
                except KubeError as e:
                    if not (e.code == 409 and e.reason == "AlreadyExists" and name):
                        raise
                existing = self._get(c, res, ns, name, kind)
                if existing is not None:
                    log.debug(
                        "%s already exists on cluster %s",
                        what,
                        cluster,
                        extra=self._fields(c, "create", what),
                    )
                    return existing
                # Deleted between our POST and GET: create again.
            raise KubeError(
                f'cluster "{cluster}": create {what}: AlreadyExists, then NotFound, three times',
                transient=True,
            )

        return self._with_resource(c, api_version, kind, op)

    def get(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        c = self.cluster(cluster)
        return self._with_resource(
            c, api_version, kind, lambda res: self._get(c, res, self._ns(res, namespace), name, kind)
        )

    def list(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        c = self.cluster(cluster)

        def op(res: Resource) -> list[dict[str, Any]]:
            ns = namespace if res.namespaced and namespace else None
            what = f"{kind} in namespace {ns}" if ns else kind
            if label_selector:
                what += f" with labels {label_selector}"
            items: list[dict[str, Any]] = []
            token: str | None = None
            while True:

                def page(token: str | None = token) -> Any:
                    return c.dynamic.get(
                        res,
                        namespace=ns,
                        label_selector=label_selector or None,
                        limit=LIST_PAGE_SIZE,
                        _continue=token,
                        serialize=False,
                        _request_timeout=c.timeout,
                    )

                doc = self._doc(c.call("list", what, page))
                for item in doc.get("items") or []:
                    item.setdefault("apiVersion", api_version)
                    item.setdefault("kind", kind)
                    items.append(item)
                token = (doc.get("metadata") or {}).get("continue") or None
                if not token:
                    return items

        return self._with_resource(c, api_version, kind, op)

    def patch(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        """``merge`` (RFC 7386), ``json`` (RFC 6902, a list of operations) or ``strategic``
        (custom resources do not support it; they get a merge patch, as in the sim). A 409
        Conflict (e.g. a ``metadata.resourceVersion`` precondition) is raised, never retried."""
        c = self.cluster(cluster)
        if patch_type not in PATCH_CONTENT_TYPES:
            raise KubeError(
                f'cluster "{cluster}": patch {kind} {name}: unsupported patch type "{patch_type}": '
                'supported types are "merge", "json" and "strategic"',
                transient=False,
            )
        if patch_type == "json" and not isinstance(patch, list):
            raise KubeError(
                f'cluster "{cluster}": patch {kind} {name}: a json patch is a list of operations',
                transient=False,
            )
        if patch_type != "json" and not isinstance(patch, dict):
            raise KubeError(
                f'cluster "{cluster}": patch {kind} {name}: a {patch_type} patch is an object',
                transient=False,
            )

        def op(res: Resource) -> dict[str, Any]:
            ns = self._ns(res, namespace)
            what = _what(kind, ns, name)

            def send(content_type: str) -> dict[str, Any]:
                return self._doc(
                    c.call(
                        "patch",
                        what,
                        lambda: c.dynamic.patch(
                            res,
                            body=patch,
                            name=name,
                            namespace=ns,
                            content_type=content_type,
                            serialize=False,
                            _request_timeout=c.timeout,
                        ),
                        idempotent=patch_type != "json",
                    )
                )

            try:
                return send(PATCH_CONTENT_TYPES[patch_type])
            except KubeError as e:
                if patch_type == "strategic" and e.code == 415:
                    return send(PATCH_CONTENT_TYPES["merge"])
                raise

        return self._with_resource(c, api_version, kind, op)

    def delete(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Deletes with background propagation. True when the object is gone (or never was),
        False while it is still terminating (finalizers, graceful deletion)."""
        c = self.cluster(cluster)

        def op(res: Resource) -> bool:
            ns = self._ns(res, namespace)
            what = _what(kind, ns, name)
            try:
                doc = self._doc(
                    c.call(
                        "delete",
                        what,
                        lambda: c.dynamic.delete(
                            res,
                            name=name,
                            namespace=ns,
                            propagation_policy="Background",
                            serialize=False,
                            _request_timeout=c.timeout,
                        ),
                    )
                )
            except KubeError as e:
                if _object_404(e):
                    return True
                raise
            if doc.get("kind") == "Status":  # deleted at once
                return True
            # The object came back: deleted at once (its last state) or still terminating.
            uid = (doc.get("metadata") or {}).get("uid")
            current = self._get(c, res, ns, name, kind)
            if current is None:
                return True
            if uid and (current.get("metadata") or {}).get("uid") != uid:
                return True  # ours is gone; this is a new object of the same name
            log.debug("%s is terminating", what, extra=self._fields(c, "delete", what))
            return False

        return self._with_resource(c, api_version, kind, op)

    def logs(self, cluster: str, namespace: str, pod: str) -> str:
        """The pod's log (``pods/log``). As in the sim (and ``kubectl logs`` without ``-c``), a
        pod with several containers is a 400 error naming them."""
        c = self.cluster(cluster)

        def op(res: Resource) -> str:
            sub = res.subresources.get("log")
            path = (
                sub.path(name=pod, namespace=namespace)
                if sub is not None
                else res.path(pod, namespace) + "/log"
            )
            what = f"log of pod {namespace}/{pod}"
            resp = c.call(
                "logs",
                what,
                lambda: c.dynamic.request(
                    "get", path, header_params={"Accept": "*/*"}, serialize=False, _request_timeout=c.timeout
                ),
            )
            return bytes(resp.data or b"").decode("utf-8", errors="replace")

        return self._with_resource(c, "v1", "Pod", op)

    def watch(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, callback: WatchCallback
    ) -> WatchSubscription:
        """Subscribes ``callback(event_type, obj)`` to changes of a kind (in ``namespace``, or all
        namespaces when None). Every change after this returns is delivered, from the watch
        thread; objects that exist already are not announced (as in the sim). Watches of the
        same (cluster, apiVersion, kind, namespace) share one thread."""
        c = self.cluster(cluster)
        res = c.resource(api_version, kind)
        ns = namespace if res.namespaced else None
        key: WatchKey = (cluster, api_version, kind, ns)
        with self._watch_lock:
            w = self._watches.get(key)
            if w is not None and w.running:
                return w.subscribe(callback, self._unsubscribe)
            w = KubeWatch(c, res, api_version, kind, ns)
            sub = w.subscribe(callback, self._unsubscribe)
            w.start()
            self._watches[key] = w
            log.info(
                "watching %s", w.where, extra={"cluster": cluster, "apiVersion": api_version, "kind": kind}
            )
            return sub

    # ------------------------------------------------------------------------------ internals

    def _unsubscribe(self, sub: WatchSubscription) -> None:
        w = sub.watch
        with self._watch_lock:
            if w.unsubscribe(sub) > 0:
                return
            if self._watches.get(w.key) is w:
                del self._watches[w.key]
        w.stop()

    @staticmethod
    def _ns(res: Resource, namespace: str | None) -> str | None:
        if not res.namespaced:
            return None
        return namespace or DEFAULT_NAMESPACE

    @staticmethod
    def _doc(resp: Any) -> dict[str, Any]:
        doc = decode(resp)
        if not isinstance(doc, dict):
            raise KubeError(f"unexpected response: {str(doc)[:200]!r}", transient=False)
        return doc

    @staticmethod
    def _fields(c: KubeCluster, verb: str, what: str) -> dict[str, Any]:
        return {"cluster": c.name, "verb": verb, "target": what}

    def _get(
        self, c: KubeCluster, res: Resource, ns: str | None, name: str, kind: str
    ) -> dict[str, Any] | None:
        what = _what(kind, ns, name)
        try:
            return self._doc(
                c.call(
                    "get",
                    what,
                    lambda: c.dynamic.get(
                        res, name=name, namespace=ns, serialize=False, _request_timeout=c.timeout
                    ),
                )
            )
        except KubeError as e:
            if _object_404(e):
                return None
            raise

    def _with_resource(self, c: KubeCluster, api_version: str, kind: str, op: Callable[[Resource], T]) -> T:
        """Runs ``op`` on the kind's resource; when the server does not serve the resource's path
        any more (stale discovery), refreshes discovery and tries once more."""
        res = c.resource(api_version, kind)
        try:
            return op(res)
        except KubeError as e:
            if not _stale_resource(e):
                raise
            log.info(
                "cluster %s: %s %s not served any more, refreshing discovery",
                c.name,
                api_version,
                kind,
                extra={"cluster": c.name, "apiVersion": api_version, "kind": kind},
            )
            c.discovery.invalidate(api_version)
            return op(c.resource(api_version, kind))
