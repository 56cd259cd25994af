"""Simulated Job controller."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim import NotFoundError, SimCluster
from engine.clock import VIRTUAL_EPOCH, parse_rfc3339
from tests.sim_api.timers import FakeTimers


def make_job(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": command}],
                },
            },
            **spec,
        },
    }


def job_pods(cluster: SimCluster, name: str) -> list[dict[str, Any]]:
    return cluster.api.list("Pod", "default", f"job-name={name}")["items"]


def cond(job: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in job["status"].get("conditions", []) if c["type"] == ctype), None)


def t(ts: str) -> float:
    return parse_rfc3339(ts) - VIRTUAL_EPOCH


def test_job_completes(cluster: SimCluster, timers: FakeTimers) -> None:
    job = cluster.api.create(make_job("ok", ["sh", "-c", "echo work; sleep 10"]))
    uid = job["metadata"]["uid"]
    pods = job_pods(cluster, "ok")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["name"].startswith("ok-")
    assert pod["metadata"]["labels"]["controller-uid"] == uid and pod["metadata"]["labels"]["app"] == "ok"
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == ("Job", uid, True, True)
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    running = cluster.api.get("Job", "ok")
    assert running["status"]["active"] == 1 and t(running["status"]["startTime"]) == 0
    timers.run_until_idle()
    done = cluster.api.get("Job", "ok")
    assert done["status"]["succeeded"] == 1 and done["status"]["active"] == 0
    assert cond(done, "Complete")["status"] == "True"  # type: ignore[index]
    assert t(done["status"]["completionTime"]) == 11
    pod = job_pods(cluster, "ok")[0]
    assert pod["status"]["phase"] == "Succeeded" and "finalizers" not in pod["metadata"]
    assert cluster.logs("default", pod["metadata"]["name"]) == "work\n"


def test_backoff_limit(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(make_job("bad", ["sh", "-c", "sleep 2; exit 1"], backoffLimit=2))
    timers.run_until_idle()
    job = cluster.api.get("Job", "bad")
    assert job["status"]["failed"] == 3 and job["status"].get("succeeded", 0) == 0
    failed = cond(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert cond(job, "Complete") is None
    assert len(job_pods(cluster, "bad")) == 3
    assert all(p["status"]["phase"] == "Failed" for p in job_pods(cluster, "bad"))


def test_completions_and_parallelism(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(make_job("par", ["sleep", "10"], completions=5, parallelism=2))
    assert cluster.api.get("Job", "par")["status"]["active"] == 2
    max_active = 0

    def watch(etype: str, obj: dict[str, Any]) -> None:
        nonlocal max_active
        max_active = max(max_active, obj["status"].get("active", 0))

    cluster.api.watch("Job", callback=watch)
    timers.run_until_idle()
    job = cluster.api.get("Job", "par")
    assert job["status"]["succeeded"] == 5
    assert max_active == 2
    assert len(job_pods(cluster, "par")) == 5
    assert t(job["status"]["completionTime"]) == 33  # 3 waves of (1s start + 10s)


def test_active_deadline(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(make_job("slow", ["sleep", "1000"], activeDeadlineSeconds=30))
    timers.run_until_idle()
    job = cluster.api.get("Job", "slow")
    failed = cond(job, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert t(failed["lastTransitionTime"]) == 30
    # the active pod was deleted (gracefully) and is gone by now
    assert job_pods(cluster, "slow") == []


def test_ttl_after_finished(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(make_job("ttl", ["echo", "x"], ttlSecondsAfterFinished=100))
    deleted_at: list[float] = []
    cluster.api.watch(
        "Job",
        callback=lambda e, o: deleted_at.append(timers.now() - VIRTUAL_EPOCH) if e == "DELETED" else None,
    )
    timers.run_until_idle()
    assert deleted_at == [101]
    with pytest.raises(NotFoundError):
        cluster.api.get("Job", "ttl")
    assert job_pods(cluster, "ttl") == []  # TTL deletion is in the foreground


def test_killed_pod_counts_as_failed_and_is_replaced(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(make_job("k", ["sleep", "50"], backoffLimit=3))
    timers.advance(5)
    first = job_pods(cluster, "k")[0]["metadata"]["name"]
    cluster.api.delete("Pod", first, grace_period_seconds=0)
    timers.run_until_idle()
    job = cluster.api.get("Job", "k")
    assert job["status"]["failed"] == 1 and job["status"]["succeeded"] == 1
    names = [p["metadata"]["name"] for p in job_pods(cluster, "k")]
    assert first not in names and len(names) == 1


def test_deleting_a_job(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(make_job("bg", ["sleep", "100"]))
    api.create(make_job("orph", ["sleep", "5"]))
    timers.advance(2)
    api.delete("Job", "bg", propagation="Background")
    api.delete("Job", "orph")  # batch/v1 default: orphan the pods
    timers.run_until_idle()
    assert job_pods(cluster, "bg") == []
    orphans = job_pods(cluster, "orph")
    assert len(orphans) == 1
    assert "ownerReferences" not in orphans[0]["metadata"] and "finalizers" not in orphans[0]["metadata"]
    assert orphans[0]["status"]["phase"] == "Succeeded"


def test_foreground_job_deletion_waits_for_pods(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(make_job("fg", ["sleep", "100"]))
    timers.advance(2)
    api.delete("Job", "fg", propagation="Foreground")
    job = api.get("Job", "fg")
    assert job["metadata"]["finalizers"] == ["foregroundDeletion"]
    gone: dict[str, float] = {}
    for kind in ("Job", "Pod"):
        api.watch(
            kind,
            callback=lambda e, o: (
                gone.setdefault(o["kind"], timers.now() - VIRTUAL_EPOCH) if e == "DELETED" else None
            ),
        )
    timers.run_until_idle()
    with pytest.raises(NotFoundError):
        api.get("Job", "fg")
    assert job_pods(cluster, "fg") == []
    assert gone == {"Pod": 32, "Job": 32}  # the pod had its 30s grace period; the job waited for it
