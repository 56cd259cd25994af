"""Snapshot/restore (crash and resume) and determinism."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from actors.sim import BadRequestError, GoneError, NotFoundError, SimAPIServer, SimCluster, SimConfig
from engine.clock import VIRTUAL_EPOCH, VirtualClock, parse_rfc3339
from tests.sim_api.timers import FakeTimers


def fresh(clock_at: float = VIRTUAL_EPOCH, seed: int = 3) -> tuple[SimCluster, FakeTimers]:
    clock = VirtualClock(clock_at)
    timers = FakeTimers(clock)
    return SimCluster("c", clock, timers, random.Random(seed), config=SimConfig(strict=True)), timers


def pod(name: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": command}],
        },
    }


def crash_and_resume(cluster: SimCluster, timers: FakeTimers) -> tuple[SimCluster, FakeTimers]:
    """Serialize through JSON, throw the old cluster (and its timers) away, restore elsewhere."""
    data = json.loads(json.dumps(cluster.snapshot()))
    cluster.stop()
    new, new_timers = fresh(timers.now(), seed=999)
    new.restore(data)
    return new, new_timers


def test_restored_pending_pod_continues(clock: VirtualClock) -> None:
    cluster, timers = fresh()
    cluster.api.create(pod("p", ["sh", "-c", "echo start; sleep 20; echo end"]))
    timers.advance(0.5)  # scheduled, not yet started
    assert cluster.api.get("Pod", "p")["status"]["phase"] == "Pending"
    cluster, timers = crash_and_resume(cluster, timers)
    assert cluster.api.get("Pod", "p")["status"]["phase"] == "Pending"
    timers.advance(1)
    running = cluster.api.get("Pod", "p")
    assert running["status"]["phase"] == "Running"
    assert parse_rfc3339(running["status"]["startTime"]) - VIRTUAL_EPOCH == 1
    assert cluster.logs("default", "p") == "start\n"
    # crash again while running
    cluster, timers = crash_and_resume(cluster, timers)
    timers.run_until_idle()
    done = cluster.api.get("Pod", "p")
    assert done["status"]["phase"] == "Succeeded"
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert parse_rfc3339(term["finishedAt"]) - VIRTUAL_EPOCH == 21
    assert cluster.logs("default", "p") == "start\nend\n"


def test_restore_after_time_passed_catches_up_with_exact_timestamps() -> None:
    cluster, timers = fresh()
    cluster.api.create(pod("p", ["sleep", "10"]))
    timers.advance(2)
    data = cluster.snapshot()
    later, _ = fresh(VIRTUAL_EPOCH + 100)
    later.restore(data)
    done = later.api.get("Pod", "p")
    assert done["status"]["phase"] == "Succeeded"
    finished = done["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    assert parse_rfc3339(finished) - VIRTUAL_EPOCH == 11


def test_restored_job_and_chaos_continue() -> None:
    cluster, timers = fresh()
    api = cluster.api
    api.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "completions": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "i", "command": ["sleep", "5"]}],
                    }
                },
            },
        }
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "victim", "labels": {"app": "v"}},
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["sleep", "infinity"]}]},
        }
    )
    api.create(
        {
            "apiVersion": "chaos-mesh.org/v1alpha1",
            "kind": "PodChaos",
            "metadata": {"name": "pc"},
            "spec": {"action": "pod-failure", "mode": "all", "selector": {"labelSelectors": {"app": "v"}}},
        }
    )
    timers.advance(8)
    api.delete("PodChaos", "pc")  # recovery pending (0.1s)
    cluster, timers = crash_and_resume(cluster, timers)
    timers.run_until_idle()
    job = cluster.api.get("Job", "j")
    assert job["status"]["succeeded"] == 3
    assert any(c["type"] == "Complete" for c in job["status"]["conditions"])
    with pytest.raises(NotFoundError):
        cluster.api.get("PodChaos", "pc")


def test_snapshot_roundtrip_preserves_everything(api: SimAPIServer) -> None:
    api.register_kind("example.com", "v1", "Thing")
    api.create({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}})
    owner = api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    api.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dep", "ownerReferences": [ref]}}
    )
    snap = json.loads(json.dumps(api.snapshot()))
    other = SimAPIServer(VirtualClock(), name="test")
    other.restore(snap)
    assert other.snapshot() == snap
    assert other.resource_version() == api.resource_version()
    assert other.get("Thing", "t")["metadata"] == api.get("Thing", "t")["metadata"]
    # counters continue: the next uid/resourceVersion is the one the original would give
    a = api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "g-"}})
    b = other.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "g-"}})
    assert a["metadata"] == b["metadata"]
    # indexes were rebuilt: garbage collection still works
    other.delete("ConfigMap", "owner")
    with pytest.raises(NotFoundError):
        other.get("ConfigMap", "dep")
    # watch history does not survive: old resourceVersions are gone
    with pytest.raises(GoneError):
        other.watch("ConfigMap", resource_version=1, callback=lambda e, o: None)
    with pytest.raises(BadRequestError):
        other.restore({"format": "something else"})


def scenario(seed: int) -> str:
    cluster, timers = fresh(seed=seed)
    api = cluster.api
    for i in range(3):
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
    for i in range(6):
        api.create(pod(f"p{i}", ["sh", "-c", f"echo {i}; sleep {i * 7 % 5}; exit {i % 2}"]))
    api.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "parallelism": 2,
                "completions": 4,
                "backoffLimit": 10,
                "template": {
                    "metadata": {"labels": {"app": "j"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "i", "command": ["sleep", "3"]}],
                    },
                },
            },
        }
    )
    timers.advance(2)
    api.create(
        {
            "apiVersion": "chaos-mesh.org/v1alpha1",
            "kind": "PodChaos",
            "metadata": {"name": "k"},
            "spec": {
                "action": "pod-kill",
                "mode": "random-max-percent",
                "value": "100",
                "selector": {"labelSelectors": {"app": "j"}},
            },
        }
    )
    timers.run_until_idle()
    return json.dumps(cluster.snapshot(), sort_keys=True)


def test_same_seed_same_state_byte_for_byte() -> None:
    assert scenario(11) == scenario(11)


def test_stored_objects_are_never_mutated_in_place() -> None:
    """Controllers get read-only views (copy=False watches); nothing may write through them."""
    import random as _random

    clock = VirtualClock()
    timers = FakeTimers(clock)
    cluster = SimCluster("c", clock, timers, _random.Random(5), config=SimConfig(strict=True))
    seen: list[tuple[dict[str, Any], str]] = []
    for kind in ("Pod", "Job", "PodChaos", "Node"):
        cluster.api.watch(
            kind, callback=lambda e, o: seen.append((o, json.dumps(o, sort_keys=True))), copy=False
        )
    scenario_ops(cluster, timers)
    assert len(seen) > 50
    for obj, frozen in seen:
        assert json.dumps(obj, sort_keys=True) == frozen


def scenario_ops(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    for i in range(4):
        api.create(pod(f"p{i}", ["sh", "-c", f"echo {i}; sleep {i}; exit {i % 2}"]))
    api.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "completions": 2,
                "ttlSecondsAfterFinished": 5,
                "template": {
                    "metadata": {"labels": {"app": "j"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "i", "command": ["sleep", "3"]}],
                    },
                },
            },
        }
    )
    api.create(
        {
            "apiVersion": "chaos-mesh.org/v1alpha1",
            "kind": "PodChaos",
            "metadata": {"name": "k"},
            "spec": {"action": "pod-kill", "mode": "one", "selector": {"labelSelectors": {"app": "j"}}},
        }
    )
    timers.advance(2)
    api.delete("PodChaos", "k")
    api.delete("Pod", "p3")
    timers.run_until_idle()
