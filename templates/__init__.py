"""Template kinds: one module per kind, each with its schema checks and its node state machine.

``machine_for(kind)`` returns the state machine of a templateType; ``known_kinds()`` lists them.
"""

from __future__ import annotations

from engine.model import CHAOS_MESH_KINDS
from templates.base import NodeMachine
from templates.chaos import ChaosMachine
from templates.parallel import ParallelMachine
from templates.serial import SerialMachine
from templates.suspend import SuspendMachine
from templates.task import TaskMachine

_chaos = ChaosMachine()
MACHINES: dict[str, NodeMachine] = {
    "Serial": SerialMachine(),
    "Parallel": ParallelMachine(),
    "Suspend": SuspendMachine(),
    "Task": TaskMachine(),
    "Chaos": _chaos,
    **{kind: _chaos for kind in CHAOS_MESH_KINDS},
}


def known_kinds() -> frozenset[str]:
    return frozenset(MACHINES)


def machine_for(kind: str) -> NodeMachine:
    return MACHINES[kind]


__all__ = ["MACHINES", "NodeMachine", "known_kinds", "machine_for"]
