"""The child Workflow kind: its pure state machine, the child document, and validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.errors import ValidationFailed
from engine.loader import load_workflows_text
from engine.phases import (
    IGNORED,
    AbortWorkflow,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyParent,
    StopReason,
    StopRequest,
    SubmitWorkflow,
    Transition,
)
from engine.runtime import Node, WorkflowRun
from templates import machine_for
from tests.helpers import run_with_node

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Workflow")
BODY: list[dict[str, Any]] = [
    {"name": "body", "templateType": "Serial", "children": ["z"]},
    {"name": "z", "templateType": "Suspend", "duration": "1s"},
    {"name": "unrelated", "templateType": "Suspend", "duration": "1s"},
]


def spawn(**cw: Any) -> dict[str, Any]:
    return {"name": "spawn", "templateType": "Workflow", "workflow": {"from": "body", **cw}}


def ev(t: EventType, payload: Any = None) -> Event:
    return Event("default/wf", "spawn-0", t, payload)


def step(node: Node, run: WorkflowRun, e: Event) -> Transition:
    tr = M.handle(node, e, run, NOW)
    if tr.state:
        node.state.update(tr.state)
    if tr.outputs:
        node.outputs.update(tr.outputs)
    if tr.phase is not None:
        node.phase = tr.phase
    return tr


def created(**cw: Any) -> tuple[WorkflowRun, Node, SubmitWorkflow]:
    run, node = run_with_node([spawn(**cw), *BODY], "spawn")
    tr = step(node, run, ev(E.NODE_CREATED))
    assert tr.phase is P.RUNNING
    (sub,) = tr.effects
    assert isinstance(sub, SubmitWorkflow)
    return run, node, sub


def status(phase: str, message: str = "", key: str = "default/wf-spawn-0") -> dict[str, Any]:
    return {"workflow": key, "phase": phase, "message": message}


def test_created_submits_a_deterministic_child() -> None:
    run, node, sub = created(labels={"role": "volume"}, parameters={"n": 3})
    doc = sub.workflow
    assert doc["metadata"] == {
        "name": "wf-spawn-0",
        "namespace": "default",
        "labels": {
            "role": "volume",
            "chaosflow.io/parent-workflow": "wf",
            "chaosflow.io/parent-node": "spawn-0",
        },
        "annotations": {"chaosflow.io/stop-with-parent": "true"},
    }
    assert doc["spec"]["entry"] == "body"
    assert [t["name"] for t in doc["spec"]["templates"]] == ["body", "z"]
    assert doc["spec"]["parameters"] == [{"name": "n", "value": 3}]
    assert isinstance(sub.seed, int) and sub.seed == node.state["seed"]
    assert node.state["child"] == "default/wf-spawn-0"
    # the same state always gives the same document (resume)
    assert step(node, run, ev(E.NODE_RETRY)).effects == [sub]


def test_name_prefix_and_long_names() -> None:
    _, _, sub = created(name="vol-")
    assert sub.workflow["metadata"]["name"] == "vol-spawn-0"
    _, _, sub = created(name="v" * 80)
    name = sub.workflow["metadata"]["name"]
    assert len(name) <= 63 and name.startswith("vvvv")


def test_waited_child_ends_the_node_with_its_phase() -> None:
    run, node, _ = created()
    assert step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Init"))).phase is None
    assert node.state["submitted"] is True
    assert M.handle(node, ev(E.NODE_WORKFLOW_SUBMITTED, status("Running")), run, NOW) is IGNORED
    assert (
        M.handle(node, ev(E.NODE_WORKFLOW_FINISHED, status("Succeed", key="default/other")), run, NOW)
        is IGNORED
    )
    tr = step(node, run, ev(E.NODE_WORKFLOW_FINISHED, status("Failed", "boom")))
    assert tr.phase is P.FAILED and tr.reason == "ChildWorkflowFailed"
    assert tr.message == "child workflow default/wf-spawn-0 failed: boom"
    assert tr.effects == [NotifyParent(E.CHILD_NODE_FAILED)]


def test_a_child_found_finished_ends_the_node() -> None:
    run, node, _ = created()
    tr = step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Succeed")))
    assert tr.phase is P.SUCCEED and node.outputs["phase"] == "Succeed"


def test_detached_child_succeeds_once_started() -> None:
    run, node, sub = created(wait=False, stopWithParent=False)
    assert sub.workflow["metadata"]["annotations"] == {"chaosflow.io/stop-with-parent": "false"}
    tr = step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Init")))
    assert tr.phase is P.SUCCEED and tr.message == "started child workflow default/wf-spawn-0 (detached)"


def test_submission_failure_fails_the_node() -> None:
    run, node, _ = created()
    tr = step(node, run, ev(E.NODE_ACTION_FAILED, "workflow default/wf-spawn-0 already exists"))
    assert tr.phase is P.FAILED and tr.reason == "ChildWorkflowSubmitFailed"


@pytest.mark.parametrize("cleanup", [True, False])
def test_stop_aborts_the_waited_child_and_ends_when_it_ended(cleanup: bool) -> None:
    run, node, _ = created()
    step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Running")))
    req = StopRequest(StopReason.ABORTED, "stop", succeed=False, cleanup=cleanup)
    tr = step(node, run, ev(E.NODE_ABORT, req))
    assert tr.phase is None
    assert tr.effects == [
        AbortWorkflow("default/wf-spawn-0", "parent node spawn-0: stop", terminate=not cleanup)
    ]
    assert M.handle(node, ev(E.NODE_ABORT, req), run, NOW) is IGNORED  # already stopping
    tr = step(node, run, ev(E.NODE_WORKFLOW_FINISHED, status("Failed", "parent node spawn-0: stop")))
    assert tr.phase is P.FAILED and tr.reason == "Aborted"


def test_stop_before_the_submission_answered() -> None:
    run, node, _ = created()
    req = StopRequest(StopReason.DEADLINE_EXCEEDED, "deadline 5s exceeded", succeed=True)
    tr = step(node, run, ev(E.NODE_ABORT, req))
    assert tr.effects == [] and tr.phase is None
    tr = step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Init")))
    assert tr.effects == [AbortWorkflow("default/wf-spawn-0", "parent node spawn-0: deadline 5s exceeded")]
    tr = step(node, run, ev(E.NODE_WORKFLOW_FINISHED, status("Failed")))
    assert tr.phase is P.SUCCEED  # the deadline was a lifetime


def test_stop_of_a_detached_node_before_the_answer() -> None:
    run, node, _ = created(wait=False)
    step(node, run, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "stop")))
    tr = step(node, run, ev(E.NODE_WORKFLOW_SUBMITTED, status("Init")))
    assert tr.phase is P.FAILED
    assert AbortWorkflow("default/wf-spawn-0", "parent node spawn-0: stop") in tr.effects


def test_stop_in_init_ends_at_once() -> None:
    run, node = run_with_node([spawn(), *BODY], "spawn")
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "x")), run, NOW)
    assert tr.phase is P.FAILED and tr.effects == [NotifyParent(E.CHILD_NODE_FAILED)]


def test_resume_resubmits_through_an_event() -> None:
    run, node, _ = created()
    assert M.resume(node, run, NOW) == [Notify(E.NODE_RETRY)]


def test_inline_spec_document() -> None:
    inline = {
        "entry": "a",
        "seed": 5,
        "parameters": [{"name": "x", "value": 1}],
        "templates": [{"name": "a", "templateType": "Suspend", "duration": "{{ workflow.parameters.d }}"}],
    }
    run, node = run_with_node(
        [
            {
                "name": "spawn",
                "templateType": "Workflow",
                "workflow": {"spec": inline, "parameters": {"x": 2, "d": "3s"}},
            }
        ],
        "spawn",
    )
    tr = step(node, run, ev(E.NODE_CREATED))
    (sub,) = tr.effects
    assert isinstance(sub, SubmitWorkflow)
    assert sub.seed is None  # the inline spec's own seed applies
    assert sub.workflow["spec"]["parameters"] == [{"name": "x", "value": 2}, {"name": "d", "value": "3s"}]
    assert sub.workflow["spec"]["templates"][0]["duration"] == "{{ workflow.parameters.d }}"  # the child's


# --- validation ---------------------------------------------------------------------------------------
def _problems(*templates: dict[str, Any]) -> list[str]:
    doc = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entry": templates[0]["name"], "templates": list(templates)},
    }
    try:
        load_workflows_text(json.dumps(doc), "wf.yaml")
    except ValidationFailed as e:
        return [str(i) for i in e.issues]
    return []


def test_validation() -> None:
    assert _problems(spawn(), *BODY[:2]) == []
    assert _problems({"name": "s", "templateType": "Workflow", "workflow": {}}) == [
        "wf.yaml: spec.templates[0].workflow: set exactly one of workflow.from and workflow.spec"
    ]
    assert _problems({"name": "s", "templateType": "Workflow"}) == [
        "wf.yaml: spec.templates[0].workflow: Workflow template needs a workflow spec (from or spec)"
    ]
    assert _problems(spawn(**{"from": "nope"})) == [
        'wf.yaml: spec.templates[0].workflow.from: unknown template "nope"'
    ]
    # `from` makes its target reachable; a child spawning its own parent is a cycle
    cyc = _problems(
        {"name": "main", "templateType": "Serial", "children": ["again"]},
        {"name": "again", "templateType": "Workflow", "workflow": {"from": "main"}},
    )
    assert cyc == ["wf.yaml: spec.templates[0]: cycle: main -> again -> main"]
    bad_expr = _problems(spawn(parameters={"n": "{{ 1 + }}"}), *BODY[:2])
    assert len(bad_expr) == 1 and bad_expr[0].startswith("wf.yaml: spec.templates[0].workflow.parameters.n: ")


def test_inline_spec_is_validated_as_a_workflow() -> None:
    inline = {
        "entry": "a",
        "templates": [
            {"name": "a", "templateType": "Serial", "children": ["missing"]},
            {"name": "B", "templateType": "Suspend"},
        ],
    }
    problems = _problems({"name": "s", "templateType": "Workflow", "workflow": {"spec": inline}})
    base = "wf.yaml: spec.templates[0].workflow.spec."
    expected = [
        ("templates[1].duration: ", "Suspend template needs a duration"),
        ("templates[1].name: ", 'invalid template name "B"'),
        ("templates[0].children[0]: ", 'unknown template "missing"'),
        ("templates[1]: ", 'template "B" is unreachable from entry "a"'),
    ]
    assert len(problems) == len(expected)
    for (path, text), got in zip(expected, problems, strict=True):
        assert got.startswith(base + path) and text in got, got
    schema = _problems({"name": "s", "templateType": "Workflow", "workflow": {"spec": {"entry": "a"}}})
    assert schema == ["wf.yaml: spec.templates[0].workflow.spec.templates: required"]
