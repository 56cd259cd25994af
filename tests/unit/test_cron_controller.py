"""The pure CronWorkflow controller: (cron, status, children, now) -> actions, status, next wake-up."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from engine.clock import parse_rfc3339, rfc3339
from engine.cron import (
    ANNOTATION_SCHEDULED,
    LABEL_CRON,
    AbortChild,
    ChildInfo,
    CronController,
    CronDriver,
    CronWorkflow,
    CronWorkflowStatus,
    DeleteChild,
    Reconcile,
    SkipTick,
    SubmitChild,
    build_child,
    child_name,
    load_cron_workflow_file,
    load_cron_workflows_text,
    scheduled_time_of,
)
from engine.errors import ValidationFailed
from engine.model import Workflow

T0 = parse_rfc3339("2026-01-01T00:00:00Z")
H = 3600.0
ROOT = Path(__file__).resolve().parents[2]


def cron(name: str = "nightly", **spec: Any) -> CronWorkflow:
    spec.setdefault("schedules", ["0 * * * *"])
    return CronWorkflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "CronWorkflow",
            "metadata": {"name": name, "namespace": "chaos"},
            "spec": {
                "workflowSpec": {
                    "entry": "s",
                    "templates": [{"name": "s", "templateType": "Suspend", "duration": "90m"}],
                },
                **spec,
            },
        }
    )


class World:
    """A fake children store: the controller's actions applied to a dict of name -> phase."""

    def __init__(self, c: CronWorkflow) -> None:
        self.ctl = CronController(c)
        self.status: CronWorkflowStatus | None = None
        self.children: dict[str, ChildInfo] = {}
        self.log: list[Reconcile] = []

    def at(self, now: float) -> Reconcile:
        rec = self.ctl.reconcile(self.status, self.children, now)
        for a in rec.actions:
            if isinstance(a, SubmitChild):
                assert a.name not in self.children, f"{a.name} submitted twice"
                self.children[a.name] = ChildInfo("Running")
            elif isinstance(a, AbortChild):
                self.children[a.name] = ChildInfo("Failed", now)
            elif isinstance(a, DeleteChild):
                del self.children[a.name]
        self.status = rec.status
        self.log.append(rec)
        return rec

    def finish(self, name: str, phase: str = "Succeed", at: float | None = None) -> None:
        self.children[name] = ChildInfo(phase, at)


def submitted(rec: Reconcile) -> list[float]:
    return [a.scheduled_time for a in rec.of(SubmitChild)]


def skips(rec: Reconcile) -> list[tuple[str, int]]:
    return [(a.reason.value, a.count) for a in rec.of(SkipTick)]


# --- names ---------------------------------------------------------------------------------------
def test_child_names_are_deterministic_and_parse_back() -> None:
    assert child_name("nightly", T0 + H) == "nightly-1767229200"
    assert scheduled_time_of("nightly", "nightly-1767229200") == 1767229200
    assert scheduled_time_of("nightly", "other-1767229200") is None
    assert scheduled_time_of("nightly", "nightly-abc") is None
    assert scheduled_time_of("night", "nightly-1767229200") is None


def test_long_cron_names_are_shortened_with_a_stable_hash() -> None:
    long = "a-very-long-cron-workflow-name-that-goes-on-and-on-and-on-for-ever.and.ever"
    n = child_name(long, T0)
    assert len(n) <= 63 and n.endswith("-1767225600")
    assert n == child_name(long, T0)
    assert n != child_name(long + "x", T0)
    assert scheduled_time_of(long, n) == 1767225600


def test_child_workflow_labels_annotations_and_seed() -> None:
    c = cron(workflowMetadata={"labels": {"team": "storage"}, "annotations": {"note": "x"}})
    w = World(c)
    w.at(T0)
    (sub,) = w.at(T0 + H).of(SubmitChild)
    wf: Workflow = sub.workflow
    assert wf.metadata.name == "nightly-1767229200" and wf.metadata.namespace == "chaos"
    assert wf.metadata.labels == {"team": "storage", LABEL_CRON: "nightly"}
    assert wf.metadata.annotations == {"note": "x", ANNOTATION_SCHEDULED: "2026-01-01T01:00:00Z"}
    seed = wf.spec.seed
    assert seed is not None
    (sub2,) = w.at(T0 + 2 * H).of(SubmitChild)
    assert sub2.workflow.spec.seed != seed  # each tick draws differently ...
    assert build_child(c, T0 + H).spec.seed == seed  # ... and the same tick always the same
    fixed = cron(
        workflowSpec={"entry": "s", "seed": 7, "templates": [{"name": "s", "templateType": "Suspend"}]}
    )
    assert build_child(fixed, T0 + H).spec.seed == 7 == build_child(fixed, T0 + 2 * H).spec.seed


# --- on time --------------------------------------------------------------------------------------
def test_first_reconcile_sets_the_watermark_and_the_next_wake() -> None:
    w = World(cron())
    rec = w.at(T0)  # a tick exactly at creation time is not run (as CronJob: after creation)
    assert rec.actions == [] and rec.next_wake == T0 + H
    assert rec.status.lastEvaluatedTime == "2026-01-01T00:00:00Z" and rec.status.phase == "Active"


def test_creation_timestamp_is_the_starting_point() -> None:
    c = cron()
    c.metadata.creationTimestamp = "2025-12-31T22:30:00Z"  # type: ignore[attr-defined]
    rec = World(c).at(T0 + 5)
    assert submitted(rec) == [T0]  # the 23:00 tick is superseded, 00:00 runs
    assert skips(rec) == [("Superseded", 1)]


def test_tick_on_time_submits_once() -> None:
    w = World(cron())
    w.at(T0)
    rec = w.at(T0 + H)
    assert submitted(rec) == [T0 + H] and rec.next_wake == T0 + 2 * H
    st = rec.status
    assert st.lastScheduledTime == "2026-01-01T01:00:00Z"
    assert [a.name for a in st.active] == ["nightly-1767229200"]
    cond = {c.type: c for c in st.conditions}
    assert cond["Scheduled"].status == "True" and cond["Scheduled"].reason == "Submitted"
    assert w.at(T0 + H).actions == []  # woken twice: nothing new
    assert w.at(T0 + H + 30).actions == []
    assert w.ctl.metrics.triggered == 1 and w.ctl.metrics.triggered_catch_up == 0


def test_counts_succeeded_and_failed_once_and_last_successful_time() -> None:
    w = World(cron(concurrencyPolicy="Allow"))
    w.at(T0)
    w.at(T0 + H)
    w.at(T0 + 2 * H)
    w.finish("nightly-1767229200", "Succeed", T0 + H + 600)
    w.finish("nightly-1767232800", "Failed", T0 + 2 * H + 60)
    st = w.at(T0 + 2 * H + 100).status
    assert (st.succeeded, st.failed, st.active) == (1, 1, [])
    assert st.lastSuccessfulTime == "2026-01-01T01:10:00Z"
    st = w.at(T0 + 2 * H + 200).status
    assert (st.succeeded, st.failed) == (1, 1)  # not counted again


# --- restarts: the children are the truth ---------------------------------------------------------
def test_lost_status_never_double_submits() -> None:
    w = World(cron())
    w.at(T0)
    w.at(T0 + H)
    w.status = None  # the status write was lost (or a new leader without it)
    rec = w.at(T0 + H + 10)
    assert submitted(rec) == []  # the child exists: its tick is not submitted again
    assert [a.name for a in rec.status.active] == ["nightly-1767229200"]  # adopted as active
    assert submitted(w.at(T0 + 2 * H)) == [T0 + 2 * H]


def test_a_lagging_watermark_is_moved_by_the_newest_child() -> None:
    w = World(cron(catchUp="All"))
    w.at(T0)
    w.at(T0 + H)
    stale = w.status
    w.at(T0 + 2 * H)
    w.status = stale  # an older status (lastEvaluatedTime 01:00) but the 02:00 child exists
    assert submitted(w.at(T0 + 2 * H + 5)) == []


# --- missed ticks ---------------------------------------------------------------------------------
def test_downtime_catch_up_latest_runs_only_the_most_recent() -> None:
    w = World(cron())
    w.at(T0)
    rec = w.at(T0 + 5 * H + 1200)  # down from 00:00 to 05:20: 01..05 missed
    assert submitted(rec) == [T0 + 5 * H]
    assert skips(rec) == [("Superseded", 4)]
    assert rec.of(SubmitChild)[0].catch_up
    assert w.ctl.metrics.skipped == {"Superseded": 4} and w.ctl.metrics.triggered_catch_up == 1


def test_downtime_catch_up_all_runs_every_missed_tick_in_order_up_to_max() -> None:
    w = World(cron(catchUp="All", maxCatchUp=3))
    w.at(T0)
    rec = w.at(T0 + 5 * H + 1200)
    assert submitted(rec) == [T0 + 3 * H, T0 + 4 * H, T0 + 5 * H]
    assert skips(rec) == [("Superseded", 2)]
    w2 = World(cron(catchUp="All"))
    w2.at(T0)
    assert submitted(w2.at(T0 + 5 * H + 1200)) == [T0 + k * H for k in range(1, 6)]


def test_downtime_catch_up_none_skips_every_missed_tick() -> None:
    w = World(cron(catchUp="None"))
    w.at(T0)
    rec = w.at(T0 + 5 * H + 1200)
    assert submitted(rec) == [] and skips(rec) == [("CatchUpNone", 5)]
    assert rec.next_wake == T0 + 6 * H
    assert submitted(w.at(T0 + 6 * H)) == [T0 + 6 * H]  # back on schedule
    assert submitted(w.at(T0 + 7 * H + 30)) == [T0 + 7 * H]  # a little late is still on time


@pytest.mark.parametrize("policy", ["Latest", "All"])
def test_starting_deadline_bounds_catch_up(policy: str) -> None:
    w = World(cron(catchUp=policy, startingDeadlineSeconds=2 * 3600 + 1800))
    w.at(T0)
    rec = w.at(T0 + 5 * H + 1200)  # eligible: ticks at or after 02:50 -> 03:00, 04:00, 05:00
    expected = [T0 + 5 * H] if policy == "Latest" else [T0 + 3 * H, T0 + 4 * H, T0 + 5 * H]
    assert submitted(rec) == expected
    got = dict(skips(rec))
    assert got["MissedDeadline"] == 2  # 01:00, 02:00
    assert got.get("Superseded", 0) == (2 if policy == "Latest" else 0)


def test_every_missed_tick_beyond_the_deadline_runs_nothing() -> None:
    w = World(cron(startingDeadlineSeconds=600))
    w.at(T0)
    rec = w.at(T0 + 3 * H + 1200)  # 03:00 is 20 minutes late, the deadline is 10
    assert submitted(rec) == [] and skips(rec) == [("MissedDeadline", 3)]
    assert rec.status.lastSkipped is not None and rec.status.lastSkipped.reason == "MissedDeadline"


def test_a_year_of_downtime_on_a_minutely_schedule_is_bounded() -> None:
    w = World(cron(schedules=["* * * * *"]))
    w.at(T0)
    t = time.perf_counter()
    rec = w.at(T0 + 365 * 86400 + 30)
    assert time.perf_counter() - t < 5
    assert submitted(rec) == [T0 + 365 * 86400]
    ((reason, n),) = skips(rec)
    assert reason == "Superseded" and n == 1000  # counted up to 1000, reported as 1000+
    assert "1000+ ticks" in rec.of(SkipTick)[0].message


# --- concurrency ------------------------------------------------------------------------------------
def test_forbid_skips_while_a_child_is_active_and_records_why() -> None:
    w = World(cron(concurrencyPolicy="Forbid"))
    w.at(T0)
    w.at(T0 + H)
    rec = w.at(T0 + 2 * H)
    assert submitted(rec) == [] and skips(rec) == [("ConcurrencyForbid", 1)]
    st = rec.status
    assert st.lastSkipped is not None
    assert (
        st.lastSkipped.reason == "ConcurrencyForbid"
        and "nightly-1767229200 still active" in st.lastSkipped.message
    )
    assert st.lastSkipped.scheduledTime == "2026-01-01T02:00:00Z"
    cond = {c.type: c for c in st.conditions}["Scheduled"]
    assert (cond.status, cond.reason) == ("False", "ConcurrencyForbid")
    w.finish("nightly-1767229200", at=T0 + 2 * H + 1800)
    assert submitted(w.at(T0 + 3 * H)) == [T0 + 3 * H]


def test_forbid_applies_to_catch_up_runs() -> None:
    w = World(cron(concurrencyPolicy="Forbid", catchUp="All"))
    w.at(T0)
    rec = w.at(T0 + 3 * H + 60)
    assert submitted(rec) == [T0 + H]  # the oldest runs; the others find it active
    assert skips(rec) == [("ConcurrencyForbid", 1), ("ConcurrencyForbid", 1)]


def test_replace_aborts_the_active_child_and_submits_the_new_one() -> None:
    w = World(cron(concurrencyPolicy="Replace"))
    w.at(T0)
    w.at(T0 + H)
    rec = w.at(T0 + 2 * H)
    assert [type(a).__name__ for a in rec.actions] == ["AbortChild", "SubmitChild"]
    (abort,) = rec.of(AbortChild)
    assert abort.name == "nightly-1767229200" and "replaced by nightly-1767232800" in abort.message
    assert w.ctl.metrics.replaced == 1


def test_replace_with_catch_up_starts_only_the_newest() -> None:
    w = World(cron(concurrencyPolicy="Replace", catchUp="All"))
    w.at(T0)
    w.at(T0 + H)
    rec = w.at(T0 + 4 * H + 60)
    assert submitted(rec) == [T0 + 4 * H]
    assert skips(rec) == [("Superseded", 1), ("Superseded", 1)]
    assert [a.name for a in rec.of(AbortChild)] == ["nightly-1767229200"]


def test_allow_runs_concurrently() -> None:
    w = World(cron(catchUp="All"))
    w.at(T0)
    assert len(submitted(w.at(T0 + 3 * H))) == 3
    assert len(w.status.active) == 3  # type: ignore[union-attr]


# --- history, suspend, errors -------------------------------------------------------------------
def test_history_limits_delete_the_oldest_finished_children() -> None:
    w = World(cron(successfulJobsHistoryLimit=2, failedJobsHistoryLimit=1, catchUp="All"))
    w.at(T0)
    w.at(T0 + 6 * H)
    names = sorted(w.children)
    for n in names[:4]:
        w.finish(n, "Succeed")
    for n in names[4:]:
        w.finish(n, "Failed")
    rec = w.at(T0 + 6 * H + 60)
    deleted = [a.name for a in rec.of(DeleteChild)]
    assert deleted == [names[1], names[0], names[4]]
    assert sorted(w.children) == [names[2], names[3], names[5]]
    assert (rec.status.succeeded, rec.status.failed) == (4, 2)


def test_history_limit_zero_deletes_at_once() -> None:
    w = World(cron(successfulJobsHistoryLimit=0))
    w.at(T0)
    w.at(T0 + H)
    w.finish("nightly-1767229200")
    assert [a.name for a in w.at(T0 + H + 60).of(DeleteChild)] == ["nightly-1767229200"]


def test_suspend_skips_ticks_and_never_catches_them_up() -> None:
    w = World(cron())
    w.at(T0)
    w.ctl.set_spec(cron(suspend=True))
    rec = w.at(T0 + H)
    assert submitted(rec) == [] and skips(rec) == [("Suspended", 1)]
    assert rec.status.phase == "Suspended" and rec.next_wake == T0 + 2 * H
    assert {c.type: c.status for c in rec.status.conditions}["Suspended"] == "True"
    w.ctl.set_spec(cron())
    rec = w.at(T0 + H + 1200)
    assert rec.actions == [] and rec.status.phase == "Active"
    assert submitted(w.at(T0 + 2 * H)) == [T0 + 2 * H]


def test_an_invalid_schedule_is_a_condition_not_a_crash() -> None:
    c = cron(schedules=["61 * * * *"])  # the model accepts it; the loader would reject it
    rec = CronController(c).reconcile(None, {}, T0)
    assert rec.actions == [] and rec.next_wake is None
    cond = {x.type: x for x in rec.status.conditions}["SpecError"]
    assert cond.status == "True" and "out of range" in cond.message


def test_children_of_other_crons_are_ignored() -> None:
    w = World(cron(concurrencyPolicy="Forbid"))
    w.children["other-1767229200"] = ChildInfo("Running")
    w.children["unrelated"] = ChildInfo("Running")
    w.at(T0)
    assert submitted(w.at(T0 + H)) == [T0 + H]


def test_status_round_trips_through_json() -> None:
    w = World(cron(concurrencyPolicy="Forbid"))
    w.at(T0)
    w.at(T0 + H)
    w.at(T0 + 2 * H)
    raw = w.status.model_dump(mode="json", exclude_none=True)  # type: ignore[union-attr]
    w.status = CronWorkflowStatus.model_validate(raw)
    assert w.at(T0 + 2 * H + 1).actions == []
    assert rfc3339(T0 + 2 * H + 1) == w.status.lastEvaluatedTime


# --- the driver -----------------------------------------------------------------------------------
class FakeBackend:
    def __init__(self) -> None:
        self.children: dict[str, ChildInfo] = {}
        self.calls: list[tuple[str, str]] = []

    def list_children(self, cron: CronWorkflow) -> dict[str, ChildInfo]:
        return dict(self.children)

    def submit(self, workflow: Workflow) -> None:
        self.calls.append(("submit", workflow.name))
        self.children.setdefault(workflow.name, ChildInfo("Running"))

    def abort(self, namespace: str, name: str, message: str) -> None:
        self.calls.append(("abort", name))

    def delete(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", name))
        self.children.pop(name, None)


def test_driver_applies_actions_through_the_backend() -> None:
    be = FakeBackend()
    d = CronDriver(cron(concurrencyPolicy="Replace", successfulJobsHistoryLimit=0), be)
    seen: list[str] = []
    d.listeners.append(lambda c, a, now: seen.append(type(a).__name__))
    d.sync(T0)
    d.sync(T0 + H)
    d.sync(T0 + 2 * H)
    be.children["nightly-1767229200"] = ChildInfo("Succeed")
    d.sync(T0 + 2 * H + 5)
    assert be.calls == [
        ("submit", "nightly-1767229200"),
        ("abort", "nightly-1767229200"),
        ("submit", "nightly-1767232800"),
        ("delete", "nightly-1767229200"),
    ]
    assert seen == ["SubmitChild", "AbortChild", "SubmitChild", "DeleteChild"]
    assert d.status.lastScheduledTime == "2026-01-01T02:00:00Z"


# --- loading files ------------------------------------------------------------------------------
def test_the_example_loads() -> None:
    (c,) = load_cron_workflow_file(str(ROOT / "examples" / "cron-nightly.yaml"))
    assert c.name == "nightly-chaos" and c.spec.timezone == "Europe/Berlin"
    assert c.spec.concurrencyPolicy == "Forbid" and c.spec.successfulJobsHistoryLimit == 3


def test_invalid_files_report_every_problem_with_its_path() -> None:
    text = """
apiVersion: chaosflow.io/v1alpha1
kind: CronWorkflow
metadata: {name: Bad_Name}
spec:
  schedules: ["0 2 * * *", "0 25 * * *"]
  schedule: "@sometimes"
  timezone: Europe/Atlantis
  workflowSpec:
    entry: main
    templates:
      - {name: main, templateType: Serial, children: [missing]}
"""
    with pytest.raises(ValidationFailed) as e:
        load_cron_workflows_text(text, "c.yaml")
    lines = str(e.value).splitlines()
    assert 'c.yaml: metadata.name: invalid name "Bad_Name": must be a lowercase RFC 1123 subdomain' in lines
    assert any(
        line.startswith("c.yaml: spec.timezone: unknown time zone 'Europe/Atlantis'") for line in lines
    )
    assert any(line.startswith("c.yaml: spec.workflowSpec.templates[0].children[0]:") for line in lines)

    text2 = text.replace("Europe/Atlantis", "UTC").replace("Bad_Name", "ok")
    with pytest.raises(ValidationFailed) as e:
        load_cron_workflows_text(text2, "c.yaml")
    lines = str(e.value).splitlines()
    assert any(
        line.startswith("c.yaml: spec.schedules[1]: '0 25 * * *': hour: 25 is out of range") for line in lines
    )
    assert any(line.startswith("c.yaml: spec.schedule: '@sometimes': unknown macro") for line in lines)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"kind": "Workflow"}, "c.yaml: kind: unsupported kind 'Workflow' (expected CronWorkflow)"),
        ({"spec": {"workflowSpec": None}}, "c.yaml: spec.workflowSpec: required"),
        (
            {"spec": {"concurrencyPolicy": "Sometimes"}},
            "c.yaml: spec.concurrencyPolicy: invalid value 'Sometimes'",
        ),
        ({"spec": {"catchUp": "Most"}}, "c.yaml: spec.catchUp: invalid value 'Most'"),
        ({"spec": {"startingDeadlineSeconds": -1}}, "c.yaml: spec.startingDeadlineSeconds:"),
        ({"spec": {"maxCatchUp": 0}}, "c.yaml: spec.maxCatchUp:"),
        ({"spec": {"surprise": 1}}, "c.yaml: spec.surprise: unknown field"),
    ],
)
def test_schema_errors(patch: dict[str, Any], message: str) -> None:
    import json

    doc: dict[str, Any] = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": "c"},
        "spec": {
            "schedules": ["@daily"],
            "workflowSpec": {"entry": "s", "templates": [{"name": "s", "templateType": "Suspend"}]},
        },
    }
    for k, v in patch.items():
        if k == "spec":
            doc["spec"].update(v)
            doc["spec"] = {key: val for key, val in doc["spec"].items() if val is not None}
        else:
            doc[k] = v
    with pytest.raises(ValidationFailed) as e:
        load_cron_workflows_text(json.dumps(doc), "c.yaml")
    assert any(line.startswith(message) for line in str(e.value).splitlines()), str(e.value)


def test_no_schedule_at_all() -> None:
    text = (
        "apiVersion: chaosflow.io/v1alpha1\nkind: CronWorkflow\nmetadata: {name: c}\n"
        "spec: {workflowSpec: {entry: s, templates: [{name: s, templateType: Suspend}]}}\n"
    )
    with pytest.raises(ValidationFailed, match=r"spec\.schedules: at least one schedule is required"):
        load_cron_workflows_text(text, "c.yaml")


def test_argo_single_schedule_spelling_is_accepted() -> None:
    text = (
        "apiVersion: chaosflow.io/v1alpha1\nkind: CronWorkflow\nmetadata: {name: c}\n"
        "spec: {schedule: '@hourly', workflowSpec: {entry: s, templates: [{name: s, templateType: Suspend, duration: 1s}]}}\n"
    )
    (c,) = load_cron_workflows_text(text, "c.yaml")
    assert c.spec.all_schedules() == ["@hourly"]
