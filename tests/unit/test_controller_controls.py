"""Controls in controller mode: parsing the control annotations, planning the Kubernetes form of
`chaosflow stop|terminate|suspend|unsuspend`, and the level-based reconciler on the simulated
engine (virtual clock)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.control import (
    ANN_APPROVE,
    ANN_SUSPEND,
    ANN_SUSPEND_NODES,
    AnnotationControls,
    AnnotationReconciler,
    ControlRejected,
    kube_plan,
    parse_annotations,
    split_names,
)
from engine.runtime import WorkflowRun
from tests.helpers import workflow
from tests.sim.conftest import make_sim


# --- parsing ----------------------------------------------------------------------------------------
def test_no_annotations_ask_for_nothing() -> None:
    assert parse_annotations(None) == AnnotationControls()
    assert parse_annotations({"other": "true"}) == AnnotationControls()


@pytest.mark.parametrize(
    ("ann", "want"),
    [
        ({"chaosflow.io/abort": "true"}, {"stop": True}),
        ({"workflow.chaos-mesh.org/abort": "TRUE"}, {"stop": True}),
        ({"chaosflow.io/abort": "false", "workflow.chaos-mesh.org/abort": "true"}, {"stop": True}),
        ({"chaosflow.io/terminate": "True"}, {"terminate": True}),
        ({"chaosflow.io/suspend": " true "}, {"suspend": True}),
        ({"chaosflow.io/suspend": "false"}, {}),
        ({"chaosflow.io/suspend": ""}, {}),
        ({"chaosflow.io/suspend-nodes": "a, b,,a c"}, {"suspend_nodes": ("a", "b", "c")}),
        ({"chaosflow.io/approve": "approve-3"}, {"approve": ("approve-3",)}),
        ({"chaosflow.io/approve": ""}, {}),
    ],
)
def test_parse(ann: dict[str, str], want: dict[str, Any]) -> None:
    assert parse_annotations(ann) == AnnotationControls(**want)


def test_a_value_neither_true_nor_false_is_reported_and_ignored() -> None:
    got = parse_annotations({"chaosflow.io/suspend": "yes", "chaosflow.io/terminate": "1"})
    assert not got.suspend and not got.terminate
    assert len(got.problems) == 2 and all("neither" in p for p in got.problems)


def test_split_names() -> None:
    assert split_names(None) == ()
    assert split_names(" x ,y\ty ,") == ("x", "y")


# --- the CLI's plan ---------------------------------------------------------------------------------
def obj(
    phase: str = "Running", nodes: list[dict[str, Any]] | None = None, ann: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "ns", "annotations": ann or {}, "resourceVersion": "1"},
        "spec": {"templates": [{"name": "main"}, {"name": "gate"}, {"name": "s"}]},
        "status": {"phase": phase, "nodes": nodes or [], "engine": {"revision": 1}},
    }


def node(name: str, template: str, phase: str, kind: str = "Suspend", **state: Any) -> dict[str, Any]:
    return {"name": name, "templateName": template, "templateType": kind, "phase": phase, "state": state}


def test_plan_rejects_a_finished_workflow_and_unknown_nodes() -> None:
    with pytest.raises(ControlRejected, match=r"already finished \(Succeed\)"):
        kube_plan("stop", obj("Succeed"))
    o = obj(nodes=[node("gate-1", "gate", "Succeed")])
    with pytest.raises(ControlRejected, match="node gate-1 already finished"):
        kube_plan("suspend", o, "gate-1")
    with pytest.raises(ControlRejected, match="no unfinished node of template 'gate'"):
        kube_plan("suspend", o, "gate")
    with pytest.raises(ControlRejected, match="no node or template 'zzz'"):
        kube_plan("unsuspend", o, "zzz")
    with pytest.raises(ControlRejected, match="nothing to continue in ns/w"):
        kube_plan("unsuspend", o)


def test_plan_suspend_and_stop() -> None:
    p = kube_plan("suspend", obj())
    assert p.annotations == {ANN_SUSPEND: "true"} and not p.already
    assert not p.done(obj()) and p.done({**obj(), "status": {"phase": "Running", "suspended": True}})
    done = {**obj(ann={ANN_SUSPEND: "true"}), "status": {"phase": "Running", "suspended": True}}
    assert kube_plan("suspend", done).already
    o = obj(nodes=[node("s-1", "s", "Holding"), node("s-2", "s", "Init")], ann={ANN_SUSPEND_NODES: "x"})
    p = kube_plan("suspend", o, "s")
    assert p.annotations == {ANN_SUSPEND_NODES: "x,s"} and p.says == "suspended s-1, s-2"
    assert kube_plan("stop", obj()).annotations == {"chaosflow.io/abort": "true"}
    assert kube_plan("terminate", obj()).annotations == {"chaosflow.io/terminate": "true"}


def test_plan_unsuspend_approves_waiting_manual_steps_and_prunes_finished_names() -> None:
    o = obj(
        nodes=[
            node("gate-1", "gate", "Succeed"),
            node("gate-2", "gate", "Holding", manual=True),
            node("s-3", "s", "Holding"),  # a timed wait: only ended when named
        ],
        ann={ANN_SUSPEND: "true", ANN_APPROVE: "gate-1,other"},
    )
    p = kube_plan("unsuspend", o)
    assert p.annotations == {ANN_SUSPEND: None, ANN_SUSPEND_NODES: None, ANN_APPROVE: "other,gate-2"}
    assert p.says == "workflow ns/w continues; gate-2 resumed"
    p = kube_plan("unsuspend", o, "s")
    assert p.annotations == {ANN_APPROVE: "other,s-3"}
    o = obj(nodes=[node("s-3", "s", "Init")], ann={ANN_SUSPEND_NODES: "s,t"})
    assert kube_plan("unsuspend", o, "s").annotations == {ANN_SUSPEND_NODES: "t"}


# --- the reconciler on the simulated engine ------------------------------------------------------------
def _steps(*names: str, manual: bool = False) -> list[dict[str, Any]]:
    extra: dict[str, Any] = {"manual": True} if manual else {"duration": "10s"}
    return [
        {"name": "main", "templateType": "Serial", "children": list(names)},
        *({"name": n, "templateType": "Suspend", **extra} for n in names),
    ]


def _started(run: WorkflowRun, template: str) -> float | None:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    assert run.start_time is not None and n.start_time is not None
    return round(n.start_time - run.start_time, 3)


def test_suspend_annotation_is_level_based() -> None:
    sim = make_sim()
    run = sim.submit(workflow(_steps("a", "b")))
    rec = AnnotationReconciler(sim.manager)
    log: list[list[tuple[str, str, str]]] = []
    on = parse_annotations({ANN_SUSPEND: "true"})
    off = parse_annotations({})
    sim.at(5, lambda: log.append(rec.reconcile(run.key, on)))
    sim.at(6, lambda: log.append(rec.reconcile(run.key, on)))  # the same again: nothing
    sim.at(30, lambda: log.append(rec.reconcile(run.key, off)))
    sim.at(31, lambda: log.append(rec.reconcile(run.key, off)))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert [[r for _, r, _ in x] for x in log] == [["Suspended"], [], ["Resumed"], []]
    assert _started(run, "b") == 30  # a was due at 10, held until the annotation went


def test_suspend_nodes_annotation_and_restart_reapplies_nothing() -> None:
    sim = make_sim()
    run = sim.submit(workflow(_steps("a", "b")))
    rec = AnnotationReconciler(sim.manager)
    log: list[list[tuple[str, str, str]]] = []
    sim.at(5, lambda: log.append(rec.reconcile(run.key, parse_annotations({ANN_SUSPEND_NODES: "main"}))))
    # a restarted controller: a new reconciler, the run's state as restored from status
    fresh = AnnotationReconciler(sim.manager)
    sim.at(8, lambda: log.append(fresh.reconcile(run.key, parse_annotations({ANN_SUSPEND_NODES: "main"}))))
    sim.at(20, lambda: log.append(fresh.reconcile(run.key, parse_annotations({}))))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert [[(r, m) for _, r, m in x] for x in log] == [
        [("Suspended", "suspended main-0")],
        [],
        [("Resumed", "main-0 continues")],
    ]
    assert _started(run, "b") == 20


def test_approve_annotation_ends_holding_steps_once() -> None:
    sim = make_sim()
    run = sim.submit(workflow(_steps("gate", "next", manual=True)))
    rec = AnnotationReconciler(sim.manager)
    log: list[list[tuple[str, str, str]]] = []
    want = parse_annotations({ANN_APPROVE: "gate,nosuch,next-9"})  # next-9: a node to come
    sim.at(5, lambda: log.append(rec.reconcile(run.key, want)))
    sim.at(5, lambda: log.append(rec.reconcile(run.key, want)))  # before the resume is processed
    sim.at(6, lambda: log.append(rec.reconcile(run.key, want)))
    sim.at(7, lambda: log.append(rec.reconcile(run.key, parse_annotations({ANN_APPROVE: "next-2"}))))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert [[r for _, r, _ in x] for x in log] == [["InvalidControl", "Approved"], [], [], ["Approved"]]


def test_terminate_annotation_skips_the_exit_handler_and_stop_after_is_ignored() -> None:
    sim = make_sim()
    templates = [*_steps("a"), {"name": "bye", "templateType": "Suspend", "duration": "1s"}]
    run = sim.submit(workflow(templates, onExit="bye"))
    rec = AnnotationReconciler(sim.manager)
    log: list[list[tuple[str, str, str]]] = []
    both = parse_annotations({"chaosflow.io/terminate": "true", "chaosflow.io/abort": "true"})
    sim.at(2, lambda: log.append(rec.reconcile(run.key, both)))
    sim.at(2, lambda: log.append(rec.reconcile(run.key, both)))
    sim.run()
    assert run.phase.value == "Failed" and "terminated" in run.message
    assert [[r for _, r, _ in x] for x in log] == [["Terminated"], []]
    assert "bye" not in {n.template for n in run.nodes.values()}
