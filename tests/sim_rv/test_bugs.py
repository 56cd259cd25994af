"""Every injectable controller bug produces an observable broken state — and a checker that counts
condition transitions (the seed's volume-checker: even = held, odd = broken) catches it."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim.rv import api as A
from tests.sim_rv.conftest import NS, Env, make_env, split_policies


class TransitionCounter:
    """The seed's volume-checker: counts IOReady/Quorum status changes of one RV from a watch."""

    def __init__(self, env: Env, rv: str) -> None:
        self.rv = rv
        self.last: dict[str, str] = {}
        self.counts = {A.COND_IO_READY: 0, A.COND_QUORUM: 0}
        env.test.watch(
            A.RV, callback=self._on, resource_version=env.test.resource_version(), api_version=A.STORAGE_API
        )
        obj = env.get(A.RV, rv)
        for ctype in self.counts:
            c = A.condition(obj, ctype)
            assert c is not None and c["status"] == "True", "the checker starts on a ready volume"
            self.last[ctype] = "True"

    def _on(self, etype: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] != self.rv or etype == "DELETED":
            return
        for ctype in self.counts:
            c = A.condition(obj, ctype)
            status = c["status"] if c else "Unknown"
            if status != self.last[ctype]:
                self.counts[ctype] += 1
                self.last[ctype] = status

    @property
    def broken(self) -> bool:
        return any(n % 2 for n in self.counts.values())


def split(env: Env, a: list[str], b: list[str], seconds: float) -> None:
    pols = split_policies("split", a, b)
    for pol in pols:
        env.parent.create(pol)
    env.advance(seconds)
    for pol in pols:
        env.parent.delete(A.CNP, pol["metadata"]["name"], NS)


@pytest.mark.parametrize("bug", [False, True])
def test_quorum_not_regained_after_split_brain(bug: bool) -> None:
    env = make_env(
        storage_classes=["c2:Consistency", "c3"], bugs={"quorum_not_regained_after_split_brain": bug}
    )
    env.create_rv("v2", "c2")
    counter = TransitionCounter(env, "v2")
    a, b = env.replica_nodes("v2")
    split(env, [a], [b], 20)
    env.advance(600)
    if bug:
        assert env.rv_state("v2") == ("False", A.R_NO_IO_READY, "False", A.R_QUORUM_LOST)
        for r in env.replicas("v2"):
            assert [c["state"] for c in r["status"]["drbd"]["connections"]] == ["StandAlone"]
        assert counter.broken
    else:
        assert env.healthy("v2")
        assert counter.counts == {A.COND_IO_READY: 2, A.COND_QUORUM: 2} and not counter.broken


def test_split_brain_bug_on_a_minority_replica_leaves_the_volume_degraded() -> None:
    env = make_env(bugs={"quorum_not_regained_after_split_brain": True})
    env.create_rv("v3")
    nodes = env.replica_nodes("v3")
    split(env, nodes[:1], [n for n in env.m.vm_names if n != nodes[0]], 20)
    env.advance(600)
    assert env.rv_state("v3") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)
    cut = next(r for r in env.replicas("v3") if r["spec"]["nodeName"] == nodes[0])
    assert env.cond(A.RVR, cut["metadata"]["name"], A.COND_IN_QUORUM) == ("False", "QuorumLost")


def test_replica_not_recreated() -> None:
    """Without a replacement the controller never releases the deleted replica (its deletion hangs
    with the controller's finalizer; it keeps running and voting): the volume shows the missing
    replica in Scheduled, not in its quorum."""
    env = make_env(bugs={"replica_not_recreated": True})
    env.create_rv("v")
    env.delete(A.RVR, "v-0")
    env.advance(600)
    assert len(env.replicas("v")) == 3
    held = env.get(A.RVR, "v-0")
    assert held is not None and "deletionTimestamp" in held["metadata"]
    assert A.CONTROLLER_FINALIZER in held["metadata"]["finalizers"]
    assert env.rv_state("v")[:3] == ("True", "IOReady", "True")
    assert env.cond(A.RV, "v", A.COND_SCHEDULED) == ("False", A.R_NOT_SCHEDULED)
    # fixing the controller heals the volume: a replacement syncs, then the deleted replica goes
    env.m.set_bugs(replica_not_recreated=False)
    env.wait(lambda: env.get(A.RVR, "v-0") is None and env.healthy("v"), timeout=120)
    assert len(env.replicas("v")) == 3


def test_attach_stuck() -> None:
    env = make_env(bugs={"attach_stuck": True})
    env.create_rv("v")
    rva = env.attach("v", env.replica_nodes("v")[0])
    env.advance(300)
    obj = env.get(A.RVA, rva)
    assert obj is not None and obj["status"]["phase"] == A.RVA_ATTACHING
    assert env.cond(A.RVA, rva, A.COND_ATTACHED) == ("False", A.R_SETTING_PRIMARY)
    assert env.attached("v") == []


def test_detach_stuck() -> None:
    env = make_env(bugs={"detach_stuck": True})
    env.create_rv("v")
    node = env.replica_nodes("v")[0]
    rva = env.attach("v", node)
    env.wait(lambda: env.attached("v") == [node], timeout=30)
    env.delete(A.RVA, rva)
    env.advance(300)
    obj = env.get(A.RVA, rva)
    assert obj is not None and obj["status"]["phase"] == A.RVA_DETACHING
    assert env.attached("v") == [node]
    env.m.set_bugs(detach_stuck=False)
    env.wait(lambda: env.get(A.RVA, rva) is None, timeout=30)


def test_resync_stuck() -> None:
    env = make_env(bugs={"resync_stuck": True})
    env.create_rv("v")
    primary, victim = env.replica_nodes("v")[:2]
    env.attach("v", primary)
    env.wait(lambda: env.attached("v") == [primary], timeout=30)
    env.restart_vm(victim)
    env.wait(lambda: env.vm_phase(victim) == "Stopping", timeout=10)
    env.wait(lambda: env.vm_phase(victim) == "Running", timeout=120)
    env.advance(600)
    assert env.get(A.RV, "v")["status"]["diskfulReplicaCount"] == "2/3"  # type: ignore[index]
    replica = next(r["metadata"]["name"] for r in env.replicas("v") if r["spec"]["nodeName"] == victim)
    assert env.cond(A.RVR, replica, A.COND_IN_SYNC) == ("False", A.OUTDATED)


def test_rv_deletion_stuck() -> None:
    env = make_env(bugs={"rv_deletion_stuck": True})
    env.create_rv("v")
    env.delete(A.RV, "v")
    env.advance(300)
    obj = env.get(A.RV, "v")
    assert obj is not None and "deletionTimestamp" in obj["metadata"]
    assert env.replicas("v") == []


def test_bug_list() -> None:
    env = make_env(settle=False, bugs={"attach_stuck": True, "detach_stuck": True})
    assert env.m.bugs.enabled() == ["attach_stuck", "detach_stuck"]
