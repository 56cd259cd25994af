"""The parent (DVP) cluster: VirtualMachines and VirtualMachineOperations.

:class:`VirtualizationController` plays the virtualization module: it keeps one virt-launcher pod
per running VM (labelled ``vm.kubevirt.internal.virtualization.deckhouse.io/name: <vm>``, so
CiliumNetworkPolicies select it) and executes VirtualMachineOperations one at a time per VM, in
creation order:

=========  =====================================================================================
Restart    Pending -> InProgress; VM Running -> Stopping (``vm_stop``, or ``vm_stop_force`` when
           ``spec.force``) -> Starting (``vm_boot``) -> Running; the operation is Completed then.
Stop       Running -> Stopping -> Stopped; Completed (already Stopped: Completed at once).
Start      Stopped -> Starting -> Running; Completed (already Running: Completed at once).
Migrate,   Running -> Migrating (``vm_migrate``; the guest stays reachable) -> Running on another
Evict      parent node; Completed.
others     Failed (not simulated).
=========  =====================================================================================

Every phase change is appended to ``status.stats.phasesTransitions`` (``{phase, timestamp}``, as
DVP does); the controller derives all its timers from those timestamps, so a restored cluster
continues exactly. A VM whose operation is deleted mid-way finishes the phase it is in (a stopping
VM with ``runPolicy: AlwaysOn`` starts again).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

from actors.sim.apiserver import DELETED, SimAPIServer
from actors.sim.rv.api import (
    VIRT_API,
    VIRT_LAUNCHER_LABEL,
    VM,
    VM_NAME_LABEL,
    VMOP,
    Obj,
    parse_ts,
    set_condition,
    ts,
)
from actors.sim.rv.base import EPS, WorldController, created_at, creation_key, deleting
from actors.sim.rv.config import RVTiming
from actors.sim.util import copy_json
from engine.clock import TimerService

__all__ = ["ONLINE_PHASES", "VirtualizationController", "vm_phase_since"]

#: VM phases in which the guest runs (its node is online in the nested cluster)
ONLINE_PHASES = frozenset({"Running", "Migrating"})
_POD_PHASES = frozenset({"Starting", "Running", "Migrating"})
_FINISHED = frozenset({"Completed", "Failed"})
_MAX_TRANSITIONS = 10


def vm_phase_since(vm: Obj) -> float:
    """When the VM entered its current phase (last ``phasesTransitions`` entry, else creation)."""
    status = vm.get("status") or {}
    trans = (status.get("stats") or {}).get("phasesTransitions") or ()
    if trans:
        t = parse_ts(trans[-1].get("timestamp"))
        if t is not None:
            return t
    return created_at(vm)


class VirtualizationController(WorldController):
    name = "sim-virtualization"

    def __init__(
        self,
        api: SimAPIServer,
        timers: TimerService,
        *,
        timing: RVTiming,
        parent_nodes: list[str],
        strict: bool = False,
    ) -> None:
        super().__init__(api, timers, strict=strict)
        self.timing = timing
        self.parent_nodes = list(parent_nodes)
        self._vms: dict[tuple[str, str], Obj] = {}
        self._ops: dict[tuple[str, str], Obj] = {}
        self._ops_by_vm: dict[tuple[str, str], set[str]] = {}
        self._pods: dict[tuple[str, str], Obj] = {}
        self._pods_by_vm: dict[tuple[str, str], set[str]] = {}

    def _clear_caches(self) -> None:
        self._vms.clear()
        self._ops.clear()
        self._ops_by_vm.clear()
        self._pods.clear()
        self._pods_by_vm.clear()

    def _open_watches(self) -> None:
        self._watch_on(self.api, VM, self._on_vm, VIRT_API)
        self._watch_on(self.api, VMOP, self._on_op, VIRT_API)
        self._watch_on(self.api, "Pod", self._on_pod, "v1")

    # handlers

    def _on_vm(self, etype: str, vm: Obj) -> None:
        key = (vm["metadata"]["namespace"], vm["metadata"]["name"])
        if etype == DELETED:
            self._vms.pop(key, None)
        else:
            self._vms[key] = vm
        self._enqueue(("vm", *key))

    def _on_op(self, etype: str, op: Obj) -> None:
        ns, name = op["metadata"]["namespace"], op["metadata"]["name"]
        vm = str((op.get("spec") or {}).get("virtualMachineName") or "")
        old = self._ops.get((ns, name))
        if old is not None:
            old_vm = str((old.get("spec") or {}).get("virtualMachineName") or "")
            self._ops_by_vm.get((ns, old_vm), set()).discard(name)
        if etype == DELETED:
            self._ops.pop((ns, name), None)
        else:
            self._ops[(ns, name)] = op
            self._ops_by_vm.setdefault((ns, vm), set()).add(name)
        self._enqueue(("vm", ns, vm))

    def _on_pod(self, etype: str, pod: Obj) -> None:
        meta = pod["metadata"]
        vm = (meta.get("labels") or {}).get(VM_NAME_LABEL)
        if not vm:
            return
        key = (meta["namespace"], meta["name"])
        if etype == DELETED:
            self._pods.pop(key, None)
            self._pods_by_vm.get((meta["namespace"], vm), set()).discard(meta["name"])
        else:
            self._pods[key] = pod
            self._pods_by_vm.setdefault((meta["namespace"], vm), set()).add(meta["name"])
        self._enqueue(("vm", meta["namespace"], vm))

    # reconcile

    def _reconcile_key(self, key: Hashable) -> None:
        _, ns, name = cast(tuple[str, str, str], key)
        vm = self._vms.get((ns, name))
        now = self.timers.now()
        if vm is None:
            for op_name in sorted(self._ops_by_vm.get((ns, name), ())):
                op = self._ops[(ns, op_name)]
                if (op.get("status") or {}).get("phase") not in _FINISHED:
                    self._op_status(
                        op, "Failed", "VirtualMachineNotFound", f"VirtualMachine {name} not found", now
                    )
            return
        self._sync_vm(vm, now)

    def _active_ops(self, ns: str, name: str) -> list[Obj]:
        ops = [self._ops[(ns, n)] for n in self._ops_by_vm.get((ns, name), ())]
        ops = [o for o in ops if (o.get("status") or {}).get("phase") not in _FINISHED and not deleting(o)]
        return sorted(ops, key=creation_key)

    def _op_status(self, op: Obj, phase: str, reason: str, message: str, t: float) -> Obj:
        status = copy_json(op.get("status") or {})
        status["phase"] = phase
        conds = list(status.get("conditions") or ())
        done = phase in _FINISHED
        set_condition(
            conds, "Completed", phase == "Completed", reason, message, t, op["metadata"].get("generation")
        )
        status["conditions"] = conds
        if done and "completedAt" not in status:
            status["completedAt"] = ts(t)
        if phase == "InProgress" and "startedAt" not in status:
            status["startedAt"] = ts(t)
        if status == op.get("status"):
            return op
        return self.api.update_status({**op, "status": status})

    def _sync_vm(self, vm: Obj, now: float) -> None:
        meta = vm["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key = ("vm", ns, name)
        status = copy_json(vm.get("status") or {})
        phase = str(status.get("phase") or "Pending")
        since = vm_phase_since(vm)
        dues: list[float] = []
        ops = self._active_ops(ns, name)
        for i, o in enumerate(ops):
            if not (o.get("status") or {}).get("phase"):
                ops[i] = self._op_status(o, "Pending", "Pending", "waiting for its turn", now)

        def transition(new_phase: str, t: float) -> None:
            nonlocal phase, since
            phase, since = new_phase, t
            status["phase"] = new_phase
            stats = status.setdefault("stats", {})
            trans = list(stats.get("phasesTransitions") or ())
            trans.append({"phase": new_phase, "timestamp": ts(t)})
            stats["phasesTransitions"] = trans[-_MAX_TRANSITIONS:]

        # walk the state machine to now: each step happens at its own due time
        for _ in range(16):
            op = ops[0] if ops else None
            op_phase = str((op.get("status") or {}).get("phase") or "Pending") if op else ""
            spec = (op.get("spec") or {}) if op else {}
            op_type = str(spec.get("type") or "")
            if (
                op is not None
                and op_phase == "Pending"
                and phase not in ("Stopping", "Starting", "Migrating")
            ):
                # (while a phase change is running, the next operation waits for it to finish)
                start = max(created_at(op) + self.timing.vmop_start_delay, since)
                if now + EPS < start:
                    dues.append(start)
                    break
                result = self._start_op(op, op_type, phase, start)
                if result is None:
                    ops.pop(0)
                    continue
                if result != phase:
                    transition(result, start)
                ops[0] = self._op_status(op, "InProgress", "InProgress", f"{op_type} in progress", start)
                continue
            force = bool(spec.get("force")) and op_phase == "InProgress"
            if phase == "Stopping":
                t = since + (self.timing.vm_stop_force if force else self.timing.vm_stop)
                if now + EPS < t:
                    dues.append(t)
                    break
                if op is not None and op_phase == "InProgress" and op_type == "Stop":
                    transition("Stopped", t)
                    self._op_status(op, "Completed", "Completed", "VirtualMachine stopped", t)
                    ops.pop(0)
                elif op is None and str((vm.get("spec") or {}).get("runPolicy") or "AlwaysOn") not in (
                    "AlwaysOn",
                    "AlwaysOnUnlessStoppedManually",
                ):
                    transition("Stopped", t)
                else:
                    transition("Starting", t)
                continue
            if phase == "Starting":
                t = since + self.timing.vm_boot
                if now + EPS < t:
                    dues.append(t)
                    break
                transition("Running", t)
                if op is not None and op_phase == "InProgress" and op_type in ("Restart", "Start"):
                    self._op_status(op, "Completed", "Completed", f"{op_type} completed", t)
                    ops.pop(0)
                continue
            if phase == "Migrating":
                t = since + self.timing.vm_migrate
                if now + EPS < t:
                    dues.append(t)
                    break
                status["nodeName"] = self._next_parent_node(str(status.get("nodeName") or ""))
                transition("Running", t)
                if op is not None and op_phase == "InProgress":
                    self._op_status(op, "Completed", "Completed", f"{op_type} completed", t)
                    ops.pop(0)
                continue
            if op is not None and op_phase == "InProgress" and phase in ("Running", "Stopped"):
                # an operation that has nothing left to do (e.g. Restart joined a finished boot)
                self._op_status(op, "Completed", "Completed", f"{op_type} completed", since)
                ops.pop(0)
                continue
            break
        if status != (vm.get("status") or {}):
            vm = self.api.update_status({**vm, "status": status})
        self._sync_pods(vm, phase)
        self._due(dues, key)

    def _start_op(self, op: Obj, op_type: str, phase: str, t: float) -> str | None:
        """Start ``op`` at ``t``: the VM's next phase, or None when the operation ended at once."""
        name = (op.get("spec") or {}).get("virtualMachineName")
        if op_type == "Restart":
            if phase == "Stopped":
                return "Starting"
            return "Stopping"
        if op_type == "Stop":
            if phase == "Stopped":
                self._op_status(op, "Completed", "Completed", "VirtualMachine is already stopped", t)
                return None
            return "Stopping"
        if op_type == "Start":
            if phase == "Stopped":
                return "Starting"
            self._op_status(op, "Completed", "Completed", "VirtualMachine is already running", t)
            return None
        if op_type in ("Migrate", "Evict"):
            if phase != "Running":
                self._op_status(op, "Failed", "NotRunning", f"VirtualMachine {name} is not running", t)
                return None
            return "Migrating"
        self._op_status(
            op, "Failed", "NotSupported", f"operation type {op_type!r} is not supported by the simulator", t
        )
        return None

    def _next_parent_node(self, current: str) -> str:
        nodes = self.parent_nodes or [current]
        if current in nodes:
            return nodes[(nodes.index(current) + 1) % len(nodes)]
        return nodes[0]

    def _sync_pods(self, vm: Obj, phase: str) -> None:
        meta = vm["metadata"]
        ns, name = meta["namespace"], meta["name"]
        pods = [self._pods[(ns, p)] for p in sorted(self._pods_by_vm.get((ns, name), ()))]
        live = [p for p in pods if not deleting(p)]
        if phase in _POD_PHASES:
            if not live:
                self.api.create(self._pod_manifest(vm))
            return
        for p in live:
            self.api.delete("Pod", p["metadata"]["name"], ns, grace_period_seconds=0, api_version="v1")

    @staticmethod
    def _pod_manifest(vm: Obj) -> Obj:
        meta = vm["metadata"]
        node = (vm.get("status") or {}).get("nodeName")
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "compute",
                    "image": "registry.deckhouse.io/virtualization/virt-launcher:sim",
                    "command": ["/usr/bin/virt-launcher-monitor"],
                }
            ],
        }
        if node:
            spec["nodeName"] = node
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"virt-launcher-{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": {VM_NAME_LABEL: meta["name"], VIRT_LAUNCHER_LABEL: "virt-launcher"},
                "annotations": {"sim.chaosflow.io/duration": "inf"},
                "ownerReferences": [
                    {
                        "apiVersion": VIRT_API,
                        "kind": VM,
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
