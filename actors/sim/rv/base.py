"""Shared plumbing of the replicated-volume world's controllers."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from actors.sim.apiserver import SimAPIServer
from actors.sim.controllers import Controller
from actors.sim.errors import ConflictError, NotFoundError
from actors.sim.rv.api import Obj, condition, parse_ts

log = logging.getLogger(__name__)

EPS = 1e-6
INF = math.inf


def deleting(obj: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in obj["metadata"]


def created_at(obj: Mapping[str, Any]) -> float:
    return parse_ts(obj["metadata"].get("creationTimestamp")) or 0.0


def creation_key(obj: Mapping[str, Any]) -> tuple[float, str]:
    """Sort key: creation time (parsed: RFC 3339 strings with and without fractions do not sort
    as text), then name."""
    return (created_at(obj), str(obj["metadata"].get("name") or ""))


def pod_ready_since(pod: Mapping[str, Any]) -> float | None:
    """When a running, non-terminating pod became Ready (None when it is not)."""
    if deleting(pod) or (pod.get("status") or {}).get("phase") != "Running":
        return None
    c = condition(pod, "Ready")
    if c is None or c.get("status") != "True":
        return None
    return parse_ts(c.get("lastTransitionTime")) or created_at(pod)


def finite(t: float) -> bool:
    return not (math.isinf(t) or math.isnan(t))


class WorldController(Controller):
    """A :class:`Controller` that may watch several API servers and starts level-based: every
    watch first fills the caches (initial ADDED events only queue keys), then the queue drains, so
    no reconcile ever runs on half-loaded caches (important after a restore)."""

    #: True while :meth:`start` opens the watches (caches are incomplete)
    _starting = False

    def start(self) -> None:
        if self.running:
            return
        self.running = True  # (stop() voided the timers of the previous run; restored ones stay)
        self._processing = True
        self._starting = True
        try:
            self._open_watches()
        finally:
            self._processing = False
            self._starting = False
        self._drain()

    def stop(self) -> None:
        super().stop()
        self._clear_caches()

    def _clear_caches(self) -> None:
        return None

    def _drain(self) -> None:
        if self._queue and not self._processing and self.running:
            key = next(iter(self._queue))
            del self._queue[key]
            self._enqueue(key)

    def _watch_on(
        self,
        api: SimAPIServer,
        kind: str,
        handler: Callable[[str, Obj], None],
        api_version: str,
        namespace: str | None = None,
    ) -> None:
        def callback(etype: str, obj: Obj) -> None:
            if not self.running:
                return
            try:
                handler(etype, obj)
            except (ConflictError, NotFoundError) as e:
                log.debug("%s: %s", self.name, e)

        self._watches.append(
            api.watch(kind, namespace, callback=callback, api_version=api_version, copy=False)
        )

    def _due(self, dues: list[float], key: Hashable) -> None:
        finite_dues = [d for d in dues if finite(d)]
        if finite_dues:
            self._at(min(finite_dues), key)
