"""Knobs of the simulated replicated-volume world: timings, injectable controller bugs, the world's
shape (nodes, VMs, storage classes)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.sim.rv.api import DEFAULT_REPLICATION, REPLICATION_LAYOUT

__all__ = ["MegatestWorldSpec", "RVBugs", "RVTiming", "StorageClassSpec"]


@dataclass(frozen=True, slots=True)
class RVTiming:
    """Delays of the simulated world, in seconds of the run's clock."""

    # sds-replicated-volume controller
    #: RV created -> its replicas are created and placed
    schedule_delay: float = 1.0
    #: a Diskful/TieBreaker replica missing (deleted) -> the controller creates a replacement
    recreate_delay: float = 30.0
    #: a controller pod that won the lease starts reconciling this long after (cache sync)
    controller_startup: float = 3.0
    #: leader election: a lost leader's lease is taken over this long after it went away
    lease_duration: float = 15.0
    # agent (per node)
    #: an agent pod acts this long after it became Ready (or its node booted)
    agent_startup: float = 3.0
    #: scheduled replica -> DRBD resource configured on its node by the agent
    configure_delay: float = 2.0
    #: deleted replica -> the agent tore the DRBD resource down and released its finalizer
    teardown_delay: float = 1.0
    #: desired attachment -> the agent promoted the replica (DRBD Primary)
    attach_delay: float = 2.0
    #: attachment removed -> the agent demoted the replica
    detach_delay: float = 1.0
    # DRBD
    #: full initial sync of a new Diskful replica of a volume that already holds data
    full_sync: float = 20.0
    #: bitmap resync of an Outdated replica
    resync: float = 4.0
    #: combined packet loss at or above which a DRBD connection breaks (below it only slows)
    loss_break_threshold: float = 0.3
    #: below the threshold, syncs and agent actions over a lossy link take (1 + loss * this) longer
    loss_slowdown: float = 10.0
    #: an iperf3 load between two nodes makes syncs and agent actions on them this much slower
    load_slowdown: float = 1.5
    # control-plane pods
    #: grace period of agent/controller pods (how long a deleted pod keeps terminating)
    pod_grace: int = 5
    # virtual machines (parent cluster)
    #: VirtualMachineOperation created -> InProgress
    vmop_start_delay: float = 1.0
    #: Stopping phase of a graceful stop / restart
    vm_stop: float = 10.0
    #: Stopping phase of a forced (hard) stop / restart
    vm_stop_force: float = 2.0
    #: Starting phase (boot of the guest) until the VM is Running again
    vm_boot: float = 60.0
    #: live migration (the VM stays reachable)
    vm_migrate: float = 10.0
    #: nested Node: Ready=False this long after its VM stopped running (node-monitor grace period)
    node_not_ready_after: float = 40.0
    #: nested Node: Ready=True this long after its VM is Running again (kubelet start)
    node_ready_after_boot: float = 5.0

    def replace(self, **changes: Any) -> RVTiming:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class RVBugs:
    """Controller bugs to inject, so tests can prove the megatest checker catches them."""

    #: a replica that lost quorum while online (network split) stays StandAlone after the split
    #: heals: DRBD split-brain is never resolved, the volume does not regain (full) quorum
    quorum_not_regained_after_split_brain: bool = False
    #: the controller never creates a replacement for a deleted Diskful/TieBreaker replica (the
    #: deleted replica is then never released: its deletion hangs)
    replica_not_recreated: bool = False
    #: agents never promote replicas: attachments stay Attaching forever
    attach_stuck: bool = False
    #: agents never demote replicas: RVA deletion hangs in Detaching
    detach_stuck: bool = False
    #: Outdated/Inconsistent replicas never resync
    resync_stuck: bool = False
    #: the controller never releases the RV finalizer: deleted volumes never go away
    rv_deletion_stuck: bool = False
    #: the controller releases a deleted replica without its quorum and data checks: it is torn
    #: down at once, even when it holds the last UpToDate copy of the data (the volume can lose its
    #: quorum, or its data: IOReady never comes back)
    unsafe_replica_deletion: bool = False

    def replace(self, **changes: Any) -> RVBugs:
        return dataclasses.replace(self, **changes)

    def enabled(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name)]


@dataclass(frozen=True, slots=True)
class StorageClassSpec:
    """A ReplicatedStorageClass of the world. ``replication`` is the real enum: None (1 Diskful),
    Availability (2 Diskful + 1 TieBreaker), Consistency (2 Diskful), ConsistencyAndAvailability
    (3 Diskful, the default). ``topology``: Ignored, TransZonal (distinct zones), Zonal (one zone)."""

    name: str
    replication: str = DEFAULT_REPLICATION
    topology: str = "Ignored"
    volume_access: str = "PreferablyLocal"

    def __post_init__(self) -> None:
        if self.replication not in REPLICATION_LAYOUT:
            raise ValueError(
                f"storage class {self.name}: replication {self.replication!r} is not one of "
                f"{', '.join(REPLICATION_LAYOUT)}"
            )
        if self.topology not in ("Ignored", "TransZonal", "Zonal"):
            raise ValueError(f"storage class {self.name}: unknown topology {self.topology!r}")

    @classmethod
    def parse(cls, text: str) -> StorageClassSpec:
        """``name`` or ``name:Replication`` or ``name:Replication:Topology``."""
        parts = [p.strip() for p in text.split(":")]
        if not parts[0]:
            raise ValueError(f"empty storage class name in {text!r}")
        return cls(*parts)

    def manifest(self) -> dict[str, Any]:
        from actors.sim.rv.api import RSC, STORAGE_API

        return {
            "apiVersion": STORAGE_API,
            "kind": RSC,
            "metadata": {"name": self.name},
            "spec": {
                "storagePool": "sim-thin-pool",
                "reclaimPolicy": "Delete",
                "replication": self.replication,
                "topology": self.topology,
                "volumeAccess": self.volume_access,
            },
        }


def _default_classes() -> tuple[StorageClassSpec, ...]:
    return (
        StorageClassSpec("sim-r2", "Availability"),
        StorageClassSpec("sim-r3", "ConsistencyAndAvailability"),
    )


@dataclass(frozen=True)
class MegatestWorldSpec:
    """The shape of the megatest world: a nested cluster ("test") running on VMs of a DVP
    virtualization cluster ("parent").

    Storage nodes are named ``node_name_format.format(i)`` for i = 1..storage_nodes (worker-01...),
    masters ``master-0``...; each has a VirtualMachine of the same name in ``vm_namespace`` of the
    parent cluster with an IP from ``vm_subnet`` (host numbers from 10 up).
    """

    storage_nodes: int = 6
    node_name_format: str = "worker-{:02d}"
    masters: int = 1
    vm_namespace: str = "e2e-sds-test-cluster"
    parent_nodes: int = 3
    vm_subnet: str = "10.211.1.0/24"
    storage_classes: tuple[StorageClassSpec, ...] = field(default_factory=_default_classes)
    controller_replicas: int = 2
    #: zone names; when set, storage nodes get ``topology.kubernetes.io/zone`` round-robin
    zones: tuple[str, ...] = ()
    drbd_port_base: int = 7000
    test_cluster: str = "test"
    parent_cluster: str = "parent"
    timing: RVTiming = field(default_factory=RVTiming)
    bugs: RVBugs = field(default_factory=RVBugs)

    def __post_init__(self) -> None:
        if self.storage_nodes < 1:
            raise ValueError("storage_nodes must be at least 1")
        if self.masters < 0 or self.parent_nodes < 1 or self.controller_replicas < 1:
            raise ValueError("masters >= 0, parent_nodes >= 1 and controller_replicas >= 1 are required")
        net = ipaddress.ip_network(self.vm_subnet, strict=False)
        if net.num_addresses < 10 + self.storage_nodes + self.masters + 2:
            raise ValueError(f"vm_subnet {self.vm_subnet} is too small for the VMs")
        names = [s.name for s in self.storage_classes]
        if len(set(names)) != len(names):
            raise ValueError("storage class names must be unique")

    @classmethod
    def build(
        cls,
        *,
        storage_classes: Iterable[str | StorageClassSpec] | None = None,
        timing: RVTiming | Mapping[str, Any] | None = None,
        bugs: RVBugs | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> MegatestWorldSpec:
        """Convenience constructor: storage classes as ``"name[:Replication[:Topology]]"`` strings,
        timing and bugs as mappings of overrides."""
        if storage_classes is not None:
            kwargs["storage_classes"] = tuple(
                s if isinstance(s, StorageClassSpec) else StorageClassSpec.parse(s) for s in storage_classes
            )
        if timing is not None:
            kwargs["timing"] = timing if isinstance(timing, RVTiming) else RVTiming(**dict(timing))
        if bugs is not None:
            kwargs["bugs"] = bugs if isinstance(bugs, RVBugs) else RVBugs(**dict(bugs))
        if "zones" in kwargs:
            kwargs["zones"] = tuple(kwargs["zones"])
        return cls(**kwargs)

    # derived names

    def storage_node_names(self) -> list[str]:
        return [self.node_name_format.format(i) for i in range(1, self.storage_nodes + 1)]

    def master_names(self) -> list[str]:
        return [f"master-{i}" for i in range(self.masters)]

    def vm_names(self) -> list[str]:
        return self.master_names() + self.storage_node_names()

    def parent_node_names(self) -> list[str]:
        return [f"dvp-worker-{i}" for i in range(1, self.parent_nodes + 1)]

    def vm_ip(self, vm: str) -> str:
        names = self.vm_names()
        net = ipaddress.ip_network(self.vm_subnet, strict=False)
        return str(net.network_address + 10 + names.index(vm))

    def zone_of(self, node: str) -> str | None:
        if not self.zones or node not in self.storage_node_names():
            return None
        return self.zones[self.storage_node_names().index(node) % len(self.zones)]

    # (de)serialization, so a restored world can re-attach its controllers

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["storage_classes"] = [dataclasses.asdict(s) for s in self.storage_classes]
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MegatestWorldSpec:
        d = dict(data)
        d["storage_classes"] = tuple(StorageClassSpec(**s) for s in d.get("storage_classes") or ())
        d["timing"] = RVTiming(**(d.get("timing") or {}))
        d["bugs"] = RVBugs(**(d.get("bugs") or {}))
        d["zones"] = tuple(d.get("zones") or ())
        return cls(**d)
