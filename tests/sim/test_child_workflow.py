"""Child workflows (templateType Workflow) on the simulated cluster with the virtual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.loader import load_workflow_file
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import net, suspend, took, workflow
from tests.sim.conftest import Sim, make_sim
from tests.sim.test_statuscheck import resume_elsewhere

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


def only(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    return n


def child(name: str, source: str = "body", **extra: Any) -> dict[str, Any]:
    return {"name": name, "templateType": "Workflow", "workflow": {"from": source, **extra}}


def children_of(sim: Sim, run: WorkflowRun) -> list[WorkflowRun]:
    return [
        r
        for r in sim.manager.runs.values()
        if r.workflow.metadata.labels.get("chaosflow.io/parent-workflow") == run.name
    ]


def test_waited_child_runs_as_a_separate_workflow_and_the_node_ends_with_it(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["spawn", "after"]},
            child("spawn", parameters={"size": "{{ 2 * 21 }}"}, labels={"role": "volume"}),
            {"name": "body", "templateType": "Serial", "children": ["hold", "chaos"]},
            suspend("hold", "10s"),
            net("chaos", "20s"),
            suspend("after", "5s"),
        ],
        parameters=[{"name": "size", "value": 1}, {"name": "other", "value": "x"}],
        seed=7,
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    (c,) = children_of(sim, run)
    assert c.name == "wf-spawn-1" and c.key == "default/wf-spawn-1"
    assert c.phase.value == "Succeed"
    assert c.workflow.metadata.labels == {
        "role": "volume",
        "chaosflow.io/parent-workflow": "wf",
        "chaosflow.io/parent-node": "spawn-1",
    }
    assert {p.name: p.value for p in c.workflow.spec.parameters} == {"size": 42, "other": "x"}
    assert sorted(c.templates) == ["body", "chaos", "hold"]  # only what the child's entry reaches
    spawn = only(run, "spawn")
    assert spawn.message == "child workflow default/wf-spawn-1 succeeded"
    assert spawn.outputs == {"workflow": "wf-spawn-1", "namespace": "default", "phase": "Succeed"}
    # the child's chaos object carries the child's labels, and is gone
    assert sim.created == {"wf-spawn-1-chaos-2": 1} and sim.chaos_objects() == []
    assert took(run) == pytest.approx(10 + 20 + 0.2 + 5)


def test_failed_child_fails_the_node_with_its_message(sim: Sim) -> None:
    wf = workflow(
        [
            child("spawn"),
            {
                "name": "body",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "exit 4"]}},
            },
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    spawn = only(run, "spawn")
    assert spawn.reason == "ChildWorkflowFailed"
    assert spawn.message.startswith("child workflow default/wf-spawn-0 failed: ")
    assert "exited with code 4" in spawn.message


def test_inline_spec_child_with_its_own_seed_and_parameters(sim: Sim) -> None:
    inline = {
        "entry": "z",
        "seed": 99,
        "parameters": [{"name": "d", "value": "1s"}],
        "templates": [{"name": "z", "templateType": "Suspend", "duration": "{{ workflow.parameters.d }}"}],
    }
    wf = workflow(
        [
            {
                "name": "spawn",
                "templateType": "Workflow",
                "workflow": {"spec": inline, "parameters": {"d": "7s"}, "name": "kid"},
            }
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    kid = sim.manager.runs["default/kid-spawn-0"]
    assert kid.seed == 99 and took(kid) == 7


def test_detached_child_outlives_the_node_and_a_parent_that_succeeded(sim: Sim) -> None:
    wf = workflow([child("spawn", wait=False), suspend("body", "1m")])
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed"
    assert took(run) == 0
    spawn = only(run, "spawn")
    assert spawn.message == "started child workflow default/wf-spawn-0 (detached)"
    (c,) = children_of(sim, run)
    assert c.phase.value == "Succeed" and took(c) == 60  # not stopped: the parent simply succeeded


def test_abort_of_the_parent_aborts_a_waited_child_and_removes_its_chaos(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["spawn", "mine"]},
            child("spawn"),
            {"name": "body", "templateType": "Parallel", "children": ["chaos", "z"]},
            net("chaos", "1h"),
            suspend("z", "1h"),
            net("mine", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.at(600, lambda: sim.manager.abort(run.key, "stop it"))
    sim.run()
    assert run.phase.value == "Failed" and run.message == "stop it"
    (c,) = children_of(sim, run)
    assert c.phase.value == "Failed" and c.message == "parent node spawn-1: parent p-0: stop it"
    assert all(n.phase.finished for r in (run, c) for n in r.nodes.values())
    assert sim.chaos_objects() == []
    assert sorted(sim.created) == ["wf-mine-2", "wf-spawn-1-chaos-1"]
    # the parent node ended only once its child had ended (so its chaos was gone by then)
    assert run.finish_time is not None and c.finish_time is not None and c.finish_time <= run.finish_time
    assert 600 <= took(run) <= 601


def test_deadline_of_the_node_aborts_the_waited_child(sim: Sim) -> None:
    spawn = child("spawn")
    spawn["deadline"] = "30s"
    run = sim.submit(workflow([spawn, net("body", "1h")]))
    sim.run()
    assert run.phase.value == "Failed"
    s = only(run, "spawn")
    assert s.reason == "DeadlineExceeded"
    (c,) = children_of(sim, run)
    assert c.phase.value == "Failed" and "deadline 30s exceeded" in c.message
    assert sim.chaos_objects() == []
    assert 30 <= took(run) <= 31


@pytest.mark.parametrize("stop_with_parent", [True, False])
def test_detached_children_and_stop_with_parent(stop_with_parent: bool) -> None:
    sim = make_sim()
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["spawn", "wait"]},
            child("spawn", wait=False, stopWithParent=stop_with_parent),
            net("body", "1h"),
            suspend("wait", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.at(100, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    (c,) = children_of(sim, run)
    if stop_with_parent:
        assert c.phase.value == "Failed" and took(c) == pytest.approx(100, abs=0.5)
        assert c.message.startswith("parent workflow wf stopped")
    else:
        assert c.phase.value == "Succeed" and took(c) == pytest.approx(3600.2)
    assert sim.chaos_objects() == []


def test_abort_while_a_serial_advances_never_starts_the_child(sim: Sim) -> None:
    """chaos-mesh #4286 for child workflows: the abort arrives as the step before it ends."""
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["z", "spawn"]},
            suspend("z", "10s"),
            child("spawn"),
            net("body", "1m"),
        ]
    )
    run = sim.submit(wf)
    sim.at(10, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert list(sim.manager.runs) == ["default/wf"] and sim.created == {}


def test_workflow_deadline_stops_detached_children(sim: Sim) -> None:
    """chaos-mesh #2115: nothing keeps running after the parent's deadline."""
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["spawn", "wait"]},
            child("spawn", wait=False),
            net("body", "1h"),
            suspend("wait", "1h"),
        ],
        deadline="50s",
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed" and "workflow deadline 50s exceeded" in run.message
    (c,) = children_of(sim, run)
    assert c.phase.value == "Failed" and took(c) == pytest.approx(50, abs=0.5)
    assert sim.chaos_objects() == []


def test_terminate_reaches_the_child(sim: Sim) -> None:
    wf = workflow([child("spawn"), net("body", "1h")])
    run = sim.submit(wf)
    sim.at(10, lambda: sim.manager.abort(run.key, "kill", terminate=True))
    sim.run()
    (c,) = children_of(sim, run)
    assert c.phase.value == "Failed" and run.phase.value == "Failed"
    assert sim.chaos_objects() == []  # terminate skips exit handlers, never the chaos cleanup


def test_fifty_children_fan_out(sim: Sim) -> None:
    n = 50
    templates: list[dict[str, Any]] = [
        {"name": "fan", "templateType": "Parallel", "children": [f"c{i}" for i in range(n)]}
    ]
    templates += [child(f"c{i}", labels={"role": "volume"}) for i in range(n)]
    templates += [
        {"name": "body", "templateType": "Serial", "children": ["wait", "chaos"]},
        {"name": "wait", "templateType": "Suspend", "duration": {"min": "1s", "max": "1m"}},
        net("chaos", "10s"),
    ]
    run = sim.submit(workflow(templates, seed=3))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    kids = children_of(sim, run)
    assert len(kids) == n and len({k.name for k in kids}) == n
    assert all(k.phase.value == "Succeed" for k in kids)
    assert len({k.seed for k in kids}) == n  # each child draws its own seed from the parent's source
    durations = {took(k) for k in kids}
    assert len(durations) > 10  # the Suspend ranges were drawn per child
    assert took(run) == pytest.approx(max(durations))
    assert len(sim.created) == n and sim.chaos_objects() == []


def test_count_workflows_by_label_and_phase(sim: Sim) -> None:
    """The megatest spawner's question: how many of my volume workflows are running?"""
    count = 'countWorkflows({"chaosflow.io/parent-workflow": workflow.name, "role": "volume"}, "Running")'
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["spawn", "check"]},
            {"name": "spawn", "templateType": "Loop", "loop": {"child": "one", "count": 3}},
            child("one", wait=False, labels={"role": "volume"}),
            {
                "name": "check",
                "templateType": "Switch",
                "switch": {
                    "cases": [{"when": f"{count} == 3", "target": "ok"}],
                    "default": "wrong",
                },
            },
            suspend("ok", "1s"),
            {
                "name": "wrong",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["false"]}},
            },
            suspend("body", "1m"),
        ]
    )
    run = sim.submit(wf)
    fn = run.functions
    assert fn is not None
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert only(run, "ok").phase is P.SUCCEED
    # after the run: by phase, by a list of phases, all, and none
    from engine.expr import Expr

    env = {"workflow": {"name": "wf"}}
    assert Expr(count).evaluate(env, fn) == 0
    assert Expr(count.replace('"Running"', '"Succeed"')).evaluate(env, fn) == 3
    assert Expr('countWorkflows({"role": "volume"}, ["Running", "Succeed"])').evaluate(env, fn) == 3
    assert Expr('countWorkflows({"role": "volume"})').evaluate(env, fn) == 3
    assert Expr("countWorkflows({})").evaluate(env, fn) == 4  # the parent too
    assert Expr('countWorkflows({"role": "other"})').evaluate(env, fn) == 0
    from engine.expr import ExprError

    with pytest.raises(ExprError, match="unknown phase Done"):
        Expr('countWorkflows({}, "Done")').evaluate(env, fn)


def test_resume_finds_the_child_by_name_and_never_starts_it_twice() -> None:
    def build() -> Any:
        return workflow(
            [
                {"name": "main", "templateType": "Serial", "children": ["spawn", "after"]},
                child("spawn"),
                {"name": "body", "templateType": "Serial", "children": ["z", "chaos"]},
                suspend("z", "10s"),
                net("chaos", "30s"),
                suspend("after", "5s"),
            ]
        )

    ref = make_sim()
    ref_run = ref.submit(build())
    ref.run()
    expected = {k: (r.phase.value, r.finish_time) for k, r in ref.manager.runs.items()}
    assert ref_run.phase.value == "Succeed"
    for crash_after in (2, 4, 6, 9, 14, 20, 30):
        sim = make_sim()
        sim.submit(build())
        resumed = resume_elsewhere(sim, crash_after)
        starts: list[str] = []

        def started(r: WorkflowRun, starts: list[str] = starts) -> None:
            if r.phase.value == "Running":
                starts.append(r.key)

        resumed.manager.workflow_listeners.append(started)
        resumed.run()
        got = {k: (r.phase.value, r.finish_time) for k, r in resumed.manager.runs.items()}
        assert got == expected, crash_after
        assert len(resumed.manager.runs) == 2
        assert starts.count("default/wf-spawn-1") <= 1
        assert resumed.chaos_objects() == []


def test_crash_after_the_parent_stopped_still_stops_its_detached_children() -> None:
    sim = make_sim()
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["spawn", "wait"]},
            child("spawn", wait=False),
            net("body", "1h"),
            suspend("wait", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.at(100, lambda: sim.manager.abort(run.key))
    # crash right after the parent finished: the abort it sent to its child is lost
    resumed = resume_elsewhere(sim, until=lambda: run.phase.finished)
    c = resumed.manager.runs["default/wf-spawn-1"]
    assert c.phase.value == "Running"
    resumed.run()
    assert c.phase.value == "Failed" and c.message.startswith("parent workflow wf stopped")
    assert took(c) == pytest.approx(100, abs=0.5)
    assert resumed.chaos_objects() == []


def test_a_workflow_of_the_same_name_from_elsewhere_is_not_adopted(sim: Sim) -> None:
    squatter = workflow([suspend("z", "1h")], name="wf-spawn-0")
    sim.submit(squatter)
    run = sim.submit(workflow([child("spawn"), suspend("body", "1s")]))
    sim.manager.run(until=lambda: run.phase.finished)
    s = only(run, "spawn")
    assert s.phase is P.FAILED and s.reason == "ChildWorkflowSubmitFailed"
    assert "already exists and was not started by this node" in s.message


def test_example_runs() -> None:
    sim = make_sim()
    (wf,) = load_workflow_file(str(ROOT / "examples" / "child-workflow.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert all(r.phase.value == "Succeed" for r in sim.manager.runs.values())
    assert sim.chaos_objects() == []
