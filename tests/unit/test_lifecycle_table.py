"""The Lifecycle machine (retries + exit handler) cell by cell, pure: no engine, no cluster."""

from __future__ import annotations

from typing import Any

from engine.phases import (
    CreateChildren,
    EventType,
    NodePhase,
    NotifyAt,
    NotifyParent,
    StopChildren,
    StopReason,
    StopRequest,
)
from engine.runtime import Node, WorkflowRun
from templates.lifecycle import LifecycleMachine, failure_class, retry_delay, root_cause
from tests.helpers import add_child, run_with_node

E = EventType
P = NodePhase
M = LifecycleMachine()
NOW = 1000.0


def templates(**t_extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": "t", "templateType": "Suspend", "duration": "1s", **t_extra},
        {"name": "h", "templateType": "Suspend", "duration": "1s"},
    ]


def lifecycle(
    phase: str = "Init", state: dict[str, Any] | None = None, **t_extra: Any
) -> tuple[WorkflowRun, Node]:
    run, node = run_with_node(templates(**t_extra), "t", phase, state)
    node.kind = "Lifecycle"
    return run, node


def ev(t: EventType, payload: Any = None) -> Any:
    from engine.phases import Event

    return Event("default/wf", "t-0", t, payload)


def finished_attempt(
    run: WorkflowRun, node: Node, phase: str, reason: str | None = None, msg: str = ""
) -> Node:
    a = add_child(run, node, "t", phase)
    a.reason, a.message = reason, msg
    return a


def test_created_starts_attempt_one() -> None:
    run, node = lifecycle(retryStrategy={"limit": 1})
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD
    assert tr.effects == [CreateChildren(("t",), {"attempt": 1})]
    assert tr.state == {"attempts": 1, "firstStart": NOW}  # no deadline armed on the Lifecycle node


def test_failed_attempt_with_backoff_holds_then_retries() -> None:
    rs = {"limit": 2, "backoff": {"duration": "10s", "factor": 2}}
    run, node = lifecycle("WaitingForChild", {"attempts": 1, "firstStart": NOW}, retryStrategy=rs)
    finished_attempt(run, node, "Failed", "TaskFailed")
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW + 1)
    assert tr.phase is P.HOLDING and tr.effects == [NotifyAt(E.NODE_RETRY, NOW + 11)]
    node.phase, node.state["retryAt"] = P.HOLDING, NOW + 11
    assert M.handle(node, ev(E.NODE_RETRY), run, NOW + 5).effects == []  # a stale timer
    tr = M.handle(node, ev(E.NODE_RETRY), run, NOW + 11)
    assert tr.phase is P.WAITING_FOR_CHILD and tr.effects == [CreateChildren(("t",), {"attempt": 2})]


def test_success_without_on_exit_finishes_with_the_attempts_outputs() -> None:
    run, node = lifecycle("WaitingForChild", {"attempts": 1}, retryStrategy={"limit": 1})
    a = finished_attempt(run, node, "Succeed")
    a.outputs = {"x": 1}
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED and tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]
    assert tr.outputs == {"x": 1}


def test_outcome_then_exit_handler_then_end() -> None:
    run, node = lifecycle("WaitingForChild", {"attempts": 1}, onExit="h")
    finished_attempt(run, node, "Failed", "TaskFailed", "boom")
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is None and tr.effects == [CreateChildren(("h",), {"exitFor": "t-0"})]
    assert tr.state is not None and tr.state["outcome"]["status"] == "Failed" and tr.state["exiting"]
    node.state.update(tr.state)
    h = add_child(run, node, "h", "Failed")
    h.message = "cleanup broke"
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is P.FAILED and tr.message == "boom; exit handler h-2 failed: cleanup broke"
    assert tr.reason == "TaskFailed"


def test_stop_during_backoff_ends_at_once_and_runs_the_exit_handler() -> None:
    run, node = lifecycle(
        "Holding", {"attempts": 1, "retryAt": NOW + 60}, onExit="h", retryStrategy={"limit": 1}
    )
    finished_attempt(run, node, "Failed", "TaskFailed")
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "stop")), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD
    assert tr.effects == [CreateChildren(("h",), {"exitFor": "t-0"})]
    terminate = StopRequest(StopReason.ABORTED, "terminate", cleanup=False)
    run2, node2 = lifecycle(
        "Holding", {"attempts": 1, "retryAt": NOW + 60}, onExit="h", retryStrategy={"limit": 1}
    )
    tr = M.handle(node2, ev(E.NODE_ABORT, terminate), run2, NOW)
    assert tr.phase is P.FAILED and tr.message == "terminate"


def test_stop_while_the_exit_handler_runs_lets_it_finish_terminate_stops_it() -> None:
    run, node = lifecycle("WaitingForChild", {"attempts": 1, "exiting": True, "outcome": {}}, onExit="h")
    finished_attempt(run, node, "Succeed")
    add_child(run, node, "h", "Holding")
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "stop")), run, NOW)
    assert tr.effects == [] and tr.phase is None
    node.state.update(tr.state or {})
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "t", cleanup=False)), run, NOW)
    (eff,) = tr.effects
    assert isinstance(eff, StopChildren) and eff.request.cleanup is False  # escalated


def test_root_cause_and_failure_class() -> None:
    run, node = run_with_node(
        [
            {"name": "s", "templateType": "Serial", "children": ["t"]},
            {"name": "t", "templateType": "Suspend", "duration": "1s"},
        ],
        "s",
        "Failed",
    )
    node.reason = "ChildFailed"
    leaf = add_child(run, node, "t", "Failed")
    leaf.reason = "PodVanished"
    assert root_cause(run, node) is leaf
    assert failure_class(run, node) == "error"
    leaf.reason = "DeadlineExceeded"
    assert failure_class(run, node) == "failure"
    leaf.reason = "ParentStopped"
    node.reason = "Aborted"
    assert failure_class(run, node) is None


def test_retry_delay_respects_policy_limit_cap_and_max_duration() -> None:
    rs = {
        "limit": 5,
        "retryPolicy": "OnError",
        "backoff": {"duration": "10s", "factor": 3, "cap": "25s", "maxDuration": "60s"},
    }
    run, node = lifecycle("WaitingForChild", {"attempts": 2, "firstStart": NOW}, retryStrategy=rs)
    a = finished_attempt(run, node, "Failed", "TaskFailed")
    assert retry_delay(run, node, a, NOW + 20) is None  # OnError: a failure is not retried
    a.reason = "PodVanished"
    assert retry_delay(run, node, a, NOW + 20) == 25  # 10 * 3**1 = 30, capped
    assert retry_delay(run, node, a, NOW + 40) is None  # 40 + 25 > 60 after the first start
    node.state["attempts"] = 6
    assert retry_delay(run, node, a, NOW) is None  # limit 5 retries done
