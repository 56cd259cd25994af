"""Switch on the simulated cluster, and nesting: Loop of Serial of Switch of Chaos, with abort and
deadline at every level."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.loader import load_workflow_file
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import net, suspend, took, workflow
from tests.sim.conftest import Sim, make_sim

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


def nodes_of(run: WorkflowRun, template: str) -> list[Node]:
    return [n for n in run.nodes.values() if n.template == template]


def node_of(run: WorkflowRun, template: str) -> Node:
    (n,) = nodes_of(run, template)
    return n


def switch(name: str, **spec: Any) -> dict[str, Any]:
    extra = {k: spec.pop(k) for k in ("deadline", "onDeadline") if k in spec}
    return {"name": name, "templateType": "Switch", "switch": spec, **extra}


def cm_chaos(name: str, duration: str = "10s", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Chaos",
        "duration": duration,
        "chaos": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"chaos": name}}},
        **extra,
    }


def leftovers(sim: Sim) -> list[Any]:
    return sim.chaos_objects() + sim.labelled("ConfigMap")


def test_example_runs(sim: Sim) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "switch.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert leftovers(sim) == []


def test_first_true_case_runs_and_outputs_record_the_choice(sim: Sim) -> None:
    wf = workflow(
        [
            switch(
                "sw",
                cases=[
                    {"when": "workflow.parameters.level > 5", "target": "big"},
                    {"when": "workflow.parameters.level > 1", "target": "small"},
                ],
                default="none",
            ),
            net("big", "1m"),
            cm_chaos("small", "10s"),
            suspend("none", "1s"),
        ],
        parameters=[{"name": "level", "value": 3}],
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    sw = node_of(run, "sw")
    assert sw.outputs["selected"] == ["small"] and sw.outputs["target"] == "small"
    assert [n.template for n in run.nodes.values()] == ["sw", "small"]
    assert took(run) == pytest.approx(10)


def test_mode_all_runs_the_true_cases_in_parallel(sim: Sim) -> None:
    wf = workflow(
        [
            switch(
                "sw",
                mode="all",
                cases=[
                    {"when": "true", "target": "a"},
                    {"when": "false", "target": "b"},
                    {"when": "true", "target": "c"},
                ],
            ),
            cm_chaos("a", "10s"),
            cm_chaos("b", "10s"),
            net("c", "20s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert sorted(n.template for n in run.nodes.values()) == ["a", "c", "sw"]
    assert took(run) == pytest.approx(20.2, abs=0.01)  # in parallel
    assert leftovers(sim) == []


def test_expression_error_fails_with_the_message(sim: Sim) -> None:
    run = sim.submit(
        workflow(
            [switch("sw", cases=[{"when": "nodes.nope.phase == 'x'", "target": "z"}]), suspend("z", "1s")]
        )
    )
    sim.run()
    assert run.phase.value == "Failed"
    sw = node_of(run, "sw")
    assert sw.reason == "ExpressionError" and sw.message.startswith("case 0 (target z): evaluating")
    assert "no such key" in sw.message


def weighted_run(seed: int) -> list[Any]:
    s = make_sim()
    wf = workflow(
        [
            {"name": "l", "templateType": "Loop", "loop": {"child": "sw", "count": 400, "historyLimit": 400}},
            switch("sw", weights=[{"target": "a", "weight": 1}, {"target": "b", "weight": 3}, {"weight": 0}]),
            suspend("a", "1s"),
            suspend("b", "1s"),
        ],
        seed=seed,
    )
    run = s.submit(wf)
    s.run()
    assert run.phase.value == "Succeed", run.message
    return [n.outputs["target"] for n in nodes_of(run, "sw")]


def test_weighted_choice_is_seeded_and_follows_the_weights() -> None:
    first = weighted_run(1)
    assert first == weighted_run(1)
    assert first != weighted_run(2)
    counts = Counter(first)
    assert set(counts) == {"a", "b"}
    assert 0.18 < counts["a"] / 400 < 0.32


# --- nesting: Loop of Serial of Switch of Chaos --------------------------------------------------
LEVELS = ["loop", "round", "pick", "inject"]


def nested(deadline_at: str | None = None, lifetime: bool = False) -> list[dict[str, Any]]:
    """loop -> round (Serial: pick, rest) -> pick (Switch: inject | poke) -> chaos."""
    dl: dict[str, Any] = {"deadline": "95s", "onDeadline": "Succeed" if lifetime else "Fail"}

    def at(level: str) -> dict[str, Any]:
        return dl if deadline_at == level else {}

    return [
        {"name": "loop", "templateType": "Loop", "loop": {"child": "round", "count": 6}, **at("loop")},
        {"name": "round", "templateType": "Serial", "children": ["pick", "rest"], **at("round")},
        switch(
            "pick",
            cases=[{"when": "iteration.index % 2 == 0", "target": "inject"}],
            default="poke",
            **at("pick"),
        ),
        net("inject", "2m", **at("inject")),
        cm_chaos("poke", "40s"),
        suspend("rest", "10s"),
    ]


def test_nested_runs_to_the_end() -> None:
    sim = make_sim()
    run = sim.submit(workflow(nested()))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    # 3 x (120.2 + 10) + 3 x (40 + 10)
    assert took(run) == pytest.approx(3 * 130.2 + 3 * 50, abs=0.01)
    assert [n.outputs["target"] for n in nodes_of(run, "pick")] == ["inject", "poke"] * 3
    assert leftovers(sim) == []


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("lifetime", [False, True])
def test_nested_deadline_at_each_level(level: str, lifetime: bool) -> None:
    sim = make_sim()
    run = sim.submit(workflow(nested(level, lifetime)))
    sim.run()
    assert run.phase.finished
    assert all(n.phase.finished for n in run.nodes.values())
    assert leftovers(sim) == []
    assert all(v == 1 for v in sim.created.values())
    stopped = [n for n in run.nodes.values() if n.reason == "DeadlineExceeded"]
    assert stopped and all(n.template == level for n in stopped)
    if lifetime:
        assert run.phase.value == "Succeed", run.message
    else:
        assert run.phase.value == "Failed"
        assert "deadline 95s exceeded" in run.nodes[run.entry_node or ""].message


@pytest.mark.parametrize("at", [0.05, 60, 120.1, 121, 135, 150, 300, 400])
def test_nested_abort_at_any_time_leaves_nothing(at: float) -> None:
    sim = make_sim()
    run = sim.submit(workflow(nested()))
    sim.at(at, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert took(run) == pytest.approx(at, abs=0.5)
    assert all(n.phase.finished for n in run.nodes.values())
    assert leftovers(sim) == []
    assert sim.manager.watch.observed() == 0


def test_nested_workflow_deadline_stops_every_level() -> None:
    sim = make_sim()
    run = sim.submit(workflow(nested(), deadline="3m", onDeadline="Succeed"))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(180)
    assert leftovers(sim) == []
