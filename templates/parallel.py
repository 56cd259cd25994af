"""Parallel: start all children at once; succeed when all succeed.

With ``parallelism: N`` at most N children run at once; the others start in order as running
ones succeed (a failure stops the running ones and starts no more).

With ``endWith: [template, ...]`` the first child of one of those templates that succeeds ends the
Parallel: the other active children are stopped (with cleanup; they end Succeed) and the Parallel
succeeds once they ended (megatest's volume-main: the lifetime timer ends the checker and the
attacher; the teardown ends the replica destroyer and creator).

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

from engine.phases import Event, NodePhase, StopChildren, StopReason, StopRequest, Transition
from engine.schedulers import ParallelScheduler
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
    stop_state,
)

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun


def on_pick(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    children = ParallelScheduler.schedule_next(node, run)
    if not children:
        return finish(True)
    return Transition(P.WAITING_FOR_CHILD, [create_children(children)])


def on_child_succeed(m: ParallelMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    active = run.active_children(node)
    end_with = run.template(node).endWith
    if end_with:
        ender = next(
            (
                c
                for c in node.children
                if run.nodes[c].template in end_with and run.nodes[c].phase is NodePhase.SUCCEED
            ),
            None,
        )
        if ender is not None:
            if not active:
                return finish(True, f"{ender} ended")
            req = StopRequest(StopReason.PARENT_STOPPED, f"{ender} ended", succeed=True)
            sib = StopRequest(StopReason.PARENT_STOPPED, f"sibling {ender} ended", succeed=True)
            return Transition(None, [StopChildren(sib)], state=stop_state(req))
    if active and not run.template(node).parallelism:
        return IGNORED
    more = ParallelScheduler.schedule_next(node, run)  # children held back by a parallelism limit
    if more:
        return Transition(None, [create_children(more)])
    if active:
        return IGNORED
    return finish(True)


class ParallelMachine(CompositeMachine):
    kind = "Parallel"
    phases = frozenset({P.INIT, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): created_then_pick,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_succeed,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): child_failed_fail_fast,
    }

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        issues = no_children_path(tmpl)
        for i, name in enumerate(tmpl.endWith or []):
            if name not in (tmpl.children or []):
                issues.append((("endWith", i), f"endWith {name!r} is not one of the children"))
        return issues
