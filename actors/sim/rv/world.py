"""Build the megatest world inside a :class:`actors.sim.playground.SimWorld`.

``build_megatest_world(world, ...)`` adds (or reuses) the clusters ``test`` (the nested cluster)
and ``parent`` (the DVP virtualization cluster), creates their objects — CRDs, storage nodes and
masters, ReplicatedStorageClasses, VMs with IPs, the control-plane namespace — and installs the
simulated controllers. ``restore_megatest_world(world, snapshot)`` restores a
:meth:`SimWorld.snapshot` (objects and the controllers' saved DRBD state) into a fresh or the same
world; ``attach_megatest_world(world)`` installs the controllers into clusters that already hold the
world's objects (the world's spec is kept in a ConfigMap of the test cluster; DRBD disk states are
then recovered from what the replicas last reported).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors.sim.errors import AlreadyExistsError, NotFoundError
from actors.sim.rv import api as A
from actors.sim.rv.config import MegatestWorldSpec, RVBugs
from actors.sim.rv.controller import ReplicatedVolumeController
from actors.sim.rv.controlplane import ControlPlaneController
from actors.sim.rv.drbd import VolumeKernel
from actors.sim.rv.network import NetworkModel
from actors.sim.rv.virtualization import VirtualizationController

if TYPE_CHECKING:
    from actors.sim.apiserver import SimAPIServer
    from actors.sim.cluster import SimCluster
    from actors.sim.playground import SimWorld

__all__ = [
    "MegatestSim",
    "attach_megatest_world",
    "build_megatest_world",
    "install_controllers",
    "restore_megatest_world",
]

CONTROL_PLANE_NODE_LABEL = "node-role.kubernetes.io/control-plane"


@dataclass
class MegatestSim:
    """Handle on an installed megatest world: its clusters, controllers and knobs."""

    world: SimWorld
    spec: MegatestWorldSpec
    test: SimCluster
    parent: SimCluster
    volumes: ReplicatedVolumeController
    control_plane: ControlPlaneController
    virtualization: VirtualizationController

    # knobs

    @property
    def bugs(self) -> RVBugs:
        return self.volumes.bugs

    def set_bugs(self, bugs: RVBugs | None = None, **changes: Any) -> RVBugs:
        """Inject (or clear) controller bugs at runtime: ``set_bugs(attach_stuck=True)``."""
        new = (bugs or self.volumes.bugs).replace(**changes)
        self.volumes.set_bugs(new)
        return new

    # names

    @property
    def storage_nodes(self) -> list[str]:
        return self.spec.storage_node_names()

    @property
    def vm_names(self) -> list[str]:
        return self.spec.vm_names()

    def vm_ip(self, vm: str) -> str:
        return self.spec.vm_ip(vm)

    # inspection (for tests and debugging)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """An object of the test cluster (storage kinds) or the parent (VM kinds, CNP)."""
        api = self.parent.api if kind in (A.VM, A.VMOP, A.CNP) else self.test.api
        try:
            return dict(api.get(kind, name, namespace))
        except NotFoundError:
            return None

    def condition(self, kind: str, name: str, ctype: str) -> dict[str, Any] | None:
        return A.condition(self.get(kind, name), ctype)

    def network(self) -> NetworkModel:
        return self.volumes.network()

    def kernel(self, rv: str) -> VolumeKernel | None:
        return self.volumes.kernel(rv)


def build_megatest_world(
    world: SimWorld,
    spec: MegatestWorldSpec | None = None,
    *,
    storage_classes: Iterable[str | Any] | None = None,
    timing: Any = None,
    bugs: Any = None,
    strict: bool | None = None,
    **kwargs: Any,
) -> MegatestSim:
    """Populate the ``test`` and ``parent`` clusters of ``world`` and install the controllers.

    Pass a :class:`MegatestWorldSpec` or its fields as keywords (``storage_nodes=6``,
    ``storage_classes=["sc-r2:Availability", "sc-r3"]``, ``timing={"vm_boot": 60}``,
    ``bugs={"attach_stuck": True}``...). Idempotent for objects that already exist.
    """
    if spec is None:
        spec = MegatestWorldSpec.build(storage_classes=storage_classes, timing=timing, bugs=bugs, **kwargs)
    elif storage_classes is not None or timing is not None or bugs is not None or kwargs:
        raise TypeError("pass either a spec or its fields, not both")
    test = world.clusters.get(spec.test_cluster) or world.add_cluster(spec.test_cluster)
    parent = world.clusters.get(spec.parent_cluster) or world.add_cluster(spec.parent_cluster)
    now = world.clock.now()
    _populate_test(test.api, spec, now)
    _populate_parent(parent.api, spec, now)
    return install_controllers(world, spec, strict=strict)


def attach_megatest_world(
    world: SimWorld, spec: MegatestWorldSpec | None = None, *, strict: bool | None = None
) -> MegatestSim:
    """Install the controllers into existing (e.g. restored) clusters. Without ``spec`` the one
    saved by :func:`build_megatest_world` in the test cluster is used."""
    if spec is None:
        for cluster in world.clusters.values():
            try:
                cm = cluster.api.get("ConfigMap", A.WORLD_CONFIGMAP, A.CONTROL_PLANE_NAMESPACE)
            except NotFoundError:
                continue
            spec = MegatestWorldSpec.from_dict(json.loads(cm["data"]["spec.json"]))
            break
        else:
            raise NotFoundError(
                f"no megatest world in this SimWorld (ConfigMap {A.WORLD_CONFIGMAP} not found)"
            )
    return install_controllers(world, spec, strict=strict)


def restore_megatest_world(
    world: SimWorld, data: Mapping[str, Any], *, strict: bool | None = None
) -> MegatestSim:
    """Restore a :meth:`SimWorld.snapshot` of a megatest world into ``world`` (fresh or the same
    one): the controllers are installed first, so their saved state (DRBD disks, iptables history)
    is restored with the clusters. The caller restores the clock first (to the snapshot's time or
    later)."""
    spec = _spec_from_snapshot(data)
    for name in (spec.test_cluster, spec.parent_cluster):
        if name not in world.clusters:
            world.add_cluster(name)
    sim = install_controllers(world, spec, strict=strict, start=False)
    world.restore(dict(data))
    return sim


def _spec_from_snapshot(data: Mapping[str, Any]) -> MegatestWorldSpec:
    for snap in data.values():
        for obj in ((snap or {}).get("api") or {}).get("objects") or ():
            meta = obj.get("metadata") or {}
            if (
                obj.get("kind") == "ConfigMap"
                and meta.get("name") == A.WORLD_CONFIGMAP
                and meta.get("namespace") == A.CONTROL_PLANE_NAMESPACE
            ):
                return MegatestWorldSpec.from_dict(json.loads(obj["data"]["spec.json"]))
    raise NotFoundError(f"no megatest world in this snapshot (ConfigMap {A.WORLD_CONFIGMAP} not found)")


def install_controllers(
    world: SimWorld, spec: MegatestWorldSpec, *, strict: bool | None = None, start: bool = True
) -> MegatestSim:
    """Add the world's controllers to the clusters (once); start them unless ``start`` is False."""
    test = world.clusters[spec.test_cluster]
    parent = world.clusters[spec.parent_cluster]
    virt = _find(parent, VirtualizationController)
    if virt is None:
        virt = VirtualizationController(
            parent.api,
            world.timers,
            timing=spec.timing,
            parent_nodes=spec.parent_node_names(),
            strict=parent.config.strict if strict is None else strict,
        )
        parent.controllers.append(virt)
    cp = _find(test, ControlPlaneController)
    if cp is None:
        cp = ControlPlaneController(
            test.api,
            world.timers,
            timing=spec.timing,
            controller_replicas=spec.controller_replicas,
            control_plane_selector={CONTROL_PLANE_NODE_LABEL: ""} if spec.masters else None,
            strict=test.config.strict if strict is None else strict,
        )
        test.controllers.append(cp)
    vols = _find(test, ReplicatedVolumeController)
    if vols is None:
        vols = ReplicatedVolumeController(
            test.api,
            world.timers,
            spec=spec,
            parent_api=parent.api,
            strict=test.config.strict if strict is None else strict,
        )
        test.controllers.append(vols)
    if start:
        virt.start()
        cp.start()
        vols.start()
    return MegatestSim(world, spec, test, parent, vols, cp, virt)


def _find(cluster: SimCluster, cls: type[Any]) -> Any:
    for c in cluster.controllers:
        if isinstance(c, cls):
            return c
    return None


def _create(api: SimAPIServer, obj: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> None:
    try:
        created = api.create(obj)
    except AlreadyExistsError:
        return
    if status is not None:
        api.update_status({**created, "status": dict(status)})


def _ensure_crds(api: SimAPIServer, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        _create(api, crd)


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _ready_conditions(now: float) -> list[dict[str, Any]]:
    return [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastTransitionTime": A.ts(now),
            "lastHeartbeatTime": A.ts(now),
        }
    ]


def _populate_test(api: SimAPIServer, spec: MegatestWorldSpec, now: float) -> None:
    _ensure_crds(api, A.storage_crds())
    _create(api, _namespace(A.CONTROL_PLANE_NAMESPACE))
    for name in spec.master_names():
        labels = {A.HOSTNAME_LABEL: name, CONTROL_PLANE_NODE_LABEL: ""}
        _create(api, _node(name, labels, spec.vm_ip(name), now))
    for name in spec.storage_node_names():
        labels = {A.HOSTNAME_LABEL: name, "node-role.kubernetes.io/worker": "", A.STORAGE_NODE_LABEL: ""}
        zone = spec.zone_of(name)
        if zone:
            labels[A.ZONE_LABEL] = zone
        _create(api, _node(name, labels, spec.vm_ip(name), now))
    for sc in spec.storage_classes:
        _create(
            api,
            sc.manifest(),
            {
                "phase": "Created",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Ready",
                        "message": "",
                        "lastTransitionTime": A.ts(now),
                    }
                ],
            },
        )
    _create(
        api,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": A.WORLD_CONFIGMAP, "namespace": A.CONTROL_PLANE_NAMESPACE},
            "data": {"spec.json": json.dumps(spec.to_dict(), sort_keys=True)},
        },
    )


def _node(name: str, labels: dict[str, str], ip: str, now: float) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": _ready_conditions(now),
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        },
    }


def _populate_parent(api: SimAPIServer, spec: MegatestWorldSpec, now: float) -> None:
    _ensure_crds(api, A.parent_crds())
    _create(api, _namespace(spec.vm_namespace))
    parent_nodes = spec.parent_node_names()
    for name in parent_nodes:
        _create(api, _node(name, {A.HOSTNAME_LABEL: name, "node-role.kubernetes.io/worker": ""}, "", now))
    for i, vm in enumerate(spec.vm_names()):
        _create(
            api,
            {
                "apiVersion": A.VIRT_API,
                "kind": A.VM,
                "metadata": {"name": vm, "namespace": spec.vm_namespace, "labels": {"vm": vm}},
                "spec": {
                    "runPolicy": "AlwaysOn",
                    "virtualMachineClassName": "generic",
                    "cpu": {"cores": 4},
                    "memory": {"size": "8Gi"},
                    "blockDeviceRefs": [{"kind": "VirtualDisk", "name": f"{vm}-root"}],
                },
            },
            {
                "phase": "Running",
                "ipAddress": spec.vm_ip(vm),
                "nodeName": parent_nodes[i % len(parent_nodes)],
                "stats": {"phasesTransitions": [{"phase": "Running", "timestamp": A.ts(now)}]},
                "conditions": [
                    {
                        "type": "AgentReady",
                        "status": "True",
                        "reason": "AgentReady",
                        "message": "",
                        "lastTransitionTime": A.ts(now),
                    }
                ],
            },
        )
