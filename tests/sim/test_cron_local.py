"""CronWorkflows on the simulated cluster with the virtual clock: policies, DST, restarts, the CLI."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from engine.clock import parse_rfc3339
from engine.cron import CronWorkflow, child_name
from engine.cron_local import CronRunOptions, LocalCronRunner

ROOT = Path(__file__).resolve().parents[2]
NIGHTLY = ROOT / "examples" / "cron-nightly.yaml"
T0 = parse_rfc3339("2026-01-01T00:00:00Z")
H = 3600.0

SUSPEND_90M = [{"name": "long", "templateType": "Suspend", "duration": "90m"}]
CHAOS_90M = [
    {
        "name": "delay",
        "templateType": "NetworkChaos",
        "duration": "90m",
        "networkChaos": {
            "action": "delay",
            "mode": "all",
            "selector": {"labelSelectors": {"app": "web"}},
            "delay": {"latency": "50ms"},
        },
    }
]


def make_cron(
    templates: list[dict[str, Any]] | None = None, name: str = "hourly", **spec: Any
) -> CronWorkflow:
    spec.setdefault("schedules", ["0 * * * *"])
    templates = templates or SUSPEND_90M
    return CronWorkflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "CronWorkflow",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"workflowSpec": {"entry": templates[0]["name"], "templates": templates}, **spec},
        }
    )


def run(cron: CronWorkflow, until: str, **opts: Any) -> tuple[LocalCronRunner, int, str]:
    out, err = io.StringIO(), io.StringIO()
    r = LocalCronRunner([cron], CronRunOptions(until=until, out=out, err=err, checkpoint_interval=0, **opts))
    rc = r.run()
    return r, rc, err.getvalue()


def children(r: LocalCronRunner) -> dict[str, str]:
    return {run.name: run.phase.value for run in r.backend.children_runs(r.crons[0])}


def names(cron: str, *times: float) -> list[str]:
    return [child_name(cron, t) for t in times]


# --- policies with a long-running workflow ---------------------------------------------------------
def test_forbid_skips_while_the_90_minute_child_runs_and_records_why() -> None:
    r, rc, err = run(make_cron(concurrencyPolicy="Forbid"), "6h")
    assert rc == 0
    assert sorted(children(r)) == names("hourly", T0 + H, T0 + 3 * H, T0 + 5 * H)
    st = r.drivers[0].status
    assert st.succeeded == 2 and [a.name for a in st.active] == names("hourly", T0 + 5 * H)
    assert st.lastSkipped is not None and st.lastSkipped.reason == "ConcurrencyForbid"
    assert st.lastSkipped.scheduledTime == "2026-01-01T06:00:00Z"
    assert f"{child_name('hourly', T0 + 5 * H)} still active" in st.lastSkipped.message
    m = r.drivers[0].controller.metrics
    assert m.triggered == 3 and m.skipped == {"ConcurrencyForbid": 3}
    assert "skip 2026-01-01 02:00:00 UTC (ConcurrencyForbid:" in err


def test_replace_aborts_the_running_child_and_cleans_up_its_chaos() -> None:
    cron = make_cron(CHAOS_90M, concurrencyPolicy="Replace", failedJobsHistoryLimit=10)
    r, rc, _ = run(cron, "4h30m")
    assert rc == 0  # children aborted by Replace do not fail the run
    got = children(r)
    assert sorted(got) == names("hourly", T0 + H, T0 + 2 * H, T0 + 3 * H, T0 + 4 * H)
    replaced = names("hourly", T0 + H, T0 + 2 * H, T0 + 3 * H)
    assert [got[n] for n in replaced] == ["Failed"] * 3 and got[names("hourly", T0 + 4 * H)[0]] == "Running"
    for n in replaced:
        run_ = r.manager.runs[f"default/{n}"]
        assert "replaced by" in run_.message
    # the chaos of every replaced child was removed; only the current child's is injected
    api = r.world.clusters["default"].api
    chaos = api.list("NetworkChaos", None, api_version="chaos-mesh.org/v1alpha1")["items"]
    owners = {o["metadata"]["labels"]["chaosflow.io/workflow"] for o in chaos}
    assert owners == set(names("hourly", T0 + 4 * H))
    st = r.drivers[0].status
    assert st.failed == 3 and r.drivers[0].controller.metrics.replaced == 3


def test_allow_runs_overlapping_children() -> None:
    r, rc, _ = run(make_cron(), "3h")
    assert rc == 0
    st = r.drivers[0].status
    assert [a.name for a in st.active] == names("hourly", T0 + 2 * H, T0 + 3 * H)
    assert st.succeeded == 1


def test_history_limits_remove_old_children_from_the_engine_and_the_state(tmp_path: Path) -> None:
    state = tmp_path / "s.sqlite"
    tmpl = [{"name": "s", "templateType": "Suspend", "duration": "1m"}]
    cron = make_cron(tmpl, schedules=["@every 10m"], successfulJobsHistoryLimit=2)
    r, rc, _ = run(cron, "1h", state=str(state))
    assert rc == 0
    kept = names("hourly", T0 + 40 * 60, T0 + 50 * 60, T0 + 60 * 60)
    assert sorted(children(r)) == kept  # two succeeded + the one started at the end
    assert r.drivers[0].status.succeeded == 5  # 00:10 .. 00:50
    db = sqlite3.connect(state)
    rows = sorted(k for (k,) in db.execute("SELECT key FROM workflows"))
    db.close()
    assert rows == [f"default/{n}" for n in kept]


def test_suspended_cron_runs_nothing() -> None:
    r, rc, _ = run(make_cron(suspend=True), "5h")
    assert rc == 0 and children(r) == {}
    st = r.drivers[0].status
    assert st.phase == "Suspended" and st.skipped == 5
    assert r.drivers[0].controller.metrics.skipped == {"Suspended": 5}


def test_a_failing_child_makes_the_exit_code_1() -> None:
    tmpl = [
        {
            "name": "t",
            "templateType": "Task",
            "task": {"container": {"name": "t", "image": "busybox", "command": ["sh", "-c", "exit 3"]}},
        }
    ]
    r, rc, _ = run(make_cron(tmpl), "2h30m")
    assert rc == 1
    assert r.drivers[0].status.failed == 2
    assert sorted(children(r)) == names("hourly", T0 + 2 * H)  # failedJobsHistoryLimit 1


# --- DST on the driver ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "tz", "start", "expected"),
    [
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-27T12:00:00Z",
            ["03-28 02:30 CET", "03-29 03:00 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-23T12:00:00Z",
            ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET"],
        ),
        (
            "30 1 * * *",
            "America/New_York",
            "2026-10-30T12:00:00Z",
            ["10-31 01:30 EDT", "11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"],
        ),
        (
            "30 2 * * *",
            "America/New_York",
            "2026-03-06T12:00:00Z",
            ["03-07 02:30 EST", "03-08 03:00 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"],
        ),
    ],
)
def test_dst_no_double_and_no_missed_run(expr: str, tz: str, start: str, expected: list[str]) -> None:
    tmpl = [{"name": "s", "templateType": "Suspend", "duration": "10m"}]
    r, rc, _ = run(make_cron(tmpl, name="dst", schedules=[expr], timezone=tz), "4d", start=start)
    assert rc == 0
    times = [int(n.rsplit("-", 1)[1]) for n in r.submitted]
    got = [datetime.fromtimestamp(t, ZoneInfo(tz)).strftime("%m-%d %H:%M %Z") for t in times]
    assert got == expected


# --- restarts -------------------------------------------------------------------------------------
def _summary(r: LocalCronRunner) -> tuple[dict[str, str], int, int, str | None]:
    st = r.drivers[0].status
    return children(r), st.succeeded, st.failed, st.lastScheduledTime


def _objects(r: LocalCronRunner) -> list[dict[str, Any]]:
    return [d.cron.to_object(d.status) for d in r.drivers] + r.children_objects()


@pytest.mark.parametrize("policy", ["Allow", "Forbid", "Replace"])
def test_stop_and_restart_equals_an_uninterrupted_run(tmp_path: Path, policy: str) -> None:
    cron = make_cron(CHAOS_90M, schedules=["30 * * * *"], concurrencyPolicy=policy, failedJobsHistoryLimit=20)
    whole, _, _ = run(cron, "10h")
    state = str(tmp_path / f"{policy}.sqlite")
    first, _, _ = run(cron, "3h10m", state=state)  # stops while a child holds its chaos
    assert any(p == "Running" for p in children(first).values())
    second, _, _ = run(cron, "2h", state=state)
    third, _, err = run(cron, "2026-01-01T10:00:00Z", state=state)
    assert _summary(third) == _summary(whole)
    assert _objects(third) == _objects(whole)
    assert "submit" in err
    # every tick was submitted exactly once across the three invocations
    submitted = [n for r in (first, second, third) for n in r.submitted]
    assert len(submitted) == len(set(submitted)) == len(whole.submitted)


def test_downtime_is_caught_up_by_policy(tmp_path: Path) -> None:
    tmpl = [{"name": "s", "templateType": "Suspend", "duration": "5m"}]
    got: dict[str, list[str]] = {}
    for policy in ("Latest", "All", "None"):
        cron = make_cron(tmpl, catchUp=policy, maxCatchUp=3)
        state = str(tmp_path / f"{policy}.sqlite")
        run(cron, "2h", state=state)  # 01:00, 02:00
        r, _, _ = run(cron, "10m", state=state, start="2026-01-01T07:20:00Z")  # down 02:00 .. 07:20
        got[policy] = r.submitted
    assert got["Latest"] == names("hourly", T0 + 7 * H)
    assert got["All"] == names("hourly", T0 + 5 * H, T0 + 6 * H, T0 + 7 * H)
    assert got["None"] == []


def test_downtime_beyond_the_starting_deadline_runs_nothing(tmp_path: Path) -> None:
    tmpl = [{"name": "s", "templateType": "Suspend", "duration": "5m"}]
    cron = make_cron(tmpl, startingDeadlineSeconds=600, catchUp="All")
    state = str(tmp_path / "d.sqlite")
    run(cron, "2h", state=state)
    r, _, err = run(cron, "30m", state=state, start="2026-01-01T07:20:00Z")
    assert r.submitted == []
    assert "MissedDeadline" in err
    r, _, _ = run(cron, "1h", state=state)  # back on schedule
    assert r.submitted == names("hourly", T0 + 8 * H)


def test_a_running_child_survives_downtime_and_forbid_holds(tmp_path: Path) -> None:
    cron = make_cron(concurrencyPolicy="Forbid")
    state = str(tmp_path / "f.sqlite")
    run(cron, "1h10m", state=state)  # 01:00 child runs until 02:30
    r, _, _ = run(cron, "1h", state=state, start="2026-01-01T02:05:00Z")
    # the 02:00 tick is due after the downtime, but the 01:00 child is still active: skipped
    assert r.drivers[0].status.lastSkipped is not None
    assert r.drivers[0].status.lastSkipped.reason == "ConcurrencyForbid"
    assert children(r)[child_name("hourly", T0 + H)] == "Succeed"
    assert children(r)[child_name("hourly", T0 + 3 * H)] == "Running"


# --- the command line ---------------------------------------------------------------------------
def chaosflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_cli_runs_the_nightly_example_for_three_days() -> None:
    proc = chaosflow("cron", str(NIGHTLY), "--until", "3d", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    cron, *kids = doc["items"]
    assert cron["kind"] == "CronWorkflow" and cron["status"]["succeeded"] == 3
    assert cron["status"]["lastScheduledTime"] == "2026-01-03T01:00:00Z"  # 02:00 in Berlin (CET)
    assert [k["metadata"]["name"] for k in kids] == [
        "nightly-chaos-1767229200",
        "nightly-chaos-1767315600",
        "nightly-chaos-1767402000",
    ]
    assert all(k["status"]["phase"] == "Succeed" for k in kids)
    assert kids[0]["metadata"]["labels"] == {
        "team": "storage",
        "campaign": "nightly",
        "chaosflow.io/cron-workflow": "nightly-chaos",
    }
    text = chaosflow("cron", str(NIGHTLY), "--until", "3d")
    assert text.returncode == 0
    assert "CronWorkflow default/nightly-chaos Active" in text.stdout
    assert "submit nightly-chaos-1767229200 for 2026-01-01 02:00:00 CET" in text.stderr


@pytest.fixture(scope="module")
def nightly_reference() -> list[dict[str, Any]]:
    proc = chaosflow("cron", str(NIGHTLY), "--until", "3d", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout)["items"])


@pytest.mark.parametrize("crash_after", [5, 60, 130])
def test_cli_crash_then_restart_never_runs_a_tick_twice(
    tmp_path: Path, crash_after: int, nightly_reference: list[dict[str, Any]]
) -> None:
    state = tmp_path / "n.sqlite"
    crashed = chaosflow(
        "cron",
        str(NIGHTLY),
        "--until",
        "3d",
        "--state",
        str(state),
        "--checkpoint",
        "0",
        "-o",
        "json",
        env={"CHAOSFLOW_CRASH_AFTER_EVENTS": str(crash_after)},
    )
    assert crashed.returncode == 137, crashed.stderr
    resumed = chaosflow(
        "cron", str(NIGHTLY), "--until", "2026-01-04T00:00:00Z", "--state", str(state), "-o", "json"
    )
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)["items"]
    assert got == nightly_reference  # the cron's status and every child, exactly as without the crash
    assert [i["status"]["phase"] for i in got[1:]] == ["Succeed"] * 3
    # nothing is left injected in the simulated cluster
    db = sqlite3.connect(state)
    (sim,) = db.execute("SELECT value FROM meta WHERE key = 'sim'").fetchone()
    db.close()
    objects = json.loads(sim)["default"]["api"]["objects"]
    assert not [o for o in objects if o["apiVersion"].startswith("chaos-mesh.org/")]


def test_cli_next_prints_fire_times() -> None:
    proc = chaosflow("cron", str(NIGHTLY), "--next", "3", "--start", "2026-03-27T00:00:00Z")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:] == [
        "  2026-03-27T01:00:00Z  2026-03-27 02:00:00 CET",
        "  2026-03-28T01:00:00Z  2026-03-28 02:00:00 CET",
        "  2026-03-29T01:00:00Z  2026-03-29 03:00:00 CEST",  # 02:00 does not exist that night
    ]


def test_cli_help_and_invalid_input(tmp_path: Path) -> None:
    proc = chaosflow("cron", "--help")
    assert proc.returncode == 0 and "usage: chaosflow cron" in proc.stdout and "--until" in proc.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: chaosflow.io/v1alpha1\nkind: CronWorkflow\nmetadata: {name: b}\n"
        "spec:\n  schedules: ['0 0 * * 8']\n  workflowSpec: {entry: s, templates: [{name: s, templateType: Suspend, "
        "duration: 1s}]}\n"
    )
    proc = chaosflow("cron", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        f"{bad}: spec.schedules[0]: '0 0 * * 8': day of week: 8 is out of range 0-7"
    )
    proc = chaosflow("cron", str(NIGHTLY), "--until", "soon")
    assert proc.returncode == 2 and "--until" in proc.stderr
    proc = chaosflow("validate", str(NIGHTLY), str(bad))
    assert proc.returncode == 2
    assert f"{NIGHTLY}: ok (1 cron workflow)" in proc.stdout
    assert proc.stderr.startswith(f"{bad}: spec.schedules[0]:")
