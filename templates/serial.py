"""Serial: run children one after another; a failed child fails the Serial.

The seed's table (Init, WaitingForSchedule, WaitingForChild, Succeed, Failed):

| event \\ phase           | Init                        | WaitingForSchedule                   | WaitingForChild |
|-------------------------|-----------------------------|--------------------------------------|-----------------|
| NodeCreated             | -> WaitingForSchedule, pick | -                                    | -               |
| NodePickChildToSchedule | -                           | create next child -> WaitingForChild | -               |
| ChildNodeSucceed        | -                           | -                                    | next: -> WaitingForSchedule, pick; none left: -> Succeed, tell parent |
| ChildNodeFailed         | -                           | -                                    | -> Failed, tell parent |

An abort that arrives while the Serial is between two children is handled before the next pick,
so the next step never starts (Chaos Mesh #4286).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.phases import Event, Notify, Transition
from engine.schedulers import SerialScheduler
from templates.base import (
    IGNORED,
    CompositeMachine,
    E,
    P,
    child_failed_fail_fast,
    create_children,
    created_then_pick,
    finish,
    no_children_path,
)

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun


def on_pick(m: SerialMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    nxt = SerialScheduler.schedule_next(node, run)
    if not nxt:
        return finish(True)
    return Transition(P.WAITING_FOR_CHILD, [create_children(nxt)])


def on_child_succeed(m: SerialMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    if not node.children or not run.nodes[node.children[-1]].phase.finished:
        return IGNORED  # a duplicate or stale event (level-based: look at the children)
    if SerialScheduler.schedule_next(node, run):
        return Transition(P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)])
    return finish(True)


class SerialMachine(CompositeMachine):
    kind = "Serial"
    phases = frozenset({P.INIT, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): created_then_pick,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_succeed,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): child_failed_fail_fast,
    }

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        return no_children_path(tmpl)
