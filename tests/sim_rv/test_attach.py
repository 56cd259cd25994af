"""Attachments: RVA lifecycle, actuallyAttachedTo, the 2-attachment limit, Access replicas."""

from __future__ import annotations

from actors.sim.rv import api as A
from tests.sim_rv.conftest import Env


def phase(env: Env, rva: str) -> str | None:
    obj = env.get(A.RVA, rva)
    return None if obj is None else (obj.get("status") or {}).get("phase")


def test_attach_and_detach(env: Env) -> None:
    env.create_rv("rv-1")
    node = env.replica_nodes("rv-1")[0]
    t0 = env.now
    rva = env.attach("rv-1", node)
    env.wait(lambda: phase(env, rva) == A.RVA_ATTACHED, timeout=30)
    t = env.m.spec.timing
    assert env.now - t0 >= t.attach_delay
    obj = env.get(A.RVA, rva)
    assert obj is not None and A.RV_FINALIZER in obj["metadata"]["finalizers"]
    for ctype in (A.COND_ATTACHED, A.COND_REPLICA_READY, A.COND_READY):
        assert A.condition_true(obj, ctype), ctype
    assert env.attached("rv-1") == [node]
    assert env.get(A.RV, "rv-1")["status"]["desiredAttachTo"] == [node]  # type: ignore[index]
    replica = next(r for r in env.replicas("rv-1") if r["spec"]["nodeName"] == node)
    assert replica["status"]["drbd"]["role"] == "Primary"
    assert env.cond(A.RVR, replica["metadata"]["name"], A.COND_ATTACHED) == ("True", "Attached")
    # deletion is two-step: Detaching while the replica is still Primary, then gone
    env.delete(A.RVA, rva)
    obj = env.get(A.RVA, rva)
    assert obj is not None and "deletionTimestamp" in obj["metadata"]
    env.advance(0.5)
    assert phase(env, rva) == A.RVA_DETACHING
    env.wait(lambda: env.get(A.RVA, rva) is None, timeout=30)
    assert env.attached("rv-1") == []
    assert env.get(A.RV, "rv-1")["status"]["desiredAttachTo"] == []  # type: ignore[index]
    assert env.healthy("rv-1")


def test_at_most_two_attachments(env: Env) -> None:
    env.create_rv("rv-2")
    n1, n2, n3 = env.replica_nodes("rv-2")
    a1 = env.attach("rv-2", n1)
    env.advance(1)
    a2 = env.attach("rv-2", n2)
    env.advance(1)
    a3 = env.attach("rv-2", n3)
    env.wait(lambda: phase(env, a1) == phase(env, a2) == A.RVA_ATTACHED, timeout=30)
    env.advance(30)
    assert sorted(env.attached("rv-2")) == sorted([n1, n2])
    assert phase(env, a3) == A.RVA_PENDING
    assert env.cond(A.RVA, a3, A.COND_ATTACHED) == ("False", A.R_WAITING_FOR_DETACH)
    assert env.cond(A.RVA, a3, A.COND_READY) == ("False", A.R_NOT_ATTACHED)
    # one goes away: the waiting one is attached
    env.delete(A.RVA, a1)
    env.wait(lambda: phase(env, a3) == A.RVA_ATTACHED, timeout=30)
    assert sorted(env.attached("rv-2")) == sorted([n2, n3])
    assert env.get(A.RVA, a1) is None


def test_attach_on_node_without_replica_creates_access_replica(env: Env) -> None:
    env.create_rv("rv-3")
    free = sorted(set(env.m.storage_nodes) - set(env.replica_nodes("rv-3")))[0]
    rva = env.attach("rv-3", free)
    env.wait(lambda: phase(env, rva) == A.RVA_ATTACHED, timeout=30)
    access = [r for r in env.replicas("rv-3") if r["spec"]["nodeName"] == free]
    assert len(access) == 1 and access[0]["spec"]["type"] == A.ACCESS
    assert access[0]["metadata"]["labels"][A.ATTACH_REPLICA_LABEL] == "true"
    assert access[0]["status"]["drbd"]["diskState"] == A.DISKLESS
    assert env.healthy("rv-3")  # a diskless client does not vote
    env.delete(A.RVA, rva)
    env.wait(lambda: len(env.replicas("rv-3")) == 3, timeout=30)
    assert env.replica_nodes("rv-3", A.ACCESS) == []


def test_attach_on_tiebreaker_converts_it(env: Env) -> None:
    env.create_rv("rv-4", "sim-r2")
    tb_node = env.replica_nodes("rv-4", A.TIEBREAKER)[0]
    rva = env.attach("rv-4", tb_node)
    env.wait(lambda: phase(env, rva) == A.RVA_ATTACHED, timeout=30)
    assert env.replica_nodes("rv-4", A.ACCESS) == [tb_node]
    # the volume wants its TieBreaker back: a new one is placed after the recreate delay
    env.wait(lambda: len(env.replica_nodes("rv-4", A.TIEBREAKER)) == 1 and env.healthy("rv-4"), timeout=120)
    assert env.replica_nodes("rv-4", A.TIEBREAKER) != [tb_node]


def test_attach_waits_for_io_ready_and_non_storage_nodes_stay_pending(env: Env) -> None:
    env.create_rv("rv-5", wait=False)
    rva = env.attach("rv-5", "worker-01")
    env.advance(1.5)
    assert phase(env, rva) in (A.RVA_ATTACHING, A.RVA_PENDING)
    env.wait(lambda: phase(env, rva) == A.RVA_ATTACHED, timeout=30)
    bad = env.attach("rv-5", "master-0")
    env.advance(10)
    assert phase(env, bad) == A.RVA_PENDING
    assert env.cond(A.RVA, bad, A.COND_ATTACHED) == ("False", A.R_LOCALITY)
    assert env.attached("rv-5") == ["worker-01"]


def test_attachment_of_a_missing_volume(env: Env) -> None:
    rva = env.attach("ghost", "worker-01")
    env.advance(5)
    assert phase(env, rva) == A.RVA_PENDING
    assert env.cond(A.RVA, rva, A.COND_ATTACHED) == ("False", A.R_WAITING_FOR_RV)
    env.delete(A.RVA, rva)
    env.advance(1)
    assert env.get(A.RVA, rva) is None


def test_migration_emulation_cycle(env: Env) -> None:
    """The attacher's migration cycle: attach new, detach old, detach new (2 briefly)."""
    env.create_rv("rv-m")
    old, new = env.replica_nodes("rv-m")[:2]
    a_old = env.attach("rv-m", old)
    env.wait(lambda: env.attached("rv-m") == [old], timeout=30)
    a_new = env.attach("rv-m", new)
    env.wait(lambda: sorted(env.attached("rv-m")) == sorted([old, new]), timeout=30)
    env.delete(A.RVA, a_old)
    env.wait(lambda: env.attached("rv-m") == [new], timeout=30)
    env.delete(A.RVA, a_new)
    env.wait(lambda: env.attached("rv-m") == [] and not env.test.list(A.RVA)["items"], timeout=30)
    assert env.healthy("rv-m")
