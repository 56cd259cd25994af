"""A real Prometheus against a running chaosflow: rules check, every dashboard panel, every alert.

Prometheus and promtool are built from the Go module pinned in hack/tools/prometheus by
hack/build-prometheus.sh (cached; PROMETHEUS_ASSETS may name a folder holding both). Without Go
and without a cache the tests skip, except under CHAOSFLOW_CI / CHAOSFLOW_REQUIRE_E2E (fail).

The panel check runs the real megatest on the sim (``chaosflow megatest --sim`` with every
goroutine and chaos on) for ninety virtual minutes, paced (``--pace``) to about half a minute of
wall time and serving ``--metrics-addr``; Prometheus scrapes it every second and evaluates the
alert rules every second. The megatest gives every panel its data: the engine's (workflows, nodes
of many kinds, chaos held, the queue, actor calls, API requests) and the megatest's own (condition
transitions, broken volumes, incidents, action durations), fed live by its recorder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import unavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-prometheus.sh"
RULES = REPO_ROOT / "charts" / "chaosflow" / "rules" / "chaosflow-rules.yaml"
DASHBOARD = REPO_ROOT / "charts" / "chaosflow" / "dashboards" / "chaosflow.json"
BUILD_TIMEOUT = float(os.environ.get("CHAOSFLOW_E2E_BUILD_TIMEOUT", "3600"))
RATE_INTERVAL = "15s"  # what Grafana's $__rate_interval becomes for the panel check (1 s scrapes)
VIRTUAL_SECONDS = 5400
PACE = 150  # 90 virtual minutes in 36 s of wall time (the megatest needs ~8 s of CPU for them)
#: every goroutine and chaos of the megatest (docs/megatest.md)
MEGATEST_FLAGS = [
    "--enable-pod-destroyer",
    "--enable-volume-replica-destroyer",
    "--enable-volume-replica-creator",
    "--enable-chaos-network-block",
    "--enable-chaos-network-degrade",
    "--enable-chaos-vm-reboot",
]
CLI = "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def prometheus_assets() -> Path:
    """Folder holding prometheus and promtool (built once, then cached)."""
    env = os.environ.get("PROMETHEUS_ASSETS")
    if env and all((Path(env) / b).is_file() for b in ("prometheus", "promtool")):
        return Path(env)
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            check=False,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        unavailable(f"hack/build-prometheus.sh did not finish within {BUILD_TIMEOUT:.0f}s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        unavailable(f"hack/build-prometheus.sh exited {proc.returncode}:\n{tail}")
    return Path(lines[-1])


def test_promtool_check_rules(prometheus_assets: Path) -> None:
    out = subprocess.run(
        [str(prometheus_assets / "promtool"), "check", "rules", str(RULES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


# --- the panel check ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, **params: str) -> dict[str, Any]:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as r:
        doc: dict[str, Any] = json.load(r)
    return doc


def query(base: str, expr: str) -> dict[str, Any]:
    try:
        return api(base, "/api/v1/query", query=expr)
    except urllib.error.HTTPError as e:  # 400/422 carry the error as JSON
        doc: dict[str, Any] = json.load(e)
        return doc


def wait_for(what: str, cond: Any, timeout: float, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            if cond():
                return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"waiting for {what}: process exited {proc.returncode}")
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


@contextlib.contextmanager
def started(
    args: list[str], log: Path, stdout: Path | None = None, **kw: Any
) -> Iterator[subprocess.Popen[str]]:
    """Run ``args`` with stderr (and stdout, unless ``stdout`` names its own file) to ``log``."""
    with log.open("w") as err, contextlib.ExitStack() as stack:
        out = stack.enter_context(stdout.open("w")) if stdout is not None else err
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True, **kw)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def panel_exprs() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", "1s")
            out.append((f"{p['title']} [{t['refId']}]", expr))
    return out


def test_every_panel_and_alert_against_real_prometheus(prometheus_assets: Path, tmp_path: Path) -> None:
    mport, pport = free_port(), free_port()
    target = f"127.0.0.1:{mport}"
    (tmp_path / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "chaosflow", "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    base = f"http://127.0.0.1:{pport}"
    run_args = [sys.executable, "-c", CLI, "megatest", "--sim", "--storage-classes", "a,b"]
    run_args += ["--duration", f"{VIRTUAL_SECONDS // 60}m", "--seed", "7", *MEGATEST_FLAGS]
    run_args += ["--metrics-addr", target, "--pace", str(PACE), "--report", "json", "--log-format", "json"]
    prom_args = [
        str(prometheus_assets / "prometheus"),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{pport}",
        "--log.level=warn",
    ]
    report = tmp_path / "report.json"
    t0 = time.monotonic()
    with (
        started(prom_args, tmp_path / "prometheus.log") as prom,
        started(run_args, tmp_path / "chaosflow.log", stdout=report, cwd=REPO_ROOT) as run,
    ):
        wait_for(
            "prometheus ready",
            lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200,
            60,
            prom,
        )
        wait_for(
            "15 s of scrapes",
            lambda: (
                float(
                    query(base, 'count_over_time(up{job="chaosflow"}[1m])')["data"]["result"][0]["value"][1]
                )
                >= 15
                and query(base, 'up{job="chaosflow"}')["data"]["result"][0]["value"][1] == "1"
            ),
            90,
            run,
        )
        empty: list[str] = []
        for title, expr in panel_exprs():
            doc = query(base, expr)
            assert doc["status"] == "success", f"panel {title}: {expr}: {doc.get('error')}"
            if not doc["data"]["result"]:
                empty.append(f"{title}: {expr}")
        assert not empty, "panels without data:\n" + "\n".join(empty)
        rules = api(base, "/api/v1/rules")["data"]["groups"]
        loaded = [r for g in rules for r in g["rules"]]
        assert len(loaded) >= 5
        for r in loaded:
            assert r["health"] == "ok", f"{r['name']}: {r.get('lastError')}"
            doc = query(base, r["query"])
            assert doc["status"] == "success", f"alert {r['name']}: {doc.get('error')}"
        # the run's view and Prometheus's agree: chaos was injected and the clock is paced
        speed = query(base, "max(deriv(chaosflow_clock_seconds[10s]))")["data"]["result"][0]["value"][1]
        assert 0.5 * PACE < float(speed) < 1.5 * PACE, speed
        injections = query(base, "sum(chaosflow_chaos_injections_total)")["data"]["result"][0]["value"][1]
        assert float(injections) >= 1
        scraped = {
            name: float(query(base, f"sum({name})")["data"]["result"][0]["value"][1])
            for name in (
                "chaosflow_megatest_condition_transitions_total",
                "chaosflow_megatest_incidents_total",
                "chaosflow_megatest_action_duration_seconds_count",
            )
        }
        run.wait(timeout=120)
        log = (tmp_path / "chaosflow.log").read_text()
        assert run.returncode in (0, 1), log[-3000:]  # 1: the megatest found a broken RV
    wall = time.monotonic() - t0
    assert wall < 120, f"the paced run took {wall:.0f}s"
    doc = json.loads(report.read_text())
    assert doc["phase"] == "Succeed", doc["message"]
    assert re.search(r"serving metrics on http://127\.0\.0\.1:\d+/metrics", log)
    # the megatest fed its panels while it ran: Prometheus saw part of the final figures, live
    transitions = sum(sum(v["transitions"].values()) for v in doc["volumes"].values())
    assert 0 < scraped["chaosflow_megatest_condition_transitions_total"] <= transitions
    assert 0 < scraped["chaosflow_megatest_incidents_total"] <= sum(doc["incidents"].values())
    actions = sum(a["count"] for a in doc["actions"].values())
    assert 0 < scraped["chaosflow_megatest_action_duration_seconds_count"] <= actions
    # the checker's condition changes were logged as they happened (JSON lines, on the run's clock)
    watches = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{") and '"msg":"watch"' in ln]
    assert len(watches) == transitions
    assert all(w["at"].startswith("2026-01-01T") and w["condition"] in ("IOReady", "Quorum") for w in watches)
