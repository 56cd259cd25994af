"""The world's shape, volume formation, placement, quorum math, user replicas, recreation, deletion."""

from __future__ import annotations

from actors.sim.playground import SimWorld
from actors.sim.rv import MegatestWorldSpec, StorageClassSpec
from actors.sim.rv import api as A
from engine.clock import VirtualClock
from tests.sim_api.timers import FakeTimers
from tests.sim_rv.conftest import NS, Env, make_env


def test_world_shape(env: Env) -> None:
    nodes = env.test.list("Node")["items"]
    storage = sorted(n["metadata"]["name"] for n in nodes if A.STORAGE_NODE_LABEL in n["metadata"]["labels"])
    assert storage == [f"worker-0{i}" for i in range(1, 7)]
    assert {
        n["metadata"]["labels"][A.STORAGE_NODE_LABEL] for n in nodes if n["metadata"]["name"] in storage
    } == {""}
    vms = env.parent.list(A.VM, NS, api_version=A.VIRT_API)["items"]
    assert sorted(v["metadata"]["name"] for v in vms) == ["master-0", *storage]
    for vm in vms:
        st = vm["status"]
        assert st["phase"] == "Running"
        assert st["ipAddress"].startswith("10.211.1.")
        assert st["nodeName"].startswith("dvp-worker-")
    ips = {v["status"]["ipAddress"] for v in vms}
    assert len(ips) == len(vms)
    pods = env.parent.list("Pod", NS)["items"]
    assert sorted(p["metadata"]["labels"][A.VM_NAME_LABEL] for p in pods) == sorted(
        v["metadata"]["name"] for v in vms
    )
    assert all(p["status"]["phase"] == "Running" for p in pods)
    cp = env.test.list("Pod", A.CONTROL_PLANE_NAMESPACE)["items"]
    agents = [p for p in cp if p["metadata"]["labels"]["app"] == "agent"]
    controllers = [p for p in cp if p["metadata"]["labels"]["app"] == "controller"]
    assert sorted(p["spec"]["nodeName"] for p in agents) == storage
    assert len(controllers) == 2
    assert all(p["spec"]["nodeName"] == "master-0" for p in controllers)
    assert all(p["status"]["phase"] == "Running" for p in cp)
    lease = env.test.get("Lease", A.LEASE_NAME, A.CONTROL_PLANE_NAMESPACE)
    assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in controllers}
    # kinds are served under their short names, with the right scope
    for short, namespaced in (("rv", False), ("rvr", False), ("rva", False), ("rsc", False)):
        assert env.test.resolve(short).namespaced is namespaced
    for short in ("vm", "vmop", "cnp"):
        assert env.parent.resolve(short).namespaced
    rscs = env.test.list(A.RSC)["items"]
    assert {r["metadata"]["name"]: r["spec"]["replication"] for r in rscs} == {
        "sim-r2": "Availability",
        "sim-r3": "ConsistencyAndAvailability",
    }
    assert env.callback_errors() == 0


def test_formation_placement_and_conditions(env: Env) -> None:
    t0 = env.now
    env.create_rv("rv-a", "sim-r3", wait=False)
    env.wait(lambda: env.healthy("rv-a"))
    t = env.m.spec.timing
    assert env.now - t0 <= t.schedule_delay + t.configure_delay + 1
    rv = env.get(A.RV, "rv-a")
    assert rv is not None
    assert A.RV_FINALIZER in rv["metadata"]["finalizers"]
    st = rv["status"]
    assert st["drbdPort"] == 7000
    assert st["actualSize"] == "1Gi"
    assert st["diskfulReplicaCount"] == "3/3"
    assert env.rv_state("rv-a") == ("True", "IOReady", "True", "QuorumReached")
    for c in st["conditions"]:
        assert set(c) >= {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    replicas = env.replicas("rv-a")
    assert sorted(r["metadata"]["name"] for r in replicas) == ["rv-a-0", "rv-a-1", "rv-a-2"]
    nodes = env.replica_nodes("rv-a")
    assert len(set(nodes)) == 3 and all(n.startswith("worker-") for n in nodes)
    for r in replicas:
        assert r["spec"]["type"] == A.DISKFUL
        assert A.AGENT_FINALIZER in r["metadata"]["finalizers"]
        assert r["status"]["drbd"]["diskState"] == A.UP_TO_DATE
        assert r["status"]["drbd"]["port"] == 7000
        assert [c["state"] for c in r["status"]["drbd"]["connections"]] == ["Connected", "Connected"]
        for ctype in ("Scheduled", "Configured", "Online", "InQuorum", "InSync", "IOReady", "Ready"):
            assert A.condition_true(r, ctype), ctype
    # a second volume gets the next port and is spread over the least loaded nodes
    env.create_rv("rv-b", "sim-r3")
    assert env.get(A.RV, "rv-b")["status"]["drbdPort"] == 7001  # type: ignore[index]
    assert set(env.replica_nodes("rv-b")).isdisjoint(nodes)


def test_availability_class_places_a_tiebreaker(env: Env) -> None:
    env.create_rv("rv-av", "sim-r2")
    assert len(env.replica_nodes("rv-av", A.DISKFUL)) == 2
    assert len(env.replica_nodes("rv-av", A.TIEBREAKER)) == 1
    assert len(set(env.replica_nodes("rv-av", None))) == 3
    tb = next(r for r in env.replicas("rv-av") if r["spec"]["type"] == A.TIEBREAKER)
    assert tb["status"]["drbd"]["diskState"] == A.DISKLESS


def test_missing_storage_class_waits(env: Env) -> None:
    env.create_rv("rv-x", "no-such-class", wait=False)
    env.advance(30)
    assert env.cond(A.RV, "rv-x", A.COND_CONFIGURATION_READY) == ("False", A.R_WAITING_FOR_RSC)
    assert env.replicas("rv-x") == []
    env.test.create(StorageClassSpec("no-such-class", "Consistency").manifest())
    env.wait(lambda: env.healthy("rv-x"), timeout=30)
    assert len(env.replicas("rv-x")) == 2


def test_user_replicas_are_scheduled_and_tiebreaker_votes(env: Env) -> None:
    env.create_rv("rv-u", "sim-r3")
    used = set(env.replica_nodes("rv-u"))
    env.create_rvr("rv-u", "rv-u-6", A.ACCESS)
    env.wait(
        lambda: (
            all(A.condition_true(r, "Ready") for r in env.replicas("rv-u")) and len(env.replicas("rv-u")) == 4
        )
    )
    nodes = env.replica_nodes("rv-u", None)
    assert len(set(nodes)) == 4 and used < set(nodes)
    assert env.rv_state("rv-u") == ("True", "IOReady", "True", "QuorumReached")
    # a TieBreaker beyond the layout (3 Diskful need none: it would make the voters even) is deleted
    # by the controller (rvr-tie-breaker-count) before it is even scheduled
    env.create_rvr("rv-u", "rv-u-5", A.TIEBREAKER)
    env.wait(lambda: env.get(A.RVR, "rv-u-5") is None, timeout=10)
    q = env.m.condition(A.RV, "rv-u", A.COND_QUORUM)
    assert q is not None and q["message"] == "3/3 voting replicas connected"
    # the layout's TieBreaker (Availability: 2 Diskful + 1 TieBreaker) votes
    env.create_rv("rv-t", "sim-r2")
    q = env.m.condition(A.RV, "rv-t", A.COND_QUORUM)
    assert q is not None and q["message"] == "3/3 voting replicas connected"
    # a replica on a node that already has one is not scheduled
    busy = env.replica_nodes("rv-u")[0]
    env.create_rvr("rv-u", "rv-u-7", A.ACCESS, node=busy)
    env.advance(5)
    assert env.cond(A.RVR, "rv-u-7", A.COND_SCHEDULED) == ("False", A.R_SCHEDULING_FAILED)
    assert "drbd" not in (env.get(A.RVR, "rv-u-7") or {}).get("status", {})


def test_no_eligible_node_for_a_user_replica(env: Env) -> None:
    env.create_rv("rv-full", "sim-r3")
    for i, _ in enumerate(range(3), start=3):
        env.create_rvr("rv-full", f"rv-full-{i}", A.ACCESS)
    env.advance(10)
    env.create_rvr("rv-full", "rv-full-9", A.ACCESS)
    env.advance(10)
    assert env.cond(A.RVR, "rv-full-9", A.COND_SCHEDULED) == ("False", A.R_NO_AVAILABLE_NODES)


def test_replica_deletion_is_replaced_before_it_goes(env: Env) -> None:
    """A deleted replica keeps running (and voting) until its replacement is UpToDate: the controller
    releases its finalizer only then (rvr-finalizer-release); the replacement goes to another node."""
    env.create_rv("rv-d", "sim-r3")
    before = env.replica_nodes("rv-d")
    deleted_node = env.get(A.RVR, "rv-d-1")["spec"]["nodeName"]  # type: ignore[index]
    t_del = env.now
    env.delete(A.RVR, "rv-d-1")
    env.advance(10)
    held = env.get(A.RVR, "rv-d-1")
    assert held is not None and "deletionTimestamp" in held["metadata"]
    assert held["metadata"]["finalizers"] == [A.AGENT_FINALIZER, A.CONTROLLER_FINALIZER]
    assert env.healthy("rv-d")  # still 3 of 3 voting replicas
    assert env.cond(A.RV, "rv-d", A.COND_SCHEDULED) == ("False", A.R_NOT_SCHEDULED)
    assert env.get(A.RV, "rv-d")["status"]["diskfulReplicaCount"] == "2/3"  # type: ignore[index]
    took = env.wait(lambda: env.get(A.RVR, "rv-d-1") is None, timeout=120)
    recreate = env.m.spec.timing.recreate_delay
    assert recreate <= env.now - t_del <= recreate + 10, took
    assert env.healthy("rv-d")
    after = env.replica_nodes("rv-d")
    assert len(after) == 3 and len(set(after)) == 3
    assert deleted_node not in after and set(before) - {deleted_node} < set(after)
    assert sorted(r["metadata"]["name"] for r in env.replicas("rv-d")) == ["rv-d-0", "rv-d-2", "rv-d-3"]


def test_new_replica_of_a_written_volume_needs_a_full_sync(env: Env) -> None:
    env.create_rv("rv-s", "sim-r3")
    env.attach("rv-s", env.replica_nodes("rv-s")[0])
    env.wait(lambda: len(env.attached("rv-s")) == 1, timeout=30)
    env.delete(A.RVR, "rv-s-2")
    env.wait(
        lambda: any(
            r["metadata"]["name"] == "rv-s-3"
            and (r.get("status") or {}).get("drbd", {}).get("diskState") == A.INCONSISTENT
            for r in env.replicas("rv-s")
        ),
        timeout=120,
    )
    assert env.cond(A.RVR, "rv-s-3", A.COND_IN_SYNC) == ("False", A.INCONSISTENT)
    assert env.get(A.RV, "rv-s")["status"]["diskfulReplicaCount"] == "2/3"  # type: ignore[index]
    assert env.get(A.RVR, "rv-s-2") is not None  # held until the replacement synced
    took = env.wait(
        lambda: env.healthy("rv-s") and env.get(A.RV, "rv-s")["status"]["diskfulReplicaCount"] == "3/3"  # type: ignore[index]
    )
    assert took >= env.m.spec.timing.full_sync - 1
    env.wait(lambda: env.get(A.RVR, "rv-s-2") is None, timeout=10)


def test_quorum_math_on_offline_nodes() -> None:
    """Consistency (2 voters): losing one loses quorum; 3 voters: losing one keeps it."""
    env = make_env(storage_classes=["c2:Consistency", "c3:ConsistencyAndAvailability", "one:None"])
    env.create_rv("v2", "c2")
    env.create_rv("v3", "c3")
    env.create_rv("v1", "one")
    shared = set(env.replica_nodes("v2")) & set(env.replica_nodes("v3"))
    victim = sorted(shared)[0] if shared else env.replica_nodes("v2")[0]
    env.restart_vm(victim, force=False)
    env.wait(lambda: env.vm_phase(victim) == "Stopping", timeout=10)
    env.advance(1)
    assert env.rv_state("v2")[2:] == ("False", A.R_QUORUM_LOST)
    assert env.rv_state("v2")[0] == "False"
    if victim in env.replica_nodes("v3"):
        assert env.rv_state("v3") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)
    env.wait(lambda: env.vm_phase(victim) == "Running", timeout=120)
    env.wait(lambda: env.healthy("v2") and env.healthy("v3") and env.healthy("v1"), timeout=60)


def test_rv_deletion_waits_for_attachments_then_goes(env: Env) -> None:
    env.create_rv("rv-del", "sim-r3")
    node = env.replica_nodes("rv-del")[0]
    rva = env.attach("rv-del", node)
    env.wait(lambda: env.attached("rv-del") == [node], timeout=30)
    env.delete(A.RV, "rv-del")
    env.advance(20)
    rv = env.get(A.RV, "rv-del")
    assert rv is not None and "deletionTimestamp" in rv["metadata"]
    assert len(env.replicas("rv-del")) == 3
    assert env.cond(A.RV, "rv-del", A.COND_CONFIGURATION_READY) == ("False", A.R_DELETING)
    env.delete(A.RVA, rva)
    env.wait(lambda: env.get(A.RV, "rv-del") is None, timeout=60)
    assert env.replicas("rv-del") == []
    assert env.get(A.RVA, rva) is None
    assert env.m.kernel("rv-del") is None


def test_world_spec_roundtrip_and_validation() -> None:
    spec = MegatestWorldSpec.build(
        storage_nodes=4,
        storage_classes=["a:Availability", "b"],
        timing={"vm_boot": 5},
        bugs={"attach_stuck": True},
    )
    assert MegatestWorldSpec.from_dict(spec.to_dict()) == spec
    assert spec.storage_node_names() == ["worker-01", "worker-02", "worker-03", "worker-04"]
    assert spec.vm_ip("worker-01") == "10.211.1.11"
    for bad in ({"storage_nodes": 0}, {"storage_classes": ["x:Bogus"]}):
        try:
            MegatestWorldSpec.build(**bad)  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_add_megatest_clusters_on_simworld() -> None:
    clock = VirtualClock()
    timers = FakeTimers(clock)
    world = SimWorld(clock, timers)
    m = world.add_megatest_clusters(storage_nodes=3, masters=0, controller_replicas=1)
    assert set(world.clusters) == {"default", "test", "parent"}
    assert world.playground.clusters() == ["default", "parent", "test"]
    timers.advance(10)
    assert len(m.test.api.list("Pod", A.CONTROL_PLANE_NAMESPACE)["items"]) == 4
