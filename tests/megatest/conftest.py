"""A megatest world (clusters "test" and "parent") + engine on the virtual clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actors.sim.playground import SimWorld
from actors.sim.rv import MegatestSim, build_megatest_world
from engine.clock import VirtualClock
from engine.manager import WorkflowManager
from engine.model import Workflow
from engine.runtime import WorkflowRun
from templates.library.megatest.builder import build_workflow
from templates.library.megatest.options import MegatestOptions
from templates.library.megatest.run import sim_world_spec
from triggers.operable import OperableTrigger

#: command-line flags: every goroutine and all chaos on, with chaos held most of the time (small
#: megatests in the cron and resume tests)
ALL_CHAOS_FLAGS = [
    "--log-level",
    "error",
    "--enable-pod-destroyer",
    "--enable-volume-replica-destroyer",
    "--enable-volume-replica-creator",
    "--enable-volume-resizer",
    "--enable-chaos-network-block",
    "--enable-chaos-network-degrade",
    "--enable-chaos-vm-reboot",
    "--chaos-period-min",
    "30s",
    "--chaos-period-max",
    "1m",
    "--chaos-incident-min",
    "1m",
    "--chaos-incident-max",
    "2m",
]
ALL = dict(
    enable_pod_destroyer=True,
    enable_volume_replica_destroyer=True,
    enable_volume_replica_creator=True,
    enable_volume_resizer=True,
    enable_chaos_network_block=True,
    enable_chaos_network_degrade=True,
    enable_chaos_vm_reboot=True,
)


@dataclass
class Env:
    clock: VirtualClock
    trigger: OperableTrigger
    world: SimWorld
    sim: MegatestSim
    manager: WorkflowManager
    options: MegatestOptions

    def pg(self) -> Any:
        return self.world.playground

    def run_entry(self, entry: str, seed: int = 1, **params: str) -> WorkflowRun:
        """Run one subtree of the megatest workflow (``entry``) with workflow parameters."""
        wf = build_workflow(self.options)
        spec = wf.spec.model_copy(
            update={
                "entry": entry,
                "deadline": None,
                "parameters": [
                    p.model_copy(update={"value": params.get(p.name, p.value)}) for p in wf.spec.parameters
                ],
            }
        )
        wf2 = Workflow.model_validate(
            {
                **wf.model_dump(mode="json", exclude_none=True, by_alias=True),
                "spec": spec.model_dump(mode="json", exclude_none=True, by_alias=True),
            }
        )
        wf2.metadata.name = f"t-{entry}-{seed}"
        run = self.manager.submit(wf2, seed=seed)
        self.manager.run()
        return run


def make_env(seed: int = 0, bugs: list[str] | None = None, **flags: Any) -> Env:
    o = MegatestOptions(storage_classes=["a", "b"], seed=seed, sim_bugs=bugs or [], **{**ALL, **flags})
    clock = VirtualClock()
    trigger = OperableTrigger(clock)
    world = SimWorld(clock, trigger, seed=seed)
    sim = build_megatest_world(world, sim_world_spec(o))
    mgr = WorkflowManager(world.playground, clock, trigger)
    return Env(clock, trigger, world, sim, mgr, o)


def ready_rv(env: Env, rv: str = "rv-1", sc: str = "a") -> None:
    """Create the RV with volume-create-rv and wait with volume-wait-ready (the megatest templates)."""
    for entry in ("volume-create-rv", "volume-wait-ready"):
        run = env.run_entry(entry, rv=rv, sc=sc)
        assert run.phase.value == "Succeed", run.message


def templates_run(run: WorkflowRun) -> list[str]:
    return [n.template for n in run.nodes.values()]


#: the injected quorum bug under frequent split-brains (seed 3): the checker must report it
SPLIT_BRAIN_BUG = MegatestOptions(
    storage_classes=["a", "b"],
    enable_chaos_network_block=True,
    chaos_period_min=30,
    chaos_period_max=60,
    chaos_incident_min=40,
    chaos_incident_max=60,
    max_volumes=4,
    duration=1200,
    seed=3,
    sim_bugs=["quorum_not_regained_after_split_brain"],
)
