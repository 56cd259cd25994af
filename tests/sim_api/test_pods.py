"""Simulated scheduler + kubelet on the virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim import BadRequestError, NotFoundError, SimCluster
from engine.clock import VIRTUAL_EPOCH, VirtualClock, parse_rfc3339
from tests.sim_api.timers import FakeTimers


def make_pod(
    name: str,
    command: list[str] | None = None,
    *,
    restart: str = "Never",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if command is not None:
        container["command"] = command
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"restartPolicy": restart, "containers": [container], **spec},
    }


def t(ts: str) -> float:
    return parse_rfc3339(ts) - VIRTUAL_EPOCH


def phases(cluster: SimCluster, timers: FakeTimers, name: str, until: float = 600) -> list[tuple[float, str]]:
    """Record (time, phase) transitions of one pod while running timers."""
    out: list[tuple[float, str]] = []

    def cb(etype: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == name:
            phase = obj.get("status", {}).get("phase", "")
            if not out or out[-1][1] != phase:
                out.append((timers.now() - VIRTUAL_EPOCH, phase))

    w = cluster.api.watch("Pod", callback=cb)
    timers.run_until_idle(until)
    w.stop()
    return out


def test_pod_lifecycle_with_shell(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(make_pod("p", ["sh", "-c", "echo branch-a; sleep 5; echo done; exit 3"]))
    pod = api.get("Pod", "p")
    assert pod["status"]["phase"] == "Pending"
    # scheduled at once on the virtual node (no Node objects): no nodeName
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled"]
    assert "nodeName" not in pod["spec"]
    with pytest.raises(BadRequestError, match="waiting to start"):
        cluster.logs("default", "p")
    timers.advance(1)
    pod = api.get("Pod", "p")
    assert pod["status"]["phase"] == "Running"
    assert t(pod["status"]["startTime"]) == 1
    cs = pod["status"]["containerStatuses"][0]
    assert cs["ready"] and cs["state"]["running"]["startedAt"] == "2026-01-01T00:00:01Z"
    conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conds == {
        "PodScheduled": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert cluster.logs("default", "p") == "branch-a\n"  # output so far
    timers.run_until_idle()
    assert timers.now() - VIRTUAL_EPOCH == 6
    pod = api.get("Pod", "p")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert t(term["startedAt"]) == 1 and t(term["finishedAt"]) == 6
    assert cluster.logs("default", "p") == "branch-a\ndone\n"
    conds = {c["type"]: c.get("reason") for c in pod["status"]["conditions"]}
    assert conds["Ready"] == "PodCompleted"


@pytest.mark.parametrize(
    ("command", "phase", "code", "logs", "duration"),
    [
        (["echo", "hello"], "Succeeded", 0, "hello\n", 0),
        (["sleep", "5"], "Succeeded", 0, "", 5),
        (["sh", "-c", "false"], "Failed", 1, "", 0),
        (["/app/unknown-binary", "--flag"], "Succeeded", 0, "", 0),
        (None, "Succeeded", 0, "", 0),
        (["sh", "-ec", "echo a; false; echo b"], "Failed", 1, "a\n", 0),
    ],
)
def test_pod_outcomes(
    cluster: SimCluster,
    timers: FakeTimers,
    *,
    command: list[str] | None,
    phase: str,
    code: int,
    logs: str,
    duration: float,
) -> None:
    cluster.api.create(make_pod("p", command))
    timers.run_until_idle()
    pod = cluster.api.get("Pod", "p")
    assert pod["status"]["phase"] == phase
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == code
    assert t(term["finishedAt"]) - t(term["startedAt"]) == duration
    assert cluster.logs("default", "p") == logs


def test_annotations_override_the_interpreter(cluster: SimCluster, timers: FakeTimers) -> None:
    ann = {
        "sim.chaosflow.io/exit-code": "7",
        "sim.chaosflow.io/stdout": "from annotation\n",
        "sim.chaosflow.io/duration": "1m30s",
    }
    cluster.api.create(make_pod("p", ["echo", "ignored"], annotations=ann))
    timers.run_until_idle()
    pod = cluster.api.get("Pod", "p")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 7
    assert t(term["finishedAt"]) - t(term["startedAt"]) == 90
    assert cluster.logs("default", "p") == "from annotation\n"


def test_per_container_annotations_and_multi_container(cluster: SimCluster, timers: FakeTimers) -> None:
    pod = make_pod(
        "p", annotations={"sim.chaosflow.io/exit-code.side": "2", "sim.chaosflow.io/duration": "3s"}
    )
    pod["spec"]["containers"].append({"name": "side", "image": "busybox", "command": ["echo", "side"]})
    cluster.api.create(pod)
    timers.run_until_idle()
    got = cluster.api.get("Pod", "p")
    codes = {cs["name"]: cs["state"]["terminated"]["exitCode"] for cs in got["status"]["containerStatuses"]}
    assert codes == {"main": 0, "side": 2}
    assert got["status"]["phase"] == "Failed"
    assert cluster.logs("default", "p", "side") == "side\n"
    with pytest.raises(BadRequestError):
        cluster.logs("default", "p")


def test_init_containers_run_first(cluster: SimCluster, timers: FakeTimers) -> None:
    pod = make_pod("p", ["echo", "main"])
    pod["spec"]["initContainers"] = [
        {"name": "i1", "image": "busybox", "command": ["sleep", "2"]},
        {"name": "i2", "image": "busybox", "command": ["sh", "-c", "echo init; sleep 3"]},
    ]
    cluster.api.create(pod)
    timers.run_until_idle()
    got = cluster.api.get("Pod", "p")
    assert got["status"]["phase"] == "Succeeded"
    inits = got["status"]["initContainerStatuses"]
    assert [t(cs["state"]["terminated"]["finishedAt"]) for cs in inits] == [3, 6]
    main = got["status"]["containerStatuses"][0]["state"]["terminated"]
    assert t(main["startedAt"]) == 6
    assert cluster.logs("default", "p", "i2") == "init\n"

    failing = make_pod("q", ["echo", "never"])
    failing["spec"]["initContainers"] = [{"name": "i", "image": "busybox", "command": ["false"]}]
    cluster.api.create(failing)
    timers.run_until_idle()
    got = cluster.api.get("Pod", "q")
    assert got["status"]["phase"] == "Failed"
    assert got["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_restart_policies(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(make_pod("onfail", ["sh", "-c", "sleep 1; exit 1"], restart="OnFailure"))
    api.create(make_pod("always", ["sh", "-c", "sleep 1"], restart="Always"))
    timers.run_until(VIRTUAL_EPOCH + 2.5)
    cs = api.get("Pod", "onfail")["status"]["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["restartCount"] == 0
    timers.run_until(VIRTUAL_EPOCH + 12.5)  # 10s back-off, then running again
    cs = api.get("Pod", "onfail")["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 1 and "running" in cs["state"]
    timers.run_until(VIRTUAL_EPOCH + 200)
    onfail = api.get("Pod", "onfail")
    assert onfail["status"]["phase"] == "Running"
    # back-off doubles: restarts at 12, 33, 74, 155 -> 4 restarts by t=200
    assert onfail["status"]["containerStatuses"][0]["restartCount"] == 4
    always = api.get("Pod", "always")
    assert always["status"]["phase"] == "Running"
    assert always["status"]["containerStatuses"][0]["restartCount"] >= 3


def test_scheduler_round_robin_and_node_fit(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    for name in ("n2", "n1", "n3"):
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": name}}})
    # nodes without a Ready condition are made Ready by their kubelet
    assert all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        for n in api.list("Node")["items"]
    )
    api.patch("Node", "n3", {"spec": {"unschedulable": True}})
    for i in range(4):
        api.create(make_pod(f"p{i}", ["sleep", "100"]))
    nodes = [api.get("Pod", f"p{i}")["spec"]["nodeName"] for i in range(4)]
    assert nodes == ["n1", "n2", "n1", "n2"]
    api.create(make_pod("pinned", ["sleep", "1"], nodeSelector={"zone": "n2"}))
    assert api.get("Pod", "pinned")["spec"]["nodeName"] == "n2"
    api.patch("Node", "n2", {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}})
    api.create(
        make_pod("tolerant", tolerations=[{"key": "k", "operator": "Exists"}], nodeSelector={"zone": "n2"})
    )
    assert api.get("Pod", "tolerant")["spec"]["nodeName"] == "n2"


def test_unschedulable_pod_waits_for_a_node(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "busy"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    api.create(make_pod("p", ["echo", "hi"]))
    timers.run_until_idle()
    pod = api.get("Pod", "p")
    assert pod["status"]["phase"] == "Pending"
    sched = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (sched["status"], sched["reason"]) == ("False", "Unschedulable")
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fresh"}})
    timers.run_until_idle()
    pod = api.get("Pod", "p")
    assert pod["spec"]["nodeName"] == "fresh" and pod["status"]["phase"] == "Succeeded"


def test_graceful_deletion_on_virtual_clock(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create(make_pod("slow", ["sleep", "1000"]))
    api.create(make_pod("quick", ["sleep", "3"]))
    api.create(make_pod("now", ["sleep", "1000"]))
    timers.advance(1)
    api.delete("Pod", "slow")  # default grace 30s
    api.delete("Pod", "quick", grace_period_seconds=60)  # ends on its own first
    api.delete("Pod", "now", grace_period_seconds=0)
    with pytest.raises(NotFoundError):
        api.get("Pod", "now")
    gone: dict[str, float] = {}
    api.watch(
        "Pod",
        callback=lambda e, o: (
            gone.setdefault(o["metadata"]["name"], timers.now() - VIRTUAL_EPOCH) if e == "DELETED" else None
        ),
    )
    timers.run_until_idle()
    assert gone == {"quick": 4, "slow": 31}


def test_deleted_pod_killed_at_grace_end_keeps_status_with_finalizer(
    cluster: SimCluster, timers: FakeTimers
) -> None:
    api = cluster.api
    pod = make_pod("p", ["sleep", "1000"])
    pod["metadata"]["finalizers"] = ["test/hold"]
    api.create(pod)
    timers.advance(1)
    api.delete("Pod", "p", grace_period_seconds=5)
    timers.run_until_idle()
    got = api.get("Pod", "p")
    assert got["status"]["phase"] == "Failed"
    term = got["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and t(term["finishedAt"]) == 6
    assert got["metadata"]["deletionGracePeriodSeconds"] == 0
    api.patch("Pod", "p", {"metadata": {"finalizers": None}})
    with pytest.raises(NotFoundError):
        api.get("Pod", "p")


def test_pod_timing_is_configurable(clock: VirtualClock, timers: FakeTimers) -> None:
    import random

    from actors.sim import PodTiming, SimConfig

    cl = SimCluster(
        "c",
        clock,
        timers,
        random.Random(0),
        config=SimConfig(pods=PodTiming(schedule_delay=2, start_delay=0)),
    )
    cl.api.create(make_pod("p", ["echo"]))
    timers.run_until_idle()
    pod = cl.api.get("Pod", "p")
    assert t(pod["status"]["startTime"]) == 2
