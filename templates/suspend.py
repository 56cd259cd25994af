"""Suspend: wait for a duration (fixed or a range drawn from the workflow's seeded source).

| event \\ phase    | Init                                              | Holding                     |
|------------------|---------------------------------------------------|-----------------------------|
| NodeCreated      | -> Holding, notify NodeHoldingAwake after duration | -                           |
| NodeHoldingAwake | -                                                 | -> Succeed, tell parent     |
| NodeResume       | -                                                 | -> Succeed, tell parent     |

Abort or deadline while Holding ends the wait at once (Succeed when the deadline is a lifetime).
``manual: true`` without a duration is a manual approval (Argo's indefinite suspend): the node holds
until resumed (``chaosflow unsuspend``, NodeResume); a Suspend with a duration may be resumed early.
While the workflow (or an ancestor) is suspended, NodeHoldingAwake is held by the engine: the wait
keeps its due time and ends when the workflow continues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.phases import Effect, Event, NotifyAt, Transition
from templates.base import IGNORED, E, NodeMachine, P, finish

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun


def on_created(m: SuspendMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    tmpl = run.template(node)
    if tmpl.duration is None:  # manual: true (validated): wait until resumed
        return Transition(P.HOLDING, [], state={"manual": True})
    until = now + run.duration(node)
    return Transition(P.HOLDING, [NotifyAt(E.NODE_HOLDING_AWAKE, until)], state={"holdUntil": until})


def on_awake(m: SuspendMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if now < node.state.get("holdUntil", now):
        return IGNORED  # a stale timer (e.g. re-armed after resume)
    return finish(True)


def on_resume(m: SuspendMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return finish(True, "resumed" if node.state.get("manual") else "resumed before its duration ended")


class SuspendMachine(NodeMachine):
    kind = "Suspend"
    phases = frozenset({P.INIT, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.HOLDING, E.NODE_HOLDING_AWAKE): on_awake,
        (P.HOLDING, E.NODE_RESUME): on_resume,
    }

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is P.HOLDING and "holdUntil" in node.state:
            effects.append(NotifyAt(E.NODE_HOLDING_AWAKE, node.state["holdUntil"]))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        if tmpl.duration is None and not tmpl.manual:
            return [
                (("duration",), "Suspend template needs a duration (or manual: true to wait until resumed)")
            ]
        return []
