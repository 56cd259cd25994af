"""Wait's transition table, cell by cell (pure: no I/O), and the ObserveKind watch trigger."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from engine.phases import (
    IGNORED,
    Event,
    EventType,
    NodePhase,
    NotifyAt,
    NotifyParent,
    ObservedLists,
    ObserveKind,
    StopReason,
    StopRequest,
    Transition,
)
from engine.runtime import Node, WorkflowRun
from engine.validate import validate_workflow
from templates import machine_for
from tests.helpers import run_with_node, workflow
from triggers.operable import OperableTrigger
from triggers.watch import ObjectWatchTrigger

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Wait")

RV = {"apiVersion": "v1", "kind": "ConfigMap", "name": "rv"}
PODS = {"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "web"}}}


def wait(condition: str = "rv != null && size(pods) == 2", **spec: Any) -> list[dict[str, Any]]:
    spec.setdefault("objects", {"rv": RV, "pods": PODS})
    return [{"name": "w", "templateType": "Wait", "wait": {"condition": condition, **spec}}]


def ev(t: EventType, payload: object = None) -> Event:
    return Event("default/wf", "w-0", t, payload)


def apply(node: Node, tr: Transition) -> None:
    if tr.state:
        node.state.update(tr.state)
    if tr.phase is not None:
        node.phase = tr.phase


def started(
    condition: str = "rv != null && size(pods) == 2", **spec: Any
) -> tuple[WorkflowRun, Node, Transition]:
    run, node = run_with_node(wait(condition, **spec), "w")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    apply(node, tr)
    return run, node, tr


def cm(name: str = "rv", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }


def pod(name: str, phase: str = "Running") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "status": {"phase": phase}}


def lists(rv: list[dict[str, Any]] | None = None, pods: list[dict[str, Any]] | None = None) -> ObservedLists:
    out: dict[str, list[dict[str, Any]]] = {}
    if rv is not None:
        out["rv"] = rv
    if pods is not None:
        out["pods"] = pods
    return ObservedLists(out)


PHASES = ["Init", "Holding", "Succeed", "Failed"]
EVENTS = [E.NODE_CREATED, E.NODE_OBJECT_CHANGED, E.NODE_TIMEOUT]
ACTIVE = {("Init", E.NODE_CREATED), ("Holding", E.NODE_OBJECT_CHANGED), ("Holding", E.NODE_TIMEOUT)}


@pytest.mark.parametrize(("phase", "event"), [(p, e) for p in PHASES for e in EVENTS if (p, e) not in ACTIVE])
def test_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(wait(), "w", phase, {"timeoutAt": NOW, "sets": {}})
    assert M.handle(node, ev(event, lists([], [])), run, NOW) is IGNORED


def test_created_observes_every_set_and_arms_the_timeout() -> None:
    _, node, tr = started(timeout="5m")
    assert tr.phase is P.HOLDING
    assert tr.effects == [
        ObserveKind("default", "v1", "ConfigMap", "default", None, "rv", key="rv"),
        ObserveKind("default", "v1", "Pod", "default", "app=web", None, key="pods"),
        NotifyAt(E.NODE_TIMEOUT, NOW + 300),
    ]
    assert node.state["timeoutAt"] == NOW + 300


def test_sets_are_rendered_and_all_namespaces_is_the_empty_string() -> None:
    objects = {
        "rv": {**RV, "name": "{{ workflow.name + '-rv' }}"},
        "nodes": {"apiVersion": "v1", "kind": "Node", "namespace": "", "labelSelector": "zone in (a,b)"},
    }
    _, _, tr = started("true", objects=objects)
    assert tr.effects == [
        ObserveKind("default", "v1", "ConfigMap", "default", None, "wf-rv", key="rv"),
        ObserveKind("default", "v1", "Node", None, "zone in (a,b)", None, key="nodes"),
    ]


def test_rendering_error_fails() -> None:
    _, _, tr = started(objects={"rv": {**RV, "name": "{{ nope }}"}})
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError"


def test_condition_waits_for_every_set_then_holds() -> None:
    run, node, _ = started()
    assert M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists(rv=[cm()])), run, NOW) is IGNORED
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([], [pod("a"), pod("b")])), run, NOW)
    assert tr.phase is None and (tr.state or {})["last"].startswith("rv=null; pods=[Pod default/a")
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([cm()], [pod("a"), pod("b")])), run, NOW)
    assert tr.phase is P.SUCCEED and tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]
    assert tr.outputs == {"objects": {"rv": "default/rv", "pods": ["default/a", "default/b"]}}


def test_a_field_of_a_missing_object_means_not_yet() -> None:
    run, node, _ = started("rv.data.ready == 'yes'")
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([], [])), run, NOW)
    assert tr.phase is None and (tr.state or {})["lastError"]
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([cm(other="x")], [])), run, NOW)
    assert tr.phase is None and "no such key" in (tr.state or {})["lastError"]
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([cm(ready="yes")], [])), run, NOW)
    assert tr.phase is P.SUCCEED


def test_other_errors_fail_with_the_message() -> None:
    run, node, _ = started("size(pods) + 'x' == 1")
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([], [])), run, NOW)
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError"
    assert (tr.message or "").startswith('wait.condition: evaluating "size(pods)')


def test_list_condition_over_every_object() -> None:
    run, node, _ = started("size(pods) > 0 && pods.all(p, p.status.phase == 'Running')")
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([], [pod("a"), pod("b", "Pending")])), run, NOW)
    assert tr.phase is None
    tr = M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([], [pod("a"), pod("b")])), run, NOW)
    assert tr.phase is P.SUCCEED


def test_timeout_names_the_condition_and_the_last_values() -> None:
    run, node, _ = started(timeout="1m")
    apply(node, M.handle(node, ev(E.NODE_OBJECT_CHANGED, lists([cm()], [pod("a")])), run, NOW))
    assert M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 59) is IGNORED
    tr = M.handle(node, ev(E.NODE_TIMEOUT), run, NOW + 60)
    assert tr.phase is P.FAILED and tr.reason == "Timeout"
    assert tr.message == (
        'timeout 1m0s: condition "rv != null && size(pods) == 2" did not hold '
        "(last: rv=ConfigMap default/rv; pods=[Pod default/a (phase=Running)])"
    )


def test_abort_and_lifetime_deadline() -> None:
    run, node, _ = started()
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "stop")), run, NOW)
    assert tr.phase is P.FAILED
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.PARENT_STOPPED, "p", succeed=True)), run, NOW)
    assert tr.phase is P.SUCCEED


def test_resume_observes_the_stored_sets_again() -> None:
    run, node, tr = started(timeout="1m")
    assert M.resume(node, run, NOW + 1) == [NotifyAt(E.NODE_TIMEOUT, NOW + 60), *tr.effects[:2]]


def issues(condition: str = "true", **spec: Any) -> list[str]:
    wf = workflow(wait(condition, **spec))
    return [str(i).removeprefix("wf.yaml: spec.templates[0].") for i in validate_workflow(wf, "wf.yaml")]


def test_validation() -> None:
    assert issues() == []
    (bad,) = issues("rv ==")
    assert bad.startswith("wait.condition: invalid expression")
    assert issues(objects={}) == ["wait.objects: name at least one object set the condition reads"]
    found = issues(
        objects={
            "node": RV,
            "2x": RV,
            "both": {**RV, "labelSelector": "a=b"},
            "sel": {**PODS, "labelSelector": "a in (b"},
        }
    )
    assert found[0].startswith('wait.objects.node: "node" is a reserved name')
    assert found[1] == 'wait.objects["2x"]: "2x" is not a CEL identifier (letters, digits, _)'
    assert found[2] == "wait.objects.both: give name or labelSelector, not both"
    assert found[3].startswith("wait.objects.sel.labelSelector: invalid label selector")
    found = [str(i) for i in validate_workflow(workflow([{"name": "w", "templateType": "Wait"}]), "f")]
    assert found == ["f: spec.templates[0].wait: Wait template needs wait.condition and wait.objects"]


# --- the ObserveKind trigger ----------------------------------------------------------------------
@pytest.fixture
def world() -> tuple[SimWorld, ObjectWatchTrigger, list[Event]]:
    clock = VirtualClock()
    w = SimWorld(clock, OperableTrigger(clock))
    events: list[Event] = []
    return w, ObjectWatchTrigger(w.playground, events.append), events


def names(e: Event, key: str) -> list[str]:
    assert isinstance(e.payload, ObservedLists)
    return [o["metadata"]["name"] for o in e.payload.lists[key]]


def test_observe_kind_delivers_the_set_now_and_on_every_change(
    world: tuple[SimWorld, ObjectWatchTrigger, list[Event]],
) -> None:
    w, trig, events = world
    api = w.clusters["default"].api
    api.create({**cm("a"), "metadata": {"name": "a", "namespace": "default", "labels": {"app": "web"}}})
    trig.observe_kind("wf", "n", "default", "v1", "ConfigMap", "default", "app=web", None, "cms")
    assert [names(e, "cms") for e in events] == [["a"]]
    api.create({**cm("b"), "metadata": {"name": "b", "namespace": "default", "labels": {"app": "web"}}})
    api.create(cm("other"))  # not in the set: no event
    api.patch("ConfigMap", "a", {"data": {"x": "1"}}, "default")
    api.patch("ConfigMap", "b", {"metadata": {"labels": {"app": "db"}}}, "default")  # leaves the set
    api.delete("ConfigMap", "a", "default")
    assert [names(e, "cms") for e in events] == [["a"], ["a", "b"], ["a", "b"], ["a"], []]
    assert events[2].payload.lists["cms"][0]["data"] == {"x": "1"}
    assert {(e.workflow, e.node, e.type) for e in events} == {("wf", "n", E.NODE_OBJECT_CHANGED)}
    trig.unobserve_node("wf", "n")
    api.create({**cm("c"), "metadata": {"name": "c", "namespace": "default", "labels": {"app": "web"}}})
    assert len(events) == 5 and trig.observed_sets() == 0


def test_a_node_gets_all_its_sets_in_each_event(
    world: tuple[SimWorld, ObjectWatchTrigger, list[Event]],
) -> None:
    w, trig, events = world
    api = w.clusters["default"].api
    trig.observe_kind("wf", "n", "default", "v1", "ConfigMap", "default", None, "rv", "rv")
    trig.observe_kind("wf", "n", "default", "v1", "Pod", None, None, None, "pods")
    assert isinstance(events[-1].payload, ObservedLists) and events[-1].payload.lists == {
        "pods": [],
        "rv": [],
    }
    api.create(cm("rv"))
    assert names(events[-1], "rv") == ["rv"] and names(events[-1], "pods") == []
    api.create(cm("not-rv"))
    assert len(events) == 3
    # the single-object Observe keeps working alongside
    trig.observe("wf", "m", "default", "v1", "ConfigMap", "default", "rv")
    api.patch("ConfigMap", "rv", {"data": {"k": "2"}}, "default")
    kinds = [type(e.payload).__name__ for e in events[3:]]
    assert sorted(kinds) == ["ObservedLists", "dict", "dict"]


def test_observe_kind_filters_by_namespace(world: tuple[SimWorld, ObjectWatchTrigger, list[Event]]) -> None:
    w, trig, events = world
    api = w.clusters["default"].api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    trig.observe_kind("wf", "n", "default", "v1", "ConfigMap", "other", None, None, "cms")
    api.create(cm("a"))
    api.create({**cm("b"), "metadata": {"name": "b", "namespace": "other"}})
    assert [names(e, "cms") for e in events] == [[], ["b"]]
