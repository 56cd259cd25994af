"""Named chaos actors of megatest (``chaos: {action: megatest-..., params}``).

Only the decisions the template kinds cannot express live here; every wait, loop, branch and
object create/delete that a kind can do is a template (``templates/library/megatest``). Every actor
draws its random choices from ``ctx.rng()`` (seeded from the workflow's source), so a seed
reproduces the run. Objects follow the seed's examples (``seeds/megatest-goroutines.ru.md``).

=============================  ====================================================================
action                         does
=============================  ====================================================================
megatest-attach-plan           volume-attacher: picks wantedNodeName among the storage nodes, lists
                               the volume's active RVAs; outputs ``count``, ``wanted``, ``wantedAttached``,
                               ``old`` (an attached node other than wanted), ``victim`` (a random
                               attached node), ``shuffled`` (the storage nodes, shuffled)
megatest-delete-all            deletes every object of a kind (optionally only ``match``-ing fields)
megatest-rvr-destroy           volume-replica-destroyer: deletes a random RVR of the volume (no wait)
megatest-rvr-create            volume-replica-creator: creates an RVR of ``type`` at a free index
megatest-rv-resize             volume-resizer (deferred): grows ``spec.size`` by a random step
megatest-network-block         chaos-network-blocker: CiliumNetworkPolicies of a variant; recover
                               deletes them
megatest-network-degrade       chaos-network-degrader: the iptables / iperf3 Jobs; recover deletes them
megatest-vm-reboot             chaos-vm-reboter: VMOP Restart force, skipping a VM with unfinished VMOPs
=============================  ====================================================================
"""

from __future__ import annotations

import logging
from typing import Any

from actors.base import ActorError, Playground
from actors.chaos_registry import ChaosContext, ObjectRef, register_chaos_actor

log = logging.getLogger("chaosflow.megatest")

STORAGE_API = "storage.deckhouse.io/v1alpha1"
VIRT_API = "virtualization.deckhouse.io/v1alpha2"
CILIUM_API = "cilium.io/v2"
STORAGE_NODE_LABEL = "storage.deckhouse.io/sds-replicated-volume-node"
VM_NAME_LABEL = "vm.kubevirt.internal.virtualization.deckhouse.io/name"
JOB_IMAGE = "krpsh/iperf3:0.1.0"
JOB_NAMESPACE = "default"
#: activeDeadlineSeconds of the Job that removes the iptables rule of an interrupted losses
#: incident (the seed's "del-iptables" Job without its sleep)
RULE_CLEANUP_DEADLINE = 120
RULE_CLEANUP_TTL = 3600
DEL_SUFFIX = "-del-iptables"
#: label (value "true") of the Job that removes the rule of an interrupted losses incident
CLEANUP_LABEL = "megatest.chaosflow.io/iptables-cleanup"
FINISHED_VMOP = ("Failed", "Completed")


def _name(o: dict[str, Any]) -> str:
    return str(o["metadata"]["name"])


def _alive(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((o for o in objs if not (o.get("metadata") or {}).get("deletionTimestamp")), key=_name)


def _field(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _rvas(pg: Playground, cluster: str, rv: str) -> list[dict[str, Any]]:
    objs = pg.list(cluster, STORAGE_API, "ReplicatedVolumeAttachment")
    return _alive([o for o in objs if _field(o, "spec.replicatedVolumeName") == rv])


def _rvrs(pg: Playground, cluster: str, rv: str) -> list[dict[str, Any]]:
    objs = pg.list(cluster, STORAGE_API, "ReplicatedVolumeReplica")
    return _alive([o for o in objs if _field(o, "spec.replicatedVolumeName") == rv])


def _running_vms(pg: Playground, cluster: str, namespace: str) -> list[dict[str, Any]]:
    vms = pg.list(cluster, VIRT_API, "VirtualMachine", namespace)
    return [
        v for v in _alive(vms) if _field(v, "status.phase") == "Running" and _field(v, "status.ipAddress")
    ]


class _Action:
    """Base: one-shot actions (nothing held, nothing to recover)."""

    one_shot = True
    description = ""

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        for r in refs:
            playground.delete(r["cluster"], r["apiVersion"], r["kind"], r.get("namespace"), r["name"])


class AttachPlan(_Action):
    description = "volume-attacher: pick wantedNodeName and read the active RVAs"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        rv = str(params["rv"])
        nodes = sorted(_name(n) for n in playground.list(ctx.cluster, "v1", "Node", None, STORAGE_NODE_LABEL))
        if not nodes:
            raise ActorError(f"no node with label {STORAGE_NODE_LABEL}")
        rng = ctx.rng()
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        wanted = shuffled[0]
        active = sorted(str(_field(a, "spec.nodeName")) for a in _rvas(playground, ctx.cluster, rv))
        others = [n for n in active if n != wanted]
        ctx.outputs.update(
            {
                "rv": rv,
                "wanted": wanted,
                "active": active,
                "count": len(active),
                "wantedAttached": wanted in active,
                "old": others[0] if others else "",
                "victim": rng.choice(active) if active else "",
                "shuffled": shuffled,
            }
        )
        return []


class DeleteAll(_Action):
    description = "delete every object of a kind (chaos start-up cleanup, volume teardown)"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        api, kind = str(params["apiVersion"]), str(params["kind"])
        ns = params.get("namespace")
        match: dict[str, Any] = dict(params.get("match") or {})
        objs = playground.list(ctx.cluster, api, kind, ns or None)
        names: list[str] = []
        for o in objs:
            if all(_field(o, k) == v for k, v in match.items()):
                meta = o["metadata"]
                playground.delete(ctx.cluster, api, kind, meta.get("namespace"), meta["name"])
                names.append(str(meta["name"]))
        ctx.outputs.update({"kind": kind, "deleted": sorted(names), "count": len(names)})
        return []


class RVRDestroy(_Action):
    description = "volume-replica-destroyer: delete a random replica of the volume (no wait)"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        rv = str(params["rv"])
        rvrs = _rvrs(playground, ctx.cluster, rv)
        if not rvrs:
            ctx.outputs.update({"rv": rv, "rvr": "", "result": "no replicas"})
            return []
        victim = ctx.rng().choice(rvrs)
        playground.delete(ctx.cluster, STORAGE_API, "ReplicatedVolumeReplica", None, _name(victim))
        ctx.outputs.update(
            {
                "rv": rv,
                "rvr": _name(victim),
                "type": _field(victim, "spec.type"),
                "node": _field(victim, "spec.nodeName") or "",
            }
        )
        return []


class RVRCreate(_Action):
    description = "volume-replica-creator: create an Access or TieBreaker replica (no wait)"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        rv, rtype = str(params["rv"]), str(params.get("type") or "Access")
        if rtype not in ("Access", "TieBreaker"):
            raise ActorError(f"replica type {rtype!r}: only Access and TieBreaker are created")
        all_rvrs = playground.list(ctx.cluster, STORAGE_API, "ReplicatedVolumeReplica")
        used = {_name(o) for o in all_rvrs}
        free = [i for i in range(32) if f"{rv}-{i}" not in used]
        if not free:
            ctx.outputs.update({"rv": rv, "rvr": "", "type": rtype, "result": "no free index"})
            return []
        name = f"{rv}-{free[0]}"
        playground.create(
            ctx.cluster,
            {
                "apiVersion": STORAGE_API,
                "kind": "ReplicatedVolumeReplica",
                "metadata": {"name": name, "labels": dict(ctx.labels)},
                "spec": {"replicatedVolumeName": rv, "type": rtype},
            },
        )
        ctx.outputs.update({"rv": rv, "rvr": name, "type": rtype})
        return []


def _quantity_bytes(q: Any) -> int:
    s = str(q)
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "k": 1000, "M": 10**6, "G": 10**9}
    for u, f in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * f)
    return int(float(s))


class RVResize(_Action):
    description = "volume-resizer (deferred in the seed): grow spec.size by a random step"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        rv = str(params["rv"])
        obj = playground.get(ctx.cluster, STORAGE_API, "ReplicatedVolume", None, rv)
        if obj is None:
            raise ActorError(f"ReplicatedVolume {rv} not found")
        step = ctx.rng().randint(int(params.get("stepMin", 4096)), int(params.get("stepMax", 65536)))
        size = _quantity_bytes(_field(obj, "spec.size") or 0) + step
        playground.patch(
            ctx.cluster, STORAGE_API, "ReplicatedVolume", None, rv, {"spec": {"size": str(size)}}
        )
        ctx.outputs.update({"rv": rv, "step": step, "size": size})
        return []


def _cnp(
    name: str, namespace: str, a: list[str], b: list[str], ports: list[dict[str, Any]]
) -> dict[str, Any]:
    """The seed's CiliumNetworkPolicy: endpoints of VMs ``a`` deny ``ports`` to/from VMs ``b``,
    keeping traffic with the host, remote nodes and the namespace."""
    sel_a = {"matchExpressions": [{"key": VM_NAME_LABEL, "operator": "In", "values": sorted(a)}]}
    sel_b = {"matchExpressions": [{"key": VM_NAME_LABEL, "operator": "In", "values": sorted(b)}]}
    ns_sel = {"matchLabels": {"io.kubernetes.pod.namespace": namespace}}
    return {
        "apiVersion": CILIUM_API,
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "endpointSelector": sel_a,
            "ingress": [{"fromEntities": ["host", "remote-node"]}, {"fromEndpoints": [ns_sel]}],
            "egress": [{"toEntities": ["host", "remote-node"]}, {"toEndpoints": [ns_sel]}],
            "ingressDeny": [{"fromEndpoints": [sel_b], "toPorts": [{"ports": ports}]}],
            "egressDeny": [{"toEndpoints": [sel_b], "toPorts": [{"ports": ports}]}],
        },
    }


ALL_TCP = [{"port": "1", "endPort": 65535, "protocol": "TCP"}]


def split_groups(vms: list[str], group_size: int) -> tuple[list[str], list[str]]:
    """split-brain groups: ``group_size`` VMs in group A (0 = half, A the larger part)."""
    if group_size > 0:
        k = min(group_size, len(vms) - 1) if len(vms) > 1 else len(vms)
    else:
        k = (len(vms) + 1) // 2
    return vms[:k], vms[k:]


class NetworkBlock:
    description = "chaos-network-blocker: blocking-everything | blocking-drbd | split-brain"
    one_shot = False

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        variant = str(params["variant"])
        ns = str(params["vmNamespace"])
        test = str(params.get("testCluster") or "test")
        rng = ctx.rng()
        vms = [_name(v) for v in _running_vms(playground, ctx.cluster, ns)]
        rng.shuffle(vms)
        if len(vms) < 2:
            raise ActorError(f"{variant}: fewer than two running VMs in {ns}")
        policies: list[dict[str, Any]] = []
        if variant == "blocking-everything":
            pair = vms[:2]
            name = f"deny-all-tcp-between-{'-and-'.join(sorted(pair))}"
            policies.append(_cnp(name, ns, pair, pair, ALL_TCP))
            ctx.outputs.update({"vms": sorted(pair)})
        elif variant == "blocking-drbd":
            vm = vms[0]
            ports = sorted(
                {
                    int(p)
                    for r in playground.list(test, STORAGE_API, "ReplicatedVolumeReplica")
                    if _field(r, "spec.nodeName") == vm
                    for rv in [
                        playground.get(
                            test,
                            STORAGE_API,
                            "ReplicatedVolume",
                            None,
                            str(_field(r, "spec.replicatedVolumeName")),
                        )
                    ]
                    if rv is not None and (p := _field(rv, "status.drbdPort")) is not None
                }
            )
            if not ports:
                ctx.outputs.update({"vm": vm, "ports": [], "result": "no DRBD ports on this VM"})
                return []
            chosen = sorted(rng.sample(ports, min(2, len(ports))))
            name = f"deny-drbd-{'-'.join(map(str, chosen))}-on-{vm}"
            port_rules = [{"port": str(p), "protocol": "TCP"} for p in chosen]
            others = [v for v in vms if v != vm]
            policies.append(_cnp(name, ns, [vm], others, port_rules))
            policies.append(_cnp(f"{name}-peers", ns, others, [vm], port_rules))
            ctx.outputs.update({"vm": vm, "ports": chosen})
        elif variant == "split-brain":
            a, b = split_groups(vms, int(params.get("groupSize") or 0))
            name = "split-brain-" + ctx.name
            policies.append(_cnp(f"{name}-a"[:253], ns, a, b, ALL_TCP))
            policies.append(_cnp(f"{name}-b"[:253], ns, b, a, ALL_TCP))
            ctx.outputs.update({"groupA": sorted(a), "groupB": sorted(b)})
        else:
            raise ActorError(f"unknown network block variant {variant!r}")
        refs: list[ObjectRef] = []
        for p in policies:
            pname = p["metadata"]["name"]
            # the seed: a policy of the same name is deleted before creating
            playground.delete(ctx.cluster, CILIUM_API, "CiliumNetworkPolicy", ns, pname)
            p["metadata"]["labels"] = dict(ctx.labels)
            playground.create(ctx.cluster, p)
            refs.append(
                {
                    "cluster": ctx.cluster,
                    "apiVersion": CILIUM_API,
                    "kind": "CiliumNetworkPolicy",
                    "namespace": ns,
                    "name": pname,
                }
            )
        ctx.outputs.update({"variant": variant, "policies": [r["name"] for r in refs]})
        return refs

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        for r in refs:
            playground.delete(r["cluster"], r["apiVersion"], r["kind"], r.get("namespace"), r["name"])


def _job(name: str, node: str, script: str, lifetime: int, deadline: int | None = None) -> dict[str, Any]:
    """The seed's Job: ttlSecondsAfterFinished incident_lifetime + 4, activeDeadlineSeconds
    incident_lifetime + 2 (or ``deadline``)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": JOB_NAMESPACE},
        "spec": {
            "ttlSecondsAfterFinished": lifetime + 4,
            "backoffLimit": 0,
            "activeDeadlineSeconds": lifetime + 2 if deadline is None else deadline,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "hostNetwork": True,
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "net-tools",
                            "image": JOB_IMAGE,
                            "securityContext": {"privileged": True},
                            "command": ["/bin/sh", "-c"],
                            "args": [script],
                        }
                    ],
                }
            },
        },
    }


def losses_scripts(job: str, peer_ip: str, loss: float, lifetime: int) -> tuple[str, str]:
    add = (
        "set -e\n"
        f"iptables -A INPUT -s {peer_ip} -m statistic --mode random --probability {loss:g} -j DROP "
        f'-m comment --comment "{job}"\n'
        'echo "iptables rule added"\n'
    )
    return add, delete_rule_script(job, lifetime)


def delete_rule_script(comment: str, sleep: int) -> str:
    """The seed's "del-iptables" script: after ``sleep`` seconds (none when 0), delete every
    INPUT rule carrying ``comment`` (the name of the Job that added it)."""
    return (
        "set -e\n" + (f"sleep {sleep}\n" if sleep > 0 else "") + f'COMMENT="{comment}"\n'
        'while iptables -L INPUT --line-numbers | grep -q "$COMMENT"; do\n'
        "  iptables -D INPUT $(iptables -L INPUT --line-numbers | grep -F \"$COMMENT\" | head -n1 | awk '{print $1}')\n"
        "done\n"
    )


def latency_script(peer_ip: str, lifetime: int) -> str:
    return (
        "set -e\n"
        f"timeout {lifetime}s sh -c '\n"
        "  iperf3 -s -D || true\n"
        "  while true;do\n"
        f"    iperf3 -c {peer_ip} -t 60 -i 30 || true\n"
        "    sleep 0.5\n"
        " done\n"
        "' || true\n"
    )


class NetworkDegrade:
    description = "chaos-network-degrader: losses (iptables Jobs) | latency (iperf3 Jobs)"
    one_shot = False

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        variant = str(params["variant"])
        ns = str(params["vmNamespace"])
        parent = str(params.get("parentCluster") or "parent")
        lifetime = int(params["lifetime"])
        rng = ctx.rng()
        vms = _running_vms(playground, parent, ns)
        rng.shuffle(vms)
        if len(vms) < 2:
            raise ActorError(f"{variant}: fewer than two running VMs in {ns}")
        a, b = vms[0], vms[1]
        pairs = [
            (_name(a), str(_field(b, "status.ipAddress"))),
            (_name(b), str(_field(a, "status.ipAddress"))),
        ]
        jobs: list[dict[str, Any]] = []
        for node, peer_ip in pairs:
            if variant == "losses":
                add_name = f"{node}-add-iptables"
                add, delete = losses_scripts(add_name, peer_ip, float(params.get("loss", 0.01)), lifetime)
                jobs.append(_job(add_name, node, add, lifetime))
                jobs.append(_job(f"{node}-del-iptables", node, delete, lifetime))
            elif variant == "latency":
                jobs.append(_job(f"{node}-iperf3", node, latency_script(peer_ip, lifetime), lifetime))
            else:
                raise ActorError(f"unknown network degrade variant {variant!r}")
        refs: list[ObjectRef] = []
        for j in jobs:
            jname = j["metadata"]["name"]
            # the seed: a Job of the same name is deleted before creating
            playground.delete(ctx.cluster, "batch/v1", "Job", JOB_NAMESPACE, jname)
            j["metadata"]["labels"] = dict(ctx.labels)
            playground.create(ctx.cluster, j)
            refs.append(
                {
                    "cluster": ctx.cluster,
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "namespace": JOB_NAMESPACE,
                    "name": jname,
                }
            )
        ctx.outputs.update(
            {
                "variant": variant,
                "vms": [pairs[0][0], pairs[1][0]],
                "lifetime": lifetime,
                "jobs": [r["name"] for r in refs],
            }
        )
        return refs

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        """Deletes the Jobs. Deleting a Job does not undo what it did on the host, so a losses
        incident whose "del-iptables" Job has not succeeded (interrupted, or its pod started too
        late for its ``activeDeadlineSeconds``) gets that Job replaced by an immediate one (the
        same script without the sleep) before anything is deleted; until that one succeeded this
        raises, and the engine calls recover again with backoff."""
        others = [r for r in refs if not r["name"].endswith(DEL_SUFFIX)]
        for r in others:  # the add-iptables / iperf3 Jobs first: no rule is added after this
            playground.delete(r["cluster"], r["apiVersion"], r["kind"], r.get("namespace"), r["name"])
        pending = [
            r["name"]
            for r in refs
            if r["name"].endswith(DEL_SUFFIX) and not _rule_removed(playground, r, ctx.labels)
        ]
        if pending:
            raise ActorError(f"waiting for the iptables rule cleanup Job(s) {', '.join(pending)} to succeed")
        for r in refs:
            if r["name"].endswith(DEL_SUFFIX):
                playground.delete(r["cluster"], r["apiVersion"], r["kind"], r.get("namespace"), r["name"])


def _job_done(job: dict[str, Any]) -> str | None:
    """The outcome of a Job: "succeeded", "failed" or None (still running, or not started)."""
    status = job.get("status") or {}
    if int(status.get("succeeded") or 0) > 0:
        return "succeeded"
    for c in status.get("conditions") or []:
        if c.get("type") in ("Complete", "SuccessCriteriaMet") and c.get("status") == "True":
            return "succeeded"
        if c.get("type") in ("Failed", "FailureTarget") and c.get("status") == "True":
            return "failed"
    if int(status.get("failed") or 0) > 0:
        return "failed"
    return None


def _rule_removed(playground: Playground, ref: ObjectRef, labels: dict[str, str]) -> bool:
    """Whether the iptables rule of this "del-iptables" Job is known to be gone; if not, makes
    sure an immediate cleanup Job (same name, labelled CLEANUP_LABEL) is on its way."""
    cluster, ns, name = ref["cluster"], ref.get("namespace") or JOB_NAMESPACE, ref["name"]
    job = playground.get(cluster, "batch/v1", "Job", ns, name)
    done = _job_done(job) if job is not None else None
    if done == "succeeded":
        return True  # the seed's Job (after its sleep) or our cleanup Job removed the rule
    ours = (((job or {}).get("metadata") or {}).get("labels") or {}).get(CLEANUP_LABEL) == "true"
    if job is not None and (done == "failed" or not ours):
        # the seed's Job, still sleeping or failed (e.g. activeDeadlineSeconds), or a failed
        # cleanup Job: replace it
        if not playground.delete(cluster, "batch/v1", "Job", ns, name):
            return False  # still terminating: next attempt
        job = None
    if job is None:
        node = name[: -len(DEL_SUFFIX)]
        cleanup = _job(name, node, delete_rule_script(f"{node}-add-iptables", 0), 0, RULE_CLEANUP_DEADLINE)
        cleanup["metadata"]["labels"] = {**labels, CLEANUP_LABEL: "true"}
        # kept after it finished until recover deleted it (a ttl-collected one would look missing)
        cleanup["spec"]["ttlSecondsAfterFinished"] = RULE_CLEANUP_TTL
        log.info(
            "megatest: the iptables rule of an interrupted losses incident is removed by a Job",
            extra={"job": name, "node": node},
        )
        playground.create(cluster, cleanup)
    return False


class VMReboot(_Action):
    description = "chaos-vm-reboter: VirtualMachineOperation Restart (force) of a random VM"

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        ns = str(params["vmNamespace"])
        rng = ctx.rng()
        vms = [_name(v) for v in _running_vms(playground, ctx.cluster, ns)]
        if not vms:
            raise ActorError(f"no running VM in {ns}")
        rng.shuffle(vms)
        vm = vms[0]
        ops = [
            o
            for o in playground.list(ctx.cluster, VIRT_API, "VirtualMachineOperation", ns)
            if _field(o, "spec.virtualMachineName") == vm
        ]
        finished = [o for o in ops if _field(o, "status.phase") in FINISHED_VMOP]
        if len(ops) != len(finished):
            unfinished = sorted(_name(o) for o in ops if o not in finished)
            log.info(
                "megatest vm has unfinished VirtualMachineOperations; skipped",
                extra={"vm": vm, "vmops": unfinished},
            )
            ctx.outputs.update({"vm": vm, "skipped": True, "unfinished": unfinished})
            return []
        suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = f"megatest-chaos-restart-{suffix}"
        playground.create(
            ctx.cluster,
            {
                "apiVersion": VIRT_API,
                "kind": "VirtualMachineOperation",
                "metadata": {"name": name, "namespace": ns, "labels": dict(ctx.labels)},
                "spec": {"type": "Restart", "force": True, "virtualMachineName": vm},
            },
        )
        ctx.outputs.update({"vm": vm, "skipped": False, "vmop": name})
        return []


ACTORS: dict[str, Any] = {
    "megatest-attach-plan": AttachPlan(),
    "megatest-delete-all": DeleteAll(),
    "megatest-rvr-destroy": RVRDestroy(),
    "megatest-rvr-create": RVRCreate(),
    "megatest-rv-resize": RVResize(),
    "megatest-network-block": NetworkBlock(),
    "megatest-network-degrade": NetworkDegrade(),
    "megatest-vm-reboot": VMReboot(),
}


def register() -> None:
    """Register megatest's actors in this process (idempotent)."""
    for name, actor in ACTORS.items():
        register_chaos_actor(name, actor, replace=True)


register()
