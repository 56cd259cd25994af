"""megatest's live logs and metrics: the checker's condition changes are logged (and counted) when
the watch sees them, on the run's clock, in order with the action lines; the megatest figures of
engine.metrics are fed by the real run; --metrics-addr and --pace."""

from __future__ import annotations

import io
import logging
import socket
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from engine.cli import main
from engine.clock import Clock, rfc3339
from engine.metrics import Metrics
from templates.library.megatest.options import MegatestOptions
from templates.library.megatest.run import MegatestResult, run_megatest
from tests.megatest.conftest import ALL, SPLIT_BRAIN_BUG


@dataclass
class Line:
    msg: str
    fields: dict[str, Any]
    clock: str | None  # the run's clock when the line was emitted


class Capture(logging.Handler):
    """Keeps chaosflow.megatest's records with the run's clock at the moment they are emitted."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.clock: Clock | None = None
        self.lines: list[Line] = []
        self.on_watch: Callable[[Line], None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        assert self.clock is not None
        line = Line(record.getMessage(), dict(record.__dict__), rfc3339(self.clock.now()))
        self.lines.append(line)
        if line.msg == "watch" and self.on_watch is not None:
            self.on_watch(line)

    def setup(self, sim: Any) -> None:  # run_megatest's setup hook: the sim world's clock
        self.clock = sim.world.clock

    def watches(self) -> list[Line]:
        return [ln for ln in self.lines if ln.msg == "watch"]


@pytest.fixture
def capture() -> Iterator[Capture]:
    cap = Capture()
    lg = logging.getLogger("chaosflow.megatest")
    old = lg.level
    lg.setLevel(logging.INFO)
    lg.addHandler(cap)
    try:
        yield cap
    finally:
        lg.removeHandler(cap)
        lg.setLevel(old)


def _run(cap: Capture, o: MegatestOptions, metrics: Metrics | None = None) -> MegatestResult:
    return run_megatest(o, "json", io.StringIO(), setup=cap.setup, metrics=metrics)


def _value(reg: CollectorRegistry, name: str, **labels: str) -> float:
    v = reg.get_sample_value(name, labels)
    return 0.0 if v is None else v


#: every goroutine, with chaos most of the time: RVs flap (transitions) in 15 minutes
CHAOTIC = MegatestOptions(
    storage_classes=["a", "b"],
    **{  # type: ignore[arg-type]
        **ALL,
        "duration": 900.0,
        "seed": 7,
        "chaos_period_min": 30.0,
        "chaos_period_max": 60.0,
        "chaos_incident_min": 40.0,
        "chaos_incident_max": 60.0,
    },
)


def test_a_condition_change_is_logged_when_it_happens_not_when_the_checker_ends(capture: Capture) -> None:
    res = _run(capture, SPLIT_BRAIN_BUG)
    assert res.report["brokenRVs"]
    first = capture.watches()[0]
    f = first.fields
    rv = f["rv"]
    assert f["condition"] in ("IOReady", "Quorum")
    assert (f["expected"], f["observed"], f["transitions"]) == ("True", "False", 1)
    assert f["reason"] and f["detail"]  # the condition's Reason and Message (the seed)
    assert f["at"] == first.clock  # emitted at the moment of the change, on the virtual clock
    # in order with the action lines: inside the incident that broke it, long before the RV's end
    lines = capture.lines
    i = lines.index(first)
    running = Counter(ln.fields["action"] for ln in lines[:i] if ln.msg == "action started")
    running.subtract(ln.fields["action"] for ln in lines[:i] if ln.msg == "action finished")
    incidents = sorted(a for a, n in running.items() if n > 0 and a.startswith("chaos-"))
    assert incidents, "no chaos incident in progress when the RV broke"
    finished = min(
        j
        for j, ln in enumerate(lines)
        if j > i and ln.msg == "action finished" and ln.fields["action"] in incidents
    )
    assert datetime.fromisoformat(lines[finished].fields["at"]) > datetime.fromisoformat(f["at"])
    end = next(
        j
        for j, ln in enumerate(lines)
        if ln.fields.get("rv") == rv and ln.fields.get("action") == "volume-delete-rvas"
    )
    assert i < end
    assert res.report["volumes"][rv]["checked"]


def test_watch_lines_count_every_transition_in_clock_order(capture: Capture) -> None:
    res = _run(capture, CHAOTIC)
    lines = capture.lines
    ats = [datetime.fromisoformat(ln.fields["at"]) for ln in lines]
    assert ats == sorted(ats), "megatest lines are not in the order of the run's clock"
    watches = capture.watches()
    assert watches
    seen: dict[tuple[str, str], int] = {}
    for w in watches:
        f = w.fields
        assert f["at"] == w.clock
        key = (f["rv"], f["condition"])
        seen[key] = seen.get(key, 0) + 1
        assert f["transitions"] == seen[key]  # the running count, one line per transition
        assert f["observed"] == ("False" if seen[key] % 2 else "True")
    for rv, v in res.report["volumes"].items():
        for cond, n in v["transitions"].items():
            assert seen.get((rv, cond), 0) == n, (rv, cond)
    # the replicas' condition lines: in the same order, one per flip, counted apart per RV
    rvr_lines = [ln for ln in lines if ln.msg == "rvr condition"]
    assert rvr_lines
    flips: Counter[tuple[str, str]] = Counter()
    for ln in rvr_lines:  # (the flip rules: test_volume_main.test_replica_condition_flips)
        f = ln.fields
        assert f["at"] == ln.clock and f["rvr"].startswith(f["rv"] + "-")
        assert f["condition"] != "Attached" and f["expected"] == "True"
        flips[(f["rv"], f["condition"])] += 1
    for rv, v in res.report["volumes"].items():
        assert {c: flips[(rv, c)] for c in v["rvrConditionFlips"]} == v["rvrConditionFlips"], rv
    assert sum(flips.values()) == sum(
        sum(v["rvrConditionFlips"].values()) for v in res.report["volumes"].values()
    )


def test_the_megatest_feeds_its_metrics_live(capture: Capture) -> None:
    reg = CollectorRegistry()
    r = _run(capture, CHAOTIC, Metrics(reg)).report
    per_cond = {c: sum(v["transitions"][c] for v in r["volumes"].values()) for c in ("IOReady", "Quorum")}
    assert sum(per_cond.values()) > 0
    for c, n in per_cond.items():
        assert _value(reg, "chaosflow_megatest_condition_transitions_total", condition=c) == n
        broken = sum(1 for v in r["volumes"].values() if v["transitions"][c] % 2 and not v["deleted"])
        assert _value(reg, "chaosflow_megatest_broken_volumes", condition=c) == broken
    assert _value(reg, "chaosflow_megatest_volumes") == r["rvsCreated"] - r["rvsDeleted"]
    for kind, n in r["incidents"].items():
        assert _value(reg, "chaosflow_megatest_incidents_total", type=kind) == n
    for action, a in r["actions"].items():
        ok = _value(reg, "chaosflow_megatest_action_duration_seconds_count", action=action, result="ok")
        err = _value(reg, "chaosflow_megatest_action_duration_seconds_count", action=action, result="error")
        assert (ok + err, err) == (a["count"], a["errors"]), action
    assert _value(reg, "chaosflow_node_transitions_total", kind="StatusCheck") > 0  # engine metrics too


def test_metrics_are_fed_while_the_run_goes_on(capture: Capture) -> None:
    """A watch line's transition is already on the counter when the line is written."""
    reg = CollectorRegistry()
    seen: list[float] = []
    capture.on_watch = lambda line: seen.append(
        _value(reg, "chaosflow_megatest_condition_transitions_total", condition="Quorum")
    )
    _run(capture, SPLIT_BRAIN_BUG, Metrics(reg))
    quorum = [w.fields["transitions"] for w in capture.watches() if w.fields["condition"] == "Quorum"]
    assert quorum
    totals = [v for w, v in zip(capture.watches(), seen, strict=True) if w.fields["condition"] == "Quorum"]
    assert totals == [float(i + 1) for i in range(len(totals))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_addr_serves_during_a_paced_run(capture: Capture) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    scraped: list[str] = []

    def scrape(line: Line) -> None:  # scrape /metrics while the run goes on, at its first change
        if not scraped:
            with urllib.request.urlopen(url, timeout=5) as r:
                scraped.append(r.read().decode())

    capture.on_watch = scrape
    # the first RV breaks after 17 minutes (seed 3)
    o = replace(SPLIT_BRAIN_BUG, duration=1200.0, metrics_addr=f"127.0.0.1:{port}", pace=4000.0)
    res = _run(capture, o)
    assert res.wall >= 1200 / 4000 * 0.9  # paced: 1200 virtual seconds at 4000 x wall time
    assert scraped, "no condition changed during the run"
    text = scraped[0]
    assert 'chaosflow_megatest_condition_transitions_total{condition="IOReady"} 1.0' in text
    assert "chaosflow_megatest_volumes " in text and "chaosflow_clock_seconds " in text
    # the server is gone and its metrics unregistered: another run in this process may serve again
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
    again = replace(o, duration=30.0, pace=None, metrics_addr=f"127.0.0.1:{_free_port()}")
    assert _run(capture, again).report["phase"] == "Succeed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pace", "0"], "--pace must be positive"),
        (["--metrics-addr", "localhost"], "--metrics-addr: 'localhost' is not HOST:PORT"),
        (["--kubeconfig", "/nonexistent", "--pace", "10"], "--pace paces the simulated clock"),
    ],
)
def test_cli_metrics_and_pace_flags_are_checked(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["megatest", "--storage-classes", "a", *args]) == 2
    assert message in capsys.readouterr().err
