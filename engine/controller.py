"""``chaosflow controller``: run Workflow objects found in the API server.

One process, several threads:

- the **engine thread** (main thread) runs the same :class:`WorkflowManager` loop as local runs, on
  the real clock; every change to the manager's runs happens here. Watch callbacks and the leader
  elector hand work over with ``trigger.call_later(0, fn)`` (thread-safe, runs ``fn`` on this
  thread);
- actor threads (a bounded pool) talk to the target clusters through the KubePlayground;
- the leader elector renews a Lease; the event recorder posts Events; the HTTP server answers
  ``/healthz``, ``/readyz`` and ``/metrics``.

Only the leader acts: it subscribes to Workflows (all namespaces, or ``--namespace``), lists them,
adopts each one (a fresh one starts; a half-done one resumes from ``status`` — effects are
idempotent, so nothing is injected twice) and puts the ``chaosflow.io/cleanup`` finalizer on it.
Deleting a Workflow aborts it with cleanup; the finalizer is removed when its run has finished
(chaos deleted). Controls are level-based annotations on the Workflow (engine/control.py),
applied on the engine thread whenever the object changes and on adoption: ``chaosflow.io/abort``
(or Chaos Mesh's ``workflow.chaos-mesh.org/abort``) ``"true"`` stops a run, ``chaosflow.io/terminate:
"true"`` terminates it, ``chaosflow.io/suspend: "true"`` / ``chaosflow.io/suspend-nodes: "a,b"``
suspend it or subtrees (removing them continues), ``chaosflow.io/approve: "a,b"`` ends those
Suspend steps; each action is recorded as an Event (Stopped, Terminated, Suspended, Resumed,
Approved). A leader that cannot renew its Lease stops
writing at once and exits (its replacement resumes the runs). SIGTERM stops the loop, flushes
status and releases the Lease.

CronWorkflows (engine/cron_kube.py): once the Workflows are synced, the leader also watches and lists
CronWorkflows in the same namespaces and keeps one CronDriver per object; their children are Workflow
objects it creates (and then runs like any other). Changes of a child's phase re-sync its cron.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from prometheus_client import Counter, Gauge

from actors.base import ActorError
from actors.kube import ClusterConfig, KubePlayground
from engine.clock import RealClock
from engine.control import AnnotationReconciler, parse_annotations
from engine.cron_kube import KubeCronWorkflows
from engine.events import EventRecorder
from engine.kubestore import KubeStore, run_of, workflow_doc
from engine.leader import LeaderElector, default_identity
from engine.manager import WorkflowManager
from engine.model import API_VERSION
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from triggers.operable import OperableTrigger

log = logging.getLogger("chaosflow.controller")

KIND = "Workflow"
FINALIZER = "chaosflow.io/cleanup"
HOME = "default"

IS_LEADER = Gauge("chaosflow_controller_is_leader", "1 while this controller holds the Lease")
STATUS_WRITES = Counter("chaosflow_controller_status_writes_total", "Workflow status writes")
WORKFLOW_EVENTS = Counter(
    "chaosflow_controller_workflow_watch_events_total", "Workflow watch events handled", ["type"]
)


def _key(obj: dict[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


class Controller:
    def __init__(
        self,
        playground: KubePlayground,
        *,
        namespaces: list[str] | None = None,
        actor_workers: int = 8,
        elector: LeaderElector | None = None,
        identity: str | None = None,
    ) -> None:
        self.pg = playground
        self.namespaces = namespaces or []
        self.clock = RealClock()
        self.trigger = OperableTrigger(self.clock)
        self.store = KubeStore(playground, HOME)
        self.manager = WorkflowManager(
            playground, self.clock, self.trigger, self.store, actor_workers=actor_workers
        )
        self.events = EventRecorder(playground, HOME)
        self.events.host = identity or default_identity()
        self.manager.phase_listeners.append(self.events.node_changed)
        self.manager.workflow_listeners.append(self._workflow_changed)
        self.controls = AnnotationReconciler(self.manager)
        self.manager.phase_listeners.append(self._node_changed)
        self.elector = elector
        self.metrics: Any = None
        try:  # the engine's metrics (engine/metrics.py, default registry), when available
            from engine.metrics import Metrics

            self.metrics = Metrics().attach(self.manager)
        except (ImportError, AttributeError, ValueError) as e:  # pragma: no cover
            log.warning("engine metrics not available: %s", e)
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = False
        self.lost = False
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._subs: list[Any] = []
        self._last_retry = 0.0
        self._writes_reported = 0
        self.crons = KubeCronWorkflows(
            playground,
            HOME,
            self.trigger,
            self.clock,
            self.objects,
            abort_run=self._abort_run,
            metrics=self.metrics,
            events=self.events,
            stopped=self._stop.is_set,
            fenced=lambda: self.lost or self.store.fenced_all,
        )

    # --- health ---------------------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        return (not self.lost, "lost leadership" if self.lost else "")

    def ready(self) -> tuple[bool, str]:
        if self.elector is not None:
            if not self.elector.attempted:
                return False, "leader election not started"
            if not self.elector.leading:
                return True, f"standing by (leader: {self.elector.holder or 'none'})"
        return (self.synced, "" if self.synced else "caches not synced")

    # --- lifecycle --------------------------------------------------------------------------------
    def _set_leader(self, leading: bool) -> None:
        IS_LEADER.set(1 if leading else 0)
        if self.metrics is not None:
            self.metrics.set_leader(leading)

    def on_started_leading(self) -> None:
        self._set_leader(True)
        self._leading.set()

    def on_stopped_leading(self) -> None:
        """Called from the elector thread: stop writing at once; the process exits."""
        self._set_leader(False)
        self.lost = True
        self.store.fenced_all = True
        self._stop.set()
        self.trigger.call_later(0, lambda: None)  # wake the engine loop

    def request_stop(self) -> None:
        self._stop.set()
        self.trigger.call_later(0, lambda: None)

    def run(self) -> int:
        """Blocks until stopped (SIGTERM) or leadership is lost. Returns the exit code."""
        self.events.start()
        if self.elector is not None:
            self.elector.start()
            while not self._leading.wait(0.2):
                if self._stop.is_set():
                    return self._shutdown()
        else:
            self.on_started_leading()
        try:
            self._start_acting()
        except ActorError as e:
            log.error("cannot start: %s", e)
            self._stop.set()
            self._shutdown()
            return 1
        while not self._stop.is_set():
            self.manager.run(until=self._tick)
            if not self._stop.is_set():
                self.trigger.wait(0.5)
        return self._shutdown()

    def _tick(self) -> bool:
        if self._stop.is_set():
            return True
        if self.store.pending() and time.monotonic() - self._last_retry > 1.0:
            self._last_retry = time.monotonic()
            self.store.flush()
        if self.store.writes > self._writes_reported:
            STATUS_WRITES.inc(self.store.writes - self._writes_reported)
            self._writes_reported = self.store.writes
        return False

    def _start_acting(self) -> None:
        log.info("starting: watching Workflows in %s", ", ".join(self.namespaces) or "all namespaces")
        for ns in list[str | None](self.namespaces) or [None]:
            self._subs.append(self.pg.watch(HOME, API_VERSION, KIND, ns, self._on_watch))
        for ns in list[str | None](self.namespaces) or [None]:
            for obj in self.pg.list(HOME, API_VERSION, KIND, ns):
                self._handle("ADDED", obj)
        log.info("synced: %d workflow(s)", len(self.objects))
        self.crons.start(list[str | None](self.namespaces))  # after the Workflows: its children
        self.synced = True

    def _shutdown(self) -> int:
        for s in self._subs:
            s.stop()
        self.crons.stop()
        if not self.lost:
            self.store.flush()
        self.manager.watch.close()
        if self.manager._executor is not None:
            self.manager._executor.shutdown(wait=False, cancel_futures=True)
        self.events.stop()
        if self.elector is not None:
            if not self.lost:
                self.elector.release()
            self.elector.stop()
        self._set_leader(False)
        log.info("stopped (status writes: %d, conflicts: %d)", self.store.writes, self.store.conflicts)
        return 1 if self.lost else 0

    # --- Workflow objects ------------------------------------------------------------------------
    def _on_watch(self, event_type: str, obj: dict[str, Any]) -> None:
        """Watch thread: hand over to the engine thread."""
        self.trigger.call_later(0, lambda: self._handle_event(event_type, obj))

    def _handle_event(self, event_type: str, obj: dict[str, Any]) -> None:
        old = self.objects.get(_key(obj))
        self._handle(event_type, obj)
        if not self._stop.is_set():
            try:
                self.crons.child_event(event_type, old, obj)  # a CronWorkflow's child: re-sync it
            except Exception:  # never stop the engine loop
                log.exception("cron: child event of %s failed", _key(obj))

    def _abort_run(self, key: str, message: str) -> None:
        """Replace (engine/cron_kube.py): abort a child this process runs, with the cron's message
        (the ``chaosflow.io/abort`` annotation set on it covers the other cases)."""
        run = self.manager.runs.get(key)
        if run is not None and not run.phase.finished and not run.abort_requested:
            log.info("workflow %s: %s", key, message)
            self.manager.abort(key, message)

    def _handle(self, event_type: str, obj: dict[str, Any]) -> None:
        if self._stop.is_set():
            return
        WORKFLOW_EVENTS.labels(event_type).inc()
        key = _key(obj)
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        mgr = self.manager
        run = mgr.runs.get(key)
        if run is not None and run.workflow.metadata.model_extra is not None:
            known_uid = (run.workflow.metadata.model_extra or {}).get("uid")
            if known_uid and uid and known_uid != uid:  # deleted and re-created under the same name
                if not run.phase.finished:
                    mgr.abort(key, "workflow object was replaced")
                    return
                del mgr.runs[key]
                self.store.forget(key)
                self.controls.forget(key)
                run = None
        if event_type == "DELETED":
            self.objects.pop(key, None)
            if run is not None:
                if not run.phase.finished:
                    mgr.abort(key, "workflow object deleted")
                else:
                    mgr.runs.pop(key, None)
                    self.store.forget(key)
                    self.controls.forget(key)
            return
        old = self.objects.get(key)
        if old is not None and _rv_int(old) > _rv_int(obj):
            return  # stale (a list result older than a watch event)
        self.objects[key] = obj
        self.store.seen(obj)
        self.events.uids[key] = str(uid)
        deleting = bool(meta.get("deletionTimestamp"))
        finalizers = list(meta.get("finalizers") or [])
        if run is None:
            if deleting:
                if FINALIZER in finalizers and not self._needs_cleanup(obj):
                    self._remove_finalizer(key)
                    return
            elif FINALIZER not in finalizers:
                self._add_finalizer(obj)
            run = self._adopt(obj)
            if run is None:
                return
        if run.phase.finished:
            if deleting and FINALIZER in finalizers:
                self._remove_finalizer(key)
            return
        if deleting:
            if not run.abort_requested:
                log.info("workflow %s is being deleted: stopping it (chaos is cleaned up first)", key)
                mgr.abort(key, "workflow deleted")
            return
        self._apply_controls(run, obj)

    def _apply_controls(self, run: WorkflowRun, obj: dict[str, Any]) -> None:
        """The control annotations (level-based: only what differs from the run's state is done)."""
        want = parse_annotations(_annotations(obj))
        done = self.controls.reconcile(run.key, want)
        self._record(run, done)
        if done:  # a suspension changes no node: no engine tick may follow to write the status
            self.manager.flush()

    def _record(self, run: WorkflowRun, done: list[tuple[str, str, str]]) -> None:
        for etype, reason, message in done:
            if etype == "Warning":
                log.warning("workflow %s: %s", run.key, message)
            else:
                log.info("workflow %s: %s: %s", run.key, reason, message)
            self.events.emit(run, etype, reason, message)

    def _node_changed(self, run: WorkflowRun, node: Node, old: NodePhase) -> None:
        """A Suspend step starts holding: end it at once when the approve annotation names it."""
        if node.kind != "Suspend" or node.phase is not NodePhase.HOLDING:
            return
        obj = self.objects.get(run.key)
        if obj is None:
            return
        names = parse_annotations(_annotations(obj)).approve
        if node.name in names or node.template in names:
            self._record(run, self.controls.approve(run, names))

    @staticmethod
    def _needs_cleanup(obj: dict[str, Any]) -> bool:
        """Whether a Workflow being deleted may still hold something (it ran and did not finish)."""
        st = obj.get("status") or {}
        return bool(st.get("engine")) and st.get("phase") not in ("Succeed", "Failed")

    def _adopt(self, obj: dict[str, Any]) -> WorkflowRun | None:
        key = _key(obj)
        from engine.loader import parse_workflow

        wf, issues = parse_workflow(workflow_doc(obj), key)
        if wf is None:
            msg = "; ".join(str(i) for i in issues[:5])
            log.warning("workflow %s is invalid: %s", key, msg)
            self._invalid(obj, msg)
            return None
        try:
            run = run_of(obj, wf)
        except (ValueError, KeyError, TypeError) as e:
            self._invalid(obj, f"cannot resume from status: {e}")
            return None
        resumed = bool((obj.get("status") or {}).get("engine"))
        if resumed and not run.phase.finished:
            log.info("workflow %s: resuming from status (%s, %s nodes)", key, run.phase.value, run.progress())
        self.store.adopted(run, obj)
        self.manager.adopt(run)
        return run  # _handle applies deletion and the control annotations

    def _invalid(self, obj: dict[str, Any], message: str) -> None:
        st = obj.get("status") or {}
        if st.get("phase") == "Failed" and st.get("message") == message:
            return
        m = obj["metadata"]
        body = {"status": {"phase": "Failed", "message": message, "progress": "0/0"}}
        try:
            c = self.pg.cluster(HOME)
            res = c.resource(API_VERSION, KIND)
            c.call(
                "patch",
                f"{KIND} {_key(obj)}/status",
                lambda: c.dynamic.patch(
                    res.status,
                    body=body,
                    name=m["name"],
                    namespace=m["namespace"],
                    content_type="application/merge-patch+json",
                    serialize=False,
                ),
            )
        except ActorError as e:
            log.warning("cannot mark %s invalid: %s", _key(obj), e)
        self.events.emit_for(m["namespace"], m["name"], "Warning", "InvalidEntry", message)

    def _add_finalizer(self, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        patch = {
            "metadata": {
                "finalizers": [*(m.get("finalizers") or []), FINALIZER],
                "resourceVersion": m["resourceVersion"],
            }
        }
        try:
            new = self.pg.patch(HOME, API_VERSION, KIND, m["namespace"], m["name"], patch)
            self.objects[_key(obj)] = new
            self.store.seen(new)
        except ActorError as e:
            log.info("finalizer not added to %s (retried on the next event): %s", _key(obj), e)

    def _remove_finalizer(self, key: str) -> None:
        ns, name = key.split("/", 1)
        for _ in range(5):
            try:
                obj = self.pg.get(HOME, API_VERSION, KIND, ns, name)
                if obj is None:
                    return
                m = obj["metadata"]
                fins = [f for f in m.get("finalizers") or [] if f != FINALIZER]
                if fins == list(m.get("finalizers") or []):
                    return
                self.pg.patch(
                    HOME,
                    API_VERSION,
                    KIND,
                    ns,
                    name,
                    {"metadata": {"finalizers": fins or None, "resourceVersion": m["resourceVersion"]}},
                )
                log.info("workflow %s: cleanup done, finalizer removed", key)
                return
            except ActorError as e:
                log.info("removing the finalizer of %s: %s", key, e)
                time.sleep(0.2)

    def _workflow_changed(self, run: WorkflowRun) -> None:
        self.events.workflow_changed(run)
        if not run.phase.finished:
            return
        obj = self.objects.get(run.key)
        if obj is not None and (obj.get("metadata") or {}).get("deletionTimestamp"):
            key = run.key
            self.trigger.call_later(0, lambda: self._remove_finalizer(key))


def _rv_int(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


# --- command line ------------------------------------------------------------------------------------
def parse_cluster_flag(value: str) -> tuple[str, ClusterConfig]:
    """``NAME=KUBECONFIG[:CONTEXT]``."""
    name, sep, rest = value.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--cluster {value!r}: expected NAME=KUBECONFIG[:CONTEXT]")
    path, _, context = rest.partition(":")
    return name, ClusterConfig(kubeconfig=path, context=context or None)


def cluster_configs(args: argparse.Namespace, in_cluster_default: bool) -> dict[str, ClusterConfig]:
    clusters: dict[str, ClusterConfig] = {}
    if args.kubeconfig or args.context or not in_cluster_default:
        clusters[HOME] = ClusterConfig(kubeconfig=args.kubeconfig, context=args.context)
    else:
        clusters[HOME] = ClusterConfig.in_cluster()
    for flag in args.cluster or []:
        name, cfg = parse_cluster_flag(flag)
        clusters[name] = cfg
    return clusters


def _pod_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return os.environ.get("POD_NAMESPACE", "default")


def cmd_controller(args: argparse.Namespace) -> int:
    from engine.health import HealthServer

    try:
        clusters = cluster_configs(args, in_cluster_default=True)
        pg = KubePlayground(clusters)
    except (ValueError, ActorError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    identity = args.identity or default_identity()
    ctl: Controller
    elector = None
    if args.leader_elect:
        elector = LeaderElector(
            pg,
            args.lease_namespace or _pod_namespace(),
            args.lease_name,
            identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
            on_started=lambda: ctl.on_started_leading(),  # noqa: PLW0108 (ctl is bound below)
            on_stopped=lambda: ctl.on_stopped_leading(),  # noqa: PLW0108
        )
    ctl = Controller(
        pg, namespaces=args.namespace, actor_workers=args.actor_workers, elector=elector, identity=identity
    )
    health = None
    if args.health_addr:
        health = HealthServer(args.health_addr, ctl.healthy, ctl.ready)
        health.start()
        print(f"health: listening on port {health.port}", file=sys.stderr, flush=True)

    def on_signal(signum: int, frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        ctl.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = ctl.run()
    if health is not None:
        health.stop()
    pg.close()
    return rc
