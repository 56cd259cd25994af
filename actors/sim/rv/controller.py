"""The replicated-volume world of the nested ("test") cluster.

:class:`ReplicatedVolumeController` simulates four layers, each reconciled level-based from the
objects of both clusters (test + parent) and the saved DRBD state:

1. **Nodes and network** — a nested Node is online while its VirtualMachine (parent cluster) is
   Running; its ``Ready`` condition follows with the kubelet's lag (``node_not_ready_after``,
   ``node_ready_after_boot``). Connectivity between VMs comes from the parent's
   CiliumNetworkPolicies, and from iptables-loss and iperf3 Jobs in the nested cluster (see
   :mod:`actors.sim.rv.network`). A rule of a Job lives from the moment its container ran the
   ``iptables -A`` until a delete Job ran its ``iptables -D``, the Job is deleted, or the node
   reboots (the kernel's tables are flushed).
2. **DRBD** (:mod:`actors.sim.rv.drbd`) — replica connections, quorum, disk states, resync,
   Primary roles. It runs whatever the pods do (it is the kernel).
3. **Agents** — one per storage node, effective ``agent_startup`` after its pod is Ready and the
   node booted. They bring DRBD resources up and down, promote/demote for attachments and report
   ``rvr.status`` (``drbd`` and conditions). A replica whose agent is away keeps its last status.
   The agent puts its finalizer and the controller's on a replica it configures, and tears a deleted
   replica down only once its own finalizer is the last one (the replica runs and votes until then).
4. **The sds controller** — active while a controller pod holds the Lease (from ``acquireTime +
   controller_startup``). It places replicas on storage nodes (one per node, deleted ones still
   running included; least loaded, zones by topology), recreates missing Diskful/TieBreaker
   replicas ``recreate_delay`` after it noticed them missing, deletes TieBreakers beyond the
   layout, releases a deleted replica's finalizer only when that is safe (not attached; quorum and
   the layout's UpToDate Diskful replicas kept without it: rvr-finalizer-release; bug knob
   ``unsafe_replica_deletion``), drives attachments (``desiredAttachTo``, at most 2; Access
   replicas created or TieBreakers converted on demand), aggregates ``rv.status``
   (``Quorum``/``IOReady`` from what the agents reported, ``actuallyAttachedTo``) and RVA status,
   and handles finalizers: an RVA detaches before it goes; an RV waits for its RVAs, deletes its
   replicas, then goes.

The volume-level conditions use only *reported* replica status (as the real controller does): two
replicas count as connected when both report the connection, replicas on NotReady nodes are
marked offline by the controller; Quorum = a majority of the voting replicas pairwise connected
(QuorumReached when all voters are and none is missing, else QuorumDegraded), IOReady = quorum
with an UpToDate Diskful replica among them.

Cost: reconciles are per volume; a pass whose inputs (the volume's objects and a version of the
world outside them) did not change and that has nothing falling due is skipped; writes go through
to the caches at once (no 409s on nested watch dispatch); a replica's report is rewritten only
when what it reports changed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from actors.sim.apiserver import DELETED, SimAPIServer
from actors.sim.rv import api as A
from actors.sim.rv.api import (
    Conditions,
    Obj,
    condition,
    condition_since,
    condition_true,
    parse_ts,
    set_condition,
)
from actors.sim.rv.base import (
    EPS,
    INF,
    WorldController,
    created_at,
    creation_key,
    deleting,
    finite,
    pod_ready_since,
)
from actors.sim.rv.config import MegatestWorldSpec, RVBugs
from actors.sim.rv.controlplane import lease_holder
from actors.sim.rv.drbd import ReplicaKernel, VolumeKernel, has_quorum, majority, max_clique
from actors.sim.rv.network import (
    Endpoint,
    LoadSpec,
    LossRule,
    NetworkModel,
    PolicySet,
    expand_rules,
    parse_iperf,
    parse_iptables,
)
from actors.sim.rv.virtualization import ONLINE_PHASES, vm_phase_since
from actors.sim.util import copy_json
from engine.clock import TimerService

__all__ = ["ReplicatedVolumeController"]

log = logging.getLogger(__name__)

_ALL = ("all",)
_NET = ("net",)
_PORT_RANGE = 1000


@dataclass(slots=True)
class _View:
    """DRBD connectivity of one volume at one moment (uids of the RVRs)."""

    members: dict[str, ReplicaKernel] = field(default_factory=dict)  # configured and online
    links: dict[str, set[str]] = field(default_factory=dict)
    voters: list[str] = field(default_factory=list)
    in_quorum: dict[str, bool] = field(default_factory=dict)
    data_access: dict[str, bool] = field(default_factory=dict)


#: bound on the passes of :meth:`ReplicatedVolumeController._kernel_step` at one instant
_MAX_PASSES = 8


def _kernel_fingerprint(kern: VolumeKernel) -> tuple[Any, ...]:
    """What steps 2.-5. of a kernel step may change."""
    return (
        kern.ever_primary,
        tuple(
            (
                uid,
                k.disk,
                k.primary,
                k.standalone,
                k.attach_pending_since,
                k.detach_pending_since,
                k.sync_since,
                k.sync_total,
            )
            for uid, k in kern.replicas.items()
        ),
    )


@dataclass(slots=True)
class _Reported:
    """What the agents reported about one replica (from ``rvr.status``)."""

    name: str
    type: str
    node: str
    disk: str
    primary: bool
    connected: frozenset[str]
    offline: bool
    online: bool
    io_ready: bool
    ready: bool
    #: the RVR is being deleted (it runs, and votes, until it is torn down)
    leaving: bool


class ReplicatedVolumeController(WorldController):
    name = "sim-sds-replicated-volume"

    def __init__(
        self,
        api: SimAPIServer,
        timers: TimerService,
        *,
        spec: MegatestWorldSpec,
        parent_api: SimAPIServer | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(api, timers, strict=strict)
        self.spec = spec
        self.timing = spec.timing
        self.bugs: RVBugs = spec.bugs
        self.parent_api = parent_api
        # test cluster caches
        self._nodes: dict[str, Obj] = {}
        self._cp_pods: dict[str, Obj] = {}
        self._agents_by_node: dict[str, set[str]] = {}
        self._lease: Obj | None = None
        self._jobs: dict[str, Obj] = {}  # uid -> Job
        self._net_pods: dict[tuple[str, str], Obj] = {}
        self._pod_ops: dict[str, tuple[list[Any], list[tuple[str, float]]]] = {}
        self._rscs: dict[str, Obj] = {}
        self._rvs: dict[str, Obj] = {}
        self._rvrs: dict[str, Obj] = {}
        self._rvr_by_rv: dict[str, set[str]] = {}
        self._rvas: dict[str, Obj] = {}
        self._rva_by_rv: dict[str, set[str]] = {}
        # parent cluster caches
        self._vms: dict[str, Obj] = {}
        self._vm_pods: dict[tuple[str, str], Obj] = {}
        self._cnps: dict[tuple[str, str], Obj] = {}
        # derived
        self._net: NetworkModel | None = None
        self._vm_memo: dict[str, tuple[str, bool, float]] = {}
        self._agent_cache: dict[str, float] = {}
        self._net_signature: Any = None
        self._quiet: str | None = None
        self._current: str | None = None
        self._structural = False
        self._env_version = 0
        #: volume -> (inputs fingerprint, next due) of its last reconcile
        self._sync_memo: dict[str, tuple[tuple[Any, ...], float]] = {}
        #: rvr uid -> (what the agent reported, resourceVersion after the report)
        self._report_memo: dict[str, tuple[Any, str]] = {}
        self._reported_memo: dict[str, tuple[str, _Reported | None]] = {}
        # saved in snapshots: what lives on the nodes, not in the API
        self._kernels: dict[str, VolumeKernel] = {}
        self._ipt_removed: dict[str, float] = {}

    # ------------------------------------------------------------------ lifecycle and state

    def set_bugs(self, bugs: RVBugs) -> None:
        self.bugs = bugs
        self._bump()
        if self.running:
            self._enqueue(_ALL)

    def state(self) -> dict[str, Any]:
        return {
            "kernels": {uid: k.to_dict() for uid, k in sorted(self._kernels.items())},
            "iptablesRemoved": dict(sorted(self._ipt_removed.items())),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._kernels = {uid: VolumeKernel.from_dict(k) for uid, k in (state.get("kernels") or {}).items()}
        self._ipt_removed = {str(k): float(v) for k, v in (state.get("iptablesRemoved") or {}).items()}

    def kernel(self, rv_name: str) -> VolumeKernel | None:
        """The DRBD state of a volume (for tests and debugging)."""
        rv = self._rvs.get(rv_name)
        return None if rv is None else self._kernels.get(rv["metadata"]["uid"])

    def network(self) -> NetworkModel:
        """The current connectivity model (for tests and debugging)."""
        return self._network()

    def _clear_caches(self) -> None:
        for d in (
            self._nodes,
            self._cp_pods,
            self._agents_by_node,
            self._jobs,
            self._net_pods,
            self._rscs,
            self._rvs,
            self._rvrs,
            self._rvr_by_rv,
            self._rvas,
            self._rva_by_rv,
            self._vms,
            self._vm_pods,
            self._cnps,
            self._vm_memo,
            self._agent_cache,
        ):
            d.clear()
        self._lease = None
        self._net = None
        self._net_signature = None
        self._report_memo.clear()
        self._reported_memo.clear()
        self._sync_memo.clear()

    def _open_watches(self) -> None:
        api = self.api
        self._watch_on(api, "Node", self._on_node, "v1")
        self._watch_on(api, "Pod", self._on_pod, "v1")
        self._watch_on(api, "Job", self._on_job, "batch/v1")
        self._watch_on(api, "Lease", self._on_lease, "coordination.k8s.io/v1", A.CONTROL_PLANE_NAMESPACE)
        self._watch_on(api, A.RSC, self._on_rsc, A.STORAGE_API)
        self._watch_on(api, A.RV, self._on_rv, A.STORAGE_API)
        self._watch_on(api, A.RVR, self._on_rvr, A.STORAGE_API)
        self._watch_on(api, A.RVA, self._on_rva, A.STORAGE_API)
        if self.parent_api is not None:
            ns = self.spec.vm_namespace
            self._watch_on(self.parent_api, A.VM, self._on_vm, A.VIRT_API, ns)
            self._watch_on(self.parent_api, "Pod", self._on_vm_pod, "v1", ns)
            self._watch_on(self.parent_api, A.CNP, self._on_cnp, A.CILIUM_API)
        self._enqueue(_ALL)

    # ------------------------------------------------------------------ watch handlers

    def _invalidate_network(self) -> None:
        """Inputs of the network changed: rebuild it, and reconcile the volumes when it differs."""
        before = self._net_signature
        self._net = None
        if not self.running or self._starting:
            self._bump()
            self._enqueue(_ALL)
            return
        self._network()
        if self._net_signature != before:
            self._bump()
            self._enqueue(_ALL)

    def _volumes_on(self, node: str) -> list[str]:
        return sorted(
            {_rv_of(r) for r in self._rvrs.values() if (r.get("spec") or {}).get("nodeName") == node}
            & set(self._rvs)
        )

    def _on_node(self, etype: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        old = self._nodes.get(name)
        self._agent_cache.pop(name, None)
        if etype == DELETED:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node
        self._enqueue(("node", name))
        if (
            old is None
            or etype == DELETED
            or old["metadata"].get("labels") != node["metadata"].get("labels")
            or condition_true(old, "Ready") != condition_true(node, "Ready")
            or (old.get("status") or {}).get("addresses") != (node.get("status") or {}).get("addresses")
        ):
            if self.parent_api is None:
                self._net = None
            self._bump()
            self._enqueue(_ALL)

    def _on_pod(self, etype: str, pod: Obj) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if ns == A.CONTROL_PLANE_NAMESPACE:
            old = self._cp_pods.get(name)
            app = (meta.get("labels") or {}).get(A.APP_LABEL)
            if etype == DELETED:
                self._cp_pods.pop(name, None)
            else:
                self._cp_pods[name] = pod
            if app == A.AGENT_APP:
                node = str((pod.get("spec") or {}).get("nodeName") or "")
                if etype == DELETED:
                    self._agents_by_node.get(node, set()).discard(name)
                else:
                    self._agents_by_node.setdefault(node, set()).add(name)
                if old is None or etype == DELETED or pod_ready_since(old) != pod_ready_since(pod):
                    # The agent came or went. Gone: its replicas just stop changing (nothing to
                    # do now). Back: its volumes need it once it acts, agent_startup later.
                    self._agent_cache.pop(node, None)
                    self._bump()
                    at = self._agent_at(node)
                    if finite(at):
                        self._at(at, ("agent", node))
            # controller pods matter through the Lease only (its changes reconcile everything)
            return
        uid = meta["uid"]
        if etype == DELETED:
            self._pod_ops.pop(uid, None)
            if self._net_pods.pop((ns, name), None) is not None:
                self._invalidate_network()
            return
        ops = self._pod_ops.get(uid)
        if ops is None:
            ops = self._parse_pod(pod)
            self._pod_ops[uid] = ops
        if ops[0] or ops[1]:
            self._net_pods[(ns, name)] = pod
            self._invalidate_network()

    @staticmethod
    def _parse_pod(pod: Obj) -> tuple[list[Any], list[tuple[str, float]]]:
        spec = pod.get("spec") or {}
        ipt: list[Any] = []
        iperf: list[tuple[str, float]] = []
        for c in spec.get("containers") or ():
            argv = [str(a) for a in (c.get("command") or ())] + [str(a) for a in (c.get("args") or ())]
            script = "\n".join(argv)
            if "iptables" not in script and "iperf3" not in script:
                continue
            env = {str(e.get("name")): str(e.get("value") or "") for e in c.get("env") or () if e.get("name")}
            ipt.extend(parse_iptables(script, env))
            iperf.extend(parse_iperf(script, env))
        return ipt, iperf

    def _on_job(self, etype: str, job: Obj) -> None:
        uid = job["metadata"]["uid"]
        old = self._jobs.get(uid)
        if etype == DELETED:
            self._jobs.pop(uid, None)
        else:
            self._jobs[uid] = job
        changed = old is None or etype == DELETED or deleting(old) != deleting(job)
        if changed and any(self._owner_job(p) == uid for p in self._net_pods.values()):
            self._invalidate_network()

    def _on_lease(self, etype: str, lease: Obj) -> None:
        if lease["metadata"]["name"] != A.LEASE_NAME:
            return
        self._lease = None if etype == DELETED else lease
        self._bump()
        # a new leader catches up once it runs; a lost one just stops
        at = self._controller_at()
        if finite(at):
            self._at(at, _ALL)

    def _on_rsc(self, etype: str, rsc: Obj) -> None:
        name = rsc["metadata"]["name"]
        if etype == DELETED:
            self._rscs.pop(name, None)
        else:
            self._rscs[name] = rsc
        self._bump()
        self._enqueue(("rsc", name))
        for rv_name, rv in sorted(self._rvs.items()):
            if (rv.get("spec") or {}).get("replicatedStorageClassName") == name:
                self._enqueue(("rv", rv_name))

    def _on_rv(self, etype: str, rv: Obj) -> None:
        name = rv["metadata"]["name"]
        if not _applies(etype, self._rvs.get(name), rv):
            return
        if etype == DELETED:
            self._rvs.pop(name, None)
            self._sync_memo.pop(name, None)
            self._kernels.pop(rv["metadata"]["uid"], None)
            for rva in sorted(self._rva_by_rv.get(name, ())):
                self._enqueue(("rva", rva))
            for rvr in sorted(self._rvr_by_rv.get(name, ())):
                self._enqueue(("rvr", rvr))
            return
        self._rvs[name] = rv
        self._touch(name)

    def _on_rvr(self, etype: str, rvr: Obj) -> None:
        name = rvr["metadata"]["name"]
        old = self._rvrs.get(name)
        if not _applies(etype, old, rvr):
            return
        if old is not None:
            self._rvr_by_rv.get(_rv_of(old), set()).discard(name)
        rv = _rv_of(rvr)
        if etype == DELETED:
            self._rvrs.pop(name, None)
            self._report_memo.pop(rvr["metadata"]["uid"], None)
            self._reported_memo.pop(rvr["metadata"]["uid"], None)
            owner = self._rvs.get(rv)
            if owner is not None:
                k = self._kernels.get(owner["metadata"]["uid"])
                if k is not None:
                    k.replicas.pop(rvr["metadata"]["uid"], None)
        else:
            self._rvrs[name] = rvr
            self._rvr_by_rv.setdefault(rv, set()).add(name)
        if rv in self._rvs:
            self._touch(rv)
        else:
            self._enqueue(("rvr", name))

    def _on_rva(self, etype: str, rva: Obj) -> None:
        name = rva["metadata"]["name"]
        old = self._rvas.get(name)
        if not _applies(etype, old, rva):
            return
        if old is not None:
            self._rva_by_rv.get(_rv_of(old), set()).discard(name)
        rv = _rv_of(rva)
        if etype == DELETED:
            self._rvas.pop(name, None)
        else:
            self._rvas[name] = rva
            self._rva_by_rv.setdefault(rv, set()).add(name)
        if rv in self._rvs:
            self._touch(rv)
        else:
            self._enqueue(("rva", name))

    def _on_vm(self, etype: str, vm: Obj) -> None:
        name = vm["metadata"]["name"]
        old = self._vms.get(name)
        if etype == DELETED:
            self._vms.pop(name, None)
        else:
            self._vms[name] = vm
        self._vm_memo.pop(name, None)
        self._agent_cache.pop(name, None)
        self._bump()
        self._enqueue(("node", name))
        if old is None or etype == DELETED or old.get("status") != vm.get("status"):
            self._invalidate_network()

    def _on_vm_pod(self, etype: str, pod: Obj) -> None:
        meta = pod["metadata"]
        if A.VM_NAME_LABEL not in (meta.get("labels") or {}):
            return
        key = (meta["namespace"], meta["name"])
        old = self._vm_pods.get(key)
        if etype == DELETED:
            self._vm_pods.pop(key, None)
        else:
            self._vm_pods[key] = pod
        if (
            old is None
            or etype == DELETED
            or old["metadata"].get("labels") != meta.get("labels")
            or deleting(old) != deleting(pod)
        ):
            self._invalidate_network()

    def _on_cnp(self, etype: str, cnp: Obj) -> None:
        key = (cnp["metadata"]["namespace"], cnp["metadata"]["name"])
        if etype == DELETED:
            self._cnps.pop(key, None)
        else:
            self._cnps[key] = cnp
        self._invalidate_network()

    # ------------------------------------------------------------------ reconcile dispatch

    def _reconcile_key(self, key: Hashable) -> None:
        kind = cast(tuple[str, ...], key)[0]
        if kind == "all":
            for name in sorted(self._rvs):
                self._enqueue(("rv", name))
            for name in sorted(self._rvas):
                if _rv_of(self._rvas[name]) not in self._rvs:
                    self._enqueue(("rva", name))
            return
        if kind == "net":
            self._invalidate_network()
            return
        name = cast(tuple[str, str], key)[1]
        if kind == "agent":
            for rv_name in self._volumes_on(name):
                self._enqueue(("rv", rv_name))
            return
        if kind == "rv":
            self._sync_rv(name)
        elif kind == "node":
            self._sync_node(name)
        elif kind == "rsc":
            self._sync_rsc(name)
        elif kind == "rva":
            self._sync_orphan_rva(name)
        elif kind == "rvr":
            self._sync_orphan_rvr(name)

    # ------------------------------------------------------------------ nodes, agents, leader

    def _vm_state(self, node: str) -> tuple[bool, float]:
        """(online, since) of a nested node: its VM is Running (or migrating)."""
        if self.parent_api is None:
            return node in self._nodes, -INF
        vm = self._vms.get(node)
        if vm is None:
            return node in self._nodes, -INF  # a node without a VM (not simulated): always up
        rv = vm["metadata"]["resourceVersion"]
        memo = self._vm_memo.get(node)
        if memo is not None and memo[0] == rv:
            return memo[1], memo[2]
        online = (vm.get("status") or {}).get("phase") in ONLINE_PHASES
        since = vm_phase_since(vm)
        if online:
            # Migrating -> Running keeps the guest up: online since the last non-online phase
            for tr in reversed(((vm.get("status") or {}).get("stats") or {}).get("phasesTransitions") or ()):
                if tr.get("phase") not in ONLINE_PHASES:
                    break
                since = parse_ts(tr.get("timestamp")) or since
        self._vm_memo[node] = (rv, online, since)
        return online, since

    def _agent_at(self, node: str) -> float:
        """When the agent of ``node`` acts (INF: no agent or the node is down)."""
        hit = self._agent_cache.get(node)
        if hit is None:
            hit = self._agent_cache[node] = self._compute_agent_at(node)
        return hit

    def _compute_agent_at(self, node: str) -> float:
        online, since = self._vm_state(node)
        if not online:
            return INF
        best = INF
        for pname in self._agents_by_node.get(node, ()):
            pod = self._cp_pods.get(pname)
            ready = pod_ready_since(pod) if pod is not None else None
            if ready is not None:
                best = min(best, ready)
        if best == INF:
            return INF
        return max(best, since) + self.timing.agent_startup

    def _controller_at(self) -> float:
        """When the sds controller reconciles (INF: no leader)."""
        holder, acquired = lease_holder(self._lease, self._cp_pods)
        if holder is None:
            return INF
        return (acquired or 0.0) + self.timing.controller_startup

    def _node_ready(self, node: str) -> bool:
        n = self._nodes.get(node)
        return n is not None and condition_true(n, "Ready") and not deleting(n)

    def _storage_nodes(self) -> list[str]:
        return sorted(
            n
            for n, o in self._nodes.items()
            if A.STORAGE_NODE_LABEL in (o["metadata"].get("labels") or {}) and not deleting(o)
        )

    def _sync_node(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None or self.parent_api is None or name not in self._vms:
            return
        now = self.timers.now()
        online, since = self._vm_state(name)
        ready = condition_true(node, "Ready")
        if online:
            due = since + self.timing.node_ready_after_boot
            if ready or now + EPS < due:
                if not ready:
                    self._at(due, ("node", name))
                return
            status, message, reason = "True", "kubelet is posting ready status", "KubeletReady"
        else:
            due = since + self.timing.node_not_ready_after
            if not ready:
                return
            if now + EPS < due:
                self._at(due, ("node", name))
                return
            status, message, reason = "Unknown", "Kubelet stopped posting node status.", "NodeStatusUnknown"
        new_status = copy_json(node.get("status") or {})
        conds = list(new_status.get("conditions") or ())
        set_condition(conds, "Ready", status, reason, message, now)
        for c in conds:
            if c.get("type") == "Ready":
                c["lastHeartbeatTime"] = A.ts(now)
        new_status["conditions"] = conds
        self.api.update_status({**node, "status": new_status})

    # ------------------------------------------------------------------ network

    def _ip_map(self) -> dict[str, str]:
        ips: dict[str, str] = {}
        for name, node in sorted(self._nodes.items()):
            for a in (node.get("status") or {}).get("addresses") or ():
                if a.get("type") == "InternalIP" and a.get("address"):
                    ips[str(a["address"])] = name
        for name, vm in sorted(self._vms.items()):
            ip = (vm.get("status") or {}).get("ipAddress")
            if ip:
                ips[str(ip)] = name
        return ips

    @staticmethod
    def _owner_job(pod: Obj) -> str | None:
        """The uid of the Job that made ``pod`` (also once the Job is gone: orphaned pods keep the
        ``controller-uid`` label)."""
        for ref in pod["metadata"].get("ownerReferences") or ():
            if ref.get("kind") == "Job":
                return str(ref.get("uid"))
        labels = pod["metadata"].get("labels") or {}
        uid = labels.get("batch.kubernetes.io/controller-uid") or labels.get("controller-uid")
        return str(uid) if uid else None

    def _network(self) -> NetworkModel:
        if self._net is not None:
            return self._net
        now = self.timers.now()
        names = set(self._nodes) | set(self._vms)
        online = frozenset(n for n in names if self._vm_state(n)[0])
        endpoints: dict[str, Endpoint] = {}
        for (ns, _), pod in sorted(self._vm_pods.items()):
            if deleting(pod):
                continue
            labels = dict(pod["metadata"].get("labels") or {})
            vm = labels.get(A.VM_NAME_LABEL)
            if vm and vm not in endpoints:
                labels["io.kubernetes.pod.namespace"] = ns
                endpoints[vm] = Endpoint(vm, ns, labels)
        policies = PolicySet([self._cnps[k] for k in sorted(self._cnps)], endpoints)
        rules, loads, next_change = self._job_effects(now)
        t = self.timing
        expanded = expand_rules(rules, names)
        self._net_signature = (
            online,
            tuple((k, self._cnps[k]["metadata"]["resourceVersion"]) for k in sorted(self._cnps)),
            tuple((vm, tuple(sorted(ep.labels.items()))) for vm, ep in sorted(endpoints.items())),
            tuple(expanded),
            tuple(loads),
        )
        self._net = NetworkModel(
            online,
            policies,
            expanded,
            loads,
            break_threshold=t.loss_break_threshold,
            loss_slowdown=t.loss_slowdown,
            load_slowdown=t.load_slowdown,
        )
        if finite(next_change):
            self._at(next_change, _NET)
        return self._net

    def _job_effects(self, now: float) -> tuple[list[LossRule], list[LoadSpec], float]:
        """Active iptables rules and iperf3 loads from Job pods; and when that changes next."""
        ips = self._ip_map()
        next_change = INF
        adds: list[tuple[float, str, str, Any]] = []
        dels: list[tuple[float, str, Any]] = []
        loads: list[LoadSpec] = []
        alive_pods: set[str] = set()
        for (_ns, _name), pod in sorted(self._net_pods.items()):
            meta = pod["metadata"]
            uid = meta["uid"]
            alive_pods.add(uid)
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            ipt, iperf = self._pod_ops.get(uid) or ([], [])
            started, finished = _container_times(pod)
            if not node or started is None:
                continue
            job_uid = self._owner_job(pod)
            if job_uid is not None:
                job = self._jobs.get(job_uid)
                owner_alive = job is not None and not deleting(job)
            else:
                owner_alive = not deleting(pod)
            for idx, op in enumerate(ipt):
                t = started + op.offset
                if finished is not None and t > finished + EPS:
                    continue  # the container ended before it got there
                if t > now + EPS:
                    next_change = min(next_change, t)
                    continue
                if op.action == "add":
                    if owner_alive:
                        adds.append((t, f"{uid}/{idx}", node, op))
                else:
                    dels.append((t, node, op))
            for ip, duration in iperf:
                target = ips.get(ip)
                end = started + duration
                if target is None or not owner_alive:
                    continue
                if started <= now + EPS < end:
                    loads.append(LoadSpec(node, target))
                    next_change = min(next_change, end)
        # replay the rule changes of every node in time order (adds before deletes at one instant)
        events = sorted(
            [(t_add, 0, key, node, op) for t_add, key, node, op in adds]
            + [(t_del, 1, "", node, op) for t_del, node, op in dels],
            key=lambda e: (e[0], e[1], e[2]),
        )
        chains: dict[str, list[tuple[str, Any]]] = {}
        for t_ev, kind, key, node, op in events:
            chain = chains.setdefault(node, [])
            if kind == 0:
                if key not in self._ipt_removed:
                    chain.append((key, op))
                continue
            for victim in _deleted_by(op, chain):
                chain.remove(victim)
                self._ipt_removed[victim[0]] = t_ev
        # a reboot flushes the node's iptables: rules older than the running boot are gone
        added_at = {key: t_add for t_add, key, _, _ in adds}
        for node, chain in chains.items():
            online, since = self._vm_state(node)
            for entry in list(chain):
                if online and since > added_at[entry[0]]:
                    chain.remove(entry)
                    self._ipt_removed[entry[0]] = since
        rules: list[LossRule] = []
        for node, chain in sorted(chains.items()):
            for _key, op in chain:
                peer: str | None = None
                if op.peer_ip is not None:
                    peer = ips.get(op.peer_ip)
                    if peer is None:
                        continue  # not one of our VMs
                rules.append(LossRule(node, op.chain, peer, op.probability, op.protocol, op.comment))
        for key in [k for k in self._ipt_removed if k.split("/")[0] not in alive_pods]:
            del self._ipt_removed[key]
        return rules, loads, next_change

    # ------------------------------------------------------------------ the volume

    def _sync_rv(self, name: str) -> None:
        rv = self._rvs.get(name)
        if rv is None:
            return
        now = self.timers.now()
        inputs = self._inputs(name)
        memo = self._sync_memo.get(name)
        if memo is not None and memo[0] == inputs and now + EPS < memo[1]:
            return  # nothing changed since the last pass and nothing falls due yet
        self._current, self._structural = name, False
        dues: list[float] = []
        kern = self._kernels.get(rv["metadata"]["uid"])
        if kern is None:  # (a volume whose DRBD state was not saved: recover what was reported)
            primaries = (
                ((r.get("status") or {}).get("drbd") or {}).get("role") for r in self._replicas(name)
            )
            kern = self._kernels[rv["metadata"]["uid"]] = VolumeKernel(ever_primary="Primary" in primaries)
        port = (rv.get("status") or {}).get("drbdPort")
        net = self._network()
        view = self._kernel_step(rv, kern, port, net, now, dues)
        self._report(name, kern, port, view, now)
        ctrl_at = self._controller_at()
        if now + EPS >= ctrl_at:
            self._controller_step(name, now, dues)
        else:
            dues.append(ctrl_at)
        self._due(dues, ("rv", name))
        if name in self._rvs:
            # Only our own status reports changed the inputs: the next pass would see nothing new.
            # Any other write (replicas, attachments wanted...) makes the next pass run.
            after = inputs if self._structural else self._inputs(name)
            self._sync_memo[name] = (after, min((d for d in dues if finite(d)), default=INF))
        self._current = None

    def _inputs(self, name: str) -> tuple[Any, ...]:
        """Fingerprint of everything a volume's reconcile reads (see :meth:`_bump`)."""
        rv = self._rvs.get(name)
        return (
            self._env_version,
            rv["metadata"]["resourceVersion"] if rv is not None else None,
            tuple(
                self._rvrs[n]["metadata"]["resourceVersion"] for n in sorted(self._rvr_by_rv.get(name, ()))
            ),
            tuple(
                self._rvas[n]["metadata"]["resourceVersion"] for n in sorted(self._rva_by_rv.get(name, ()))
            ),
        )

    def _bump(self) -> None:
        """Something outside the volumes changed (network, nodes, VMs, agents, leader, bugs)."""
        self._env_version += 1

    def _replicas(self, rv_name: str) -> list[Obj]:
        return [self._rvrs[n] for n in sorted(self._rvr_by_rv.get(rv_name, ()))]

    def _rvas_of(self, rv_name: str) -> list[Obj]:
        return sorted((self._rvas[n] for n in self._rva_by_rv.get(rv_name, ())), key=creation_key)

    # -- DRBD + agent actions

    def _view(self, kern: VolumeKernel, port: int | None, net: NetworkModel) -> _View:
        v = _View()
        for uid, k in sorted(kern.replicas.items()):
            if k.voting:
                v.voters.append(uid)
            if k.configured and self._vm_state(k.node)[0]:
                v.members[uid] = k
        uids = sorted(v.members)
        for uid in uids:
            v.links[uid] = set()
        if port is not None:
            for i, a in enumerate(uids):
                ka = v.members[a]
                if ka.standalone:
                    continue
                for b in uids[i + 1 :]:
                    kb = v.members[b]
                    if kb.standalone or not net.link(ka.node, kb.node, int(port)):
                        continue
                    v.links[a].add(b)
                    v.links[b].add(a)
        n_voters = len(v.voters)
        voters = set(v.voters)
        for uid, k in v.members.items():
            count = (1 if k.voting else 0) + len(v.links[uid] & voters)
            v.in_quorum[uid] = has_quorum(count, n_voters)
            v.data_access[uid] = k.up_to_date or any(kern.replicas[p].up_to_date for p in v.links[uid])
        return v

    def _kernel_step(
        self,
        rv: Obj,
        kern: VolumeKernel,
        port: int | None,
        net: NetworkModel,
        now: float,
        dues: list[float],
    ) -> _View:
        """DRBD and the agents' actions on it; returns the resulting connectivity view."""
        t = self.timing
        rvrs = self._replicas(rv["metadata"]["name"])
        live_uids = {r["metadata"]["uid"] for r in rvrs}
        for uid in [u for u in kern.replicas if u not in live_uids]:
            del kern.replicas[uid]
        by_node: dict[str, list[Obj]] = {}
        for r in rvrs:
            node = (r.get("spec") or {}).get("nodeName")
            if node and (not deleting(r) or _held(r)):
                by_node.setdefault(str(node), []).append(r)
        # 1. node state and agent actions on resources (up, down, type changes)
        for r in rvrs:
            meta = r["metadata"]
            uid = meta["uid"]
            spec = r.get("spec") or {}
            node = str(spec.get("nodeName") or "")
            rtype = str(spec.get("type") or A.DISKFUL)
            k = kern.replicas.get(uid)
            if not node:
                continue
            online, _ = self._vm_state(node)
            if k is not None and k.configured and not online:
                k.drop_runtime()
            agent_at = self._agent_at(node)
            agent_ok = now + EPS >= agent_at
            if not agent_ok:
                dues.append(agent_at)
            held = _held(r)
            if held and k is not None and k.configured:
                # the controller has not released the replica yet (rvr-finalizer-release): the DRBD
                # resource stays up and keeps its vote. (Not up, after its node rebooted: the agent
                # reconciles every replica of its node and brings it up again, below.)
                continue
            if deleting(r) and not held:
                if A.AGENT_FINALIZER not in (meta.get("finalizers") or ()):
                    continue
                if agent_ok and not (k is not None and k.primary):
                    since = max(parse_ts(meta.get("deletionTimestamp")) or now, agent_at)
                    if k is not None:
                        if k.teardown_since is None:
                            k.teardown_since = max(since, now)
                        since = k.teardown_since
                    due = since + t.teardown_delay * net.node_slowdown(node)
                    if now + EPS >= due:
                        kern.replicas.pop(uid, None)
                        self._remove_finalizer(A.RVR, r, A.AGENT_FINALIZER)
                    else:
                        dues.append(due)
                continue
            if k is None or not k.configured:
                first = sorted(by_node.get(node, []), key=creation_key)
                if not (online and agent_ok and port is not None and first and first[0] is r):
                    continue
                if rtype not in A.REPLICA_TYPES:
                    continue
                since = condition_since(r, A.COND_SCHEDULED) or created_at(r)
                due = max(since, agent_at) + t.configure_delay * net.node_slowdown(node)
                if now + EPS < due:
                    dues.append(due)
                    continue
                if k is None:
                    # a replica the kernel state does not know (new, or state lost): its disk is
                    # what it last reported (DRBD metadata on the disk), else a fresh one
                    reported = ((r.get("status") or {}).get("drbd") or {}).get("diskState")
                    disk = str(reported) if reported else kern.new_disk_state(rtype)
                    k = ReplicaKernel(meta["name"], node, rtype, disk)
                    kern.replicas[uid] = k
                k.configured = True
                k.configured_at = now
                if k.type != rtype and A.DISKFUL not in (k.type, rtype):
                    k.type = rtype
                self._add_finalizers(A.RVR, r, (A.AGENT_FINALIZER, A.CONTROLLER_FINALIZER))
            else:
                if agent_ok and k.type != rtype and A.DISKFUL not in (k.type, rtype):
                    k.type = rtype  # TieBreaker <-> Access: both diskless, a configuration change
                if agent_ok and A.CONTROLLER_FINALIZER not in (meta.get("finalizers") or ()):
                    # (a replica configured before the controller's finalizer existed: restored worlds)
                    self._add_finalizers(A.RVR, r, (A.AGENT_FINALIZER, A.CONTROLLER_FINALIZER))
        view = self._view(kern, port, net)
        # 2.-5. run to a fixed point: one pass may enable another change at the same instant (a
        # finished resync gives data access to an attachment, or is outdated again at once by a
        # Primary it cannot reach). A second reconcile at this instant must find nothing to do,
        # or the outcome would depend on when reconciles happen (e.g. after a restore).
        for _ in range(_MAX_PASSES):
            before = _kernel_fingerprint(kern)
            pass_dues: list[float] = []
            view = self._drbd_pass(rv, kern, port, net, now, pass_dues, view)
            if _kernel_fingerprint(kern) == before:
                break
        dues.extend(pass_dues)
        return view

    def _drbd_pass(
        self,
        rv: Obj,
        kern: VolumeKernel,
        port: int | None,
        net: NetworkModel,
        now: float,
        dues: list[float],
        view: _View,
    ) -> _View:
        """Steps 2.-5. of :meth:`_kernel_step` (kernel state only, no API writes), once."""
        t = self.timing
        bugs = self.bugs
        rvrs = self._replicas(rv["metadata"]["name"])
        # 2. injected bug: a replica that lost quorum to a network split stays StandAlone
        if bugs.quorum_not_regained_after_split_brain:
            marked = False
            for uid, k in view.members.items():
                if not k.voting or k.standalone or view.in_quorum[uid]:
                    continue
                if any(p != uid and kp.voting and p not in view.links[uid] for p, kp in view.members.items()):
                    k.standalone = True
                    marked = True
            if marked:
                view = self._view(kern, port, net)
        # 3. attachments: agents promote / demote (DRBD Primary)
        desired = [str(n) for n in (rv.get("status") or {}).get("desiredAttachTo") or ()]
        primaries = sum(1 for k in view.members.values() if k.primary)
        order = sorted(
            view.members.items(),
            key=lambda kv: (desired.index(kv[1].node) if kv[1].node in desired else 9, kv[1].name),
        )
        obj_by_uid = {r["metadata"]["uid"]: r for r in rvrs}
        changed = False
        for uid, k in order:
            if now + EPS < self._agent_at(k.node):
                continue
            r_obj = obj_by_uid.get(uid)
            # a deleted replica is never promoted, but stays Primary while its node is wanted (the
            # controller does not release an attached replica)
            wanted = k.node in desired and r_obj is not None and (not deleting(r_obj) or k.primary)
            slow = net.node_slowdown(k.node)
            if wanted:
                k.detach_pending_since = None
                if k.primary or bugs.attach_stuck:
                    continue
                if k.attach_pending_since is None:
                    k.attach_pending_since = now
                if not (view.in_quorum[uid] and view.data_access[uid] and primaries < 2):
                    continue
                due = k.attach_pending_since + t.attach_delay * slow
                if now + EPS >= due:
                    k.primary = True
                    k.attach_pending_since = None
                    kern.ever_primary = True
                    primaries += 1
                    changed = True
                else:
                    dues.append(due)
            else:
                k.attach_pending_since = None
                if not k.primary or bugs.detach_stuck:
                    continue
                if k.detach_pending_since is None:
                    k.detach_pending_since = now
                due = k.detach_pending_since + t.detach_delay * slow
                if now + EPS >= due:
                    k.primary = False
                    k.detach_pending_since = None
                    primaries -= 1
                    changed = True
                else:
                    dues.append(due)
        if changed:
            view = self._view(kern, port, net)
        # 4. writes from the Primaries outdate every UpToDate replica they cannot reach
        disks_changed = False
        writers = [
            u for u, k in view.members.items() if k.primary and view.in_quorum[u] and view.data_access[u]
        ]
        for w in writers:
            for uid, k in kern.replicas.items():
                if uid == w or not k.up_to_date:
                    continue
                if uid in view.members and uid in view.links[w]:
                    continue
                k.disk = A.OUTDATED
                k.sync_since = None
                disks_changed = True
        # 5. resync Outdated / Inconsistent replicas from a connected UpToDate peer
        for uid, k in view.members.items():
            if not k.diskful or k.disk not in (A.OUTDATED, A.INCONSISTENT):
                continue
            sources = [p for p in sorted(view.links[uid]) if kern.replicas[p].up_to_date]
            if not sources or bugs.resync_stuck:
                k.sync_since = None
                continue
            if k.sync_since is None:
                k.sync_since = now
                base = t.resync if k.disk == A.OUTDATED else t.full_sync
                k.sync_total = base * min(net.slowdown(k.node, kern.replicas[p].node) for p in sources)
            due = k.sync_since + k.sync_total
            if now + EPS >= due:
                k.disk = A.UP_TO_DATE
                k.sync_since = None
                disks_changed = True
            else:
                dues.append(due)
        return self._view(kern, port, net) if disks_changed else view

    # -- agent reports

    def _report(self, rv_name: str, kern: VolumeKernel, port: int | None, view: _View, now: float) -> None:
        """The agents write what their DRBD reports into ``rvr.status``."""
        rv = self._rvs.get(rv_name)
        if rv is None:
            return
        desired = {str(n) for n in (rv.get("status") or {}).get("desiredAttachTo") or ()}
        names = {uid: k.name for uid, k in kern.replicas.items()}
        for r in self._replicas(rv_name):
            meta = r["metadata"]
            node = str((r.get("spec") or {}).get("nodeName") or "")
            if not node or now + EPS < self._agent_at(node):
                continue
            k = kern.replicas.get(meta["uid"])
            if deleting(r) and (k is None or not k.configured) and not _held(r):
                continue  # (a deleted replica is reported while it is up or held by the controller)
            status = _shallow(r.get("status") or {})
            gen = meta.get("generation")
            conds = Conditions(status, now, gen)
            if k is None or not k.configured:
                conds.set(A.COND_CONFIGURED, False, "ConfigurationPending", "waiting for the DRBD resource")
                conds.set(A.COND_ONLINE, False, "Uninitialized", "the DRBD resource is not up yet")
                drbd = status.get("drbd")
                if drbd:
                    # it was up before its node rebooted: no resource now, so neither Primary nor in
                    # quorum nor connected (the disk keeps its state), whatever was reported before
                    status["drbd"] = {**drbd, "role": "Secondary", "quorum": False, "connections": []}
                    msg = "the DRBD resource is not up"
                    conds.set(A.COND_IN_QUORUM, False, "Uninitialized", msg)
                    conds.set(A.COND_IO_READY, False, "Uninitialized", msg)
                    conds.set(A.COND_ATTACHED, False, "AttachPending" if node in desired else "Detached", msg)
                    conds.set(A.COND_READY, False, "NotReady", msg)
                conds.commit()
                self._write_status(r, status, requeue=False)
                continue
            uid = meta["uid"]
            in_q = view.in_quorum.get(uid, False)
            access = view.data_access.get(uid, False)
            peers = []
            for p, kp in sorted(kern.replicas.items(), key=lambda kv: kv[1].name):
                if p == uid:
                    continue
                if k.standalone or kp.standalone:
                    state = "StandAlone"
                elif p in view.links.get(uid, ()):
                    state = "Connected"
                else:
                    state = "Connecting"
                peers.append((names[p], kp.node, state))
            n_voters = len(view.voters)
            sig = (
                k.disk,
                k.primary,
                in_q,
                access,
                port,
                tuple(peers),
                node in desired,
                k.sync_since is None,
                n_voters,
            )
            memo = self._report_memo.get(uid)
            if memo is not None and memo == (sig, meta["resourceVersion"]):
                continue  # nothing new to report since the last report
            connections = [{"name": a, "nodeName": b, "state": c} for a, b, c in peers]
            status["drbd"] = {
                "diskState": k.disk,
                "role": "Primary" if k.primary else "Secondary",
                "quorum": in_q,
                "port": port,
                "connections": connections,
            }
            ip = self._node_ip(node)
            if ip:
                status["address"] = {"ipv4": ip, "port": port}
            conds.set(A.COND_CONFIGURED, True, "Configured", "DRBD resource is up")
            if in_q:
                conds.set(A.COND_IN_QUORUM, True, "InQuorum")
            else:
                conds.set(
                    A.COND_IN_QUORUM,
                    False,
                    "QuorumLost",
                    f"connected to fewer than {majority(n_voters)} of {n_voters} voting replicas",
                )
            if k.disk == A.DISKLESS:
                conds.set(A.COND_IN_SYNC, True, "Diskless")
            elif k.disk == A.UP_TO_DATE:
                conds.set(A.COND_IN_SYNC, True, "InSync")
            else:
                msg = "resynchronizing" if k.sync_since is not None else "no UpToDate peer to sync from"
                conds.set(A.COND_IN_SYNC, False, k.disk, msg)
            if in_q:
                conds.set(A.COND_ONLINE, True, "Online")
            else:
                conds.set(A.COND_ONLINE, False, "QuorumLost", "replica has no quorum")
            if in_q and access:
                conds.set(A.COND_IO_READY, True, "IOReady")
            elif in_q:
                conds.set(A.COND_IO_READY, False, "OutOfSync", "no UpToDate data reachable")
            else:
                conds.set(A.COND_IO_READY, False, "Offline", "replica has no quorum")
            if k.primary:
                conds.set(A.COND_ATTACHED, True, "Attached")
            elif node in desired:
                conds.set(A.COND_ATTACHED, False, "AttachPending", "waiting to become Primary")
            else:
                conds.set(A.COND_ATTACHED, False, "Detached")
            ready = in_q and access
            conds.set(A.COND_READY, ready, "Ready" if ready else "NotReady")
            conds.commit()
            written = self._write_status(r, status, requeue=False)
            self._report_memo[uid] = (sig, written["metadata"]["resourceVersion"])

    def _node_ip(self, node: str) -> str | None:
        vm = self._vms.get(node)
        if vm is not None and (vm.get("status") or {}).get("ipAddress"):
            return str(vm["status"]["ipAddress"])
        n = self._nodes.get(node)
        for a in ((n or {}).get("status") or {}).get("addresses") or ():
            if a.get("type") == "InternalIP":
                return str(a.get("address"))
        return None

    # -- the sds controller

    def _layout(self, rv: Obj) -> tuple[Obj | None, int, int]:
        rsc = self._rscs.get(str((rv.get("spec") or {}).get("replicatedStorageClassName") or ""))
        if rsc is None:
            return None, 0, 0
        mode = str((rsc.get("spec") or {}).get("replication") or A.DEFAULT_REPLICATION)
        want_d, want_tb = A.REPLICATION_LAYOUT.get(mode, A.REPLICATION_LAYOUT[A.DEFAULT_REPLICATION])
        return rsc, want_d, want_tb

    def _controller_step(self, name: str, now: float, dues: list[float]) -> None:
        rv = self._rvs[name]
        meta = rv["metadata"]
        is_deleting = deleting(rv)
        if not is_deleting and A.RV_FINALIZER not in (meta.get("finalizers") or ()):
            rv = self._add_finalizer(A.RV, rv, A.RV_FINALIZER)
            meta = rv["metadata"]
        gen = meta.get("generation")
        status = _shallow(rv.get("status") or {})
        conds = Conditions(status, now, gen)
        if status.get("drbdPort") is None:
            status["drbdPort"] = self._allocate_port(name)
        rsc, want_d, want_tb = self._layout(rv)
        # every replica of the volume carries its label (rvr-metadata: users' replicas too);
        # replicas created by users: schedule them
        for item in self._replicas(name):
            r = item
            if (r["metadata"].get("labels") or {}).get(A.RV_LABEL) != name:
                r = self._patch(A.RVR, r["metadata"]["name"], {"metadata": {"labels": {A.RV_LABEL: name}}})
            self._schedule_user_replica(name, r, rsc, now, dues)
        # placement and recreation
        if is_deleting:
            pass
        elif rsc is None:
            conds.set(
                A.COND_CONFIGURATION_READY,
                False,
                A.R_WAITING_FOR_RSC,
                f"ReplicatedStorageClass {(rv.get('spec') or {}).get('replicatedStorageClassName')!r} not found",
            )
        else:
            conds.set(A.COND_CONFIGURATION_READY, True, A.R_CONFIG_READY)
            self._place(rv, rsc, want_d, want_tb, conds, now, dues)
        # attachments
        desired = self._attachments(rv, status, is_deleting)
        # aggregate what the agents reported (replicas on NotReady nodes marked offline first)
        self._mark_offline(name, now)
        rvrs = self._replicas(name)
        reported = self._reported(rvrs)
        voters = [x for x in reported.values() if x.type in A.VOTING_TYPES]
        online = [x.name for x in voters if not x.offline]

        def connected(a: str, b: str) -> bool:
            return b in reported[a].connected and a in reported[b].connected

        def prefer(s: frozenset[str]) -> tuple[int]:
            return (sum(1 for x in s if reported[x].type == A.DISKFUL and reported[x].disk == A.UP_TO_DATE),)

        clique = max_clique(online, connected, prefer)
        n = len(voters)
        want_voters = want_d + want_tb
        quorum = has_quorum(len(clique), n)
        if quorum and len(clique) == n and n >= want_voters:
            conds.set(A.COND_QUORUM, True, A.R_QUORUM_REACHED, f"{n}/{n} voting replicas connected")
        elif quorum:
            conds.set(
                A.COND_QUORUM,
                True,
                A.R_QUORUM_DEGRADED,
                f"{len(clique)}/{max(n, want_voters)} voting replicas connected",
            )
        else:
            conds.set(
                A.COND_QUORUM,
                False,
                A.R_QUORUM_LOST,
                f"{len(clique)} of {n} voting replicas connected, {majority(n) if n else 1} needed",
            )
        io_ok = quorum and any(
            reported[x].type == A.DISKFUL and reported[x].disk == A.UP_TO_DATE for x in clique
        )
        if io_ok:
            conds.set(A.COND_IO_READY, True, A.R_IO_READY)
        elif any(x.io_ready and not x.offline for x in reported.values()):
            conds.set(
                A.COND_IO_READY, False, A.R_INSUFFICIENT_IO_READY, "IO-ready replicas do not form a quorum"
            )
        else:
            conds.set(A.COND_IO_READY, False, A.R_NO_IO_READY, "no replica is ready for IO")
        attached = [
            x.node for x in sorted(reported.values(), key=lambda x: x.name) if x.primary and not x.offline
        ]
        attached.sort(key=lambda n: (desired.index(n) if n in desired else 9, n))
        status["actuallyAttachedTo"] = attached
        status["desiredAttachTo"] = desired
        diskful = [x for x in reported.values() if x.type == A.DISKFUL and not x.leaving]
        status["diskfulReplicaCount"] = f"{sum(1 for x in diskful if x.disk == A.UP_TO_DATE)}/{want_d}"
        size = A.parse_quantity((rv.get("spec") or {}).get("size"))
        if size is not None:
            extent = 4 * 1024 * 1024
            status["actualSize"] = A.format_quantity(-(-size // extent) * extent)
        conds.commit()
        # attachments' status and finalizers
        self._sync_rvas(name, desired, attached, io_ok, reported, now)
        # deleted replicas: their finalizer is released once they may go
        self._release_replicas(rvrs, reported, attached, want_d, want_tb, is_deleting)
        # deletion: RVAs first, then the replicas, then the volume
        if is_deleting:
            if self._rva_by_rv.get(name):
                conds.set(
                    A.COND_CONFIGURATION_READY,
                    False,
                    A.R_DELETING,
                    f"waiting for {len(self._rva_by_rv[name])} attachment(s) to be deleted",
                )
            else:
                conds.set(A.COND_CONFIGURATION_READY, False, A.R_DELETING, "deleting replicas")
                for r in self._replicas(name):
                    if not deleting(r):
                        self._delete(A.RVR, r["metadata"]["name"])
                if not self._rvr_by_rv.get(name) and not self.bugs.rv_deletion_stuck:
                    self._remove_finalizer(A.RV, self._rvs[name], A.RV_FINALIZER)
                    return
            conds.commit()
        current = self._rvs.get(name)
        if current is not None:
            old = current.get("status") or {}
            agents_care = any(old.get(f) != status.get(f) for f in ("drbdPort", "desiredAttachTo"))
            self._write_status(current, status, requeue=agents_care)

    def _release_replicas(
        self,
        rvrs: list[Obj],
        reported: Mapping[str, _Reported],
        attached: list[str],
        want_d: int,
        want_tb: int,
        is_deleting: bool,
    ) -> None:
        """rvr-finalizer-release: the controller removes its finalizer from a deleted replica (so
        its agent may tear the DRBD resource down) only when that is safe. While the volume is
        being deleted: when no replica is attached. Otherwise: the replica is not attached, the
        other voting replicas keep quorum without it (a majority of them Online), enough other
        Diskful replicas that are not being deleted are UpToDate and IOReady for the storage class
        (so a deleted Diskful replica goes only once its replacement synced), and a TieBreaker
        goes only once the layout's TieBreakers are there without it. Until then the replica stays
        configured and keeps its vote: a replica deletion alone never costs the volume quorum.
        (Bug knob ``unsafe_replica_deletion``: only the attachment is checked.)"""
        for item in rvrs:
            r = self._rvrs.get(item["metadata"]["name"])
            if (
                r is None
                or not deleting(r)
                or A.CONTROLLER_FINALIZER not in (r["metadata"].get("finalizers") or ())
            ):
                continue
            if self._release_blocked(r, reported, attached, want_d, want_tb, is_deleting) is None:
                self._remove_finalizer(A.RVR, r, A.CONTROLLER_FINALIZER)

    def _release_blocked(
        self,
        r: Obj,
        reported: Mapping[str, _Reported],
        attached: list[str],
        want_d: int,
        want_tb: int,
        is_deleting: bool,
    ) -> str | None:
        """Why a deleted replica may not go yet (None: it may)."""
        name = r["metadata"]["name"]
        spec = r.get("spec") or {}
        if is_deleting:
            return f"volume still attached to {', '.join(attached)}" if attached else None
        node = str(spec.get("nodeName") or "")
        if node and node in attached:
            return f"replica is attached on {node}"
        if self.bugs.unsafe_replica_deletion:
            return None
        others = [x for n, x in reported.items() if n != name]
        voters = [x for x in others if x.type in A.VOTING_TYPES]
        online = sum(1 for x in voters if x.online and not x.offline)
        if voters and not has_quorum(online, len(voters)):
            return f"{online} of {len(voters)} other voting replicas online, {majority(len(voters))} needed"
        ready = sum(
            1
            for x in others
            if x.type == A.DISKFUL
            and x.disk == A.UP_TO_DATE
            and x.io_ready
            and not x.leaving
            and not x.offline
        )
        if ready < want_d:
            return f"{ready} other UpToDate IOReady Diskful replicas, {want_d} needed"
        if str(spec.get("type") or A.DISKFUL) == A.TIEBREAKER:
            tbs = sum(1 for x in others if x.type == A.TIEBREAKER and x.online and not x.leaving)
            if tbs < want_tb:
                return f"{tbs} other TieBreaker replicas online, {want_tb} needed"
        return None

    def _allocate_port(self, name: str) -> int:
        used = {
            int((o.get("status") or {})["drbdPort"])
            for n, o in self._rvs.items()
            if n != name and (o.get("status") or {}).get("drbdPort") is not None
        }
        base = self.spec.drbd_port_base
        for p in range(base, base + _PORT_RANGE):
            if p not in used:
                return p
        return base + _PORT_RANGE  # out of ports: share the last one

    def _free_replica_name(self, rv_name: str) -> str | None:
        for i in range(32):
            candidate = f"{rv_name}-{i}"
            if candidate not in self._rvrs:
                return candidate
        return None

    def _pick_node(self, rv_name: str, rsc: Obj | None, exclude: set[str]) -> str | None:
        rvrs = self._replicas(rv_name)
        used_zones = {
            self._zone(str((r.get("spec") or {}).get("nodeName") or "")) for r in rvrs if not deleting(r)
        }
        used_zones.discard(None)
        topology = str(((rsc or {}).get("spec") or {}).get("topology") or "Ignored")
        load: dict[str, int] = {}
        for r in self._rvrs.values():
            node = (r.get("spec") or {}).get("nodeName")
            if node and not deleting(r):
                load[str(node)] = load.get(str(node), 0) + 1
        best: tuple[Any, ...] | None = None
        choice: str | None = None
        for node in self._storage_nodes():
            if node in exclude or not self._node_ready(node):
                continue
            zone = self._zone(node)
            if topology == "Zonal" and used_zones and zone not in used_zones:
                continue
            zone_penalty = 1 if (topology == "TransZonal" and zone in used_zones) else 0
            tie = hashlib.blake2b(f"{rv_name}/{node}".encode(), digest_size=4).hexdigest()
            score = (zone_penalty, load.get(node, 0), tie)
            if best is None or score < best:
                best, choice = score, node
        return choice

    def _zone(self, node: str) -> str | None:
        n = self._nodes.get(node)
        if n is None:
            return None
        return (n["metadata"].get("labels") or {}).get(A.ZONE_LABEL)

    def _create_replica(self, rv: Obj, rtype: str, node: str, *, for_attachment: bool = False) -> bool:
        rv_name = rv["metadata"]["name"]
        name = self._free_replica_name(rv_name)
        if name is None:
            return False
        labels = {A.RV_LABEL: rv_name}
        if for_attachment:
            labels[A.ATTACH_REPLICA_LABEL] = "true"
        created = self._create(
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RVR,
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": A.STORAGE_API,
                            "kind": A.RV,
                            "name": rv_name,
                            "uid": rv["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"replicatedVolumeName": rv_name, "type": rtype, "nodeName": node},
            }
        )
        current = self._rvrs.get(name)
        if current is not None:
            status = _shallow(current.get("status") or {})
            conds = Conditions(status, self.timers.now(), created["metadata"].get("generation"))
            conds.set(A.COND_SCHEDULED, True, A.R_REPLICA_SCHEDULED, f"scheduled to node {node}")
            self._write_status(current, conds.commit())
        return True

    def _schedule_user_replica(
        self, rv_name: str, r: Obj, rsc: Obj | None, now: float, dues: list[float]
    ) -> None:
        if deleting(r) or condition_true(r, A.COND_SCHEDULED):
            return
        spec = r.get("spec") or {}
        node = spec.get("nodeName")
        gen = r["metadata"].get("generation")
        status = _shallow(r.get("status") or {})
        conds = Conditions(status, now, gen)
        others = {
            str((o.get("spec") or {}).get("nodeName"))
            for o in self._replicas(rv_name)
            if o is not r and (o.get("spec") or {}).get("nodeName")  # (deleted ones still run there)
        }
        if str(spec.get("type") or A.DISKFUL) not in A.REPLICA_TYPES:
            conds.set(
                A.COND_SCHEDULED, False, A.R_SCHEDULING_FAILED, f"unknown replica type {spec.get('type')!r}"
            )
        elif node:
            node = str(node)
            if node not in self._storage_nodes():
                conds.set(
                    A.COND_SCHEDULED, False, A.R_SCHEDULING_FAILED, f"node {node} is not a storage node"
                )
            elif node in others:
                conds.set(
                    A.COND_SCHEDULED,
                    False,
                    A.R_SCHEDULING_FAILED,
                    f"node {node} already has a replica of {rv_name}",
                )
            else:
                conds.set(A.COND_SCHEDULED, True, A.R_REPLICA_SCHEDULED, f"scheduled to node {node}")
        else:
            due = created_at(r) + self.timing.schedule_delay
            if now + EPS < due:
                dues.append(due)
                return
            choice = self._pick_node(rv_name, rsc, others)
            if choice is None:
                conds.set(
                    A.COND_SCHEDULED,
                    False,
                    A.R_NO_AVAILABLE_NODES,
                    "no eligible storage node without a replica of this volume",
                )
            else:
                r = self._patch(A.RVR, r["metadata"]["name"], {"spec": {"nodeName": choice}})
                gen = r["metadata"].get("generation")
                status = _shallow(r.get("status") or {})
                conds = Conditions(status, now, gen)
                conds.set(A.COND_SCHEDULED, True, A.R_REPLICA_SCHEDULED, f"scheduled to node {choice}")
        conds.commit()
        current = self._rvrs.get(r["metadata"]["name"])
        if current is not None:
            self._write_status(current, status)

    def _place(
        self, rv: Obj, rsc: Obj, want_d: int, want_tb: int, conds: Conditions, now: float, dues: list[float]
    ) -> None:
        name = rv["metadata"]["name"]
        live = [r for r in self._replicas(name) if not deleting(r)]
        # rvr-tie-breaker-count: TieBreakers beyond the layout's are deleted (an extra one would
        # make the number of voters even); unscheduled, then unconfigured, then the newest go first
        tbs = [r for r in live if (r.get("spec") or {}).get("type") == A.TIEBREAKER]
        if len(tbs) > want_tb:
            tbs.sort(key=creation_key, reverse=True)
            tbs.sort(
                key=lambda r: (condition_true(r, A.COND_SCHEDULED), bool((r.get("status") or {}).get("drbd")))
            )
            for r in tbs[: len(tbs) - want_tb]:
                self._delete(A.RVR, r["metadata"]["name"])
            live = [r for r in self._replicas(name) if not deleting(r)]
        have = {A.DISKFUL: 0, A.TIEBREAKER: 0}
        for r in live:
            rtype = str((r.get("spec") or {}).get("type") or A.DISKFUL)
            if rtype in have:
                have[rtype] += 1
        missing = [(A.DISKFUL, want_d - have[A.DISKFUL]), (A.TIEBREAKER, want_tb - have[A.TIEBREAKER])]
        missing = [(k, n) for k, n in missing if n > 0]
        unscheduled = [r for r in live if not condition_true(r, A.COND_SCHEDULED)]
        cond = condition(rv, A.COND_SCHEDULED)
        if not missing:
            if unscheduled:
                conds.set(
                    A.COND_SCHEDULED,
                    False,
                    A.R_SCHEDULING_IN_PROGRESS,
                    f"{len(unscheduled)} replica(s) not scheduled yet",
                )
            else:
                conds.set(A.COND_SCHEDULED, True, A.R_ALL_SCHEDULED)
            return
        text = ", ".join(f"{n} {k}" for k, n in missing)
        if cond is None:
            due = created_at(rv) + self.timing.schedule_delay  # a new volume: place at once
        else:
            if cond.get("status") == "True" or cond.get("reason") != A.R_NOT_SCHEDULED:
                conds.set(A.COND_SCHEDULED, False, A.R_NOT_SCHEDULED, f"missing {text}")
                since = now
            else:
                since = condition_since(rv, A.COND_SCHEDULED) or now
            if self.bugs.replica_not_recreated:
                conds.set(A.COND_SCHEDULED, False, A.R_NOT_SCHEDULED, f"missing {text}")
                return
            due = since + self.timing.recreate_delay
        if now + EPS < due:
            dues.append(due)
            if cond is not None:  # (a new volume gets its first Scheduled condition when placed)
                conds.set(A.COND_SCHEDULED, False, A.R_NOT_SCHEDULED, f"missing {text}")
            return
        # one replica per node: nodes of replicas being deleted (still running) are taken too
        exclude = {
            str((r.get("spec") or {}).get("nodeName"))
            for r in self._replicas(name)
            if (r.get("spec") or {}).get("nodeName")
        }
        failed = 0
        for rtype, count in missing:
            for _ in range(count):
                node = self._pick_node(name, rsc, exclude)
                if node is None or not self._create_replica(rv, rtype, node):
                    failed += 1
                    continue
                exclude.add(node)
        if failed:
            conds.set(
                A.COND_SCHEDULED,
                False,
                A.R_NOT_SCHEDULED,
                f"{failed} replica(s) could not be placed: no eligible storage node",
            )
        else:
            conds.set(A.COND_SCHEDULED, True, A.R_ALL_SCHEDULED)

    def _attachable(self, node: str) -> bool:
        return node in self._storage_nodes()

    def _attachments(self, rv: Obj, status: Obj, is_deleting: bool) -> list[str]:
        name = rv["metadata"]["name"]
        active: list[str] = []
        for rva in self._rvas_of(name):
            node = str((rva.get("spec") or {}).get("nodeName") or "")
            if node and not deleting(rva) and node not in active:
                active.append(node)
        desired = [str(n) for n in status.get("desiredAttachTo") or () if str(n) in active]
        for node in active:
            if node not in desired and len(desired) < 2 and self._attachable(node) and not is_deleting:
                desired.append(node)
        replicas = self._replicas(name)
        live = [r for r in replicas if not deleting(r)]
        on_node = {
            str((r.get("spec") or {}).get("nodeName")): r
            for r in live
            if (r.get("spec") or {}).get("nodeName")
        }
        leaving = {str((r.get("spec") or {}).get("nodeName")) for r in replicas if deleting(r)}
        for node in desired:
            r = on_node.get(node)
            if r is None:
                if node not in leaving:  # (one replica per node: a deleted one is torn down first)
                    self._create_replica(rv, A.ACCESS, node, for_attachment=True)
            elif (r.get("spec") or {}).get("type") == A.TIEBREAKER:
                self._patch(A.RVR, r["metadata"]["name"], {"spec": {"type": A.ACCESS}})
        for r in live:
            node = str((r.get("spec") or {}).get("nodeName") or "")
            if (r["metadata"].get("labels") or {}).get(A.ATTACH_REPLICA_LABEL) != "true" or node in desired:
                continue
            if ((r.get("status") or {}).get("drbd") or {}).get("role") == "Primary":
                continue
            self._delete(A.RVR, r["metadata"]["name"])
        return desired

    def _reported(self, rvrs: Iterable[Obj]) -> dict[str, _Reported]:
        out: dict[str, _Reported] = {}
        for r in rvrs:
            meta = r["metadata"]
            memo = self._reported_memo.get(meta["uid"])
            if memo is not None and memo[0] == meta["resourceVersion"]:
                if memo[1] is not None:
                    out[meta["name"]] = memo[1]
                continue
            rep = self._parse_reported(r)
            self._reported_memo[meta["uid"]] = (meta["resourceVersion"], rep)
            if rep is not None:
                out[meta["name"]] = rep
        return out

    @staticmethod
    def _parse_reported(r: Obj) -> _Reported | None:
        """What the agents reported about one replica (None: nothing yet)."""
        drbd = (r.get("status") or {}).get("drbd")
        if not drbd:
            return None
        online = condition(r, A.COND_ONLINE)
        spec = r.get("spec") or {}
        return _Reported(
            name=r["metadata"]["name"],
            type=str(spec.get("type") or A.DISKFUL),
            node=str(spec.get("nodeName") or ""),
            disk=str(drbd.get("diskState") or ""),
            primary=drbd.get("role") == "Primary",
            connected=frozenset(
                c.get("name") for c in drbd.get("connections") or () if c.get("state") == "Connected"
            ),
            offline=online is not None and online.get("reason") == A.R_NODE_NOT_READY,
            online=online is not None and online.get("status") == "True",
            io_ready=condition_true(r, A.COND_IO_READY),
            ready=condition_true(r, A.COND_READY),
            leaving=deleting(r),
        )

    def _mark_offline(self, rv_name: str, now: float) -> None:
        for r in self._replicas(rv_name):
            node = str((r.get("spec") or {}).get("nodeName") or "")
            if not node or self._node_ready(node) or not (r.get("status") or {}).get("drbd"):
                continue
            if now + EPS >= self._agent_at(node):
                continue  # the agent reports itself
            status = _shallow(r.get("status") or {})
            gen = r["metadata"].get("generation")
            conds = Conditions(status, now, gen)
            msg = f"node {node} is not ready"
            for ctype in (A.COND_ONLINE, A.COND_IN_QUORUM, A.COND_IO_READY, A.COND_READY):
                conds.set(ctype, False, A.R_NODE_NOT_READY, msg)
            conds.commit()
            self._write_status(r, status, requeue=False)

    def _sync_rvas(
        self,
        rv_name: str,
        desired: list[str],
        attached: list[str],
        io_ok: bool,
        reported: Mapping[str, _Reported],
        now: float,
    ) -> None:
        by_node: dict[str, Obj] = {}
        for o in self._replicas(rv_name):
            node = (o.get("spec") or {}).get("nodeName")
            if node and (str(node) not in by_node or not deleting(o)):
                by_node[str(node)] = o  # the live replica of the node, else the one going away
        for item in self._rvas_of(rv_name):
            rva = item
            meta = rva["metadata"]
            node = str((rva.get("spec") or {}).get("nodeName") or "")
            is_attached = node in attached
            if deleting(rva):
                if not is_attached and node not in desired:
                    self._remove_finalizer(A.RVA, rva, A.RV_FINALIZER)
                    continue
            elif A.RV_FINALIZER not in (meta.get("finalizers") or ()):
                rva = self._add_finalizer(A.RVA, rva, A.RV_FINALIZER)
            gen = rva["metadata"].get("generation")
            status = _shallow(rva.get("status") or {})
            conds = Conditions(status, now, gen)
            r = by_node.get(node)
            rep = reported.get(r["metadata"]["name"]) if r is not None else None
            if is_attached:
                phase = A.RVA_DETACHING if deleting(rva) else A.RVA_ATTACHED
                conds.set(A.COND_ATTACHED, True, A.R_ATTACHED, f"attached to node {node}")
            elif deleting(rva):
                phase = A.RVA_DETACHING
                conds.set(A.COND_ATTACHED, False, A.R_DETACHING, "detaching")
            elif node in desired:
                phase = A.RVA_ATTACHING
                if r is None or rep is None:
                    reason, msg = A.R_WAITING_FOR_REPLICA, f"waiting for a replica on node {node}"
                elif deleting(r):
                    reason, msg = A.R_WAITING_FOR_REPLICA, f"the replica on node {node} is being deleted"
                elif (r.get("spec") or {}).get("type") == A.TIEBREAKER or rep.type == A.TIEBREAKER:
                    reason, msg = A.R_CONVERTING_TB, "converting the TieBreaker replica to Access"
                elif not io_ok:
                    reason, msg = A.R_WAITING_FOR_RV_IO_READY, "waiting for the volume to become IOReady"
                else:
                    reason, msg = A.R_SETTING_PRIMARY, "promoting the replica"
                conds.set(A.COND_ATTACHED, False, reason, msg)
            else:
                phase = A.RVA_PENDING
                if not self._attachable(node):
                    reason, msg = A.R_LOCALITY, f"node {node} is not a storage node"
                elif len(desired) >= 2:
                    reason, msg = (
                        A.R_WAITING_FOR_DETACH,
                        f"volume is attached to {len(desired)} nodes (maximum 2)",
                    )
                else:
                    reason, msg = A.R_WAITING_FOR_RV, "volume is being deleted"
                conds.set(A.COND_ATTACHED, False, reason, msg)
            replica_ready = rep is not None and rep.ready and not rep.offline
            if replica_ready:
                conds.set(A.COND_REPLICA_READY, True, A.R_READY)
            else:
                conds.set(
                    A.COND_REPLICA_READY,
                    False,
                    A.R_WAITING_FOR_REPLICA,
                    f"replica on node {node} is not ready",
                )
            if is_attached and replica_ready:
                conds.set(A.COND_READY, True, A.R_READY)
            elif not is_attached:
                conds.set(A.COND_READY, False, A.R_NOT_ATTACHED)
            else:
                conds.set(A.COND_READY, False, A.R_REPLICA_NOT_READY)
            status["phase"] = phase
            conds.commit()
            current = self._rvas.get(meta["name"])
            if current is not None:
                self._write_status(current, status, requeue=False)

    def _sync_orphan_rva(self, name: str) -> None:
        """An RVA whose volume does not exist: Pending; deletion goes through at once."""
        rva = self._rvas.get(name)
        if rva is None or _rv_of(rva) in self._rvs:
            return
        now = self.timers.now()
        ctrl_at = self._controller_at()
        if now + EPS < ctrl_at:
            self._due([ctrl_at], ("rva", name))
            return
        if deleting(rva):
            self._remove_finalizer(A.RVA, rva, A.RV_FINALIZER)
            return
        status = _shallow(rva.get("status") or {})
        gen = rva["metadata"].get("generation")
        conds = Conditions(status, now, gen)
        msg = f"ReplicatedVolume {_rv_of(rva)!r} not found"
        conds.set(A.COND_ATTACHED, False, A.R_WAITING_FOR_RV, msg)
        conds.set(A.COND_REPLICA_READY, False, A.R_WAITING_FOR_REPLICA, msg)
        conds.set(A.COND_READY, False, A.R_NOT_ATTACHED, msg)
        status["phase"] = A.RVA_PENDING
        conds.commit()
        self._write_status(rva, status)

    def _sync_orphan_rvr(self, name: str) -> None:
        """A replica whose volume is gone: nothing to tear down but its finalizer."""
        r = self._rvrs.get(name)
        if r is None or _rv_of(r) in self._rvs or not deleting(r):
            return
        self._remove_finalizer(A.RVR, r, A.CONTROLLER_FINALIZER, A.AGENT_FINALIZER)

    def _sync_rsc(self, name: str) -> None:
        rsc = self._rscs.get(name)
        if rsc is None or deleting(rsc):
            return
        now = self.timers.now()
        mode = str((rsc.get("spec") or {}).get("replication") or A.DEFAULT_REPLICATION)
        status = _shallow(rsc.get("status") or {})
        gen = rsc["metadata"].get("generation")
        conds = Conditions(status, now, gen)
        if mode in A.REPLICATION_LAYOUT:
            status["phase"] = "Created"
            conds.set("Ready", True, "Ready")
        else:
            status["phase"] = "Failed"
            conds.set("Ready", False, "InvalidConfiguration", f"unknown replication {mode!r}")
        conds.commit()
        self._write_status(rsc, status)

    # ------------------------------------------------------------------ writes

    def _touch(self, rv_name: str) -> None:
        """A volume's objects changed: reconcile it (unless it is our own write that needs no
        second look, see :meth:`_write_status`)."""
        if rv_name != self._quiet:
            if rv_name == self._current:
                self._structural = True
            self._enqueue(("rv", rv_name))

    def _remember(self, obj: Obj) -> Obj:
        """Write-through: put a write's result into the cache at once (its watch event may be
        delivered only after the current dispatch), so later writes do not conflict."""
        kind = obj.get("kind")
        gone = deleting(obj) and not obj["metadata"].get("finalizers")
        etype = DELETED if gone else "MODIFIED"
        if kind == A.RV:
            self._on_rv(etype, obj)
        elif kind == A.RVR:
            self._on_rvr(etype, obj)
        elif kind == A.RVA:
            self._on_rva(etype, obj)
        return obj

    def _write_status(self, obj: Obj, status: Obj, requeue: bool = True) -> Obj:
        """Update a status. Without ``requeue`` the write does not make its volume reconcile again
        (reports whose consumers run later in the same reconcile)."""
        if status == (obj.get("status") or {}):
            return obj
        if requeue:
            return self._remember(self.api.update_status({**obj, "status": status}))
        self._quiet = obj["metadata"]["name"] if obj.get("kind") == A.RV else _rv_of(obj)
        try:
            return self._remember(self.api.update_status({**obj, "status": status}))
        finally:
            self._quiet = None

    def _create(self, obj: Obj) -> Obj:
        return self._remember(self.api.create(obj))

    def _delete(self, kind: str, name: str) -> None:
        last = self.api.delete(kind, name, api_version=A.STORAGE_API)
        if not (deleting(last) and last["metadata"].get("finalizers")):
            last = {**last, "metadata": {**last["metadata"], "deletionTimestamp": A.ts(self.timers.now())}}
            last["metadata"].pop("finalizers", None)
        self._remember(last)

    def _patch(self, kind: str, name: str, patch: Obj) -> Obj:
        return self._remember(self.api.patch(kind, name, patch, api_version=A.STORAGE_API))

    def _add_finalizer(self, kind: str, obj: Obj, finalizer: str) -> Obj:
        meta = obj["metadata"]
        fins = list(meta.get("finalizers") or ())
        if finalizer in fins or deleting(obj):
            return obj
        return self._patch(
            kind,
            meta["name"],
            {"metadata": {"finalizers": [*fins, finalizer], "resourceVersion": meta["resourceVersion"]}},
        )

    def _add_finalizers(self, kind: str, obj: Obj, finalizers: Iterable[str]) -> Obj:
        meta = obj["metadata"]
        fins = list(meta.get("finalizers") or ())
        missing = [f for f in finalizers if f not in fins]
        if not missing or deleting(obj):
            return obj
        return self._patch(
            kind,
            meta["name"],
            {"metadata": {"finalizers": [*fins, *missing], "resourceVersion": meta["resourceVersion"]}},
        )

    def _remove_finalizer(self, kind: str, obj: Obj, *finalizers: str) -> None:
        meta = obj["metadata"]
        fins = list(meta.get("finalizers") or ())
        if not any(f in fins for f in finalizers):
            return
        left = [f for f in fins if f not in finalizers]
        self._patch(
            kind,
            meta["name"],
            {"metadata": {"finalizers": left or None, "resourceVersion": meta["resourceVersion"]}},
        )


def _shallow(status: Obj) -> Obj:
    """A copy of a status to edit: top-level keys are replaced, never mutated (conditions are
    replaced item by item by :func:`set_condition`), so a shallow copy is enough."""
    return dict(status)


def _newer(old: Obj | None, new: Obj) -> bool:
    """Is ``new`` a later version than the cached ``old``? (write results reach the cache before
    their watch events, so events may be older than the cache)"""
    if old is None:
        return True
    try:
        return int(new["metadata"]["resourceVersion"]) > int(old["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return True


def _applies(etype: str, cached: Obj | None, obj: Obj) -> bool:
    """Should a watch event (or a write's result) change the cache? Results of our own writes are
    cached at once, so their events may arrive later and be older; a DELETED event of an object
    that has been re-created under the same name must not remove the new one."""
    if etype == DELETED:
        return cached is not None and cached["metadata"]["uid"] == obj["metadata"]["uid"]
    return _newer(cached, obj)


def _rv_of(obj: Obj) -> str:
    return str((obj.get("spec") or {}).get("replicatedVolumeName") or "")


def _held(rvr: Obj) -> bool:
    """A deleted replica the agent configured that the controller has not released yet (its
    finalizer and another one are left): it stays a member of the volume, as a live one."""
    fins = rvr["metadata"].get("finalizers") or ()
    return deleting(rvr) and A.AGENT_FINALIZER in fins and any(f != A.AGENT_FINALIZER for f in fins)


def _container_times(pod: Obj) -> tuple[float | None, float | None]:
    """(started, finished) of the pod's first container run (None when not started / running)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        state = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated")
        if "running" in state:
            first = last if last else state["running"]
            started = parse_ts(first.get("startedAt"))
            finished = parse_ts(last.get("finishedAt")) if last else None
            return started, finished
        if "terminated" in state:
            term = last or state["terminated"]
            return parse_ts(term.get("startedAt")), parse_ts(term.get("finishedAt"))
        return None, None
    return None, None


def _deleted_by(dop: Any, chain: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The rules (of one node, in insertion order) a delete/flush operation removes."""
    if dop.action == "flush":
        return [x for x in chain if dop.chain in ("", x[1].chain)]
    same_chain = [x for x in chain if x[1].chain == dop.chain]
    if dop.comments:
        return [x for x in same_chain if x[1].comment in dop.comments]
    if dop.rule_number is not None:
        return same_chain[dop.rule_number - 1 : dop.rule_number] if dop.rule_number > 0 else []
    spec = (dop.peer_ip, dop.probability, dop.protocol)
    return [x for x in same_chain if (x[1].peer_ip, x[1].probability, x[1].protocol) == spec][:1]
