"""Replica deletion under chaos (the megatest's volume-replica-destroyer): the controller releases a
deleted replica only when that is safe (rvr-finalizer-release), so a deletion alone never costs the
volume its quorum — the scenario of megatest seed 7, where a Diskful replica of the majority side was
deleted during a split-brain and torn down a second later, leaving two voters on either side."""

from __future__ import annotations

import pytest

from actors.sim.rv import api as A
from tests.sim_rv.conftest import NS, Env, make_env, split_policies
from tests.sim_rv.test_bugs import TransitionCounter


def _node_of(env: Env, rvr: str) -> str:
    obj = env.get(A.RVR, rvr)
    assert obj is not None
    return str(obj["spec"]["nodeName"])


def _isolate(env: Env, node: str) -> list[str]:
    """split-brain: ``node`` alone against every other VM; returns the policy names."""
    pols = split_policies("split", [n for n in env.m.vm_names if n != node], [node])
    for pol in pols:
        env.parent.create(pol)
    return [p["metadata"]["name"] for p in pols]


@pytest.mark.parametrize("unsafe", [False, True])
def test_deleting_a_majority_replica_during_a_split_keeps_quorum(unsafe: bool) -> None:
    env = make_env(bugs={"unsafe_replica_deletion": unsafe})
    env.create_rv("v")
    counter = TransitionCounter(env, "v")
    cut = _node_of(env, "v-2")
    policies = _isolate(env, cut)
    env.advance(3)
    assert env.rv_state("v") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)  # 2 of 3
    env.delete(A.RVR, "v-0")  # a replica of the majority side
    env.advance(5)
    if unsafe:
        # torn down at once: the 2 voters left are on both sides of the split
        assert env.get(A.RVR, "v-0") is None
        assert env.rv_state("v")[2:] == ("False", A.R_QUORUM_LOST)
        assert counter.broken
        return
    held = env.get(A.RVR, "v-0")
    assert held is not None and A.CONTROLLER_FINALIZER in held["metadata"]["finalizers"]
    # the replacement syncs on the majority side, but the cut replica is not IOReady: the deleted
    # one stays (3 Diskful replicas must be UpToDate without it) and keeps its vote
    env.advance(120)
    assert env.get(A.RVR, "v-0") is not None
    assert env.rv_state("v")[:3] == ("True", "IOReady", "True")
    assert counter.counts == {A.COND_IO_READY: 0, A.COND_QUORUM: 0}
    for name in policies:
        env.parent.delete(A.CNP, name, NS)
    env.wait(lambda: env.get(A.RVR, "v-0") is None and env.healthy("v"), timeout=120)
    assert len(set(env.replica_nodes("v"))) == 3
    assert counter.counts == {A.COND_IO_READY: 0, A.COND_QUORUM: 0}


def test_deleting_a_replica_keeps_its_vote_until_the_replacement_synced() -> None:
    """Delete one replica, then lose another node (VM reboot) before the replacement synced: the
    deleted replica still votes, so 2 of 3 voters stay connected."""
    env = make_env()
    env.create_rv("v")
    env.attach("v", _node_of(env, "v-0"))  # written: the replacement needs a full sync
    env.wait(lambda: len(env.attached("v")) == 1, timeout=30)
    counter = TransitionCounter(env, "v")
    uid = env.get(A.RVR, "v-1")["metadata"]["uid"]  # type: ignore[index]
    env.delete(A.RVR, "v-1")
    env.advance(2)
    env.restart_vm(_node_of(env, "v-2"))
    env.wait(lambda: env.vm_phase(_node_of(env, "v-2")) != "Running", timeout=10)
    for _ in range(30):
        env.advance(1)
        held = env.get(A.RVR, "v-1")
        assert held is not None and held["metadata"]["uid"] == uid
        assert env.rv_state("v")[:3] == ("True", "IOReady", "True")
    env.wait(lambda: env.get(A.RVR, "v-1") is None and env.healthy("v"), timeout=300)
    assert counter.counts == {A.COND_IO_READY: 0, A.COND_QUORUM: 0}


def test_an_attached_replica_is_released_only_once_detached(env: Env) -> None:
    env.create_rv("v")
    node = _node_of(env, "v-0")
    rva = env.attach("v", node)
    env.wait(lambda: env.attached("v") == [node], timeout=30)
    env.delete(A.RVR, "v-0")
    env.advance(120)  # the replacement synced long ago
    held = env.get(A.RVR, "v-0")
    assert held is not None and A.CONTROLLER_FINALIZER in held["metadata"]["finalizers"]
    assert env.attached("v") == [node]
    assert env.cond(A.RVA, rva, A.COND_READY) == ("True", A.R_READY)
    assert sorted(_node_of(env, r["metadata"]["name"]) for r in env.replicas("v")).count(node) == 1
    env.delete(A.RVA, rva)
    env.wait(lambda: env.get(A.RVR, "v-0") is None and env.healthy("v"), timeout=30)
    assert env.attached("v") == [] and len(env.replica_nodes("v")) == 3
