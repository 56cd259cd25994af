"""A megatest Workflow (``chaosflow megatest -o yaml``) run with ``--state``, stopped in the middle and
resumed, ends exactly as the uninterrupted run: every workflow record (node tree, times, outputs
with resourceVersions) and the megatest report figures.

Regressions: seeds and stop points that diverged before the sim's controllers were made
restore-exact —

* the Job controller reconciled while its caches were half-loaded (pods watched before Jobs): it
  took the running pod of a Job it had not seen yet for an orphan and removed its tracking
  finalizer; the pod's success was never counted and the Job started a second pod (the
  network-degrade chaos' ``del-iptables`` Job finished later, its cleanup was retried);
* the replicated-volume controller's DRBD step was not at a fixed point after one pass (a finished
  resync that a Primary could not reach stayed UpToDate until some later reconcile), so the extra
  reconcile of every volume after a restore changed disks and timings;
* controller timers due at the same instant fire in the order they were scheduled; a restore
  re-derived them in another order, so volumes created together were reconciled in another order
  (the pending timers are now saved in the snapshot with their order and scheduled again first).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import engine.runner as runner_mod
from engine.cli import main
from engine.clock import VIRTUAL_EPOCH
from engine.loader import load_workflows_text
from engine.runner import RunOptions, resume_local, run_local
from engine.runtime import WorkflowRun
from templates.library.megatest.report import MegatestRecorder
from tests.megatest.conftest import ALL_CHAOS_FLAGS

M = 60.0
CHAOS = ALL_CHAOS_FLAGS


@functools.cache
def megatest_yaml(seed: int, volumes: int, duration: str) -> str:
    """``chaosflow megatest --storage-classes a,b ... -o yaml`` with all chaos on."""
    argv = ["megatest", "--storage-classes", "a,b", "--max-volumes", str(volumes)]
    argv += ["--duration", duration, "--seed", str(seed), *CHAOS, "-o", "yaml"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


Result = tuple[list[dict[str, Any]], dict[str, Any]]


def _result(manager: Any, recorder: MegatestRecorder) -> Result:
    runs = sorted(manager.runs.values(), key=lambda r: r.key)
    records = [json.loads(json.dumps(r.to_object())) for r in runs]
    main_run = next(r for r in runs if r.name == recorder.main)
    recorder.finish(runs)
    return records, json.loads(json.dumps(recorder.to_dict(main_run)))


def _run(
    monkeypatch: pytest.MonkeyPatch, text: str, state: Path, stop_at: float | None
) -> tuple[Result, float | None]:
    """Run ``text`` with ``--state``; with ``stop_at`` (virtual time) stop after the first engine
    tick at or past it (the checkpoint of that tick is the last one), then ``chaosflow resume``.
    One recorder hears both parts, as ``chaosflow megatest`` would hear an uninterrupted run."""
    (wf,) = load_workflows_text(text, "megatest.yaml")
    recorder = MegatestRecorder(wf.name)
    drive: Callable[..., int] = runner_mod._drive
    box: dict[str, Any] = {}

    def spy(env: Any, opts: RunOptions, runs: list[WorkflowRun]) -> int:
        recorder.attach(env.manager)
        box["manager"] = env.manager
        if stop_at is None or "stopped" in box:
            return drive(env, opts, runs)
        env.manager.run(until=lambda: env.clock.now() >= stop_at)
        env.manager.flush()
        env.store.flush()
        box["stopped"] = env.clock.now()
        assert not all(r.phase.finished for r in runs)  # stopped in the middle
        env.manager.close()
        return 1

    monkeypatch.setattr(runner_mod, "_drive", spy)
    code = run_local([wf], RunOptions(state=str(state), progress=False, out=io.StringIO(), err=io.StringIO()))
    if stop_at is not None:
        code = resume_local(str(state), RunOptions(progress=False, out=io.StringIO(), err=io.StringIO()))
    assert code == 0
    return _result(box["manager"], recorder), box.get("stopped")


_reference: dict[tuple[int, int, str], Result] = {}


def _uninterrupted(
    monkeypatch: pytest.MonkeyPatch, tmp: Path, seed: int, volumes: int, duration: str
) -> Result:
    key = (seed, volumes, duration)
    if key not in _reference:
        _reference[key] = _run(monkeypatch, megatest_yaml(*key), tmp / "ref.sqlite", None)[0]
    return _reference[key]


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}.{k}: only in the {'resumed' if k not in a else 'uninterrupted'} run"
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None if len(a) == len(b) else f"{path}: {len(a)} items != {len(b)}"
    return None if a == b else f"{path}: {a!r} != {b!r}"


# (seed, --max-volumes, --duration, stop at minute) and the part of the fix each one needs: it
# diverges without that part (and all but the last one diverged with the sim before the fix)
CASES = [
    (1, 2, "30m", 7.0),  # Job controller: caches first
    (2, 2, "30m", 3.0),  # Job controller
    (2, 2, "30m", 19.0),  # Job controller: the del-iptables Job
    (4, 2, "30m", 23.0),  # Job controller
    (6, 2, "30m", 19.0),  # Job controller
    (10, 3, "40m", 12.0),  # Job controller; DRBD step at a fixed point
    (9, 3, "40m", 21.3),  # DRBD step at a fixed point
    (2, 3, "40m", 2.5),  # saved timer order
    (4, 3, "40m", 17.0),  # saved timer order
]


@pytest.mark.parametrize(("seed", "volumes", "duration", "stop"), CASES)
def test_resumed_megatest_ends_like_the_uninterrupted_run(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    seed: int,
    volumes: int,
    duration: str,
    stop: float,
) -> None:
    records, report = _uninterrupted(monkeypatch, tmp_path, seed, volumes, duration)
    (got_records, got_report), stopped = _run(
        monkeypatch, megatest_yaml(seed, volumes, duration), tmp_path / "run.sqlite", VIRTUAL_EPOCH + stop * M
    )
    assert stopped is not None and stopped >= VIRTUAL_EPOCH + stop * M
    assert got_report == report, _first_difference(report, got_report)
    assert got_records == records, _first_difference(records, got_records)
    assert report["phase"] == "Succeed" and report["rvsCreated"] > 2
