"""volume-main's start order (the seed: create the RV, start the attacher, resizer, replica
destroyer and creator, wait until the RV is ready, start the checker), an RV that never becomes
ready (its lifetime still ends it), and the checker's replica-condition lines ("condition rvr ==
false")."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from engine.phases import Observation
from engine.runtime import Node, WorkflowRun
from templates.library.megatest.report import MegatestRecorder
from tests.megatest.conftest import make_env

STORAGE = "storage.deckhouse.io/v1alpha1"
#: the seed's volume-main starts these right after creating the RV, before it is ready
STARTED_WITH_THE_RV = (
    "volume-attacher",
    "volume-resizer",
    "volume-replica-destroyer",
    "volume-replica-creator",
    "volume-lifetime-timer",
)


def _first(run: WorkflowRun, template: str) -> Node:
    return min((n for n in run.nodes.values() if n.template == template), key=lambda n: n.start_time or 0)


def _has(run: WorkflowRun, template: str) -> bool:
    return any(n.template == template for n in run.nodes.values())


def test_volume_main_starts_the_goroutines_before_the_rv_is_ready() -> None:
    env = make_env(enable_volume_resizer=True)
    t0 = env.clock.now()
    run = env.run_entry("volume-main", rv="rv-9", sc="a", lifetime="2m")
    assert run.phase.value == "Succeed", run.message
    create = _first(run, "volume-create-rv")
    initial = _first(run, "volume-initial-attachments")
    ready = _first(run, "volume-wait-ready")
    checker = _first(run, "volume-checker")
    assert create.finish_time is not None and initial.finish_time is not None
    assert ready.start_time is not None and ready.finish_time is not None
    # the RV became ready (not stopped by the lifetime), and that took a while in the sim
    assert ready.phase.value == "Succeed" and ready.reason is None, ready.message
    assert ready.finish_time > ready.start_time
    for t in STARTED_WITH_THE_RV:  # started right after the RV (and its initial RVAs) ...
        n = _first(run, t)
        assert n.start_time is not None
        assert create.finish_time <= initial.finish_time <= n.start_time, t
        assert n.start_time < ready.finish_time, t  # ... while it was not ready yet
    # then the checker, once the RV is ready: the RV's conditions and the replicas' watch
    assert checker.start_time == ready.finish_time
    for t in ("volume-checker-rv", "volume-checker-rvrs"):
        assert _first(run, t).start_time == ready.finish_time, t
    # the lifetime is counted from the creation, not from readiness
    timer = _first(run, "volume-lifetime-timer")
    assert timer.finish_time == pytest.approx(t0 + 120)
    # the goroutines of the seed's list are in the tree in its order
    wf = run.workflow.template_map()
    assert wf["volume-goroutines"].children == [
        "volume-lifetime",
        "volume-resizer",
        "volume-replica-destroyer",
        "volume-replica-creator",
    ]
    assert wf["volume-watch"].children == [
        "volume-lifetime-timer",
        "volume-attacher",
        "volume-ready-then-check",
    ]
    assert wf["volume-ready-then-check"].children == ["volume-wait-ready", "volume-checker"]


def test_an_rv_that_never_becomes_ready_is_ended_by_its_lifetime() -> None:
    """No such storage class: the RV never gets ready. The attacher, resizer, destroyer and creator
    ran anyway; the checker never started; at the end of the lifetime the ready wait is stopped and
    the shutdown goes in the seed's order (the RV deleted and awaited, then the rest stopped)."""
    env = make_env(enable_volume_resizer=True)
    rec = MegatestRecorder("main").attach(env.manager)
    t0 = env.clock.now()
    run = env.run_entry("volume-main", rv="rv-8", sc="no-such-class", lifetime="1m")
    assert run.phase.value == "Succeed", run.message
    ready, timer = _first(run, "volume-wait-ready"), _first(run, "volume-lifetime-timer")
    assert ready.reason == "ParentStopped" and ready.finish_time == timer.finish_time == pytest.approx(
        t0 + 60
    )
    assert not _has(run, "volume-checker") and not _has(run, "volume-checker-rv")
    assert _has(run, "volume-attacher-plan")  # the attacher did run before the RV was ready
    delete = _first(run, "volume-delete-rv")
    assert delete.phase.value == "Succeed" and delete.start_time is not None
    assert timer.finish_time is not None and delete.finish_time is not None
    assert delete.start_time >= timer.finish_time
    for t in ("volume-resizer", "volume-replica-destroyer", "volume-replica-creator"):
        n = _first(run, t)
        assert n.finish_time is not None and n.finish_time >= delete.finish_time, t
    assert env.pg().get("test", STORAGE, "ReplicatedVolume", None, "rv-8") is None
    v = rec.volumes["rv-8"]
    assert (v.created, v.deleted, v.ready, v.checked) == (True, True, False, False)
    assert v.transitions == {"IOReady": 0, "Quorum": 0} and not v.broken


def test_the_checker_logs_replica_conditions_that_turn_false(caplog: pytest.LogCaptureFixture) -> None:
    """A Diskful replica is deleted: its replacement comes up with Configured/Online False, then
    True — logged live with the rv, the rvr, the condition, its reason and message; counted per
    RV apart from the RV's IOReady/Quorum transitions (which stay 0: the RV held)."""
    env = make_env(enable_volume_replica_destroyer=False, enable_volume_replica_creator=False)
    rec = MegatestRecorder("main").attach(env.manager)
    t0 = env.clock.now()
    env.trigger.call_at(
        t0 + 30, lambda: env.pg().delete("test", STORAGE, "ReplicatedVolumeReplica", None, "rv-9-0")
    )
    with caplog.at_level(logging.INFO, logger="chaosflow.megatest"):
        run = env.run_entry("volume-main", rv="rv-9", sc="a", lifetime="3m")
    assert run.phase.value == "Succeed", run.message
    lines = [r.__dict__ for r in caplog.records if r.getMessage() == "rvr condition"]
    assert lines
    for f in lines:
        assert f["rv"] == "rv-9" and f["rvr"].startswith("rv-9-") and f["expected"] == "True"
        assert f["condition"] != "Attached"  # follows the attacher: not judged
    down = next(f for f in lines if f["observed"] == "False")
    assert down["reason"] and down["detail"]  # the condition's Reason and Message
    back = next(
        f
        for f in lines
        if (f["rvr"], f["condition"], f["observed"]) == (down["rvr"], down["condition"], "True")
    )
    assert back["at"] > down["at"]
    v = rec.volumes["rv-9"]
    assert sum(v.rvr_flips.values()) == len(lines)
    assert v.transitions == {"IOReady": 0, "Quorum": 0} and not v.broken
    # logged while the checker ran, on the run's clock
    checker = _first(run, "volume-checker")
    assert checker.start_time is not None and checker.finish_time is not None
    assert all(f["workflow"] == run.name for f in lines)


# --- the recorder's rules for replica conditions, on synthetic observations -----------------------
def _rvr(name: str, version: int, uid: str = "", **conds: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid or name, "resourceVersion": str(version)},
        "spec": {"type": "Diskful", "nodeName": "worker-01"},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": f"{t}{s}", "message": f"{t} is {s}"}
                for t, s in conds.items()
            ]
        },
    }


def test_replica_condition_flips(caplog: pytest.LogCaptureFixture) -> None:
    rec = MegatestRecorder("main")
    run: Any = SimpleNamespace(
        key="default/vol",
        name="vol",
        workflow=SimpleNamespace(spec=SimpleNamespace(parameters=[SimpleNamespace(name="rv", value="rv-1")])),
    )
    node: Any = SimpleNamespace(template="volume-checker-rvrs", name="volume-checker-rvrs-3")

    def see(*rvrs: dict[str, Any]) -> list[tuple[str, str, str]]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="chaosflow.megatest"):
            rec.observe(run, node, Observation("objectsChanged", {"objects": {"rvrs": list(rvrs)}}), 0.0)
        return [(r.__dict__["rvr"], r.__dict__["condition"], r.__dict__["observed"]) for r in caplog.records]

    # conditions start True; Attached is not judged; Unknown is not False
    assert see(_rvr("rv-1-0", 1, Online="True", Attached="False", InSync="Unknown")) == []
    assert see(_rvr("rv-1-0", 2, Online="False", InSync="False")) == [
        ("rv-1-0", "Online", "False"),
        ("rv-1-0", "InSync", "False"),
    ]
    assert see(_rvr("rv-1-0", 2, Online="True")) == []  # same resourceVersion: not looked at again
    # a new replica first seen with a False condition flips once; a condition no longer reported
    # keeps its last status
    assert see(_rvr("rv-1-0", 3, Online="True"), _rvr("rv-1-1", 1, Configured="False")) == [
        ("rv-1-0", "Online", "True"),
        ("rv-1-1", "Configured", "False"),
    ]
    assert see(_rvr("rv-1-0", 4, InSync="Unknown"), _rvr("rv-1-1", 1, Configured="False")) == [
        ("rv-1-0", "InSync", "Unknown"),
    ]
    # gone replicas are forgotten; a name reused by a new replica (another uid) starts afresh
    assert see(_rvr("rv-1-1", 1, uid="u2", Configured="False")) == [("rv-1-1", "Configured", "False")]
    assert dict(rec.volumes["rv-1"].rvr_flips) == {"Online": 2, "InSync": 2, "Configured": 2}
    assert rec.volumes["rv-1"].transitions == {"IOReady": 0, "Quorum": 0}
