"""Template kinds: one module per kind, each with its schema checks and its node state machine.

``machine_for(kind)`` returns the state machine of a templateType; ``known_kinds()`` lists them.
"""

from __future__ import annotations

from engine.model import CHAOS_MESH_KINDS
from templates.base import NodeMachine
from templates.chaos import ChaosMachine
from templates.lifecycle import LifecycleMachine
from templates.loop import LoopMachine
from templates.parallel import ParallelMachine
from templates.resource import ResourceMachine
from templates.serial import SerialMachine
from templates.statuscheck import StatusCheckMachine
from templates.suspend import SuspendMachine
from templates.switch import SwitchMachine
from templates.task import TaskMachine
from templates.wait import WaitMachine
from templates.workflow import WorkflowMachine

_chaos = ChaosMachine()
MACHINES: dict[str, NodeMachine] = {
    "Serial": SerialMachine(),
    "Parallel": ParallelMachine(),
    "Suspend": SuspendMachine(),
    "Task": TaskMachine(),
    "Chaos": _chaos,
    "Resource": ResourceMachine(),
    "Wait": WaitMachine(),
    "Loop": LoopMachine(),
    "Switch": SwitchMachine(),
    "StatusCheck": StatusCheckMachine(),
    "Workflow": WorkflowMachine(),
    **{kind: _chaos for kind in CHAOS_MESH_KINDS},
    # engine kinds (not a templateType users write): retries and exit handlers of any template
    "Lifecycle": LifecycleMachine(),
}
#: kinds the engine creates by itself; not accepted as templateType
ENGINE_KINDS = frozenset({"Lifecycle"})


def known_kinds() -> frozenset[str]:
    return frozenset(MACHINES) - ENGINE_KINDS


def machine_for(kind: str) -> NodeMachine:
    return MACHINES[kind]


__all__ = ["MACHINES", "NodeMachine", "known_kinds", "machine_for"]
