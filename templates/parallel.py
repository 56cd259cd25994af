"""Parallel: start all children at once; succeed when all succeed.

A failed child stops its running siblings (their chaos is cleaned up) and then fails the
Parallel: fail-fast, never a silent success.

| event \\ phase           | Init                        | WaitingForSchedule                 | WaitingForChild |
|-------------------------|-----------------------------|------------------------------------|-----------------|
| NodeCreated             | -> WaitingForSchedule, pick | -                                  | -               |
| NodePickChildToSchedule | -                           | create all children -> WaitingForChild | -           |
| ChildNodeSucceed        | -                           | -                                  | all done: -> Succeed, tell parent |
| ChildNodeFailed         | -                           | -                                  | stop siblings; when none active: -> Failed, tell parent |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.phases import Event, NodePhase, Notify, Transition
from engine.schedulers import ParallelScheduler
from templates.base import IGNORED, CompositeMachine, E, P, create_children, finish, no_children_path

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun


def on_created(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return Transition(P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)])


def on_pick(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    children = ParallelScheduler.schedule_next(node, run)
    if not children:
        return finish(True)
    return Transition(P.WAITING_FOR_CHILD, [create_children(children)])


def on_child_succeed(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    if run.active_children(node):
        return IGNORED
    more = ParallelScheduler.schedule_next(node, run)  # children held back by a parallelism limit
    if more:
        return Transition(None, [create_children(more)])
    return finish(True)


def on_child_failed(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    failed = next((c for c in node.children if run.nodes[c].phase is NodePhase.FAILED), None)
    if failed is None:
        return IGNORED
    return m.fail_fast(node, run, failed)


class ParallelMachine(CompositeMachine):
    kind = "Parallel"
    phases = frozenset({P.INIT, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_succeed,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): on_child_failed,
    }

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        return no_children_path(tmpl)
