"""Task: the Downward API ConfigMap (workflow JSON at /var/run/chaos-mesh/workflow.json) and outputs."""

from __future__ import annotations

import json
from typing import Any

from engine.runtime import Node, WorkflowRun
from templates import task as task_kind
from tests.helpers import workflow
from tests.sim.conftest import Sim


def one(run: WorkflowRun, name: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == name]
    return n


def sleeper(name: str, seconds: int = 30) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": ["sleep", str(seconds)]}},
    }


def test_workflow_json_is_mounted_while_the_pod_runs_and_removed_after(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["first", "t"]},
            sleeper("first", 1),
            sleeper("t"),
        ],
        parameters=[{"name": "p", "value": "v"}],
    )
    seen: dict[str, Any] = {}

    def look() -> None:
        (cm,) = [
            c for c in sim.labelled("ConfigMap") if c["metadata"]["labels"]["chaosflow.io/node"] == "t-2"
        ]
        seen["cm"] = cm
        seen["pod"] = sim.api.get("Pod", "wf-t-2", "default")

    run = sim.submit(wf)
    sim.at(10, look)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    cm = seen["cm"]
    assert cm["metadata"]["name"] == "wf-t-2-workflow"
    assert cm["metadata"]["labels"] == {
        "chaosflow.io/workflow": "wf",
        "chaosflow.io/node": "t-2",
        "chaosflow.io/template": "t",
    }
    doc = json.loads(cm["data"]["workflow.json"])
    assert doc["kind"] == "Workflow" and doc["spec"]["entry"] == "s"
    assert doc["spec"]["parameters"] == [{"name": "p", "value": "v"}]
    phases = {n["name"]: n["phase"] for n in doc["status"]["nodes"]}
    assert phases["first-1"] == "Succeed" and phases["t-2"] == "Init"  # a snapshot at task start
    pod = seen["pod"]
    assert {"name": "chaosflow-workflow", "configMap": {"name": "wf-t-2-workflow"}} in pod["spec"]["volumes"]
    mount = {"name": "chaosflow-workflow", "mountPath": "/var/run/chaos-mesh", "readOnly": True}
    assert mount in pod["spec"]["containers"][0]["volumeMounts"]
    assert sim.labelled("ConfigMap") == []  # deleted when each task ended


def test_configmap_is_deleted_when_the_task_is_stopped(sim: Sim) -> None:
    run = sim.submit(workflow([sleeper("t", 600)]))
    sim.at(20, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert sim.labelled("ConfigMap") == []
    assert all(p["metadata"].get("deletionTimestamp") for p in sim.labelled("Pod"))  # terminating


def test_huge_status_leaves_the_node_list_out(sim: Sim, monkeypatch: Any) -> None:
    monkeypatch.setattr(task_kind, "MAX_SNAPSHOT_BYTES", 10)
    run = sim.submit(workflow([sleeper("t", 1)]))
    doc = {}

    def look() -> None:
        (cm,) = sim.labelled("ConfigMap")
        doc.update(json.loads(cm["data"]["workflow.json"]))

    sim.at(0.5, look)
    sim.run()
    assert doc["status"]["nodes"] == [] and doc["status"]["nodesOmitted"] == 1
    assert run.phase.value == "Succeed"


def test_outputs_of_a_failed_task_are_visible_to_later_nodes(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "t",
                "templateType": "Task",
                "onExit": "after",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "echo partial; exit 4"]}},
            },
            {
                "name": "after",
                "templateType": "Task",
                "task": {
                    "container": {
                        "image": "busybox",
                        "command": ["echo", "{{ nodes.t.outputs.failed }} {{ nodes.t.outputs.exitCode }}"],
                    }
                },
            },
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert one(run, "after").outputs["stdout"] == "true 4"


def test_outputs_of_a_vanished_pod(sim: Sim) -> None:
    run = sim.submit(workflow([sleeper("t", 60)]))
    sim.at(5, lambda: sim.api.delete("Pod", "wf-t-0", "default", grace_period_seconds=0))
    sim.run()
    assert one(run, "t").outputs == {"exitCode": -1, "stdout": "", "failed": True}
