"""parallelism: per Parallel template (running children) and per workflow (running leaf nodes)."""

from __future__ import annotations

from typing import Any

from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from templates import MACHINES
from tests.helpers import suspend, workflow
from tests.sim.conftest import Sim, make_sim

P = NodePhase


def max_running(sim: Sim, run: WorkflowRun, pred: Any) -> list[int]:
    """Record, at every phase change, how many nodes matching ``pred`` are started and unfinished."""
    seen: list[int] = []

    def on_phase(r: WorkflowRun, node: Node, old: NodePhase) -> None:
        if r is run:
            seen.append(sum(1 for n in r.nodes.values() if pred(n) and MACHINES[n.kind].holds_slot(n)))

    sim.manager.phase_listeners.append(on_phase)
    return seen


def rel(run: WorkflowRun, t: float | None) -> float:
    assert t is not None and run.start_time is not None
    return round(t - run.start_time, 3)


def test_template_parallelism_limits_running_children_in_order(sim: Sim) -> None:
    kids = [f"z{i}" for i in range(5)]
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": kids, "parallelism": 2},
            *[suspend(k, f"{10 * (i + 1)}s") for i, k in enumerate(kids)],
        ]
    )
    run = sim.submit(wf)
    seen = max_running(sim, run, lambda n: n.template.startswith("z"))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert max(seen) == 2
    starts = {n.template: rel(run, n.start_time) for n in run.nodes.values() if n.template != "p"}
    # z0 10s, z1 20s run first; z2 starts when z0 ends (10), z3 when z1 ends (20), z4 when z2 ends (40)
    assert starts == {"z0": 0, "z1": 0, "z2": 10, "z3": 20, "z4": 40}
    assert [run.nodes[c].template for c in run.nodes[run.entry_node or ""].children] == kids


def test_template_parallelism_fail_fast_starts_no_more_children(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "p",
                "templateType": "Parallel",
                "children": ["bad", "z1", "z2", "z3"],
                "parallelism": 2,
            },
            {
                "name": "bad",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "sleep 5; exit 1"]}},
            },
            suspend("z1", "1h"),
            suspend("z2", "1h"),
            suspend("z3", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert sorted(n.template for n in run.nodes.values()) == ["bad", "p", "z1"]


def test_workflow_parallelism_limits_running_leaves_across_the_tree(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "root", "templateType": "Parallel", "children": ["a", "b"]},
            {"name": "a", "templateType": "Parallel", "children": ["a1", "a2", "a3"]},
            {"name": "b", "templateType": "Serial", "children": ["b1", "b2"]},
            *[suspend(n, "10s") for n in ("a1", "a2", "a3", "b1", "b2")],
        ],
        parallelism=2,
    )
    run = sim.submit(wf)
    seen = max_running(sim, run, lambda n: MACHINES[n.kind].leaf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert max(seen) == 2
    starts = {n.template: rel(run, n.start_time) for n in run.nodes.values() if n.kind == "Suspend"}
    # creation order: a1 a2 a3 (a's children), b1; slots free at 10s, 20s; b2 is created when b1 ends
    assert starts == {"a1": 0, "a2": 0, "a3": 10, "b1": 10, "b2": 20}
    assert rel(run, run.finish_time) == 30


def test_workflow_parallelism_one_with_task_branches_does_not_deadlock(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["echo", "go"]}},
                "conditionalBranches": [{"target": "after", "expression": 'stdout == "go"'}],
            },
            suspend("after", "5s"),
        ],
        parallelism=1,
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message  # the Task gave its slot back after its pod


def test_abort_with_queued_leaves_fails_them_without_starting_and_removes_chaos(sim: Sim) -> None:
    chaos = {
        "templateType": "NetworkChaos",
        "duration": "1h",
        "networkChaos": {"action": "delay", "mode": "all", "selector": {"labelSelectors": {"app": "web"}}},
    }
    wf = workflow(
        [
            {"name": "root", "templateType": "Parallel", "children": ["c1", "c2", "c3"]},
            {"name": "c1", **chaos},
            {"name": "c2", **chaos},
            {"name": "c3", **chaos},
        ],
        parallelism=1,
    )
    run = sim.submit(wf)
    sim.at(60, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert sorted(sim.created) == ["wf-c1-1"]  # c2 and c3 never started
    assert all(n.phase is P.FAILED for n in run.nodes.values())
    assert sim.chaos_objects() == []
    assert not run.slots and rel(run, run.finish_time) == 60.1


def test_parallelism_queue_survives_a_resume() -> None:
    from engine.runtime import run_from_record, run_to_record

    wf = workflow(
        [
            {"name": "root", "templateType": "Parallel", "children": ["z1", "z2", "z3", "z4"]},
            *[suspend(n, "10s") for n in ("z1", "z2", "z3", "z4")],
        ],
        parallelism=2,
    )
    ref = make_sim()
    expected = ref.submit(wf)
    ref.run()

    first = make_sim()
    run = first.submit(wf)
    first.manager.run(
        until=lambda: run.nodes.get("z3-3") is not None and run.nodes["z3-3"].phase is P.HOLDING
    )
    record = run_to_record(run)
    assert sorted(record["nodes"][i]["name"] for i in range(5)) == ["root-0", "z1-1", "z2-2", "z3-3", "z4-4"]

    second = make_sim()
    second.clock.advance_to(first.clock.now())
    back = run_from_record(record)
    second.manager.adopt(back)
    second.run()
    assert back.phase.value == "Succeed"
    assert [(n.name, n.start_time, n.finish_time) for n in back.nodes.values()] == [
        (n.name, n.start_time, n.finish_time) for n in expected.nodes.values()
    ]
