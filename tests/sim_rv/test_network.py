"""Connectivity: Cilium policy semantics, iptables/iperf parsing, and their effect on quorum."""

from __future__ import annotations

import pytest

from actors.sim.rv import api as A
from actors.sim.rv.network import Endpoint, LossRule, NetworkModel, PolicySet, parse_iperf, parse_iptables
from tests.sim_rv.conftest import (
    NS,
    Env,
    block_policy,
    latency_job,
    loss_job,
    make_env,
    split_policies,
    unloss_job,
)

VMS = ["worker-01", "worker-02", "worker-03", "worker-10"]


def endpoints() -> dict[str, Endpoint]:
    return {vm: Endpoint(vm, NS, {A.VM_NAME_LABEL: vm, "io.kubernetes.pod.namespace": NS}) for vm in VMS}


# ------------------------------------------------------------------------------ policies (unit)


def test_seed_deny_all_tcp_policy() -> None:
    ps = PolicySet(
        [block_policy("deny-all-tcp-between-worker-01-and-worker-10", ["worker-01", "worker-10"])],
        endpoints(),
    )
    assert not ps.allowed("worker-01", "worker-10", 7000)
    assert not ps.allowed("worker-10", "worker-01", 22)
    assert ps.allowed("worker-01", "worker-02", 7000)  # allowed by the namespace allow rule
    assert ps.allowed("worker-02", "worker-10", 7000)
    assert ps.allowed("worker-02", "worker-03", 7000)  # not selected at all
    assert ps.allowed("worker-01", "worker-10", 7000, "UDP")  # only TCP is denied


def test_seed_deny_one_port_policy() -> None:
    ps = PolicySet([block_policy("deny-5201", ["worker-01", "worker-10"], ports=[5201])], endpoints())
    assert not ps.allowed("worker-01", "worker-10", 5201)
    assert ps.allowed("worker-01", "worker-10", 5202)
    net = NetworkModel(frozenset(VMS), ps)
    assert not net.link("worker-01", "worker-10", 5201)
    assert net.link("worker-01", "worker-10", 7000)


def test_deny_only_policy_puts_endpoints_in_default_deny() -> None:
    pol = block_policy("p", ["worker-01", "worker-10"], ports=[7000])
    del pol["spec"]["ingress"], pol["spec"]["egress"]
    ps = PolicySet([pol], endpoints())
    # Cilium: a policy with (deny) rules enables default-deny for its direction
    assert not ps.allowed("worker-02", "worker-01", 9999)
    assert ps.allowed("worker-02", "worker-03", 9999)
    pol["spec"]["enableDefaultDeny"] = {"ingress": False, "egress": False}
    ps = PolicySet([pol], endpoints())
    assert ps.allowed("worker-02", "worker-01", 9999)
    assert not ps.allowed("worker-10", "worker-01", 7000)


def test_one_sided_ingress_deny_keeps_the_link() -> None:
    """DRBD peers connect both ways: blocking ingress on one side only still lets the other side
    open the connection."""
    pol = {
        "apiVersion": A.CILIUM_API,
        "kind": A.CNP,
        "metadata": {"name": "in-only", "namespace": NS},
        "spec": {
            "endpointSelector": {"matchLabels": {A.VM_NAME_LABEL: "worker-01"}},
            "ingress": [{"fromEndpoints": [{}]}],
            "ingressDeny": [{"fromEndpoints": [{"matchLabels": {A.VM_NAME_LABEL: "worker-02"}}]}],
        },
    }
    ps = PolicySet([pol], endpoints())
    assert not ps.allowed("worker-02", "worker-01", 7000)
    assert ps.allowed("worker-01", "worker-02", 7000)
    assert NetworkModel(frozenset(VMS), ps).link("worker-01", "worker-02", 7000)


def test_entities_and_other_namespaces() -> None:
    pol = {
        "apiVersion": A.CILIUM_API,
        "kind": A.CNP,
        "metadata": {"name": "all", "namespace": NS},
        "spec": {"endpointSelector": {}, "ingressDeny": [{"fromEntities": ["all"]}]},
    }
    assert not PolicySet([pol], endpoints()).allowed("worker-01", "worker-02", 1)
    other_ns = {**pol, "metadata": {"name": "x", "namespace": "elsewhere"}}
    assert PolicySet([other_ns], endpoints()).allowed("worker-01", "worker-02", 1)
    pol["spec"]["ingressDeny"] = [{"fromEntities": ["host", "remote-node"]}]
    pol["spec"]["ingress"] = [{"fromEntities": ["cluster"]}]
    assert PolicySet([pol], endpoints()).allowed("worker-01", "worker-02", 1)


# ------------------------------------------------------------------------------ parsing (unit)


def test_parse_seed_loss_scripts() -> None:
    add = loss_job("worker-01-add-iptables", "worker-01", "10.211.1.47", 0.01)
    script = "\n".join(add["spec"]["template"]["spec"]["containers"][0]["args"])
    (op,) = parse_iptables(script)
    assert (op.action, op.chain, op.peer_ip, op.probability, op.comment, op.offset) == (
        "add",
        "INPUT",
        "10.211.1.47",
        0.01,
        "worker-01-add-iptables",
        0.0,
    )
    rm = unloss_job("worker-01-del-iptables", "worker-01", "worker-01-add-iptables", 30)
    ops = parse_iptables(rm["spec"]["template"]["spec"]["containers"][0]["args"][0])
    deletes = [o for o in ops if o.action == "delete"]
    assert deletes and all(o.comments == ("worker-01-add-iptables",) and o.offset == 30 for o in deletes)
    # the seed's plain examples
    (flat,) = parse_iptables("iptables -A INPUT -p tcp -m statistic --mode random --probability 0.05 -j DROP")
    assert (flat.peer_ip, flat.protocol, flat.probability) == (None, "tcp", 0.05)
    (out,) = parse_iptables("iptables -A OUTPUT -d 10.0.0.1 -j DROP")
    assert (out.chain, out.peer_ip, out.probability) == ("OUTPUT", "10.0.0.1", 1.0)
    (num,) = parse_iptables("iptables -D INPUT 1")
    assert num.action == "delete" and num.comments == () and num.probability == 1.0
    assert parse_iptables("iptables -L INPUT --line-numbers") == []
    (flush,) = parse_iptables("iptables -F")
    assert flush.action == "flush"


def test_parse_seed_latency_script() -> None:
    job = latency_job("lat", "worker-01", "10.211.1.47", 45)
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert parse_iperf(script) == [("10.211.1.47", 45.0)]
    assert parse_iptables(script) == []


def test_loss_threshold_and_slowdown() -> None:
    ps = PolicySet([], endpoints())
    rules = [
        LossRule("worker-01", "INPUT", "worker-02", 0.01),
        LossRule("worker-02", "INPUT", "worker-01", 0.01),
        LossRule("worker-03", "INPUT", "worker-10", 0.5),
    ]
    net = NetworkModel(frozenset(VMS), ps, rules, break_threshold=0.3, loss_slowdown=10)
    assert net.loss("worker-01", "worker-02") == pytest.approx(1 - 0.99 * 0.99)
    assert net.link("worker-01", "worker-02", 7000)
    assert net.slowdown("worker-01", "worker-02") == pytest.approx(1 + 10 * (1 - 0.99 * 0.99))
    assert not net.link("worker-03", "worker-10", 7000)
    assert not NetworkModel(frozenset(VMS) - {"worker-01"}, ps).link("worker-01", "worker-02", 7000)


# ------------------------------------------------------------------------------ integration


def shared_pair(env: Env, rv: str) -> tuple[str, str]:
    a, b = env.replica_nodes(rv)[:2]
    return a, b


def test_blocking_everything_between_two_vms() -> None:
    env = make_env(storage_classes=["c2:Consistency", "c3"])
    env.create_rv("v3", "c3")
    a, b = shared_pair(env, "v3")
    env.test.create(
        {
            "apiVersion": A.STORAGE_API,
            "kind": A.RV,
            "metadata": {"name": "v2"},
            "spec": {"size": "1Gi", "replicatedStorageClassName": "c2"},
        }
    )
    env.wait(lambda: env.healthy("v2"), timeout=60)
    v2_nodes = env.replica_nodes("v2")
    env.parent.create(block_policy("deny-all-tcp", [a, b]))
    env.advance(1)
    # 3 replicas: the third one bridges both: quorum held, degraded
    assert env.rv_state("v3") == ("True", "IOReady", "True", A.R_QUORUM_DEGRADED)
    env.parent.delete(A.CNP, "deny-all-tcp", NS)
    env.advance(1)
    assert env.healthy("v3")
    # now block the pair that holds both replicas of the 2-replica volume: quorum lost
    env.parent.create(block_policy("deny-v2", v2_nodes))
    env.advance(1)
    assert env.rv_state("v2") == ("False", A.R_NO_IO_READY, "False", A.R_QUORUM_LOST)
    for r in env.replicas("v2"):
        assert {c["state"] for c in r["status"]["drbd"]["connections"]} == {"Connecting"}
        assert env.cond(A.RVR, r["metadata"]["name"], A.COND_IN_QUORUM) == ("False", "QuorumLost")
    env.parent.delete(A.CNP, "deny-v2", NS)
    env.advance(1)
    assert env.healthy("v2")


def test_blocking_drbd_ports_of_one_volume_only(env: Env) -> None:
    env.create_rv("p1")
    env.create_rv("p2")
    # put p2's replicas on p1's nodes so that both volumes share the links
    nodes = env.replica_nodes("p1")
    for r in env.replicas("p2"):
        env.delete(A.RVR, r["metadata"]["name"])
    env.advance(1)
    for i, n in enumerate(nodes):
        env.create_rvr("p2", f"p2-{10 + i}", A.DISKFUL, node=n)
    env.wait(lambda: env.healthy("p2") and sorted(env.replica_nodes("p2")) == nodes, timeout=120)
    port1 = env.get(A.RV, "p1")["status"]["drbdPort"]  # type: ignore[index]
    # block p1's port between the first VM and everyone else: p1 on that VM is cut off
    env.parent.create(block_policy("deny-drbd", nodes, ports=[port1]))
    env.advance(1)
    assert env.rv_state("p1") == ("False", A.R_NO_IO_READY, "False", A.R_QUORUM_LOST)
    assert env.healthy("p2")
    env.parent.delete(A.CNP, "deny-drbd", NS)
    env.advance(1)
    assert env.healthy("p1")


@pytest.mark.parametrize("group_size", [0, 1, 2])
def test_split_brain_groups(group_size: int) -> None:
    env = make_env(storage_nodes=5, masters=0)
    for i in range(4):
        env.create_rv(f"s{i}", "sim-r3" if i % 2 else "sim-r2")
    vms = list(env.m.vm_names)
    n = len(vms)
    size = group_size or (n + 1) // 2
    group_a, group_b = vms[:size], vms[size:]
    for pol in split_policies("split", group_a, group_b):
        env.parent.create(pol)
    env.advance(2)
    for i in range(4):
        rv = f"s{i}"
        voters = env.replica_nodes(rv, None)  # no user replicas: every replica votes
        side_a = len([v for v in voters if v in group_a])
        side_b = len(voters) - side_a
        majority = len(voters) // 2 + 1
        expect_quorum = max(side_a, side_b) >= majority
        io, _, q, reason = env.rv_state(rv)
        assert q == ("True" if expect_quorum else "False"), (rv, voters, group_a)
        assert io == q  # every Diskful replica is UpToDate: IO follows quorum
        if expect_quorum:
            assert reason == (A.R_QUORUM_REACHED if min(side_a, side_b) == 0 else A.R_QUORUM_DEGRADED)
    for pol in split_policies("split", group_a, group_b):
        env.parent.delete(A.CNP, pol["metadata"]["name"], NS)
    env.advance(2)
    assert all(env.healthy(f"s{i}") for i in range(4))


def test_loss_jobs(env: Env) -> None:
    env.create_rv("l1")
    a, b = shared_pair(env, "l1")
    ip_a, ip_b = env.m.vm_ip(a), env.m.vm_ip(b)
    # heavy loss both ways breaks the link: degraded
    env.test.create(loss_job(f"{a}-add-iptables", a, ip_b, 0.5))
    env.test.create(loss_job(f"{b}-add-iptables", b, ip_a, 0.5))
    env.test.create(unloss_job(f"{a}-del-iptables", a, f"{a}-add-iptables", 20))
    env.test.create(unloss_job(f"{b}-del-iptables", b, f"{b}-add-iptables", 20))
    env.wait(lambda: env.rv_state("l1")[3] == A.R_QUORUM_DEGRADED, timeout=5)
    assert env.m.network().loss(a, b) == pytest.approx(0.75)
    # the delete Jobs remove the rules after their sleep
    env.wait(lambda: env.healthy("l1"), timeout=40)
    assert env.m.network().loss(a, b) == 0
    # rules are gone for good even when the delete jobs disappear first
    for job in (f"{a}-del-iptables", f"{b}-del-iptables"):
        env.test.delete("Job", job, "default", propagation="Background")
    env.advance(2)
    assert env.m.network().loss(a, b) == 0 and env.healthy("l1")


def test_small_loss_only_slows_and_job_deletion_removes_rule(env: Env) -> None:
    env.create_rv("l2")
    a, b = shared_pair(env, "l2")
    env.test.create(loss_job("small", a, env.m.vm_ip(b), 0.05))
    env.advance(3)
    net = env.m.network()
    assert 0 < net.loss(a, b) < env.m.spec.timing.loss_break_threshold
    assert net.slowdown(a, b) > 1.4
    assert env.healthy("l2")
    env.test.delete("Job", "small", "default")
    env.advance(1)
    assert env.m.network().loss(a, b) == 0


def test_latency_jobs_load_without_breaking_quorum(env: Env) -> None:
    env.create_rv("lat")
    a, b = shared_pair(env, "lat")
    env.test.create(latency_job(f"{a}-latency", a, env.m.vm_ip(b), 30))
    env.test.create(latency_job(f"{b}-latency", b, env.m.vm_ip(a), 30))
    env.advance(3)
    assert env.m.network().loaded(a, b)
    assert env.m.network().slowdown(a, b) == pytest.approx(env.m.spec.timing.load_slowdown)
    assert env.healthy("lat")
    env.advance(35)
    assert not env.m.network().loaded(a, b)


def test_a_reboot_flushes_the_nodes_iptables_rules(env: Env) -> None:
    env.create_rv("l3")
    a, b = shared_pair(env, "l3")
    env.test.create(loss_job("lossy", a, env.m.vm_ip(b), 0.9))
    env.wait(lambda: env.rv_state("l3")[3] == A.R_QUORUM_DEGRADED, timeout=5)
    env.restart_vm(a)
    env.wait(lambda: env.vm_phase(a) == "Stopping", timeout=5)
    env.wait(lambda: env.vm_phase(a) == "Running", timeout=120)
    env.wait(lambda: env.healthy("l3"), timeout=60)
    assert env.m.network().loss(a, b) == 0
    assert env.get("Job", "lossy", "default") is not None  # the Job is still there, its rule is not
