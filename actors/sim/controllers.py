"""Simulated controllers of the embedded cluster: scheduler + kubelet, Job controller, Chaos Mesh.

Controllers run on the engine's thread. Each one watches the :class:`SimAPIServer` (callbacks are
synchronous) and reconciles *level-based*: every decision is derived from object state and the
current time, never from remembered events. Work that takes time is a timer
(``TimerService.call_later``) whose due time is itself derivable from the objects — a pod's
``startTime``/``startedAt`` plus its planned duration, a ``deletionTimestamp``, a Job's
``startTime`` plus ``activeDeadlineSeconds``... On :meth:`Controller.start` a controller receives
every existing object (the watch's initial ``ADDED`` events) and re-derives its pending timers, so
a cluster restored from a snapshot continues where it stopped. Timers cannot be cancelled, so
timer callbacks re-check the state and do nothing when it moved on; duplicates are suppressed.

Virtual node: when the cluster has no Node objects at all, pods still run — the scheduler sets
``PodScheduled=True`` and leaves ``spec.nodeName`` empty (a virtual node). When Nodes exist, pods go
round-robin to Ready, schedulable nodes that match ``nodeSelector`` and tolerate ``NoSchedule``/
``NoExecute`` taints; otherwise they stay Pending with ``PodScheduled=False`` (Unschedulable) and
are retried when nodes change. A Node created without a ``Ready`` condition is marked Ready by its
(simulated) kubelet.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import random
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from actors.sim.apiserver import ADDED, DELETED, SimAPIServer, Watch
from actors.sim.errors import APIError, BadRequestError, ConflictError, NotFoundError
from actors.sim.selectors import compile_label_selector
from actors.sim.shell import ContainerRun, plan_container
from actors.sim.util import copy_json, get_path, parse_go_duration
from engine.clock import TimerService, parse_rfc3339, rfc3339

__all__ = [
    "CHAOS_GROUP",
    "CHAOS_KINDS",
    "CHAOS_VERSION",
    "ChaosController",
    "ChaosTiming",
    "Controller",
    "JobController",
    "PodController",
    "PodTiming",
    "chaos_crd",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_EPS = 1e-6
_TERMINAL = ("Succeeded", "Failed")
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
#: orders the timers of every controller (saved with them in snapshots, see Controller.pending_timers)
_TIMER_SEQ = itertools.count()


def _t(ts: str | None) -> float | None:
    return parse_rfc3339(ts) if ts else None


def _ts(t: float) -> str:
    return rfc3339(t) or ""


def _set_condition(
    conds: list[Obj],
    ctype: str,
    status: str,
    t: float,
    reason: str | None = None,
    *,
    message: str | None = None,
) -> None:
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c["status"] = status
                c["lastTransitionTime"] = _ts(t)
            if reason is not None:
                c["reason"] = reason
            elif "reason" in c and c.get("status") == "True":
                c.pop("reason", None)
            if message is not None:
                c["message"] = message
            return
    cond: Obj = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": _ts(t)}
    if reason is not None:
        cond["reason"] = reason
    if message is not None:
        cond["message"] = message
    conds.append(cond)


def _condition(obj: Mapping[str, Any], ctype: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return dict(c)
    return None


class Controller:
    """Base of the simulated controllers: watches, a work queue and restart-safe timers.

    Watch handlers update the controller's cache and :meth:`_enqueue` a key; keys are reconciled
    one at a time, in order, never re-entrantly (a reconcile's own writes only enqueue keys, like
    a real controller's work queue). Timers enqueue a key at a due time.

    With ``strict`` False (the default) unexpected exceptions in timer callbacks are logged and
    swallowed so one controller bug cannot stop a run; tests pass ``strict=True``. Expected API
    races (409 Conflict, 404 NotFound) are always ignored: a newer event will reconcile again.
    """

    name = "controller"

    def __init__(self, api: SimAPIServer, timers: TimerService, *, strict: bool = False) -> None:
        self.api = api
        self.timers = timers
        self.strict = strict
        self._watches: list[Watch] = []
        #: pending timers (key, due) -> their order (a process-wide sequence number)
        self._scheduled: dict[tuple[Hashable, float], int] = {}
        self._queue: dict[Hashable, None] = {}
        self._processing = False
        self._epoch = 0
        self.running = False

    def start(self) -> None:
        """Open the watches (existing objects arrive as ADDED and are reconciled).

        Every watch fills its cache before anything is reconciled: the initial ADDED events only
        queue keys, then the queue drains in order. After a restore a reconcile must never act on
        half-loaded caches (the Job controller would take a running pod whose Job it has not seen
        yet for an orphan and remove its tracking finalizer)."""
        if self.running:
            return
        self.running = True  # (stop() voided the timers of the previous run; restored ones stay)
        self._processing = True
        try:
            self._open_watches()
        finally:
            self._processing = False
        if self._queue:
            key = next(iter(self._queue))
            del self._queue[key]
            self._enqueue(key)

    def stop(self) -> None:
        self.running = False
        self._epoch += 1
        for w in self._watches:
            w.stop()
        self._watches.clear()
        self._scheduled.clear()
        self._queue.clear()

    def _open_watches(self) -> None:
        raise NotImplementedError

    def _reconcile_key(self, key: Hashable) -> None:
        raise NotImplementedError

    def _enqueue(self, key: Hashable) -> None:
        """Reconcile ``key`` now, or after the reconcile in progress (de-duplicated)."""
        self._queue[key] = None
        if self._processing:
            return
        self._processing = True
        try:
            while self._queue and self.running:
                k = next(iter(self._queue))
                del self._queue[k]
                try:
                    self._reconcile_key(k)
                except (ConflictError, NotFoundError) as e:
                    log.debug("%s: %s: %s", self.name, k, e)
        finally:
            self._processing = False

    def _watch(self, kind: str, handler: Callable[[str, Obj], None], api_version: str | None = None) -> None:
        def callback(etype: str, obj: Obj) -> None:
            if not self.running:
                return
            try:
                handler(etype, obj)
            except (ConflictError, NotFoundError) as e:
                log.debug("%s: %s", self.name, e)

        # controllers treat delivered objects as read-only: no copies needed
        self._watches.append(self.api.watch(kind, callback=callback, api_version=api_version, copy=False))

    def _at(self, due: float, key: Hashable) -> None:
        """Enqueue ``key`` when the clock reaches ``due`` (once per (key, due))."""
        if math.isinf(due) or math.isnan(due):
            return
        k = (key, due)
        if k in self._scheduled:
            return
        self._scheduled[k] = next(_TIMER_SEQ)
        epoch = self._epoch

        def fire() -> None:
            self._scheduled.pop(k, None)
            if epoch != self._epoch or not self.running:
                return
            try:
                self._enqueue(key)
            except Exception:
                if self.strict:
                    raise
                log.exception("%s: timer callback failed", self.name)

        self.timers.call_later(max(0.0, due - self.timers.now()), fire)

    def pending_timers(self) -> list[list[Any]]:
        """The pending timers as ``[order, due, key]`` (JSON-serializable; keys are tuples of
        strings), for a snapshot: timers due at the same instant fire in the order they were
        scheduled, which re-deriving them on a restore would not reproduce."""
        return [
            [seq, due, list(cast(tuple[str, ...], key)) if isinstance(key, tuple) else key]
            for (key, due), seq in self._scheduled.items()
        ]

    def restore_timers(self, timers: list[tuple[float, Hashable]]) -> None:
        """Schedule saved timers again (in the given order) before :meth:`start` re-derives the
        others from the objects (a timer both saved and re-derived keeps its saved place)."""
        for due, key in timers:
            self._at(due, key)

    def state(self) -> dict[str, Any]:
        """Controller state worth saving in a snapshot (most controllers have none)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        return None


# ------------------------------------------------------------------- pods


@dataclass(frozen=True, slots=True)
class PodTiming:
    """Timing of the simulated scheduler and kubelet (seconds)."""

    #: from creation until the scheduler binds the pod
    schedule_delay: float = 0.0
    #: from binding until the containers start (image pull, sandbox...)
    start_delay: float = 1.0
    #: CrashLoopBackOff: the n-th restart waits min(base * 2**n, max)
    backoff_base: float = 10.0
    backoff_max: float = 300.0


def _tolerates(pod_spec: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for tol in pod_spec.get("tolerations") or ():
        effect = tol.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        key = tol.get("key")
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


class PodController(Controller):
    """Scheduler + kubelet: Pending -> scheduled -> Running -> Succeeded/Failed, restarts with
    CrashLoopBackOff, graceful deletion. Container behaviour comes from :func:`plan_container`."""

    name = "pod"

    def __init__(
        self,
        api: SimAPIServer,
        timers: TimerService,
        *,
        timing: PodTiming | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(api, timers, strict=strict)
        self.timing = timing or PodTiming()
        self._pods: dict[tuple[str, str], Obj] = {}
        self._nodes: dict[str, Obj] = {}
        self._unschedulable: dict[tuple[str, str], None] = {}
        self._plans: dict[tuple[str, str], ContainerRun] = {}
        self._rr = 0

    def start(self) -> None:
        super().start()
        self.api.set_log_provider(self._logs)

    def stop(self) -> None:
        super().stop()
        self.api.set_log_provider(None)
        self._pods.clear()
        self._nodes.clear()
        self._unschedulable.clear()

    def _open_watches(self) -> None:
        self._watch("Node", self._on_node, "v1")
        self._watch("Pod", self._on_pod, "v1")

    def state(self) -> dict[str, Any]:
        return {"roundRobin": self._rr}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._rr = int(state.get("roundRobin", 0))

    # nodes

    def _on_node(self, etype: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if etype == DELETED:
            self._nodes.pop(name, None)
            return
        self._nodes[name] = node
        if (
            etype == ADDED
            and _condition(node, "Ready") is None
            and "deletionTimestamp" not in node["metadata"]
        ):
            status = copy_json(node.get("status") or {})
            conds = status.setdefault("conditions", [])
            _set_condition(
                conds,
                "Ready",
                "True",
                self.timers.now(),
                "KubeletReady",
                message="kubelet is posting ready status",
            )
            node = {**node, "status": status}
            self.api.update_status(node)
            return
        for key in list(self._unschedulable):
            self._enqueue(key)

    def _node_fits(self, node: Obj, pod_spec: Mapping[str, Any]) -> bool:
        if "deletionTimestamp" in node["metadata"]:
            return False
        nspec = node.get("spec") or {}
        if nspec.get("unschedulable"):
            return False
        ready = _condition(node, "Ready")
        if ready is None or ready.get("status") != "True":
            return False
        labels = node["metadata"].get("labels") or {}
        for k, v in (pod_spec.get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                return False
        for taint in nspec.get("taints") or ():
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod_spec, taint):
                return False
        return True

    # pods

    def _on_pod(self, etype: str, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if etype == DELETED:
            self._pods.pop(key, None)
            self._unschedulable.pop(key, None)
            uid = meta["uid"]
            for c in list((pod.get("spec") or {}).get("containers") or ()) + list(
                (pod.get("spec") or {}).get("initContainers") or ()
            ):
                self._plans.pop((uid, c.get("name", "")), None)
            return
        self._pods[key] = pod
        self._enqueue(key)

    def _reconcile_key(self, key: Hashable) -> None:
        pod = self._pods.get(cast(tuple[str, str], key))
        if pod is not None:
            self._sync(pod)

    def _sync(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        now = self.timers.now()
        status = pod.get("status") or {}
        phase = status.get("phase")
        if "deletionTimestamp" in meta:
            self._sync_deleting(pod, now)
            return
        if phase in _TERMINAL:
            return
        scheduled = self._scheduled_at(pod)
        if scheduled is None:
            self._schedule(pod, now)
            return
        self._unschedulable.pop(key, None)
        new_status, due = self._advance(pod, now, scheduled)
        if new_status != status:
            self.api.update_status({**pod, "status": new_status})
        if due is not None:
            self._at(due, key)

    def _sync_deleting(self, pod: Obj, now: float) -> None:
        """A pod with deletionTimestamp: its containers run until they end or the grace period is
        over (then SIGKILL, exit code 137); then the kubelet deletes it with grace 0."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        status = pod.get("status") or {}
        deadline = _t(meta["deletionTimestamp"]) or now
        scheduled = self._scheduled_at(pod)
        if status.get("phase") in _TERMINAL or scheduled is None or "startTime" not in status:
            self._final_delete(pod)
            return
        new_status, due = self._advance(pod, min(now, deadline), scheduled)
        if new_status.get("phase") not in _TERMINAL and now + _EPS >= deadline:
            self._kill(new_status, deadline)
        if new_status.get("phase") in _TERMINAL:
            if new_status != status:
                pod = self.api.update_status({**pod, "status": new_status})
            self._final_delete(pod)
            return
        if new_status != status:
            self.api.update_status({**pod, "status": new_status})
        self._at(deadline if due is None else min(due, deadline), key)

    def _final_delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if meta.get("deletionGracePeriodSeconds") == 0:
            return  # already finally deleted: only finalizers keep the pod
        self.api.delete(
            "Pod",
            meta["name"],
            meta["namespace"],
            grace_period_seconds=0,
            preconditions={"uid": meta["uid"]},
            api_version="v1",
        )

    def _kill(self, status: Obj, t: float) -> None:
        """SIGKILL at the end of the grace period: every container ends with 137."""
        for field in ("initContainerStatuses", "containerStatuses"):
            for cs in status.get(field) or ():
                state = cs.get("state") or {}
                if "terminated" in state:
                    continue
                started = (state.get("running") or {}).get("startedAt")
                cs["state"] = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": started,
                        "finishedAt": _ts(t),
                        "containerID": cs.get("containerID"),
                    }
                }
                cs["ready"] = False
                cs["started"] = False
        self._finish_pod(status, t)

    def _scheduled_at(self, pod: Obj) -> float | None:
        cond = _condition(pod, "PodScheduled")
        if cond is not None and cond.get("status") == "True":
            return _t(cond.get("lastTransitionTime")) or _t(pod["metadata"].get("creationTimestamp")) or 0.0
        if (pod.get("spec") or {}).get("nodeName"):
            return _t(pod["metadata"].get("creationTimestamp")) or 0.0
        return None

    def _schedule(self, pod: Obj, now: float) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        due = (_t(meta.get("creationTimestamp")) or now) + self.timing.schedule_delay
        if now + _EPS < due:
            self._at(due, key)
            return
        spec = pod.get("spec") or {}
        if not self._nodes:
            self.api.bind(meta["namespace"], meta["name"], "")
            return
        fitting = [n for n in sorted(self._nodes) if self._node_fits(self._nodes[n], spec)]
        if not fitting:
            self._unschedulable[key] = None
            status = copy_json(pod.get("status") or {})
            conds = status.setdefault("conditions", [])
            msg = f"0/{len(self._nodes)} nodes are available: none is ready, schedulable and matching."
            _set_condition(conds, "PodScheduled", "False", now, "Unschedulable", message=msg)
            if status != pod.get("status"):
                self.api.update_status({**pod, "status": status})
            return
        node = fitting[self._rr % len(fitting)]
        self._rr += 1
        self.api.bind(meta["namespace"], meta["name"], node)

    # the kubelet's state machine

    def _plan(self, pod: Obj, container: Obj) -> ContainerRun:
        k = (pod["metadata"]["uid"], container.get("name", ""))
        plan = self._plans.get(k)
        if plan is None:
            plan = plan_container(
                container,
                pod["metadata"].get("annotations") or {},
                {"HOSTNAME": pod["metadata"]["name"]},
            )
            self._plans[k] = plan
        return plan

    def _backoff(self, restarts: int) -> float:
        return min(self.timing.backoff_base * (2 ** min(restarts, 30)), self.timing.backoff_max)

    @staticmethod
    def _container_id(pod: Obj, name: str, restarts: int) -> str:
        return f"sim://{pod['metadata']['uid']}/{name}/{restarts}"

    def _run(self, pod: Obj, cs: Obj, t: float) -> None:
        cs["state"] = {"running": {"startedAt": _ts(t)}}
        cs["ready"] = True
        cs["started"] = True
        cs["containerID"] = self._container_id(pod, cs["name"], int(cs.get("restartCount", 0)))

    def _advance(self, pod: Obj, now: float, scheduled: float) -> tuple[Obj, float | None]:
        """Apply every kubelet transition due by ``now``; return (status, next due or None)."""
        spec = pod["spec"]
        status: Obj = copy_json(pod.get("status") or {})
        if status.get("phase") in _TERMINAL:
            return status, None
        inits = list(spec.get("initContainers") or ())
        mains = list(spec.get("containers") or ())
        conds = status.setdefault("conditions", [])
        node = spec.get("nodeName")
        if "startTime" not in status:
            t0 = scheduled + self.timing.start_delay
            if now + _EPS < t0:
                return status, t0
            status["startTime"] = _ts(t0)
            if node and node in self._nodes:
                addrs = (self._nodes[node].get("status") or {}).get("addresses") or ()
                host_ip = next((a.get("address") for a in addrs if a.get("type") == "InternalIP"), None)
                if host_ip:
                    status["hostIP"] = host_ip
            _set_condition(
                conds,
                "Initialized",
                "False" if inits else "True",
                t0,
                "ContainersNotInitialized" if inits else None,
            )
            _set_condition(conds, "Ready", "False", t0, "ContainersNotReady")
            _set_condition(conds, "ContainersReady", "False", t0, "ContainersNotReady")
            waiting = "PodInitializing" if inits else "ContainerCreating"
            if inits:
                status["initContainerStatuses"] = [self._new_status(c, "PodInitializing") for c in inits]
            status["containerStatuses"] = [self._new_status(c, waiting) for c in mains]
            if inits:
                self._run(pod, status["initContainerStatuses"][0], t0)
            else:
                self._start_mains(pod, status, t0)
        while True:
            nxt = self._next(pod, status, inits, mains)
            if nxt is None:
                return status, None
            due, what, idx = nxt
            if due > now + _EPS:
                return status, due
            self._apply(pod, status, what, idx, due)
            if status.get("phase") in _TERMINAL:
                return status, None

    @staticmethod
    def _new_status(c: Obj, reason: str) -> Obj:
        return {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": reason}},
            "lastState": {},
        }

    def _start_mains(self, pod: Obj, status: Obj, t: float) -> None:
        for cs in status["containerStatuses"]:
            self._run(pod, cs, t)
        status["phase"] = "Running"
        self._update_ready(status, t)

    def _next(
        self, pod: Obj, status: Obj, inits: list[Obj], mains: list[Obj]
    ) -> tuple[float, str, int] | None:
        best: tuple[float, str, int] | None = None
        for field, specs, prefix in (
            ("initContainerStatuses", inits, "init-"),
            ("containerStatuses", mains, ""),
        ):
            for i, cs in enumerate(status.get(field) or ()):
                state = cs.get("state") or {}
                if "running" in state:
                    plan = self._plan(pod, specs[i])
                    due = (_t(state["running"].get("startedAt")) or 0.0) + plan.duration
                    what = prefix + "finish"
                elif (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
                    last = (cs.get("lastState") or {}).get("terminated") or {}
                    due = (_t(last.get("finishedAt")) or 0.0) + self._backoff(int(cs.get("restartCount", 0)))
                    what = prefix + "restart"
                else:
                    continue
                if math.isinf(due):
                    continue
                if best is None or due < best[0]:
                    best = (due, what, i)
        return best

    def _apply(self, pod: Obj, status: Obj, what: str, i: int, t: float) -> None:
        inits = list(pod["spec"].get("initContainers") or ())
        mains = list(pod["spec"].get("containers") or ())
        policy = pod["spec"].get("restartPolicy", "Always")
        conds = status["conditions"]
        if what in ("finish", "init-finish"):
            field, specs = (
                ("containerStatuses", mains) if what == "finish" else ("initContainerStatuses", inits)
            )
            cs = status[field][i]
            plan = self._plan(pod, specs[i])
            running = cs["state"]["running"]
            term = {
                "exitCode": plan.exit_code,
                "reason": "Completed" if plan.exit_code == 0 else "Error",
                "startedAt": running.get("startedAt"),
                "finishedAt": _ts(t),
                "containerID": cs.get("containerID"),
            }
            cs["ready"] = False
            cs["started"] = False
            restart = (policy == "Always" and what == "finish") or (policy != "Never" and plan.exit_code != 0)
            if restart:
                cs["lastState"] = {"terminated": term}
                cs["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off restarting failed container {cs['name']}",
                    }
                }
            else:
                cs["state"] = {"terminated": term}
            if what == "init-finish":
                if plan.exit_code == 0:
                    if i + 1 < len(inits):
                        self._run(pod, status[field][i + 1], t)
                    else:
                        _set_condition(conds, "Initialized", "True", t)
                        self._start_mains(pod, status, t)
                elif not restart:
                    for main in status["containerStatuses"]:
                        main["state"] = {"waiting": {"reason": "PodInitializing"}}
                    status["phase"] = "Failed"
                    _set_condition(conds, "Initialized", "False", t, "PodFailed")
                    _set_condition(conds, "Ready", "False", t, "PodFailed")
                    _set_condition(conds, "ContainersReady", "False", t, "PodFailed")
                return
            self._finish_pod(status, t)
            self._update_ready(status, t)
        else:
            field = "containerStatuses" if what == "restart" else "initContainerStatuses"
            cs = status[field][i]
            cs["restartCount"] = int(cs.get("restartCount", 0)) + 1
            self._run(pod, cs, t)
            if what == "restart":
                self._update_ready(status, t)

    def _finish_pod(self, status: Obj, t: float) -> None:
        """Set the terminal phase when every main container terminated for good."""
        statuses = status.get("containerStatuses") or ()
        if not statuses or any("terminated" not in (cs.get("state") or {}) for cs in statuses):
            return
        ok = all(cs["state"]["terminated"].get("exitCode") == 0 for cs in statuses)
        status["phase"] = "Succeeded" if ok else "Failed"
        conds = status.setdefault("conditions", [])
        _set_condition(conds, "Ready", "False", t, "PodCompleted")
        _set_condition(conds, "ContainersReady", "False", t, "PodCompleted")

    @staticmethod
    def _update_ready(status: Obj, t: float) -> None:
        if status.get("phase") in _TERMINAL:
            return
        conds = status["conditions"]
        ready = all(cs.get("ready") for cs in status.get("containerStatuses") or ())
        reason = None if ready else "ContainersNotReady"
        _set_condition(conds, "ContainersReady", "True" if ready else "False", t, reason)
        _set_condition(conds, "Ready", "True" if ready else "False", t, reason)

    # logs

    def _logs(self, pod: Obj, container: str) -> str:
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        name = pod["metadata"]["name"]
        for field, specs in (
            ("containerStatuses", "containers"),
            ("initContainerStatuses", "initContainers"),
        ):
            for cs, cspec in zip(status.get(field) or (), spec.get(specs) or (), strict=False):
                if cs.get("name") != container:
                    continue
                state = cs.get("state") or {}
                plan = self._plan(pod, cspec)
                if "running" in state:
                    started = _t(state["running"].get("startedAt")) or 0.0
                    return plan.output_until(self.timers.now() - started)
                if "terminated" in state or (cs.get("lastState") or {}).get("terminated"):
                    return plan.stdout
                reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
                raise BadRequestError(
                    f'container "{container}" in pod "{name}" is waiting to start: {reason}'
                )
        raise BadRequestError(
            f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
        )


# -------------------------------------------------------------------- jobs


class JobController(Controller):
    """batch/v1 Jobs: pods from the template (ownerReference, ``job-name``/``controller-uid``
    labels, ``batch.kubernetes.io/job-tracking`` finalizer), ``completions``/``parallelism``,
    ``backoffLimit``, ``activeDeadlineSeconds``, ``Complete``/``Failed`` conditions,
    ``ttlSecondsAfterFinished``. A pod deleted before it succeeded counts as failed and is
    replaced at once (podReplacementPolicy TerminatingOrFailed); there is no re-creation back-off
    and ``suspend``, indexed completion and pod failure policies are not simulated."""

    name = "job"

    def __init__(self, api: SimAPIServer, timers: TimerService, *, strict: bool = False) -> None:
        super().__init__(api, timers, strict=strict)
        self._jobs: dict[tuple[str, str], Obj] = {}
        self._job_keys: dict[str, tuple[str, str]] = {}
        self._pods: dict[tuple[str, str], Obj] = {}
        self._pod_owner: dict[tuple[str, str], str] = {}
        self._pods_by_job: dict[str, dict[tuple[str, str], Obj]] = {}
        # "expectations", as in the real controller: pods created but not yet seen (per job uid),
        # and pods counted into a job's status whose finalizer removal was not seen yet.
        self._expect_create: dict[str, int] = {}
        self._counted: dict[str, str] = {}  # pod uid -> resourceVersion the removal was based on

    def stop(self) -> None:
        super().stop()
        self._jobs.clear()
        self._job_keys.clear()
        self._pods.clear()
        self._pod_owner.clear()
        self._pods_by_job.clear()
        self._expect_create.clear()
        self._counted.clear()

    def _open_watches(self) -> None:
        # pods first: after a restore, a Job must see its existing pods before it is reconciled,
        # or it would create a second pod and count the running one as lost
        self._watch("Pod", self._on_pod, "v1")
        self._watch("Job", self._on_job, "batch/v1")

    @staticmethod
    def _owner_uid(pod: Obj) -> str | None:
        for ref in pod["metadata"].get("ownerReferences") or ():
            if (
                ref.get("controller")
                and ref.get("kind") == "Job"
                and str(ref.get("apiVersion", "")).startswith("batch/")
            ):
                return str(ref.get("uid"))
        return None

    def _on_job(self, etype: str, job: Obj) -> None:
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        if etype == DELETED:
            self._jobs.pop(key, None)
            self._job_keys.pop(uid, None)
            for pod_key in list(self._pods_by_job.get(uid, {})):
                self._enqueue(("pod", *pod_key))
            return
        self._jobs[key] = job
        self._job_keys[uid] = key
        self._enqueue(("job", *key))

    def _on_pod(self, etype: str, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        owner = None if etype == DELETED else self._owner_uid(pod)
        if etype == DELETED or JOB_TRACKING_FINALIZER not in (meta.get("finalizers") or ()):
            self._counted.pop(meta["uid"], None)
        if etype == ADDED and owner is not None and self._expect_create.get(owner):
            self._expect_create[owner] -= 1
        previous = self._pod_owner.get(key)
        if previous is not None and previous != owner:
            pods = self._pods_by_job.get(previous)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del self._pods_by_job[previous]
            del self._pod_owner[key]
            if previous in self._job_keys:
                self._enqueue(("job", *self._job_keys[previous]))
        if etype == DELETED:
            self._pods.pop(key, None)
            return
        self._pods[key] = pod
        if owner is None:
            if JOB_TRACKING_FINALIZER in (meta.get("finalizers") or ()):
                self._enqueue(("pod", *key))
            return
        self._pod_owner[key] = owner
        self._pods_by_job.setdefault(owner, {})[key] = pod
        if owner in self._job_keys:
            self._enqueue(("job", *self._job_keys[owner]))
        elif JOB_TRACKING_FINALIZER in (meta.get("finalizers") or ()):
            self._enqueue(("pod", *key))

    def _reconcile_key(self, key: Hashable) -> None:
        what, ns, name = cast(tuple[str, str, str], key)
        if what == "job":
            self._sync((ns, name))
            return
        pod = self._pods.get((ns, name))
        if pod is None:
            return
        owner = self._owner_uid(pod)
        if owner is None or owner not in self._job_keys:
            self._release(pod)

    def _release(self, pod: Obj) -> None:
        """Remove the tracking finalizer from a pod no Job owns any more."""
        fins = pod["metadata"].get("finalizers") or ()
        if JOB_TRACKING_FINALIZER in fins:
            self._drop_finalizer(pod)

    def _drop_finalizer(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if self._counted.get(meta["uid"]) == meta["resourceVersion"]:
            return  # already removed from this version; the event is on its way
        self._counted[meta["uid"]] = meta["resourceVersion"]
        fins = [f for f in meta.get("finalizers") or () if f != JOB_TRACKING_FINALIZER]
        with contextlib.suppress(ConflictError, NotFoundError):
            self.api.patch(
                "Pod",
                meta["name"],
                {"metadata": {"finalizers": fins or None, "resourceVersion": meta["resourceVersion"]}},
                meta["namespace"],
                api_version="v1",
            )

    def _sync(self, key: tuple[str, str]) -> None:
        job = self._jobs.get(key)
        if job is None:
            return
        meta = job["metadata"]
        uid = meta["uid"]
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        now = self.timers.now()
        pods = [p for _, p in sorted(self._pods_by_job.get(uid, {}).items())]
        finished = self._finished(job)
        if "deletionTimestamp" in meta or finished is not None:
            for p in pods:
                if JOB_TRACKING_FINALIZER in (p["metadata"].get("finalizers") or ()) and (
                    "deletionTimestamp" in p["metadata"] or (p.get("status") or {}).get("phase") in _TERMINAL
                ):
                    self._drop_finalizer(p)
            if finished is not None and "deletionTimestamp" not in meta:
                self._ttl(job, finished, now)
            return
        if self._expect_create.get(uid):
            return  # wait until the pods just created are seen
        new_status = copy_json(status)
        new_status.setdefault("startTime", _ts(now))
        start = _t(new_status["startTime"]) or now
        counted_ok: list[Obj] = []
        counted_fail: list[Obj] = []
        active: list[Obj] = []
        for p in pods:
            pmeta = p["metadata"]
            phase = (p.get("status") or {}).get("phase")
            deleting = "deletionTimestamp" in pmeta
            if pmeta["uid"] in self._counted:
                if (
                    JOB_TRACKING_FINALIZER in (pmeta.get("finalizers") or ())
                    and self._counted[pmeta["uid"]] != pmeta["resourceVersion"]
                ):
                    self._drop_finalizer(p)  # an earlier removal lost a race: retry
                continue
            if JOB_TRACKING_FINALIZER in (pmeta.get("finalizers") or ()):
                if phase == "Succeeded":
                    counted_ok.append(p)
                    continue
                if phase == "Failed" or deleting:
                    counted_fail.append(p)
                    continue
            if not deleting and phase not in _TERMINAL:
                active.append(p)
        succeeded = int(new_status.get("succeeded", 0)) + len(counted_ok)
        failed = int(new_status.get("failed", 0)) + len(counted_fail)
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        deadline = spec.get("activeDeadlineSeconds")
        conds = new_status.setdefault("conditions", [])
        fail: tuple[str, str] | None = None
        if failed > backoff_limit:
            fail = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and now + _EPS >= start + float(deadline):
            fail = ("DeadlineExceeded", "Job was active longer than specified deadline")
        if completions is not None:
            complete = succeeded >= int(completions)
        else:
            complete = succeeded > 0 and not active
        to_delete: list[Obj] = []
        to_create = 0
        if fail is not None:
            _set_condition(conds, "Failed", "True", now, fail[0], message=fail[1])
            to_delete = active
            active = []
        elif complete:
            _set_condition(conds, "Complete", "True", now)
            new_status["completionTime"] = _ts(now)
            to_delete = active
            active = []
        else:
            want = parallelism if completions is None else min(parallelism, int(completions) - succeeded)
            if succeeded > 0 and completions is None:
                want = 0
            if len(active) < want:
                to_create = want - len(active)
            elif len(active) > want:
                to_delete = active[want:]
                active = active[:want]
        new_status["active"] = len(active) + to_create
        new_status["succeeded"] = succeeded
        new_status["failed"] = failed
        new_status["ready"] = sum(1 for p in active if (_condition(p, "Ready") or {}).get("status") == "True")
        for k in ("active", "succeeded", "failed"):
            if not new_status[k] and k not in status:
                new_status.pop(k)
        if not conds:
            new_status.pop("conditions")
        if new_status != status:
            self.api.update_status({**job, "status": new_status})
        for p in counted_ok + counted_fail:
            self._drop_finalizer(p)
        for p in to_delete:
            with contextlib.suppress(NotFoundError):
                self.api.delete("Pod", p["metadata"]["name"], p["metadata"]["namespace"], api_version="v1")
        for _ in range(to_create):
            self._create_pod(job)
        if fail is None and not complete and deadline is not None:
            self._at(start + float(deadline), ("job", *key))
        elif fail is not None or complete:
            job = self._jobs.get(key) or job
            finished = self._finished(job) or now
            self._ttl(job, finished, now)

    @staticmethod
    def _finished(job: Obj) -> float | None:
        for ctype in ("Complete", "Failed"):
            cond = _condition(job, ctype)
            if cond is not None and cond.get("status") == "True":
                return _t((job.get("status") or {}).get("completionTime")) or _t(
                    cond.get("lastTransitionTime")
                )
        return None

    def _ttl(self, job: Obj, finished: float, now: float) -> None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        due = finished + float(ttl)
        if now + _EPS >= due:
            self.api.delete(
                "Job",
                meta["name"],
                meta["namespace"],
                propagation="Foreground",
                preconditions={"uid": meta["uid"]},
                api_version="batch/v1",
            )
        else:
            self._at(due, ("job", *key))

    def _create_pod(self, job: Obj) -> None:
        meta = job["metadata"]
        template = copy_json((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        pod_meta: Obj = {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": tmeta.get("labels") or {},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": [JOB_TRACKING_FINALIZER],
        }
        if tmeta.get("annotations"):
            pod_meta["annotations"] = tmeta["annotations"]
        self.api.create(
            {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}
        )
        self._expect_create[meta["uid"]] = self._expect_create.get(meta["uid"], 0) + 1


# -------------------------------------------------------------- chaos mesh

CHAOS_GROUP = "chaos-mesh.org"
CHAOS_VERSION = "v1alpha1"
CHAOS_KINDS: tuple[str, ...] = (
    "PodChaos",
    "NetworkChaos",
    "StressChaos",
    "IOChaos",
    "TimeChaos",
    "KernelChaos",
    "DNSChaos",
    "HTTPChaos",
    "JVMChaos",
    "AWSChaos",
    "GCPChaos",
    "AzureChaos",
    "BlockChaos",
    "PhysicalMachineChaos",
)
#: kinds whose targets are not pods: they get one record named after the chaos object
_NON_POD_CHAOS = frozenset({"AWSChaos", "GCPChaos", "AzureChaos", "PhysicalMachineChaos"})
RECORDS_FINALIZER = "chaos-mesh/records"
PAUSE_ANNOTATION = "experiment.chaos-mesh.org/pause"


def chaos_crd(kind: str) -> Obj:
    """A CustomResourceDefinition for one Chaos Mesh kind (namespaced, with status)."""
    plural = kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{CHAOS_GROUP}", "labels": {"app.kubernetes.io/name": "chaos-mesh"}},
        "spec": {
            "group": CHAOS_GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": CHAOS_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


@dataclass(frozen=True, slots=True)
class ChaosTiming:
    #: from creation until the chaos is injected (status AllInjected=True)
    inject_delay: float = 0.1
    #: from deletionTimestamp until recovery is done and the finalizer is removed
    recover_delay: float = 0.1


class ChaosController(Controller):
    """Installs the Chaos Mesh CRDs and plays the chaos-controller-manager.

    On creation the chaos gets the ``chaos-mesh/records`` finalizer; after ``inject_delay`` the
    selector is evaluated once (``namespaces`` — default: the chaos's namespace —,
    ``labelSelectors``, ``expressionSelectors``, ``annotationSelectors``, ``fieldSelectors``,
    ``podPhaseSelectors``, ``nodes``, ``pods``) and ``mode`` (one, all, fixed, fixed-percent,
    random-max-percent; the random choice uses the injected ``rng``) picks the targets, recorded
    in ``status.experiment.containerRecords``. ``PodChaos`` ``pod-kill`` deletes the targets once
    (grace ``spec.gracePeriod``, default 0) and is one-shot: ``AllInjected`` is True at once.
    Other actions and kinds only change status. ``spec.duration`` elapsed or the pause annotation
    -> ``desiredPhase: Stop`` and recovery. Deletion: ``recover_delay`` later the records are
    recovered (``AllRecovered=True``), then the finalizer is removed and the object goes away.
    """

    name = "chaos"

    def __init__(
        self,
        api: SimAPIServer,
        timers: TimerService,
        rng: random.Random,
        *,
        timing: ChaosTiming | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(api, timers, strict=strict)
        self.rng = rng
        self.timing = timing or ChaosTiming()
        self._objs: dict[tuple[str, str, str], Obj] = {}

    def install_crds(self) -> None:
        """Create the chaos-mesh.org CRDs that do not exist yet."""
        for kind in CHAOS_KINDS:
            crd = chaos_crd(kind)
            try:
                self.api.get("CustomResourceDefinition", crd["metadata"]["name"])
            except NotFoundError:
                self.api.create(crd)

    def start(self) -> None:
        self.install_crds()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._objs.clear()

    def _open_watches(self) -> None:
        for kind in CHAOS_KINDS:
            self._watch(kind, self._on_chaos, f"{CHAOS_GROUP}/{CHAOS_VERSION}")

    def _on_chaos(self, etype: str, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (obj["kind"], meta["namespace"], meta["name"])
        if etype == DELETED:
            self._objs.pop(key, None)
            return
        self._objs[key] = obj
        self._enqueue(key)

    def _reconcile_key(self, key: Hashable) -> None:
        obj = self._objs.get(cast(tuple[str, str, str], key))
        if obj is not None:
            self._reconcile(obj)

    def _reconcile(self, obj: Obj) -> None:
        meta = obj["metadata"]
        kind = obj["kind"]
        key = (kind, meta["namespace"], meta["name"])
        now = self.timers.now()
        fins = list(meta.get("finalizers") or ())
        deleting = "deletionTimestamp" in meta
        if not deleting and RECORDS_FINALIZER not in fins:
            self.api.patch(
                kind,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": [*fins, RECORDS_FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
                meta["namespace"],
                api_version=f"{CHAOS_GROUP}/{CHAOS_VERSION}",
            )
            return
        status = obj.get("status") or {}
        new_status = copy_json(status)
        experiment = new_status.setdefault("experiment", {})
        conds = new_status.setdefault("conditions", [])
        if deleting:
            due = (_t(meta["deletionTimestamp"]) or now) + self.timing.recover_delay
            if now + _EPS < due:
                self._at(due, key)
                return
            experiment["desiredPhase"] = "Stop"
            self._recover(experiment)
            self._conditions(conds, experiment, now, stopped=True, paused=False)
            if new_status != status:
                obj = self.api.update_status({**obj, "status": new_status})
            meta = obj["metadata"]
            left = [f for f in meta.get("finalizers") or () if f != RECORDS_FINALIZER]
            self.api.patch(
                kind,
                meta["name"],
                {"metadata": {"finalizers": left or None, "resourceVersion": meta["resourceVersion"]}},
                meta["namespace"],
                api_version=f"{CHAOS_GROUP}/{CHAOS_VERSION}",
            )
            return
        created = _t(meta.get("creationTimestamp")) or now
        inject_at = created + self.timing.inject_delay
        if now + _EPS < inject_at:
            experiment.setdefault("desiredPhase", "Run")
            self._conditions(conds, experiment, now, stopped=False, paused=False)
            if new_status != status:
                self.api.update_status({**obj, "status": new_status})
            self._at(inject_at, key)
            return
        spec = obj.get("spec") or {}
        stop_at: float | None = None
        if spec.get("duration"):
            try:
                stop_at = created + parse_go_duration(str(spec["duration"]))
            except ValueError:
                log.warning(
                    "%s %s/%s: bad duration %r", kind, meta["namespace"], meta["name"], spec["duration"]
                )
        paused = (meta.get("annotations") or {}).get(PAUSE_ANNOTATION) == "true"
        stopped = paused or (stop_at is not None and now + _EPS >= stop_at)
        if "containerRecords" not in experiment:
            experiment["containerRecords"] = self._select(obj)
        if stopped:
            experiment["desiredPhase"] = "Stop"
            self._recover(experiment)
        else:
            experiment["desiredPhase"] = "Run"
            self._inject(obj, experiment)
        self._conditions(conds, experiment, now, stopped=stopped, paused=paused)
        if new_status != status:
            self.api.update_status({**obj, "status": new_status})
        if not stopped and stop_at is not None:
            self._at(stop_at, key)

    @staticmethod
    def _conditions(conds: list[Obj], experiment: Obj, now: float, *, stopped: bool, paused: bool) -> None:
        records = experiment.get("containerRecords")
        if records is None:
            values = {"Selected": "False", "AllInjected": "False", "AllRecovered": "False"}
        else:
            injected = [r.get("phase") == "Injected" for r in records]
            values = {
                "Selected": "True" if records else "False",
                "AllInjected": "True" if records and all(injected) else "False",
                "AllRecovered": "True" if (not any(injected) and (records or stopped)) else "False",
            }
        values["Paused"] = "True" if paused else "False"
        for ctype in ("Selected", "AllInjected", "AllRecovered", "Paused"):
            _set_condition(conds, ctype, values[ctype], now)
        for c in conds:
            c.pop("lastProbeTime", None)

    @staticmethod
    def _recover(experiment: Obj) -> None:
        for r in experiment.get("containerRecords") or ():
            if r.get("phase") == "Injected":
                r["phase"] = "Not Injected"
                r["recoveredCount"] = int(r.get("recoveredCount", 0)) + 1

    def _inject(self, obj: Obj, experiment: Obj) -> None:
        spec = obj.get("spec") or {}
        one_shot = obj["kind"] == "PodChaos" and spec.get("action") in ("pod-kill", "container-kill")
        for r in experiment.get("containerRecords") or ():
            if r.get("phase") == "Injected":
                continue
            if one_shot and int(r.get("injectedCount", 0)) > 0:
                continue
            if obj["kind"] == "PodChaos" and spec.get("action") == "pod-kill":
                ns, _, name = str(r.get("id", "")).partition("/")
                with contextlib.suppress(NotFoundError):
                    self.api.delete(
                        "Pod",
                        name,
                        ns,
                        grace_period_seconds=int(spec.get("gracePeriod", 0) or 0),
                        api_version="v1",
                    )
            r["phase"] = "Injected"
            r["injectedCount"] = int(r.get("injectedCount", 0)) + 1

    def _select(self, obj: Obj) -> list[Obj]:
        meta = obj["metadata"]
        spec = obj.get("spec") or {}
        if obj["kind"] in _NON_POD_CHAOS:
            return [self._record(f"{meta['namespace']}/{meta['name']}")]
        selector = spec.get("selector") or {}
        candidates: list[Obj] = []
        explicit = selector.get("pods") or {}
        try:
            if explicit:
                for ns in sorted(explicit):
                    for name in explicit[ns] or ():
                        try:
                            candidates.append(self.api.get("Pod", name, ns, api_version="v1"))
                        except NotFoundError:
                            continue
            else:
                label_sel: Obj = {}
                if selector.get("labelSelectors"):
                    label_sel["matchLabels"] = selector["labelSelectors"]
                if selector.get("expressionSelectors"):
                    label_sel["matchExpressions"] = selector["expressionSelectors"]
                ls = compile_label_selector(label_sel or None)
                namespaces = selector.get("namespaces") or [meta["namespace"]]
                for ns in sorted(set(namespaces)):
                    candidates.extend(self.api.list("Pod", ns, ls, api_version="v1")["items"])
        except APIError as e:
            log.warning("%s %s/%s: bad selector: %s", obj["kind"], meta["namespace"], meta["name"], e)
            return []
        phases = selector.get("podPhaseSelectors") or ()
        nodes = selector.get("nodes") or ()
        annotations = selector.get("annotationSelectors") or {}
        fields = selector.get("fieldSelectors") or {}
        picked = []
        for p in candidates:
            pmeta = p["metadata"]
            if "deletionTimestamp" in pmeta:
                continue
            if phases and (p.get("status") or {}).get("phase") not in phases:
                continue
            if nodes and (p.get("spec") or {}).get("nodeName") not in nodes:
                continue
            pann = pmeta.get("annotations") or {}
            if any(pann.get(k) != v for k, v in annotations.items()):
                continue
            if any(str(get_path(p, k) or "") != str(v) for k, v in fields.items()):
                continue
            picked.append(f"{pmeta['namespace']}/{pmeta['name']}")
        picked.sort()
        chosen = self._mode(spec, picked)
        return [self._record(pid) for pid in chosen]

    @staticmethod
    def _record(pid: str) -> Obj:
        return {
            "id": pid,
            "selectorKey": ".",
            "phase": "Not Injected",
            "injectedCount": 0,
            "recoveredCount": 0,
        }

    def _mode(self, spec: Mapping[str, Any], ids: list[str]) -> list[str]:
        mode = spec.get("mode", "one")
        n = len(ids)
        if n == 0:
            return []
        value = str(spec.get("value", "") or "")
        if mode == "all":
            return ids
        if mode == "one":
            count = 1
        elif mode == "fixed":
            count = min(n, max(0, int(value or "0")))
        elif mode == "fixed-percent":
            count = n * max(0, min(100, int(value or "0"))) // 100
        elif mode == "random-max-percent":
            max_percent = max(0, min(100, int(value or "0")))
            count = n * self.rng.randint(0, max_percent) // 100
        else:
            log.warning("unknown chaos mode %r: selecting nothing", mode)
            return []
        return sorted(self.rng.sample(ids, count))
