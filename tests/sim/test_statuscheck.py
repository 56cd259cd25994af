"""StatusCheck on the simulated cluster (virtual clock): HTTP probes answered from Services,
Kubernetes-condition probes driven by watches, thresholds, abort, lifetime, crash/resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from engine.loader import load_workflow_file
from engine.manager import WorkflowManager
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun, run_from_record, run_to_record
from tests.helpers import net, took, workflow
from tests.sim.conftest import Sim, make_sim
from triggers.operable import OperableTrigger

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase
STATUS = "sim.chaosflow.io/http-status"


def only(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    return n


def service(sim: Sim, name: str, status: str | None = None, selector: dict[str, str] | None = None) -> None:
    ann = {STATUS: status} if status is not None else {}
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if selector:
        spec["selector"] = selector
    sim.api.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "annotations": ann},
            "spec": spec,
        }
    )


def set_status(sim: Sim, name: str, status: str) -> None:
    sim.api.patch("Service", name, {"metadata": {"annotations": {STATUS: status}}}, "default")


def http_check(name: str = "sc", url: str = "http://web.default.svc/healthz", **sc: Any) -> dict[str, Any]:
    tmpl: dict[str, Any] = {
        k: sc.pop(k) for k in ("abortWithStatusCheck", "deadline", "onDeadline") if k in sc
    }
    return {
        "name": name,
        "templateType": "StatusCheck",
        "statusCheck": {"type": "HTTP", "http": {"url": url}, **sc},
        **tmpl,
    }


# --- HTTP ---------------------------------------------------------------------------------------------
def test_synchronous_http_check_waits_for_ready_endpoints(sim: Sim) -> None:
    service(sim, "web", selector={"app": "web"})  # the world's web pods start ~1 s after t=0
    run = sim.submit(workflow([http_check(intervalSeconds=1, successThreshold=2, duration="30s")]))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    sc = only(run, "sc")
    first = sc.outputs["history"][0]
    assert first["outcome"] == "Failure" and "no ready endpoints" in first["message"]
    assert sc.outputs["successes"] == 2 and sc.outputs["failures"] >= 1
    assert took(run) <= 4


def test_continuous_http_counts_transitions_and_fails_on_the_threshold(sim: Sim) -> None:
    service(sim, "web", status="200")
    run = sim.submit(
        workflow([http_check(mode="Continuous", duration="5m", intervalSeconds=10, failureThreshold=3)])
    )
    sim.at(25, lambda: set_status(sim, "web", "503"))
    sim.at(45, lambda: set_status(sim, "web", "200"))
    sim.at(105, lambda: set_status(sim, "web", "500"))
    sim.run()
    assert run.phase.value == "Failed"
    sc = only(run, "sc")
    assert sc.reason == "StatusCheckFailed" and "HTTP 500 (expected 200-299)" in sc.message
    assert took(run) == pytest.approx(130)  # failures at 110, 120, 130
    outcomes = [h["outcome"][0] for h in sc.outputs["history"]]
    assert "".join(outcomes) == "SSSFFSSSSSSFFF"
    assert sc.outputs["transitions"] == 3  # odd: broken at the end


def test_abort_with_status_check_aborts_the_whole_workflow_and_removes_chaos(sim: Sim) -> None:
    """A failed check inside a loop that tolerates failures still stops everything."""

    def build(abort: bool) -> Any:
        return workflow(
            [
                {"name": "p", "templateType": "Parallel", "children": ["chaos", "checks"]},
                net("chaos", "1h"),
                {
                    "name": "checks",
                    "templateType": "Loop",
                    "loop": {"child": "sc", "count": 3, "continueOnFailure": True},
                },
                http_check(
                    failureThreshold=2, successThreshold=100, intervalSeconds=5, abortWithStatusCheck=abort
                ),
            ]
        )

    service(sim, "web", status="200")
    sim.at(60, lambda: set_status(sim, "web", "503"))
    run = sim.submit(build(True))
    sim.run()
    assert run.phase.value == "Failed"
    assert run.message.startswith("status check sc-")
    assert took(run) == pytest.approx(65.1, abs=0.01)  # failures at 60 and 65; chaos removed in 0.1 s
    assert all(n.phase.finished for n in run.nodes.values())
    assert sim.chaos_objects() == []

    other = make_sim()
    service(other, "web", status="200")
    other.at(60, lambda: set_status(other, "web", "503"))
    run2 = other.submit(build(False))
    other.run()
    assert run2.phase.value == "Succeed"  # the loop tolerated the failed checks
    assert took(run2) > 3600


def test_synchronous_check_of_a_missing_service_times_out(sim: Sim) -> None:
    run = sim.submit(
        workflow([http_check(url="http://nope.default.svc", failureThreshold=0, duration="30s")])
    )
    sim.run()
    sc = only(run, "sc")
    assert sc.phase is P.FAILED and sc.reason == "StatusCheckTimeout"
    assert "no such host" in sc.message
    assert took(run) == 30


def test_timeout_seconds_against_a_slow_service(sim: Sim) -> None:
    service(sim, "slow", status="200")
    sim.api.patch("Service", "slow", {"metadata": {"annotations": {"sim.chaosflow.io/http-latency": "3s"}}})
    run = sim.submit(
        workflow([http_check(url="http://slow.default.svc", timeoutSeconds=2, failureThreshold=1)])
    )
    sim.run()
    sc = only(run, "sc")
    assert sc.phase is P.FAILED and "timeout after 2s" in sc.message


def test_lifetime_parent_ends_a_continuous_check_with_success(sim: Sim) -> None:
    service(sim, "web", status="200")
    wf = workflow(
        [
            {
                "name": "p",
                "templateType": "Parallel",
                "children": ["sc"],
                "deadline": "1m",
                "onDeadline": "Succeed",
            },
            http_check(mode="Continuous"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    sc = only(run, "sc")
    assert sc.phase is P.SUCCEED and sc.outputs["probes"] == 6
    assert took(run) == 60


# --- Kubernetes ---------------------------------------------------------------------------------------
def volumes(sim: Sim) -> None:
    sim.api.register_kind("example.io", "v1", "Volume", has_status_subresource=True)
    sim.api.create({"apiVersion": "example.io/v1", "kind": "Volume", "metadata": {"name": "rv-1"}})
    set_conditions(sim, IOReady="True", Quorum="True")


def set_conditions(sim: Sim, **conds: str) -> None:
    cur = sim.api.get("Volume", "rv-1", "default", api_version="example.io/v1")
    have = {c["type"]: c["status"] for c in (cur.get("status") or {}).get("conditions") or []}
    have.update(conds)
    status = {"conditions": [{"type": t, "status": s} for t, s in sorted(have.items())]}
    sim.api.patch_status("Volume", "rv-1", {"status": status}, "default", api_version="example.io/v1")


def volume_checker(**extra: Any) -> dict[str, Any]:
    return {
        "name": "checker",
        "templateType": "StatusCheck",
        "deadline": "10m",
        "onDeadline": "Succeed",
        "statusCheck": {
            "mode": "Continuous",
            "type": "Kubernetes",
            "failureThreshold": 0,
            "intervalSeconds": 10,
            "kubernetes": {
                "apiVersion": "example.io/v1",
                "kind": "Volume",
                "name": "{{ workflow.parameters.rv }}",
                "conditions": [{"type": "IOReady"}, {"type": "Quorum"}],
            },
            **extra,
        },
    }


def flaps(sim: Sim) -> None:
    sim.at(33, lambda: set_conditions(sim, IOReady="False"))
    sim.at(33.5, lambda: set_conditions(sim, IOReady="True"))  # between two probes: only the watch sees it
    sim.at(100, lambda: set_conditions(sim, Quorum="False"))
    sim.at(200, lambda: set_conditions(sim, Quorum="True"))
    sim.at(300, lambda: set_conditions(sim, IOReady="False"))  # left broken


def test_kubernetes_check_counts_ioready_and_quorum_transitions(sim: Sim) -> None:
    volumes(sim)
    run = sim.submit(workflow([volume_checker()], parameters=[{"name": "rv", "value": "rv-1"}]))
    flaps(sim)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    c = only(run, "checker")
    assert c.outputs["conditionTransitions"] == {"IOReady": 3, "Quorum": 2}  # odd: broken, even: held
    assert c.outputs["transitions"] == 5
    assert c.outputs["probes"] == 60
    # the probes saw Quorum down 10 times (100..190) and IOReady down from 300 on (30 probes)
    assert c.outputs["failures"] == 10 + 30
    watch = [h for h in c.outputs["history"] if h["message"].startswith("watch:")]
    assert [h["message"].split(": ", 2)[2] for h in watch] == [
        "IOReady=False, Quorum=True",
        "IOReady=True, Quorum=True",
        "IOReady=True, Quorum=False",
        "IOReady=True, Quorum=True",
        "IOReady=False, Quorum=True",
    ]


def test_kubernetes_check_of_an_object_that_vanishes(sim: Sim) -> None:
    volumes(sim)
    run = sim.submit(
        workflow([volume_checker(failureThreshold=2)], parameters=[{"name": "rv", "value": "rv-1"}])
    )
    sim.at(42, lambda: sim.api.delete("Volume", "rv-1", "default", api_version="example.io/v1"))
    sim.run()
    c = only(run, "checker")
    assert c.phase is P.FAILED and "not found" in c.message
    assert took(run) == 60  # failures at 50 and 60


# --- crash and resume ------------------------------------------------------------------------------
def resume_elsewhere(sim: Sim, after_events: int | None = None, until: Any = None) -> Sim:
    """Run ``after_events`` events (or until ``until()``), then continue in a fresh engine from the
    runs' records and a snapshot of the simulated cluster, as ``chaosflow resume`` does after a
    crash: whatever was queued but not processed is lost."""
    sim.manager._tick_events = 1
    sim.manager.run(max_events=after_events, until=until)
    records = [run_to_record(r) for r in sim.manager.runs.values()]
    snap = sim.world.snapshot()
    clock = VirtualClock(sim.clock.now())
    trigger = OperableTrigger(clock)
    world = SimWorld(clock, trigger, seed=sim.world.seed)
    world.restore(snap)
    mgr = WorkflowManager(world.playground, clock, trigger)
    for rec in records:
        mgr.adopt(run_from_record(rec))
    return Sim(clock, trigger, world, mgr)


def _checker_result(sim: Sim, crash_after: int | None) -> tuple[Any, ...]:
    volumes(sim)
    sim.submit(workflow([volume_checker()], parameters=[{"name": "rv", "value": "rv-1"}]))
    flaps(sim)
    if crash_after is not None:
        sim = resume_elsewhere(sim, crash_after)
        # the scheduled flaps were callbacks of the crashed engine: schedule what is still due
        t0 = sim.manager.runs["default/wf"].start_time
        assert t0 is not None
        for at, conds in (
            (33, {"IOReady": "False"}),
            (33.5, {"IOReady": "True"}),
            (100, {"Quorum": "False"}),
            (200, {"Quorum": "True"}),
            (300, {"IOReady": "False"}),
        ):
            if t0 + at > sim.clock.now():
                sim.trigger.call_at(t0 + at, _setter(sim, conds))
    sim.run()
    (run,) = sim.manager.runs.values()
    c = only(run, "checker")
    return run.phase.value, run.finish_time, c.outputs


def _setter(sim: Sim, conds: dict[str, str]) -> Any:
    return lambda: set_conditions(sim, **conds)


@pytest.mark.parametrize("crash_after", [1, 3, 6, 20, 45])
def test_resumed_checker_ends_as_an_uninterrupted_one(crash_after: int) -> None:
    reference = _checker_result(make_sim(), None)
    assert _checker_result(make_sim(), crash_after) == reference


def test_example_runs() -> None:
    sim = make_sim()
    (wf,) = load_workflow_file(str(ROOT / "examples" / "statuscheck.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert sim.chaos_objects() == []
