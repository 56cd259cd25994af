"""Snapshot/restore in the middle of an incident continues exactly like an uninterrupted run."""

from __future__ import annotations

import json
from typing import Any

from actors.sim.playground import SimWorld
from actors.sim.rv import api as A
from actors.sim.rv import attach_megatest_world, restore_megatest_world
from engine.clock import VirtualClock
from tests.sim_api.timers import FakeTimers
from tests.sim_rv.conftest import NS, Env, block_policy, loss_job, make_env, unloss_job


def dump(env: Env) -> dict[str, Any]:
    """Every object of every cluster, without resourceVersions (timer order may differ)."""
    out: dict[str, Any] = {}
    for name, cluster in sorted(env.world.clusters.items()):
        objs = []
        for stored in cluster.api.snapshot()["objects"]:
            obj = json.loads(json.dumps(stored))
            obj["metadata"].pop("resourceVersion", None)
            objs.append(obj)
        out[name] = sorted(
            objs, key=lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )
    return out


def incident(env: Env, delete_job: bool = False) -> dict[str, Any]:
    """Volumes, an attachment, then a VM restart + a partition + a loss rule at once. The loss
    rule goes away with its Job (``finish``), or with the seed's delete Job (``delete_job``)."""
    env.create_rv("rv-a", "sim-r3")
    env.create_rv("rv-b", "sim-r2")
    a_nodes = env.replica_nodes("rv-a")
    env.attach("rv-a", a_nodes[0])
    env.wait(lambda: env.attached("rv-a") == [a_nodes[0]], timeout=30)
    b_victim = env.replica_nodes("rv-b", None)[0]
    env.restart_vm(b_victim, force=False)
    env.parent.create(block_policy("deny-pair", a_nodes[1:3]))
    env.test.create(loss_job("loss-add", a_nodes[0], env.m.vm_ip(a_nodes[1]), 0.5))
    if delete_job:
        env.test.create(unloss_job("loss-del", a_nodes[0], "loss-add", 25))
    env.advance(7)
    return {"a_nodes": a_nodes, "b_victim": b_victim, "delete_job": delete_job}


def finish(env: Env, ctx: dict[str, Any]) -> None:
    env.advance(5)
    env.parent.delete(A.CNP, "deny-pair", NS)
    env.advance(15)
    if not ctx["delete_job"]:
        env.test.delete("Job", "loss-add", "default")
    env.advance(45)
    env.delete(A.RVA, f"rva-rv-a-{ctx['a_nodes'][0]}")
    env.advance(60)


def restored_env(data: dict[str, Any], now: float) -> Env:
    clock = VirtualClock(now)
    timers = FakeTimers(clock)
    world = SimWorld(clock, timers, seed=0)
    m = restore_megatest_world(world, json.loads(json.dumps(data)), strict=True)
    return Env(clock, timers, world, m)


def test_restore_mid_incident_continues_like_the_original() -> None:
    original = make_env()
    ctx = incident(original)
    assert original.vm_phase(ctx["b_victim"]) == "Stopping"
    assert original.rv_state("rv-a")[3] == A.R_QUORUM_DEGRADED
    data = original.world.snapshot()
    copy = restored_env(data, original.now)
    assert dump(copy) == dump(original)  # restoring changes nothing by itself
    finish(original, ctx)
    finish(copy, ctx)
    assert original.healthy("rv-a") and original.healthy("rv-b")
    assert dump(copy) == dump(original)
    assert copy.m.kernel("rv-a").to_dict() == original.m.kernel("rv-a").to_dict()  # type: ignore[union-attr]
    assert copy.callback_errors() == original.callback_errors() == 0


def test_restore_into_the_same_world() -> None:
    env = make_env()
    ctx = incident(env)
    data = json.loads(json.dumps(env.world.snapshot()))
    env.advance(3)  # diverge, then go back (time only moves forward: restored at a later instant)
    m = restore_megatest_world(env.world, data)
    assert m.volumes is env.m.volumes
    finish(env, ctx)
    assert env.healthy("rv-a") and env.healthy("rv-b")
    assert env.attached("rv-a") == []


def test_attach_recovers_from_reported_state() -> None:
    """Without the saved DRBD state, the controllers rebuild it from what the replicas reported."""
    env = make_env()
    env.create_rv("v")
    node = env.replica_nodes("v")[0]
    env.attach("v", node)
    env.wait(lambda: env.attached("v") == [node], timeout=30)
    data = env.world.snapshot()
    for snap in data.values():
        snap["controllers"] = {}
    clock = VirtualClock(env.now)
    timers = FakeTimers(clock)
    world = SimWorld(clock, timers)
    world.restore(json.loads(json.dumps(data)))
    m = attach_megatest_world(world, strict=True)
    copy = Env(clock, timers, world, m)
    copy.advance(20)
    assert copy.healthy("v") and copy.attached("v") == [node]
    kern = m.kernel("v")
    assert kern is not None and kern.ever_primary
    assert sorted(k.disk for k in kern.replicas.values()) == [A.UP_TO_DATE] * 3


def test_restore_with_a_running_delete_job() -> None:
    original = make_env()
    ctx = incident(original, delete_job=True)
    copy = restored_env(original.world.snapshot(), original.now)
    finish(original, ctx)
    finish(copy, ctx)
    assert original.healthy("rv-a")
    assert copy.healthy("rv-a")
