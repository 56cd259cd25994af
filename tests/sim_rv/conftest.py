"""Harness for the replicated-volume world tests: a SimWorld on a virtual clock driven by a timer
heap, the megatest world built in it, and helpers that create the objects megatest creates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from actors.sim.playground import SimWorld
from actors.sim.rv import MegatestSim, build_megatest_world
from actors.sim.rv import api as A
from engine.clock import VirtualClock
from tests.sim_api.timers import FakeTimers

NS = "e2e-sds-test-cluster"


@dataclass
class Env:
    clock: VirtualClock
    timers: FakeTimers
    world: SimWorld
    m: MegatestSim

    # ------------------------------------------------------------------ time

    @property
    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.timers.advance(seconds)

    def wait(self, pred: Callable[[], bool], timeout: float = 600.0, step: float = 0.25) -> float:
        """Advance until ``pred()`` holds; return the virtual seconds it took."""
        start = self.now
        while not pred():
            if self.now - start > timeout:
                raise AssertionError(f"condition not reached within {timeout}s of virtual time")
            self.timers.advance(step)
        return self.now - start

    # ------------------------------------------------------------------ objects

    @property
    def test(self) -> Any:
        return self.m.test.api

    @property
    def parent(self) -> Any:
        return self.m.parent.api

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.m.get(kind, name, namespace)

    def cond(self, kind: str, name: str, ctype: str) -> tuple[str, str] | None:
        c = self.m.condition(kind, name, ctype)
        return None if c is None else (c["status"], c["reason"])

    def rv_state(self, name: str) -> tuple[str | None, str | None, str | None, str | None]:
        """(IOReady status, reason, Quorum status, reason)."""
        io = self.m.condition(A.RV, name, A.COND_IO_READY) or {}
        q = self.m.condition(A.RV, name, A.COND_QUORUM) or {}
        return io.get("status"), io.get("reason"), q.get("status"), q.get("reason")

    def healthy(self, name: str) -> bool:
        s = self.rv_state(name)
        return s[0] == "True" and s[2] == "True" and s[3] == A.R_QUORUM_REACHED

    def ready(self, name: str) -> bool:
        s = self.rv_state(name)
        return s[0] == "True" and s[2] == "True"

    def create_rv(self, name: str, sc: str = "sim-r3", size: str = "1Gi", wait: bool = True) -> None:
        self.test.create(
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RV,
                "metadata": {"name": name},
                "spec": {"size": size, "replicatedStorageClassName": sc},
            }
        )
        if wait:
            self.wait(lambda: self.healthy(name), timeout=120)

    def replicas(self, rv: str) -> list[dict[str, Any]]:
        items = self.test.list(A.RVR, api_version=A.STORAGE_API)["items"]
        return [r for r in items if r["spec"]["replicatedVolumeName"] == rv]

    def replica_nodes(self, rv: str, rtype: str | None = A.DISKFUL) -> list[str]:
        return sorted(
            r["spec"]["nodeName"]
            for r in self.replicas(rv)
            if (rtype is None or r["spec"]["type"] == rtype) and r["spec"].get("nodeName")
        )

    def create_rvr(self, rv: str, name: str, rtype: str, node: str | None = None) -> None:
        spec: dict[str, Any] = {"replicatedVolumeName": rv, "type": rtype}
        if node:
            spec["nodeName"] = node
        self.test.create(
            {"apiVersion": A.STORAGE_API, "kind": A.RVR, "metadata": {"name": name}, "spec": spec}
        )

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        api = self.parent if kind in (A.VM, A.VMOP, A.CNP) or namespace == NS else self.test
        api.delete(kind, name, namespace)

    def attach(self, rv: str, node: str) -> str:
        name = f"rva-{rv}-{node}"
        self.test.create(
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RVA,
                "metadata": {"name": name},
                "spec": {"replicatedVolumeName": rv, "nodeName": node},
            }
        )
        return name

    def attached(self, rv: str) -> list[str]:
        obj = self.get(A.RV, rv) or {}
        return list((obj.get("status") or {}).get("actuallyAttachedTo") or ())

    def restart_vm(self, vm: str, name: str | None = None, force: bool = True) -> str:
        name = name or f"megatest-chaos-restart-{vm}"
        self.parent.create(
            {
                "apiVersion": A.VIRT_API,
                "kind": A.VMOP,
                "metadata": {"name": name, "namespace": NS},
                "spec": {"type": "Restart", "force": force, "virtualMachineName": vm},
            }
        )
        return name

    def vm_phase(self, vm: str) -> str:
        return str(((self.get(A.VM, vm, NS) or {}).get("status") or {}).get("phase"))

    def callback_errors(self) -> int:
        return sum(int(c.api.metrics()["callbackErrors"]) for c in self.world.clusters.values())


def make_env(settle: bool = True, seed: int = 0, **fields: Any) -> Env:
    clock = VirtualClock()
    timers = FakeTimers(clock)
    world = SimWorld(clock, timers, seed=seed)
    m = build_megatest_world(world, strict=True, **fields)
    env = Env(clock, timers, world, m)
    if settle:
        env.advance(10)  # control-plane pods running, leader elected, agents started
    return env


@pytest.fixture
def env() -> Env:
    return make_env()


# ------------------------------------------------------------------------------ chaos objects


def _vm_selector(vms: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": A.VM_NAME_LABEL, "operator": "In", "values": list(vms)}]}


def _ports(ports: list[int] | None) -> list[dict[str, Any]]:
    if ports is None:
        return [{"ports": [{"port": "1", "endPort": 65535, "protocol": "TCP"}]}]
    return [{"ports": [{"port": str(p), "protocol": "TCP"} for p in ports]}]


def block_policy(name: str, vms: list[str], ports: list[int] | None = None) -> dict[str, Any]:
    """The seed's CiliumNetworkPolicy: deny TCP (all, or ``ports``) between the selected VMs."""
    return {
        "apiVersion": A.CILIUM_API,
        "kind": A.CNP,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "endpointSelector": _vm_selector(vms),
            "ingress": [
                {"fromEntities": ["host", "remote-node"]},
                {"fromEndpoints": [{"matchLabels": {"io.kubernetes.pod.namespace": NS}}]},
            ],
            "egress": [
                {"toEntities": ["host", "remote-node"]},
                {"toEndpoints": [{"matchLabels": {"io.kubernetes.pod.namespace": NS}}]},
            ],
            "ingressDeny": [{"fromEndpoints": [_vm_selector(vms)], "toPorts": _ports(ports)}],
            "egressDeny": [{"toEndpoints": [_vm_selector(vms)], "toPorts": _ports(ports)}],
        },
    }


def split_policies(name: str, group_a: list[str], group_b: list[str]) -> list[dict[str, Any]]:
    """split-brain: deny all TCP between the two groups (one policy per side)."""
    out = []
    for suffix, mine, other in (("a", group_a, group_b), ("b", group_b, group_a)):
        pol = block_policy(f"{name}-{suffix}", mine)
        pol["spec"]["ingressDeny"] = [{"fromEndpoints": [_vm_selector(other)], "toPorts": _ports(None)}]
        pol["spec"]["egressDeny"] = [{"toEndpoints": [_vm_selector(other)], "toPorts": _ports(None)}]
        out.append(pol)
    return out


def loss_job(name: str, node: str, peer_ip: str, probability: float) -> dict[str, Any]:
    """The seed's first loss Job: add an iptables DROP rule with a comment = the Job's name."""
    script = (
        "set -e\n"
        f"iptables -A INPUT -s {peer_ip} -m statistic --mode random --probability {probability} -j DROP "
        f'-m comment --comment "{name}"\n'
        'echo "iptables rule added"\n'
    )
    return _net_job(name, node, script)


def unloss_job(name: str, node: str, comment: str, sleep: int) -> dict[str, Any]:
    """The seed's second loss Job: sleep, then delete every rule with the comment."""
    script = (
        "set -e\n"
        f"sleep {sleep}\n"
        f'COMMENT="{comment}"\n'
        'while iptables -L INPUT --line-numbers | grep -q "$COMMENT"; do\n'
        "  NUMBER=$(iptables -L INPUT --line-numbers | grep -F \"$COMMENT\" | head -n1 | awk '{print $1}')\n"
        '  echo "delete rule number $NUMBER"\n'
        "  iptables -D INPUT $NUMBER\n"
        "done\n"
    )
    job = _net_job(name, node, script)
    job["spec"]["activeDeadlineSeconds"] = sleep + 2
    return job


def latency_job(name: str, node: str, peer_ip: str, seconds: int) -> dict[str, Any]:
    script = (
        "set -e\n"
        f"timeout {seconds} sh -c '\n"
        "  iperf3 -s -D || true\n"
        "  while true;do\n"
        f"    iperf3 -c {peer_ip} -t 60 -i 30 || true\n"
        "    sleep 0.5\n"
        " done\n"
        "' || true\n"
    )
    return _net_job(name, node, script)


def _net_job(name: str, node: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "hostNetwork": True,
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "net-tools",
                            "image": "krpsh/iperf3:0.1.0",
                            "securityContext": {"privileged": True},
                            "command": ["/bin/sh", "-c"],
                            "args": [script],
                        }
                    ],
                }
            },
        },
    }
