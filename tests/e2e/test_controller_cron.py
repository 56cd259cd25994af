"""`chaosflow controller` runs CronWorkflows, against a real kube-apiserver + etcd.

Short ``@every`` schedules on the real clock (a tick every 2-3 s), children that suspend or hold a
ConfigMap "chaos" for a second or two. Each test has its own namespace and controller subprocess;
there is no kube-controller-manager here, so ownerReferences are checked, not garbage collection.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from actors.kube import KubePlayground
from engine.cron import ANNOTATION_SCHEDULED, LABEL_CRON, child_name, scheduled_time_of
from tests.e2e import test_controller as base
from tests.e2e.test_controller import WF_API, Controller, _assert, chaos_cm, chaos_objects, eventually

# the fixtures of the Workflow controller tests (the API server is the session's)
pg = base.pg
crds = base.crds
ns = base.ns
controllers = base.controllers

pytestmark = pytest.mark.e2e

CRON_KIND = "CronWorkflow"


def cron_obj(
    ns: str, name: str, schedule: str, templates: list[dict[str, Any]], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": WF_API,
        "kind": CRON_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedules": [schedule],
            "workflowSpec": {"entry": templates[0]["name"], "templates": templates},
            **spec,
        },
    }


def suspend(seconds: str) -> dict[str, Any]:
    return {"name": "wait", "templateType": "Suspend", "duration": seconds}


def get_cron(pg: KubePlayground, ns: str, name: str) -> dict[str, Any]:
    obj = pg.get("default", WF_API, CRON_KIND, ns, name)
    assert obj is not None
    return obj


def cron_status(pg: KubePlayground, ns: str, name: str) -> dict[str, Any]:
    return dict(get_cron(pg, ns, name).get("status") or {})


def children(pg: KubePlayground, ns: str, cron: str) -> dict[str, dict[str, Any]]:
    items = pg.list("default", WF_API, "Workflow", ns, label_selector=f"{LABEL_CRON}={cron}")
    return {o["metadata"]["name"]: o for o in items}


def phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


class WorkflowEvents:
    """Workflow ADDED/DELETED events seen by the test's own watch (a duplicate shows as a second
    ADDED of a name)."""

    def __init__(self, pg: KubePlayground, ns: str) -> None:
        self.events: list[tuple[str, str]] = []
        self.sub = pg.watch("default", WF_API, "Workflow", ns, self)

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events.append((event_type, obj["metadata"]["name"]))

    def count(self, event_type: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, n in list(self.events):
            if t == event_type:
                out[n] = out.get(n, 0) + 1
        return out


def metric(body: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(want)}\}} ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def no_traceback(ctl: Controller) -> None:
    text = ctl.log.read_text(errors="replace")
    assert "Traceback" not in text, ctl.tail(80)


# ---------------------------------------------------------------------------------------------------
def test_children_status_history_metrics_suspend(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    ctl = controllers("cron-a", "--namespace", ns, "--no-leader-elect")
    cron = pg.create(
        "default",
        cron_obj(ns, "tick", "@every 2s", [suspend("1s")], successfulJobsHistoryLimit=2),
    )
    uid = cron["metadata"]["uid"]

    # children with deterministic names, the label, the scheduled-time annotation, the owner
    def some_children() -> dict[str, dict[str, Any]]:
        got = children(pg, ns, "tick")
        assert got
        return got

    kids = eventually(some_children, timeout=15)
    for name, obj in kids.items():
        t = scheduled_time_of("tick", name)
        assert t is not None and t % 2 == 0 and child_name("tick", t) == name
        m = obj["metadata"]
        assert m["labels"][LABEL_CRON] == "tick"
        assert m["annotations"][ANNOTATION_SCHEDULED]
        (owner,) = m["ownerReferences"]
        assert owner["kind"] == CRON_KIND and owner["name"] == "tick" and owner["uid"] == uid
        assert owner["controller"] is True

    # status: a running child in active[], lastScheduledTime = the newest child
    def active_listed() -> None:
        st = cron_status(pg, ns, "tick")
        running = {n for n, o in children(pg, ns, "tick").items() if phase(o) != "Succeed"}
        names = {a["name"] for a in st.get("active") or []}
        assert names and names <= running | set(), (names, running)

    eventually(active_listed, timeout=15, interval=0.05)

    # succeeded counted; history limit 2: older succeeded children deleted
    def three_succeeded() -> dict[str, Any]:
        st = cron_status(pg, ns, "tick")
        assert st.get("succeeded", 0) >= 3, st
        return st

    eventually(three_succeeded, timeout=20)

    def history_kept() -> None:
        done = [n for n, o in children(pg, ns, "tick").items() if phase(o) == "Succeed"]
        assert len(done) <= 2, done

    eventually(history_kept, timeout=10)
    st = cron_status(pg, ns, "tick")
    newest = max(scheduled_time_of("tick", n) or 0 for n in children(pg, ns, "tick"))
    assert st["lastScheduledTime"] >= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(newest - 2))
    assert st["phase"] == "Active"
    assert {c["type"]: c["status"] for c in st["conditions"]}["Scheduled"] == "True"

    # metrics from the driver's listener
    body = ctl.get("/metrics")[1]
    assert metric(body, "chaosflow_cron_runs_triggered_total", policy="Allow") >= 3, body[:2000]

    # suspend: no new children, ticks skipped as Suspended
    pg.patch("default", WF_API, CRON_KIND, ns, "tick", {"spec": {"suspend": True}})

    def suspended() -> dict[str, Any]:
        st = cron_status(pg, ns, "tick")
        assert st.get("phase") == "Suspended", st
        return st

    eventually(suspended, timeout=10)
    suspended_at = time.time()
    before = set(children(pg, ns, "tick"))

    def skipped_while_suspended() -> None:
        st = cron_status(pg, ns, "tick")
        assert (st.get("lastSkipped") or {}).get("reason") == "Suspended", st

    eventually(skipped_while_suspended, timeout=10)
    time.sleep(max(0.0, suspended_at + 2.5 - time.time()))  # at least one more tick
    new = {n for n in children(pg, ns, "tick") if n not in before}
    assert all((scheduled_time_of("tick", n) or 0) <= suspended_at for n in new), new
    skipped = metric(
        ctl.get("/metrics")[1], "chaosflow_cron_runs_skipped_total", policy="Allow", reason="Suspended"
    )
    assert skipped >= 1

    # Events on the CronWorkflow: each submission (Scheduled) and the suspended ticks (Skipped)
    def cron_events() -> set[str]:
        evs = [
            e
            for e in pg.list("default", "v1", "Event", ns)
            if (e.get("involvedObject") or {}).get("kind") == CRON_KIND
        ]
        for e in evs:
            inv = e["involvedObject"]
            assert inv["name"] == "tick" and inv["uid"] == uid and inv["apiVersion"] == WF_API
        reasons = {str(e.get("reason")) for e in evs}
        assert {"Scheduled", "Skipped"} <= reasons, reasons
        return reasons

    eventually(cron_events, timeout=10)
    no_traceback(ctl)


def test_forbid_skips_while_a_child_is_active_and_invalid_spec(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    ctl = controllers("cron-b", "--namespace", ns, "--no-leader-elect")
    pg.create("default", cron_obj(ns, "solo", "@every 2s", [suspend("3s")], concurrencyPolicy="Forbid"))
    # an invalid one: a status condition, no children, no traceback
    bad = cron_obj(ns, "broken", "61 * * * *", [suspend("1s")])
    pg.create("default", bad)

    def forbid_skipped() -> dict[str, Any]:
        st = cron_status(pg, ns, "solo")
        last = st.get("lastSkipped") or {}
        assert last.get("reason") == "ConcurrencyForbid", st
        return st

    st = eventually(forbid_skipped, timeout=20)
    assert "still active" in st["lastSkipped"]["message"]
    assert re.search(r"solo-\d+", st["lastSkipped"]["message"])

    def spec_error() -> None:
        conds = {c["type"]: c for c in cron_status(pg, ns, "broken").get("conditions") or []}
        assert conds.get("SpecError", {}).get("status") == "True", conds
        assert "61" in conds["SpecError"]["message"] or "minute" in conds["SpecError"]["message"].lower()

    eventually(spec_error, timeout=10)
    assert children(pg, ns, "broken") == {}

    # two children never overlap: each starts after the previous one finished
    def two_done() -> None:
        done = [o for o in children(pg, ns, "solo").values() if phase(o) == "Succeed"]
        assert len(done) >= 2

    eventually(two_done, timeout=20)
    spans = sorted(
        (o["status"]["startTime"], o["status"].get("finishTime") or "9")
        for o in children(pg, ns, "solo").values()
        if o.get("status", {}).get("startTime")
    )
    for (_, fin), (start, _) in itertools.pairwise(spans):
        assert fin <= start, spans
    no_traceback(ctl)


def test_replace_aborts_the_active_child_with_cleanup_and_history(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    ctl = controllers("cron-c", "--namespace", ns, "--no-leader-elect")
    pg.create(
        "default",
        cron_obj(
            ns,
            "swap",
            "@every 3s",
            [chaos_cm("hold", "60s")],
            concurrencyPolicy="Replace",
            failedJobsHistoryLimit=1,
        ),
    )

    def replaced() -> tuple[str, str]:
        kids = children(pg, ns, "swap")
        failed = sorted(n for n, o in kids.items() if phase(o) == "Failed")
        running = sorted(n for n, o in kids.items() if phase(o) == "Running")
        assert failed and running, {n: phase(o) for n, o in kids.items()}
        return failed[-1], running[-1]

    old, new = eventually(replaced, timeout=20)
    msg = children(pg, ns, "swap")[old]["status"]["message"]
    assert f"replaced by {new} (concurrencyPolicy Replace)" in msg, msg
    # the aborted child's chaos is cleaned up; only the running child's ConfigMap remains
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=10)

    def history() -> None:
        st = cron_status(pg, ns, "swap")
        assert st.get("failed", 0) >= 2, st
        kids = children(pg, ns, "swap")
        failed = [n for n, o in kids.items() if phase(o) == "Failed"]
        assert len(failed) <= 1, failed

    eventually(history, timeout=15)
    assert old not in children(pg, ns, "swap")  # deleted: failedJobsHistoryLimit 1
    no_traceback(ctl)


def test_kill_9_restart_creates_no_duplicate(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    watch = WorkflowEvents(pg, ns)
    lease = ["--lease-name", f"cron-{ns}"]
    ctl = controllers("cron-k0", "--namespace", ns, *lease)
    pg.create(
        "default",
        cron_obj(ns, "again", "@every 2s", [suspend("1500ms")], successfulJobsHistoryLimit=20),
    )

    def more_than(n: int) -> Callable[[], None]:
        return lambda: _assert(len(watch.count("ADDED")) > n)

    for i in range(2):
        # kill -9 right after a child is created (before or after its status write)
        eventually(more_than(len(watch.count("ADDED"))), timeout=15, interval=0.02)
        ctl.kill9()
        ctl = controllers(f"cron-k{i + 1}", "--namespace", ns, *lease)  # waits for the Lease (3 s)
    eventually(more_than(len(watch.count("ADDED")) + 1), timeout=20)
    added = watch.count("ADDED")
    assert set(added.values()) == {1}, watch.events
    assert not watch.count("DELETED"), watch.events

    def consistent() -> None:
        st = cron_status(pg, ns, "again")
        kids = children(pg, ns, "again")
        ok = sum(1 for o in kids.values() if phase(o) == "Succeed")
        running = {n for n, o in kids.items() if phase(o) != "Succeed"}
        assert st.get("succeeded") == ok, (st, {n: phase(o) for n, o in kids.items()})
        assert {a["name"] for a in st.get("active") or []} == running, st

    eventually(consistent, timeout=10, interval=0.05)
    watch.sub.stop()
    no_traceback(ctl)
