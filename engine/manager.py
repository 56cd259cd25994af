"""WorkflowManager: the main loop that glues Trigger, Schedulers, state machines and Actors.

One event at a time: acquire from the trigger -> find the node -> the kind's pure transition ->
apply it (phase, state) -> carry out its effects (notify, timers, children, actors, watches).
Status is persisted once per engine tick (a batch of events), never per event. Actors run inline
on the simulated cluster (deterministic, instantaneous in virtual time) or on a bounded thread
pool against real clusters; their results come back as events through the same queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from actors.base import ActorError, Playground, run_action
from engine.clock import Clock, rfc3339
from engine.expr import FunctionSet
from engine.model import Workflow
from engine.phases import (
    IGNORED,
    Act,
    CreateChildren,
    Effect,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyAt,
    NotifyParent,
    Observe,
    StopChildren,
    StopReason,
    StopRequest,
    Transition,
    WorkflowPhase,
)
from engine.runtime import Node, WorkflowRun
from engine.schedulers import EntryScheduler
from templates import MACHINES
from triggers.operable import OperableTrigger
from triggers.watch import ObjectWatchTrigger

log = logging.getLogger("chaosflow.engine")

E = EventType
P = NodePhase

PhaseListener = Callable[[WorkflowRun, Node, NodePhase], None]
WorkflowListener = Callable[[WorkflowRun], None]


class Store(Protocol):
    def save(self, runs: list[WorkflowRun]) -> None: ...


class WorkflowManager:
    def __init__(
        self,
        playground: Playground,
        clock: Clock,
        trigger: OperableTrigger | None = None,
        store: Store | None = None,
        *,
        actor_workers: int = 0,
        max_active_workflows: int = 0,
        tick_events: int = 4096,
    ) -> None:
        self.playground = playground
        self.clock = clock
        self.trigger = trigger or OperableTrigger(clock)
        self.store = store
        self.runs: dict[str, WorkflowRun] = {}
        self.watch = ObjectWatchTrigger(playground, self.trigger.notify)
        self.max_active = max_active_workflows
        self._waiting: deque[str] = deque()
        self._active = 0
        self._tick_events = tick_events
        self._executor = ThreadPoolExecutor(actor_workers, "chaosflow-actor") if actor_workers > 0 else None
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._log_phases = log.isEnabledFor(logging.INFO)
        self._dirty: dict[str, WorkflowRun] = {}
        self.transitions = 0
        self.events = 0
        self.phase_listeners: list[PhaseListener] = []
        self.workflow_listeners: list[WorkflowListener] = []
        self.schedule_latencies: list[float] | None = None  # wall seconds, when measuring
        self._stop = False

    # --- submitting and controlling workflows -------------------------------------------------
    def submit(
        self, workflow: Workflow, seed: int | None = None, start_at: float | None = None
    ) -> WorkflowRun:
        """Add a workflow; it starts now (or at ``start_at``), or when a slot frees up."""
        run = WorkflowRun(workflow, seed=seed)
        run.functions = FunctionSet(run.rng, self.clock)
        if run.key in self.runs:
            raise ValueError(f"workflow {run.key} already exists")
        self.runs[run.key] = run
        if self.max_active and self._active >= self.max_active:
            self._waiting.append(run.key)
        else:
            self._start(run, start_at)
        return run

    def _start(self, run: WorkflowRun, at: float | None = None) -> None:
        self._active += 1
        ev = Event(run.key, None, E.WORKFLOW_START)
        if at is None:
            self.trigger.notify(ev)
        else:
            self.trigger.notify_at(ev, at)

    def adopt(self, run: WorkflowRun) -> None:
        """Continue a run loaded from a store (after a crash or a controller restart)."""
        self.runs[run.key] = run
        run.functions = FunctionSet(run.rng, self.clock)
        if run.phase.finished:
            return
        if run.phase is WorkflowPhase.INIT:
            self._start(run)
            return
        self._active += 1
        now = self.clock.now()
        if run.deadline_at is not None:
            self.trigger.notify_at(Event(run.key, None, E.WORKFLOW_DEADLINE_EXCEEDED), run.deadline_at)
        for node in list(run.nodes.values()):
            if node.phase.finished:
                continue
            effects = MACHINES[node.kind].resume(node, run, now)
            self._effects(run, node, effects, now)
        if run.entry_node is not None and run.nodes[run.entry_node].phase.finished:
            entry = run.nodes[run.entry_node]
            ev = E.CHILD_NODE_SUCCEED if entry.phase is P.SUCCEED else E.CHILD_NODE_FAILED
            self.trigger.notify(Event(run.key, None, ev, {"child": entry.name}))

    def abort(self, key: str, message: str = "aborted by user", terminate: bool = False) -> None:
        self.trigger.notify(Event(key, None, E.WORKFLOW_ABORT, {"message": message, "terminate": terminate}))

    # --- the main loop --------------------------------------------------------------------------
    def run(self, until: Callable[[], bool] | None = None, max_events: int | None = None) -> None:
        """Process events until every workflow finished (or ``until()`` holds, or stopped)."""
        trigger = self.trigger
        virtual = self.clock.virtual
        processed = 0
        while not self._stop:
            n = 0
            while n < self._tick_events:
                ev = trigger.pop_ready()
                if ev is None:
                    break
                self.dispatch(ev)
                n += 1
            processed += n
            self.events += n
            if n:
                self.flush()
            if until is not None and until():
                break
            if max_events is not None and processed >= max_events:
                break
            if n:
                continue
            if not self._in_flight and self._all_finished():
                break
            if virtual and not self._in_flight:
                if not trigger.advance():
                    break  # nothing runnable and nothing scheduled: the run is stuck or done
            else:
                trigger.wait(0.5)
        self.flush()

    def stop(self) -> None:
        self._stop = True
        self.trigger.close()

    def _all_finished(self) -> bool:
        return self._active <= 0 and not self._waiting

    def _mark(self, run: WorkflowRun) -> None:
        self._dirty[run.key] = run

    def flush(self) -> None:
        """Persist the runs changed since the last flush (once per engine tick)."""
        if not self._dirty:
            return
        dirty = list(self._dirty.values())
        self._dirty.clear()
        if self.store is not None:
            self.store.save(dirty)

    # --- dispatching events ----------------------------------------------------------------------
    def dispatch(self, ev: Event) -> None:
        run = self.runs.get(ev.workflow)
        if run is None:
            return
        if ev.node is None:
            self._workflow_event(run, ev)
            return
        node = run.nodes.get(ev.node)
        if node is None:
            return
        now = self.clock.now()
        tr = MACHINES[node.kind].handle(node, ev, run, now)
        if tr is IGNORED:
            return
        if (
            tr.effects
            and self.schedule_latencies is not None
            and any(type(e) is CreateChildren for e in tr.effects)
        ):
            self.schedule_latencies.append(time.perf_counter() - ev.enqueued)
        self._apply(run, node, tr, now)

    def _apply(self, run: WorkflowRun, node: Node, tr: Transition, now: float) -> None:
        self._dirty[run.key] = run
        if tr.state:
            node.state.update(tr.state)
        if tr.outputs:
            node.outputs.update(tr.outputs)
        if tr.message is not None:
            node.message = tr.message
        if tr.reason is not None:
            node.reason = tr.reason
        phase = tr.phase
        if phase is not None and phase is not node.phase:
            old = node.phase
            node.phase = phase
            run.transitions += 1
            self.transitions += 1
            if phase is P.SUCCEED or phase is P.FAILED:
                node.finish_time = now
                run.latest[node.template] = node
                self.watch.unobserve_node(run.key, node.name)
            if self._log_phases:
                log.info(
                    "node phase",
                    extra={
                        "workflow": run.key,
                        "node": node.name,
                        "kind": node.kind,
                        "from": old.value,
                        "to": phase.value,
                        "detail": node.message,
                        "clock": rfc3339(now),
                    },
                )
            for fn in self.phase_listeners:
                fn(run, node, old)
        if tr.effects:
            self._effects(run, node, tr.effects, now)

    def _effects(self, run: WorkflowRun, node: Node, effects: list[Effect], now: float) -> None:
        notify = self.trigger.notify
        key = run.key
        for eff in effects:
            t = type(eff)
            if t is Notify:
                assert isinstance(eff, Notify)
                notify(Event(key, eff.node or node.name, eff.type, eff.payload))
            elif t is NotifyParent:
                assert isinstance(eff, NotifyParent)
                notify(Event(key, node.parent, eff.type, {"child": node.name}))
            elif t is NotifyAt:
                assert isinstance(eff, NotifyAt)
                self.trigger.notify_at(Event(key, node.name, eff.type, eff.payload), eff.at)
            elif t is CreateChildren:
                assert isinstance(eff, CreateChildren)
                for tname in eff.templates:
                    child = self._new_node(run, tname, node.name, now)
                    node.children.append(child.name)
                    notify(Event(key, child.name, E.NODE_CREATED))
            elif t is StopChildren:
                assert isinstance(eff, StopChildren)
                for c in run.active_children(node):
                    notify(Event(key, c, E.NODE_ABORT, eff.request))
            elif t is Act:
                assert isinstance(eff, Act)
                self._act(run, node, eff)
            elif t is Observe:
                assert isinstance(eff, Observe)
                self.watch.observe(
                    key, node.name, eff.cluster, eff.api_version, eff.kind, eff.namespace, eff.name
                )
            else:  # pragma: no cover - exhaustive
                raise TypeError(f"unknown effect {eff!r}")

    def _new_node(self, run: WorkflowRun, template: str, parent: str | None, now: float) -> Node:
        tmpl = run.templates[template]
        node = Node(run.new_node_name(template), template, tmpl.templateType, parent, start_time=now)
        run.nodes[node.name] = node
        return node

    # --- actors ----------------------------------------------------------------------------------
    def _act(self, run: WorkflowRun, node: Node, act: Act) -> None:
        key, name = run.key, node.name
        if self._executor is None:
            self._deliver(key, name, act, *self._call(act))
            return
        with self._in_flight_lock:
            self._in_flight += 1

        def job() -> None:
            try:
                self._deliver(key, name, act, *self._call(act))
            finally:
                with self._in_flight_lock:
                    self._in_flight -= 1

        self._executor.submit(job)

    def _call(self, act: Act) -> tuple[bool, Any]:
        try:
            return True, run_action(self.playground, act.action, act.params)
        except ActorError as e:
            return False, str(e)
        except Exception as e:  # an actor must never take the engine down
            log.warning("actor %s failed unexpectedly", act.action, exc_info=True)
            return False, f"{type(e).__name__}: {e}"

    def _deliver(self, key: str, node: str, act: Act, ok: bool, result: Any) -> None:
        self.trigger.notify(Event(key, node, act.ok if ok else act.fail, result))

    # --- workflow-level events ---------------------------------------------------------------
    def _workflow_event(self, run: WorkflowRun, ev: Event) -> None:
        now = self.clock.now()
        t = ev.type
        if t is E.WORKFLOW_START:
            if run.phase is not WorkflowPhase.INIT:
                return
            run.phase = WorkflowPhase.RUNNING
            run.start_time = now
            self._mark(run)
            spec = run.workflow.spec
            if spec.deadline is not None:
                run.deadline_at = now + spec.deadline
                self.trigger.notify_at(Event(run.key, None, E.WORKFLOW_DEADLINE_EXCEEDED), run.deadline_at)
            templates, parent = EntryScheduler.schedule_next(run)
            for tname in templates:
                entry = self._new_node(run, tname, parent, now)
                run.entry_node = entry.name
                self.trigger.notify(Event(run.key, entry.name, E.NODE_CREATED))
            self._workflow_changed(run)
            return
        if run.phase.finished:
            return
        if t is E.CHILD_NODE_SUCCEED or t is E.CHILD_NODE_FAILED:
            done = run.nodes.get(run.entry_node or "")
            if done is None or not done.phase.finished:
                return
            self._finish(run, done.phase is P.SUCCEED, done.message, now)
        elif t is E.WORKFLOW_DEADLINE_EXCEEDED:
            if run.deadline_at is None or now < run.deadline_at:
                return
            d = run.workflow.spec.deadline
            req = StopRequest(
                StopReason.DEADLINE_EXCEEDED,
                f"workflow deadline {d:g}s exceeded",
                succeed=run.workflow.spec.onDeadline == "Succeed",
            )
            self._stop_entry(run, req, now)
        elif t is E.WORKFLOW_ABORT:
            payload = ev.payload or {}
            run.abort_requested = True
            req = StopRequest(
                StopReason.ABORTED,
                str(payload.get("message") or "aborted"),
                succeed=False,
                cleanup=not payload.get("terminate", False),
            )
            self._stop_entry(run, req, now)

    def _stop_entry(self, run: WorkflowRun, req: StopRequest, now: float) -> None:
        run.message = req.message
        self._mark(run)
        if run.entry_node is None:
            self._finish(run, req.succeed, req.message, now)
            return
        self.trigger.notify(Event(run.key, run.entry_node, E.NODE_ABORT, req))

    def _finish(self, run: WorkflowRun, succeed: bool, message: str, now: float) -> None:
        run.phase = WorkflowPhase.SUCCEED if succeed else WorkflowPhase.FAILED
        run.finish_time = now
        if message and not run.message:
            run.message = message
        self._mark(run)
        self._active -= 1
        self._workflow_changed(run)
        if self._waiting and (not self.max_active or self._active < self.max_active):
            nxt = self.runs.get(self._waiting.popleft())
            if nxt is not None:
                self._start(nxt)

    def _workflow_changed(self, run: WorkflowRun) -> None:
        for fn in self.workflow_listeners:
            fn(run)

    def close(self) -> None:
        self.watch.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
