"""Loop's transition table, cell by cell (pure: no I/O), plus stop, resume and validation."""

from __future__ import annotations

from typing import Any

import pytest

from engine.loader import load_workflows_text
from engine.phases import (
    IGNORED,
    CreateChildren,
    DropChildren,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyAt,
    NotifyParent,
    StopChildren,
    StopReason,
    StopRequest,
)
from engine.runtime import Node, WorkflowRun
from engine.validate import validate_workflow
from templates import machine_for
from templates.loop import MAX_INSTANT_ITERATIONS
from tests.helpers import add_child, run_with_node, workflow

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Loop")


def loop(**spec: Any) -> list[dict[str, Any]]:
    extra = {k: spec.pop(k) for k in ("deadline", "onDeadline") if k in spec}
    return [
        {"name": "l", "templateType": "Loop", "loop": {"child": "z", **spec}, **extra},
        {"name": "z", "templateType": "Suspend", "duration": "1s"},
    ]


def ev(t: EventType, payload: object = None) -> Event:
    return Event("default/wf", "l-0", t, payload)


def finished_child(run: WorkflowRun, node: Node, phase: str = "Succeed", took: float = 1.0) -> Node:
    child = add_child(run, node, "z", phase)
    child.start_time, child.finish_time = NOW - took, NOW
    run.latest[child.template] = child
    return child


PHASES = ["Init", "WaitingForSchedule", "WaitingForChild", "Holding", "Succeed", "Failed"]
EVENTS = [
    E.NODE_CREATED,
    E.NODE_PICK_CHILD_TO_SCHEDULE,
    E.CHILD_NODE_SUCCEED,
    E.CHILD_NODE_FAILED,
    E.NODE_HOLDING_AWAKE,
]
ACTIVE = {
    ("Init", E.NODE_CREATED),
    ("WaitingForSchedule", E.NODE_PICK_CHILD_TO_SCHEDULE),
    ("WaitingForChild", E.CHILD_NODE_SUCCEED),
    ("WaitingForChild", E.CHILD_NODE_FAILED),
    ("Holding", E.NODE_HOLDING_AWAKE),
}


@pytest.mark.parametrize(("phase", "event"), [(p, e) for p in PHASES for e in EVENTS if (p, e) not in ACTIVE])
def test_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(loop(count=3), "l", phase)
    assert M.handle(node, ev(event), run, NOW) is IGNORED


# --- Init ----------------------------------------------------------------------------------------
def test_created_goes_to_pick_with_zero_counts() -> None:
    run, node = run_with_node(loop(count=3), "l")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.WAITING_FOR_SCHEDULE
    assert tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]
    assert tr.outputs == {"iterations": 0, "succeeded": 0, "failed": 0}


def test_created_arms_the_deadline() -> None:
    run, node = run_with_node(loop(deadline="1m", onDeadline="Succeed"), "l")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    assert NotifyAt(E.NODE_DEADLINE_EXCEEDED, NOW + 60) in tr.effects


# --- WaitingForSchedule: pick ----------------------------------------------------------------------
def test_pick_starts_an_iteration() -> None:
    run, node = run_with_node(loop(count=3), "l", "WaitingForSchedule", {"started": 1})
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD
    assert tr.effects == [CreateChildren(("z",))]
    assert tr.state == {"started": 2, "index": 1, "lastPickAt": NOW, "instant": 0}


@pytest.mark.parametrize(
    ("spec", "started", "why"),
    [
        ({"count": 0}, 0, "count reached"),
        ({"count": 2}, 2, "count reached"),
        ({"maxIterations": 3}, 3, "max"),
    ],
)
def test_pick_at_the_limit_succeeds(spec: dict[str, Any], started: int, why: str) -> None:
    run, node = run_with_node(loop(**spec), "l", "WaitingForSchedule", {"started": started})
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.SUCCEED and why in (tr.message or "")
    assert tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]


def test_while_sees_the_index_of_the_next_iteration() -> None:
    run, node = run_with_node(
        loop(**{"while": "iteration.index < 2"}), "l", "WaitingForSchedule", {"started": 1}
    )
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD
    node.state["started"] = 2
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.SUCCEED and "no longer holds" in (tr.message or "")


def test_while_error_fails_with_the_message() -> None:
    run, node = run_with_node(loop(**{"while": "iteration.index < nope"}), "l", "WaitingForSchedule", {})
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError" and "nope" in (tr.message or "")


# --- WaitingForChild: an iteration ended --------------------------------------------------------
def test_iteration_done_picks_the_next() -> None:
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1, "index": 0})
    child = finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.WAITING_FOR_SCHEDULE
    assert tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]
    assert tr.state is not None and tr.state["counted"] == child.name and tr.state["succeeded"] == 1
    assert tr.outputs == {"iterations": 1, "succeeded": 1, "failed": 0}


def test_running_iteration_and_duplicates_are_ignored() -> None:
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1, "index": 0})
    add_child(run, node, "z", "Holding")
    assert M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW) is IGNORED
    run2, node2 = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1, "index": 0})
    child = finished_child(run2, node2)
    node2.state["counted"] = child.name
    assert M.handle(node2, ev(E.CHILD_NODE_SUCCEED), run2, NOW) is IGNORED


def test_last_counted_iteration_succeeds() -> None:
    run, node = run_with_node(
        loop(count=2), "l", "WaitingForChild", {"started": 2, "index": 1, "succeeded": 1}
    )
    finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED and tr.message == "2 iteration(s): count reached"
    assert tr.outputs == {"iterations": 2, "succeeded": 2, "failed": 0}


def test_until_sees_the_finished_iteration_and_its_node() -> None:
    until = 'iteration.number == 2 && nodes.z.phase == "Succeed"'
    run, node = run_with_node(loop(until=until), "l", "WaitingForChild", {"started": 1, "index": 0})
    finished_child(run, node)
    assert M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW).phase is P.WAITING_FOR_SCHEDULE
    run, node = run_with_node(loop(until=until), "l", "WaitingForChild", {"started": 2, "index": 1})
    finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED and "until" in (tr.message or "")


def test_until_error_fails() -> None:
    run, node = run_with_node(loop(until="iteration.index + 'x'"), "l", "WaitingForChild", {"started": 1})
    finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError"


def test_interval_holds_until_the_next_iteration() -> None:
    run, node = run_with_node(loop(count=3, interval="30s"), "l", "WaitingForChild", {"started": 1})
    finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.HOLDING
    assert tr.effects == [NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 30)]
    assert tr.state is not None and tr.state["nextAt"] == NOW + 30


def test_interval_range_is_drawn_from_the_seeded_source() -> None:
    def draw(seed: int) -> float:
        run, node = run_with_node(
            loop(count=3, interval={"min": "1s", "max": "1h"}), "l", "WaitingForChild", {"started": 1}
        )
        run.rng.seed(seed)
        finished_child(run, node)
        tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
        assert tr.state is not None
        return float(tr.state["nextAt"])

    assert draw(1) == draw(1) != draw(2)
    assert NOW + 1 <= draw(3) <= NOW + 3600


def test_failed_iteration_fails_the_loop() -> None:
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1, "index": 0})
    child = finished_child(run, node, "Failed")
    child.message = "boom"
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ChildFailed"
    assert tr.message == f"iteration 0 ({child.name}) failed: boom"
    assert tr.effects == [NotifyParent(E.CHILD_NODE_FAILED)]


def test_continue_on_failure_counts_and_goes_on() -> None:
    run, node = run_with_node(loop(count=3, continueOnFailure=True), "l", "WaitingForChild", {"started": 1})
    finished_child(run, node, "Failed")
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is P.WAITING_FOR_SCHEDULE
    assert tr.outputs == {"iterations": 1, "succeeded": 0, "failed": 1}


def test_history_limit_drops_the_oldest_finished_iterations() -> None:
    run, node = run_with_node(loop(count=10, historyLimit=2), "l", "WaitingForChild", {"started": 3})
    old = [finished_child(run, node) for _ in range(3)]
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert DropChildren((old[0].name,)) in tr.effects


def test_history_limit_zero_drops_every_finished_iteration_even_at_the_end() -> None:
    run, node = run_with_node(loop(count=1, historyLimit=0), "l", "WaitingForChild", {"started": 1})
    c = finished_child(run, node)
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED and DropChildren((c.name,)) in tr.effects


def test_unbounded_loop_of_instant_iterations_fails_instead_of_spinning() -> None:
    state = {"started": 5, "instant": MAX_INSTANT_ITERATIONS - 1, "lastPickAt": NOW}
    run, node = run_with_node(loop(deadline="1h"), "l", "WaitingForSchedule", state)
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "LoopSpinning"
    # time passed since the last iteration started: the streak restarts
    run, node = run_with_node(loop(deadline="1h"), "l", "WaitingForSchedule", state)
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW + 1)
    assert tr.phase is P.WAITING_FOR_CHILD and (tr.state or {})["instant"] == 0
    # with a count the loop ends by itself: no guard
    run, node = run_with_node(loop(count=10**9), "l", "WaitingForSchedule", state)
    assert M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW).phase is P.WAITING_FOR_CHILD


# --- Holding: the interval passed -------------------------------------------------------------
def test_awake_before_time_is_ignored_then_picks() -> None:
    run, node = run_with_node(loop(count=3, interval="30s"), "l", "Holding", {"nextAt": NOW + 5})
    assert M.handle(node, ev(E.NODE_HOLDING_AWAKE), run, NOW) is IGNORED
    tr = M.handle(node, ev(E.NODE_HOLDING_AWAKE), run, NOW + 5)
    assert tr.phase is P.WAITING_FOR_SCHEDULE and tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]


# --- stop --------------------------------------------------------------------------------------
ABORT = StopRequest(StopReason.ABORTED, "aborted by user")


def test_abort_stops_the_running_iteration_then_finishes() -> None:
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1, "index": 0})
    child = add_child(run, node, "z", "Holding")
    tr = M.handle(node, ev(E.NODE_ABORT, ABORT), run, NOW)
    assert tr.phase is None
    assert tr.effects == [StopChildren(StopRequest(StopReason.PARENT_STOPPED, "parent l-0: aborted by user"))]
    node.state.update(tr.state or {})
    child.phase = P.FAILED
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "Aborted"
    assert tr.outputs == {"iterations": 1, "succeeded": 0, "failed": 1}


@pytest.mark.parametrize("phase", ["WaitingForSchedule", "Holding", "Init"])
def test_abort_without_a_running_iteration_finishes_at_once(phase: str) -> None:
    run, node = run_with_node(loop(count=3), "l", phase, {"started": 1})
    tr = M.handle(node, ev(E.NODE_ABORT, ABORT), run, NOW)
    assert tr.phase is P.FAILED and tr.effects == [NotifyParent(E.CHILD_NODE_FAILED)]


def test_deadline_as_lifetime_succeeds_after_stopping_the_iteration() -> None:
    spec = loop(deadline="1m", onDeadline="Succeed")
    run, node = run_with_node(spec, "l", "WaitingForChild", {"started": 4, "index": 3, "deadlineAt": NOW})
    child = add_child(run, node, "z", "Holding")
    tr = M.handle(node, ev(E.NODE_DEADLINE_EXCEEDED), run, NOW)
    (stop,) = tr.effects
    assert isinstance(stop, StopChildren) and stop.request.succeed
    node.state.update(tr.state or {})
    child.phase = P.SUCCEED
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED and "deadline 60s exceeded" in (tr.message or "")


# --- resume ----------------------------------------------------------------------------------------
def test_resume_re_arms_timers_and_redelivers_outcomes() -> None:
    run, node = run_with_node(loop(count=3, interval="5s"), "l", "Holding", {"nextAt": NOW + 3})
    assert M.resume(node, run, NOW) == [NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 3)]
    run, node = run_with_node(loop(count=3), "l", "WaitingForSchedule", {"started": 1})
    assert M.resume(node, run, NOW) == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1})
    c = finished_child(run, node, "Failed")
    assert M.resume(node, run, NOW) == [Notify(E.CHILD_NODE_FAILED, payload={"child": c.name})]
    run, node = run_with_node(loop(count=3), "l", "WaitingForChild", {"started": 1})
    add_child(run, node, "z", "Holding")
    assert M.resume(node, run, NOW) == []


# --- validation --------------------------------------------------------------------------------------
def issues(templates: list[dict[str, Any]], **spec: Any) -> list[str]:
    return [str(i) for i in validate_workflow(workflow(templates, **spec), "wf.yaml")]


def test_a_loop_that_can_never_end_is_rejected() -> None:
    (msg,) = issues(loop())
    assert "spec.templates[0].loop" in msg and "can never end" in msg


@pytest.mark.parametrize(
    "bound",
    [{"count": 2}, {"until": "true"}, {"while": "false"}, {"maxIterations": 5}, {"deadline": "1h"}],
)
def test_any_bound_makes_a_loop_valid(bound: dict[str, Any]) -> None:
    assert issues(loop(**bound)) == []


def test_a_deadline_on_every_enclosing_path_or_the_workflow_bounds_the_loop() -> None:
    inner = loop()
    wrapped = [
        {
            "name": "p",
            "templateType": "Parallel",
            "children": ["l"],
            "deadline": "1h",
            "onDeadline": "Succeed",
        },
        *inner,
    ]
    assert issues(wrapped) == []
    assert issues(inner, deadline="10m") == []
    # reachable along a second path without a deadline: rejected
    two_paths = [
        {"name": "s", "templateType": "Serial", "children": ["p", "l"]},
        {"name": "p", "templateType": "Parallel", "children": ["l"], "deadline": "1h"},
        *inner,
    ]
    (msg,) = issues(two_paths)
    assert "can never end" in msg


def test_an_exit_handler_loop_is_bounded_by_the_exit_deadline() -> None:
    templates = [{"name": "main", "templateType": "Suspend", "duration": "1s", "onExit": "l"}, *loop()]
    assert issues(templates) == []
    assert issues([{"name": "main", "templateType": "Suspend", "duration": "1s"}, *loop()], onExit="l") == []


def test_validation_of_fields() -> None:
    bad = [
        {"name": "l", "templateType": "Loop", "loop": {"child": "nope", "count": 1, "until": "1 +"}},
    ]
    found = issues(bad)
    assert any("loop.until" in m and "invalid expression" in m for m in found)
    assert any('loop.child: unknown template "nope"' in m for m in found)
    found = issues([{"name": "l", "templateType": "Loop"}])
    assert found == ["wf.yaml: spec.templates[0].loop: Loop template needs loop.child"]


def test_while_is_written_and_printed_as_while() -> None:
    text = """
apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata: {name: w}
spec:
  entry: l
  templates:
    - {name: l, templateType: Loop, loop: {child: z, while: "iteration.index < 3"}}
    - {name: z, templateType: Suspend, duration: 1s}
"""
    (wf,) = load_workflows_text(text.encode(), "w.yaml")
    assert wf.spec.templates[0].loop is not None and wf.spec.templates[0].loop.while_ == "iteration.index < 3"
    dumped = wf.model_dump(mode="json", exclude_none=True)
    assert dumped["spec"]["templates"][0]["loop"]["while"] == "iteration.index < 3"
