"""Switch's transition table, cell by cell (pure: no I/O), plus the weighted draw and validation."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from engine.phases import (
    IGNORED,
    CreateChildren,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyParent,
    StopChildren,
    StopReason,
    StopRequest,
)
from engine.runtime import Node, WorkflowRun
from engine.validate import validate_workflow
from templates import machine_for
from templates.switch import SwitchWeight, draw_weighted
from tests.helpers import add_child, run_with_node, workflow

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Switch")


def switch(**spec: Any) -> list[dict[str, Any]]:
    return [
        {"name": "sw", "templateType": "Switch", "switch": spec},
        {"name": "a", "templateType": "Suspend", "duration": "1s"},
        {"name": "b", "templateType": "Suspend", "duration": "1s"},
        {"name": "c", "templateType": "Suspend", "duration": "1s"},
    ]


CASES = {
    "cases": [
        {"when": "workflow.name == 'nope'", "target": "a"},
        {"when": "node.template == 'sw'", "target": "b"},
        {"when": "true", "target": "c"},
    ]
}


def ev(t: EventType, payload: object = None) -> Event:
    return Event("default/wf", "sw-0", t, payload)


PHASES = ["Init", "Evaluating", "WaitingForSchedule", "WaitingForChild", "Succeed", "Failed"]
EVENTS = [
    E.NODE_CREATED,
    E.NODE_EVALUATE,
    E.NODE_PICK_CHILD_TO_SCHEDULE,
    E.CHILD_NODE_SUCCEED,
    E.CHILD_NODE_FAILED,
]
ACTIVE = {
    ("Init", E.NODE_CREATED),
    ("Evaluating", E.NODE_EVALUATE),
    ("WaitingForSchedule", E.NODE_PICK_CHILD_TO_SCHEDULE),
    ("WaitingForChild", E.CHILD_NODE_SUCCEED),
    ("WaitingForChild", E.CHILD_NODE_FAILED),
}


@pytest.mark.parametrize(("phase", "event"), [(p, e) for p in PHASES for e in EVENTS if (p, e) not in ACTIVE])
def test_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(switch(**CASES), "sw", phase)
    assert M.handle(node, ev(event), run, NOW) is IGNORED


def test_created_evaluates() -> None:
    run, node = run_with_node(switch(**CASES), "sw")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.EVALUATING and tr.effects == [Notify(E.NODE_EVALUATE)]


def evaluate(spec: dict[str, Any], seed: int = 0) -> tuple[WorkflowRun, Node, Any]:
    run, node = run_with_node(switch(**spec), "sw", "Evaluating")
    run.rng.seed(seed)
    return run, node, M.handle(node, ev(E.NODE_EVALUATE), run, NOW)


def test_first_true_case_wins() -> None:
    _, _, tr = evaluate(CASES)
    assert tr.phase is P.WAITING_FOR_SCHEDULE and tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]
    assert tr.state == {"selected": ["b"]}
    assert tr.outputs == {
        "selected": ["b"],
        "target": "b",
        "cases": [{"target": "a", "result": False}, {"target": "b", "result": True}],
    }


def test_mode_all_runs_every_true_case() -> None:
    _, _, tr = evaluate({**CASES, "mode": "all"})
    assert tr.state == {"selected": ["b", "c"]}
    assert [c["result"] for c in tr.outputs["cases"]] == [False, True, True]


def test_default_runs_when_no_case_holds_and_nothing_without_default() -> None:
    spec = {"cases": [{"when": "false", "target": "a"}], "default": "c"}
    _, _, tr = evaluate(spec)
    assert tr.state == {"selected": ["c"]} and tr.outputs["target"] == "c"
    _, _, tr = evaluate({"cases": [{"when": "false", "target": "a"}]})
    assert tr.state == {"selected": []} and tr.outputs["target"] is None


def test_expression_error_fails_with_the_message() -> None:
    _, _, tr = evaluate({"cases": [{"when": "1 + 'x' == 2", "target": "a"}]})
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError"
    assert (tr.message or "").startswith("case 0 (target a): evaluating")
    _, _, tr = evaluate({"cases": [{"when": "'not a bool'", "target": "a"}]})
    assert tr.phase is P.FAILED and "must evaluate to a bool" in (tr.message or "")


def test_cases_see_the_enclosing_loop_iteration() -> None:
    templates = [
        {"name": "l", "templateType": "Loop", "loop": {"child": "sw", "count": 5}},
        *switch(cases=[{"when": "iteration.index == 2 && iteration.number == 3", "target": "a"}]),
    ]
    run, loop_node = run_with_node(templates, "l", "WaitingForChild", {"started": 3, "index": 2})
    sw = add_child(run, loop_node, "sw", "Evaluating")
    tr = M.handle(sw, Event("default/wf", sw.name, E.NODE_EVALUATE), run, NOW)
    assert tr.state == {"selected": ["a"]}


def test_weighted_choice_is_deterministic_per_seed() -> None:
    spec = {"weights": [{"target": "a", "weight": 1}, {"target": "b", "weight": 3}, {"weight": 1}]}
    picks = [evaluate(spec, seed)[2].outputs["choice"] for seed in range(50)]
    assert picks == [evaluate(spec, seed)[2].outputs["choice"] for seed in range(50)]
    assert set(picks) == {0, 1, 2}
    _, _, tr = evaluate(spec, seed=picks.index(2))
    assert tr.state == {"selected": []} and tr.outputs["target"] is None  # "run nothing"


def test_weighted_draw_follows_the_weights() -> None:
    weights = [SwitchWeight(target="a", weight=1), SwitchWeight(target="b", weight=0), SwitchWeight(weight=3)]
    rng = random.Random(7)
    counts = Counter(draw_weighted(weights, rng.random()) for _ in range(20_000))
    assert counts[1] == 0
    assert abs(counts[0] / 20_000 - 0.25) < 0.02
    assert draw_weighted(weights, 0.0) == 0 and draw_weighted(weights, 0.9999999) == 2


def test_pick_creates_the_selected_or_succeeds() -> None:
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForSchedule", {"selected": ["b", "c"]})
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD and tr.effects == [CreateChildren(("b", "c"))]
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForSchedule", {"selected": []})
    tr = M.handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.SUCCEED and tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]


def test_children_succeed_then_the_switch_succeeds() -> None:
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForChild", {"selected": ["b", "c"]})
    b = add_child(run, node, "b", "Succeed")
    c = add_child(run, node, "c", "Holding")
    assert M.handle(node, ev(E.CHILD_NODE_SUCCEED, {"child": b.name}), run, NOW) is IGNORED
    c.phase = P.SUCCEED
    tr = M.handle(node, ev(E.CHILD_NODE_SUCCEED, {"child": c.name}), run, NOW)
    assert tr.phase is P.SUCCEED


def test_failed_child_stops_the_others_then_fails() -> None:
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForChild", {"selected": ["b", "c"]})
    b = add_child(run, node, "b", "Failed")
    add_child(run, node, "c", "Holding")
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED, {"child": b.name}), run, NOW)
    assert tr.phase is None
    (stop,) = tr.effects
    assert isinstance(stop, StopChildren) and stop.request.reason is StopReason.SIBLING_FAILED
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForChild", {"selected": ["b"]})
    b = add_child(run, node, "b", "Failed")
    b.message = "boom"
    tr = M.handle(node, ev(E.CHILD_NODE_FAILED, {"child": b.name}), run, NOW)
    assert tr.phase is P.FAILED and tr.message == f"child {b.name} failed: boom"


def test_abort_stops_branches_and_evaluating_node_finishes_at_once() -> None:
    req = StopRequest(StopReason.ABORTED, "aborted")
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForChild", {"selected": ["b"]})
    add_child(run, node, "b", "Holding")
    tr = M.handle(node, ev(E.NODE_ABORT, req), run, NOW)
    assert isinstance(tr.effects[0], StopChildren)
    run, node = run_with_node(switch(**CASES), "sw", "Evaluating")
    assert M.handle(node, ev(E.NODE_ABORT, req), run, NOW).phase is P.FAILED


def test_resume_re_evaluates_or_picks() -> None:
    run, node = run_with_node(switch(**CASES), "sw", "Evaluating")
    assert M.resume(node, run, NOW) == [Notify(E.NODE_EVALUATE)]
    run, node = run_with_node(switch(**CASES), "sw", "WaitingForSchedule", {"selected": ["a"]})
    assert M.resume(node, run, NOW) == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]


def issues(spec: dict[str, Any] | None) -> list[str]:
    templates = switch(**spec) if spec is not None else [{"name": "sw", "templateType": "Switch"}]
    if spec is None:
        templates += switch()[1:]
    return [str(i) for i in validate_workflow(workflow(templates), "wf.yaml") if "unreachable" not in str(i)]


def test_validation() -> None:
    assert issues({**CASES, "default": "a"}) == []
    assert (
        issues(
            {
                "weights": [
                    {"target": "a", "weight": 1},
                    {"target": "b", "weight": 2},
                    {"target": "c", "weight": 0},
                ]
            }
        )
        == []
    )
    assert issues(None) == [
        "wf.yaml: spec.templates[0].switch: Switch template needs switch.cases or switch.weights"
    ]
    assert issues({}) == ["wf.yaml: spec.templates[0].switch: Switch needs exactly one of cases and weights"]
    both = issues({**CASES, "weights": [{"target": "a", "weight": 1}]})
    assert "exactly one of cases and weights" in both[0]
    found = issues({"cases": [{"when": "1 +", "target": "zz"}], "default": "yy"})
    assert any("switch.cases[0].when: invalid expression" in m for m in found)
    assert any('switch.cases[0].target: unknown template "zz"' in m for m in found)
    assert any('switch.default: unknown template "yy"' in m for m in found)
    found = issues({"weights": [{"target": "a", "weight": 0}], "default": "b", "mode": "all"})
    assert any("at least one weight must be greater than 0" in m for m in found)
    assert any("switch.default" in m for m in found) and any("switch.mode" in m for m in found)
