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
    AbortWorkflow,
    Act,
    CreateChildren,
    DropChildren,
    Effect,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyAt,
    NotifyParent,
    Observation,
    Observe,
    ObserveKind,
    StopChildren,
    StopReason,
    StopRequest,
    SubmitWorkflow,
    Transition,
    WorkflowPhase,
)
from engine.render import StartError, start_node, start_plan
from engine.runtime import Node, WorkflowRun
from engine.schedulers import EntryScheduler
from templates import MACHINES
from templates.base import finish
from templates.workflow import ChildWorkflows
from triggers.operable import OperableTrigger
from triggers.watch import ObjectWatchTrigger

log = logging.getLogger("chaosflow.engine")

E = EventType
P = NodePhase

PhaseListener = Callable[[WorkflowRun, Node, NodePhase], None]
WorkflowListener = Callable[[WorkflowRun], None]
ActionListener = Callable[[str, bool, float], None]
#: (run, node, observation, now): a node's live observation (e.g. a StatusCheck's condition change)
ObservationListener = Callable[[WorkflowRun, Node, Observation, float], None]


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
        self.watch = ObjectWatchTrigger(playground, self.trigger.notify, self.trigger.call_later)
        self.max_active = max_active_workflows
        self._waiting: deque[str] = deque()
        self._active = 0
        self._tick_events = tick_events
        self._executor = ThreadPoolExecutor(actor_workers, "chaosflow-actor") if actor_workers > 0 else None
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._log_phases = log.isEnabledFor(logging.DEBUG)
        self._dirty: dict[str, WorkflowRun] = {}
        self.transitions = 0
        self.events = 0
        self.phase_listeners: list[PhaseListener] = []
        self.workflow_listeners: list[WorkflowListener] = []
        self.schedule_latencies: list[float] | None = None  # wall seconds, when measuring
        self.action_listeners: list[ActionListener] = []  # (action, ok, wall seconds) per actor call
        #: told each Observation of a transition, after its state and outputs are merged and before
        #: the phase change (so before the phase listeners hear of it)
        self.observation_listeners: list[ObservationListener] = []
        #: called once per engine tick (e.g. polling controls from another process: engine/control.py)
        self.tick_hooks: list[Callable[[], None]] = []
        #: virtual clock, nothing runnable or scheduled, workflows unfinished: wait for outside input
        #: (a control); return False to give up (the run is stuck)
        self.idle_hook: Callable[[], bool] | None = None
        self._stop = False
        self.children = ChildWorkflows(self)  # child Workflow kind: submit, notify parents, count

    # --- submitting and controlling workflows -------------------------------------------------
    def submit(
        self, workflow: Workflow, seed: int | None = None, start_at: float | None = None
    ) -> WorkflowRun:
        """Add a workflow; it starts now (or at ``start_at``), or when a slot frees up."""
        run = WorkflowRun(workflow, seed=seed)
        run.functions = FunctionSet(run.rng, self.clock)
        self.children.bind(run)  # countWorkflows()
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
        self.children.bind(run)  # countWorkflows()
        if run.phase.finished:
            return
        if run.phase is WorkflowPhase.INIT:
            self._start(run)
            return
        self._active += 1
        now = self.clock.now()
        if run.deadline_at is not None:
            self.trigger.notify_at(Event(run.key, None, E.WORKFLOW_DEADLINE_EXCEEDED), run.deadline_at)
        if run.parallelism:  # started leaves hold their slots; Init nodes queue again in order
            run.slots = {
                n.name for n in run.nodes.values() if MACHINES[n.kind].leaf and MACHINES[n.kind].holds_slot(n)
            }
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
        """Stop the workflow: with cleanup and exit handlers (Argo's stop), or with
        ``terminate`` skipping exit handlers (chaos objects are removed either way)."""
        self.trigger.notify(Event(key, None, E.WORKFLOW_ABORT, {"message": message, "terminate": terminate}))

    def suspend(self, key: str, node: str | None = None) -> str:
        """Suspend the workflow (or the subtree of ``node``, a node or template name): nothing new
        starts there and Suspend steps whose time is up wait; running leaves (pods, chaos held for
        its duration) go on. Returns what was done; ValueError when there is nothing to suspend."""
        from engine.control import find_nodes

        run = self._live_run(key)
        if node is None:
            if run.suspended:
                return f"workflow {key} is already suspended"
            run.suspended = True
            done = f"workflow {key} suspended"
        else:
            names = [n.name for n in find_nodes(run, node)]
            run.suspended_nodes.update(names)
            done = f"suspended {', '.join(names)}"
        run.update_gate()
        self._mark(run)
        self._workflow_changed(run)
        return done

    def unsuspend(self, key: str, node: str | None = None) -> str:
        """Continue a suspended workflow (or node subtree). Also ends manual-approval Suspend steps:
        without ``node`` every one waiting without a duration, with ``node`` that Suspend step (even
        one with a duration: it ends now). ValueError when there is nothing to continue."""
        from engine.control import find_nodes

        run = self._live_run(key)
        done: list[str] = []
        approve: list[Node] = []
        if node is None:
            if run.suspended or run.suspended_nodes:
                done.append(f"workflow {key} continues")
            run.suspended = False
            run.suspended_nodes.clear()
            approve = [
                n
                for n in run.nodes.values()
                if n.kind == "Suspend" and n.phase is P.HOLDING and n.state.get("manual")
            ]
        else:
            for n in find_nodes(run, node):
                if n.name in run.suspended_nodes:
                    run.suspended_nodes.discard(n.name)
                    done.append(f"{n.name} continues")
                elif n.kind == "Suspend" and n.phase is P.HOLDING:
                    approve.append(n)
        for n in approve:
            self.trigger.notify(Event(run.key, n.name, E.NODE_RESUME))
            done.append(f"{n.name} resumed")
        if not done:
            raise ValueError(f"nothing to continue in {key}" + (f" for {node!r}" if node else ""))
        run.update_gate()
        held, run.held = run.held, []
        for ev in held:  # gated again on arrival if still suspended
            self.trigger.notify(ev)
        self._mark(run)
        self._workflow_changed(run)
        return "; ".join(done)

    def _live_run(self, key: str) -> WorkflowRun:
        run = self.runs.get(key)
        if run is None:
            raise ValueError(f"no workflow {key}")
        if run.phase.finished:
            raise ValueError(f"workflow {key} already finished ({run.phase.value})")
        return run

    def waiting_for_input(self) -> bool:
        """Whether an unfinished workflow waits for outside input (suspended, manual approval)."""
        for run in self.runs.values():
            if run.phase.finished:
                continue
            if run.suspended or run.suspended_nodes:
                return True
            for n in run.nodes.values():
                if n.kind == "Suspend" and n.phase is P.HOLDING and n.state.get("manual"):
                    return True
        return False

    # --- the main loop --------------------------------------------------------------------------
    def run(self, until: Callable[[], bool] | None = None, max_events: int | None = None) -> None:
        """Process events until every workflow finished (or ``until()`` holds, or stopped)."""
        trigger = self.trigger
        virtual = self.clock.virtual
        processed = 0
        hooks = self.tick_hooks
        while not self._stop:
            for hook in hooks:
                hook()
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
                    if self.idle_hook is not None and self.idle_hook():
                        continue  # waiting for a control (unsuspend, approval, stop)
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
        et = ev.type
        if et is E.NODE_CREATED:  # the start gate: suspension, parallelism, parameters, rendering
            if run.gated and self._hold(run, node, ev):
                return
            now = self.clock.now()
            if (
                node.phase is P.INIT
                and run.start_plans.get(node.template, False) is not None  # None: nothing to evaluate
                and self._start_failed(run, node, now)
            ):
                return
        else:
            if et is E.NODE_HOLDING_AWAKE and run.gated and self._hold(run, node, ev):
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
        if tr.observations:
            for ob in tr.observations:
                for ofn in self.observation_listeners:
                    ofn(run, node, ob, now)
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
            if run.parallelism and node.name in run.slots and not MACHINES[node.kind].holds_slot(node):
                self._release_slot(run, node.name)
            if self._log_phases:
                log.debug(
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
                    child = self._new_node(run, tname, node.name, now, eff.state)
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
            elif t is ObserveKind:
                assert isinstance(eff, ObserveKind)
                self.watch.observe_kind(
                    key,
                    node.name,
                    eff.cluster,
                    eff.api_version,
                    eff.kind,
                    eff.namespace,
                    eff.label_selector,
                    eff.name,
                    eff.key,
                )
            elif t is DropChildren:
                assert isinstance(eff, DropChildren)
                self._drop_children(run, node, eff.names)
            elif t is SubmitWorkflow:
                assert isinstance(eff, SubmitWorkflow)
                self.children.submit(run, node, eff)
            elif t is AbortWorkflow:
                assert isinstance(eff, AbortWorkflow)
                self.abort(eff.key, eff.message, eff.terminate)
            else:  # pragma: no cover - exhaustive
                raise TypeError(f"unknown effect {eff!r}")

    def _drop_children(self, run: WorkflowRun, node: Node, names: tuple[str, ...]) -> None:
        """Forget finished children and their descendants (bounded history)."""
        drop = {c for c in names if c in run.nodes and run.nodes[c].phase.finished}
        if not drop:
            return
        node.children[:] = [c for c in node.children if c not in drop]
        stack = list(drop)
        while stack:
            gone = run.nodes.pop(stack.pop(), None)
            if gone is not None:
                stack.extend(gone.children)
                self.watch.unobserve_node(run.key, gone.name)

    def _new_node(
        self,
        run: WorkflowRun,
        template: str,
        parent: str | None,
        now: float,
        state: dict[str, Any] | None = None,
    ) -> Node:
        tmpl = run.templates[template]
        kind = tmpl.templateType
        if tmpl.retryStrategy is not None or tmpl.onExit is not None:
            # retries / exit handler: a Lifecycle node whose children are the attempts (the
            # template's own kind) and the exit handler (templates/lifecycle.py)
            p = run.nodes.get(parent) if parent is not None else None
            if p is None or p.kind != "Lifecycle" or p.template != template:
                kind = "Lifecycle"
        node = Node(run.new_node_name(template), template, kind, parent, start_time=now)
        if state:
            node.state.update(state)
        run.nodes[node.name] = node
        return node

    # --- the start gate: suspension, parallelism, parameters and rendering -------------------------
    def _hold(self, run: WorkflowRun, node: Node, ev: Event) -> bool:
        """Hold an event that would start something while suspended or out of parallelism slots."""
        if ev.type is E.NODE_HOLDING_AWAKE:
            if node.kind == "Suspend" and run.is_suspended(node):
                run.held.append(ev)  # the wait keeps its due time; it ends when continued
                return True
            return False
        if node.phase is not P.INIT:
            return False
        if run.is_suspended(node):
            run.held.append(ev)
            return True
        if run.parallelism and MACHINES[node.kind].leaf and node.name not in run.slots:
            if len(run.slots) >= run.parallelism:
                run.slot_queue.append(node.name)  # started in creation order as slots free up
                return True
            run.slots.add(node.name)
        node.start_time = self.clock.now()
        return False

    def _release_slot(self, run: WorkflowRun, name: str) -> None:
        run.slots.discard(name)
        queue = run.slot_queue
        while queue and len(run.slots) < run.parallelism:
            nxt = run.nodes.get(queue.popleft())
            if nxt is None or nxt.phase is not P.INIT or nxt.name in run.slots:
                continue
            run.slots.add(nxt.name)  # reserved: its NodeCreated passes the gate
            self.trigger.notify(Event(run.key, nxt.name, E.NODE_CREATED))

    def _start_failed(self, run: WorkflowRun, node: Node, now: float) -> bool:
        """Evaluate the template's parameters and render its fields as the node starts (results
        kept in node.state). On an error the node fails with the message; returns True then."""
        plans = run.start_plans
        plan = plans.get(node.template, False)
        if plan is False:
            plan = plans[node.template] = start_plan(run.templates[node.template])
        if plan is None:
            return False
        params, fields = plan
        if node.kind == "Lifecycle":
            fields = ()  # each attempt renders its own fields
        elif node.parent is not None:
            p = run.nodes.get(node.parent)
            if p is not None and p.kind == "Lifecycle" and p.template == node.template:
                params = False  # evaluated once, on the Lifecycle node
        if not params and not fields:
            return False
        try:
            updates = start_node(run, node, params, fields)
        except StartError as e:
            self._apply(run, node, finish(False, str(e), "ExpressionError"), now)
            return True
        node.state.update(updates)
        self._dirty[run.key] = run
        return False

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
        if self.action_listeners:  # metrics: time the call (may run on the actor pool)
            t0 = time.perf_counter()
            ok, result = self._call_action(act)
            took = time.perf_counter() - t0
            for fn in self.action_listeners:
                fn(act.action, ok, took)
            return ok, result
        return self._call_action(act)

    def _call_action(self, act: Act) -> tuple[bool, Any]:
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
            self._advance_workflow(run, now)
        elif t is E.WORKFLOW_DEADLINE_EXCEEDED:
            if run.deadline_at is None or now < run.deadline_at:
                return
            if run.exit_node is not None:
                return  # the main tree is done; the exit handler has its own deadline
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
            if not req.cleanup:
                run.terminated = True  # exit handlers are skipped (and stopped if running)
            if run.exit_node is not None:
                # the workflow's exit handler runs: a stop lets it finish, a terminate stops it
                if not req.cleanup:
                    self._mark(run)
                    self.trigger.notify(Event(run.key, run.exit_node, E.NODE_ABORT, req))
                return
            self._stop_entry(run, req, now)

    def _advance_workflow(self, run: WorkflowRun, now: float) -> None:
        """The entry (or the workflow's exit handler) finished: run spec.onExit, or finish."""
        entry = run.nodes.get(run.entry_node or "")
        if entry is None or not entry.phase.finished:
            return
        if run.exit_node is None:
            handler = run.workflow.spec.onExit
            if handler and not run.terminated:
                node = self._new_node(run, handler, None, now, {"exitFor": ""})
                run.exit_node = node.name
                self._mark(run)
                self.trigger.notify(Event(run.key, node.name, E.NODE_CREATED))
                self._workflow_changed(run)
                return
            self._finish(run, entry.phase is P.SUCCEED, entry.message, now)
            return
        ex = run.nodes.get(run.exit_node)
        if ex is not None and not ex.phase.finished:
            return
        ok = entry.phase is P.SUCCEED
        if ex is not None and ex.phase is P.FAILED:  # the original outcome stays first in the message
            why = f"exit handler {ex.name} failed" + (f": {ex.message}" if ex.message else "")
            first = run.message or entry.message
            run.message = f"{first}; {why}" if first else why
            ok = False
        self._finish(run, ok, entry.message, now)

    def _stop_entry(self, run: WorkflowRun, req: StopRequest, now: float) -> None:
        run.message = req.message
        self._mark(run)
        if run.entry_node is None:
            self._finish(run, req.succeed, req.message, now)
            return
        self.trigger.notify(Event(run.key, run.entry_node, E.NODE_ABORT, req))

    def _finish(self, run: WorkflowRun, succeed: bool, message: str, now: float) -> None:
        queued = run.phase is WorkflowPhase.INIT and run.key in self._waiting
        run.phase = WorkflowPhase.SUCCEED if succeed else WorkflowPhase.FAILED
        run.finish_time = now
        if message and not run.message:
            run.message = message
        self._mark(run)
        if queued:  # aborted before it started: it never took a slot
            self._waiting.remove(run.key)
            self._workflow_changed(run)
            return
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
