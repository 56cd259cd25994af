"""Actor and Playground protocols and the core actors (object create/delete, task result)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

WatchCallback = Callable[[str, dict[str, Any]], None]


class ActorError(Exception):
    """An actor failed; ``transient`` errors may be retried by the caller."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class WatchHandle(Protocol):
    def stop(self) -> None: ...


class Playground(Protocol):
    """Operations on named clusters. Objects are unstructured dicts."""

    def clusters(self) -> list[str]: ...

    def namespaced(self, cluster: str, api_version: str, kind: str) -> bool:
        """Whether the kind is namespaced (cluster-scoped objects ignore any namespace given)."""
        ...

    def create(self, cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``; if it already exists return the existing object (idempotent)."""
        ...

    def get(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    def list(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def patch(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
    ) -> dict[str, Any]: ...

    def delete(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete; returns True when the object is gone, False while it is still terminating."""
        ...

    def logs(self, cluster: str, namespace: str, pod: str) -> str: ...

    def watch(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, callback: WatchCallback
    ) -> WatchHandle:
        """Call ``callback(event_type, obj)`` for every change of objects of this kind."""
        ...


Actor = Callable[[Playground, dict[str, Any]], Any]


def _create(pg: Playground, p: dict[str, Any]) -> Any:
    return pg.create(p["cluster"], p["object"])


def _delete(pg: Playground, p: dict[str, Any]) -> Any:
    gone = pg.delete(p["cluster"], p["apiVersion"], p["kind"], p.get("namespace"), p["name"])
    return {"gone": gone}


def _task_collect(pg: Playground, p: dict[str, Any]) -> Any:
    pod = pg.get(p["cluster"], "v1", "Pod", p["namespace"], p["name"])
    if pod is None:
        raise ActorError(f"task pod {p['namespace']}/{p['name']} not found")
    exit_code = 0
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            exit_code = int(term.get("exitCode", 0))
            break
    else:
        if (pod.get("status") or {}).get("phase") == "Failed":
            exit_code = 1
    stdout = pg.logs(p["cluster"], p["namespace"], p["name"])
    return {"exitCode": exit_code, "stdout": stdout}


def _contains(actual: Any, desired: Any) -> bool:
    """Whether ``actual`` already has every field of ``desired`` (maps compared key by key)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(_contains(actual.get(k), v) for k, v in desired.items())
    return bool(actual == desired)


def _apply(pg: Playground, p: dict[str, Any]) -> Any:
    """Create the object, or merge-patch the existing one with it (like ``kubectl apply``, without
    the last-applied bookkeeping: fields absent from the manifest are left as they are)."""
    obj = p["object"]
    meta = obj.get("metadata") or {}
    cluster, api_version, kind = p["cluster"], obj["apiVersion"], obj["kind"]
    ns, name = meta.get("namespace"), meta["name"]
    patch = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    meta_patch = {k: v for k, v in meta.items() if k not in ("name", "namespace")}
    if meta_patch:
        patch["metadata"] = meta_patch
    current = pg.get(cluster, api_version, kind, ns, name)
    if current is None:
        current = pg.create(cluster, obj)  # an object created meanwhile comes back as it is
    if _contains(current, patch):
        return current
    return pg.patch(cluster, api_version, kind, ns, name, patch, "merge")


def _patch(pg: Playground, p: dict[str, Any]) -> Any:
    return pg.patch(
        p["cluster"],
        p["apiVersion"],
        p["kind"],
        p.get("namespace"),
        p["name"],
        p["patch"],
        p.get("patchType", "merge"),
    )


def _chaos_inject(pg: Playground, p: dict[str, Any]) -> Any:
    from actors.chaos_registry import chaos_inject

    return chaos_inject(pg, p)


def _chaos_recover(pg: Playground, p: dict[str, Any]) -> Any:
    from actors.chaos_registry import chaos_recover

    return chaos_recover(pg, p)


def _probe_http(pg: Playground, p: dict[str, Any]) -> Any:
    from actors.probe import probe_http

    return probe_http(pg, p)


ACTIONS: dict[str, Actor] = {
    "object.create": _create,
    "object.apply": _apply,
    "object.patch": _patch,
    "object.delete": _delete,
    "task.collect": _task_collect,
    "chaos.inject": _chaos_inject,  # named chaos actors (actors/chaos_registry.py)
    "chaos.recover": _chaos_recover,
    "probe.http": _probe_http,  # StatusCheck HTTP probes (actors/probe.py)
}


def run_action(pg: Playground, action: str, params: dict[str, Any]) -> Any:
    try:
        fn = ACTIONS[action]
    except KeyError:
        raise ActorError(f"unknown action {action!r}") from None
    return fn(pg, params)
