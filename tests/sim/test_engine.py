"""Whole workflows on the simulated cluster with the virtual clock.

Regression tests for Chaos Mesh's open defects (abort, one-shot chaos, vanished pods, branch
expression errors, ...) are in ``test_chaos_mesh_regressions.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.loader import load_workflow_file
from engine.phases import NodePhase
from tests.helpers import by_template, net, suspend, took, workflow
from tests.sim.conftest import Sim, make_sim

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


# Sim chaos controller latency: injection and recovery each take 0.1 virtual seconds.
CHAOS_LATENCY = 0.2


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("serial.yaml", 10 + 20),
        ("parallel.yaml", 20),
        ("conditional-branches.yaml", 20),
    ],
)
def test_chaos_mesh_examples_succeed_with_expected_durations(sim: Sim, example: str, expected: float) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "chaos-mesh" / example))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert expected <= took(run) <= expected + CHAOS_LATENCY + 1.0  # + task pod start/finish
    assert sim.chaos_objects() == []


def test_conditional_branch_picks_only_the_true_branch(sim: Sim) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "chaos-mesh" / "conditional-branches.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert by_template(run, "workflow-network-chaos")
    assert not by_template(run, "workflow-stress-chaos")
    (task,) = by_template(run, "request-and-pick")
    assert task.state["result"] == {"exitCode": 0, "stdout": "branch-a"}


def test_chaos_object_created_held_and_deleted(sim: Sim) -> None:
    seen: list[tuple[float, int]] = []
    run = sim.submit(workflow([net("c", "1m")]))
    for t in (0.05, 0.5, 30, 60):
        sim.at(t, lambda t=t: seen.append((t, len(sim.chaos_objects()))))
    sim.run()
    assert run.phase.value == "Succeed"
    assert seen == [(0.05, 1), (0.5, 1), (30, 1), (60, 1)]  # held for 1m after injection at 0.1s
    assert took(run) == pytest.approx(60.2, abs=1e-3)
    assert sim.chaos_objects() == []
    assert sim.created == {"wf-c-0": 1}


def test_template_deadline_fails_node_and_cleans_up_chaos(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["c", "z"], "deadline": "30s"},
            net("c", "10m"),
            suspend("z", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    (p,) = by_template(run, "p")
    assert p.phase is P.FAILED and p.reason == "DeadlineExceeded"
    assert all(n.phase.finished for n in run.nodes.values())
    assert 30 <= took(run) <= 31
    assert sim.chaos_objects() == []


def test_deadline_as_lifetime_succeeds(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "p",
                "templateType": "Parallel",
                "children": ["c", "z"],
                "deadline": "30s",
                "onDeadline": "Succeed",
            },
            net("c", "10m"),
            suspend("z", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert all(n.phase is P.SUCCEED for n in run.nodes.values())
    assert sim.chaos_objects() == []


def test_workflow_deadline_stops_everything(sim: Sim) -> None:
    wf = workflow(
        [{"name": "s", "templateType": "Serial", "children": ["c", "z"]}, net("c", "1h"), suspend("z", "1h")],
        deadline="5m",
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert "workflow deadline" in run.message
    assert 300 <= took(run) <= 301
    assert not by_template(run, "z"), "the next step must not start after the deadline"
    assert sim.chaos_objects() == []


def test_failed_child_fails_parallel_and_stops_siblings(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["t", "c"]},
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "sleep 5; exit 3"]}},
            },
            net("c", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    (t,) = by_template(run, "t")
    assert t.phase is P.FAILED and "exited with code 3" in t.message
    (c,) = by_template(run, "c")
    assert c.phase is P.FAILED and c.reason == "SiblingFailed"
    assert took(run) < 10
    assert sim.chaos_objects() == []


def test_task_pod_gets_restricted_security_context(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["true"]}},
            }
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed"
    (pod,) = sim.labelled("Pod")
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"]["chaosflow.io/node"] == "t-0"


def test_same_seed_same_timeline() -> None:
    def once() -> list[tuple[str, str, float | None, float | None]]:
        s = make_sim(seed=3)
        wf = workflow(
            [
                {"name": "p", "templateType": "Parallel", "children": ["a", "b"]},
                suspend("a", {"min": "1s", "max": "1h"}),  # type: ignore[arg-type]
                {"name": "b", "templateType": "Serial", "children": ["x", "y"]},
                suspend("x", {"min": "1s", "max": "10m"}),  # type: ignore[arg-type]
                net("y", {"min": "10s", "max": "5m"}),  # type: ignore[arg-type]
            ],
            seed=11,
        )
        run = s.submit(wf)
        s.run()
        return [(n.name, n.phase.value, n.start_time, n.finish_time) for n in run.nodes.values()]

    assert once() == once()
