"""StatusCheck: the pure state machine, cell by cell, and its validation."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import ValidationFailed
from engine.loader import load_workflows_text
from engine.phases import (
    IGNORED,
    AbortWorkflow,
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
from templates import machine_for
from templates.statuscheck import status_code_range
from tests.helpers import run_with_node

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("StatusCheck")


def http_check(**sc: Any) -> dict[str, Any]:
    tmpl_extra: dict[str, Any] = {k: sc.pop(k) for k in ("abortWithStatusCheck", "deadline") if k in sc}
    return {
        "name": "sc",
        "templateType": "StatusCheck",
        "statusCheck": {"type": "HTTP", "http": {"url": "http://web.default.svc/"}, **sc},
        **tmpl_extra,
    }


def kube_check(**sc: Any) -> dict[str, Any]:
    return {
        "name": "sc",
        "templateType": "StatusCheck",
        "statusCheck": {
            "type": "Kubernetes",
            "kubernetes": {
                "apiVersion": "example.io/v1",
                "kind": "Volume",
                "name": "rv-1",
                "conditions": [{"type": "IOReady"}, {"type": "Quorum"}],
            },
            **sc,
        },
    }


def ev(t: EventType, payload: Any = None) -> Event:
    return Event("default/wf", "sc-0", t, payload)


def step(node: Node, run: WorkflowRun, e: Event, now: float = NOW) -> Transition:
    """Handle ``e`` and apply the transition to ``node`` (as the manager does, minus effects)."""
    tr = M.handle(node, e, run, now)
    if tr.state:
        node.state.update(tr.state)
    if tr.outputs:
        node.outputs.update(tr.outputs)
    if tr.phase is not None:
        node.phase = tr.phase
    if tr.message is not None:
        node.message = tr.message
    if tr.reason is not None:
        node.reason = tr.reason
    return tr


def started(tmpl: dict[str, Any]) -> tuple[WorkflowRun, Node, Transition]:
    run, node = run_with_node([tmpl], "sc")
    node.start_time = NOW
    tr = step(node, run, ev(E.NODE_CREATED))
    return run, node, tr


def result(
    node: Node, run: WorkflowRun, code: int | None, now: float, error: str | None = None
) -> Transition:
    step(node, run, ev(E.NODE_PROBE), now)
    payload: dict[str, Any] = {"seq": node.state["seq"]}
    payload |= {"error": error} if error else {"statusCode": code}
    return step(node, run, ev(E.NODE_PROBE_RESULT, payload), now)


def obj(**conds: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.io/v1",
        "kind": "Volume",
        "metadata": {"name": "rv-1", "namespace": "default"},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conds.items()]},
    }


# --- Init -----------------------------------------------------------------------------------------
def test_created_http_probes_now_and_arms_the_end() -> None:
    _, node, tr = started(http_check(duration="1m"))
    assert tr.phase is P.RUNNING
    assert tr.effects == [NotifyAt(E.NODE_PROBE, NOW), NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 60)]
    assert node.state["target"]["url"] == "http://web.default.svc/"
    assert node.outputs == {
        "probes": 0,
        "successes": 0,
        "failures": 0,
        "transitions": 0,
        "healthy": None,
        "history": [],
    }


def test_created_kubernetes_watches_the_object_first() -> None:
    _, node, tr = started(kube_check(mode="Continuous"))
    assert tr.effects[0] == Observe("default", "example.io/v1", "Volume", "default", "rv-1")
    assert tr.effects[1] == NotifyAt(E.NODE_PROBE, NOW)
    assert node.outputs["conditionTransitions"] == {"IOReady": 0, "Quorum": 0}


@pytest.mark.parametrize(
    "event", [E.NODE_PROBE, E.NODE_PROBE_RESULT, E.NODE_OBJECT_CHANGED, E.NODE_HOLDING_AWAKE]
)
def test_init_ignores_everything_but_created(event: EventType) -> None:
    run, node = run_with_node([http_check()], "sc")
    assert M.handle(node, ev(event), run, NOW) is IGNORED


@pytest.mark.parametrize("phase", ["Succeed", "Failed"])
@pytest.mark.parametrize("event", [E.NODE_CREATED, E.NODE_PROBE, E.NODE_PROBE_RESULT, E.NODE_HOLDING_AWAKE])
def test_finished_ignores_everything(phase: str, event: EventType) -> None:
    run, node = run_with_node([http_check()], "sc", phase)
    assert M.handle(node, ev(event), run, NOW) is IGNORED


# --- HTTP probes -----------------------------------------------------------------------------------
def test_probe_calls_the_actor_once_at_a_time() -> None:
    run, node, _ = started(http_check(timeoutSeconds=2))
    tr = step(node, run, ev(E.NODE_PROBE))
    (act,) = tr.effects
    assert isinstance(act, Act) and act.action == "probe.http"
    assert act.params["timeout"] == 2.0 and act.params["seq"] == 1 and act.params["method"] == "GET"
    assert act.ok is E.NODE_PROBE_RESULT and act.fail is E.NODE_PROBE_RESULT
    assert node.state["nextProbeAt"] == NOW + 10
    assert M.handle(node, ev(E.NODE_PROBE), run, NOW) is IGNORED  # one in flight


def test_stale_probe_timer_is_ignored() -> None:
    run, node, _ = started(http_check(successThreshold=2))
    result(node, run, 200, NOW)
    assert M.handle(node, ev(E.NODE_PROBE), run, NOW + 5) is IGNORED


def test_synchronous_succeeds_after_success_threshold() -> None:
    run, node, _ = started(http_check(successThreshold=2, intervalSeconds=5))
    tr = result(node, run, 200, NOW)
    assert tr.phase is None and tr.effects == [NotifyAt(E.NODE_PROBE, NOW + 5)]
    tr = result(node, run, 204, NOW + 5)
    assert tr.phase is P.SUCCEED and tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]
    assert node.outputs["probes"] == 2 and node.outputs["successes"] == 2 and node.outputs["healthy"] is True


def test_failure_threshold_fails_and_a_success_resets_the_run() -> None:
    run, node, _ = started(http_check(failureThreshold=2, successThreshold=5))
    result(node, run, 500, NOW)
    result(node, run, 200, NOW + 10)
    result(node, run, 500, NOW + 20)
    tr = result(node, run, 500, NOW + 30)
    assert tr.phase is P.FAILED and tr.reason == "StatusCheckFailed"
    assert "2 consecutive failures" in node.message and "HTTP 500 (expected 200-299)" in node.message
    assert not any(isinstance(e, AbortWorkflow) for e in tr.effects)
    assert node.outputs["transitions"] == 3  # healthy -> 500 -> 200 -> 500 (counted from healthy)


def test_abort_with_status_check_aborts_the_workflow() -> None:
    run, node, _ = started(http_check(failureThreshold=1, abortWithStatusCheck=True))
    tr = result(node, run, None, NOW, error="connection refused")
    assert tr.phase is P.FAILED
    assert (
        AbortWorkflow(
            "default/wf",
            "status check sc-0 failed: 1 consecutive failures (failureThreshold 1): connection refused",
        )
        in tr.effects
    )


def test_criteria_range_and_action_failure() -> None:
    run, node, _ = started(
        http_check(
            mode="Continuous",
            failureThreshold=0,
            http={"url": "http://x.y.svc", "criteria": {"statusCode": "200-400"}},
        )
    )
    result(node, run, 400, NOW)
    assert node.outputs["healthy"] is True
    step(node, run, ev(E.NODE_PROBE), NOW + 10)
    step(node, run, ev(E.NODE_PROBE_RESULT, "ActorError: boom"), NOW + 10)  # the actor itself failed
    assert node.outputs["healthy"] is False and "boom" in node.outputs["history"][-1]["message"]


def test_result_for_another_probe_is_ignored() -> None:
    run, node, _ = started(http_check())
    step(node, run, ev(E.NODE_PROBE))
    assert M.handle(node, ev(E.NODE_PROBE_RESULT, {"seq": 99, "statusCode": 200}), run, NOW) is IGNORED


def test_failure_threshold_zero_never_fails_and_history_is_bounded() -> None:
    run, node, _ = started(http_check(mode="Continuous", failureThreshold=0, recordsHistoryLimit=3))
    for i in range(6):
        tr = result(node, run, 503, NOW + 10 * i)
        assert tr.phase is None
    hist = node.outputs["history"]
    assert len(hist) == 3 and all(h["outcome"] == "Failure" for h in hist)
    assert hist[-1]["time"] == "1970-01-01T00:17:30Z"
    assert node.outputs["failures"] == 6 and node.outputs["transitions"] == 1


def test_next_probe_never_in_the_past() -> None:
    run, node, _ = started(http_check(intervalSeconds=1, successThreshold=3))
    step(node, run, ev(E.NODE_PROBE), NOW)
    tr = step(node, run, ev(E.NODE_PROBE_RESULT, {"seq": 1, "statusCode": 200}), NOW + 2.5)  # slow answer
    assert tr.effects == [NotifyAt(E.NODE_PROBE, NOW + 2.5)]


# --- the end of the duration ------------------------------------------------------------------------
def test_continuous_succeeds_at_the_end() -> None:
    run, node, _ = started(http_check(mode="Continuous", duration="30s"))
    assert M.handle(node, ev(E.NODE_HOLDING_AWAKE), run, NOW + 29) is IGNORED
    tr = step(node, run, ev(E.NODE_HOLDING_AWAKE), NOW + 30)
    assert tr.phase is P.SUCCEED and "checked for 30s" in node.message


def test_synchronous_fails_when_not_healthy_in_time() -> None:
    run, node, _ = started(http_check(duration="30s", abortWithStatusCheck=True))
    result(node, run, 503, NOW)
    tr = step(node, run, ev(E.NODE_HOLDING_AWAKE), NOW + 30)
    assert tr.phase is P.FAILED and tr.reason == "StatusCheckTimeout"
    assert "not healthy within 30s" in node.message and "HTTP 503" in node.message
    assert any(isinstance(e, AbortWorkflow) for e in tr.effects)


# --- Kubernetes probes --------------------------------------------------------------------------------
def test_kubernetes_counts_condition_transitions_from_the_expected_status() -> None:
    run, node, _ = started(kube_check(mode="Continuous", failureThreshold=0))
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="True")))
    assert node.outputs["transitions"] == 0 and node.outputs["history"] == []
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="False", Quorum="True")), NOW + 1)
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="False", Quorum="False")), NOW + 2)
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="False")), NOW + 3)
    assert node.outputs["conditionTransitions"] == {"IOReady": 2, "Quorum": 1}  # even: held; odd: broken
    assert node.outputs["transitions"] == 1  # overall health went down once, is still down
    assert [h["outcome"] for h in node.outputs["history"]] == ["Failure", "Failure", "Failure"]
    assert node.outputs["history"][-1]["message"] == "watch: Volume default/rv-1: IOReady=True, Quorum=False"
    # the same status again is not a change
    assert (
        M.handle(node, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="False")), run, NOW + 4)
        is IGNORED
    )


def test_kubernetes_object_gone_breaks_every_condition() -> None:
    run, node, _ = started(kube_check(mode="Continuous", failureThreshold=0))
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="True")))
    step(node, run, ev(E.NODE_OBJECT_CHANGED, None), NOW + 1)
    assert node.outputs["conditionTransitions"] == {"IOReady": 1, "Quorum": 1}
    assert node.state["lastObserved"] == "not found"


def test_kubernetes_probe_judges_the_latest_observation() -> None:
    run, node, _ = started(kube_check(failureThreshold=2))
    # the probe timer fires before the watch delivered the object: the probe waits for it
    tr = step(node, run, ev(E.NODE_PROBE))
    assert tr.effects == [] and node.state["probeDue"] is True
    tr = step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="False")))
    assert node.outputs["probes"] == 1 and node.outputs["healthy"] is False
    assert tr.effects == [NotifyAt(E.NODE_PROBE, NOW + 10)]
    tr = step(node, run, ev(E.NODE_PROBE), NOW + 10)
    assert tr.phase is P.FAILED
    assert node.message.endswith("Volume default/rv-1: IOReady=True, Quorum=False")


def test_kubernetes_synchronous_success() -> None:
    run, node, _ = started(kube_check())
    step(node, run, ev(E.NODE_OBJECT_CHANGED, obj(IOReady="True", Quorum="True")))
    tr = step(node, run, ev(E.NODE_PROBE))
    assert tr.phase is P.SUCCEED


def test_single_condition_type_and_existence_only() -> None:
    tmpl = kube_check()
    tmpl["statusCheck"]["kubernetes"] = {"kind": "Pod", "name": "web-0", "conditionType": "Ready"}
    run, node, _ = started(tmpl)
    assert node.state["target"]["conditions"] == [["Ready", "True"]]
    tmpl["statusCheck"]["kubernetes"] = {"kind": "Pod", "name": "web-0"}
    run, node, _ = started(tmpl)
    step(node, run, ev(E.NODE_OBJECT_CHANGED, {"kind": "Pod", "metadata": {"name": "web-0"}}))
    assert step(node, run, ev(E.NODE_PROBE)).phase is P.SUCCEED


# --- stop and resume --------------------------------------------------------------------------------
@pytest.mark.parametrize("succeed", [True, False])
def test_stop_ends_at_once(succeed: bool) -> None:
    run, node, _ = started(http_check(mode="Continuous"))
    req = StopRequest(StopReason.PARENT_STOPPED, "lifetime over", succeed=succeed)
    tr = M.handle(node, ev(E.NODE_ABORT, req), run, NOW + 5)
    assert tr.phase is (P.SUCCEED if succeed else P.FAILED)


def test_resume_rearms_timers_and_reissues_an_inflight_probe() -> None:
    run, node, _ = started(http_check(duration="1m", successThreshold=2))
    step(node, run, ev(E.NODE_PROBE))
    effects = M.resume(node, run, NOW + 1)
    assert NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 60) in effects
    (act,) = [e for e in effects if isinstance(e, Act)]
    assert act.params["seq"] == 1  # the same probe: its late answer is accepted once
    step(node, run, ev(E.NODE_PROBE_RESULT, {"seq": 1, "statusCode": 200}), NOW + 1)
    effects = M.resume(node, run, NOW + 2)
    assert NotifyAt(E.NODE_PROBE, NOW + 10) in effects


def test_resume_kubernetes_reobserves() -> None:
    run, node, _ = started(kube_check(mode="Continuous", duration="1m"))
    effects = M.resume(node, run, NOW + 1)
    assert effects[0] == Observe("default", "example.io/v1", "Volume", "default", "rv-1")
    assert NotifyAt(E.NODE_PROBE, NOW) in effects


# --- validation ------------------------------------------------------------------------------------
def _doc(*templates: dict[str, Any], **spec: Any) -> str:
    import json

    return json.dumps(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "wf"},
            "spec": {"entry": templates[0]["name"], "templates": list(templates), **spec},
        }
    )


def _problems(*templates: dict[str, Any], **spec: Any) -> list[str]:
    try:
        load_workflows_text(_doc(*templates, **spec), "wf.yaml")
    except ValidationFailed as e:
        return [str(i) for i in e.issues]
    return []


def test_validation_of_the_probe() -> None:
    assert _problems(http_check(duration="10s")) == []
    bad = http_check()
    bad["statusCheck"]["type"] = "Kubernetes"
    assert _problems(bad) == [
        "wf.yaml: spec.templates[0].statusCheck.kubernetes: required for type Kubernetes",
        "wf.yaml: spec.templates[0].statusCheck.http: not used by type Kubernetes",
    ]
    assert any(
        "invalid statusCode" in p
        for p in _problems(http_check(http={"url": "x", "criteria": {"statusCode": "2xx"}}))
    )
    assert any("url" in p for p in _problems(http_check(http={"url": "http://{{ 1 + }}"})))
    assert _problems({"name": "sc", "templateType": "StatusCheck"}) == [
        "wf.yaml: spec.templates[0].statusCheck: StatusCheck template needs a statusCheck spec"
    ]
    assert any(
        "abortWithStatusCheck: not used by templateType Suspend" in p
        for p in _problems(
            {"name": "z", "templateType": "Suspend", "duration": "1s", "abortWithStatusCheck": True}
        )
    )


def test_a_check_that_could_run_forever_is_rejected() -> None:
    forever = http_check(mode="Continuous")
    assert any("never ends while the service stays healthy" in p for p in _problems(forever))
    assert _problems(forever, deadline="1h") == []
    lifetime = {
        "name": "p",
        "templateType": "Parallel",
        "children": ["sc"],
        "deadline": "1m",
        "onDeadline": "Succeed",
    }
    assert _problems(lifetime, forever) == []
    never_fails = http_check(failureThreshold=0)
    assert any("never fails needs a duration" in p for p in _problems(never_fails))


def test_status_code_ranges() -> None:
    assert status_code_range("200") == (200, 200)
    assert status_code_range("200-400") == (200, 400)
    assert status_code_range(" 200 - 299 ") == (200, 299)
    assert status_code_range("400-200") is None
    assert status_code_range("2xx") is None


def test_chaos_mesh_status_check_is_accepted() -> None:
    text = """
apiVersion: chaos-mesh.org/v1alpha1
kind: Workflow
metadata: {name: try-workflow-status-check}
spec:
  entry: the-entry
  templates:
    - {name: the-entry, templateType: Parallel, deadline: 240s, children: [workflow-status-check]}
    - name: workflow-status-check
      templateType: StatusCheck
      deadline: 20s
      abortWithStatusCheck: true
      statusCheck:
        mode: Continuous
        type: HTTP
        intervalSeconds: 1
        timeoutSeconds: 1
        http:
          url: http://1.1.1.1
          method: GET
          criteria: {statusCode: "200"}
"""
    (wf,) = load_workflows_text(text, "cm.yaml")
    t = wf.template_map()["workflow-status-check"]
    assert t.statusCheck is not None and t.statusCheck.mode == "Continuous" and t.abortWithStatusCheck
    assert t.onDeadline == "Succeed"  # Chaos Mesh: the deadline of a continuous check is its lifetime
