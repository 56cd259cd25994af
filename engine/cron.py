"""CronWorkflow (chaosflow.io/v1alpha1, short name ``cwf``): a schedule that creates Workflows.

Three layers, so the same logic serves the local driver and the Kubernetes controller:

- the **model** (:class:`CronWorkflow`, its spec and status) and the loader/validator for files;
- :class:`CronController`, a **pure** reconciler: given the CronWorkflow, its stored status, the
  existing children (name -> phase) and ``now``, it returns the actions to take (submit child X
  for scheduled time T, abort a child for ``Replace``, delete children beyond the history limits,
  skip tick T by policy, with the reason), the new status and the next wake-up time;
- :class:`CronDriver`, which applies the actions through a :class:`CronBackend` (a children store
  plus submit / abort / delete callbacks). ``engine/cron_local.py`` implements the backend on the
  WorkflowManager and the simulated cluster; controller mode implements it on the API server.

The children are the source of truth. A child's name is ``<cron>-<unix scheduled time>`` (the
cron part shortened with a hash when the result would exceed 63 characters), so the same tick
always gives the same name and is never submitted twice — also after a restart, a lost status
write or a leader change: a tick whose child exists is not submitted again, and the newest child
moves the evaluation watermark forward even when the status lags behind.

Decisions (documented in ``docs/cron.md``):

- **Missed ticks** (downtime, or the controller was late): ticks in (watermark, now] are due.
  With ``startingDeadlineSeconds`` only ticks at most that old may still start; older ones are
  skipped (``MissedDeadline``). Of the rest, ``catchUp: Latest`` (default, like CronJob/Argo) runs
  the most recent, ``All`` runs the ``maxCatchUp`` most recent in order, ``None`` runs only a tick
  that is on time (at most :data:`ON_TIME_SECONDS` late). Older ones are skipped (``Superseded`` /
  ``CatchUpNone``).
- **Concurrency** applies to catch-up runs too, oldest first: ``Forbid`` skips a tick while any
  child is active (``ConcurrencyForbid``); ``Replace`` aborts the active children (with cleanup)
  and submits the newest tick, older catch-up ticks are ``Superseded`` instead of being started
  and aborted at once.
- **Suspend**: ticks that fall while suspended are skipped (``Suspended``) and never caught up.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.clock import parse_rfc3339, rfc3339
from engine.errors import InputError, Path, ValidationFailed, ValidationIssue
from engine.model import API_VERSION, GROUP, ObjectMeta, Workflow, WorkflowSpec
from triggers.cron import ScheduleError, ScheduleSet, load_timezone, parse_schedule

KIND = "CronWorkflow"
SHORT_NAME = "cwf"

LABEL_CRON = f"{GROUP}/cron-workflow"
ANNOTATION_SCHEDULED = f"{GROUP}/scheduled-time"

#: catchUp None: a tick this late (seconds) still counts as on time rather than missed
ON_TIME_SECONDS = 60.0
#: most missed ticks counted one by one (more are reported as "N+")
MAX_COUNTED = 1000
NAME_LIMIT = 63

ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
CatchUpPolicy = Literal["Latest", "All", "None"]


# --- the model ---------------------------------------------------------------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=False)


class WorkflowMetadata(_Model):
    labels: dict[str, str] = Field(default_factory=dict, description="Labels added to every child Workflow.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations added to every child Workflow."
    )


class CronWorkflowSpec(_Model):
    schedules: list[str] = Field(
        default_factory=list,
        description="Cron schedules (5 fields, Sunday = 0 or 7, names, @hourly/@daily/..., @every 90m); "
        "the workflow runs at the union of their times.",
    )
    schedule: str | None = Field(
        default=None, description="A single schedule (Argo Workflows v3 spelling); added to schedules."
    )
    timezone: str | None = Field(
        default=None, description="IANA time zone of the schedules (default UTC); DST is honoured."
    )
    concurrencyPolicy: ConcurrencyPolicy = Field(
        default="Allow",
        description="Allow: runs may overlap. Forbid: skip a tick while a run is active. "
        "Replace: abort the active run (with cleanup) and start the new one.",
    )
    startingDeadlineSeconds: int | None = Field(
        default=None, ge=0, description="A tick may still start at most this many seconds late."
    )
    catchUp: CatchUpPolicy = Field(
        default="Latest",
        description="Missed ticks (downtime): Latest runs the most recent one, All the maxCatchUp most "
        "recent in order, None none.",
    )
    maxCatchUp: int = Field(default=10, ge=1, description="catchUp All: most missed ticks run at once.")
    successfulJobsHistoryLimit: int = Field(default=3, ge=0, description="Succeeded children kept.")
    failedJobsHistoryLimit: int = Field(default=1, ge=0, description="Failed children kept.")
    suspend: bool = Field(default=False, description="Skip every tick while true (never caught up).")
    workflowSpec: WorkflowSpec
    workflowMetadata: WorkflowMetadata | None = None

    def all_schedules(self) -> list[str]:
        out = list(self.schedules)
        if self.schedule and self.schedule not in out:
            out.append(self.schedule)
        return out


class ActiveChild(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    scheduledTime: str | None = None


class CronCondition(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    lastTransitionTime: str | None = None


class SkippedTick(BaseModel):
    model_config = ConfigDict(extra="allow")

    scheduledTime: str | None = None
    reason: str
    message: str = ""
    count: int = 1


class CronWorkflowStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    phase: Literal["Active", "Suspended"] = "Active"
    active: list[ActiveChild] = Field(default_factory=list)
    lastScheduledTime: str | None = None
    lastSuccessfulTime: str | None = None
    lastEvaluatedTime: str | None = Field(
        default=None, description="Ticks up to this time have been run or skipped (the watermark)."
    )
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    lastSkipped: SkippedTick | None = None
    conditions: list[CronCondition] = Field(default_factory=list)


class CronWorkflow(_Model):
    apiVersion: Literal["chaosflow.io/v1alpha1"] = "chaosflow.io/v1alpha1"
    kind: Literal["CronWorkflow"] = "CronWorkflow"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: CronWorkflowSpec
    status: CronWorkflowStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or "cron-workflow"

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_object(self, status: CronWorkflowStatus | None = None) -> dict[str, Any]:
        obj = self.model_dump(mode="json", exclude_none=True, exclude={"status"})
        st = status if status is not None else self.status
        if st is not None:
            obj["status"] = st.model_dump(mode="json", exclude_none=True)
        return obj


# --- names -------------------------------------------------------------------------------------------
def _digest(s: str, n: int = 8) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:n]


def child_name(cron_name: str, scheduled: float) -> str:
    """``<cron>-<unix time>``; the cron part is shortened with a hash beyond 63 characters."""
    suffix = str(int(scheduled))
    name = f"{cron_name}-{suffix}"
    if len(name) <= NAME_LIMIT:
        return name
    keep = NAME_LIMIT - len(suffix) - 1 - 9
    head = cron_name[:keep].rstrip("-.")
    return f"{head}-{_digest(cron_name)}-{suffix}"


_TRAILING_TIME = re.compile(r"-([0-9]{1,12})$")


def scheduled_time_of(cron_name: str, name: str) -> int | None:
    """The scheduled time encoded in a child's name, None when it is not this cron's child."""
    m = _TRAILING_TIME.search(name)
    if m is None:
        return None
    t = int(m.group(1))
    return t if child_name(cron_name, t) == name else None


def label_value(s: str) -> str:
    """A label value (<= 63 characters) for a name that may be longer."""
    if len(s) <= NAME_LIMIT:
        return s
    return f"{s[: NAME_LIMIT - 9].rstrip('-.')}-{_digest(s)}"


def child_seed(cron: CronWorkflow, scheduled: float) -> int:
    """The seed of a child: ``workflowSpec.seed`` when set, else derived from the cron and the tick."""
    if cron.spec.workflowSpec.seed is not None:
        return cron.spec.workflowSpec.seed
    return int(_digest(f"{cron.key}@{int(scheduled)}", 8), 16) % (2**31)


def build_child(cron: CronWorkflow, scheduled: float) -> Workflow:
    """The Workflow a tick creates: deterministic name, labels, annotations and seed."""
    meta = cron.spec.workflowMetadata or WorkflowMetadata()
    labels = {**meta.labels, LABEL_CRON: label_value(cron.name)}
    annotations = {**meta.annotations, ANNOTATION_SCHEDULED: rfc3339(scheduled) or ""}
    spec = cron.spec.workflowSpec.model_copy(deep=True)
    spec.seed = child_seed(cron, scheduled)
    return Workflow(
        metadata=ObjectMeta(
            name=child_name(cron.name, scheduled),
            namespace=cron.namespace,
            labels=labels,
            annotations=annotations,
        ),
        spec=spec,
    )


# --- the pure controller -----------------------------------------------------------------------------
class SkipReason(enum.StrEnum):
    SUSPENDED = "Suspended"
    MISSED_DEADLINE = "MissedDeadline"
    SUPERSEDED = "Superseded"
    CATCH_UP_NONE = "CatchUpNone"
    CONCURRENCY_FORBID = "ConcurrencyForbid"


SUCCEEDED_PHASES = frozenset({"Succeed", "Succeeded"})
FAILED_PHASES = frozenset({"Failed", "Error"})


@dataclass(frozen=True)
class ChildInfo:
    """What the controller needs to know about an existing child."""

    phase: str
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.phase in SUCCEEDED_PHASES or self.phase in FAILED_PHASES


@dataclass(frozen=True)
class SubmitChild:
    name: str
    scheduled_time: float
    workflow: Workflow
    catch_up: bool = False


@dataclass(frozen=True)
class AbortChild:
    name: str
    message: str


@dataclass(frozen=True)
class DeleteChild:
    name: str
    reason: str


@dataclass(frozen=True)
class SkipTick:
    scheduled_time: float  # the latest tick of the group
    reason: SkipReason
    message: str
    count: int = 1


Action = SubmitChild | AbortChild | DeleteChild | SkipTick


@dataclass
class Reconcile:
    actions: list[Action]
    status: CronWorkflowStatus
    next_wake: float | None

    def of(self, kind: type[Any]) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]


@dataclass
class CronMetrics:
    """Plain counters (Prometheus is wired elsewhere): runs triggered and ticks skipped by policy."""

    triggered: int = 0
    triggered_catch_up: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    replaced: int = 0
    deleted: int = 0
    reconciles: int = 0


def _count(sched: ScheduleSet, after: float, until: float) -> tuple[int, float | None, bool]:
    """(number, last, truncated) of fire times in (after, until], counted up to MAX_COUNTED."""
    n, last = 0, None
    for t in islice(sched.between(after, until), MAX_COUNTED + 1):
        n += 1
        last = t
    if n > MAX_COUNTED:
        return MAX_COUNTED, last, True
    return n, last, False


def _plural(n: int, truncated: bool, word: str) -> str:
    return f"{n}{'+' if truncated else ''} {word}{'' if n == 1 and not truncated else 's'}"


class CronController:
    """The pure reconciler of one CronWorkflow (plus its counters)."""

    def __init__(self, cron: CronWorkflow) -> None:
        self.metrics = CronMetrics()
        self.cron = cron
        self.error: str | None = None
        self.schedules: ScheduleSet | None = None
        self.set_spec(cron)

    def set_spec(self, cron: CronWorkflow) -> None:
        """A new version of the CronWorkflow (controller mode: the object changed)."""
        self.cron = cron
        try:
            self.schedules = ScheduleSet(cron.spec.all_schedules(), cron.spec.timezone)
            self.error = None
        except ScheduleError as e:
            self.schedules = None
            self.error = str(e)

    # --- helpers ----------------------------------------------------------------------------------
    def child_name(self, scheduled: float) -> str:
        return child_name(self.cron.name, scheduled)

    def ours(self, children: Mapping[str, ChildInfo | str]) -> dict[str, tuple[int, ChildInfo]]:
        out: dict[str, tuple[int, ChildInfo]] = {}
        for name, info in children.items():
            t = scheduled_time_of(self.cron.name, name)
            if t is None:
                continue
            out[name] = (t, info if isinstance(info, ChildInfo) else ChildInfo(str(info)))
        return out

    def _last_ticks(self, after: float, until: float, k: int) -> tuple[list[float], int, float | None, bool]:
        """The last ``k`` fire times in (after, until] and (count, last, truncated) of the older ones."""
        assert self.schedules is not None
        span = 60.0
        while True:
            start = max(after, until - span)
            ticks = list(self.schedules.between(start, until))
            if len(ticks) >= k or start <= after:
                break
            span *= 4
        chosen = ticks[-k:] if k else []
        older = ticks[: len(ticks) - len(chosen)]
        n, last, trunc = len(older), (older[-1] if older else None), False
        if start > after:
            n2, last2, trunc = _count(self.schedules, after, start)
            n += n2
            if last is None:
                last = last2
        return chosen, n, last, trunc

    # --- the reconcile ----------------------------------------------------------------------------
    def reconcile(
        self,
        status: CronWorkflowStatus | None,
        children: Mapping[str, ChildInfo | str],
        now: float,
    ) -> Reconcile:
        spec = self.cron.spec
        st = status.model_copy(deep=True) if status is not None else CronWorkflowStatus()
        actions: list[Action] = []
        ours = self.ours(children)
        self.metrics.reconciles += 1
        self._sync_active(st, ours, now)
        st.phase = "Suspended" if spec.suspend else "Active"
        _set_condition(
            st,
            "Suspended",
            spec.suspend,
            "Suspended" if spec.suspend else "Active",
            "spec.suspend is true" if spec.suspend else "",
            now,
        )
        if self.schedules is None:
            _set_condition(st, "SpecError", True, "InvalidSchedule", self.error or "", now)
            return Reconcile(actions, st, None)
        _drop_condition(st, "SpecError")

        watermark = self._watermark(st, ours, now)
        if watermark < now:
            if spec.suspend:
                n, last, trunc = _count(self.schedules, watermark, now)
                if n and last is not None:
                    actions.append(
                        SkipTick(
                            last, SkipReason.SUSPENDED, f"{_plural(n, trunc, 'tick')} while suspended", n
                        )
                    )
            else:
                actions += self._schedule(st, ours, watermark, now)
        st.lastEvaluatedTime = rfc3339(max(watermark, now))
        actions += self._history(ours, actions)
        self._record(st, actions, now)
        return Reconcile(actions, st, self.schedules.next_after(max(watermark, now)))

    def _watermark(self, st: CronWorkflowStatus, ours: dict[str, tuple[int, ChildInfo]], now: float) -> float:
        w: float | None = parse_rfc3339(st.lastEvaluatedTime) if st.lastEvaluatedTime else None
        if w is None:
            created = (self.cron.metadata.model_extra or {}).get("creationTimestamp")
            w = min(parse_rfc3339(created), now) if isinstance(created, str) else now
        if ours:
            w = max(w, float(max(t for t, _ in ours.values())))  # the children are the truth
        return w

    def _sync_active(
        self, st: CronWorkflowStatus, ours: dict[str, tuple[int, ChildInfo]], now: float
    ) -> None:
        kept: list[ActiveChild] = []
        seen: set[str] = set()
        for ref in st.active:
            got = ours.get(ref.name)
            if got is None:
                continue  # deleted behind our back: nothing to count
            _, info = got
            if info.finished:
                if info.phase in SUCCEEDED_PHASES:
                    st.succeeded += 1
                    done = info.finished_at if info.finished_at is not None else now
                    prev = parse_rfc3339(st.lastSuccessfulTime) if st.lastSuccessfulTime else None
                    if prev is None or done > prev:
                        st.lastSuccessfulTime = rfc3339(done)
                else:
                    st.failed += 1
                continue
            kept.append(ref)
            seen.add(ref.name)
        for name, (t, info) in sorted(ours.items(), key=lambda kv: kv[1][0]):
            if not info.finished and name not in seen:  # submitted, but the status write was lost
                kept.append(ActiveChild(name=name, namespace=self.cron.namespace, scheduledTime=rfc3339(t)))
        st.active = kept

    def _schedule(
        self, st: CronWorkflowStatus, ours: dict[str, tuple[int, ChildInfo]], watermark: float, now: float
    ) -> list[Action]:
        spec = self.cron.spec
        assert self.schedules is not None
        actions: list[Action] = []
        after = watermark
        if spec.startingDeadlineSeconds is not None:
            cutoff = now - spec.startingDeadlineSeconds
            if cutoff > after:
                # ticks strictly before the cutoff are too late to start (ticks are whole seconds)
                n, last, trunc = _count(self.schedules, after, cutoff - 0.001)
                if n and last is not None:
                    actions.append(
                        SkipTick(
                            last,
                            SkipReason.MISSED_DEADLINE,
                            f"{_plural(n, trunc, 'tick')} missed by more than startingDeadlineSeconds "
                            f"({spec.startingDeadlineSeconds}s)",
                            n,
                        )
                    )
                after = max(after, cutoff - 0.001)
        k = spec.maxCatchUp if spec.catchUp == "All" else 1
        candidates, n_old, last_old, trunc = self._last_ticks(after, now, k)
        older_reason = SkipReason.CATCH_UP_NONE if spec.catchUp == "None" else SkipReason.SUPERSEDED
        if spec.catchUp == "None":
            late = [t for t in candidates if now - t > ON_TIME_SECONDS]
            candidates = [t for t in candidates if now - t <= ON_TIME_SECONDS]
            n_old += len(late)
            if late:
                last_old = late[-1]
        if n_old and last_old is not None:
            why = {
                "Latest": "superseded by a later tick (catchUp: Latest runs only the most recent missed tick)",
                "All": f"beyond maxCatchUp ({spec.maxCatchUp}): only the most recent missed ticks run",
                "None": "missed and not caught up (catchUp: None)",
            }[spec.catchUp]
            actions.append(SkipTick(last_old, older_reason, f"{_plural(n_old, trunc, 'tick')} {why}", n_old))

        active = {ref.name for ref in st.active}
        for i, t in enumerate(candidates):
            name = self.child_name(t)
            if name in ours:
                continue  # already submitted (the watermark lagged): never twice
            catch_up = now - t > ON_TIME_SECONDS
            if spec.concurrencyPolicy == "Forbid" and active:
                actions.append(
                    SkipTick(
                        t,
                        SkipReason.CONCURRENCY_FORBID,
                        f"concurrencyPolicy Forbid: {', '.join(sorted(active))} still active",
                    )
                )
                continue
            if spec.concurrencyPolicy == "Replace":
                if i < len(candidates) - 1:
                    actions.append(
                        SkipTick(
                            t,
                            SkipReason.SUPERSEDED,
                            "concurrencyPolicy Replace: a later missed tick replaces it before it starts",
                        )
                    )
                    continue
                for a in sorted(active):
                    actions.append(AbortChild(a, f"replaced by {name} (concurrencyPolicy Replace)"))
                active.clear()
            actions.append(SubmitChild(name, t, build_child(self.cron, t), catch_up))
            active.add(name)
            st.active.append(ActiveChild(name=name, namespace=self.cron.namespace, scheduledTime=rfc3339(t)))
        return actions

    def _history(self, ours: dict[str, tuple[int, ChildInfo]], actions: list[Action]) -> list[Action]:
        spec = self.cron.spec
        done = sorted(((t, n, i) for n, (t, i) in ours.items() if i.finished), reverse=True)
        ok = [n for _, n, i in done if i.phase in SUCCEEDED_PHASES]
        bad = [n for _, n, i in done if i.phase not in SUCCEEDED_PHASES]
        out: list[Action] = [
            DeleteChild(n, f"successfulJobsHistoryLimit {spec.successfulJobsHistoryLimit}")
            for n in ok[spec.successfulJobsHistoryLimit :]
        ]
        out += [
            DeleteChild(n, f"failedJobsHistoryLimit {spec.failedJobsHistoryLimit}")
            for n in bad[spec.failedJobsHistoryLimit :]
        ]
        return out

    def _record(self, st: CronWorkflowStatus, actions: list[Action], now: float) -> None:
        m = self.metrics
        latest: tuple[float, Action] | None = None
        for a in actions:
            if isinstance(a, SubmitChild):
                m.triggered += 1
                m.triggered_catch_up += int(a.catch_up)
                prev = parse_rfc3339(st.lastScheduledTime) if st.lastScheduledTime else None
                if prev is None or a.scheduled_time > prev:
                    st.lastScheduledTime = rfc3339(a.scheduled_time)
                if latest is None or a.scheduled_time >= latest[0]:
                    latest = (a.scheduled_time, a)
            elif isinstance(a, SkipTick):
                m.skipped[a.reason.value] += a.count
                st.skipped += a.count
                if st.lastSkipped is None or (
                    st.lastSkipped.scheduledTime is not None
                    and a.scheduled_time >= parse_rfc3339(st.lastSkipped.scheduledTime)
                ):
                    st.lastSkipped = SkippedTick(
                        scheduledTime=rfc3339(a.scheduled_time),
                        reason=a.reason.value,
                        message=a.message,
                        count=a.count,
                    )
                if latest is None or a.scheduled_time > latest[0]:
                    latest = (a.scheduled_time, a)
            elif isinstance(a, AbortChild):
                m.replaced += 1
            elif isinstance(a, DeleteChild):
                m.deleted += 1
        if latest is not None:
            t, a = latest
            if isinstance(a, SubmitChild):
                _set_condition(st, "Scheduled", True, "Submitted", f"{a.name} for {rfc3339(t)}", now)
            elif isinstance(a, SkipTick):
                _set_condition(st, "Scheduled", False, a.reason.value, f"{rfc3339(t)}: {a.message}", now)


def _set_condition(
    st: CronWorkflowStatus, type_: str, value: bool, reason: str, message: str, now: float
) -> None:
    status: Literal["True", "False"] = "True" if value else "False"
    for c in st.conditions:
        if c.type == type_:
            if c.status != status:
                c.lastTransitionTime = rfc3339(now)
            c.status, c.reason, c.message = status, reason, message
            return
    st.conditions.append(
        CronCondition(
            type=type_, status=status, reason=reason, message=message, lastTransitionTime=rfc3339(now)
        )
    )


def _drop_condition(st: CronWorkflowStatus, type_: str) -> None:
    st.conditions = [c for c in st.conditions if c.type != type_]


# --- the driver: applies actions through a backend ------------------------------------------------
class CronBackend(Protocol):
    """Where children live: a children store plus submit / abort / delete (all idempotent)."""

    def list_children(self, cron: CronWorkflow) -> Mapping[str, ChildInfo]:
        """This cron's children (by label), name -> phase."""
        ...

    def submit(self, workflow: Workflow) -> None:
        """Create the child; an existing child of that name counts as done."""
        ...

    def abort(self, namespace: str, name: str, message: str) -> None:
        """Stop a running child with cleanup (its chaos is removed)."""
        ...

    def delete(self, namespace: str, name: str) -> None:
        """Remove a finished child (history limit); a missing child counts as done."""
        ...


ActionListener = Callable[[CronWorkflow, Action, float], None]


class CronDriver:
    """One CronWorkflow: reconcile against the backend's children and carry out the actions.

    The caller owns the timer (wake up at ``Reconcile.next_wake``, and when a child finishes) and
    persists :attr:`status` (the local driver with the runs in SQLite, controller mode in the
    object's status subresource).
    """

    def __init__(
        self, cron: CronWorkflow, backend: CronBackend, status: CronWorkflowStatus | None = None
    ) -> None:
        self.controller = CronController(cron)
        self.backend = backend
        self.status = status if status is not None else (cron.status or CronWorkflowStatus())
        self.listeners: list[ActionListener] = []

    @property
    def cron(self) -> CronWorkflow:
        return self.controller.cron

    def sync(self, now: float) -> Reconcile:
        cron = self.cron
        rec = self.controller.reconcile(self.status, self.backend.list_children(cron), now)
        for a in rec.actions:
            if isinstance(a, SubmitChild):
                self.backend.submit(a.workflow)
            elif isinstance(a, AbortChild):
                self.backend.abort(cron.namespace, a.name, a.message)
            elif isinstance(a, DeleteChild):
                self.backend.delete(cron.namespace, a.name)
            for fn in self.listeners:
                fn(cron, a, now)
        self.status = rec.status
        return rec


# --- loading and validating files -----------------------------------------------------------------
def validate_cron_workflow(cron: CronWorkflow, filename: str, base: Path = ()) -> list[ValidationIssue]:
    from engine.validate import metadata_issues, validate_workflow

    meta = cron.metadata
    issues = metadata_issues(meta.name, meta.generateName, meta.namespace, filename, base)
    if meta.name is None and meta.generateName is not None:
        issues.append(
            ValidationIssue(
                filename, (*base, "metadata", "name"), "required (child names are derived from it)"
            )
        )
    spec = cron.spec
    sp: Path = (*base, "spec")
    if not spec.all_schedules():
        issues.append(ValidationIssue(filename, (*sp, "schedules"), "at least one schedule is required"))
    try:
        load_timezone(spec.timezone)
    except ScheduleError as e:
        issues.append(ValidationIssue(filename, (*sp, "timezone"), str(e)))
    else:
        for i, s in enumerate(spec.schedules):
            try:
                parse_schedule(s, spec.timezone)
            except ScheduleError as e:
                issues.append(ValidationIssue(filename, (*sp, "schedules", i), str(e)))
        if spec.schedule is not None:
            try:
                parse_schedule(spec.schedule, spec.timezone)
            except ScheduleError as e:
                issues.append(ValidationIssue(filename, (*sp, "schedule"), str(e)))
    if spec.workflowMetadata is not None:
        from engine.simworld import sim_world_issues

        issues += sim_world_issues(
            spec.workflowMetadata.annotations, filename, (*sp, "workflowMetadata", "annotations")
        )
    # the child workflow: same checks as a Workflow file, reported under spec.workflowSpec
    probe = Workflow(metadata=ObjectMeta(name=child_name(cron.name, 0)), spec=spec.workflowSpec)
    for issue in validate_workflow(probe, filename):
        if issue.path[:1] == ("spec",):
            issues.append(ValidationIssue(filename, (*sp, "workflowSpec", *issue.path[1:]), issue.message))
    return issues


def parse_cron_workflow(
    doc: Any, filename: str, base: Path = ()
) -> tuple[CronWorkflow | None, list[ValidationIssue]]:
    from engine.validate import pydantic_issues

    if not isinstance(doc, dict):
        return None, [ValidationIssue(filename, base, "expected a mapping (a CronWorkflow object)")]
    issues: list[ValidationIssue] = []
    if doc.get("apiVersion") != API_VERSION:
        issues.append(
            ValidationIssue(
                filename,
                (*base, "apiVersion"),
                f"unsupported apiVersion {doc.get('apiVersion')!r} (expected {API_VERSION})",
            )
        )
    if doc.get("kind") != KIND:
        issues.append(
            ValidationIssue(
                filename, (*base, "kind"), f"unsupported kind {doc.get('kind')!r} (expected {KIND})"
            )
        )
    if issues:
        return None, issues
    try:
        cron = CronWorkflow.model_validate(doc)
    except ValidationError as e:
        return None, pydantic_issues(e.errors(), filename, base)
    issues = validate_cron_workflow(cron, filename, base)
    return (None if issues else cron), issues


def load_cron_workflows_text(text: str | bytes, filename: str) -> list[CronWorkflow]:
    from engine.yamlio import load_documents

    docs = load_documents(text, filename)
    crons: list[CronWorkflow] = []
    issues: list[ValidationIssue] = []
    multi = len(docs) > 1
    for i, d in enumerate(docs):
        if d.data is None:
            continue
        cron, errs = parse_cron_workflow(d.data, filename if not multi else f"{filename}[doc {i}]")
        issues += errs
        if cron is not None:
            crons.append(cron)
    if issues:
        raise ValidationFailed(issues)
    if not crons:
        raise InputError(filename, None, "no CronWorkflow document found")
    keys = [c.key for c in crons]
    if len(set(keys)) != len(keys):
        raise InputError(filename, None, "two CronWorkflow documents have the same namespace/name")
    return crons


def load_cron_workflow_file(path: str) -> list[CronWorkflow]:
    from pathlib import Path as FsPath

    try:
        data = FsPath(path).read_bytes()
    except OSError as e:
        raise InputError(path, None, f"cannot read file: {e.strerror or e}") from None
    return load_cron_workflows_text(data, path)


def validate_cron_file(path: str) -> int | None:
    """For ``chaosflow validate``: the number of CronWorkflows in a file whose every document is one
    (raising InputError / ValidationFailed when they are invalid); None for any other file."""
    from pathlib import Path as FsPath

    from engine.yamlio import load_documents

    try:
        data = FsPath(path).read_bytes()
        docs = [d.data for d in load_documents(data, path) if d.data is not None]
    except (OSError, InputError):
        return None  # let the Workflow loader report it
    if not docs or not all(isinstance(d, dict) and d.get("kind") == KIND for d in docs):
        return None
    return len(load_cron_workflows_text(data, path))
