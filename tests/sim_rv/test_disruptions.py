"""VM restarts, control-plane pod deletion (paused reconciliation), agent pod deletion."""

from __future__ import annotations

from actors.sim.rv import api as A
from tests.sim_rv.conftest import NS, Env, make_env, split_policies


def vmop_phase(env: Env, name: str) -> str | None:
    obj = env.get(A.VMOP, name, NS)
    return None if obj is None else (obj.get("status") or {}).get("phase")


def test_vm_restart_takes_node_and_replicas_offline(env: Env) -> None:
    env.create_rv("r1")
    victim = env.replica_nodes("r1")[0]
    op = env.restart_vm(victim, force=True)
    phases: list[tuple[str | None, str]] = []
    degraded_seen = False
    t0 = env.now
    node_states = set()
    while env.now - t0 < 90:
        env.advance(0.5)
        state = (vmop_phase(env, op), env.vm_phase(victim))
        if not phases or phases[-1] != state:
            phases.append(state)
        degraded_seen |= env.rv_state("r1")[3] == A.R_QUORUM_DEGRADED
        node_states.add(env.cond("Node", victim, "Ready"))
    assert phases == [
        ("Pending", "Running"),  # vmop_start_delay
        ("InProgress", "Stopping"),
        ("InProgress", "Starting"),
        ("Completed", "Running"),
    ], phases
    assert degraded_seen
    # with the default timings (boot 60 s > the 40 s node-monitor grace period) the Node goes
    # NotReady (Unknown, as when the kubelet stops posting) during the restart
    assert node_states == {("True", "KubeletReady"), ("Unknown", "NodeStatusUnknown")}
    assert env.healthy("r1")
    vm = env.get(A.VM, victim, NS)
    assert vm is not None
    trans = [t["phase"] for t in vm["status"]["stats"]["phasesTransitions"]]
    assert trans[-3:] == ["Stopping", "Starting", "Running"]
    done = env.get(A.VMOP, op, NS)
    assert done is not None and A.condition_true(done, "Completed")
    # the virt-launcher pod was replaced
    pods = env.parent.list("Pod", NS, f"{A.VM_NAME_LABEL}={victim}")["items"]
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"


def test_restart_timing_force_and_graceful() -> None:
    env = make_env(timing={"vm_stop": 20, "vm_stop_force": 2, "vm_boot": 10, "vmop_start_delay": 1})
    a, b = env.m.storage_nodes[:2]
    env.restart_vm(a, force=True)
    env.restart_vm(b, force=False)
    env.advance(1.5)
    assert env.vm_phase(a) == env.vm_phase(b) == "Stopping"
    env.advance(2)
    assert (env.vm_phase(a), env.vm_phase(b)) == ("Starting", "Stopping")
    env.advance(10)
    assert (env.vm_phase(a), env.vm_phase(b)) == ("Running", "Stopping")
    env.advance(10)
    assert env.vm_phase(b) == "Starting"
    env.advance(10)
    assert env.vm_phase(b) == "Running"


def test_long_outage_makes_node_not_ready_and_replicas_offline() -> None:
    env = make_env(timing={"vm_boot": 120})
    env.create_rv("r2")
    victim = env.replica_nodes("r2")[0]
    replica = next(r["metadata"]["name"] for r in env.replicas("r2") if r["spec"]["nodeName"] == victim)
    node_ready = lambda: A.condition_true(env.get("Node", victim), "Ready")  # noqa: E731
    env.restart_vm(victim)
    env.advance(10)
    assert node_ready()  # the kubelet's grace period has not passed yet
    env.wait(lambda: not node_ready(), timeout=60)
    assert env.cond("Node", victim, "Ready") == ("Unknown", "NodeStatusUnknown")
    env.advance(1)
    assert env.cond(A.RVR, replica, A.COND_ONLINE) == ("False", A.R_NODE_NOT_READY)
    assert env.rv_state("r2") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)
    env.wait(lambda: env.vm_phase(victim) == "Running", timeout=120)
    env.wait(node_ready, timeout=30)
    env.wait(lambda: env.healthy("r2"), timeout=30)
    assert env.cond(A.RVR, replica, A.COND_ONLINE) == ("True", "Online")


def test_restart_of_a_peer_outdates_it_while_attached(env: Env) -> None:
    env.create_rv("r3")
    primary, victim = env.replica_nodes("r3")[:2]
    env.attach("r3", primary)
    env.wait(lambda: env.attached("r3") == [primary], timeout=30)
    env.restart_vm(victim)
    env.wait(lambda: env.vm_phase(victim) == "Starting", timeout=30)
    kern = env.m.kernel("r3")
    assert kern is not None
    assert sorted(k.disk for k in kern.replicas.values()) == [A.OUTDATED, A.UP_TO_DATE, A.UP_TO_DATE]
    env.wait(lambda: env.vm_phase(victim) == "Running", timeout=60)
    count = lambda: env.get(A.RV, "r3")["status"]["diskfulReplicaCount"]  # type: ignore[index]  # noqa: E731
    # back online, its agent reports the Outdated disk, then the resync
    env.wait(lambda: count() == "2/3", timeout=30)
    took = env.wait(lambda: count() == "3/3" and env.healthy("r3"), timeout=60)
    assert took >= env.m.spec.timing.resync - 1
    assert env.attached("r3") == [primary]


def test_restart_of_the_attached_node_reattaches(env: Env) -> None:
    env.create_rv("r4")
    node = env.replica_nodes("r4")[0]
    rva = env.attach("r4", node)
    env.wait(lambda: env.attached("r4") == [node], timeout=30)
    env.restart_vm(node)
    env.wait(lambda: env.vm_phase(node) == "Starting", timeout=30)
    kern = env.m.kernel("r4")
    assert kern is not None and not any(k.primary for k in kern.replicas.values())
    env.wait(lambda: env.vm_phase(node) == "Running", timeout=60)
    env.wait(lambda: env.healthy("r4") and env.attached("r4") == [node], timeout=60)
    assert env.get(A.RVA, rva)["status"]["phase"] == A.RVA_ATTACHED  # type: ignore[index]


def test_operations_of_one_vm_run_one_at_a_time(env: Env) -> None:
    vm = env.m.storage_nodes[0]
    first = env.restart_vm(vm, name="op-1")
    env.advance(0.5)
    second = env.restart_vm(vm, name="op-2")
    env.advance(2)
    assert vmop_phase(env, first) == "InProgress"
    assert vmop_phase(env, second) == "Pending"
    env.wait(lambda: vmop_phase(env, first) == "Completed", timeout=120)
    env.wait(lambda: vmop_phase(env, second) == "InProgress", timeout=5)
    env.wait(lambda: vmop_phase(env, second) == "Completed", timeout=120)
    env.parent.create(
        {
            "apiVersion": A.VIRT_API,
            "kind": A.VMOP,
            "metadata": {"name": "op-clone", "namespace": NS},
            "spec": {"type": "Clone", "virtualMachineName": vm},
        }
    )
    env.parent.create(
        {
            "apiVersion": A.VIRT_API,
            "kind": A.VMOP,
            "metadata": {"name": "op-stop", "namespace": NS},
            "spec": {"type": "Stop", "virtualMachineName": vm},
        }
    )
    env.wait(lambda: vmop_phase(env, "op-stop") == "Completed", timeout=60)
    assert vmop_phase(env, "op-clone") == "Failed"
    assert env.vm_phase(vm) == "Stopped"
    assert env.parent.list("Pod", NS, f"{A.VM_NAME_LABEL}={vm}")["items"] == []
    env.parent.create(
        {
            "apiVersion": A.VIRT_API,
            "kind": A.VMOP,
            "metadata": {"name": "op-start", "namespace": NS},
            "spec": {"type": "Start", "virtualMachineName": vm},
        }
    )
    env.wait(lambda: vmop_phase(env, "op-start") == "Completed", timeout=120)
    assert env.vm_phase(vm) == "Running"


def test_migration_keeps_the_guest_online(env: Env) -> None:
    env.create_rv("r5")
    vm = env.replica_nodes("r5")[0]
    before = env.get(A.VM, vm, NS)["status"]["nodeName"]  # type: ignore[index]
    env.parent.create(
        {
            "apiVersion": A.VIRT_API,
            "kind": A.VMOP,
            "metadata": {"name": "mig", "namespace": NS},
            "spec": {"type": "Migrate", "virtualMachineName": vm},
        }
    )
    seen = set()
    for _ in range(40):
        env.advance(0.5)
        seen.add(env.vm_phase(vm))
        assert env.healthy("r5")
    assert "Migrating" in seen
    assert vmop_phase(env, "mig") == "Completed"
    assert env.get(A.VM, vm, NS)["status"]["nodeName"] != before  # type: ignore[index]


def controller_pods(env: Env) -> list[str]:
    pods = env.test.list("Pod", A.CONTROL_PLANE_NAMESPACE, "app=controller")["items"]
    return sorted(p["metadata"]["name"] for p in pods if "deletionTimestamp" not in p["metadata"])


def test_deleting_controller_pods_pauses_reconciliation(env: Env) -> None:
    env.create_rv("c1")
    t = env.m.spec.timing
    old = controller_pods(env)
    for name in old:
        env.test.delete("Pod", name, A.CONTROL_PLANE_NAMESPACE)
    t_del = env.now
    env.advance(0.1)
    new = controller_pods(env)
    assert len(new) == 2 and not set(new) & set(old)  # replaced at once, like a ReplicaSet
    # a user replica is not scheduled while no controller leads
    env.create_rvr("c1", "c1-9", A.ACCESS)
    env.advance(t.lease_duration - 1)
    r = env.get(A.RVR, "c1-9")
    assert r is not None and not r["spec"].get("nodeName")
    # and the volume's conditions are frozen: a replica's VM goes down, nobody notices
    victim = env.replica_nodes("c1")[0]
    env.restart_vm(victim)
    env.advance(1.5)
    assert env.rv_state("c1") == ("True", "IOReady", "True", A.R_QUORUM_REACHED)
    env.wait(lambda: bool(env.get(A.RVR, "c1-9")["spec"].get("nodeName")), timeout=30)  # type: ignore[index]
    took = env.now - t_del
    assert t.lease_duration + t.controller_startup <= took <= t.lease_duration + t.controller_startup + 3
    lease = env.test.get("Lease", A.LEASE_NAME, A.CONTROL_PLANE_NAMESPACE)
    assert lease["spec"]["holderIdentity"] in new and lease["spec"]["leaseTransitions"] == 1
    assert env.rv_state("c1")[3] == A.R_QUORUM_DEGRADED  # caught up
    env.wait(lambda: env.healthy("c1") and len(env.replicas("c1")) == 4, timeout=90)


def test_deleting_the_standby_does_not_pause(env: Env) -> None:
    lease = env.test.get("Lease", A.LEASE_NAME, A.CONTROL_PLANE_NAMESPACE)
    standby = [p for p in controller_pods(env) if p != lease["spec"]["holderIdentity"]]
    env.test.delete("Pod", standby[0], A.CONTROL_PLANE_NAMESPACE)
    env.create_rv("c2", wait=False)
    env.wait(lambda: env.healthy("c2"), timeout=10)


def agent_pod(env: Env, node: str) -> str:
    pods = env.test.list("Pod", A.CONTROL_PLANE_NAMESPACE, "app=agent")["items"]
    return next(
        p["metadata"]["name"]
        for p in pods
        if p["spec"]["nodeName"] == node and "deletionTimestamp" not in p["metadata"]
    )


def test_deleting_an_agent_freezes_its_replicas(env: Env) -> None:
    env.create_rv("g1")
    node = env.replica_nodes("g1")[0]
    replica = next(r["metadata"]["name"] for r in env.replicas("g1") if r["spec"]["nodeName"] == node)
    old_pod = agent_pod(env, node)
    env.test.delete("Pod", old_pod, A.CONTROL_PLANE_NAMESPACE)
    env.advance(0.5)
    frozen = env.get(A.RVR, replica)["status"]  # type: ignore[index]
    # cut the node off: its own replica cannot report, the peers do
    for pol in split_policies("cut", [node], [n for n in env.m.vm_names if n != node]):
        env.parent.create(pol)
    env.advance(1)
    assert env.get(A.RVR, replica)["status"] == frozen  # type: ignore[index]
    assert {c["state"] for c in frozen["drbd"]["connections"]} == {"Connected"}
    assert env.rv_state("g1") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)
    # DaemonSet semantics: the replacement comes once the old pod is gone (grace period)
    t = env.m.spec.timing
    env.wait(lambda: env.get("Pod", old_pod, A.CONTROL_PLANE_NAMESPACE) is None, timeout=t.pod_grace + 2)
    env.wait(lambda: env.cond(A.RVR, replica, A.COND_IN_QUORUM) == ("False", "QuorumLost"), timeout=20)
    new_pod = agent_pod(env, node)
    assert new_pod != old_pod
    for pol in split_policies("cut", [node], []):
        env.parent.delete(A.CNP, pol["metadata"]["name"], NS)
    env.advance(1)
    assert env.healthy("g1")
