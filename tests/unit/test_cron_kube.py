"""engine/cron_kube.py without an API server: the CronBackend on Workflow objects, the per-cron
driver loop (virtual clock, the controller's trigger), status patches, metrics, invalid specs."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from actors.kube.errors import Failure, KubeError
from engine.clock import VirtualClock, parse_rfc3339, rfc3339
from engine.cron import ANNOTATION_SCHEDULED, LABEL_CRON, ChildInfo, CronWorkflow, child_name
from engine.cron_kube import (
    ABORT_ANNOTATION,
    KubeCronBackend,
    KubeCronWorkflows,
    child_info,
    child_object,
    comparable,
    cron_doc,
    merge_patch,
    owner_reference,
)
from engine.model import API_VERSION
from triggers.operable import OperableTrigger

T0 = parse_rfc3339("2026-01-01T00:00:00Z")
NS = "chaos"


def kube_error(code: int, reason: str = "") -> KubeError:
    return KubeError(f"HTTP {code}", Failure(code, reason, reason, transient=code >= 500))


class FakeAPI:
    """Workflow objects by key, with the controller's ``objects`` fed as a watch would."""

    def __init__(self) -> None:
        self.workflows: dict[str, dict[str, Any]] = {}  # the API server
        self.objects: dict[str, dict[str, Any]] = {}  # what the controller has seen
        self.calls: list[tuple[str, str]] = []
        self.fail_create: KubeError | None = None
        self.rv = 100
        self.auto_watch = True

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def create(self, cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        self.calls.append(("create", key))
        if self.fail_create is not None:
            raise self.fail_create
        if key in self.workflows:
            return copy.deepcopy(self.workflows[key])  # AlreadyExists: the existing object
        got = copy.deepcopy(obj)
        got["metadata"].update(uid=f"uid-{key}", resourceVersion=self._next_rv())
        self.workflows[key] = got
        if self.auto_watch:
            self.objects[key] = copy.deepcopy(got)
        return copy.deepcopy(got)

    def patch(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        ns: str | None,
        name: str,
        patch: Any,
        t: str = "merge",
    ) -> dict[str, Any]:
        key = f"{ns}/{name}"
        self.calls.append(("patch", key))
        obj = self.workflows.get(key)
        if obj is None:
            raise kube_error(404, "NotFound")
        obj["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
        return copy.deepcopy(obj)

    def delete(self, cluster: str, api_version: str, kind: str, ns: str | None, name: str) -> bool:
        key = f"{ns}/{name}"
        self.calls.append(("delete", key))
        self.workflows.pop(key, None)
        self.objects.pop(key, None)
        return True

    def finish(self, name: str, phase: str = "Succeed", at: float | None = None) -> dict[str, Any]:
        key = f"{NS}/{name}"
        old = copy.deepcopy(self.objects[key])
        for store in (self.workflows, self.objects):
            store[key]["status"] = {"phase": phase, "finishTime": rfc3339(at or T0)}
            store[key]["metadata"]["resourceVersion"] = self._next_rv()
        return old

    def calls_of(self, verb: str) -> list[str]:
        return [k for v, k in self.calls if v == verb]


class FakeMetrics:
    def __init__(self) -> None:
        self.triggered: list[str] = []
        self.skipped: list[tuple[str, str, int]] = []

    def cron_run_triggered(self, policy: str) -> None:
        self.triggered.append(policy)

    def cron_run_skipped(self, policy: str, reason: str, count: int = 1) -> None:
        self.skipped.append((policy, reason, count))


class FakeEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def emit_object(
        self,
        involved: dict[str, Any],
        etype: str,
        reason: str,
        message: str,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.events.append((involved["kind"], etype, reason, message))


def cron_object(name: str = "tick", generation: int = 1, status: Any = None, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedules", ["*/5 * * * *"])
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "CronWorkflow",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "generation": generation,
            "resourceVersion": str(generation),
            "creationTimestamp": rfc3339(T0),
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "workflowSpec": {
                "entry": "s",
                "templates": [{"name": "s", "templateType": "Suspend", "duration": "10m"}],
            },
            **spec,
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


class Rig:
    """KubeCronWorkflows on a virtual clock, the fake API and recording fakes."""

    def __init__(self, api: FakeAPI | None = None, start: float = T0) -> None:
        self.api = api or FakeAPI()
        self.clock = VirtualClock(start)
        self.trigger = OperableTrigger(self.clock)
        self.metrics = FakeMetrics()
        self.events = FakeEvents()
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.aborted: list[tuple[str, str]] = []
        self.crons = KubeCronWorkflows(
            self.api,
            "default",
            self.trigger,
            self.clock,
            self.api.objects,
            abort_run=lambda key, msg: self.aborted.append((key, msg)),
            metrics=self.metrics,
            events=self.events,
            patch_status=lambda ns, name, body: self.patches.append((f"{ns}/{name}", copy.deepcopy(body))),
        )

    def drain(self) -> None:
        while self.trigger.pop_ready() is not None:
            pass

    def run_until(self, t: float) -> None:
        """Run due callbacks up to virtual time ``t``."""
        while True:
            self.drain()
            nxt = self.trigger.next_due()
            if nxt is None or nxt > t:
                break
            self.clock.advance_to(nxt)
        self.clock.advance_to(max(t, self.clock.now()))
        self.drain()

    def children(self) -> list[str]:
        return sorted(k.split("/", 1)[1] for k in self.api.workflows)

    def last_status(self) -> dict[str, Any]:
        return self.patches[-1][1]


# --- helpers ----------------------------------------------------------------------------------------
def test_child_info_from_workflow_objects() -> None:
    assert child_info({"metadata": {}}) == ChildInfo("Init")
    assert child_info({"status": {"phase": "Running"}}) == ChildInfo("Running")
    done = child_info({"status": {"phase": "Succeed", "finishTime": "2026-01-01T00:05:00Z"}})
    assert done.finished and done.finished_at == T0 + 300
    assert child_info({"status": {"phase": "Failed", "finishTime": "not a time"}}) == ChildInfo("Failed")


def test_cron_doc_keeps_what_the_model_reads() -> None:
    doc = cron_doc(cron_object())
    assert set(doc["metadata"]) == {"name", "namespace", "uid", "generation", "creationTimestamp"}
    cron = CronWorkflow.model_validate(doc)
    assert cron.key == f"{NS}/tick"


def test_owner_reference_and_child_object() -> None:
    owner = owner_reference(cron_object())
    assert owner == {
        "apiVersion": API_VERSION,
        "kind": "CronWorkflow",
        "name": "tick",
        "uid": "uid-tick",
        "controller": True,
        "blockOwnerDeletion": False,
    }
    assert owner_reference({"metadata": {"name": "x"}}) is None
    from engine.cron import build_child

    cron = CronWorkflow.model_validate(cron_doc(cron_object()))
    obj = child_object(build_child(cron, T0 + 300), owner)
    assert obj["metadata"]["ownerReferences"] == [owner]
    assert obj["metadata"]["labels"] == {LABEL_CRON: "tick"}
    assert obj["metadata"]["annotations"][ANNOTATION_SCHEDULED] == "2026-01-01T00:05:00Z"
    assert "status" not in obj and obj["kind"] == "Workflow"


def test_merge_patch_nulls_removed_keys_and_comparable_ignores_the_watermark() -> None:
    assert merge_patch({"a": 1}, {"a": 0, "b": 2}) == {"a": 1, "b": None}
    assert comparable({"lastEvaluatedTime": "x", "succeeded": 1}) == {"succeeded": 1}
    assert comparable(None) is None


# --- the backend ------------------------------------------------------------------------------------
def backend(api: FakeAPI, aborted: list[tuple[str, str]] | None = None) -> KubeCronBackend:
    sink = aborted if aborted is not None else []
    return KubeCronBackend(
        api, "default", api.objects, owner_reference(cron_object()), lambda k, m: sink.append((k, m))
    )


def child(
    name: str, phase: str | None = None, ns: str = NS, label: str = "tick", **meta: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": ns, "labels": {LABEL_CRON: label}, **meta}}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def test_list_children_by_label_and_namespace() -> None:
    api = FakeAPI()
    api.objects.update(
        {
            f"{NS}/tick-1": child("tick-1", "Running"),
            f"{NS}/tick-2": child("tick-2", "Succeed"),
            f"{NS}/gone-3": child("tick-3", "Succeed", deletionTimestamp="2026-01-01T00:00:00Z"),
            f"{NS}/busy-4": child("tick-4", "Running", deletionTimestamp="2026-01-01T00:00:00Z"),
            f"{NS}/other": child("other-1", "Running", label="other"),
            "elsewhere/tick-5": child("tick-5", "Running", ns="elsewhere"),
        }
    )
    cron = CronWorkflow.model_validate(cron_doc(cron_object()))
    got = backend(api).list_children(cron)
    # a finished child being deleted is left out (asked already); a running one still counts
    assert got == {
        "tick-1": ChildInfo("Running"),
        "tick-2": ChildInfo("Succeed"),
        "tick-4": ChildInfo("Running"),
    }


def test_submit_creates_with_owner_and_counts_children_not_yet_watched() -> None:
    api = FakeAPI()
    api.auto_watch = False
    b = backend(api)
    cron = CronWorkflow.model_validate(cron_doc(cron_object()))
    from engine.cron import build_child

    b.submit(build_child(cron, T0 + 300))
    name = child_name("tick", T0 + 300)
    assert api.workflows[f"{NS}/{name}"]["metadata"]["ownerReferences"][0]["uid"] == "uid-tick"
    assert b.list_children(cron) == {name: ChildInfo("Init")}  # before the watch brings it
    api.objects[f"{NS}/{name}"] = copy.deepcopy(api.workflows[f"{NS}/{name}"])
    assert b.list_children(cron) == {name: ChildInfo("Init")} and not b.created
    b.submit(build_child(cron, T0 + 300))  # AlreadyExists: done, no error
    assert api.calls_of("create") == [f"{NS}/{name}"] * 2


def test_submit_does_not_adopt_a_foreign_workflow(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeAPI()
    name = child_name("tick", T0 + 300)
    api.workflows[f"{NS}/{name}"] = {"metadata": {"name": name, "namespace": NS, "labels": {}}}
    cron = CronWorkflow.model_validate(cron_doc(cron_object()))
    from engine.cron import build_child

    b = backend(api)
    with caplog.at_level(logging.WARNING):
        b.submit(build_child(cron, T0 + 300))
    assert "not a child" in caplog.text and not b.created


def test_abort_sets_the_annotation_and_aborts_the_run_delete_deletes() -> None:
    api = FakeAPI()
    aborted: list[tuple[str, str]] = []
    b = backend(api, aborted)
    api.workflows[f"{NS}/tick-1"] = child("tick-1", "Running")
    b.abort(NS, "tick-1", "replaced by tick-2")
    assert api.workflows[f"{NS}/tick-1"]["metadata"]["annotations"] == {ABORT_ANNOTATION: "true"}
    assert aborted == [(f"{NS}/tick-1", "replaced by tick-2")]
    b.abort(NS, "missing", "x")  # NotFound: done
    assert len(aborted) == 1
    b.delete(NS, "tick-1")
    b.delete(NS, "tick-1")  # gone: done
    assert f"{NS}/tick-1" not in api.workflows


# --- the driver loop ------------------------------------------------------------------------------
def test_ticks_create_children_and_status_is_patched_only_when_changed() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    assert rig.children() == [] and rig.patches  # first status (phase, conditions)
    n = len(rig.patches)
    rig.crons.request(f"{NS}/tick")
    rig.drain()
    assert len(rig.patches) == n  # nothing changed but lastEvaluatedTime: no write
    rig.run_until(T0 + 300)
    assert rig.children() == [child_name("tick", T0 + 300)]
    st = rig.last_status()
    assert st["lastScheduledTime"] == "2026-01-01T00:05:00Z"
    assert [a["name"] for a in st["active"]] == [child_name("tick", T0 + 300)]
    assert rig.metrics.triggered == ["Allow"]
    assert ("CronWorkflow", "Normal", "Scheduled") in [e[:3] for e in rig.events.events]
    rig.run_until(T0 + 900)
    assert len(rig.children()) == 3


def test_a_finished_child_resyncs_its_cron_and_history_deletes_old_ones() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object(successfulJobsHistoryLimit=1))
    rig.run_until(T0 + 600)
    first, second = (child_name("tick", T0 + 300), child_name("tick", T0 + 600))
    for name in (first, second):
        old = rig.api.finish(name, at=T0 + 600)
        rig.crons.child_event("MODIFIED", old, rig.api.objects[f"{NS}/{name}"])
    rig.drain()
    st = rig.last_status()
    assert st["succeeded"] == 2 and st["active"] == [] and st["lastSuccessfulTime"] == rfc3339(T0 + 600)
    assert rig.api.calls_of("delete") == [f"{NS}/{first}"]
    assert rig.children() == [second]


def test_same_phase_updates_do_not_resync() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    rig.run_until(T0 + 300)
    name = child_name("tick", T0 + 300)
    obj = rig.api.objects[f"{NS}/{name}"]
    rig.crons.child_event("MODIFIED", obj, obj)
    assert not rig.crons.crons[f"{NS}/tick"].pending
    rig.crons.child_event("MODIFIED", {"metadata": {}}, {"metadata": {"labels": {"x": "y"}}})  # not a child


def test_forbid_and_replace_through_the_backend() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object("f", concurrencyPolicy="Forbid"))
    rig.crons.handle("ADDED", cron_object("r", concurrencyPolicy="Replace"))
    rig.run_until(T0 + 600)
    assert rig.children() == sorted(
        [child_name("f", T0 + 300), child_name("r", T0 + 300), child_name("r", T0 + 600)]
    )
    assert ("Forbid", "ConcurrencyForbid", 1) in rig.metrics.skipped
    assert rig.aborted == [
        (
            f"{NS}/{child_name('r', T0 + 300)}",
            f"replaced by {child_name('r', T0 + 600)} (concurrencyPolicy Replace)",
        )
    ]
    ann = rig.api.workflows[f"{NS}/{child_name('r', T0 + 300)}"]["metadata"]["annotations"]
    assert ann[ABORT_ANNOTATION] == "true"
    assert any(e[2] == "Replaced" for e in rig.events.events)


def test_suspend_toggle_and_generation() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    rig.crons.handle("MODIFIED", cron_object(generation=2, suspend=True))
    assert rig.last_status()["phase"] == "Suspended"
    rig.run_until(T0 + 900)
    assert rig.children() == []
    assert rig.last_status()["lastSkipped"]["reason"] == "Suspended"
    assert ("Allow", "Suspended", 1) in rig.metrics.skipped
    n = len(rig.patches)
    # our own status write coming back (same generation): no reconcile
    rig.crons.handle("MODIFIED", {**cron_object(generation=2, suspend=True), "status": rig.last_status()})
    assert len(rig.patches) == n and not rig.crons.crons[f"{NS}/tick"].pending
    rig.crons.handle("MODIFIED", cron_object(generation=3))
    assert rig.last_status()["phase"] == "Active"
    rig.run_until(T0 + 1200)
    assert rig.children() == [child_name("tick", T0 + 1200)]  # suspended ticks are not caught up


def test_deleted_cron_stops_its_timers() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    rig.crons.handle("DELETED", cron_object())
    rig.run_until(T0 + 900)
    assert rig.children() == [] and not rig.crons.crons


def test_invalid_cron_gets_a_condition_and_no_driver(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    with caplog.at_level(logging.WARNING):
        rig.crons.handle("ADDED", cron_object(schedules=["61 * * * *"]))
    (key, body), *_ = rig.patches
    assert key == f"{NS}/tick"
    (cond,) = body["conditions"]
    assert cond["type"] == "SpecError" and cond["reason"] == "InvalidSpec" and "61" in cond["message"]
    assert "Traceback" not in caplog.text and "is invalid" in caplog.text
    assert rig.events.events[0][:3] == ("CronWorkflow", "Warning", "InvalidSpec")
    rig.crons.handle("MODIFIED", cron_object(schedules=["61 * * * *"]))  # same: not written again
    assert len(rig.patches) == 1
    rig.crons.handle("MODIFIED", cron_object(generation=2))  # fixed
    rig.run_until(T0 + 300)
    assert rig.children() == [child_name("tick", T0 + 300)]
    assert "SpecError" not in {c["type"] for c in rig.last_status()["conditions"]}


def test_restart_starts_from_the_stored_status_and_existing_children() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    rig.run_until(T0 + 300)
    stored = rig.last_status()
    # a new controller (restart / new leader) at T0 + 320: same API objects, stored status
    api = rig.api
    api.calls.clear()
    rig2 = Rig(api, start=T0 + 320)
    rig2.crons.handle("ADDED", cron_object(status=stored))
    assert api.calls_of("create") == []  # the tick at +300 has its child: never again
    assert rig2.patches == []  # nothing changed but the watermark
    rig2.run_until(T0 + 600)
    assert api.calls_of("create") == [f"{NS}/{child_name('tick', T0 + 600)}"]


def test_lost_status_write_then_restart_adopts_the_child() -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    stored = rig.last_status()
    rig.run_until(T0 + 300)  # child created; pretend the status write after it was lost
    rig2 = Rig(rig.api, start=T0 + 310)
    rig2.crons.handle("ADDED", cron_object(status=stored))
    st = rig2.last_status()
    assert [a["name"] for a in st["active"]] == [child_name("tick", T0 + 300)]
    assert rig.api.calls_of("create") == [f"{NS}/{child_name('tick', T0 + 300)}"]


def test_api_errors_are_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    rig.crons.handle("ADDED", cron_object())
    rig.api.fail_create = kube_error(503, "ServiceUnavailable")
    with caplog.at_level(logging.WARNING):
        rig.run_until(T0 + 300)
    entry = rig.crons.crons[f"{NS}/tick"]
    assert entry.failures == 1 and entry.wake_at == T0 + 301
    assert "retry in 1s" in caplog.text and "Traceback" not in caplog.text
    assert any(e[2] == "SyncFailed" for e in rig.events.events)
    rig.run_until(T0 + 302)
    assert entry.failures == 2 and entry.wake_at == T0 + 303  # failed at +301, then 2 s
    rig.api.fail_create = None
    rig.run_until(T0 + 303)
    assert rig.children() == [child_name("tick", T0 + 300)] and entry.failures == 0
    assert rig.metrics.triggered == ["Allow"]


def test_stopped_or_fenced_controller_does_nothing() -> None:
    rig = Rig()
    fenced = [False]
    rig.crons.fenced = lambda: fenced[0]
    rig.crons.handle("ADDED", cron_object())
    fenced[0] = True
    n = len(rig.patches)
    rig.run_until(T0 + 900)
    assert rig.children() == [] and len(rig.patches) == n


def test_start_lists_and_watches_or_disables_on_errors() -> None:
    class PG(FakeAPI):
        def __init__(self, fail: bool) -> None:
            super().__init__()
            self.fail = fail
            self.watched: list[str | None] = []
            self.stopped = 0

        def watch(self, cluster: str, api_version: str, kind: str, ns: str | None, cb: Any) -> Any:
            self.watched.append(ns)
            pg = self

            class Sub:
                def stop(self) -> None:
                    pg.stopped += 1

            return Sub()

        def list(self, cluster: str, api_version: str, kind: str, ns: str | None = None) -> list[Any]:
            if self.fail:
                raise kube_error(403, "Forbidden")
            return [cron_object()] if ns == NS else []

    ok = Rig(PG(False))
    assert ok.crons.start([NS, "other"]) and list(ok.crons.crons) == [f"{NS}/tick"]
    bad_pg = PG(True)
    bad = Rig(bad_pg)
    assert not bad.crons.start([]) and bad_pg.watched == [None] and bad_pg.stopped == 1


def test_local_runner_counts_the_same_metrics() -> None:
    """engine/cron_local.py's action listener calls the same Metrics methods when given one."""
    import io

    from engine.cron_local import CronRunOptions, LocalCronRunner

    metrics = FakeMetrics()
    cron = CronWorkflow.model_validate(cron_doc(cron_object(concurrencyPolicy="Forbid")))
    opts = CronRunOptions(until="1h", metrics=metrics, progress=False, out=io.StringIO(), err=io.StringIO())
    runner = LocalCronRunner([cron], opts)
    assert runner.run() == 0
    counted = runner.drivers[0].controller.metrics
    # the child suspends 10 minutes: some 5-minute ticks run, the others are skipped (Forbid)
    assert metrics.triggered == ["Forbid"] * counted.triggered and counted.triggered >= 2
    assert sum(n for _, _, n in metrics.skipped) == counted.skipped["ConcurrencyForbid"] >= 2
    assert {(p, r) for p, r, _ in metrics.skipped} == {("Forbid", "ConcurrencyForbid")}
