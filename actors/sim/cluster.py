"""``SimCluster``: one embedded simulated cluster — the API server plus its controllers."""

from __future__ import annotations

import logging
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.sim.apiserver import SimAPIServer
from actors.sim.controllers import (
    ChaosController,
    ChaosTiming,
    Controller,
    JobController,
    PodController,
    PodTiming,
)
from actors.sim.errors import BadRequestError
from engine.clock import Clock, TimerService

__all__ = ["SavedTimer", "SimCluster", "SimConfig", "restore_timers"]

#: a controller timer of a snapshot: (order, due, controller, key)
SavedTimer = tuple[int, float, Controller, Hashable]


def restore_timers(timers: list[SavedTimer]) -> None:
    """Schedule saved controller timers again in their original order (of all the clusters that
    are restored together, before their controllers start and re-derive the others): timers due
    at the same instant then fire in the same order as in the run the snapshot was taken of."""
    for _, due, controller, key in sorted(timers, key=lambda t: t[0]):
        controller.restore_timers([(due, key)])


log = logging.getLogger(__name__)

CLUSTER_SNAPSHOT_FORMAT = "chaosflow.io/sim-cluster-bundle/v1"


@dataclass(frozen=True)
class SimConfig:
    """Knobs of a simulated cluster (all times in seconds on the run's clock)."""

    pods: PodTiming = field(default_factory=PodTiming)
    chaos: ChaosTiming = field(default_factory=ChaosTiming)
    #: events kept for watch replay; older resourceVersions get 410 Gone
    history_size: int = 10_000
    #: re-raise exceptions from watch callbacks and controller timers (tests); else log them
    strict: bool = False


class SimCluster:
    """A named simulated cluster: :class:`SimAPIServer` + scheduler/kubelet, Job and Chaos Mesh
    controllers, all driven by ``timers`` (no threads).

    ``rng`` is the seeded random source of the chaos controller (target selection); by default
    it is seeded from the cluster name, so runs are reproducible. ``snapshot()`` returns the whole
    state as JSON-serializable data; ``restore(data)`` replaces the state and restarts the
    controllers, which re-derive their pending timers from the objects. The pending timers are
    saved too, with their order, and scheduled again first: work due at the same instant is then
    done in the same order as in the run the snapshot was taken of.
    """

    def __init__(
        self,
        name: str,
        clock: Clock,
        timers: TimerService,
        rng: random.Random | None = None,
        *,
        config: SimConfig | None = None,
        start: bool = True,
    ) -> None:
        self.name = name
        self.clock = clock
        self.timers = timers
        self.rng = rng if rng is not None else random.Random(f"chaosflow-sim/{name}")
        self.config = config or SimConfig()
        self.api = SimAPIServer(
            clock,
            name=name,
            history_size=self.config.history_size,
            raise_callback_errors=self.config.strict,
        )
        strict = self.config.strict
        self.pods = PodController(self.api, timers, timing=self.config.pods, strict=strict)
        self.jobs = JobController(self.api, timers, strict=strict)
        self.chaos = ChaosController(self.api, timers, self.rng, timing=self.config.chaos, strict=strict)
        self.controllers: list[Controller] = [self.pods, self.jobs, self.chaos]
        self.restored_timers: list[SavedTimer] = []  # of the last restore()
        if start:
            self.start()

    def start(self) -> None:
        """Start the controllers (idempotent)."""
        for c in self.controllers:
            c.start()

    def stop(self) -> None:
        """Stop the controllers; pending timers become no-ops."""
        for c in reversed(self.controllers):
            c.stop()

    @property
    def running(self) -> bool:
        return all(c.running for c in self.controllers)

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        return self.api.logs(namespace, pod, container)

    def snapshot(self) -> dict[str, Any]:
        """The cluster state (objects, counters, random state, controller state), JSON-serializable."""
        version, internal, gauss = self.rng.getstate()
        return {
            "format": CLUSTER_SNAPSHOT_FORMAT,
            "name": self.name,
            "api": self.api.snapshot(),
            "rng": [version, list(internal), gauss],
            "controllers": {c.name: c.state() for c in self.controllers},
            "timers": {c.name: c.pending_timers() for c in self.controllers},
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace the state with a :meth:`snapshot` and restart the controllers.

        The caller restores the clock first (to the snapshot's time or later): controllers then
        perform every transition that fell due in between, with the timestamps it would have had.
        """
        if data.get("format") != CLUSTER_SNAPSHOT_FORMAT:
            raise BadRequestError(f"not a sim cluster snapshot (format {data.get('format')!r})")
        was_running = any(c.running for c in self.controllers)
        self.stop()
        self.api.restore(data["api"])
        rng = data.get("rng")
        if rng:
            self.rng.setstate((int(rng[0]), tuple(int(x) for x in rng[1]), rng[2]))
        states = data.get("controllers") or {}
        for c in self.controllers:
            c.load_state(states.get(c.name) or {})
        self.restored_timers = self.saved_timers(data)
        if was_running:
            restore_timers(self.restored_timers)
            self.start()

    def saved_timers(self, data: Mapping[str, Any]) -> list[SavedTimer]:
        """The pending controller timers of a :meth:`snapshot` (with their order)."""
        by_name = {c.name: c for c in self.controllers}
        out: list[SavedTimer] = []
        for name, timers in (data.get("timers") or {}).items():
            c = by_name.get(name)
            if c is not None:
                out.extend(
                    (int(seq), float(due), c, tuple(key) if isinstance(key, list) else key)
                    for seq, due, key in timers
                )
        return out

    def __repr__(self) -> str:
        return f"SimCluster({self.name!r}, resourceVersion={self.api.resource_version()})"
