"""`chaosflow run` and `chaosflow resume`: the CLI contract, determinism and crash/resume."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


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


def test_run_json_contract() -> None:
    proc = chaosflow("run", str(QUICKSTART), "--seed", "7", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["apiVersion"] == "chaosflow.io/v1alpha1" and obj["kind"] == "Workflow"
    assert obj["metadata"]["name"] == "quickstart" and obj["spec"]["entry"] == "campaign"
    st = obj["status"]
    assert st["phase"] == "Succeed"
    assert st["startTime"] == "2026-01-01T00:00:00Z"  # the documented start of the virtual clock
    assert st["finishTime"] > st["startTime"]
    keys = {
        "name",
        "templateName",
        "templateType",
        "phase",
        "parent",
        "children",
        "startTime",
        "finishTime",
        "message",
    }
    assert st["nodes"]
    for n in st["nodes"]:
        assert keys <= n.keys()
    entry = next(n for n in st["nodes"] if n["parent"] is None)
    assert entry["templateType"] == "Serial" and len(entry["children"]) == 3


def test_same_seed_gives_identical_json_twice() -> None:
    a = chaosflow("run", str(QUICKSTART), "--seed", "42", "-o", "json")
    b = chaosflow("run", str(QUICKSTART), "--seed", "42", "-o", "json")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
    c = chaosflow("run", str(QUICKSTART), "--seed", "43", "-o", "json")
    assert c.stdout != a.stdout  # the warm-up duration is drawn from the seed


def test_text_output_shows_progress_and_tree() -> None:
    proc = chaosflow("run", str(QUICKSTART), "--seed", "7")
    assert proc.returncode == 0
    assert "Init -> Holding" in proc.stderr
    assert "Workflow default/quickstart Succeed" in proc.stdout
    assert "network-delay-3 (NetworkChaos) Succeed" in proc.stdout


def test_failed_workflow_exits_1(tmp_path: Path) -> None:
    f = tmp_path / "fail.yaml"
    f.write_text(
        "apiVersion: chaosflow.io/v1alpha1\nkind: Workflow\nmetadata: {name: f}\nspec:\n  entry: t\n  templates:\n"
        "    - {name: t, templateType: Task, task: {container: {image: busybox, command: [sh, -c, 'exit 4']}}}\n"
    )
    proc = chaosflow("run", str(f), "-o", "json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["status"]["phase"] == "Failed"


def test_invalid_input_exits_2_without_traceback(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        "apiVersion: chaosflow.io/v1alpha1\nkind: Workflow\nmetadata: {name: f}\nspec: {entry: x, templates: []}\n"
    )
    proc = chaosflow("run", str(f))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{f}: spec.templates")


@pytest.mark.parametrize("command", ["validate", "run", "resume"])
def test_help_explains_each_command(command: str) -> None:
    proc = chaosflow(command, "--help")
    assert proc.returncode == 0
    assert "usage: chaosflow " + command in proc.stdout
    assert len(proc.stdout.splitlines()) > 5


def _final_sim_state(state: Path) -> dict[str, Any]:
    db = sqlite3.connect(state)
    (value,) = db.execute("SELECT value FROM meta WHERE key = 'sim'").fetchone()
    db.close()
    return dict(json.loads(value))


@pytest.mark.parametrize("crash_after", [3, 10, 20, 35, 45])
def test_crash_then_resume_finishes_and_cleans_up(tmp_path: Path, crash_after: int) -> None:
    reference = chaosflow("run", str(QUICKSTART), "--seed", "7", "-o", "json")
    state = tmp_path / "run.sqlite"
    crashed = chaosflow(
        "run",
        str(QUICKSTART),
        "--seed",
        "7",
        "-o",
        "json",
        "--state",
        str(state),
        "--checkpoint",
        "0",
        env={"CHAOSFLOW_CRASH_AFTER_EVENTS": str(crash_after)},
    )
    assert crashed.returncode == 137, crashed.stderr
    resumed = chaosflow("resume", str(state), "-o", "json")
    assert resumed.returncode == 0, resumed.stderr
    # the resumed run ends exactly as a run that never crashed
    assert json.loads(resumed.stdout) == json.loads(reference.stdout)
    sim = _final_sim_state(state)
    objects = sim["default"]["api"]["objects"]
    assert not [o for o in objects if o["apiVersion"].startswith("chaos-mesh.org/")]


def test_resume_of_missing_state_is_a_clear_error(tmp_path: Path) -> None:
    proc = chaosflow("resume", str(tmp_path / "nope.sqlite"))
    assert proc.returncode == 2
    assert "no such state file" in proc.stderr
