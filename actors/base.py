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


ACTIONS: dict[str, Actor] = {
    "object.create": _create,
    "object.delete": _delete,
    "task.collect": _task_collect,
}


def run_action(pg: Playground, action: str, params: dict[str, Any]) -> Any:
    try:
        fn = ACTIONS[action]
    except KeyError:
        raise ActorError(f"unknown action {action!r}") from None
    return fn(pg, params)
