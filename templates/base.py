"""The common shape of a template kind's state machine.

A kind is a :class:`NodeMachine` subclass with a transition table ``{(phase, event): handler}``
that reads like the seed's tables. Cells that are not in the table are the seed's "-": the event
is ignored. Three things are handled here for every kind, so no kind can get them wrong:

* a deadline is armed when the node is created (``NotifyAt`` at ``now + deadline``);
* ``NodeDeadlineExceeded`` and ``NodeAbort`` call the kind's :meth:`NodeMachine.stop`, which must
  release whatever the node holds (chaos objects, pods, children) before the node finishes;
* events for finished nodes are ignored, so duplicate or late events are harmless;
* a terminate (``StopRequest.cleanup`` False) that arrives while a node is already stopping with
  cleanup escalates (:meth:`NodeMachine.escalate`): exit handlers still running are terminated too;
* exit handlers (nodes marked ``exitFor``) whose template sets no deadline get the workflow's
  ``onExitDeadline`` (default :data:`DEFAULT_EXIT_DEADLINE`).

Handlers are pure: they read the node and the run and return a :class:`Transition`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from engine.phases import (
    IGNORED,
    CreateChildren,
    Effect,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyAt,
    NotifyParent,
    StopChildren,
    StopReason,
    StopRequest,
    Transition,
)

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

Handler = Callable[[Any, "Node", Event, "WorkflowRun", float], Transition]

P = NodePhase
E = EventType

#: run-time limit of an exit handler whose template sets no deadline (spec.onExitDeadline overrides)
DEFAULT_EXIT_DEADLINE = 600.0


def deadline_of(node: Node, run: WorkflowRun) -> float | None:
    """The node's deadline: its template's, or for an exit handler the workflow's exit deadline."""
    d = run.template(node).deadline
    if d is None and "exitFor" in node.state:
        d = run.workflow.spec.onExitDeadline or DEFAULT_EXIT_DEADLINE
    return d


def stop_state(req: StopRequest) -> dict[str, Any]:
    from engine.runtime import stop_to_dict

    return {"stopping": stop_to_dict(req)}


def stopping(node: Node) -> StopRequest | None:
    d = node.state.get("stopping")
    if d is None:
        return None
    from engine.runtime import stop_from_dict

    return stop_from_dict(d)


def finish(succeed: bool, message: str = "", reason: str | None = None) -> Transition:
    """End the node and tell its parent (the seed's 'notify parent node (if exists)')."""
    if succeed:
        return Transition(P.SUCCEED, [NotifyParent(E.CHILD_NODE_SUCCEED)], message=message, reason=reason)
    return Transition(P.FAILED, [NotifyParent(E.CHILD_NODE_FAILED)], message=message, reason=reason)


def finish_stopped(req: StopRequest) -> Transition:
    return finish(req.succeed, req.message, req.reason.value)


class NodeMachine:
    kind: ClassVar[str]
    #: phases this kind can be in (the seed's "Available phase")
    phases: ClassVar[frozenset[NodePhase]]
    table: ClassVar[dict[tuple[NodePhase, EventType], Handler]]
    #: a leaf does work itself (a pod, chaos, a wait) and takes a slot of ``spec.parallelism``
    leaf: ClassVar[bool] = True

    def handle(self, node: Node, event: Event, run: WorkflowRun, now: float) -> Transition:
        if node.phase is P.SUCCEED or node.phase is P.FAILED:
            return IGNORED
        et = event.type
        if et is E.NODE_ABORT:
            cur = stopping(node)
            if cur is not None:
                req: StopRequest = event.payload
                if cur.cleanup and not req.cleanup:
                    return self.escalate(node, req, run, now)
                return IGNORED
            return self.stop(node, event.payload, run, now)
        if et is E.NODE_DEADLINE_EXCEEDED:
            deadline_at = node.state.get("deadlineAt")
            if deadline_at is None or now < deadline_at or stopping(node) is not None:
                return IGNORED
            tmpl = run.template(node)
            succeed = tmpl.onDeadline == "Succeed"
            d = deadline_of(node, run)
            req = StopRequest(
                StopReason.DEADLINE_EXCEEDED,
                f"deadline {d:g}s exceeded" if d else "deadline exceeded",
                succeed=succeed,
            )
            return self.stop(node, req, run, now)
        handler = self.table.get((node.phase, et))
        if handler is None:
            return IGNORED
        tr = handler(self, node, event, run, now)
        if et is E.NODE_CREATED and node.phase is P.INIT:
            self._arm_deadline(node, run, now, tr)
        return tr

    @staticmethod
    def _arm_deadline(node: Node, run: WorkflowRun, now: float, tr: Transition) -> None:
        deadline = run.template(node).deadline
        if deadline is None and "exitFor" in node.state:
            deadline = deadline_of(node, run)
        if deadline is None or tr.phase in (P.SUCCEED, P.FAILED):
            return
        at = now + deadline
        tr.state = {**(tr.state or {}), "deadlineAt": at}
        tr.effects.append(NotifyAt(E.NODE_DEADLINE_EXCEEDED, at))

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        """Release what the node holds and finish it as ``req`` says. Kinds override as needed."""
        return finish_stopped(req)

    def escalate(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        """A terminate arrived while the node is stopping with cleanup. Leaves are releasing
        what they hold already (chaos is always removed); nothing more to do."""
        return IGNORED

    def holds_slot(self, node: Node) -> bool:
        """Whether a started leaf still occupies a ``spec.parallelism`` slot."""
        return node.phase is not P.INIT and not node.phase.finished

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        """Effects that continue this node after a restart from its stored status (level-based)."""
        effects: list[Effect] = []
        if node.phase is P.INIT:
            effects.append(Notify(E.NODE_CREATED))
            return effects
        deadline_at = node.state.get("deadlineAt")
        if deadline_at is not None:
            effects.append(NotifyAt(E.NODE_DEADLINE_EXCEEDED, deadline_at))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        """Kind-specific checks: (path relative to the template, message) pairs."""
        return []


class CompositeMachine(NodeMachine):
    """Shared behaviour of kinds with children (Serial, Parallel, Task's branches)."""

    leaf = False

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        active = run.active_children(node)
        if not active:
            return finish_stopped(req)
        child_req = StopRequest(
            StopReason.PARENT_STOPPED, f"parent {node.name}: {req.message}", req.succeed, req.cleanup
        )
        return Transition(
            P.WAITING_FOR_CHILD if node.phase is not P.WAITING_FOR_CHILD else None,
            [StopChildren(child_req)],
            state=stop_state(req),
        )

    def escalate(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        """Terminate while stopping: pass it on to the active children (exit handlers among them)."""
        cur = stopping(node)
        assert cur is not None
        merged = StopRequest(cur.reason, cur.message, cur.succeed, cleanup=False)
        effects: list[Effect] = []
        if run.active_children(node):
            child_req = StopRequest(
                StopReason.PARENT_STOPPED, f"parent {node.name}: {req.message}", cur.succeed, cleanup=False
            )
            effects.append(StopChildren(child_req))
        return Transition(None, effects, state=stop_state(merged))

    @staticmethod
    def after_stop_progress(node: Node, run: WorkflowRun) -> Transition | None:
        """While stopping: finish once the last active child has finished, else wait."""
        req = stopping(node)
        if req is None:
            return None
        if run.active_children(node):
            return IGNORED
        return finish_stopped(req)

    @staticmethod
    def fail_fast(node: Node, run: WorkflowRun, failed_child: str) -> Transition:
        """A child failed: stop the others (with cleanup), then fail."""
        msg = f"child {failed_child} failed"
        child_msg = run.nodes[failed_child].message
        if child_msg:
            msg = f"{msg}: {child_msg}"
        active = run.active_children(node)
        if not active:
            return finish(False, msg, StopReason.CHILD_FAILED.value)
        req = StopRequest(StopReason.CHILD_FAILED, msg, succeed=False)
        sib = StopRequest(StopReason.SIBLING_FAILED, f"sibling {failed_child} failed", succeed=False)
        return Transition(None, [StopChildren(sib)], state=stop_state(req))

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is P.WAITING_FOR_SCHEDULE:
            effects.append(Notify(E.NODE_PICK_CHILD_TO_SCHEDULE))
        elif node.phase is P.WAITING_FOR_CHILD:
            req = stopping(node)
            if req is not None and run.active_children(node):
                effects.append(
                    StopChildren(
                        StopRequest(StopReason.PARENT_STOPPED, req.message, req.succeed, req.cleanup)
                    )
                )
            # re-deliver the outcome of children that finished before the crash (handlers are level-based)
            for c in node.children:
                ph = run.nodes[c].phase
                if ph is P.FAILED:
                    effects.append(Notify(E.CHILD_NODE_FAILED, payload={"child": c}))
                    break
            else:
                if node.children and not run.active_children(node):
                    effects.append(Notify(E.CHILD_NODE_SUCCEED, payload={"child": node.children[-1]}))
        return effects


def created_then_pick(m: Any, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    """NodeCreated of Serial and Parallel (the seed's table): -> WaitingForSchedule, pick a child."""
    return Transition(P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)])


def child_failed_fail_fast(m: Any, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    """ChildNodeFailed for kinds with children: while stopping, finish once none is active;
    otherwise stop the other children (with cleanup) and fail — never a silent success."""
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    failed = next((c for c in node.children if run.nodes[c].phase is P.FAILED), None)
    if failed is None:
        return IGNORED
    return CompositeMachine.fail_fast(node, run, failed)


def create_children(templates: list[str] | tuple[str, ...]) -> CreateChildren:
    return CreateChildren(tuple(templates))


def no_children_path(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
    if tmpl.children is None:
        return [(("children",), f"{tmpl.templateType} template needs children")]
    return []
