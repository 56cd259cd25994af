"""megatest flags -> a Workflow: every goroutine of the seed is a template subtree.

Template names follow the seed's goroutines (``multivolume``, ``volume-main``, ``volume-attacher``,
``volume-checker``, ``pod-destroyer-agent``, ``chaos-network-blocker``, ...); descriptions quote
the seed's intent. Decisions the kinds cannot express are named chaos actors (``actors/megatest.py``).
"""

from __future__ import annotations

from typing import Any

import actors.megatest  # noqa: F401  (registers the megatest chaos actors)
from actors.megatest import JOB_NAMESPACE
from engine.duration import format_duration
from engine.model import Workflow
from templates.library.megatest.options import MegatestOptions

TEST = "test"
PARENT = "parent"
STORAGE_API = "storage.deckhouse.io/v1alpha1"
CONTROL_PLANE_NS = "d8-sds-replicated-volume"
ROLE_LABEL = "megatest.chaosflow.io/role"
RV = "{{ workflow.parameters.rv }}"
#: how long one attach / detach / delete may take before the action counts as failed
ACTION_TIMEOUT = "5m"
#: volume-attacher's random wait (the seed: volume-attacher(rv, 30, 60))
ATTACHER_PERIOD = (30, 60)
#: volume-replica-destroyer / -creator periods (the seed: (rv, 30, 300))
REPLICA_PERIOD = (30, 300)
#: volume-resizer (deferred): (rv, 50, 50, 4kb, 64kb)
RESIZER = (50, 50, 4096, 65536)
#: the label the controller puts on every RVR: the name of its RV (``LabelReplicatedVolume``)
RVR_RV_LABEL = "sds-replicated-volume.deckhouse.io/replicated-volume"


def _d(seconds: float) -> str:
    return format_duration(seconds)


def _range(lo: float, hi: float) -> dict[str, str] | str:
    return _d(lo) if lo == hi else {"min": _d(lo), "max": _d(hi)}


def _t(name: str, kind: str, description: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "templateType": kind, "description": description, **fields}


def _chaos(
    name: str, description: str, action: str, params: dict[str, Any], cluster: str = TEST, **fields: Any
) -> dict[str, Any]:
    return _t(
        name, "Chaos", description, chaos={"cluster": cluster, "action": action, "params": params}, **fields
    )


def _suspend(name: str, description: str, duration: Any) -> dict[str, Any]:
    return _t(name, "Suspend", description, duration=duration)


def _forever(name: str, description: str, child: str) -> dict[str, Any]:
    """A goroutine's ``for {}``: until stopped (by its parent / the workflow's deadline); a failed
    iteration is counted and the loop goes on."""
    return _t(name, "Loop", description, loop={"child": child, "continueOnFailure": True, "historyLimit": 5})


def _rva(node_expr: str) -> dict[str, Any]:
    return {
        "apiVersion": STORAGE_API,
        "kind": "ReplicatedVolumeAttachment",
        "metadata": {"name": f"rva-{RV}-{{{{ {node_expr} }}}}"},
        "spec": {"replicatedVolumeName": RV, "nodeName": f"{{{{ {node_expr} }}}}"},
    }


_RVA_READY = "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"


def _publish(name: str, node_expr: str, what: str) -> dict[str, Any]:
    return _t(
        name,
        "Resource",
        f"publish {what}: create its RVA and wait for Ready=True (Attached and ReplicaReady)",
        resource={
            "cluster": TEST,
            "action": "create",
            "manifest": _rva(node_expr),
            "successCondition": _RVA_READY,
            "timeout": ACTION_TIMEOUT,
        },
    )


def _unpublish(name: str, node_expr: str, what: str) -> dict[str, Any]:
    return _t(
        name,
        "Resource",
        f"unpublish {what}: delete its RVA (if it exists) and wait until it is gone "
        "(rv.status.actuallyAttachedTo no longer contains the node)",
        resource={
            "cluster": TEST,
            "action": "delete",
            "manifest": _rva(node_expr),
            "waitForDeletion": True,
            "timeout": ACTION_TIMEOUT,
        },
    )


PLAN = "nodes['volume-attacher-plan'].outputs"


def volume_templates(o: MegatestOptions) -> list[dict[str, Any]]:
    a_lo, a_hi = ATTACHER_PERIOD
    r_lo, r_hi = REPLICA_PERIOD
    # the seed's start order: volume-attacher, volume-resizer, volume-replica-destroyer,
    # volume-replica-creator; volume-attacher lives in volume-lifetime (stopped before the RV is
    # deleted), the others next to it (stopped after)
    workers = ["volume-lifetime"]
    if o.enable_volume_resizer:
        workers.append("volume-resizer")
    if o.enable_volume_replica_destroyer:
        workers.append("volume-replica-destroyer")
    if o.enable_volume_replica_creator:
        workers.append("volume-replica-creator")
    ts: list[dict[str, Any]] = [
        _t(
            "volume-main",
            "Serial",
            "volume-main(rv, sc, lifetime_period): choose how many nodes to publish at once and which; "
            "action 'create rv'; start volume-attacher, volume-resizer, volume-replica-destroyer and "
            "volume-replica-creator; wait until the RV is ready; start volume-checker. On the end "
            "signal or when lifetime_period expires (ready or not): stop volume-checker and "
            "volume-attacher, action 'delete rv' and wait for success, then stop volume-resizer, "
            "volume-replica-destroyer and volume-replica-creator; exit",
            children=[
                "volume-create-rv",
                "volume-initial-attachments",
                "volume-goroutines",
            ],
            onExit="volume-teardown",
        ),
        _t(
            "volume-create-rv",
            "Resource",
            "action 'create rv': the ReplicatedVolume of the chosen storage class",
            resource={
                "cluster": TEST,
                "action": "create",
                "manifest": {
                    "apiVersion": STORAGE_API,
                    "kind": "ReplicatedVolume",
                    "metadata": {"name": RV, "labels": {"megatest.chaosflow.io/rv": RV}},
                    "spec": {"size": "1Gi", "replicatedStorageClassName": "{{ workflow.parameters.sc }}"},
                },
            },
        ),
        _t(
            "volume-initial-attachments",
            "Switch",
            "how many nodes are published at once (the initial state; not maintained later): "
            "0 - 30%, 1 - 60%, 2 - 10%",
            switch={
                "weights": [
                    {"weight": 30},
                    {"target": "volume-attach-one", "weight": 60},
                    {"target": "volume-attach-two", "weight": 10},
                ]
            },
        ),
        _t(
            "volume-attach-one",
            "Serial",
            "publish one random node",
            children=["volume-initial-plan", "volume-initial-rva-0"],
        ),
        _t(
            "volume-attach-two",
            "Serial",
            "publish two random nodes",
            children=["volume-initial-plan", "volume-initial-rva-0", "volume-initial-rva-1"],
        ),
        _chaos("volume-initial-plan", "choose the nodes at random", "megatest-attach-plan", {"rv": RV}),
        *(
            _t(
                f"volume-initial-rva-{i}",
                "Resource",
                "create an RVA for a chosen node (its readiness is not awaited here)",
                resource={
                    "cluster": TEST,
                    "action": "create",
                    "manifest": _rva(f"nodes['volume-initial-plan'].outputs.shuffled[{i}]"),
                },
            )
            for i in (0, 1)
        ),
        _t(
            "volume-goroutines",
            "Parallel",
            "right after 'create rv' (the RV need not be ready yet) start: volume-attacher (in "
            "volume-lifetime), volume-resizer, volume-replica-destroyer, volume-replica-creator; "
            "when volume-lifetime ends (the RV is deleted), the resizer, destroyer and creator are stopped",
            children=workers,
            endWith=["volume-lifetime"],
        ),
        _t(
            "volume-lifetime",
            "Serial",
            "until lifetime_period expires: volume-attacher, and volume-checker once the RV is ready; "
            "then delete the RV (all RVAs first) and wait",
            children=["volume-watch", "volume-teardown"],
        ),
        _t(
            "volume-watch",
            "Parallel",
            "the lifetime timer, volume-attacher, and the ready wait followed by volume-checker; "
            "when lifetime_period expires the attacher and the checker (or the ready wait, if the RV "
            "never became ready) are stopped",
            children=["volume-lifetime-timer", "volume-attacher", "volume-ready-then-check"],
            endWith=["volume-lifetime-timer"],
        ),
        _suspend(
            "volume-lifetime-timer",
            "lifetime_period of the RV, counted from its creation",
            "{{ workflow.parameters.lifetime }}",
        ),
        _t(
            "volume-ready-then-check",
            "Serial",
            "wait until the RV is ready, then start volume-checker",
            children=["volume-wait-ready", "volume-checker"],
        ),
        _t(
            "volume-wait-ready",
            "Wait",
            "wait until the RV is ready: IOReady=True and Quorum=True (no timeout of its own: the "
            "lifetime ends it)",
            wait={
                "objects": {
                    "rv": {
                        "cluster": TEST,
                        "apiVersion": STORAGE_API,
                        "kind": "ReplicatedVolume",
                        "namespace": "",
                        "name": RV,
                    }
                },
                "condition": "rv != null && rv.status.conditions.exists(c, c.type == 'IOReady' && c.status == 'True')"
                " && rv.status.conditions.exists(c, c.type == 'Quorum' && c.status == 'True')",
            },
        ),
        _t(
            "volume-checker",
            "Parallel",
            "volume-checker(rv): collects the RV's state transitions from its conditions (watch, no "
            "polling) and logs every replica condition that turns False; exits on the end signal",
            children=["volume-checker-rv", "volume-checker-rvrs"],
        ),
        _t(
            "volume-checker-rv",
            "StatusCheck",
            "watches that IOReady and Quorum stay True (they start True) and counts their "
            "transitions, logged with Reason and Message: even = the RV held, odd = the attempts to "
            "break it succeeded",
            statusCheck={
                "mode": "Continuous",
                "type": "Kubernetes",
                "intervalSeconds": 10,
                "failureThreshold": 0,
                "recordsHistoryLimit": 50,
                "kubernetes": {
                    "cluster": TEST,
                    "apiVersion": STORAGE_API,
                    "kind": "ReplicatedVolume",
                    "name": RV,
                    "conditions": [
                        {"type": "IOReady", "status": "True"},
                        {"type": "Quorum", "status": "True"},
                    ],
                },
            },
        ),
        _t(
            "volume-checker-rvrs",
            "Wait",
            "watches the RV's replicas (label replicated-volume=rv): every change is observed and a "
            "condition of an rvr that turns False (and back) is logged (not Attached: it follows the "
            "attacher); never holds, ends with the checker",
            wait={
                "objects": {
                    "rvrs": {
                        "cluster": TEST,
                        "apiVersion": STORAGE_API,
                        "kind": "ReplicatedVolumeReplica",
                        "namespace": "",
                        "labelSelector": f"{RVR_RV_LABEL}={RV}",
                    }
                },
                "condition": "false",
            },
        ),
        _forever(
            "volume-attacher",
            "volume-attacher(rv, 30, 60): emulates CSI publishing the RV on different nodes through RVAs",
            "volume-attacher-step",
        ),
        _t(
            "volume-attacher-step",
            "Serial",
            "wait at random, pick wantedNodeName among the storage nodes, run a cycle by the number of active RVAs",
            children=["volume-attacher-wait", "volume-attacher-plan", "volume-attacher-cycle"],
        ),
        _suspend("volume-attacher-wait", "wait at random", _range(a_lo, a_hi)),
        _chaos(
            "volume-attacher-plan",
            "pick wantedNodeName (a node labelled sds-replicated-volume) and count the active RVAs",
            "megatest-attach-plan",
            {"rv": RV},
        ),
        _t(
            "volume-attacher-cycle",
            "Switch",
            "by the number of active RVAs: 0 -> normal (90%) or attach (10%); 1 -> migration when "
            "wantedNodeName is not attached, else detach; 2 (the controller fell and rose) -> detach a random RVA",
            switch={
                "cases": [
                    {"when": f"{PLAN}.count == 0", "target": "volume-attacher-from-0"},
                    {
                        "when": f"{PLAN}.count == 1 && !{PLAN}.wantedAttached",
                        "target": "volume-attacher-migration-cycle",
                    },
                    {"when": f"{PLAN}.count == 1", "target": "volume-attacher-detach-cycle"},
                ],
                "default": "volume-attacher-detach-random-cycle",
            },
        ),
        _t(
            "volume-attacher-from-0",
            "Switch",
            "0 nodes: rand(100) > 10 - normal cycle (0 nodes after), otherwise attach cycle (1 node after)",
            switch={
                "weights": [
                    {"target": "volume-attacher-normal-cycle", "weight": 90},
                    {"target": "volume-attacher-attach-cycle", "weight": 10},
                ]
            },
        ),
        _t(
            "volume-attacher-normal-cycle",
            "Serial",
            "normal cycle: publish wantedNodeName, wait at random, unpublish it",
            children=[
                "volume-attacher-publish-wanted",
                "volume-attacher-hold",
                "volume-attacher-unpublish-wanted",
            ],
        ),
        _t(
            "volume-attacher-attach-cycle",
            "Serial",
            "attach cycle: only publish wantedNodeName",
            children=["volume-attacher-publish-wanted"],
        ),
        _t(
            "volume-attacher-detach-cycle",
            "Serial",
            "detach cycle: unpublish wantedNodeName",
            children=["volume-attacher-unpublish-wanted"],
        ),
        _t(
            "volume-attacher-detach-random-cycle",
            "Serial",
            "2 nodes: detach cycle on a random RVA (1 node after)",
            children=["volume-attacher-unpublish-victim"],
        ),
        _t(
            "volume-attacher-migration-cycle",
            "Serial",
            "migration emulation: publish the new node, unpublish the old one, wait at random, unpublish the new one",
            children=[
                "volume-attacher-publish-wanted",
                "volume-attacher-unpublish-old",
                "volume-attacher-hold",
                "volume-attacher-unpublish-wanted",
            ],
        ),
        _suspend("volume-attacher-hold", "wait at random", _range(a_lo, a_hi)),
        _publish("volume-attacher-publish-wanted", f"{PLAN}.wanted", "wantedNodeName"),
        _unpublish("volume-attacher-unpublish-wanted", f"{PLAN}.wanted", "wantedNodeName"),
        _unpublish("volume-attacher-unpublish-old", f"{PLAN}.old", "the old node"),
        _unpublish("volume-attacher-unpublish-victim", f"{PLAN}.victim", "a random attached node"),
        _t(
            "volume-teardown",
            "Serial",
            "unpublish: delete all RVAs of the RV and wait; then delete the RV and wait until it is gone",
            children=["volume-delete-rvas", "volume-wait-rvas-gone", "volume-delete-rv"],
        ),
        _chaos(
            "volume-delete-rvas",
            "delete all RVAs of this RV",
            "megatest-delete-all",
            {
                "apiVersion": STORAGE_API,
                "kind": "ReplicatedVolumeAttachment",
                "match": {"spec.replicatedVolumeName": RV},
            },
        ),
        _t(
            "volume-wait-rvas-gone",
            "Wait",
            "wait until no RVA of this RV is left",
            wait={
                "objects": {
                    "rvas": {
                        "cluster": TEST,
                        "apiVersion": STORAGE_API,
                        "kind": "ReplicatedVolumeAttachment",
                        "namespace": "",
                    }
                },
                "condition": f"!rvas.exists(a, a.spec.replicatedVolumeName == '{RV}')",
                "timeout": ACTION_TIMEOUT,
            },
        ),
        _t(
            "volume-delete-rv",
            "Resource",
            "action 'delete rv': delete the RV and wait for success",
            resource={
                "cluster": TEST,
                "action": "delete",
                "manifest": {"apiVersion": STORAGE_API, "kind": "ReplicatedVolume", "metadata": {"name": RV}},
                "waitForDeletion": True,
                "timeout": "10m",
            },
        ),
    ]
    if o.enable_volume_replica_destroyer:
        ts += [
            _forever(
                "volume-replica-destroyer",
                "volume-replica-destroyer(rv, 30, 300): deletes random replicas of the RV",
                "volume-replica-destroyer-step",
            ),
            _t(
                "volume-replica-destroyer-step",
                "Serial",
                "wait at random, delete a random rvr without waiting for success",
                children=["volume-replica-destroyer-wait", "volume-replica-destroy"],
            ),
            _suspend("volume-replica-destroyer-wait", "wait at random", _range(r_lo, r_hi)),
            _chaos(
                "volume-replica-destroy",
                "delete a random rvr of the RV (no wait)",
                "megatest-rvr-destroy",
                {"rv": RV},
            ),
        ]
    if o.enable_volume_replica_creator:
        ts += [
            _forever(
                "volume-replica-creator",
                "volume-replica-creator(rv, 30, 300): creates random replicas (Access or TieBreaker; "
                "no Diskful: there is no remover of extra diskful replicas yet)",
                "volume-replica-creator-step",
            ),
            _t(
                "volume-replica-creator-step",
                "Serial",
                "wait at random, create an rvr of a random type without waiting for success",
                children=["volume-replica-creator-wait", "volume-replica-create"],
            ),
            _suspend("volume-replica-creator-wait", "wait at random", _range(r_lo, r_hi)),
            _chaos(
                "volume-replica-create",
                "create an rvr of type Access or TieBreaker (no wait)",
                "megatest-rvr-create",
                {"rv": RV, "type": "{{ pick(['Access', 'TieBreaker']) }}"},
            ),
        ]
    if o.enable_volume_resizer:
        p_lo, p_hi, s_lo, s_hi = RESIZER
        ts += [
            _forever(
                "volume-resizer",
                "volume-resizer(rv, 50, 50, 4kb, 64kb) - DEFERRED in the seed (ОТЛОЖЕНО): grows the RV; "
                "TODO: never beyond maxRvSize; the controller may grow more than requested",
                "volume-resizer-step",
            ),
            _t(
                "volume-resizer-step",
                "Serial",
                "wait, then resize",
                children=["volume-resizer-wait", "volume-resize"],
            ),
            _suspend("volume-resizer-wait", "wait at random", _range(p_lo, p_hi)),
            _chaos(
                "volume-resize",
                "grow spec.size by a random step in the range",
                "megatest-rv-resize",
                {"rv": RV, "stepMin": s_lo, "stepMax": s_hi},
            ),
        ]
    return ts


def _pod_destroyer(app: str, pods: tuple[int, int], period: tuple[int, int]) -> list[dict[str, Any]]:
    n = f"pod-destroyer-{app}"
    return [
        _forever(
            n,
            f"pod-destroyer({app}, {pods[0]}, {pods[1]}, {period[0]}, {period[1]}): deletes control-plane "
            "pods by label selector, not waiting for the deletion",
            f"{n}-step",
        ),
        _t(n + "-step", "Serial", "wait at random, then delete pods", children=[f"{n}-wait", f"{n}-kill"]),
        _suspend(f"{n}-wait", "rand(period_min, period_max)", _range(*period)),
        _chaos(
            f"{n}-kill",
            f"shuffle the pods labelled app={app} (status not looked at), delete rand(pod_min, pod_max) of them",
            "pod-kill",
            {
                "namespace": CONTROL_PLANE_NS,
                "selector": {"app": app},
                "count": f"{{{{ randInt({pods[0]}, {pods[1]}) }}}}",
            },
        ),
    ]


def chaos_templates(o: MegatestOptions) -> list[dict[str, Any]]:
    ns = o.vm_ns
    period = _range(o.chaos_period_min, o.chaos_period_max)
    incident = _range(o.chaos_incident_min, o.chaos_incident_max)
    ts: list[dict[str, Any]] = [
        _t(
            "chaos-startup-cleanup",
            "Serial",
            "at start-up, remove leftovers of earlier runs: every CiliumNetworkPolicy in the parent "
            "cluster, every Job in the nested cluster's Job namespace (where the chaos Jobs run)",
            children=["chaos-cleanup-policies", "chaos-cleanup-jobs"],
        ),
        _chaos(
            "chaos-cleanup-policies",
            "delete all CiliumNetworkPolicies in the parent cluster",
            "megatest-delete-all",
            {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "namespace": ns},
            cluster=PARENT,
        ),
        _chaos(
            "chaos-cleanup-jobs",
            "delete all Jobs in the nested cluster's Job namespace (not the system namespaces' Jobs)",
            "megatest-delete-all",
            {"apiVersion": "batch/v1", "kind": "Job", "namespace": JOB_NAMESPACE},
        ),
    ]
    if o.enable_chaos_network_block:
        variants = [("blocking-everything", 30), ("blocking-drbd", 30), ("split-brain", 40)]
        ts += [
            _forever(
                "chaos-network-blocker",
                "chaos-network-blocker(period, incident, group_size): blocks the network between VMs of "
                "the nested cluster with CiliumNetworkPolicies in the parent, keeping parent<->nested traffic",
                "chaos-network-blocker-step",
            ),
            _t(
                "chaos-network-blocker-step",
                "Serial",
                "wait at random, then an incident",
                children=["chaos-network-blocker-wait", "chaos-network-blocker-incident"],
            ),
            _suspend("chaos-network-blocker-wait", "rand(period_min, period_max)", period),
            _t(
                "chaos-network-blocker-incident",
                "Switch",
                "rand(100) <= 30: blocking-everything; <= 60: blocking-drbd; else split-brain",
                switch={"weights": [{"target": f"chaos-{v}", "weight": w} for v, w in variants]},
            ),
        ]
        descr = {
            "blocking-everything": "the first two of the shuffled VMs: block all TCP between them",
            "blocking-drbd": "the first VM: block a random pair of the DRBD ports of its RVs",
            "split-brain": "split the VMs in two groups (group_size, or half with the larger part in A) "
            "and block all TCP between the groups",
        }
        for v, _w in variants:
            ts.append(
                _chaos(
                    f"chaos-{v}",
                    descr[v] + "; held for rand(incident_min, incident_max), then the policy is deleted",
                    "megatest-network-block",
                    {
                        "variant": v,
                        "vmNamespace": ns,
                        "groupSize": o.chaos_partition_group_size,
                        "testCluster": TEST,
                    },
                    cluster=PARENT,
                    duration=incident,
                )
            )
    if o.enable_chaos_network_degrade:
        lo, hi = int(o.chaos_incident_min), int(o.chaos_incident_max)
        ts += [
            _forever(
                "chaos-network-degrader",
                "chaos-network-degrader(period, incident, loss_percent): latency and packet loss between "
                "a pair of VMs with privileged hostNetwork Jobs in the nested cluster (not tc: it does not "
                "get along with cilium)",
                "chaos-network-degrader-step",
            ),
            _t(
                "chaos-network-degrader-step",
                "Serial",
                "wait at random, then an incident",
                children=["chaos-network-degrader-wait", "chaos-network-degrader-incident"],
            ),
            _suspend("chaos-network-degrader-wait", "rand(period_min, period_max)", period),
            _t(
                "chaos-network-degrader-incident",
                "Switch",
                "rand(100) <= 50: losses; else latency",
                parameters={"lifetime": f"{{{{ randInt({lo}, {hi}) }}}}"},
                switch={
                    "weights": [
                        {"target": "chaos-losses", "weight": 50},
                        {"target": "chaos-latency", "weight": 50},
                    ]
                },
            ),
            _chaos(
                "chaos-losses",
                "two Jobs per VM: add an iptables DROP rule with the loss probability for the other VM's IP; "
                "remove it after incident_lifetime",
                "megatest-network-degrade",
                {
                    "variant": "losses",
                    "vmNamespace": ns,
                    "loss": o.chaos_loss_percent,
                    "lifetime": "{{ inputs.parameters.lifetime }}",
                    "parentCluster": PARENT,
                },
                duration="{{ string(inputs.parameters.lifetime + 5) + 's' }}",
            ),
            _chaos(
                "chaos-latency",
                "a Job per VM running iperf3 against the other VM for incident_lifetime",
                "megatest-network-degrade",
                {
                    "variant": "latency",
                    "vmNamespace": ns,
                    "lifetime": "{{ inputs.parameters.lifetime }}",
                    "parentCluster": PARENT,
                },
                duration="{{ string(inputs.parameters.lifetime + 5) + 's' }}",
            ),
        ]
    if o.enable_chaos_vm_reboot:
        lo, hi = int(o.chaos_period_min), int(o.chaos_period_max)
        ts += [
            _forever(
                "chaos-vm-reboter",
                "chaos-vm-reboter(period): hard reboot of random VMs through VirtualMachineOperations",
                "chaos-vm-reboter-step",
            ),
            _t(
                "chaos-vm-reboter-step",
                "Serial",
                "wait at random (at least 5-6 minutes), then reboot",
                children=["chaos-vm-reboter-wait", "chaos-vm-reboot"],
            ),
            _t(
                "chaos-vm-reboter-wait",
                "Suspend",
                "rand(period_min, period_max); a period under 5 minutes becomes rand(5m, 6m)",
                parameters={"period": f"{{{{ randInt({lo}, {hi}) }}}}"},
                duration="{{ string(inputs.parameters.period < 300 ? randInt(300, 360) : inputs.parameters.period) + 's' }}",
            ),
            _chaos(
                "chaos-vm-reboot",
                "the first VM of the shuffled list: skipped (and logged) when it has unfinished "
                "VirtualMachineOperations, else a VMOP Restart with force; completion is not awaited",
                "megatest-vm-reboot",
                {"vmNamespace": ns},
                cluster=PARENT,
            ),
        ]
    return ts


def _annotations(o: MegatestOptions) -> dict[str, str]:
    """The Workflow's annotations; on the sim, ``chaosflow.io/sim-world`` asks the local runners
    (``chaosflow run``/``resume``/``cron``) to build the replicated-volume world it plays in."""
    out = {"megatest.chaosflow.io/storage-classes": ",".join(o.storage_classes)}
    if o.sim:
        from engine.simworld import ANNOTATION_SIM_WORLD, SIM_WORLD_RV, SimWorldRequest

        req = SimWorldRequest(
            SIM_WORLD_RV, tuple(o.storage_classes), o.sim_storage_nodes, o.vm_ns, tuple(o.sim_bugs)
        )
        out[ANNOTATION_SIM_WORLD] = req.annotation()
    return out


def build_workflow(o: MegatestOptions) -> Workflow:
    goroutines: list[str] = []
    ts: list[dict[str, Any]] = []
    if o.enable_pod_destroyer:
        goroutines += ["pod-destroyer-agent", "pod-destroyer-controller"]
        ts += _pod_destroyer("agent", (1, 2), (30, 60)) + _pod_destroyer("controller", (1, 3), (30, 60))
    goroutines.append("volume-spawner")
    for flag, name in (
        (o.enable_chaos_network_block, "chaos-network-blocker"),
        (o.enable_chaos_network_degrade, "chaos-network-degrader"),
        (o.enable_chaos_vm_reboot, "chaos-vm-reboter"),
    ):
        if flag:
            goroutines.append(name)
    entry_children = (["chaos-startup-cleanup"] if o.chaos else []) + ["multivolume"]
    sc_list = ", ".join(f"'{s.split(':')[0]}'" for s in o.storage_classes)
    head = [
        _t(
            "megatest",
            "Serial",
            "megatest: chaos start-up cleanup, then multivolume until --duration",
            children=entry_children,
        ),
        _t(
            "multivolume",
            "Parallel",
            "multivolume(sc, max_vol, step, step_period, vol_period): the goroutines' orchestrator (main); "
            "the end signal (--duration) stops everything it started",
            children=goroutines,
        ),
        _forever(
            "volume-spawner",
            "in a loop: if fewer than max_vol volume-main run, start rand(step_min, step_max) of them "
            "(may exceed max_vol); wait rand(step_period_min, step_period_max)",
            "volume-spawner-step",
        ),
        _t(
            "volume-spawner-step",
            "Serial",
            "spawn when below max_vol, then wait",
            children=["volume-spawner-check", "volume-spawner-wait"],
        ),
        _t(
            "volume-spawner-check",
            "Switch",
            "the number of running volume-main < max_vol?",
            switch={
                "cases": [
                    {
                        "when": f'countWorkflows({{"chaosflow.io/parent-workflow": workflow.name, "{ROLE_LABEL}": "volume"}}, '
                        f'"Running") < {o.max_volumes}',
                        "target": "volume-spawn-step",
                    }
                ]
            },
        ),
        _t(
            "volume-spawn-step",
            "Loop",
            "rand(step_min, step_max) times: start a volume-main",
            parameters={"n": f"{{{{ randInt({o.volume_step_min}, {o.volume_step_max}) }}}}"},
            loop={"child": "volume-spawn", "while": "iteration.index < inputs.parameters.n"},
        ),
        _t(
            "volume-spawn",
            "Workflow",
            "a random scName, a random vol_period and a random rvName: start volume-main(rvName, scName, vol_period)",
            workflow={
                "from": "volume-main",
                # named after the running megatest: node names restart in every run, so a later or
                # overlapping megatest in the same namespace would meet this one's volume workflows
                "name": "{{ workflow.name }}-vol",
                "wait": False,
                "stopWithParent": True,
                "labels": {ROLE_LABEL: "volume"},
                "parameters": {
                    "rv": "{{ 'mt-' + string(randInt(100000, 999999)) }}",
                    "sc": f"{{{{ pick([{sc_list}]) }}}}",
                    "lifetime": f"{{{{ string(randInt({int(o.volume_period_min)}, {int(o.volume_period_max)})) + 's' }}}}",
                },
            },
        ),
        _suspend(
            "volume-spawner-wait",
            "rand(step_period_min, step_period_max)",
            _range(o.step_period_min, o.step_period_max),
        ),
    ]
    ts = head + ts + volume_templates(o) + (chaos_templates(o) if o.chaos else [])
    doc = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": o.name,
            "labels": {ROLE_LABEL: "main"},
            "annotations": _annotations(o),
        },
        "spec": {
            "entry": "megatest",
            "seed": o.seed,
            "deadline": _d(o.duration),
            "onDeadline": "Succeed",
            "parameters": [
                {"name": "rv", "value": "", "description": "volume-main: the RV name"},
                {"name": "sc", "value": "", "description": "volume-main: the storage class"},
                {"name": "lifetime", "value": "1m", "description": "volume-main: lifetime_period"},
            ],
            "templates": ts,
        },
    }
    return Workflow.model_validate(doc)
