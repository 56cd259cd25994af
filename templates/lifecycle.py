"""Lifecycle: a template's retries and its exit handler, as a node around the attempts.

A node of a template that sets ``retryStrategy`` or ``onExit`` is created as a ``Lifecycle`` node
(an engine kind, not a ``templateType`` users write). Its children are the *attempts* — nodes of the
template's own kind, one per attempt, so every attempt has fresh object names and its own history
in the tree (as Argo's retry nodes) — followed by the *exit handler* node (marked ``exitFor``).

| event \\ phase     | Init                     | WaitingForChild (attempt)                     | Holding (backoff)      | WaitingForChild (exit handler) |
|-------------------|--------------------------|-----------------------------------------------|------------------------|--------------------------------|
| NodeCreated       | attempt 1 -> WaitingForChild | -                                         | -                      | -                              |
| ChildNodeSucceed  | -                        | outcome Succeed -> exit stage                 | -                      | finish with the outcome        |
| ChildNodeFailed   | -                        | retry: -> Holding (or next attempt at once); else outcome Failed -> exit stage | - | finish Failed, outcome message kept |
| NodeRetry         | -                        | -                                             | next attempt -> WaitingForChild | -                     |

Exit stage: with ``onExit`` (and no terminate) the handler runs, else the node finishes with the
outcome. A handler that fails fails the node; the outcome's message stays first in the message.

Stop (abort, deadline of a parent, a sibling's failure): in Init the node just finishes; during a
backoff wait it ends the wait at once; with an attempt running the attempt is stopped first. Then
the exit handler runs — unless the stop is a terminate (``StopRequest.cleanup`` False). A stop
that arrives while the exit handler runs lets it finish (it *is* the cleanup); a terminate stops it.

Retry policy — the root cause of a failed attempt is the deepest failed node of its subtree that
failed by itself (not ``ChildFailed`` / ``SiblingFailed`` / ``ParentStopped``):

* ``OnError``: the cause is an infrastructure error (:data:`ERROR_REASONS`: an actor call failed,
  the pod or object vanished, chaos cleanup failed);
* ``OnFailure`` (default): any other failure of the node itself — non-zero exit, chaos reporting
  failure, a failure condition, an expression or rendering error, the attempt's deadline;
* ``Always``: both. A stop (abort, terminate, the parent's deadline, a sibling's failure) is never
  retried.

Backoff: retry ``n`` (1-based) waits ``duration * factor**(n-1)`` (``duration`` may be a range,
drawn from the seeded source), at most ``cap``; no retry starts later than ``maxDuration`` after
the first attempt started. The template's ``deadline`` applies to each attempt; its
``parameters`` are evaluated once, on the Lifecycle node (each attempt renders its own fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.phases import (
    CreateChildren,
    Effect,
    Event,
    Notify,
    NotifyAt,
    StopChildren,
    StopReason,
    StopRequest,
    Transition,
)
from templates.base import IGNORED, CompositeMachine, E, P, finish, stop_state, stopping

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

KIND = "Lifecycle"

#: node reasons that mean "the engine or the cluster could not carry the node out" (OnError);
#: template kinds may add theirs
ERROR_REASONS: set[str] = {
    "ActionFailed",
    "ChaosCreateFailed",
    "ChaosCleanupFailed",
    "ObjectVanished",
    "PodVanished",
    "TaskPodFailed",
}
#: reasons of nodes that were stopped from outside: never retried, never a root cause
STOP_REASONS = frozenset({"Aborted", "ParentStopped", "SiblingFailed"})
_PASS_THROUGH = frozenset({"ChildFailed", "ParentStopped", "SiblingFailed"})


def needs_lifecycle(tmpl: Template) -> bool:
    return tmpl.retryStrategy is not None or tmpl.onExit is not None


def root_cause(run: WorkflowRun, node: Node) -> Node:
    """The deepest failed node under ``node`` that failed by itself (see the module docstring)."""
    nodes = run.nodes
    cur = node
    while cur.reason in _PASS_THROUGH or cur.kind == KIND:
        nxt = None
        for c in reversed(cur.children):
            child = nodes.get(c)
            if (
                child is not None
                and child.phase is P.FAILED
                and child.reason not in ("SiblingFailed", "ParentStopped")
            ):
                nxt = child
                break
        if nxt is None:
            break
        cur = nxt
    return cur


def failure_class(run: WorkflowRun, attempt: Node) -> str | None:
    """``"error"``, ``"failure"``, or None for a stop (never retried)."""
    if attempt.reason in STOP_REASONS:
        return None
    cause = root_cause(run, attempt)
    if cause.reason in STOP_REASONS:
        return None
    return "error" if cause.reason in ERROR_REASONS else "failure"


def retry_delay(run: WorkflowRun, node: Node, attempt: Node, now: float) -> float | None:
    """Seconds to wait before the next attempt, or None when the failure is final."""
    rs = run.template(node).retryStrategy
    if rs is None:
        return None
    retries = int(node.state.get("attempts", 1)) - 1
    if rs.limit is not None and retries >= rs.limit:
        return None
    cls = failure_class(run, attempt)
    if cls is None:
        return None
    if (rs.retryPolicy == "OnFailure" and cls != "failure") or (
        rs.retryPolicy == "OnError" and cls != "error"
    ):
        return None
    b = rs.backoff
    if b is None:
        return 0.0
    delay = run.draw(b.duration) * b.factor**retries
    if b.cap is not None:
        delay = min(delay, b.cap)
    if b.maxDuration is not None and now + delay - float(node.state.get("firstStart", now)) > b.maxDuration:
        return None
    return delay


def _outcome(status: str, message: str, reason: str | None, attempt: str | None) -> dict[str, Any]:
    return {"status": status, "message": message, "reason": reason, "node": attempt}


def _attempt_effect(node: Node, run: WorkflowRun, n: int) -> CreateChildren:
    state: dict[str, Any] = {}
    if "exitFor" in node.state:  # the attempts of an exit handler are exit handlers (deadline, env)
        state["exitFor"] = node.state["exitFor"]
    if run.template(node).retryStrategy is not None:
        state["attempt"] = n
    return CreateChildren((node.template,), state or None)


def _exit_stage(node: Node, run: WorkflowRun, outcome: dict[str, Any], handlers: bool) -> Transition:
    tmpl = run.template(node)
    if tmpl.onExit and handlers and not run.terminated:
        return Transition(
            P.WAITING_FOR_CHILD if node.phase is not P.WAITING_FOR_CHILD else None,
            [CreateChildren((tmpl.onExit,), {"exitFor": node.name})],
            state={"outcome": outcome, "exiting": True},
        )
    tr = _end(node, run, outcome, None)
    tr.state = {"outcome": outcome}
    return tr


def _end(node: Node, run: WorkflowRun, outcome: dict[str, Any], handler: Node | None) -> Transition:
    ok = outcome["status"] == "Succeed"
    msg: str = outcome["message"] or ""
    reason = outcome.get("reason")
    if handler is not None and handler.phase is P.FAILED:
        hm = f"exit handler {handler.name} failed" + (f": {handler.message}" if handler.message else "")
        msg = f"{msg}; {hm}" if msg else hm
        if ok:
            reason = "ExitHandlerFailed"
        ok = False
    tr = finish(ok, msg, reason)
    attempt = run.nodes.get(outcome.get("node") or "")
    if attempt is not None and attempt.outputs:
        tr.outputs = dict(attempt.outputs)  # nodes.<template>.outputs after the node ended
    return tr


def _attempt_outcome(node: Node, attempt: Node) -> dict[str, Any]:
    n = int(node.state.get("attempts", 1))
    if attempt.phase is P.SUCCEED:
        return _outcome("Succeed", attempt.message, attempt.reason, attempt.name)
    msg = attempt.message
    if n > 1:
        msg = f"failed after {n} attempts: {msg}" if msg else f"failed after {n} attempts"
    return _outcome("Failed", msg, attempt.reason, attempt.name)


def _stopped_outcome(req: StopRequest, attempt: str | None) -> dict[str, Any]:
    return _outcome("Succeed" if req.succeed else "Failed", req.message, req.reason.value, attempt)


def on_created(m: LifecycleMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return Transition(
        P.WAITING_FOR_CHILD, [_attempt_effect(node, run, 1)], state={"attempts": 1, "firstStart": now}
    )


def on_child(m: LifecycleMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if not node.children:
        return IGNORED
    child = run.nodes[node.children[-1]]
    if not child.phase.finished:
        return IGNORED  # a stale event (level-based: look at the last child)
    if node.state.get("exiting"):
        return _end(node, run, node.state["outcome"], child)
    req = stopping(node)
    if req is not None:
        outcome = (
            _attempt_outcome(node, child) if child.phase is P.SUCCEED else _stopped_outcome(req, child.name)
        )
        return _exit_stage(node, run, outcome, req.cleanup)
    if child.phase is P.FAILED:
        delay = retry_delay(run, node, child, now)
        if delay is not None:
            n = int(node.state.get("attempts", 1)) + 1
            if delay <= 0:
                return Transition(None, [_attempt_effect(node, run, n)], state={"attempts": n})
            at = now + delay
            return Transition(P.HOLDING, [NotifyAt(E.NODE_RETRY, at)], state={"retryAt": at})
    return _exit_stage(node, run, _attempt_outcome(node, child), True)


def on_retry(m: LifecycleMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    at = node.state.get("retryAt")
    if at is None or now < at:
        return IGNORED
    n = int(node.state.get("attempts", 1)) + 1
    return Transition(
        P.WAITING_FOR_CHILD, [_attempt_effect(node, run, n)], state={"attempts": n, "retryAt": None}
    )


class LifecycleMachine(CompositeMachine):
    kind = KIND
    phases = frozenset({P.INIT, P.WAITING_FOR_CHILD, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): on_child,
        (P.HOLDING, E.NODE_RETRY): on_retry,
    }

    @staticmethod
    def _arm_deadline(node: Node, run: WorkflowRun, now: float, tr: Transition) -> None:
        """The template's deadline applies to each attempt, not to the Lifecycle node."""

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        if node.phase is P.INIT:
            return super().stop(node, req, run, now)
        if node.phase is P.HOLDING:  # the backoff wait ends at once
            last = node.children[-1] if node.children else None
            tr = _exit_stage(node, run, _stopped_outcome(req, last), req.cleanup)
            tr.state = {**(tr.state or {}), **stop_state(req), "retryAt": None}
            return tr
        if node.state.get("exiting"):
            if req.cleanup:  # the exit handler is the cleanup: let it finish
                return Transition(None, [], state=stop_state(req))
            return self.escalate_handler(node, req)
        return super().stop(node, req, run, now)

    @staticmethod
    def escalate_handler(node: Node, req: StopRequest) -> Transition:
        child_req = StopRequest(StopReason.PARENT_STOPPED, f"parent {node.name}: {req.message}", False, False)
        return Transition(None, [StopChildren(child_req)], state=stop_state(req))

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        if node.phase is P.INIT:
            return [Notify(E.NODE_CREATED)]
        effects: list[Effect] = []
        if node.phase is P.HOLDING:
            effects.append(NotifyAt(E.NODE_RETRY, float(node.state.get("retryAt") or now)))
        elif node.phase is P.WAITING_FOR_CHILD and node.children:
            last = run.nodes[node.children[-1]]
            req = stopping(node)
            if not last.phase.finished:
                if req is not None and (not node.state.get("exiting") or not req.cleanup):
                    effects.append(
                        StopChildren(
                            StopRequest(StopReason.PARENT_STOPPED, req.message, req.succeed, req.cleanup)
                        )
                    )
            else:
                ev = E.CHILD_NODE_SUCCEED if last.phase is P.SUCCEED else E.CHILD_NODE_FAILED
                effects.append(Notify(ev, payload={"child": last.name}))
        return effects
