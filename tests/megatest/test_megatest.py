"""volume-main's shutdown order, the whole run (report, injected bug, determinism), the CLI."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from engine.cli import main
from engine.model import Workflow
from engine.validate import validate_workflow
from templates.library.megatest.options import MegatestOptions
from templates.library.megatest.run import run_megatest
from tests.megatest.conftest import ALL, SPLIT_BRAIN_BUG, make_env


def _first(run, template):  # type: ignore[no-untyped-def]
    return min((n for n in run.nodes.values() if n.template == template), key=lambda n: n.start_time or 0)


def _has(run, template) -> bool:  # type: ignore[no-untyped-def]
    return any(n.template == template for n in run.nodes.values())


@pytest.mark.parametrize("resizer", [False, True])
def test_volume_main_shutdown_order(resizer: bool) -> None:
    env = make_env(enable_volume_resizer=resizer)
    run = env.run_entry("volume-main", rv="rv-9", sc="a", lifetime="2m")
    assert run.phase.value == "Succeed", run.message
    delete = _first(run, "volume-delete-rv")
    assert delete.phase.value == "Succeed"
    timer = _first(run, "volume-lifetime-timer")
    assert timer.phase.value == "Succeed" and timer.reason is None  # the lifetime expired
    # stopped first, when the lifetime expires: the checker (both watches) and the attacher
    for t in ("volume-checker", "volume-checker-rv", "volume-checker-rvrs", "volume-attacher"):
        n = _first(run, t)
        assert n.finish_time is not None and n.finish_time <= delete.start_time, t
        assert n.finish_time == timer.finish_time and n.reason == "ParentStopped", t
    # stopped after the RV is gone
    later = ["volume-replica-destroyer", "volume-replica-creator"] + (["volume-resizer"] if resizer else [])
    for t in later:
        n = _first(run, t)
        assert n.finish_time is not None and n.finish_time >= delete.finish_time, t
        assert n.phase.value == "Succeed" and n.reason == "ParentStopped", t
    assert _has(run, "volume-resizer") == resizer
    rvas = _first(run, "volume-delete-rvas")
    assert rvas.finish_time <= delete.start_time  # all RVAs first
    gone = _first(run, "volume-wait-rvas-gone")
    assert gone.finish_time is not None and gone.finish_time <= delete.start_time
    main_node = _first(run, "volume-main")
    assert main_node.finish_time is not None and main_node.finish_time >= max(
        _first(run, t).finish_time or 0 for t in later
    )  # then it exits
    assert env.pg().get("test", "storage.deckhouse.io/v1alpha1", "ReplicatedVolume", None, "rv-9") is None


def _opts(**kw: object) -> MegatestOptions:
    return MegatestOptions(storage_classes=["a", "b"], **{**ALL, "duration": 900.0, "seed": 7, **kw})  # type: ignore[arg-type]


def test_run_reports_and_is_deterministic() -> None:
    a = run_megatest(_opts(), "json", io.StringIO())
    b = run_megatest(_opts(), "json", io.StringIO())
    assert a.report == b.report
    r = a.report
    assert r["rvsCreated"] > 0 and r["rvsCreated"] == r["rvsDeleted"]
    assert r["cleanupFailures"] == []
    # an RV may break (two faults at once: docs/megatest.md); it is the one with an odd count
    for rv, v in r["volumes"].items():
        assert (rv in r["brokenRVs"]) == any(n % 2 for n in v["transitions"].values()), rv
    assert len(r["brokenRVs"]) <= 1
    assert a.exit_code == (1 if r["brokenRVs"] else 0)
    assert any(k.startswith("volume-attacher") for k in r["actions"])
    assert {"pod-destroy-agent", "pod-destroy-controller"} <= set(r["incidents"])
    for v in r["volumes"].values():
        assert set(v["transitions"]) == {"IOReady", "Quorum"}
        assert v["ready"] and v["checked"]  # every RV became ready within its lifetime
    # the replicas' condition flips are logged and counted per RV, apart from the verdict
    assert sum(sum(v["rvrConditionFlips"].values()) for v in r["volumes"].values()) > 0
    c = run_megatest(_opts(seed=8), "json", io.StringIO())
    assert c.report != a.report


def test_injected_bug_is_reported_by_the_checker() -> None:
    o = SPLIT_BRAIN_BUG
    out = io.StringIO()
    res = run_megatest(o, "text", out)
    assert res.report["brokenRVs"], out.getvalue()
    assert res.exit_code == 1
    assert "broken: " in out.getvalue()


def test_cli_yaml_validates(capsys: pytest.CaptureFixture[str]) -> None:
    flags = [f"--{k.replace('_', '-')}" for k in ALL]
    assert main(["megatest", "--storage-classes", "a,b", "-o", "yaml", *flags]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    wf = Workflow.model_validate(doc)
    assert validate_workflow(wf, "megatest.yaml") == []
    names = {t.name for t in wf.spec.templates}
    for g in (
        "multivolume",
        "volume-spawner",
        "volume-main",
        "volume-checker",
        "volume-attacher",
        "volume-replica-destroyer",
        "volume-replica-creator",
        "volume-resizer",
        "pod-destroyer-agent",
        "pod-destroyer-controller",
        "chaos-network-blocker",
        "chaos-network-degrader",
        "chaos-vm-reboter",
        "chaos-startup-cleanup",
    ):
        assert g in names, g
    assert "DEFERRED" in (next(t.description for t in wf.spec.templates if t.name == "volume-resizer") or "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--volume-step-min", "4"], "--volume-step-min (4) is greater than --volume-step-max (3)"),
        (["--chaos-loss-percent", "1.5"], "--chaos-loss-percent must be within 0.0..1.0"),
        (["--storage-classes", "nope:Bad"], "--storage-classes"),
        (["--kubeconfig", "/k", "--enable-chaos-vm-reboot"], "need --parent-kubeconfig"),
        (["--step-period-min", "1m", "--step-period-max", "10s"], "--step-period-min (1m0s) is greater"),
    ],
)
def test_cli_invalid_flags(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = [] if "--storage-classes" in args else ["--storage-classes", "a,b"]
    assert main(["megatest", *base, *args, "-o", "yaml"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert all(line.startswith("megatest: ") for line in err.strip().splitlines())


def test_cli_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["megatest", "--storage-classes", "a", "--duration", "3m", "--report", "json", "--log-level", "error"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["phase"] == "Succeed" and doc["rvsCreated"] >= 1
