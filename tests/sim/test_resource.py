"""Resource on the simulated cluster with the virtual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.loader import load_workflow_file
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import workflow
from tests.sim.conftest import Sim

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


def node_of(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    return n


def res(name: str, action: str, manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    extra = {k: spec.pop(k) for k in ("deadline", "onDeadline") if k in spec}
    return {
        "name": name,
        "templateType": "Resource",
        "resource": {"action": action, "manifest": manifest, **spec},
        **extra,
    }


def cm(name: str, **data: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def pod(name: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probe"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": command}],
        },
    }


def serial(name: str, *children: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "templateType": "Serial", "children": list(children), **extra}


def test_example_runs(sim: Sim) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "resource.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert sim.api.list("ConfigMap", "default", "chaosflow.io/workflow")["items"] == []


def test_create_is_idempotent_and_outputs_flow_to_later_steps(sim: Sim) -> None:
    sim.api.create({**cm("existing", a="old")})
    wf = workflow(
        [
            serial("s", "make", "again", "copy"),
            res("make", "create", cm("{{ workflow.name }}-settings", seed="{{ string(workflow.seed) }}")),
            res("again", "create", cm("existing", a="new")),  # AlreadyExists: success, object unchanged
            res("copy", "create", cm("copy", uid="{{ nodes.make.outputs.uid }}")),
        ],
        seed=5,
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    made = sim.api.get("ConfigMap", "wf-settings", "default")
    assert made["data"] == {"seed": "5"}
    assert made["metadata"]["labels"]["chaosflow.io/node"] == node_of(run, "make").name
    assert node_of(run, "make").outputs["uid"] == made["metadata"]["uid"]
    assert sim.api.get("ConfigMap", "copy", "default")["data"]["uid"] == made["metadata"]["uid"]
    assert sim.api.get("ConfigMap", "existing", "default")["data"] == {"a": "old"}
    assert node_of(run, "again").outputs["object"]["data"] == {"a": "old"}


def test_apply_creates_then_merges(sim: Sim) -> None:
    wf = workflow(
        [
            serial("s", "first", "second"),
            res("first", "apply", cm("conf", a="1", b="1")),
            res("second", "apply", cm("conf", b="2", c="3")),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert sim.api.get("ConfigMap", "conf", "default")["data"] == {"a": "1", "b": "2", "c": "3"}


def test_merge_and_json_patch(sim: Sim) -> None:
    sim.api.create(cm("conf", a="1", b="1"))
    ops = [{"op": "remove", "path": "/data/a"}, {"op": "add", "path": "/data/d", "value": "{{ 'four' }}"}]
    wf = workflow(
        [
            serial("s", "merge", "json"),
            res("merge", "patch", cm("conf", b="2")),
            res(
                "json",
                "patch",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf"}},
                patchType="json",
                patch=ops,
            ),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert sim.api.get("ConfigMap", "conf", "default")["data"] == {"b": "2", "d": "four"}


def test_patch_of_a_missing_object_fails_with_the_api_error(sim: Sim) -> None:
    run = sim.submit(workflow([res("p", "patch", cm("missing", a="1"))]))
    sim.run()
    assert run.phase.value == "Failed"
    p = node_of(run, "p")
    assert p.reason == "ResourceActionFailed" and p.message.startswith("patch ConfigMap default/missing: ")
    assert "not found" in p.message


def test_success_condition_is_watch_driven(sim: Sim) -> None:
    wf = workflow(
        [
            res(
                "job",
                "create",
                pod("sleeper", ["sleep", "600"]),
                successCondition="object.status.phase == 'Succeeded'",
                failureCondition="object.status.phase == 'Failed'",
            )
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert run.finish_time is not None and run.start_time is not None
    assert 600 <= run.finish_time - run.start_time <= 602
    # no polling: a handful of events for ten virtual minutes
    assert sim.manager.events < 30
    out = node_of(run, "job").outputs["object"]
    assert out["status"]["phase"] == "Succeeded"


def test_failure_condition_fails(sim: Sim) -> None:
    wf = workflow(
        [
            res(
                "job",
                "create",
                pod("failing", ["sh", "-c", "sleep 5; exit 2"]),
                successCondition="object.status.phase == 'Succeeded'",
                failureCondition="object.status.phase == 'Failed'",
            )
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    job = node_of(run, "job")
    assert job.reason == "FailureCondition" and "Pod default/failing (phase=Failed" in job.message


def test_timeout_fails_with_the_condition_and_last_state(sim: Sim) -> None:
    wf = workflow(
        [
            res(
                "r",
                "create",
                pod("slow", ["sleep", "3600"]),
                successCondition="object.status.phase == 'Succeeded'",
                timeout="2m",
            )
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    r = node_of(run, "r")
    assert r.reason == "Timeout"
    assert r.message.startswith("timeout 2m0s: create Pod default/slow: successCondition")
    assert "(last: Pod default/slow (phase=Running" in r.message
    assert run.finish_time is not None and run.start_time is not None
    assert run.finish_time - run.start_time == pytest.approx(120)


def test_delete_waits_for_finalizers(sim: Sim) -> None:
    sim.api.create({**cm("held"), "metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    wf = workflow([res("del", "delete", cm("held"), waitForDeletion=True)])
    run = sim.submit(wf)
    sim.at(45, lambda: sim.api.patch("ConfigMap", "held", {"metadata": {"finalizers": None}}, "default"))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert run.finish_time is not None and run.start_time is not None
    assert run.finish_time - run.start_time == pytest.approx(45)
    # deleting what is not there is success
    run2 = sim.submit(workflow([res("del", "delete", cm("never"))], name="wf2"))
    sim.run()
    assert run2.phase.value == "Succeed"


def test_abort_while_waiting_ends_the_node(sim: Sim) -> None:
    wf = workflow(
        [
            res(
                "r",
                "create",
                pod("p", ["sleep", "3600"]),
                successCondition="object.status.phase == 'Succeeded'",
            )
        ]
    )
    run = sim.submit(wf)
    sim.at(30, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert node_of(run, "r").reason == "Aborted"
    assert sim.manager.watch.observed() == 0


def test_deadline_while_waiting(sim: Sim) -> None:
    wf = workflow(
        [
            res(
                "r",
                "create",
                pod("p", ["sleep", "3600"]),
                successCondition="object.status.phase == 'Succeeded'",
                deadline="90s",
                onDeadline="Succeed",
            ),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed"
    assert node_of(run, "r").reason == "DeadlineExceeded"
