"""Resource's transition table, cell by cell (pure: no I/O), plus stop, resume and validation."""

from __future__ import annotations

from typing import Any

import pytest

from engine.expr import FunctionSet
from engine.phases import (
    IGNORED,
    Act,
    Event,
    EventType,
    NodePhase,
    NotifyAt,
    NotifyParent,
    Observe,
    StopReason,
    StopRequest,
    Transition,
)
from engine.runtime import Node, WorkflowRun
from engine.validate import validate_workflow
from templates import machine_for
from tests.helpers import run_with_node, workflow

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Resource")

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}}
REF = {"cluster": "default", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cm"}


def resource(**spec: Any) -> list[dict[str, Any]]:
    spec.setdefault("action", "create")
    spec.setdefault("manifest", CM)
    return [{"name": "r", "templateType": "Resource", "resource": spec}]


def ev(t: EventType, payload: object = None) -> Event:
    return Event("default/wf", "r-0", t, payload)


def apply(node: Node, tr: Transition) -> None:
    if tr.state:
        node.state.update(tr.state)
    if tr.outputs:
        node.outputs.update(tr.outputs)
    if tr.phase is not None:
        node.phase = tr.phase


def started(**spec: Any) -> tuple[WorkflowRun, Node, Transition]:
    run, node = run_with_node(resource(**spec), "r")
    run.functions = FunctionSet(run.rng, lambda: NOW)
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    apply(node, tr)
    return run, node, tr


def obj(status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    o: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default", "uid": "u-1", "resourceVersion": "7", **meta},
        "data": {"k": "v"},
    }
    if status is not None:
        o["status"] = status
    return o


PHASES = ["Init", "Running", "Holding", "Succeed", "Failed"]
EVENTS = [E.NODE_CREATED, E.NODE_ACTION_DONE, E.NODE_ACTION_FAILED, E.NODE_OBJECT_CHANGED, E.NODE_TIMEOUT]
ACTIVE = {
    ("Init", E.NODE_CREATED),
    ("Running", E.NODE_ACTION_DONE),
    ("Running", E.NODE_ACTION_FAILED),
    ("Running", E.NODE_TIMEOUT),
    ("Holding", E.NODE_OBJECT_CHANGED),
    ("Holding", E.NODE_TIMEOUT),
}


@pytest.mark.parametrize(("phase", "event"), [(p, e) for p in PHASES for e in EVENTS if (p, e) not in ACTIVE])
def test_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(resource(), "r", phase, {"object": REF, "timeoutAt": NOW})
    assert M.handle(node, ev(event), run, NOW) is IGNORED


# --- Init: render and act --------------------------------------------------------------------------
def test_create_names_labels_and_acts() -> None:
    _, node, tr = started(timeout="30s")
    assert tr.phase is P.RUNNING
    act, timer = tr.effects
    assert timer == NotifyAt(E.NODE_TIMEOUT, NOW + 30)
    assert isinstance(act, Act) and act.action == "object.create" and act.ok is E.NODE_ACTION_DONE
    labels = act.params["object"]["metadata"]["labels"]
    assert labels == {"chaosflow.io/workflow": "wf", "chaosflow.io/template": "r", "chaosflow.io/node": "r-0"}
    assert {k: act.params[k] for k in REF} == REF
    assert node.state["object"] == REF


def test_default_and_generated_names_are_deterministic() -> None:
    _, _, tr = started(manifest={"apiVersion": "v1", "kind": "ConfigMap"})
    assert tr.effects[0].params["name"] == "wf-r-0"  # type: ignore[union-attr]
    gen = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}}
    names = {started(manifest=gen)[2].effects[0].params["name"] for _ in range(2)}  # type: ignore[union-attr]
    (name,) = names
    assert name.startswith("cm-") and len(name) == len("cm-") + 5


def test_manifest_is_rendered_and_kept_for_resume() -> None:
    man = {**CM, "data": {"seed": "{{ workflow.seed }}", "n": "{{ randInt(1, 1000000) }}"}}
    run, node, tr = started(manifest=man)
    act = tr.effects[0]
    assert isinstance(act, Act) and act.params["object"]["data"]["seed"] == 0
    assert M.resume(node, run, NOW) == [Act("object.create", act.params, ok=E.NODE_ACTION_DONE)]


def test_rendering_error_fails() -> None:
    _, _, tr = started(manifest={**CM, "data": {"x": "{{ nope.field }}"}})
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError" and "nope" in (tr.message or "")
    _, _, tr = started(manifest={"apiVersion": "v1", "kind": "{{ '' }}"})
    assert tr.phase is P.FAILED and tr.reason == "InvalidManifest"


def test_apply_patch_and_delete_calls() -> None:
    _, _, tr = started(action="apply")
    act = tr.effects[0]
    assert isinstance(act, Act) and act.action == "object.apply"
    assert "chaosflow.io/node" not in act.params["object"]["metadata"]["labels"]
    _, _, tr = started(action="patch", manifest={**CM, "metadata": {"name": "cm", "labels": {"a": "b"}}})
    act = tr.effects[0]
    assert isinstance(act, Act) and act.action == "object.patch"
    assert act.params["patch"] == {"data": {"k": "v"}, "metadata": {"labels": {"a": "b"}}}
    assert act.params["patchType"] == "merge"
    ops = [{"op": "replace", "path": "/data/k", "value": "{{ 'w' }}"}]
    _, _, tr = started(action="patch", patchType="json", patch=ops)
    act = tr.effects[0]
    assert isinstance(act, Act) and act.params["patch"] == [
        {"op": "replace", "path": "/data/k", "value": "w"}
    ]
    assert act.params["patchType"] == "json"
    _, _, tr = started(action="delete")
    assert tr.effects == [Act("object.delete", REF, ok=E.NODE_ACTION_DONE)]


# --- Running: the action returned ------------------------------------------------------------------
def test_done_without_conditions_succeeds_with_outputs() -> None:
    run, node, _ = started()
    managed = obj(managedFields=[{"manager": "x"}])
    tr = M.handle(node, ev(E.NODE_ACTION_DONE, managed), run, NOW)
    assert tr.phase is P.SUCCEED and tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]
    assert tr.outputs is not None
    assert tr.outputs["name"] == "cm" and tr.outputs["uid"] == "u-1" and tr.outputs["namespace"] == "default"
    assert "managedFields" not in tr.outputs["object"]["metadata"]


def test_done_with_pending_condition_observes_the_object() -> None:
    run, node, _ = started(successCondition="object.status.phase == 'Ready'")
    tr = M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW)
    assert tr.phase is P.HOLDING and tr.effects == [Observe("default", "v1", "ConfigMap", "default", "cm")]


def test_done_with_condition_already_true_succeeds() -> None:
    run, node, _ = started(successCondition="object.data.k == 'v'")
    assert M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW).phase is P.SUCCEED


def test_failure_condition_alone_is_checked_once() -> None:
    run, node, _ = started(failureCondition="object.data.k == 'bad'")
    assert M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW).phase is P.SUCCEED
    run, node, _ = started(failureCondition="object.data.k == 'v'")
    tr = M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "FailureCondition"


@pytest.mark.parametrize(
    ("gone", "wait", "phase"), [(True, True, P.SUCCEED), (False, False, P.SUCCEED), (False, True, P.HOLDING)]
)
def test_delete_done(gone: bool, wait: bool, phase: NodePhase) -> None:
    run, node, _ = started(action="delete", waitForDeletion=wait)
    tr = M.handle(node, ev(E.NODE_ACTION_DONE, {"gone": gone}), run, NOW)
    assert tr.phase is phase
    assert tr.outputs == {"name": "cm", "namespace": "default"}
    if phase is P.HOLDING:
        assert tr.effects == [Observe("default", "v1", "ConfigMap", "default", "cm")]


def test_action_failed_fails_with_what_and_why() -> None:
    run, node, _ = started()
    tr = M.handle(node, ev(E.NODE_ACTION_FAILED, "namespace not found"), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ResourceActionFailed"
    assert tr.message == "create ConfigMap default/cm: namespace not found"


def test_timeout_while_running() -> None:
    run, node, _ = started(timeout="10s")
    assert M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 9) is IGNORED
    tr = M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 10)
    assert tr.phase is P.FAILED and tr.reason == "Timeout" and "did not complete" in (tr.message or "")


# --- Holding: watching the object ----------------------------------------------------------------
def holding(**spec: Any) -> tuple[WorkflowRun, Node]:
    run, node, _ = started(**spec)
    apply(node, M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW))
    assert node.phase is P.HOLDING
    return run, node


READY = "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"


def test_condition_holds_on_a_change() -> None:
    run, node = holding(successCondition=READY)
    not_yet = M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj({"conditions": []})), run, NOW)
    assert not_yet.phase is None and "ConfigMap default/cm" in (not_yet.state or {})["last"]
    ready = obj({"conditions": [{"type": "Ready", "status": "True"}]})
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, ready), run, NOW)
    assert (
        tr.phase is P.SUCCEED and tr.outputs is not None and tr.outputs["object"]["status"] == ready["status"]
    )


def test_a_missing_field_means_not_yet_a_type_error_fails() -> None:
    run, node = holding(successCondition=READY)
    assert M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj()), run, NOW).phase is None  # no status yet
    run, node, _ = started(successCondition="object.data.k + 1 == 2")
    tr = M.handle(node, ev(E.NODE_ACTION_DONE, obj()), run, NOW)
    assert (
        tr.phase is P.FAILED and tr.reason == "ExpressionError" and "successCondition" in (tr.message or "")
    )


def test_failure_condition_while_waiting() -> None:
    run, node = holding(successCondition=READY, failureCondition="object.status.phase == 'Failed'")
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj({"phase": "Failed"})), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "FailureCondition"
    assert "failureCondition \"object.status.phase == 'Failed'\" holds" in (tr.message or "")


def test_object_deleted_while_waiting_fails() -> None:
    run, node = holding(successCondition=READY)
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, None), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ObjectVanished"


def test_wait_for_deletion() -> None:
    run, node, _ = started(action="delete", waitForDeletion=True, timeout="1m")
    apply(node, M.handle(node, ev(E.NODE_ACTION_DONE, {"gone": False}), run, NOW))
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj(deletionTimestamp="x", finalizers=["f"])), run, NOW)
    assert tr.phase is None
    apply(node, tr)
    timeout = M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 60)
    assert timeout.phase is P.FAILED and "the object still exists (ConfigMap default/cm (deleting))" in (
        timeout.message or ""
    )
    assert M.handle(node, ev(E.NODE_OBJECT_CHANGED, None), run, NOW).phase is P.SUCCEED


def test_timeout_names_the_condition_and_the_last_state() -> None:
    run, node = holding(successCondition=READY, timeout="30s")
    apply(node, M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj({"phase": "Pending"})), run, NOW))
    tr = M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 30)
    assert tr.phase is P.FAILED and tr.reason == "Timeout"
    assert tr.message == (
        f'timeout 30s: create ConfigMap default/cm: successCondition "{READY}" did not hold '
        "(last: ConfigMap default/cm (phase=Pending))"
    )


# --- stop and resume -------------------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["Init", "Running", "Holding"])
def test_abort_finishes_at_once(phase: str) -> None:
    run, node = run_with_node(resource(), "r", phase, {"object": REF})
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "aborted")), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "Aborted"


def test_resume_observes_again_and_re_arms_the_timeout() -> None:
    run, node = holding(successCondition=READY, timeout="30s")
    assert M.resume(node, run, NOW + 5) == [
        NotifyAt(E.NODE_TIMEOUT, NOW + 30),
        Observe("default", "v1", "ConfigMap", "default", "cm"),
    ]


# --- validation --------------------------------------------------------------------------------------
def issues(**spec: Any) -> list[str]:
    return [
        str(i).removeprefix("wf.yaml: spec.templates[0].")
        for i in validate_workflow(workflow(resource(**spec)), "wf.yaml")
    ]


def test_validation() -> None:
    assert issues() == []
    assert issues(action="patch", patchType="json", patch=[{"op": "remove", "path": "/data/k"}]) == []
    assert issues(manifest={"metadata": {"name": "x"}}) == [
        "resource.manifest.apiVersion: required",
        "resource.manifest.kind: required",
    ]
    assert issues(action="delete", manifest={"apiVersion": "v1", "kind": "ConfigMap"}) == [
        "resource.manifest.metadata.name: required for delete"
    ]
    assert issues(action="patch", patchType="json", patch={"a": 1}) == [
        "resource.patch: a json patch is a list of operations"
    ]
    assert issues(patch={"a": 1}) == ["resource.patch: not used by action create"]
    assert issues(waitForDeletion=True) == ["resource.waitForDeletion: not used by action create"]
    assert issues(action="delete", successCondition="true") == [
        "resource.successCondition: not used by action delete (use waitForDeletion)"
    ]
    (bad,) = issues(successCondition="object.x ==")
    assert bad.startswith("resource.successCondition: invalid expression")
    (bad,) = issues(manifest={**CM, "data": {"k": "{{ 1 + }}"}})
    assert bad.startswith("resource.manifest.data.k: ")
    found = [str(i) for i in validate_workflow(workflow([{"name": "r", "templateType": "Resource"}]), "f")]
    assert found == [
        "f: spec.templates[0].resource: Resource template needs resource.action and resource.manifest"
    ]
