"""Suspend / unsuspend / manual approval in the engine, and controlling a running `chaosflow run
--state DB` from another process (stop, terminate, suspend, unsuspend)."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import net, workflow
from tests.sim.conftest import Sim
from tests.sim.test_cli_run import chaosflow

P = NodePhase
ROOT = Path(__file__).resolve().parents[2]


def one(run: WorkflowRun, name: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == name and n.kind != "Lifecycle"]
    return n


def rel(run: WorkflowRun, t: float | None) -> float:
    assert t is not None and run.start_time is not None
    return round(t - run.start_time, 3)


def suspend(name: str, duration: str | None = None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "templateType": "Suspend", **extra}
    if duration is not None:
        d["duration"] = duration
    return d


# --- in the engine (virtual clock) ----------------------------------------------------------------------
def test_suspended_workflow_starts_nothing_and_waits_keep_their_due_times(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "root", "templateType": "Parallel", "children": ["steps", "c"]},
            {"name": "steps", "templateType": "Serial", "children": ["a", "b"]},
            suspend("a", "10s"),
            suspend("b", "10s"),
            net("c", "20s"),
        ]
    )
    run = sim.submit(wf)
    sim.at(5, lambda: sim.manager.suspend(run.key))
    sim.at(60, lambda: sim.manager.unsuspend(run.key))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert rel(run, one(run, "a").finish_time) == 60  # due at 10, held while suspended
    assert rel(run, one(run, "b").start_time) == 60  # nothing new started while suspended
    assert rel(run, one(run, "c").finish_time) == pytest.approx(20.2, abs=0.01)  # chaos ended on time
    assert rel(run, run.finish_time) == 70
    assert not run.suspended and not run.held


def test_suspend_a_node_subtree_only(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "root", "templateType": "Parallel", "children": ["left", "right"]},
            {"name": "left", "templateType": "Serial", "children": ["l1", "l2"]},
            {"name": "right", "templateType": "Serial", "children": ["r1", "r2"]},
            *[suspend(n, "10s") for n in ("l1", "l2", "r1", "r2")],
        ]
    )
    run = sim.submit(wf)
    sim.at(5, lambda: sim.manager.suspend(run.key, "left"))  # a template name: its unfinished node
    sim.at(100, lambda: sim.manager.unsuspend(run.key, "left"))
    sim.run()
    assert run.phase.value == "Succeed"
    assert rel(run, one(run, "r2").finish_time) == 20  # the other subtree went on
    assert rel(run, one(run, "l1").finish_time) == 100
    assert rel(run, one(run, "l2").finish_time) == 110
    assert run.status().model_dump().get("suspended") is None


def test_stop_works_while_suspended(sim: Sim) -> None:
    run = sim.submit(
        workflow(
            [
                {"name": "s", "templateType": "Serial", "children": ["a", "b"]},
                suspend("a", "10s"),
                net("b", "1m"),
            ]
        )
    )
    sim.at(1, lambda: sim.manager.suspend(run.key))
    sim.at(50, lambda: sim.manager.abort(run.key, "stopped"))
    sim.run()
    assert run.phase.value == "Failed" and rel(run, run.finish_time) == 50
    assert sim.created == {}  # b never started


def test_manual_approval_waits_until_resumed(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["prepare", "approve", "go"]},
            suspend("prepare", "10s"),
            suspend("approve", manual=True),
            suspend("go", "5s"),
        ]
    )
    run = sim.submit(wf)
    sim.at(3600, lambda: sim.manager.unsuspend(run.key, "approve"))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    approve = one(run, "approve")
    assert approve.message == "resumed" and rel(run, approve.finish_time) == 3600
    assert rel(run, run.finish_time) == 3605


def test_without_anyone_to_approve_the_virtual_run_stops_waiting(sim: Sim) -> None:
    run = sim.submit(workflow([suspend("approve", manual=True)]))
    sim.run()  # no control source: nothing can ever resume it
    assert not run.phase.finished and sim.manager.waiting_for_input()


def test_resume_early_ends_a_timed_suspend(sim: Sim) -> None:
    run = sim.submit(workflow([suspend("z", "1h")]))
    sim.at(10, lambda: sim.manager.unsuspend(run.key, "z"))
    sim.run()
    assert run.phase.value == "Succeed" and rel(run, run.finish_time) == 10
    assert one(run, "z").message == "resumed before its duration ended"


def test_control_errors_are_clear(sim: Sim) -> None:
    run = sim.submit(workflow([suspend("z", "10s")]))
    results: list[str] = []

    def attempt(fn: Any) -> None:
        try:
            results.append(fn())
        except ValueError as e:
            results.append(f"error: {e}")

    sim.at(1, lambda: attempt(lambda: sim.manager.unsuspend(run.key)))
    sim.at(2, lambda: attempt(lambda: sim.manager.suspend(run.key, "nope")))
    sim.run()
    attempt(lambda: sim.manager.suspend(run.key))
    assert results == [
        "error: nothing to continue in default/wf",
        "error: no node or template 'nope' in default/wf",
        "error: workflow default/wf already finished (Succeed)",
    ]


def test_suspend_without_duration_needs_manual() -> None:
    from engine.errors import ValidationFailed

    with pytest.raises(ValidationFailed, match=r"needs a duration \(or manual: true"):
        from engine.loader import load_workflows_text

        load_workflows_text(
            "apiVersion: chaosflow.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\n"
            "spec: {entry: z, templates: [{name: z, templateType: Suspend}]}\n",
            "w.yaml",
        )


# --- from another process ---------------------------------------------------------------------------------
APPROVAL = """\
apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata: {name: gated}
spec:
  entry: main
  onExit: report
  templates:
    - {name: main, templateType: Serial, children: [inject, approve, after]}
    - name: inject
      templateType: NetworkChaos
      duration: 1h
      networkChaos: {action: delay, mode: all, selector: {labelSelectors: {app: web}}, delay: {latency: 10ms}}
    - {name: approve, templateType: Suspend, manual: true}
    - {name: after, templateType: Suspend, duration: 5s}
    - {name: report, templateType: Suspend, duration: 1s}
"""

MANUAL_FIRST = APPROVAL.replace("children: [inject, approve, after]", "children: [approve, inject, after]")


_ENGINES: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _reap_engines() -> Any:
    """Never leave an engine process behind, whatever the test did."""
    yield
    while _ENGINES:
        p = _ENGINES.pop()
        if p.poll() is None:
            p.kill()
            p.communicate()


def _start(tmp_path: Path, doc: str, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    wf = tmp_path / "wf.yaml"
    wf.write_text(doc)
    state = tmp_path / "run.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(wf), "-o", "json", "--state", str(state), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    _ENGINES.append(proc)
    return proc, state


def _node_phase(state: Path, template: str) -> str | None:
    if not state.exists():
        return None
    try:
        db = sqlite3.connect(state, timeout=5)
        row = db.execute("SELECT record FROM workflows").fetchone()
        db.close()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    for n in json.loads(row[0])["nodes"]:
        if n["templateName"] == template and n["templateType"] != "Lifecycle":
            return str(n["phase"])
    return None


def _wait_for(
    state: Path, template: str, phase: str, proc: subprocess.Popen[str], timeout: float = 30
) -> None:
    """Poll the other process's checkpoints until the node reaches the phase."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if _node_phase(state, template) == phase:
            return
        if proc.poll() is not None:
            raise AssertionError(f"engine exited early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{template} never reached {phase}: {proc.communicate()}")


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def ctl(action: str, state: Path, **kw: Any) -> Result:
    """`chaosflow ACTION STATE ...` in this process (the engine it talks to is another process)."""
    from engine.control import send_control

    out, err = io.StringIO(), io.StringIO()
    code = send_control(str(state), action, out=out, err=err, **kw)
    return Result(code, out.getvalue(), err.getvalue())


def _finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out), err


def _chaos_left(obj: dict[str, Any], state: Path) -> list[Any]:
    db = sqlite3.connect(state)
    (value,) = db.execute("SELECT value FROM meta WHERE key = 'sim'").fetchone()
    db.close()
    objects = json.loads(value)["default"]["api"]["objects"]
    return [o for o in objects if o["apiVersion"].startswith("chaos-mesh.org/")]


def test_unsuspend_approves_a_waiting_virtual_run_from_another_process(tmp_path: Path) -> None:
    proc, state = _start(tmp_path, APPROVAL)
    _wait_for(state, "approve", "Holding", proc)
    busy = chaosflow("resume", str(state))
    assert busy.returncode == 2 and "a live engine" in busy.stderr  # never two engines on one state
    ctl = chaosflow("unsuspend", str(state), "--node", "approve")  # the real command line, once
    assert ctl.returncode == 0, ctl.stderr
    assert "approve-2 resumed" in ctl.stdout
    code, obj, err = _finish(proc)
    assert code == 0, err
    assert obj["status"]["phase"] == "Succeed"
    assert "waiting: default/gated: approve-2 waiting for approval" in err
    assert _chaos_left(obj, state) == []


@pytest.mark.parametrize(("action", "handlers"), [("stop", True), ("terminate", False)])
def test_stop_and_terminate_from_another_process(tmp_path: Path, action: str, handlers: bool) -> None:
    proc, state = _start(tmp_path, APPROVAL)
    _wait_for(state, "approve", "Holding", proc)
    res = ctl(action, state, message=f"{action} from the test")
    assert res.returncode == 0, res.stderr
    assert f"{action} requested for default/gated" in res.stdout
    code, obj, _ = _finish(proc)
    assert code == 1
    st = obj["status"]
    assert st["phase"] == "Failed" and st["message"] == f"{action} from the test"
    ran = {n["templateName"] for n in st["nodes"]}
    assert ("report" in ran) is handlers
    assert _chaos_left(obj, state) == []  # chaos removed either way


def test_suspend_and_unsuspend_a_real_time_run(tmp_path: Path) -> None:
    doc = MANUAL_FIRST.replace("duration: 1h", "duration: 1s").replace("duration: 5s", "duration: 0.2s")
    proc, state = _start(tmp_path, doc, "--real-time", "--checkpoint", "0")
    _wait_for(state, "approve", "Holding", proc)
    assert ctl("suspend", state).returncode == 0
    assert ctl("unsuspend", state, node="approve").returncode == 0  # approved, yet suspended
    # the next step is created but held in Init (a started node would be Running in the same
    # engine tick, before that tick's checkpoint)
    _wait_for(state, "inject", "Init", proc)
    res = ctl("unsuspend", state)
    assert res.returncode == 0 and "workflow default/gated continues" in res.stdout
    code, _, err = _finish(proc)
    assert code == 0, err


def test_control_without_a_running_engine_is_queued_for_resume(tmp_path: Path) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(APPROVAL)
    state = tmp_path / "run.sqlite"
    crashed = chaosflow(
        "run", str(wf), "--state", str(state), "--checkpoint", "0", env={"CHAOSFLOW_CRASH_AFTER_EVENTS": "8"}
    )
    assert crashed.returncode == 137
    res = ctl("stop", state)
    assert res.returncode == 0 and "queued" in res.stdout
    resumed = chaosflow("resume", str(state), "-o", "json")
    assert resumed.returncode == 1
    st = json.loads(resumed.stdout)["status"]
    assert st["message"] == "stopped by user"
    assert "report" in {n["templateName"] for n in st["nodes"]}  # stop: the exit handler ran
    again = ctl("stop", state)
    assert again.returncode == 1 and "already finished" in again.stderr


def test_control_commands_reject_bad_input(tmp_path: Path) -> None:
    missing = ctl("stop", tmp_path / "nope.sqlite")
    assert missing.returncode == 2 and "no such state file" in missing.stderr
    wf = tmp_path / "wf.yaml"
    wf.write_text(APPROVAL)
    state = tmp_path / "run.sqlite"
    chaosflow("run", str(wf), "--state", str(state), env={"CHAOSFLOW_CRASH_AFTER_EVENTS": "3"})
    unknown = ctl("suspend", state, workflow="other")
    assert unknown.returncode == 2 and "no workflow 'other'" in unknown.stderr


@pytest.mark.parametrize("command", ["stop", "terminate", "suspend", "unsuspend"])
def test_control_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--help"])
    assert e.value.code == 0
    assert f"usage: chaosflow {command} [-h]" in capsys.readouterr().out


def test_stop_of_a_suspended_workflow_still_runs_exit_handlers(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["c", "b"], "onExit": "t-exit"},
            net("c", "10m"),
            suspend("b", "1s"),
            {"name": "t-exit", "templateType": "Serial", "children": ["x1", "x2"]},
            suspend("x1", "5s"),
            suspend("x2", "5s"),
            suspend("wf-exit", "5s"),
        ],
        onExit="wf-exit",
    )
    run = sim.submit(wf)
    sim.at(10, lambda: sim.manager.suspend(run.key))
    sim.at(20, lambda: sim.manager.abort(run.key, "stopped"))
    sim.run()
    assert run.phase.value == "Failed" and run.message == "stopped"
    assert all(one(run, t).phase is P.SUCCEED for t in ("x1", "x2", "wf-exit"))  # cleanup is never held
    assert rel(run, run.finish_time) == pytest.approx(20.1 + 10 + 5, abs=0.01)
    assert sim.chaos_objects() == []


def test_a_control_is_reported_applied_only_once_a_checkpoint_holds_its_effect(tmp_path: Path) -> None:
    from engine.control import ControlPoller
    from engine.runner import RunOptions, build_sim_env
    from engine.store import SQLiteStore

    path = tmp_path / "s.sqlite"
    # throttled checkpoints never come due: only the poller's confirmation writes the state
    env = build_sim_env(RunOptions(state=str(path), checkpoint_interval=1e9, progress=False), 0)
    env.world.load_world_file(None)
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["approve", "after"]},
            suspend("approve", manual=True),
            suspend("after", "1h"),
        ]
    )
    run = env.manager.submit(wf)
    assert env.store is not None
    ControlPoller(env.manager, env.store).attach()
    env.manager.run(until=lambda: "approve-1" in run.nodes and run.nodes["approve-1"].phase is P.HOLDING)
    other = SQLiteStore(path)  # "another process"
    cid = other.add_control(run.key, "unsuspend", "approve", None)
    env.manager.run(until=lambda: other.control_result(cid) is not None)
    assert other.control_result(cid) == (True, "approve-1 resumed")
    (record,) = other._db.execute("SELECT record FROM workflows").fetchone()
    phases = {n["name"]: n["phase"] for n in json.loads(record)["nodes"]}
    assert phases["approve-1"] == "Succeed"  # durable before it was reported
    other.close()
