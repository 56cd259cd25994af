"""engine/metrics.py: the figures a sim run exports, bounded labels, the APIs for other parts,
and the consistency of docs/metrics.md, the dashboard and the alert rules with what is exported."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.clock import VirtualClock
from engine.manager import WorkflowManager
from engine.metrics import OTHER, BoundedLabel, LightHistogram, Metrics
from engine.model import Workflow
from engine.runner import LocalEnv, PacedVirtualClock, RunOptions, build_sim_env

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "chaosflow" / "dashboards" / "chaosflow.json"
RULES = ROOT / "charts" / "chaosflow" / "rules" / "chaosflow-rules.yaml"
DOCS = ROOT / "docs" / "metrics.md"


def chaos_workflow(name: str = "campaign", hold: str = "10m") -> Workflow:
    return Workflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "entry": "main",
                "templates": [
                    {"name": "main", "templateType": "Serial", "children": ["warm-up", "chaos"]},
                    {"name": "warm-up", "templateType": "Suspend", "duration": "30s"},
                    {"name": "chaos", "templateType": "Parallel", "children": ["delay", "stress"]},
                    {
                        "name": "delay",
                        "templateType": "NetworkChaos",
                        "duration": hold,
                        "networkChaos": {
                            "action": "delay",
                            "mode": "all",
                            "selector": {"labelSelectors": {"app": "web"}},
                            "delay": {"latency": "90ms"},
                        },
                    },
                    {
                        "name": "stress",
                        "templateType": "StressChaos",
                        "duration": hold,
                        "stressChaos": {
                            "mode": "one",
                            "selector": {"labelSelectors": {"app": "web"}},
                            "stressors": {"cpu": {"workers": 1}},
                        },
                    },
                ],
            },
        }
    )


def sim_env() -> LocalEnv:
    env = build_sim_env(RunOptions(progress=False, out=io.StringIO(), err=io.StringIO()), seed=1)
    env.world.load_world_file(None)
    return env


def value(reg: CollectorRegistry, metric: str, **labels: str) -> float:
    v = reg.get_sample_value(metric, labels)
    assert v is not None, f"no sample {metric}{labels}"
    return v


def value0(reg: CollectorRegistry, metric: str, **labels: str) -> float:
    return reg.get_sample_value(metric, labels) or 0.0


def exported(reg: CollectorRegistry) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}


@pytest.fixture
def reg() -> CollectorRegistry:
    return CollectorRegistry()


def test_sim_run_figures(reg: CollectorRegistry) -> None:
    env = sim_env()
    m = Metrics(reg).attach(env.manager)
    env.manager.submit(chaos_workflow())
    env.manager.run()
    assert value(reg, "chaosflow_workflows_finished_total", phase="Succeed") == 1
    assert value(reg, "chaosflow_workflows", phase="Running") == 0
    assert value(reg, "chaosflow_workflow_duration_seconds_count") == 1
    assert value(reg, "chaosflow_workflow_duration_seconds_sum") == pytest.approx(630, abs=1)
    for kind in ("Serial", "Suspend", "Parallel", "NetworkChaos", "StressChaos"):
        assert value(reg, "chaosflow_node_transitions_total", kind=kind) >= 2
        assert value(reg, "chaosflow_nodes_finished_total", kind=kind, phase="Succeed") == 1
        assert value(reg, "chaosflow_node_duration_seconds_count", kind=kind) == 1
    # virtual seconds: the Suspend took 30 s of the run's clock, not of the wall
    assert value(reg, "chaosflow_node_duration_seconds_sum", kind="Suspend") == pytest.approx(30)
    assert value(reg, "chaosflow_node_duration_seconds_bucket", kind="Suspend", le="30.0") == 1
    assert value(reg, "chaosflow_node_duration_seconds_bucket", kind="Suspend", le="10.0") == 0
    # nothing left active
    for fam in exported(reg)["chaosflow_nodes"].samples:
        assert fam.value == 0, fam
    assert value(reg, "chaosflow_chaos_injections_total", kind="NetworkChaos") == 1
    assert value(reg, "chaosflow_chaos_injected", kind="NetworkChaos") == 0
    assert value(reg, "chaosflow_actor_calls_total", action="object.create") == 2
    assert value(reg, "chaosflow_actor_calls_total", action="object.delete") == 2
    assert value(reg, "chaosflow_actor_errors_total", action="object.create") == 0
    assert value(reg, "chaosflow_actor_call_duration_seconds_count", action="object.create") == 2
    assert value(reg, "chaosflow_schedule_next_latency_seconds_count") >= 2
    assert value(reg, "chaosflow_workqueue_adds_total", name="workflow") == env.trigger.stats.adds
    assert (
        value(reg, "chaosflow_workqueue_queue_duration_seconds_count", name="workflow") == env.manager.events
    )
    assert value(reg, "chaosflow_workqueue_depth", name="workflow") == 0
    assert value(reg, "chaosflow_engine_events_total") == env.manager.events
    assert value(reg, "chaosflow_clock_seconds") == env.clock.now()
    api = exported(reg)["chaosflow_api_requests"].samples
    creates = [s for s in api if s.labels["verb"] == "create" and s.labels["code"] == "201"]
    assert creates and all(s.labels["cluster"] == "default" for s in api)
    assert m.manager is env.manager


def test_injected_and_overdue_chaos(reg: CollectorRegistry) -> None:
    env = sim_env()
    m = Metrics(reg).attach(env.manager)
    env.manager.submit(chaos_workflow(hold="10m"))
    env.manager.run(until=lambda: value0(reg, "chaosflow_chaos_injected", kind="StressChaos") == 1)
    assert value(reg, "chaosflow_chaos_injected", kind="NetworkChaos") == 1
    assert value(reg, "chaosflow_nodes", kind="NetworkChaos", phase="Holding") == 1
    assert value(reg, "chaosflow_nodes", kind="Parallel", phase="WaitingForChild") == 1
    assert value(reg, "chaosflow_nodes", kind="Serial", phase="WaitingForChild") == 1
    assert value(reg, "chaosflow_workflows", phase="Running") == 1
    assert value(reg, "chaosflow_chaos_overdue", kind="NetworkChaos") == 0
    # the engine stalls (its timers are not processed) while the clock moves past the hold end
    clock = env.clock
    assert isinstance(clock, VirtualClock)
    clock.advance(11 * 60)
    assert value(reg, "chaosflow_chaos_overdue", kind="NetworkChaos") == 1
    assert value(reg, "chaosflow_chaos_overdue", kind="StressChaos") == 1
    m.chaos_overdue_grace = 3600
    assert value(reg, "chaosflow_chaos_overdue", kind="NetworkChaos") == 0
    env.manager.run()
    assert value(reg, "chaosflow_chaos_injected", kind="NetworkChaos") == 0
    assert value(reg, "chaosflow_chaos_overdue", kind="NetworkChaos") == 0
    assert value(reg, "chaosflow_workflows_finished_total", phase="Succeed") == 1


def test_resync_counts_adopted_runs(reg: CollectorRegistry) -> None:
    env = sim_env()
    env.manager.submit(chaos_workflow())
    nodes = lambda: [n for r in env.manager.runs.values() for n in r.nodes.values()]  # noqa: E731
    env.manager.run(
        until=lambda: any(n.phase.value == "Holding" and n.kind == "StressChaos" for n in nodes())
    )
    Metrics(reg).attach(env.manager)  # attached late: what is already running is counted
    assert value(reg, "chaosflow_workflows", phase="Running") == 1
    held = value0(reg, "chaosflow_chaos_injected", kind="NetworkChaos")
    assert held + value0(reg, "chaosflow_chaos_injected", kind="StressChaos") >= 1
    env.manager.run()
    for s in exported(reg)["chaosflow_nodes"].samples:
        assert s.value == 0, s
    assert value(reg, "chaosflow_workflows", phase="Running") == 0


def test_actor_errors_and_unknown_actions(reg: CollectorRegistry) -> None:
    env = sim_env()
    m = Metrics(reg, label_limit=2).attach(env.manager)
    wf = Workflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {
                "entry": "c",
                "templates": [
                    {
                        "name": "c",
                        "templateType": "Chaos",
                        "duration": "1m",
                        "chaos": {
                            "cluster": "nowhere",
                            "manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                        },
                    }
                ],
            },
        }
    )
    env.manager.submit(wf)
    env.manager.run()
    assert value(reg, "chaosflow_actor_errors_total", action="object.create") == 1
    assert value(reg, "chaosflow_nodes_finished_total", kind="Chaos", phase="Failed") == 1
    assert value(reg, "chaosflow_workflows_finished_total", phase="Failed") == 1
    # registered actions are known; new ones beyond the limit become "other"
    m.observe_action("x.one", True, 0.1)
    m.observe_action("x.two", False, 0.1)
    m.observe_action("x.three", False, 0.1)
    assert value(reg, "chaosflow_actor_errors_total", action=OTHER) == 2


def test_leader_and_cron(reg: CollectorRegistry) -> None:
    m = Metrics(reg)
    assert value(reg, "chaosflow_leader") == 0
    m.set_leader(True)
    assert value(reg, "chaosflow_leader") == 1
    m.set_leader(False)
    assert value(reg, "chaosflow_leader") == 0
    assert value(reg, "chaosflow_cron_runs_skipped_total", policy="Forbid", reason="ConcurrencyForbid") == 0
    m.cron_run_triggered("Replace")
    m.cron_run_skipped("Forbid", "ConcurrencyForbid")
    m.cron_run_skipped("Bogus", "MissedDeadline", count=3)
    assert value(reg, "chaosflow_cron_runs_triggered_total", policy="Replace") == 1
    assert value(reg, "chaosflow_cron_runs_skipped_total", policy="Forbid", reason="ConcurrencyForbid") == 1
    assert value(reg, "chaosflow_cron_runs_skipped_total", policy="Bogus", reason="MissedDeadline") == 3


def test_megatest_parity_and_bounds(reg: CollectorRegistry) -> None:
    m = Metrics(reg, label_limit=3)
    m.megatest_condition_transition("rv-1", "IOReady")  # broken
    m.megatest_condition_transition("rv-2", "IOReady")  # broken
    m.megatest_condition_transition("rv-1", "IOReady")  # held again
    m.megatest_condition_transition("rv-1", "Quorum")  # broken
    assert value(reg, "chaosflow_megatest_condition_transitions_total", condition="IOReady") == 3
    assert value(reg, "chaosflow_megatest_broken_volumes", condition="IOReady") == 1
    assert value(reg, "chaosflow_megatest_broken_volumes", condition="Quorum") == 1
    assert value(reg, "chaosflow_megatest_volume_breaks_total", condition="IOReady") == 2
    assert value(reg, "chaosflow_megatest_volumes") == 2
    m.megatest_volume_gone("rv-1")
    assert value(reg, "chaosflow_megatest_broken_volumes", condition="Quorum") == 0
    assert value(reg, "chaosflow_megatest_volumes") == 1
    m.megatest_volume_gone("rv-unknown")
    m.megatest_volume_created("rv-3")  # tracked from its creation, before any transition
    m.megatest_volume_created("rv-3")
    assert value(reg, "chaosflow_megatest_volumes") == 2
    m.megatest_volume_gone("rv-3")
    assert value(reg, "chaosflow_megatest_volumes") == 1
    for i in range(10):
        m.megatest_incident(f"type-{i}")
        m.megatest_action(f"action-{i}", 1.5, ok=i % 2 == 0)
    assert value(reg, "chaosflow_megatest_incidents_total", type="type-2") == 1
    assert value(reg, "chaosflow_megatest_incidents_total", type=OTHER) == 7
    assert value(reg, "chaosflow_megatest_action_duration_seconds_count", action=OTHER, result="ok") == 3
    assert "rv-1" not in generate_latest(reg).decode()


def test_no_names_in_labels(reg: CollectorRegistry) -> None:
    env = sim_env()
    m = Metrics(reg).attach(env.manager)
    env.manager.submit(chaos_workflow(name="very-unique-workflow-name"))
    env.manager.run()
    m.megatest_condition_transition("volume-unique-name", "IOReady")
    text = generate_latest(reg).decode()
    assert "very-unique-workflow-name" not in text
    assert "volume-unique-name" not in text
    for n in env.manager.runs["default/very-unique-workflow-name"].nodes:
        assert f'"{n}"' not in text


def test_two_metrics_on_one_registry_conflict(reg: CollectorRegistry) -> None:
    Metrics(reg)
    with pytest.raises(ValueError, match="Duplicated"):
        Metrics(reg)


def test_unregister(reg: CollectorRegistry) -> None:
    m = Metrics(reg)
    m.unregister()
    Metrics(reg)  # the names are free again


def test_bounded_label_and_light_histogram() -> None:
    b = BoundedLabel(2, ["a"])
    assert [b("a"), b("b"), b("c"), b("b")] == ["a", "b", OTHER, "b"]
    h = LightHistogram((1.0, 5.0))
    for v in (0.5, 1.0, 3, 7):
        h.observe(v)
    buckets, total = h.buckets()
    assert buckets == [("1.0", 2), ("5.0", 3), ("+Inf", 4)]
    assert total == 11.5


def test_keeps_an_existing_latency_list() -> None:
    clock = VirtualClock()
    mgr = WorkflowManager(object(), clock)  # type: ignore[arg-type]
    mine: list[float] = []
    mgr.schedule_latencies = mine
    reg = CollectorRegistry()
    Metrics(reg).attach(mgr)
    assert mgr.schedule_latencies is not None
    mgr.schedule_latencies.append(0.5)
    assert mine == [0.5]
    assert value(reg, "chaosflow_schedule_next_latency_seconds_count") == 1


def test_paced_virtual_clock() -> None:
    c = PacedVirtualClock(1000.0, factor=200.0)
    t0 = time.monotonic()
    c.advance_to(1020.0)  # 20 virtual seconds at 200x: 0.1 s of wall time
    assert c.now() == 1020.0
    assert time.monotonic() - t0 >= 0.09
    c.advance_to(1010.0)  # never backwards, never waits
    assert c.now() == 1020.0


def test_serve_metrics_serves_then_unregisters() -> None:
    import socket
    import urllib.request

    from engine.runner import metrics_addr_problem, paced_or_virtual_clock, serve_metrics

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    clock = VirtualClock()
    mgr = WorkflowManager(_NoPlayground(), clock)
    err = io.StringIO()
    for _ in range(2):  # served, closed, served again in the same process (default registry)
        served = serve_metrics(f"127.0.0.1:{port}", mgr, err)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        finally:
            served.close()
        assert "chaosflow_leader 1.0" in text and "chaosflow_megatest_volumes 0.0" in text
        mgr.phase_listeners.clear()
        mgr.workflow_listeners.clear()
        mgr.action_listeners.clear()
    assert err.getvalue().count("serving metrics on http://127.0.0.1:") == 2
    assert metrics_addr_problem("127.0.0.1:9090") is None and metrics_addr_problem(":9090") is None
    assert metrics_addr_problem("[::1]:9090") is None
    for bad in ("localhost", "host:port", "h:99999"):
        assert metrics_addr_problem(bad), bad
    assert isinstance(paced_or_virtual_clock(60.0), PacedVirtualClock)
    assert type(paced_or_virtual_clock(None)) is VirtualClock


class _NoPlayground:
    """A playground without request counters (nothing to read at scrape time)."""


def test_cli_flags() -> None:
    from engine.cli import _options, build_parser

    args = build_parser().parse_args(["run", "x.yaml", "--metrics-addr", "127.0.0.1:9999", "--pace", "60"])
    opts = _options(args)
    assert opts.metrics_addr == "127.0.0.1:9999"
    assert opts.pace == 60.0
    from templates.library.megatest.options import options_from_args

    args = build_parser().parse_args(
        ["megatest", "--storage-classes", "a", "--metrics-addr", ":9999", "--pace", "120"]
    )
    o = options_from_args(args)
    assert (o.metrics_addr, o.pace) == (":9999", 120.0)
    assert o.problems() == []


# --- docs, dashboard and rules agree with what is exported -------------------------------------------
def _all_exported_names() -> set[str]:
    reg = CollectorRegistry()
    env = sim_env()
    m = Metrics(reg).attach(env.manager)
    env.manager.submit(chaos_workflow())
    env.manager.run()
    m.megatest_condition_transition("rv", "IOReady")
    m.megatest_incident("x")
    m.megatest_action("a", 1.0)
    names: set[str] = set()
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
    return names


def _expr_metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bchaosflow_[a-z_]+", expr))


def dashboard_exprs() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text())
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in doc["groups"] for r in g["rules"]]


def test_docs_dashboard_rules_match_exported_metrics() -> None:
    names = _all_exported_names()
    documented = set(re.findall(r"`(chaosflow_[a-z_]+)`", DOCS.read_text()))
    families = {n for n in names if not re.search(r"_(bucket|count|sum|created)$", n)}
    families = {n for n in families if not (n.endswith("_total") and n[: -len("_total")] in families)} | {
        n for n in names if n.endswith("_total")
    }
    missing_docs = {
        n
        for n in families
        if n not in documented
        and not n.endswith("_created")
        and n.removesuffix("_total") + "_total" not in documented
    }
    assert not missing_docs, f"exported but not in docs/metrics.md: {sorted(missing_docs)}"
    unknown_docs = {d for d in documented if d not in names and d + "_count" not in names}
    assert not unknown_docs, f"documented but not exported: {sorted(unknown_docs)}"
    panels = dashboard_exprs()
    assert len(panels) >= 25
    for where, expr in panels + rule_exprs():
        used = _expr_metric_names(expr)
        assert used, where
        assert used <= names, f"{where}: unknown metrics {sorted(used - names)}"


def test_dashboard_shape() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in dash["panels"] if p["type"] == "row"}
    assert {"Engine health", "Workflows", "Chaos", "Trigger queue", "megatest health"} <= titles
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}"
            assert p["targets"], p["title"]


def test_rules_shape() -> None:
    doc = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in doc["groups"] for r in g["rules"]}
    assert {
        "ChaosflowWorkflowStuck",
        "ChaosflowChaosLeftInjected",
        "ChaosflowLeaderMissing",
        "ChaosflowActorErrorRate",
        "ChaosflowAPIErrorRate",
    } <= alerts
    for g in doc["groups"]:
        for r in g["rules"]:
            assert r["labels"]["severity"] in ("warning", "critical")
            assert r["annotations"]["summary"]
