"""API facts of the simulated replicated-volume world: groups, kinds, labels, finalizers, CRDs,
condition reasons, and small helpers for ``metav1.Condition`` lists.

Names follow ``reference/sds-replicated-volume.md`` (early 2026 API): storage.deckhouse.io/v1alpha1
(RV, RVR, RVA, RSC — cluster-scoped, status subresource), virtualization.deckhouse.io/v1alpha2
(VirtualMachine, VirtualMachineOperation — namespaced, parent cluster) and cilium.io/v2
CiliumNetworkPolicy (namespaced, parent cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.clock import parse_rfc3339, rfc3339

Obj = dict[str, Any]

# ----------------------------------------------------------------------------- groups and kinds

STORAGE_GROUP = "storage.deckhouse.io"
STORAGE_VERSION = "v1alpha1"
STORAGE_API = f"{STORAGE_GROUP}/{STORAGE_VERSION}"
VIRT_GROUP = "virtualization.deckhouse.io"
VIRT_VERSION = "v1alpha2"
VIRT_API = f"{VIRT_GROUP}/{VIRT_VERSION}"
CILIUM_GROUP = "cilium.io"
CILIUM_VERSION = "v2"
CILIUM_API = f"{CILIUM_GROUP}/{CILIUM_VERSION}"

RV = "ReplicatedVolume"
RVR = "ReplicatedVolumeReplica"
RVA = "ReplicatedVolumeAttachment"
RSC = "ReplicatedStorageClass"
VM = "VirtualMachine"
VMOP = "VirtualMachineOperation"
CNP = "CiliumNetworkPolicy"

# ----------------------------------------------------------------------------- labels and names

STORAGE_NODE_LABEL = "storage.deckhouse.io/sds-replicated-volume-node"
VM_NAME_LABEL = "vm.kubevirt.internal.virtualization.deckhouse.io/name"
VIRT_LAUNCHER_LABEL = "kubevirt.internal.virtualization.deckhouse.io"
CONTROL_PLANE_NAMESPACE = "d8-sds-replicated-volume"
APP_LABEL = "app"
AGENT_APP = "agent"
CONTROLLER_APP = "controller"
AGENT_POD_PREFIX = "sds-replicated-volume-agent-"
CONTROLLER_POD_PREFIX = "sds-replicated-volume-controller-"
LEASE_NAME = "sds-replicated-volume-controller"
#: label on RVRs: the volume they belong to
RV_LABEL = "sds-replicated-volume.deckhouse.io/replicated-volume"
#: label on Access replicas the controller created to attach a volume on a node without a replica
ATTACH_REPLICA_LABEL = "sds-replicated-volume.deckhouse.io/created-for-attachment"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: the sim's world configuration (JSON), so a restored world can re-attach its controllers
WORLD_CONFIGMAP = "chaosflow-sim-rv-world"

RV_FINALIZER = "sds-replicated-volume.deckhouse.io/rv-controller"
AGENT_FINALIZER = "sds-replicated-volume.deckhouse.io/agent"
#: the controller's finalizer on RVRs (the agent puts it there with its own): released by the
#: controller only when the replica may go (rvr-finalizer-release); the agent tears a deleted
#: replica down only once no finalizer but its own is left
CONTROLLER_FINALIZER = "sds-replicated-volume.deckhouse.io/controller"

DISKFUL = "Diskful"
ACCESS = "Access"
TIEBREAKER = "TieBreaker"
REPLICA_TYPES = (DISKFUL, ACCESS, TIEBREAKER)
VOTING_TYPES = frozenset({DISKFUL, TIEBREAKER})

# DRBD disk states
UP_TO_DATE = "UpToDate"
OUTDATED = "Outdated"
INCONSISTENT = "Inconsistent"
DISKLESS = "Diskless"

#: replication mode -> (Diskful, TieBreaker) replicas, as the sds controller places them
REPLICATION_LAYOUT: dict[str, tuple[int, int]] = {
    "None": (1, 0),
    "Availability": (2, 1),
    "Consistency": (2, 0),
    "ConsistencyAndAvailability": (3, 0),
}
DEFAULT_REPLICATION = "ConsistencyAndAvailability"

# ----------------------------------------------------------------------------- conditions

# RV
COND_IO_READY = "IOReady"
COND_QUORUM = "Quorum"
COND_SCHEDULED = "Scheduled"
COND_CONFIGURATION_READY = "ConfigurationReady"
R_IO_READY = "IOReady"
R_INSUFFICIENT_IO_READY = "InsufficientIOReadyReplicas"
R_NO_IO_READY = "NoIOReadyReplicas"
R_QUORUM_REACHED = "QuorumReached"
R_QUORUM_DEGRADED = "QuorumDegraded"
R_QUORUM_LOST = "QuorumLost"
R_ALL_SCHEDULED = "AllReplicasScheduled"
R_NOT_SCHEDULED = "ReplicasNotScheduled"
R_SCHEDULING_IN_PROGRESS = "SchedulingInProgress"
R_WAITING_FOR_RSC = "WaitingForStorageClass"
R_CONFIG_READY = "Ready"
R_DELETING = "Deleting"

# RVR
COND_CONFIGURED = "Configured"
COND_ONLINE = "Online"
COND_IN_QUORUM = "InQuorum"
COND_IN_SYNC = "InSync"
COND_ATTACHED = "Attached"
COND_READY = "Ready"
R_REPLICA_SCHEDULED = "ReplicaScheduled"
R_NO_AVAILABLE_NODES = "NoAvailableNodes"
R_SCHEDULING_FAILED = "SchedulingFailed"
R_SCHEDULING_PENDING = "SchedulingPending"
R_NODE_NOT_READY = "NodeNotReady"

# RVA
COND_REPLICA_READY = "ReplicaReady"
R_ATTACHED = "Attached"
R_SETTING_PRIMARY = "SettingPrimary"
R_WAITING_FOR_REPLICA = "WaitingForReplica"
R_WAITING_FOR_RV = "WaitingForReplicatedVolume"
R_WAITING_FOR_RV_IO_READY = "WaitingForReplicatedVolumeIOReady"
R_WAITING_FOR_DETACH = "WaitingForActiveAttachmentsToDetach"
R_CONVERTING_TB = "ConvertingTieBreakerToAccess"
R_LOCALITY = "UnableToProvideLocalVolumeAccess"
R_DETACHING = "Detaching"
R_NOT_ATTACHED = "NotAttached"
R_REPLICA_NOT_READY = "ReplicaNotReady"
R_READY = "Ready"

RVA_PENDING = "Pending"
RVA_ATTACHING = "Attaching"
RVA_ATTACHED = "Attached"
RVA_DETACHING = "Detaching"


def ts(t: float) -> str:
    return rfc3339(t) or ""


def parse_ts(value: Any) -> float | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def condition(obj: Mapping[str, Any] | None, ctype: str) -> Obj | None:
    """The condition ``ctype`` of ``obj.status.conditions`` (the stored dict: do not mutate)."""
    if not obj:
        return None
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return None


def condition_true(obj: Mapping[str, Any] | None, ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def condition_since(obj: Mapping[str, Any] | None, ctype: str) -> float | None:
    c = condition(obj, ctype)
    return None if c is None else parse_ts(c.get("lastTransitionTime"))


def set_condition(
    conds: list[Obj],
    ctype: str,
    status: bool | str,
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> None:
    """Set a ``metav1.Condition`` in place: ``lastTransitionTime`` moves only when status changes."""
    st = ("True" if status else "False") if isinstance(status, bool) else status
    for i, c in enumerate(conds):
        if c.get("type") != ctype:
            continue
        if (
            c.get("status") == st
            and c.get("reason") == reason
            and c.get("message") == message
            and (generation is None or c.get("observedGeneration") == generation)
        ):
            return  # unchanged (condition dicts are never mutated: callers may share them)
        new = dict(c)
        if c.get("status") != st:
            new["status"] = st
            new["lastTransitionTime"] = ts(now)
        new["reason"] = reason
        new["message"] = message
        if generation is not None:
            new["observedGeneration"] = generation
        conds[i] = new
        return
    cond: Obj = {
        "type": ctype,
        "status": st,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ts(now),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    conds.append(cond)


# ----------------------------------------------------------------------------- CRDs


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool,
    short_names: Iterable[str] = (),
    status: bool = True,
    categories: Iterable[str] = (),
) -> Obj:
    names: Obj = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    v: Obj = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if status:
        v["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {"app.kubernetes.io/managed-by": "chaosflow-sim"},
        },
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [v],
        },
    }


def storage_crds() -> list[Obj]:
    """CRDs of the nested ("test") cluster: the sds-replicated-volume kinds."""
    g, v = STORAGE_GROUP, STORAGE_VERSION
    cat = ("sds-replicated-volume",)
    return [
        crd(g, v, RV, "replicatedvolumes", namespaced=False, short_names=("rv",), categories=cat),
        crd(g, v, RVR, "replicatedvolumereplicas", namespaced=False, short_names=("rvr",), categories=cat),
        crd(g, v, RVA, "replicatedvolumeattachments", namespaced=False, short_names=("rva",), categories=cat),
        crd(g, v, RSC, "replicatedstorageclasses", namespaced=False, short_names=("rsc",), categories=cat),
    ]


def parent_crds() -> list[Obj]:
    """CRDs of the parent (DVP) cluster: virtual machines, their operations, Cilium policies."""
    return [
        crd(VIRT_GROUP, VIRT_VERSION, VM, "virtualmachines", namespaced=True, short_names=("vm", "vms")),
        crd(
            VIRT_GROUP,
            VIRT_VERSION,
            VMOP,
            "virtualmachineoperations",
            namespaced=True,
            short_names=("vmop", "vmops"),
        ),
        crd(
            CILIUM_GROUP, CILIUM_VERSION, CNP, "ciliumnetworkpolicies", namespaced=True, short_names=("cnp",)
        ),
    ]


# ----------------------------------------------------------------------------- quantities

_SUFFIXES = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "": 1,
}


def parse_quantity(value: Any) -> int | None:
    """Bytes of a Kubernetes quantity (``1Gi``, ``500M``, ``4096``); None when malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if not isinstance(value, str) or not value:
        return None
    s = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "k", "K", "M", "G", "T", "P"):
        if s.endswith(suffix):
            num, mult = s[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        num, mult = s, 1
    try:
        return int(float(num) * mult)
    except ValueError:
        return None


def format_quantity(n: int) -> str:
    """The shortest exact binary-suffixed form (``1Gi``, ``1028Mi``) or plain bytes."""
    for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        mult = _SUFFIXES[suffix]
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


class Conditions:
    """Edits the ``conditions`` of a status dict (a copy the caller owns) at one moment."""

    __slots__ = ("generation", "items", "now", "status")

    def __init__(self, status: Obj, now: float, generation: int | None) -> None:
        self.status = status
        self.items: list[Obj] = list(status.get("conditions") or ())
        self.now = now
        self.generation = generation

    def set(self, ctype: str, status: bool | str, reason: str, message: str = "") -> None:
        set_condition(self.items, ctype, status, reason, message, self.now, self.generation)

    def commit(self) -> Obj:
        """Store the conditions into the status dict and return it."""
        self.status["conditions"] = self.items
        return self.status
