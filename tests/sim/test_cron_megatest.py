"""A CronWorkflow running a small megatest on the simulated replicated-volume world (the issue's
acceptance line): fire times on the virtual clock with each concurrency policy, a restart from
``--state`` that never runs a tick twice, and ``chaosflow run`` of ``megatest -o yaml``.

The CronWorkflow is ``chaosflow megatest ... -o cron`` output; its children carry the
``chaosflow.io/sim-world`` annotation, from which ``chaosflow cron`` builds the world once.
The schedule (every 20 minutes) is shorter than the megatest (30 minutes), so runs overlap.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import engine.runner as runner_mod
from actors.sim.rv import ReplicatedVolumeController
from engine.cli import main
from engine.clock import parse_rfc3339
from engine.cron import (
    AbortChild,
    CronWorkflow,
    child_name,
    load_cron_workflow_file,
    load_cron_workflows_text,
)
from engine.cron_local import CronRunOptions, LocalCronRunner
from engine.loader import load_workflows_text
from engine.runner import RunOptions, resume_local, run_local
from engine.runtime import WorkflowRun
from templates.library.megatest.options import MegatestOptions, add_megatest_flags, options_from_args
from templates.library.megatest.report import MegatestRecorder
from templates.library.megatest.run import run_megatest
from tests.megatest.conftest import ALL_CHAOS_FLAGS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cron-megatest.yaml"
T0 = parse_rfc3339("2026-01-01T00:00:00Z")
M = 60.0
SCHEDULE = "*/20 * * * *"
#: a small megatest with every goroutine and all chaos on, and chaos held most of the time
FLAGS = [
    "--storage-classes",
    "a,b",
    "--max-volumes",
    "2",
    "--duration",
    "30m",
    "--seed",
    "5",
    *ALL_CHAOS_FLAGS,
]
CILIUM = ("parent", "cilium.io/v2", "CiliumNetworkPolicy")
JOB = ("test", "batch/v1", "Job")
VMOP = ("parent", "virtualization.deckhouse.io/v1alpha2", "VirtualMachineOperation")
RV = ("test", "storage.deckhouse.io/v1alpha1", "ReplicatedVolume")
WF_LABEL = "chaosflow.io/workflow"
PARENT_LABEL = "chaosflow.io/parent-workflow"


def _cli_out(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


@functools.cache
def cron_yaml(*extra: str) -> str:
    """``chaosflow megatest FLAGS -o cron --schedule SCHEDULE EXTRA``."""
    return _cli_out("megatest", *FLAGS, "-o", "cron", "--schedule", SCHEDULE, *extra)


def crons(*extra: str, **spec: Any) -> list[CronWorkflow]:
    """The ``-o cron`` output (with ``spec`` changes) through the cron file loader."""
    text = cron_yaml(*extra)
    if spec:
        doc = yaml.safe_load(text)
        doc["spec"].update(spec)
        text = yaml.safe_dump(doc, sort_keys=False)
    return load_cron_workflows_text(text, "megatest-cron.yaml")


def run(cs: list[CronWorkflow], until: str, **opts: Any) -> tuple[LocalCronRunner, int, str]:
    out, err = io.StringIO(), io.StringIO()
    r = LocalCronRunner(cs, CronRunOptions(until=until, out=out, err=err, **opts))
    rc = r.run()
    return r, rc, err.getvalue()


def at(minutes: float) -> float:
    return T0 + minutes * M


def name(minutes: float) -> str:
    return child_name("megatest", at(minutes))


def child(r: LocalCronRunner, minutes: float) -> WorkflowRun:
    return r.manager.runs[f"default/{name(minutes)}"]


def children(r: LocalCronRunner) -> dict[str, str]:
    return {c.name: c.phase.value for c in r.backend.children_runs(r.crons[0])}


def volumes(r: LocalCronRunner, parent: str) -> list[WorkflowRun]:
    """The volume-main workflows a megatest child started."""
    return [x for x in r.manager.runs.values() if x.workflow.metadata.labels.get(PARENT_LABEL) == parent]


def objects(r: LocalCronRunner, what: tuple[str, str, str], owner: str | None = None) -> list[dict[str, Any]]:
    cluster, api, kind = what
    objs = r.world.playground.list(cluster, api, kind)
    if owner is None:
        return objs
    return [o for o in objs if (o["metadata"].get("labels") or {}).get(WF_LABEL, "").startswith(owner)]


def node_ok(run: WorkflowRun, template: str) -> bool:
    return any(n.template == template and n.phase.value == "Succeed" for n in run.nodes.values())


# --- the policies ------------------------------------------------------------------------------
def test_allow_overlapping_megatests_both_run_to_the_end() -> None:
    cs = crons("--concurrency-policy", "Allow")
    err_out = io.StringIO()
    r = LocalCronRunner(cs, CronRunOptions(until="75m", out=io.StringIO(), err=err_out))
    spawned: dict[str, list[str]] = {}  # megatest -> outcomes of its volume-spawn nodes

    def on_phase(run_: WorkflowRun, node: Any, old: Any) -> None:
        if node.template == "volume-spawn" and node.phase.finished:
            spawned.setdefault(run_.name, []).append(node.phase.value)

    r.manager.phase_listeners.append(on_phase)
    rc, err = r.run(), err_out.getvalue()
    assert rc == 0, err
    assert r.submitted == [name(20), name(40), name(60)]  # the fire times: 00:20, 00:40, 01:00
    first, second = child(r, 20), child(r, 40)
    assert first.start_time == at(20) and at(50) <= first.finish_time <= at(50) + 5
    # (+ the chaos recovery of an incident the deadline ended: a losses incident's iptables cleanup)
    assert second.start_time == at(40) and at(70) <= second.finish_time <= at(70) + 5
    assert first.phase.value == second.phase.value == "Succeed"  # both to the end (their deadline)
    for c in (first, second):
        vols = volumes(r, c.name)
        assert len(vols) >= 2 and all(v.name.startswith(f"{c.name}-vol-") for v in vols)
        assert sum(node_ok(v, "volume-wait-ready") for v in vols) >= 2  # volumes got ready
        assert set(spawned[c.name]) == {"Succeed"}  # no clash with another night's names
        assert len(spawned[c.name]) == len(vols)
    # the two overlapped on the shared world: both had volumes at 00:45
    for c in (first, second):
        assert any((v.start_time or 0) < at(45) < (v.finish_time or at(75)) for v in volumes(r, c.name))
    st = r.drivers[0].status
    assert st.succeeded == 2 and st.skipped == 0 and [a.name for a in st.active] == [name(60)]
    assert "submit megatest-1767228000 for 2026-01-01 00:40:00 UTC" in err


def test_forbid_skips_ticks_while_a_megatest_runs() -> None:
    cs = crons("--concurrency-policy", "Forbid")
    r, rc, err = run(cs, "1h40m")  # a tick due exactly at --until still runs
    assert rc == 0, err
    assert r.submitted == [name(20), name(60), name(100)]
    assert children(r) == {name(20): "Succeed", name(60): "Succeed", name(100): "Running"}
    st = r.drivers[0].status
    assert st.succeeded == 2 and st.skipped == 2  # 00:40, 01:20
    assert r.drivers[0].controller.metrics.skipped == {"ConcurrencyForbid": 2}
    assert st.lastSkipped is not None and st.lastSkipped.scheduledTime == "2026-01-01T01:20:00Z"
    assert f"{name(60)} still active" in st.lastSkipped.message
    for t in ("00:40", "01:20"):
        assert f"skip 2026-01-01 {t}:00 UTC (ConcurrencyForbid:" in err


def test_replace_aborts_the_running_megatest_with_its_chaos_and_volumes() -> None:
    cs = crons("--concurrency-policy", "Replace", failedJobsHistoryLimit=5)
    r = LocalCronRunner(cs, CronRunOptions(until="65m", out=io.StringIO(), err=io.StringIO()))
    held: dict[str, list[dict[str, Any]]] = {}  # replaced child -> its chaos objects at the abort
    left: dict[str, list[dict[str, Any]]] = {}  # ... and when it has finished

    def chaos_of(child: str) -> list[dict[str, Any]]:
        return [o for what in (CILIUM, JOB) for o in objects(r, what, child)]

    def on_abort(cron: CronWorkflow, action: Any, now: float) -> None:
        if isinstance(action, AbortChild):
            held[action.name] = chaos_of(action.name)

    def on_finished(run_: WorkflowRun) -> None:
        if run_.name in held and run_.phase.finished:
            left.setdefault(run_.name, chaos_of(run_.name))

    r.drivers[0].listeners.insert(0, on_abort)
    r.manager.workflow_listeners.append(on_finished)
    assert r.run() == 0  # children aborted by Replace do not fail the run
    assert r.submitted == [name(20), name(40), name(60)]
    assert children(r) == {name(20): "Failed", name(40): "Failed", name(60): "Running"}
    assert any(held.values())  # chaos was held when a megatest was replaced
    assert left == {name(20): [], name(40): []}  # ... and gone when it had finished
    for old, new, t in ((name(20), name(40), 40), (name(40), name(60), 60)):
        c = r.manager.runs[f"default/{old}"]
        assert c.message.startswith(f"replaced by {new}")
        assert at(t) <= (c.finish_time or 0) < at(t) + 2 * M  # aborted with cleanup
        assert r.manager.runs[f"default/{new}"].start_time == at(t)
        assert all(n.phase.finished for n in c.nodes.values())
        for n in c.nodes.values():  # chaos held at the abort was removed by its own node
            if n.kind == "Chaos" and n.state.get("injected") and (n.finish_time or 0) >= at(t):
                assert n.state.get("deleting") and "cleanup failed" not in n.message, n.name
        # nothing of it is left later either; its VM restarts (one-shot) have completed
        assert chaos_of(old) == []
        assert {o["status"]["phase"] for o in objects(r, VMOP, old)} <= {"Completed", "Failed"}
        # its volume workflows were stopped with it and deleted their RVs
        vols = volumes(r, old)
        assert vols and all(v.phase.finished for v in vols)
        assert objects(r, RV, old) == []
    assert objects(r, RV, name(60))  # the new megatest has its volumes
    st = r.drivers[0].status
    assert st.failed == 2 and r.drivers[0].controller.metrics.replaced == 2


# --- restart from the state ----------------------------------------------------------------------
END = "2026-01-01T01:35:00Z"


@functools.cache
def uninterrupted() -> LocalCronRunner:
    """-o cron's default concurrency policy (Forbid), 00:00 to 01:35 without a stop."""
    return run(crons(), END)[0]


def status(r: LocalCronRunner) -> dict[str, Any]:
    return r.drivers[0].status.model_dump(mode="json", exclude_none=True)


def test_restart_continues_the_running_megatest_and_never_runs_a_tick_twice(tmp_path: Path) -> None:
    cs = crons()
    assert cs[0].spec.concurrencyPolicy == "Forbid"
    end = END
    whole = uninterrupted()
    state = str(tmp_path / "mt.sqlite")
    first, rc1, _ = run(cs, "35m", state=state)  # stops 15 minutes into the 00:20 megatest
    assert rc1 == 0 and first.submitted == [name(20)] and children(first) == {name(20): "Running"}
    live = [v for v in volumes(first, name(20)) if not v.phase.finished]
    assert live and objects(first, RV, name(20))  # volumes in the middle of their life
    second, rc2, err = run(cs, end, state=state)
    assert rc2 == 0, err
    assert second.submitted == [name(60)]  # 00:20 is not submitted again
    # the RV world came back with its controllers, running
    test = second.world.clusters["test"]
    assert any(isinstance(c, ReplicatedVolumeController) and c.running for c in test.controllers)
    c = child(second, 20)
    assert c.phase.value == "Succeed" and at(50) <= (c.finish_time or 0) <= at(50) + 5  # + chaos recovery
    # volumes live at the stop went on; volumes started after the restart got ready
    for v in live:
        again = second.manager.runs[v.key]
        assert again.phase.finished and (again.finish_time or 0) > at(35)
    later = [v for v in volumes(second, name(20)) if (v.start_time or 0) > at(35)]
    assert later and any(node_ok(v, "volume-wait-ready") for v in later)
    # the same fire times, skips and outcomes as without the stop
    assert children(second) == children(whole) == {name(20): "Succeed", name(60): "Succeed"}
    assert status(second) == status(whole)
    st = second.drivers[0].status
    assert (st.succeeded, st.skipped, st.lastScheduledTime) == (2, 2, "2026-01-01T01:00:00Z")


def test_crash_in_the_middle_of_a_megatest_then_restart(tmp_path: Path) -> None:
    """``chaosflow cron --state`` killed (os._exit) in the middle of the 00:20 megatest, between
    two checkpoints, then run again: the state's older checkpoint is continued, no tick twice."""
    f = tmp_path / "cron.yaml"
    f.write_text(cron_yaml())
    state = str(tmp_path / "c.sqlite")
    args = [sys.executable, "-m", "engine.cli", "cron", str(f), "--state", state, "-o", "json"]
    env = {**os.environ, "CHAOSFLOW_CRASH_AFTER_EVENTS": "4000"}
    crashed = subprocess.run(
        [*args, "--until", END, "--checkpoint", "0.05"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert crashed.returncode == 137, crashed.stderr
    db = sqlite3.connect(state)
    (clock,) = db.execute("SELECT value FROM meta WHERE key = 'clock'").fetchone()
    (n,) = db.execute("SELECT count(*) FROM workflows").fetchone()
    db.close()
    assert at(20) < float(clock) < at(50) and n > 1  # checkpointed while the megatest ran
    resumed = subprocess.run(
        [*args, "--until", END], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    items = json.loads(resumed.stdout)["items"]
    assert items[0]["status"] == status(uninterrupted())
    assert [(i["metadata"]["name"], i["status"]["phase"]) for i in items[1:]] == [
        (name(20), "Succeed"),
        (name(60), "Succeed"),
    ]


# --- chaosflow run / resume of `megatest -o yaml` -------------------------------------------------
@contextlib.contextmanager
def recording(
    monkeypatch: pytest.MonkeyPatch, recorder: MegatestRecorder, box: dict[str, Any]
) -> Iterator[None]:
    """Attach ``recorder`` to the manager of the next local run (engine.runner._drive)."""
    drive = runner_mod._drive

    def spy(env: Any, opts: RunOptions, runs: list[WorkflowRun]) -> int:
        recorder.attach(env.manager)  # phases and observations, as run_megatest does
        box.update(env=env, runs=runs)
        return drive(env, opts, runs)

    monkeypatch.setattr(runner_mod, "_drive", spy)
    try:
        yield
    finally:
        monkeypatch.setattr(runner_mod, "_drive", drive)


def _megatest_options() -> MegatestOptions:
    p = argparse.ArgumentParser()
    add_megatest_flags(p)
    return options_from_args(p.parse_args(FLAGS))


def test_chaosflow_run_of_the_yaml_reports_like_chaosflow_megatest(monkeypatch: pytest.MonkeyPatch) -> None:
    o = _megatest_options()
    direct = run_megatest(o, "json", io.StringIO())
    (wf,) = load_workflows_text(_cli_out("megatest", *FLAGS, "-o", "yaml"), "megatest.yaml")
    rec, box = MegatestRecorder(wf.name), dict[str, Any]()
    with recording(monkeypatch, rec, box):
        assert run_local([wf], RunOptions(progress=False, out=io.StringIO())) == 0
    rec.finish(list(box["env"].manager.runs.values()))
    report = rec.to_dict(box["runs"][0])
    assert report == direct.report  # the same figures, verdicts included
    assert report["rvsCreated"] > 5 and len(report["incidents"]) >= 5  # volumes, chaos of every kind


def test_resume_restores_the_rv_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chaosflow run --state`` stopped after a checkpoint in the middle, then ``resume``: the
    RV world comes back with its controllers and the megatest finishes."""
    (wf,) = load_workflows_text(_cli_out("megatest", *FLAGS, "-o", "yaml"), "megatest.yaml")
    state = str(tmp_path / "run.sqlite")
    drive = runner_mod._drive
    stopped: dict[str, Any] = {}

    def crash(env: Any, opts: RunOptions, runs: list[WorkflowRun]) -> int:
        env.manager.run(until=lambda: env.clock.now() >= T0 + 15 * M)  # half of the 30 minutes
        env.manager.flush()
        env.store.flush()
        stopped["rvs"] = objects_of(env.world, RV)
        env.manager.close()
        return 1

    monkeypatch.setattr(runner_mod, "_drive", crash)
    run_local([wf], RunOptions(state=state, progress=False, out=io.StringIO()))
    assert stopped["rvs"]  # stopped with volumes alive
    rec, box = MegatestRecorder(wf.name), dict[str, Any]()
    monkeypatch.setattr(runner_mod, "_drive", drive)
    with recording(monkeypatch, rec, box):
        assert resume_local(state, RunOptions(progress=False, out=io.StringIO())) == 0
    env = box["env"]
    assert any(
        isinstance(c, ReplicatedVolumeController) and c.running
        for c in env.world.clusters["test"].controllers
    )
    main_run = box["runs"][0]
    assert main_run.phase.value == "Succeed" and T0 + 30 * M <= main_run.finish_time <= T0 + 30 * M + 5
    later = [r for r in env.manager.runs.values() if r.key != main_run.key and r.start_time > T0 + 15 * M]
    assert later and any(node_ok(v, "volume-wait-ready") for v in later)  # new volumes got ready
    assert objects_of(env.world, RV) == []  # every volume deleted at the end


def objects_of(world: Any, what: tuple[str, str, str]) -> list[dict[str, Any]]:
    cluster, api, kind = what
    return list(world.playground.list(cluster, api, kind))


# --- the annotation: invalid input -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "where", "message"),
    [
        (
            '{"kind": "replicated-volumes", "storageClasses": ["a"], "storageNodes": "six"}',
            ".storageNodes",
            "expected an integer from 1 to 200",
        ),
        (
            '{"kind": "replicated-volumes", "storageClasses": ["a", "b:Nope"]}',
            ".storageClasses[1]",
            "replication 'Nope'",
        ),
        (
            '{"kind": "replicated-volumes", "storageClasses": ["a"], "bugs": ["nope"]}',
            ".bugs[0]",
            'unknown bug "nope"',
        ),
        ('{"kind": "lvm", "storageClasses": ["a"]}', ".kind", "unknown kind 'lvm'"),
        ('{"kind": "replicated-volumes", "storageClasses": ["a"], "zones": 3}', ".zones", "unknown field"),
        (
            '{"kind": "replicated-volumes", "storageClasses": ["a", "a"]}',
            "",
            "storage class names must be unique",
        ),
        ("{kind: x}", "", "invalid JSON"),
    ],
)
def test_an_invalid_sim_world_is_reported_at_its_path(
    value: str, where: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load(cron_yaml())
    doc["spec"]["workflowMetadata"]["annotations"]["chaosflow.io/sim-world"] = value
    f = tmp_path / "cron.yaml"
    f.write_text(yaml.safe_dump(doc))
    state = tmp_path / "s.sqlite"
    assert main(["cron", str(f), "--until", "1h", "--state", str(state)]) == 2
    err = capsys.readouterr().err
    assert f'{f}: spec.workflowMetadata.annotations["chaosflow.io/sim-world"]{where}: ' in err
    assert message in err and "Traceback" not in err
    assert not state.exists()  # rejected before anything was written
    wf = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "mt", "annotations": {"chaosflow.io/sim-world": value}},
        "spec": doc["spec"]["workflowSpec"],
    }
    w = tmp_path / "wf.yaml"
    w.write_text(yaml.safe_dump(wf))
    assert main(["run", str(w), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f'{w}: metadata.annotations["chaosflow.io/sim-world"]{where}: ' in err  # as validate says
    assert message in err and "Traceback" not in err
    assert main(["validate", str(w)]) == 2
    assert f'{w}: metadata.annotations["chaosflow.io/sim-world"]{where}: ' in capsys.readouterr().err


# --- the example ------------------------------------------------------------------------------
def test_the_example_schedules_a_nightly_megatest() -> None:
    (cron,) = load_cron_workflow_file(str(EXAMPLE))
    assert cron.spec.workflowMetadata is not None
    assert "chaosflow.io/sim-world" in cron.spec.workflowMetadata.annotations
    r, rc, err = run([cron], "1d")
    assert rc == 0, err
    (only,) = r.backend.children_runs(cron)
    assert only.phase.value == "Succeed" and volumes(r, only.name)


def test_the_example_is_what_its_header_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/cron-megatest.yaml = its header comment + the output of the command it names."""
    text = EXAMPLE.read_text()
    header = text[: text.index("# chaosflow megatest -o cron:")]
    cmd = " ".join(
        ln.lstrip("# ").rstrip("\\").strip() for ln in header.splitlines()[2:6] if ln.strip() != "#"
    )
    args = shlex.split(cmd)
    assert args[0] == "chaosflow" and args[1] == "megatest", args
    assert main(args[1:]) == 0
    assert header + capsys.readouterr().out == text, (
        "examples/cron-megatest.yaml is stale: regenerate it with the command in its header"
    )
