"""Prometheus metrics of an engine (``chaosflow_*``); every metric is listed in docs/metrics.md.

One :class:`Metrics` object per engine, on an injectable ``registry`` (tests pass their own
``CollectorRegistry``; the controller and ``chaosflow run --metrics-addr`` use the default one).
``Metrics.attach(manager)`` hooks it to a :class:`~engine.manager.WorkflowManager`.

The engine's hot path (tens of thousands of node transitions per second) must not pay for
prometheus-client's locked children: engine figures are kept in plain dicts and light histograms
written only by the engine thread (phase and workflow listeners) and turned into metric families
at scrape time by a custom collector. Trigger queue figures, the run's clock and the API request
counters of the playgrounds are read at scrape time too (no per-request cost). Rare events that can
come from other threads (actor calls, leader changes, cron decisions, megatest figures) use
ordinary prometheus-client metrics.

Label cardinality is bounded: ``kind`` by the template kinds, ``phase`` by the phase enums,
``action`` by the registered actor actions, ``name`` by the engine's queues, ``cluster``/``verb``/
``code`` by the configured clusters and HTTP codes. Free-form values that callers pass (cron skip
reasons, megatest conditions, incident types, action names) go through :class:`BoundedLabel`:
after ``limit`` distinct values every new value is reported as ``other``. No label ever carries a
node, workflow or volume name.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from engine.phases import NodePhase, WorkflowPhase

if TYPE_CHECKING:
    from engine.manager import WorkflowManager
    from engine.runtime import Node, WorkflowRun
    from triggers.operable import OperableTrigger

PREFIX = "chaosflow"

#: node and workflow durations are on the run's clock (virtual on the sim): seconds to a day
DURATION_BUCKETS: tuple[float, ...] = (
    0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400,
)  # fmt: skip
#: wall-clock latencies inside the engine (schedule-next, queue wait)
LATENCY_BUCKETS: tuple[float, ...] = (
    1e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10,
)  # fmt: skip
#: actor calls and megatest actions (wall seconds)
ACTION_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
)  # fmt: skip

#: node phases counted by ``chaosflow_nodes`` (Init is transient; finished nodes are counters)
ACTIVE_NODE_PHASES: tuple[NodePhase, ...] = tuple(
    p for p in NodePhase if p is not NodePhase.INIT and not p.finished
)
CRON_POLICIES = ("Allow", "Forbid", "Replace")
#: engine/cron.py's SkipReason values (pre-initialized at 0; other values are accepted, bounded)
CRON_SKIP_REASONS = ("Suspended", "MissedDeadline", "Superseded", "CatchUpNone", "ConcurrencyForbid")
OTHER = "other"
_INIT, _HOLDING = NodePhase.INIT, NodePhase.HOLDING
_SUCCEED, _FAILED = NodePhase.SUCCEED, NodePhase.FAILED


class BoundedLabel:
    """Caps the distinct values of a label: the first ``limit`` values pass, later ones are ``other``."""

    def __init__(self, limit: int, known: Iterable[str] = ()) -> None:
        self.limit = limit
        self._values: set[str] = set(known)
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        value = str(value)
        if value in self._values:
            return value
        with self._lock:
            if value in self._values:
                return value
            if len(self._values) >= self.limit:
                return OTHER
            self._values.add(value)
            return value

    def values(self) -> set[str]:
        return set(self._values)


class LightHistogram:
    """A histogram without locks for the engine thread; exported by the collector at scrape time."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> tuple[list[tuple[str, float]], float]:
        counts = list(self.counts)
        total = self.sum
        out: list[tuple[str, float]] = []
        acc = 0
        for b, n in zip(self.bounds, counts, strict=False):
            acc += n
            out.append((_fmt_bound(b), acc))
        out.append(("+Inf", acc + counts[-1]))
        return out, total


def _fmt_bound(b: float) -> str:
    return repr(float(b))


class _HistogramSink(list[float]):
    """Stands in for the engine's sample lists (``WorkflowManager.schedule_latencies``,
    ``QueueStats.latency_samples``): ``append`` bins the sample instead of keeping it."""

    def __init__(self, hist: LightHistogram, forward: list[float] | None = None) -> None:
        super().__init__()
        self._observe = hist.observe
        self._forward = forward

    def append(self, value: float) -> None:
        self._observe(value)
        if self._forward is not None:
            self._forward.append(value)


ApiSource = Callable[[], Iterable[tuple[str, str, str, int]]]


def api_source_of(playground: Any) -> ApiSource | None:
    """Reads the request counters of a playground as ``(cluster, verb, code, count)``: a sim
    playground's API servers (``request_counts() -> {verb: {code: n}}`` per cluster) or a kube
    playground (``request_counts() -> {(cluster, verb, code): n}``); None when it has neither."""
    try:
        apis = getattr(playground, "_apis", None)
        counts = getattr(playground, "request_counts", None)
    except Exception:  # a stand-in playground (benchmarks, tests) that refuses attribute reads
        return None
    if isinstance(apis, dict):

        def sim() -> Iterator[tuple[str, str, str, int]]:
            for cluster, api in list(apis.items()):
                counts = getattr(api, "request_counts", None)
                if counts is None:
                    continue
                for verb, by_code in counts().items():
                    for code, n in by_code.items():
                        yield cluster, str(verb), str(code), int(n)

        return sim
    if callable(counts):

        def kube() -> Iterator[tuple[str, str, str, int]]:
            for key, n in counts().items():
                cluster, verb, code = (str(x) for x in key)
                yield cluster, verb, code, int(n)

        return kube
    return None


class Metrics:
    """The metrics of one engine. See docs/metrics.md for every name, type and label."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        label_limit: int = 64,
        chaos_overdue_grace: float = 0.0,
    ) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.chaos_overdue_grace = chaos_overdue_grace
        self.manager: WorkflowManager | None = None
        self.triggers: list[OperableTrigger] = []
        self._api_sources: list[ApiSource] = []
        # --- engine-thread state (plain data; read by the collector) -------------------------
        self._transitions: dict[str, int] = {}  # kind -> node transitions
        self._active: dict[tuple[str, NodePhase], int] = {}  # (kind, phase) -> nodes now
        self._finished: dict[tuple[str, NodePhase], int] = {}  # (kind, phase) -> nodes finished
        self._durations: dict[str, LightHistogram] = {}  # kind -> node durations
        self._wf_phase: dict[str, WorkflowPhase] = {}  # running workflows by key
        self._wf_finished: dict[WorkflowPhase, int] = {}
        self._wf_finished_held = 0  # finished workflows the manager still holds
        self._wf_durations = LightHistogram(DURATION_BUCKETS)
        self._injected: dict[tuple[str, str], Node] = {}  # chaos nodes whose object is held
        self._injected_total: dict[str, int] = {}  # kind -> injections
        self._schedule_latency = LightHistogram(LATENCY_BUCKETS)
        self._queue_latency: dict[str, LightHistogram] = {}
        self._chaos_kinds: frozenset[str] = _chaos_kinds()
        # --- ordinary metrics (thread-safe, rare events) ----------------------------------------
        self.actions = BoundedLabel(label_limit)
        self.cron_reasons = BoundedLabel(label_limit, CRON_SKIP_REASONS)
        self.cron_policies = BoundedLabel(8, CRON_POLICIES)
        self.conditions = BoundedLabel(label_limit)
        self.incident_types = BoundedLabel(label_limit)
        self.megatest_actions = BoundedLabel(label_limit)
        reg = self.registry
        self.actor_calls = Counter(
            f"{PREFIX}_actor_calls", "Actor calls by action.", ["action"], registry=reg
        )
        self.actor_errors = Counter(
            f"{PREFIX}_actor_errors", "Actor calls that failed, by action.", ["action"], registry=reg
        )
        self.actor_duration = Histogram(
            f"{PREFIX}_actor_call_duration_seconds",
            "Wall seconds an actor call took, by action.",
            ["action"],
            buckets=ACTION_BUCKETS,
            registry=reg,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 when this engine holds the leader lease (or runs alone), else 0.",
            registry=reg,
        )
        self.cron_triggered = Counter(
            f"{PREFIX}_cron_runs_triggered",
            "Workflows a CronWorkflow submitted, by concurrencyPolicy.",
            ["policy"],
            registry=reg,
        )
        self.cron_skipped = Counter(
            f"{PREFIX}_cron_runs_skipped",
            "Scheduled CronWorkflow runs not submitted, by concurrencyPolicy and reason.",
            ["policy", "reason"],
            registry=reg,
        )
        for policy in CRON_POLICIES:
            self.cron_triggered.labels(policy)
            for reason in CRON_SKIP_REASONS:
                self.cron_skipped.labels(policy, reason)
        self.mt_transitions = Counter(
            f"{PREFIX}_megatest_condition_transitions",
            "megatest: condition transitions observed on replicated volumes, by condition.",
            ["condition"],
            registry=reg,
        )
        self.mt_broken = Gauge(
            f"{PREFIX}_megatest_broken_volumes",
            "megatest: volumes whose condition has changed an odd number of times (broken now).",
            ["condition"],
            registry=reg,
        )
        self.mt_broken_total = Counter(
            f"{PREFIX}_megatest_volume_breaks",
            "megatest: times a volume's condition went from held to broken, by condition.",
            ["condition"],
            registry=reg,
        )
        self.mt_volumes = Gauge(
            f"{PREFIX}_megatest_volumes",
            "megatest: volumes currently tracked (created or seen changing, and not gone).",
            registry=reg,
        )
        self.mt_incidents = Counter(
            f"{PREFIX}_megatest_incidents", "megatest: incidents by type.", ["type"], registry=reg
        )
        self.mt_action_duration = Histogram(
            f"{PREFIX}_megatest_action_duration_seconds",
            "megatest: duration of each action (seconds on the run's clock), by action and result.",
            ["action", "result"],
            buckets=ACTION_BUCKETS,
            registry=reg,
        )
        self._mt_lock = threading.Lock()
        self._mt_counts: dict[tuple[str, str], int] = {}  # (volume, condition) -> transitions
        self._mt_volumes: set[str] = set()
        self._collector = _EngineCollector(self)
        reg.register(self._collector)

    # --- wiring ----------------------------------------------------------------------------------
    def attach(self, manager: WorkflowManager) -> Metrics:
        """Hook into a manager: its listeners, its trigger's queue stats, its playground's request
        counters. Nodes and workflows the manager already holds (adopted runs) are counted."""
        self.manager = manager
        self.resync()
        manager.phase_listeners.append(self._on_phase)
        manager.workflow_listeners.append(self._on_workflow)
        manager.action_listeners.append(self.observe_action)
        existing = manager.schedule_latencies
        manager.schedule_latencies = _HistogramSink(self._schedule_latency, existing)
        self.add_trigger(manager.trigger)
        src = api_source_of(manager.playground)
        if src is not None:
            self.add_api_source(src)
        from actors.base import ACTIONS

        for action in ACTIONS:
            self._init_action(self.actions(action))
        return self

    def add_trigger(self, trigger: OperableTrigger) -> None:
        """Export an OperableTrigger's queue (``name`` label = ``trigger.name``)."""
        if trigger in self.triggers:
            return
        hist = self._queue_latency.setdefault(trigger.name, LightHistogram(LATENCY_BUCKETS))
        st = trigger.stats
        st.latency_samples = _HistogramSink(hist)
        st.sample_latency = True
        self.triggers.append(trigger)

    def add_api_source(self, source: ApiSource) -> None:
        """A callable returning ``(cluster, verb, code, count)`` tuples, read at scrape time."""
        self._api_sources.append(source)

    def resync(self) -> None:
        """Recount active nodes, running workflows and held chaos from the manager's runs."""
        mgr = self.manager
        if mgr is None:
            return
        self._active.clear()
        self._wf_phase.clear()
        self._injected.clear()
        self._wf_finished_held = 0
        for run in list(mgr.runs.values()):
            if run.phase.finished:
                self._wf_finished_held += 1
            if run.phase is WorkflowPhase.RUNNING:
                self._wf_phase[run.key] = run.phase
            for node in list(run.nodes.values()):
                ph = node.phase
                if ph is NodePhase.INIT or ph.finished:
                    continue
                k = (node.kind, ph)
                self._active[k] = self._active.get(k, 0) + 1
                if ph is NodePhase.HOLDING and node.kind in self._chaos_kinds:
                    self._injected[(run.key, node.name)] = node

    # --- listeners (engine thread, hot path) ------------------------------------------------------
    def _on_phase(self, run: WorkflowRun, node: Node, old: NodePhase) -> None:
        # hot path: module constants, not enum attribute lookups (slow on Python 3.11)
        kind = node.kind
        new = node.phase
        tr = self._transitions
        tr[kind] = tr.get(kind, 0) + 1
        active = self._active
        if old is not _INIT and old is not _SUCCEED and old is not _FAILED:
            k = (kind, old)
            active[k] = active.get(k, 0) - 1
        if new is _SUCCEED or new is _FAILED:
            k = (kind, new)
            self._finished[k] = self._finished.get(k, 0) + 1
            start, finish = node.start_time, node.finish_time
            if start is not None and finish is not None:
                h = self._durations.get(kind)
                if h is None:
                    h = self._durations[kind] = LightHistogram(DURATION_BUCKETS)
                d = finish - start
                h.counts[bisect_left(h.bounds, d)] += 1  # LightHistogram.observe, inlined
                h.sum += d
            if self._injected:
                self._injected.pop((run.key, node.name), None)
            return
        k = (kind, new)
        active[k] = active.get(k, 0) + 1
        if new is _HOLDING and kind in self._chaos_kinds:
            key = (run.key, node.name)
            if key not in self._injected:
                self._injected[key] = node
                self._injected_total[kind] = self._injected_total.get(kind, 0) + 1

    def _on_workflow(self, run: WorkflowRun) -> None:
        phase = run.phase
        if phase is WorkflowPhase.RUNNING:
            self._wf_phase[run.key] = phase
        elif phase.finished:
            self._wf_phase.pop(run.key, None)
            self._wf_finished[phase] = self._wf_finished.get(phase, 0) + 1
            self._wf_finished_held += 1
            if run.start_time is not None and run.finish_time is not None:
                self._wf_durations.observe(run.finish_time - run.start_time)

    # --- APIs for other parts of chaosflow -------------------------------------------------------
    def _init_action(self, action: str) -> None:
        self.actor_calls.labels(action)
        self.actor_errors.labels(action)

    def observe_action(self, action: str, ok: bool, seconds: float) -> None:
        """One actor call (the manager's ``action_listeners`` call this; thread-safe)."""
        a = self.actions(action)
        self.actor_calls.labels(a).inc()
        if not ok:
            self.actor_errors.labels(a).inc()
        self.actor_duration.labels(a).observe(seconds)

    def set_leader(self, leader: bool) -> None:
        """Called by whoever runs leader election: on acquiring (True) and losing (False) it."""
        self.leader.set(1 if leader else 0)

    def cron_run_triggered(self, policy: str) -> None:
        """A CronWorkflow submitted a workflow (policy: its concurrencyPolicy)."""
        self.cron_triggered.labels(self.cron_policies(policy)).inc()

    def cron_run_skipped(self, policy: str, reason: str, count: int = 1) -> None:
        """``count`` scheduled runs were not submitted. Reasons: engine/cron.py's SkipReason values
        (Suspended, MissedDeadline, Superseded, CatchUpNone, ConcurrencyForbid); others are
        accepted, bounded by ``label_limit``."""
        self.cron_skipped.labels(self.cron_policies(policy), self.cron_reasons(reason)).inc(count)

    def megatest_volume_created(self, volume: str) -> None:
        """A volume was created: it is tracked (``chaosflow_megatest_volumes``) until it is gone."""
        with self._mt_lock:
            if volume in self._mt_volumes:
                return
            self._mt_volumes.add(volume)
            self.mt_volumes.set(len(self._mt_volumes))

    def megatest_condition_transition(self, volume: str, condition: str) -> None:
        """A volume's condition (IOReady, Quorum, ...) changed. Per volume, an odd count of
        transitions means broken now, an even one held (the seed's rule); the volume name is kept
        only in memory to track that parity, never as a label."""
        c = self.conditions(condition)
        self.mt_transitions.labels(c).inc()
        with self._mt_lock:
            if volume not in self._mt_volumes:
                self._mt_volumes.add(volume)
                self.mt_volumes.set(len(self._mt_volumes))
            key = (volume, c)
            n = self._mt_counts.get(key, 0) + 1
            self._mt_counts[key] = n
        if n % 2:
            self.mt_broken.labels(c).inc()
            self.mt_broken_total.labels(c).inc()
        else:
            self.mt_broken.labels(c).dec()

    def megatest_volume_gone(self, volume: str) -> None:
        """A volume was deleted: it stops counting as broken; its transition counts are forgotten."""
        with self._mt_lock:
            if volume not in self._mt_volumes:
                return
            self._mt_volumes.discard(volume)
            self.mt_volumes.set(len(self._mt_volumes))
            gone = [k for k in self._mt_counts if k[0] == volume]
            broken = [k[1] for k in gone if self._mt_counts[k] % 2]
            for k in gone:
                del self._mt_counts[k]
        for c in broken:
            self.mt_broken.labels(c).dec()

    def megatest_incident(self, incident_type: str) -> None:
        self.mt_incidents.labels(self.incident_types(incident_type)).inc()

    def megatest_action(self, action: str, seconds: float, ok: bool = True) -> None:
        """A megatest action (attach, create replica, ...) ended after ``seconds``."""
        self.mt_action_duration.labels(self.megatest_actions(action), "ok" if ok else "error").observe(
            seconds
        )

    # --- scrape-time readings -----------------------------------------------------------------------
    def chaos_overdue(self) -> dict[str, int]:
        """Chaos nodes still injected past their planned end (holdUntil + grace), by kind."""
        mgr = self.manager
        if mgr is None:
            return {}
        now = mgr.clock.now()
        out: dict[str, int] = {}
        for node in list(self._injected.values()):
            until = node.state.get("holdUntil")
            if isinstance(until, int | float) and now > until + self.chaos_overdue_grace:
                out[node.kind] = out.get(node.kind, 0) + 1
        return out

    def unregister(self) -> None:
        """Remove every metric of this object from its registry."""
        for c in (
            self._collector,
            self.actor_calls,
            self.actor_errors,
            self.actor_duration,
            self.leader,
            self.cron_triggered,
            self.cron_skipped,
            self.mt_transitions,
            self.mt_broken,
            self.mt_broken_total,
            self.mt_volumes,
            self.mt_incidents,
            self.mt_action_duration,
        ):
            self.registry.unregister(c)


def _chaos_kinds() -> frozenset[str]:
    from templates import MACHINES
    from templates.chaos import ChaosMachine

    return frozenset(k for k, m in MACHINES.items() if isinstance(m, ChaosMachine))


def _histogram(
    name: str, doc: str, labels: list[str], hists: Iterable[tuple[list[str], LightHistogram]]
) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in hists:
        buckets, total = h.buckets()
        fam.add_metric(values, buckets, total)
    return fam


class _EngineCollector:
    """Turns the engine-thread figures into metric families at scrape time."""

    def __init__(self, m: Metrics) -> None:
        self.m = m

    def describe(self) -> list[Metric]:
        return list(self._families(empty=True))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(empty=False)

    def _families(self, empty: bool) -> Iterator[Metric]:
        m = self.m
        mgr = m.manager
        p = PREFIX

        wf = GaugeMetricFamily(
            f"{p}_workflows",
            "Workflows the engine holds that are not finished, by phase (Init = waiting to start).",
            labels=["phase"],
        )
        fin = CounterMetricFamily(
            f"{p}_workflows_finished", "Workflows finished, by phase.", labels=["phase"]
        )
        nodes = GaugeMetricFamily(
            f"{p}_nodes",
            "Nodes in each non-terminal phase (Init excluded), by kind.",
            labels=["kind", "phase"],
        )
        nfin = CounterMetricFamily(
            f"{p}_nodes_finished",
            "Nodes finished, by kind and phase (Succeed/Failed).",
            labels=["kind", "phase"],
        )
        trans = CounterMetricFamily(
            f"{p}_node_transitions", "Node phase transitions, by kind.", labels=["kind"]
        )
        injected = GaugeMetricFamily(
            f"{p}_chaos_injected", "Chaos objects currently injected and held, by kind.", labels=["kind"]
        )
        inj_total = CounterMetricFamily(
            f"{p}_chaos_injections", "Chaos objects injected (entered Holding), by kind.", labels=["kind"]
        )
        overdue = GaugeMetricFamily(
            f"{p}_chaos_overdue",
            "Chaos objects still injected past their planned end (hold deadline), by kind.",
            labels=["kind"],
        )
        events = CounterMetricFamily(f"{p}_engine_events", "Events the engine processed.")
        clock = GaugeMetricFamily(
            f"{p}_clock_seconds", "The engine clock (Unix seconds; virtual on a simulated run)."
        )
        inflight = GaugeMetricFamily(f"{p}_actor_in_flight", "Actor calls running on the actor pool now.")
        depth = GaugeMetricFamily(
            f"{p}_workqueue_depth", "Events ready in the queue, by queue.", labels=["name"]
        )
        timers = GaugeMetricFamily(
            f"{p}_workqueue_timers", "Delayed events and timers waiting in the queue's heap.", labels=["name"]
        )
        adds = CounterMetricFamily(f"{p}_workqueue_adds", "Events added to the ready queue.", labels=["name"])
        retries = CounterMetricFamily(
            f"{p}_workqueue_retries", "Events re-queued with rate-limited backoff.", labels=["name"]
        )
        throttled = CounterMetricFamily(
            f"{p}_workqueue_throttled", "Dequeues delayed by the queue's token bucket.", labels=["name"]
        )
        api = CounterMetricFamily(
            f"{p}_api_requests", "Requests to cluster API servers, by cluster, verb and HTTP code.",
            labels=["cluster", "verb", "code"],
        )  # fmt: skip
        hist_specs: list[tuple[str, str, list[str], list[tuple[list[str], LightHistogram]]]] = [
            (
                f"{p}_node_duration_seconds",
                "Node duration from creation to Succeed/Failed (seconds on the run's clock), by kind.",
                ["kind"],
                [],
            ),
            (
                f"{p}_workflow_duration_seconds",
                "Workflow duration from start to finish (seconds on the run's clock).",
                [],
                [],
            ),
            (
                f"{p}_schedule_next_latency_seconds",
                "Wall seconds from the event that lets a parent schedule to its next child's creation.",
                [],
                [],
            ),
            (
                f"{p}_workqueue_queue_duration_seconds",
                "Wall seconds an event waited in the ready queue before it was processed, by queue.",
                ["name"],
                [],
            ),
        ]
        if not empty:
            running = len(m._wf_phase)
            total_live = len(mgr.runs) if mgr is not None else 0
            finished_n = m._wf_finished_held
            wf.add_metric(["Running"], running)
            wf.add_metric(["Init"], max(0, total_live - running - finished_n))
            for wph in (WorkflowPhase.SUCCEED, WorkflowPhase.FAILED):
                fin.add_metric([wph.value], m._wf_finished.get(wph, 0))
            kinds = set(m._transitions) | {k for k, _ in m._active.copy()}
            for kind in sorted(kinds):
                trans.add_metric([kind], m._transitions.get(kind, 0))
            active = m._active.copy()
            for kind in sorted(kinds):
                for ph in ACTIVE_NODE_PHASES:
                    n = active.get((kind, ph))
                    if n is not None:
                        nodes.add_metric([kind, ph.value], n)
            for (kind, fph), n in sorted(m._finished.copy().items()):
                nfin.add_metric([kind, fph.value], n)
            held: dict[str, int] = dict.fromkeys(sorted(m._chaos_kinds & (kinds | {"Chaos"})), 0)
            for node in list(m._injected.values()):
                held[node.kind] = held.get(node.kind, 0) + 1
            due = m.chaos_overdue()
            for kind, n in held.items():
                injected.add_metric([kind], n)
                overdue.add_metric([kind], due.get(kind, 0))
                inj_total.add_metric([kind], m._injected_total.get(kind, 0))
            if mgr is not None:
                events.add_metric([], mgr.events)
                clock.add_metric([], mgr.clock.now())
                inflight.add_metric([], mgr._in_flight)
            for t in list(m.triggers):
                st = t.stats
                depth.add_metric([t.name], t.depth())
                timers.add_metric([t.name], t.delayed_depth())
                adds.add_metric([t.name], st.adds)
                retries.add_metric([t.name], st.retries)
                throttled.add_metric([t.name], st.throttled)
            api_counts: dict[tuple[str, str, str], int] = {}
            for src in list(m._api_sources):
                try:
                    for cluster, verb, code, n in src():
                        key = (cluster, verb, code)
                        api_counts[key] = api_counts.get(key, 0) + n
                except RuntimeError:  # a counter dict changed while read: skip this scrape
                    continue
            for key, n in sorted(api_counts.items()):
                api.add_metric(list(key), n)
            hist_specs[0][3].extend(([k], h) for k, h in sorted(m._durations.copy().items()))
            hist_specs[1][3].append(([], m._wf_durations))
            hist_specs[2][3].append(([], m._schedule_latency))
            hist_specs[3][3].extend(([k], h) for k, h in sorted(m._queue_latency.copy().items()))
        yield from (wf, fin, nodes, nfin, trans, injected, inj_total, overdue, events, clock, inflight)
        yield from (depth, timers, adds, retries, throttled, api)
        for name, doc, labels, hists in hist_specs:
            yield _histogram(name, doc, labels, hists)
