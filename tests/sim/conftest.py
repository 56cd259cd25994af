"""A simulated cluster + virtual clock + engine, for whole-workflow tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from engine.manager import WorkflowManager
from engine.model import CHAOS_MESH_KINDS, Workflow
from engine.runtime import WorkflowRun
from triggers.operable import OperableTrigger


@dataclass
class Sim:
    clock: VirtualClock
    trigger: OperableTrigger
    world: SimWorld
    manager: WorkflowManager
    created: dict[str, int] = field(default_factory=dict)  # chaos objects ADDED, by name

    @property
    def api(self) -> Any:
        return self.world.clusters["default"].api

    def submit(self, wf: Workflow, seed: int | None = None) -> WorkflowRun:
        return self.manager.submit(wf, seed=seed)

    def at(self, offset: float, fn: Any) -> None:
        """Run ``fn`` at virtual time start + offset."""
        self.trigger.call_at(self.clock.now() + offset, fn)

    def run(self) -> None:
        self.manager.run()

    def chaos_objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for kind in [*CHAOS_MESH_KINDS]:
            out += self.api.list(kind, None, api_version="chaos-mesh.org/v1alpha1")["items"]
        return out

    def labelled(self, kind: str, api_version: str = "v1") -> list[dict[str, Any]]:
        return self.api.list(kind, None, "chaosflow.io/workflow", api_version=api_version)["items"]


def make_sim(seed: int = 0, world: bool = True) -> Sim:
    clock = VirtualClock()
    trigger = OperableTrigger(clock)
    w = SimWorld(clock, trigger, seed=seed)
    if world:
        w.load_world_file()
    mgr = WorkflowManager(w.playground, clock, trigger)
    sim = Sim(clock, trigger, w, mgr)

    def count(event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "ADDED":
            name = obj["metadata"]["name"]
            sim.created[name] = sim.created.get(name, 0) + 1

    for kind in CHAOS_MESH_KINDS:
        sim.api.watch(
            kind,
            None,
            resource_version=sim.api.resource_version(),
            callback=count,
            api_version="chaos-mesh.org/v1alpha1",
        )
    return sim


@pytest.fixture
def sim() -> Sim:
    return make_sim()
