"""Regression tests for Chaos Mesh Workflow's open defects (``../shared/reference/chaos-mesh-workflow.md``).

One test (or one small group) per open report that chaosflow must not repeat; numbers are
chaos-mesh GitHub issues. Related coverage elsewhere, not duplicated here:

* #4343 "deadline not functional", #2115 "node shown running after its parent's deadline":
  ``tests/sim/test_engine.py::test_template_deadline_fails_node_and_cleans_up_chaos`` (every node
  finished, chaos removed) and ``::test_workflow_deadline_stops_everything``;
* #2407 as fail-fast inside a Parallel: ``tests/sim/test_engine.py::test_failed_child_fails_parallel_and_stops_siblings``;
* validation of chaosflow-format documents: ``tests/unit/test_validate.py`` (``task: {}``, chaos
  without a duration);
* exit handlers on deadline (an Argo complaint): ``tests/sim/test_onexit.py``.
"""

from __future__ import annotations

import pytest

from engine.errors import ValidationFailed
from engine.loader import load_workflows_text
from engine.phases import NodePhase
from tests.helpers import by_template, net, suspend, took, workflow
from tests.sim.conftest import Sim, make_sim

P = NodePhase


def chaos_mesh_doc(templates: str) -> str:
    return (
        "apiVersion: chaos-mesh.org/v1alpha1\nkind: Workflow\nmetadata: {name: cm}\n"
        f"spec:\n  entry: the-entry\n  templates:\n{templates}"
    )


# --- #3846: a chaos node without a deadline hangs forever ------------------------------------------
def test_3846_chaos_without_deadline_is_rejected_at_validation() -> None:
    doc = chaos_mesh_doc(
        "    - {name: the-entry, templateType: Serial, children: [chaos]}\n"
        "    - {name: chaos, templateType: NetworkChaos, networkChaos: {action: delay, mode: all}}\n"
    )
    with pytest.raises(ValidationFailed, match=r"spec.templates\[1\].duration: chaos needs a duration"):
        load_workflows_text(doc, "cm.yaml")


def test_3846_chaos_that_is_never_injected_fails_instead_of_hanging() -> None:
    sim = make_sim(world=False)  # nothing to inject into: AllInjected never becomes True
    run = sim.submit(workflow([net("c", "1m")]))
    sim.run()
    assert run.phase.value == "Failed"
    assert "not injected" in run.nodes["c-0"].message
    assert sim.chaos_objects() == []


# --- #3345, #4539: one-shot pod-kill inside a Serial never completes ----------------------------------
def test_3345_4539_one_shot_pod_kill_in_serial_completes(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["kill", "after"]},
            {
                "name": "kill",
                "templateType": "PodChaos",
                "podChaos": {
                    "action": "pod-kill",
                    "mode": "one",
                    "selector": {"labelSelectors": {"app": "web"}},
                },
            },
            suspend("after", "5s"),
        ]
    )
    before = len(sim.api.list("Pod", "default", "app=web")["items"])
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert len(sim.api.list("Pod", "default", "app=web")["items"]) == before - 1
    assert sim.chaos_objects() == []
    assert took(run) < 10


# --- #2407: a failed task pod counts as success ----------------------------------------------------
def test_2407_failed_task_pod_fails_the_node_and_the_workflow(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["t", "after"]},
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "echo oops; exit 2"]}},
            },
            suspend("after", "1s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    (t,) = by_template(run, "t")
    assert t.phase is P.FAILED and t.reason == "TaskFailed" and t.message == "task exited with code 2"
    assert t.outputs == {"exitCode": 2, "stdout": "oops", "failed": True}  # visible as nodes.t.outputs
    assert not by_template(run, "after")


# --- #3092: the controller panics on `task: {}` ----------------------------------------------------
def test_3092_invalid_task_is_rejected_at_validation() -> None:
    doc = chaos_mesh_doc("    - {name: the-entry, templateType: Task, task: {}}\n")
    with pytest.raises(
        ValidationFailed, match=r"spec.templates\[0\].task.container: Task template needs a container"
    ):
        load_workflows_text(doc, "cm.yaml")


# --- an erroring branch expression stalls the node ---------------------------------------------------
def test_erroring_branch_expression_fails_the_node_with_a_message(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["echo", "hi"]}},
                "conditionalBranches": [{"target": "z", "expression": "stdout.size() > undefinedThing"}],
            },
            suspend("z", "1s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    (t,) = by_template(run, "t")
    assert t.reason == "ExpressionError" and "undefinedThing" in t.message


# --- #3835, #3482: stray chaos objects after deleting a workflow ---------------------------------------
def test_3835_3482_abort_removes_every_chaos_object(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["a", "b", "s"]},
            net("a", "1h"),
            net("b", "1h"),
            {"name": "s", "templateType": "Serial", "children": ["z", "c"]},
            suspend("z", "10s"),
            net("c", "1h"),
        ]
    )
    run = sim.submit(wf)
    sim.at(600, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert 600 <= took(run) <= 601
    assert all(n.phase is P.FAILED for n in run.nodes.values() if n.kind != "Suspend")
    assert sim.chaos_objects() == []
    assert all(v == 1 for v in sim.created.values())


@pytest.mark.parametrize("terminate", [False, True])
def test_3835_3482_abort_removes_chaos_spawned_by_a_loop(sim: Sim, terminate: bool) -> None:
    wf = workflow(
        [
            {"name": "l", "templateType": "Loop", "loop": {"child": "c", "count": 100}},
            net("c", "1m", onExit="note"),  # terminate skips the exit handler but not the cleanup
            suspend("note", "1s"),
        ]
    )
    run = sim.submit(wf)
    sim.at(150, lambda: sim.manager.abort(run.key, "deleted", terminate=terminate))
    sim.run()
    assert run.phase.value == "Failed"
    assert len(sim.created) == 3 and all(v == 1 for v in sim.created.values())  # the third was held at 150s
    assert sim.chaos_objects() == []
    # iterations 1 and 2 ran their exit handler normally; the aborted third only on stop
    assert len(by_template(run, "note")) == (2 if terminate else 3)


# --- #4286: abort race, the Serial starts the next step before the abort arrives --------------------------
def test_4286_abort_while_serial_advances_stops_next_step(sim: Sim) -> None:
    wf = workflow(
        [{"name": "s", "templateType": "Serial", "children": ["z", "c"]}, suspend("z", "10s"), net("c", "1m")]
    )
    run = sim.submit(wf)
    sim.at(10, lambda: sim.manager.abort(run.key))  # the abort arrives at the instant z finishes
    sim.run()
    assert run.phase.value == "Failed"
    assert not by_template(run, "c")
    assert sim.created == {}


# --- #4878: a vanished task pod is recreated and repeats side effects ----------------------------------
def test_4878_vanished_task_pod_fails_the_node_and_is_not_rerun(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "t",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sleep", "60"]}},
            }
        ]
    )
    added: list[str] = []
    sim.api.watch(
        "Pod",
        None,
        resource_version=sim.api.resource_version(),
        callback=lambda t, o: added.append(o["metadata"]["name"]) if t == "ADDED" else None,
    )
    run = sim.submit(wf)
    sim.at(10, lambda: sim.api.delete("Pod", "wf-t-0", "default", grace_period_seconds=0))
    sim.run()
    assert run.phase.value == "Failed"
    (t,) = by_template(run, "t")
    assert t.reason == "PodVanished"
    assert added == ["wf-t-0"]  # created once, never again
    assert sim.labelled("Pod") == []
    assert sim.labelled("ConfigMap") == []  # the Downward API ConfigMap went with it
