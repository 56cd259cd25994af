"""The sds-replicated-volume control plane pods of the nested cluster and their leader election.

:class:`ControlPlaneController` plays the module's DaemonSet and Deployment in namespace
``d8-sds-replicated-volume``:

* one ``app=agent`` pod per storage node (``spec.nodeName`` pinned, hostNetwork). Like a
  DaemonSet, a replacement is created once the deleted pod is gone (after its grace period);
* ``controller_replicas`` ``app=controller`` pods. Like a ReplicaSet, replacements are created as
  soon as a pod is terminating;
* the Lease ``sds-replicated-volume-controller``: the leader is the holder while its pod runs;
  when it is deleted, the loss time is written to ``spec.renewTime`` (its last renewal) and the
  oldest Ready controller pod takes the lease ``lease_duration`` later (``acquireTime``,
  ``leaseTransitions``). The simulated sds controller reconciles only while a leader holds the
  lease, from ``acquireTime + controller_startup``.

Pods run "forever" (annotation ``sim.chaosflow.io/duration: inf``); the simulated kubelet starts
them after its ``start_delay``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any

from actors.sim.apiserver import DELETED, SimAPIServer
from actors.sim.rv.api import (
    AGENT_APP,
    AGENT_POD_PREFIX,
    APP_LABEL,
    CONTROL_PLANE_NAMESPACE,
    CONTROLLER_APP,
    CONTROLLER_POD_PREFIX,
    LEASE_NAME,
    STORAGE_NODE_LABEL,
    Obj,
    parse_ts,
    ts,
)
from actors.sim.rv.base import EPS, WorldController, creation_key, deleting, pod_ready_since
from actors.sim.rv.config import RVTiming
from engine.clock import TimerService

__all__ = ["ControlPlaneController", "lease_holder"]

LEASE_API = "coordination.k8s.io/v1"
_KEY = ("control-plane",)


def lease_holder(lease: Obj | None, pods: dict[str, Obj]) -> tuple[str | None, float | None]:
    """The current leader pod and when it acquired the lease (None when there is no valid one)."""
    if lease is None:
        return None, None
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or None
    if holder is None:
        return None, None
    pod = pods.get(holder)
    if pod is None or pod_ready_since(pod) is None:
        return None, None
    return holder, parse_ts(spec.get("acquireTime"))


def _deleted_at(pod: Obj, now: float) -> float:
    """When a pod was asked to terminate (its deletionTimestamp is that time + the grace period)."""
    meta = pod["metadata"]
    deadline = parse_ts(meta.get("deletionTimestamp"))
    if deadline is None:
        return now
    return deadline - float(meta.get("deletionGracePeriodSeconds") or 0)


class ControlPlaneController(WorldController):
    name = "sim-sds-control-plane"

    def __init__(
        self,
        api: SimAPIServer,
        timers: TimerService,
        *,
        timing: RVTiming,
        controller_replicas: int,
        control_plane_selector: dict[str, str] | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(api, timers, strict=strict)
        self.timing = timing
        self.replicas = controller_replicas
        self.control_plane_selector = dict(control_plane_selector or {})
        self._template_hash = hashlib.blake2b(b"sds-replicated-volume-controller", digest_size=5).hexdigest()[
            :10
        ]
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._lease: Obj | None = None

    def _clear_caches(self) -> None:
        self._nodes.clear()
        self._pods.clear()
        self._lease = None

    def _open_watches(self) -> None:
        self._watch_on(self.api, "Node", self._on_node, "v1")
        self._watch_on(self.api, "Pod", self._on_pod, "v1", CONTROL_PLANE_NAMESPACE)
        self._watch_on(self.api, "Lease", self._on_lease, LEASE_API, CONTROL_PLANE_NAMESPACE)
        self._enqueue(_KEY)

    def _on_node(self, etype: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        old = self._nodes.get(name)
        if etype == DELETED:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node
        old_labels = (old["metadata"].get("labels") or {}) if old else None
        new_labels = (node["metadata"].get("labels") or {}) if etype != DELETED else None
        if old_labels != new_labels:
            self._enqueue(_KEY)

    def _on_pod(self, etype: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if etype == DELETED:
            self._pods.pop(name, None)
        else:
            self._pods[name] = pod
        self._enqueue(_KEY)

    def _on_lease(self, etype: str, lease: Obj) -> None:
        if lease["metadata"]["name"] != LEASE_NAME:
            return
        self._lease = None if etype == DELETED else lease
        self._enqueue(_KEY)

    # reconcile

    def _reconcile_key(self, key: Hashable) -> None:
        now = self.timers.now()
        self._sync_agents()
        self._sync_controllers()
        self._sync_lease(now)

    def _app_pods(self, app: str) -> list[Obj]:
        pods = [p for p in self._pods.values() if (p["metadata"].get("labels") or {}).get(APP_LABEL) == app]
        return sorted(pods, key=creation_key)

    def _sync_agents(self) -> None:
        storage = sorted(
            n for n, o in self._nodes.items() if STORAGE_NODE_LABEL in (o["metadata"].get("labels") or {})
        )
        by_node: dict[str, list[Obj]] = {}
        for p in self._app_pods(AGENT_APP):
            by_node.setdefault(str((p.get("spec") or {}).get("nodeName") or ""), []).append(p)
        for node in storage:
            pods = by_node.get(node, [])
            live = [p for p in pods if not deleting(p)]
            if not pods:
                self.api.create(self._agent_manifest(node))
            for extra in live[1:]:
                self._delete_pod(extra)
        for node, pods in sorted(by_node.items()):
            if node not in storage:
                for p in pods:
                    if not deleting(p):
                        self._delete_pod(p)

    def _sync_controllers(self) -> None:
        live = [p for p in self._app_pods(CONTROLLER_APP) if not deleting(p)]
        for _ in range(self.replicas - len(live)):
            self.api.create(self._controller_manifest())
        for extra in live[self.replicas :][::-1]:
            self._delete_pod(extra)

    def _delete_pod(self, pod: Obj) -> None:
        self.api.delete("Pod", pod["metadata"]["name"], CONTROL_PLANE_NAMESPACE, api_version="v1")

    def _sync_lease(self, now: float) -> None:
        lease = self._lease
        if lease is None:
            self.api.create(
                {
                    "apiVersion": LEASE_API,
                    "kind": "Lease",
                    "metadata": {"name": LEASE_NAME, "namespace": CONTROL_PLANE_NAMESPACE},
                    "spec": {"leaseDurationSeconds": int(self.timing.lease_duration), "leaseTransitions": 0},
                }
            )
            return
        holder, _ = lease_holder(lease, self._pods)
        if holder is not None:
            return
        spec = dict(lease.get("spec") or {})
        current = spec.get("holderIdentity") or None
        free_at = -1.0
        if current is not None:
            acquired = spec.get("acquireTime")
            renewed = spec.get("renewTime")
            if renewed is not None and renewed != acquired:
                lost_at = parse_ts(renewed) or now  # the loss was recorded already
            else:
                pod = self._pods.get(current)
                lost_at = _deleted_at(pod, now) if pod is not None else now
                spec["renewTime"] = ts(lost_at)
                lease = self.api.update({**lease, "spec": spec})
            free_at = lost_at + self.timing.lease_duration
        candidates = [p for p in self._app_pods(CONTROLLER_APP) if pod_ready_since(p) is not None]
        if not candidates:
            return  # pod events bring us back
        if now + EPS < free_at:
            self._at(free_at, _KEY)
            return
        spec = dict(lease.get("spec") or {})
        spec["holderIdentity"] = candidates[0]["metadata"]["name"]
        spec["acquireTime"] = spec["renewTime"] = ts(now)
        spec["leaseDurationSeconds"] = int(self.timing.lease_duration)
        if current is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        self.api.update({**lease, "spec": spec})

    # manifests

    def _agent_manifest(self, node: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": AGENT_POD_PREFIX,
                "namespace": CONTROL_PLANE_NAMESPACE,
                "labels": {APP_LABEL: AGENT_APP},
                "annotations": {"sim.chaosflow.io/duration": "inf"},
            },
            "spec": {
                "nodeName": node,
                "hostNetwork": True,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": int(self.timing.pod_grace),
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "agent",
                        "image": "registry.deckhouse.io/sds-replicated-volume/agent:sim",
                        "command": ["/sds-replicated-volume-agent"],
                        "securityContext": {"privileged": True},
                    }
                ],
            },
        }

    def _controller_manifest(self) -> Obj:
        spec: dict[str, Any] = {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": int(self.timing.pod_grace),
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "controller",
                    "image": "registry.deckhouse.io/sds-replicated-volume/controller:sim",
                    "command": ["/sds-replicated-volume-controller", "--leader-elect"],
                }
            ],
        }
        if self.control_plane_selector:
            spec["nodeSelector"] = dict(self.control_plane_selector)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{CONTROLLER_POD_PREFIX}{self._template_hash}-",
                "namespace": CONTROL_PLANE_NAMESPACE,
                "labels": {APP_LABEL: CONTROLLER_APP},
                "annotations": {"sim.chaosflow.io/duration": "inf"},
            },
            "spec": spec,
        }
