"""Wait on the simulated cluster with the virtual clock: watch-driven, no polling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.loader import load_workflow_file
from engine.runtime import Node, WorkflowRun
from tests.helpers import took, workflow
from tests.sim.conftest import Sim

ROOT = Path(__file__).resolve().parents[2]


def node_of(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    return n


def wait(name: str, condition: str, objects: dict[str, Any], **extra: Any) -> dict[str, Any]:
    timeout = extra.pop("timeout", None)
    spec: dict[str, Any] = {"condition": condition, "objects": objects}
    if timeout is not None:
        spec["timeout"] = timeout
    return {"name": name, "templateType": "Wait", "wait": spec, **extra}


CM = {"apiVersion": "v1", "kind": "ConfigMap", "name": "flag"}
WEB = {"apiVersion": "v1", "kind": "Pod", "labelSelector": "app=web"}


def test_example_runs(sim: Sim) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "wait.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message


def test_holds_until_another_branch_creates_the_object(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["w", "later"]},
            wait("w", "flag != null && flag.data.ready == 'yes'", {"flag": CM}, timeout="1h"),
            {"name": "later", "templateType": "Serial", "children": ["pause", "make"]},
            {"name": "pause", "templateType": "Suspend", "duration": "30m"},
            {
                "name": "make",
                "templateType": "Resource",
                "resource": {
                    "action": "create",
                    "manifest": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "flag"},
                        "data": {"ready": "yes"},
                    },
                },
            },
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    w = node_of(run, "w")
    assert w.finish_time is not None and w.start_time is not None
    assert w.finish_time - w.start_time == pytest.approx(1800)
    assert w.outputs == {"objects": {"flag": "default/flag"}}
    assert sim.manager.events < 40  # half an hour of waiting costs no events: no polling
    assert sim.manager.watch.observed_sets() == 0


def test_selector_condition_over_a_list(sim: Sim) -> None:
    """All web pods Running and none deleted: the default world's pods start after scheduling."""
    cond = "size(web) == 3 && web.all(p, p.status.phase == 'Running')"
    run = sim.submit(workflow([wait("w", cond, {"web": WEB}, timeout="1m")]))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert node_of(run, "w").outputs["objects"]["web"] == ["default/web-0", "default/web-1", "default/web-2"]


def test_condition_that_becomes_false_then_true_again(sim: Sim) -> None:
    """Wait until a pod is gone (someone deletes one at 100s)."""
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["pause", "w"]},
            {"name": "pause", "templateType": "Suspend", "duration": "10s"},
            wait("w", "size(web) < 3", {"web": WEB}, timeout="10m"),
        ]
    )
    run = sim.submit(wf)
    sim.at(100, lambda: sim.api.delete("Pod", "web-1", "default", grace_period_seconds=0))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(100)


def test_timeout_fails_with_the_condition_and_the_last_values(sim: Sim) -> None:
    run = sim.submit(workflow([wait("w", "size(web) == 4", {"web": WEB, "flag": CM}, timeout="5m")]))
    sim.run()
    assert run.phase.value == "Failed"
    w = node_of(run, "w")
    assert w.reason == "Timeout"
    assert w.message.startswith(
        'timeout 5m0s: condition "size(web) == 4" did not hold (last: web=[Pod default/web-0'
    )
    assert "flag=null" in w.message
    assert took(run) == pytest.approx(300)


def test_expression_error_fails_the_node(sim: Sim) -> None:
    run = sim.submit(workflow([wait("w", "web.size() > 'x'", {"web": WEB})]))
    sim.run()
    assert run.phase.value == "Failed"
    assert node_of(run, "w").reason == "ExpressionError"


def test_abort_and_deadline_end_the_wait(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["w1", "w2"]},
            wait("w1", "flag != null", {"flag": CM}, deadline="2m", onDeadline="Succeed"),
            wait("w2", "flag != null", {"flag": CM}),
        ]
    )
    run = sim.submit(wf)
    sim.at(600, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert node_of(run, "w1").phase.value == "Succeed" and node_of(run, "w1").reason == "DeadlineExceeded"
    assert node_of(run, "w2").reason == "ParentStopped"
    assert took(run) == pytest.approx(600)
    assert sim.manager.watch.observed_sets() == 0


def test_rendered_name_from_an_earlier_step(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["make", "w"]},
            {
                "name": "make",
                "templateType": "Resource",
                "resource": {
                    "action": "create",
                    "manifest": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"generateName": "rv-"},
                    },
                },
            },
            wait(
                "w",
                "rv != null",
                {"rv": {"apiVersion": "v1", "kind": "ConfigMap", "name": "{{ nodes.make.outputs.name }}"}},
            ),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    name = node_of(run, "make").outputs["name"]
    assert name.startswith("rv-") and node_of(run, "w").outputs == {"objects": {"rv": f"default/{name}"}}
