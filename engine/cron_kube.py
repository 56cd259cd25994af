"""CronWorkflows in controller mode: the :class:`~engine.cron.CronBackend` on the API server.

``chaosflow controller`` (engine/controller.py) hands CronWorkflow watch events and changes of
their children to :class:`KubeCronWorkflows`, on the engine thread. It keeps one
:class:`~engine.cron.CronDriver` per valid CronWorkflow; each driver's backend is a
:class:`KubeCronBackend`:

- **children** are Workflow objects labelled ``chaosflow.io/cron-workflow: <cron>`` with the
  deterministic names of engine/cron.py, read from the Workflow objects the controller already
  watches (``Controller.objects``) plus those this process created and has not seen come back
  through the watch yet; a child's phase is its ``status.phase``;
- **submit** creates the Workflow with an ownerReference to the CronWorkflow (``controller:
  true``, ``blockOwnerDeletion: false``: no ``cronworkflows/finalizers`` permission needed), so
  the garbage collector deletes the children with their CronWorkflow. 409 AlreadyExists counts as
  done: a tick is never submitted twice, also across restarts and leader changes;
- **abort** (``concurrencyPolicy: Replace``) sets the ``chaosflow.io/abort: "true"`` annotation
  (durable: a restarted controller still aborts it) and, when this process runs the child, aborts
  the run at once with the "replaced by ..." message; the Workflow path cleans up its chaos;
- **delete** (history limits) deletes the Workflow object; its finalizer path cleans up.

Timers: each driver is woken at ``Reconcile.next_wake`` with ``trigger.call_at`` (a generation
number per CronWorkflow makes older timers no-ops), when one of its children is created, deleted
or changes phase, and when the CronWorkflow's ``metadata.generation`` changes (spec edit,
``suspend`` toggled). A failed reconcile (API error) is retried with backoff.

Status: the driver's :class:`~engine.cron.CronWorkflowStatus` is merge-patched into the
CronWorkflow's status subresource when it changed (``lastEvaluatedTime`` alone does not count: a
reconcile that neither ran nor skipped a tick changed nothing that a restart could miss). A
restarted controller or a new leader starts each driver from the stored status; the children stay
the source of truth (a child whose status write was lost is adopted, its tick never re-run).

Invalid CronWorkflows get a ``SpecError`` condition (reason ``InvalidSpec``, the validation
message) and no driver. Decisions are logged, counted in ``chaosflow_cron_runs_*`` and posted as
Events on the CronWorkflow (``Scheduled``, ``Skipped``, ``Replaced``; Warnings ``InvalidSpec``,
``WorkflowFailed``, ``SyncFailed``) through the controller's event recorder.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from actors.base import ActorError
from actors.kube.errors import KubeError
from engine.clock import Clock, parse_rfc3339, rfc3339
from engine.cron import (
    KIND,
    LABEL_CRON,
    AbortChild,
    Action,
    ChildInfo,
    CronDriver,
    CronWorkflow,
    CronWorkflowStatus,
    DeleteChild,
    SkipTick,
    SubmitChild,
    label_value,
    parse_cron_workflow,
)
from engine.model import API_VERSION, GROUP, Workflow

log = logging.getLogger("chaosflow.cron")

WORKFLOW_KIND = "Workflow"
ABORT_ANNOTATION = f"{GROUP}/abort"
#: metadata fields kept when parsing a CronWorkflow object (creationTimestamp starts the schedule)
META_KEEP = ("name", "namespace", "uid", "labels", "annotations", "generation", "creationTimestamp")
RETRY_MIN = 1.0
RETRY_MAX = 60.0

StatusPatcher = Callable[[str, str, dict[str, Any]], None]


class Playground(Protocol):
    """What the backend needs of :class:`~actors.kube.playground.KubePlayground`."""

    def create(self, cluster: str, obj: dict[str, Any]) -> dict[str, Any]: ...

    def patch(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
    ) -> dict[str, Any]: ...

    def delete(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> bool: ...


class Timers(Protocol):
    def call_at(self, at: float, callback: Callable[[], None]) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> None: ...


# --- objects <-> model ---------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def obj_key(obj: Mapping[str, Any]) -> str:
    m = _meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}"


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(_meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def child_phase(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    st = obj.get("status")
    return str(st.get("phase") or "") or None if isinstance(st, dict) else None


def child_info(obj: Mapping[str, Any]) -> ChildInfo:
    """A child Workflow object as the pure controller sees it (no status yet: ``Init``)."""
    st = obj.get("status")
    st = st if isinstance(st, dict) else {}
    finished_at: float | None = None
    fin = st.get("finishTime")
    if isinstance(fin, str) and fin:
        try:
            finished_at = parse_rfc3339(fin)
        except ValueError:
            finished_at = None
    return ChildInfo(str(st.get("phase") or "Init"), finished_at)


def cron_doc(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The CronWorkflow document of an API object (server-side metadata left out)."""
    meta = _meta(obj)
    doc: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion", API_VERSION),
        "kind": obj.get("kind", KIND),
        "metadata": {k: meta[k] for k in META_KEEP if k in meta},
        "spec": obj.get("spec") or {},
    }
    return doc


def stored_status(obj: Mapping[str, Any]) -> CronWorkflowStatus | None:
    """The status the API server holds (None when absent or unreadable: start afresh)."""
    raw = obj.get("status")
    if not isinstance(raw, dict) or not raw:
        return None
    try:
        return CronWorkflowStatus.model_validate(raw)
    except ValidationError as e:
        log.warning("cron %s: stored status ignored (%d error(s))", obj_key(obj), e.error_count())
        return None


def owner_reference(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    m = _meta(obj)
    if not m.get("uid") or not m.get("name"):
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }


def child_object(wf: Workflow, owner: dict[str, Any] | None) -> dict[str, Any]:
    obj = wf.model_dump(mode="json", exclude_none=True, exclude={"status"})
    if owner is not None:
        obj.setdefault("metadata", {})["ownerReferences"] = [dict(owner)]
    return obj


def status_body(status: CronWorkflowStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", exclude_none=True)


def comparable(body: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A status without ``lastEvaluatedTime`` (moves on every reconcile; see the module doc)."""
    if body is None:
        return None
    return {k: v for k, v in body.items() if k != "lastEvaluatedTime"}


def merge_patch(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """A merge patch (RFC 7386) of ``status`` from ``old`` to ``new``: removed keys become null."""
    body = dict(new)
    for k in old or {}:
        if k not in body:
            body[k] = None
    return body


# --- the backend -----------------------------------------------------------------------------------
class KubeCronBackend:
    """A :class:`~engine.cron.CronBackend` on the API server, for one CronWorkflow."""

    def __init__(
        self,
        pg: Playground,
        cluster: str,
        objects: Mapping[str, dict[str, Any]],
        owner: dict[str, Any] | None = None,
        abort_run: Callable[[str, str], None] | None = None,
    ) -> None:
        self.pg = pg
        self.cluster = cluster
        self.objects = objects  # the controller's Workflow objects by key (live)
        self.owner = owner
        self.abort_run = abort_run
        # children created by this process, until the watch brings them into ``objects``
        self.created: dict[str, dict[str, Any]] = {}

    def children(self, cron: CronWorkflow) -> dict[str, dict[str, Any]]:
        """This cron's child objects by name (finished ones being deleted left out)."""
        label = label_value(cron.name)
        ns = cron.namespace
        out: dict[str, dict[str, Any]] = {}
        for key in list(self.created):
            if key in self.objects:
                del self.created[key]
        for obj in [*self.objects.values(), *self.created.values()]:
            m = _meta(obj)
            if m.get("namespace") != ns or (m.get("labels") or {}).get(LABEL_CRON) != label:
                continue
            info = child_info(obj)
            if m.get("deletionTimestamp") and info.finished:
                continue  # on its way out (history limit): asked already
            out[str(m.get("name"))] = obj
        return out

    def list_children(self, cron: CronWorkflow) -> dict[str, ChildInfo]:
        return {name: child_info(obj) for name, obj in self.children(cron).items()}

    def submit(self, workflow: Workflow) -> None:
        obj = child_object(workflow, self.owner)
        got = self.pg.create(self.cluster, obj)  # AlreadyExists: the existing object (done)
        key = obj_key(got) if _meta(got).get("name") else f"{workflow.namespace}/{workflow.name}"
        labels = _meta(got).get("labels") or {}
        if labels.get(LABEL_CRON) != workflow.metadata.labels.get(LABEL_CRON):
            log.warning("workflow %s exists and is not a child of this CronWorkflow; tick not run", key)
            return
        if key not in self.objects:
            self.created[key] = got

    def abort(self, namespace: str, name: str, message: str) -> None:
        key = f"{namespace}/{name}"
        patch = {"metadata": {"annotations": {ABORT_ANNOTATION: "true"}}}
        try:
            self.pg.patch(self.cluster, API_VERSION, WORKFLOW_KIND, namespace, name, patch)
        except KubeError as e:
            if e.code != 404:
                raise
            self.created.pop(key, None)
            return  # gone: nothing to abort
        if self.abort_run is not None:
            self.abort_run(key, message)

    def delete(self, namespace: str, name: str) -> None:
        self.pg.delete(self.cluster, API_VERSION, WORKFLOW_KIND, namespace, name)  # gone: True
        self.created.pop(f"{namespace}/{name}", None)


# --- the CronWorkflows of a controller ---------------------------------------------------------------
@dataclass
class _Cron:
    key: str
    uid: str
    backend: KubeCronBackend
    obj: dict[str, Any]
    generation: Any = None
    driver: CronDriver | None = None
    invalid: str | None = None
    stored: dict[str, Any] | None = None  # the status the API server holds (as far as we know)
    written: dict[str, Any] | None = None  # comparable() of the last status we wrote
    timer_gen: int = 0
    wake_at: float | None = None
    pending: bool = False
    failures: int = 0

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


class KubeCronWorkflows:
    """Every CronWorkflow the leader handles: drivers, timers, status writes (engine thread)."""

    def __init__(
        self,
        pg: Any,
        cluster: str,
        trigger: Timers,
        clock: Clock,
        objects: Mapping[str, dict[str, Any]],
        *,
        abort_run: Callable[[str, str], None] | None = None,
        metrics: Any = None,
        events: Any = None,
        stopped: Callable[[], bool] = lambda: False,
        fenced: Callable[[], bool] = lambda: False,
        patch_status: StatusPatcher | None = None,
    ) -> None:
        self.pg = pg
        self.cluster = cluster
        self.trigger = trigger
        self.clock = clock
        self.objects = objects
        self.abort_run = abort_run
        self.metrics = metrics
        self.events = events
        self.stopped = stopped
        self.fenced = fenced
        self.patch_status: StatusPatcher = patch_status or self._patch_status
        self.crons: dict[str, _Cron] = {}
        self.enabled = False
        self.status_writes = 0
        self.sync_errors = 0
        self._subs: list[Any] = []

    # --- lifecycle (engine thread) ---------------------------------------------------------------
    def start(self, namespaces: Iterable[str | None]) -> bool:
        """Watch, then list, the CronWorkflows; False (logged) when they cannot be read (the CRD
        is not installed, or RBAC without ``rbac.cronWorkflows``): Workflows still run."""
        nss = list(namespaces) or [None]
        try:
            for ns in nss:
                self._subs.append(self.pg.watch(self.cluster, API_VERSION, KIND, ns, self._on_watch))
            found = [obj for ns in nss for obj in self.pg.list(self.cluster, API_VERSION, KIND, ns)]
        except ActorError as e:
            log.warning("CronWorkflows are not handled (cannot list them): %s", e)
            self.stop()
            return False
        self.enabled = True
        for obj in found:
            self.handle("ADDED", obj)
        log.info("synced: %d cron workflow(s)", len(self.crons))
        return True

    def stop(self) -> None:
        for s in self._subs:
            s.stop()
        self._subs.clear()
        for c in self.crons.values():
            c.timer_gen += 1

    def _on_watch(self, event_type: str, obj: dict[str, Any]) -> None:
        """Watch thread: hand over to the engine thread."""
        self.trigger.call_later(0, lambda: self._guarded(self.handle, event_type, obj))

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Trigger callbacks run inside the engine loop: an exception must not stop it."""
        try:
            fn(*args)
        except Exception:
            log.exception("cron: %s failed", getattr(fn, "__name__", fn))

    # --- CronWorkflow objects ---------------------------------------------------------------------
    def handle(self, event_type: str, obj: dict[str, Any]) -> None:
        if self.stopped():
            return
        key = obj_key(obj)
        meta = _meta(obj)
        uid = str(meta.get("uid") or "")
        entry = self.crons.get(key)
        if entry is not None and uid and entry.uid and entry.uid != uid:
            log.info("cron %s was deleted and created again", key)
            self._drop(key)
            entry = None
        if event_type == "DELETED":
            if entry is not None:
                log.info("cron %s deleted: no more children (the garbage collector deletes them)", key)
                self._drop(key)
            return
        if entry is not None and _rv(entry.obj) > _rv(obj):
            return  # stale (a list result older than a watch event)
        if entry is None:
            backend = KubeCronBackend(self.pg, self.cluster, self.objects, abort_run=self.abort_run)
            entry = self.crons[key] = _Cron(key, uid, backend, obj, generation=object())
        entry.obj = obj
        entry.backend.owner = owner_reference(obj)
        raw = obj.get("status")
        entry.stored = raw if isinstance(raw, dict) else None
        if meta.get("deletionTimestamp"):
            if entry.driver is not None:
                log.info("cron %s is being deleted: no more children", key)
            entry.driver = None
            entry.timer_gen += 1
            return
        generation = meta.get("generation")
        if generation == entry.generation and (entry.driver is not None or entry.invalid is not None):
            return  # our own status write coming back, or labels/annotations
        entry.generation = generation
        cron, issues = parse_cron_workflow(cron_doc(obj), key)
        if cron is None:
            message = "; ".join(str(i) for i in issues[:5]) or "invalid CronWorkflow"
            entry.driver = None
            entry.timer_gen += 1
            if entry.invalid != message:
                entry.invalid = message
                log.warning("cron %s is invalid: %s", key, message)
                self._mark_invalid(entry, message)
                self._event(entry, "Warning", "InvalidSpec", message)
            return
        entry.invalid = None
        if entry.driver is None:
            driver = CronDriver(cron, entry.backend, stored_status(obj))
            driver.listeners.append(self._on_action)
            entry.driver = driver
            entry.written = comparable(entry.stored)
            log.info(
                "cron %s: %s (%s, concurrencyPolicy %s)%s",
                key,
                " | ".join(cron.spec.all_schedules()),
                cron.spec.timezone or "UTC",
                cron.spec.concurrencyPolicy,
                ", suspended" if cron.spec.suspend else "",
            )
        else:
            entry.driver.controller.set_spec(cron)
            log.info(
                "cron %s: spec changed (generation %s)%s",
                key,
                generation,
                ", suspended" if cron.spec.suspend else "",
            )
        self.sync(key)

    def _drop(self, key: str) -> None:
        entry = self.crons.pop(key, None)
        if entry is not None:
            entry.timer_gen += 1
            entry.driver = None

    # --- children (the controller's Workflow watch) ----------------------------------------------
    def child_event(self, event_type: str, old: Mapping[str, Any] | None, obj: Mapping[str, Any]) -> None:
        """A Workflow changed: re-sync its cron when it is a child that appeared, went or changed
        phase (or started being deleted)."""
        meta = _meta(obj)
        label = (meta.get("labels") or {}).get(LABEL_CRON)
        if not label or not self.crons:
            return
        if event_type == "MODIFIED" and old is not None:
            same_phase = child_phase(old) == child_phase(obj)
            same_deleting = bool(_meta(old).get("deletionTimestamp")) == bool(meta.get("deletionTimestamp"))
            if same_phase and same_deleting:
                return
        ns = meta.get("namespace")
        for entry in self.crons.values():
            if entry.namespace == ns and label_value(entry.name) == label:
                self.request(entry.key)

    # --- reconcile --------------------------------------------------------------------------------
    def request(self, key: str) -> None:
        """Re-sync soon (coalesced), on the engine thread."""
        entry = self.crons.get(key)
        if entry is None or entry.pending:
            return
        entry.pending = True
        self.trigger.call_later(0, functools.partial(self._guarded, self.sync, key))

    def sync(self, key: str) -> None:
        entry = self.crons.get(key)
        if entry is None:
            return
        entry.pending = False
        driver = entry.driver
        if driver is None or self.stopped() or self.fenced():
            return
        now = self.clock.now()
        failed_before = driver.status.failed
        try:
            rec = driver.sync(now)
        except ActorError as e:
            self._failed(entry, now, f"reconcile failed: {e}")
            return
        except Exception as e:  # a bug: keep the controller (and the other crons) going
            log.exception("cron %s: reconcile failed", key)
            self._failed(entry, now, f"reconcile failed: {type(e).__name__}: {e}")
            return
        if driver.status.failed > failed_before:
            n = driver.status.failed - failed_before
            self._event(entry, "Warning", "WorkflowFailed", f"{n} child workflow(s) failed")
        try:
            self._write_status(entry)
        except ActorError as e:
            self._failed(entry, now, f"status not written: {e}")
            return
        entry.failures = 0
        if rec.next_wake is not None:
            self._wake_at(entry, rec.next_wake)
        else:
            entry.timer_gen += 1
            entry.wake_at = None

    def _failed(self, entry: _Cron, now: float, message: str) -> None:
        self.sync_errors += 1
        entry.failures += 1
        delay = min(RETRY_MAX, RETRY_MIN * 2 ** (entry.failures - 1))
        log.warning("cron %s: %s (retry in %gs)", entry.key, message, delay)
        if entry.failures == 1:
            self._event(entry, "Warning", "SyncFailed", message)
        nxt = now + delay
        if entry.wake_at is not None and entry.wake_at > now:
            nxt = min(nxt, entry.wake_at)
        self._wake_at(entry, nxt)

    def _wake_at(self, entry: _Cron, at: float) -> None:
        if entry.wake_at == at:
            return
        entry.timer_gen += 1
        entry.wake_at = at
        self.trigger.call_at(at, functools.partial(self._guarded, self._wake, entry.key, entry.timer_gen))

    def _wake(self, key: str, gen: int) -> None:
        entry = self.crons.get(key)
        if entry is None or entry.timer_gen != gen:
            return  # replaced by a later timer, or the cron is gone
        entry.wake_at = None
        self.sync(key)

    # --- status --------------------------------------------------------------------------------
    def _write_status(self, entry: _Cron) -> None:
        assert entry.driver is not None
        if self.fenced():
            return
        new = status_body(entry.driver.status)
        cmp = comparable(new)
        if cmp == entry.written:
            return
        self.patch_status(entry.namespace, entry.name, merge_patch(new, entry.stored))
        self.status_writes += 1
        entry.written = cmp
        entry.stored = new

    def _mark_invalid(self, entry: _Cron, message: str) -> None:
        """The SpecError condition on an invalid CronWorkflow (other conditions kept)."""
        if self.fenced():
            return
        conds = [
            c
            for c in (entry.stored or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != "SpecError"
        ]
        conds.append(
            {
                "type": "SpecError",
                "status": "True",
                "reason": "InvalidSpec",
                "message": message[:1024],
                "lastTransitionTime": rfc3339(self.clock.now()),
            }
        )
        try:
            self.patch_status(entry.namespace, entry.name, {"conditions": conds})
            self.status_writes += 1
        except ActorError as e:
            log.warning("cannot mark cron %s invalid: %s", entry.key, e)
            return
        entry.stored = {**(entry.stored or {}), "conditions": conds}
        entry.written = None

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge patch of the status subresource (no resourceVersion: only the leader writes it)."""
        c = self.pg.cluster(self.cluster)
        res = c.resource(API_VERSION, KIND)
        try:
            c.call(
                "patch",
                f"{KIND} {namespace}/{name}/status",
                lambda: c.dynamic.patch(
                    res.status,
                    body={"status": status},
                    name=name,
                    namespace=namespace,
                    content_type="application/merge-patch+json",
                    serialize=False,
                    _request_timeout=c.timeout,
                ),
            )
        except KubeError as e:
            if e.code == 404:
                log.info("cron %s/%s is gone; status not written", namespace, name)
                return
            raise

    # --- decisions: logs, metrics, events -------------------------------------------------------
    def _on_action(self, cron: CronWorkflow, a: Action, now: float) -> None:
        policy = cron.spec.concurrencyPolicy
        entry = self.crons.get(cron.key)
        if isinstance(a, SubmitChild):
            late = " (catch-up)" if a.catch_up else ""
            log.info("cron %s: created %s for %s%s", cron.key, a.name, rfc3339(a.scheduled_time), late)
            if self.metrics is not None:
                self.metrics.cron_run_triggered(policy)
            if entry is not None:
                self._event(
                    entry,
                    "Normal",
                    "Scheduled",
                    f"created workflow {a.name} for {rfc3339(a.scheduled_time)}{late}",
                )
        elif isinstance(a, SkipTick):
            n = f" x{a.count}" if a.count > 1 else ""
            log.info(
                "cron %s: skipped %s%s (%s: %s)",
                cron.key,
                rfc3339(a.scheduled_time),
                n,
                a.reason.value,
                a.message,
            )
            if self.metrics is not None:
                self.metrics.cron_run_skipped(policy, a.reason.value, a.count)
            if entry is not None:
                self._event(
                    entry,
                    "Normal",
                    "Skipped",
                    f"{rfc3339(a.scheduled_time)}{n}: {a.reason.value}: {a.message}",
                )
        elif isinstance(a, AbortChild):
            log.info("cron %s: aborting %s (%s)", cron.key, a.name, a.message)
            if entry is not None:
                self._event(entry, "Normal", "Replaced", f"aborting workflow {a.name}: {a.message}")
        elif isinstance(a, DeleteChild):
            log.info("cron %s: deleted %s (%s)", cron.key, a.name, a.reason)

    def _event(self, entry: _Cron, etype: str, reason: str, message: str) -> None:
        if self.events is None:
            return
        m = _meta(entry.obj)
        involved = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "namespace": entry.namespace,
            "name": entry.name,
            "uid": str(m.get("uid") or ""),
        }
        self.events.emit_object(
            involved, etype, reason, message, labels={LABEL_CRON: label_value(entry.name)}
        )
