"""Controlling a running local engine from another process: stop, terminate, suspend, unsuspend.

A ``chaosflow run --state DB`` (real-time or virtual clock) can be controlled with
``chaosflow stop|terminate|suspend|unsuspend DB``. The command writes a row into the ``controls``
table of the SQLite state; the running engine polls that table once per engine tick (at most every
:data:`POLL_INTERVAL` seconds of wall time), applies each pending control at that tick and writes
the result back once a checkpoint holds what the control did (so an applied control survives a
crash); the command waits for that and prints it. Without a running engine the control
stays queued and is applied when the run continues (``chaosflow resume DB``).

The running engine keeps a heartbeat in the state (meta ``engine``: pid, host, wall time), so the
commands know whether anyone is there to apply a control, and ``chaosflow resume`` refuses to drive
a state another live engine is running.

Actions (Argo's semantics):

``stop``       abort with cleanup: active nodes release what they hold, template exit handlers run
               (innermost first), then the workflow's ``onExit``
``terminate``  abort without exit handlers (running ones are stopped); chaos objects are still
               removed — chaos is never left behind
``suspend``    the workflow, or the subtree of ``--node``: nothing new starts there (nodes wait in
               Init; Suspend steps whose time is up wait, keeping their due times); running pods
               go on and injected chaos stays until its duration ends (or a stop)
``unsuspend``  continue what was suspended; also ends manual-approval Suspend steps (all of them
               without ``--node``; with ``--node`` that Suspend step, even one with a duration)

``--node`` takes a node name (``approve-3``) or a template name (its unfinished nodes).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from engine.manager import WorkflowManager
    from engine.runtime import Node, WorkflowRun
    from engine.store import SQLiteStore

ACTIONS = ("stop", "terminate", "suspend", "unsuspend")
#: wall seconds between two polls of the controls table
POLL_INTERVAL = 0.1
#: wall seconds between two heartbeats of the running engine
HEARTBEAT_INTERVAL = 1.0
#: a heartbeat older than this (wall seconds) means no engine is running on the state
HEARTBEAT_STALE = 10.0


@dataclass(frozen=True)
class Control:
    id: int
    workflow: str  # namespace/name
    action: str
    node: str | None = None
    message: str | None = None


def find_nodes(run: WorkflowRun, selector: str) -> list[Node]:
    """Unfinished nodes named ``selector``, else the unfinished nodes of template ``selector``."""
    node = run.nodes.get(selector)
    if node is not None:
        if node.phase.finished:
            raise ValueError(f"node {selector} already finished ({node.phase.value})")
        return [node]
    found = [n for n in run.nodes.values() if n.template == selector and not n.phase.finished]
    if not found:
        if selector in run.templates:
            raise ValueError(f"no unfinished node of template {selector!r} in {run.key}")
        raise ValueError(f"no node or template {selector!r} in {run.key}")
    return found


def apply_control(manager: WorkflowManager, c: Control) -> tuple[bool, str]:
    """Apply one control to a live manager (in the engine's thread). Returns (ok, what happened)."""
    run = manager.runs.get(c.workflow)
    if run is None:
        return False, f"no workflow {c.workflow}"
    if run.phase.finished:
        return False, f"workflow {c.workflow} already finished ({run.phase.value})"
    try:
        if c.action in ("stop", "terminate"):
            terminate = c.action == "terminate"
            default = "terminated by user" if terminate else "stopped by user"
            manager.abort(c.workflow, c.message or default, terminate=terminate)
            return True, f"{c.action} requested for {c.workflow}"
        if c.action == "suspend":
            return True, manager.suspend(c.workflow, c.node)
        if c.action == "unsuspend":
            return True, manager.unsuspend(c.workflow, c.node)
    except ValueError as e:
        return False, str(e)
    return False, f"unknown action {c.action!r}"


class ControlPoller:
    """Attach to a manager whose runs live in ``store``: polls controls, keeps the heartbeat."""

    def __init__(
        self,
        manager: WorkflowManager,
        store: SQLiteStore,
        *,
        on_wait: Callable[[str], None] | None = None,
        idle_sleep: float = 0.05,
    ) -> None:
        self.manager = manager
        self.store = store
        self.on_wait = on_wait
        self.idle_sleep = idle_sleep
        self._last_poll = -1e9
        self._last_beat = -1e9
        self._waiting_said = False
        self.applied: list[tuple[Control, bool, str]] = []
        # applied, not yet reported: a control is reported applied only once a checkpoint holds
        # what it did (after the engine tick that processed its events), so a crash cannot lose it
        self._unconfirmed: list[tuple[Control, bool, str]] = []
        self._calls = 0
        self._confirm_at = 0

    def attach(self) -> ControlPoller:
        self.manager.tick_hooks.append(self.tick)
        self.manager.idle_hook = self.idle
        self.beat(force=True)
        return self

    def detach(self) -> None:
        if self._unconfirmed:
            self._confirm()
        if self.tick in self.manager.tick_hooks:
            self.manager.tick_hooks.remove(self.tick)
        if self.manager.idle_hook == self.idle:
            self.manager.idle_hook = None
        self.store.clear_engine()

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= HEARTBEAT_INTERVAL:
            self._last_beat = now
            self.store.put_engine(
                {"pid": os.getpid(), "host": socket.gethostname(), "heartbeat": time.time()}
            )

    def tick(self) -> None:
        self._calls += 1
        if self._unconfirmed and self._calls >= self._confirm_at:
            self._confirm()
        now = time.monotonic()
        if now - self._last_poll < POLL_INTERVAL:
            return
        self._last_poll = now
        self.beat()
        self.poll()
        self.store.flush_due()

    def poll(self, lag: int = 1) -> int:
        """Apply every pending control; returns how many were applied. They are reported to the
        commands ``lag`` engine ticks later, after a checkpoint (:meth:`_confirm`)."""
        seen = {c.id for c, _, _ in self._unconfirmed}
        pending = [c for c in self.store.pending_controls() if c.id not in seen]
        for c in pending:
            ok, result = apply_control(self.manager, c)
            self._unconfirmed.append((c, ok, result))
            self.applied.append((c, ok, result))
        if pending:
            self._waiting_said = False
            self._confirm_at = self._calls + lag
        return len(pending)

    def _confirm(self) -> None:
        self.manager.flush()
        self.store.flush()  # a checkpoint now, whatever the throttle says
        for c, ok, result in self._unconfirmed:
            self.store.finish_control(c.id, ok, result)
        self._unconfirmed.clear()

    def idle(self) -> bool:
        """Nothing to do on the virtual clock: wait for a control while a workflow waits for one."""
        if not self.manager.waiting_for_input():
            return False
        if not self._waiting_said and self.on_wait is not None:
            self._waiting_said = True
            self.on_wait(self._waiting_for())
        self.store.flush_due()
        time.sleep(self.idle_sleep)
        self.beat()
        self._last_poll = time.monotonic()
        self.poll(lag=2)  # the events it caused run in the next tick; confirm after that one
        return True

    def _waiting_for(self) -> str:
        parts: list[str] = []
        for run in self.manager.runs.values():
            if run.phase.finished:
                continue
            if run.suspended:
                parts.append(f"{run.key} is suspended")
            if run.suspended_nodes:
                parts.append(f"{run.key}: {', '.join(sorted(run.suspended_nodes))} suspended")
            manual = [
                n.name
                for n in run.nodes.values()
                if n.kind == "Suspend" and n.phase.value == "Holding" and n.state.get("manual")
            ]
            if manual:
                parts.append(f"{run.key}: {', '.join(manual)} waiting for approval")
        return "; ".join(parts)


# --- the command side ----------------------------------------------------------------------------
def engine_alive(info: dict[str, Any] | None) -> bool:
    """Whether the engine described by the state's heartbeat is (probably) still running."""
    if not info:
        return False
    if time.time() - float(info.get("heartbeat", 0)) > HEARTBEAT_STALE:
        return False
    if info.get("host") == socket.gethostname():
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, KeyError, ValueError, TypeError):
            pass
    return True


def send_control(
    state: str,
    action: str,
    *,
    workflow: str | None = None,
    node: str | None = None,
    message: str | None = None,
    wait: float = 30.0,
    out: TextIO,
    err: TextIO,
) -> int:
    """``chaosflow stop|terminate|suspend|unsuspend STATE``: 0 applied (or queued), 1 rejected,
    2 bad input."""
    from pathlib import Path

    from engine.store import SQLiteStore

    if not Path(state).exists():
        print(f"{state}: no such state file", file=err)
        return 2
    store = SQLiteStore(state)
    try:
        runs = store.workflow_phases()
        if not runs:
            print(f"{state}: no workflows in this state", file=err)
            return 2
        if workflow is not None:
            keys = [k for k in runs if k == workflow or k.split("/", 1)[-1] == workflow]
            if not keys:
                print(f"{state}: no workflow {workflow!r} (have: {', '.join(runs)})", file=err)
                return 2
        else:
            keys = list(runs)
        if node is not None and len(keys) > 1:
            print(f"{state}: several workflows; name one with --workflow ({', '.join(keys)})", file=err)
            return 2
        live_keys = [k for k in keys if runs[k] not in ("Succeed", "Failed")]
        if not live_keys:
            print(
                f"{state}: {', '.join(keys)}: already finished ({', '.join(runs[k] for k in keys)})", file=err
            )
            return 1
        ids = [store.add_control(k, action, node, message) for k in live_keys]
        if not engine_alive(store.get_engine()):
            print(
                f"{action} queued for {', '.join(live_keys)}: no engine is running on {state}; "
                f"it is applied when the run continues (chaosflow resume {state})",
                file=out,
            )
            return 0
        deadline = time.monotonic() + wait
        results: dict[int, tuple[bool, str]] = {}
        while len(results) < len(ids):
            for i in ids:
                if i not in results:
                    r = store.control_result(i)
                    if r is not None:
                        results[i] = r
            if len(results) == len(ids):
                break
            if time.monotonic() > deadline:
                print(
                    f"{action}: not applied within {wait:g}s (is the engine busy?); it stays queued", file=err
                )
                return 1
            time.sleep(0.05)
        bad = False
        for i in ids:
            ok, text = results[i]
            print(text, file=out if ok else err)
            bad = bad or not ok
        return 1 if bad else 0
    finally:
        store.close()


# --- Kubernetes mode: controls as annotations on the Workflow object ---------------------------------
#: stop (Argo's stop: cleanup, exit handlers); the Chaos Mesh spelling is accepted too
ANN_ABORT = "chaosflow.io/abort"
ANN_ABORT_CHAOS_MESH = "workflow.chaos-mesh.org/abort"
#: terminate (no exit handlers; chaos still removed)
ANN_TERMINATE = "chaosflow.io/terminate"
#: "true": the workflow is suspended; "false" or absent: it runs
ANN_SUSPEND = "chaosflow.io/suspend"
#: "a,b": these nodes (node or template names) are suspended; absent or "": none
ANN_SUSPEND_NODES = "chaosflow.io/suspend-nodes"
#: "a,b": end these Suspend steps (node or template names); finished nodes are ignored
ANN_APPROVE = "chaosflow.io/approve"
CONTROL_ANNOTATIONS = (
    ANN_ABORT,
    ANN_ABORT_CHAOS_MESH,
    ANN_TERMINATE,
    ANN_SUSPEND,
    ANN_SUSPEND_NODES,
    ANN_APPROVE,
)


@dataclass(frozen=True)
class AnnotationControls:
    """What a Workflow's annotations ask for (level-based: the state wanted, not a command)."""

    stop: bool = False
    terminate: bool = False
    suspend: bool = False
    suspend_nodes: tuple[str, ...] = ()
    approve: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # annotations with a value that is neither "true" nor "false"


def _flag(ann: Mapping[str, Any], key: str, problems: list[str]) -> bool:
    raw = ann.get(key)
    if raw is None:
        return False
    value = str(raw).strip().lower()
    if value == "true":
        return True
    if value not in ("false", ""):
        problems.append(f'{key}: "{raw}" is neither "true" nor "false" (ignored)')
    return False


def split_names(raw: Any) -> tuple[str, ...]:
    """``"a, b,,c a"`` -> ``("a", "b", "c")``: comma- or space-separated, no empties, no repeats."""
    if raw is None:
        return ()
    out: list[str] = []
    for part in str(raw).replace(",", " ").split():
        if part not in out:
            out.append(part)
    return tuple(out)


def parse_annotations(annotations: Mapping[str, Any] | None) -> AnnotationControls:
    """The controls asked for by a Workflow object's ``metadata.annotations``."""
    ann = annotations or {}
    problems: list[str] = []
    stop = _flag(ann, ANN_ABORT, problems)
    stop = _flag(ann, ANN_ABORT_CHAOS_MESH, problems) or stop
    return AnnotationControls(
        stop=stop,
        terminate=_flag(ann, ANN_TERMINATE, problems),
        suspend=_flag(ann, ANN_SUSPEND, problems),
        suspend_nodes=split_names(ann.get(ANN_SUSPEND_NODES)),
        approve=split_names(ann.get(ANN_APPROVE)),
        problems=tuple(problems),
    )


def _covered(node: Node, names: tuple[str, ...]) -> bool:
    return node.name in names or node.template in names


def _could_name(run: WorkflowRun, name: str) -> bool:
    """A node, a template, or a node to come (``<template>-<counter>``, as node names are made)."""
    if name in run.nodes or name in run.templates:
        return True
    template, _, counter = name.rpartition("-")
    return counter.isdigit() and template in run.templates


class AnnotationReconciler:
    """Brings a live run in line with its Workflow's control annotations (engine thread only).

    Level-based and idempotent: each call compares what the annotations ask for with the run's
    state (restored from status after a restart) and does only the difference, so re-reading the
    same annotations — a watch event for an unrelated change, a restarted controller adopting the
    object — does nothing more. Returns ``(event type, reason, message)`` for what it did."""

    def __init__(self, manager: WorkflowManager) -> None:
        self.manager = manager
        # per workflow: Suspend nodes resumed and the aborts sent by this process (their events
        # may not have been processed yet when the next watch event arrives)
        self._resumed: dict[str, set[str]] = {}
        self._aborts: dict[str, set[str]] = {}
        self._warned: dict[str, set[str]] = {}

    def forget(self, key: str) -> None:
        for d in (self._resumed, self._aborts, self._warned):
            d.pop(key, None)

    def reconcile(self, key: str, want: AnnotationControls) -> list[tuple[str, str, str]]:
        run = self.manager.runs.get(key)
        out: list[tuple[str, str, str]] = []
        if run is None or run.phase.finished:
            return out
        for p in want.problems:
            self._warn(key, p, out)
        sent = self._aborts.setdefault(key, set())
        if want.terminate and not run.terminated and "terminate" not in sent:
            sent.update(("terminate", "stop"))
            self.manager.abort(key, f"terminated by annotation {ANN_TERMINATE}", terminate=True)
            out.append(("Normal", "Terminated", f"terminate requested by annotation {ANN_TERMINATE}"))
        elif want.stop and not run.abort_requested and not sent:
            sent.add("stop")
            self.manager.abort(key, f"aborted by annotation {ANN_ABORT}")
            out.append(("Normal", "Stopped", f"stop requested by annotation {ANN_ABORT}"))
        out += self._suspension(run, want)
        out += self.approve(run, want.approve)
        return out

    def _suspension(self, run: WorkflowRun, want: AnnotationControls) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        key = run.key
        if want.suspend and not run.suspended:
            out.append(("Normal", "Suspended", self.manager.suspend(key)))
        nodes = run.nodes
        sel = want.suspend_nodes
        add: list[str] = []
        if sel:  # (every watch event of the object gets here: no scan without a selector)
            add = sorted(
                n.name
                for n in nodes.values()
                if _covered(n, sel) and not n.phase.finished and n.name not in run.suspended_nodes
            )
        drop = sorted(n for n in run.suspended_nodes if n not in nodes or not _covered(nodes[n], sel))
        for name in sel:
            if not _could_name(run, name):
                self._warn(key, f"{ANN_SUSPEND_NODES}: no node or template {name!r}", out)
        if add:
            run.suspended_nodes.update(add)
            out.append(("Normal", "Suspended", f"suspended {', '.join(add)}"))
        resumed = (run.suspended and not want.suspend) or bool(drop)
        if resumed:
            what = []
            if run.suspended and not want.suspend:
                run.suspended = False
                what.append(f"workflow {key} continues")
            if drop:
                run.suspended_nodes.difference_update(drop)
                what.append(f"{', '.join(drop)} continue{'s' if len(drop) == 1 else ''}")
            out.append(("Normal", "Resumed", "; ".join(what)))
        if add or resumed:
            run.update_gate()
            if resumed:
                held, run.held = run.held, []
                for ev in held:  # gated again on arrival if still suspended
                    self.manager.trigger.notify(ev)
            self.manager._mark(run)
            self.manager._workflow_changed(run)
        return out

    def approve(self, run: WorkflowRun, names: tuple[str, ...]) -> list[tuple[str, str, str]]:
        """End the Suspend steps named (node or template names) that hold now; the others are
        ignored (finished ones; not yet started ones are ended when they hold: call again)."""
        if not names or run.phase.finished:
            return []
        from engine.phases import Event, EventType, NodePhase

        done = self._resumed.setdefault(run.key, set())
        hit: list[str] = []
        for n in run.nodes.values():
            if (
                n.kind == "Suspend"
                and n.phase is NodePhase.HOLDING
                and n.name not in done
                and _covered(n, names)
            ):
                done.add(n.name)
                self.manager.trigger.notify(Event(run.key, n.name, EventType.NODE_RESUME))
                hit.append(n.name)
        out: list[tuple[str, str, str]] = []
        for name in names:
            if not _could_name(run, name):
                self._warn(run.key, f"{ANN_APPROVE}: no node or template {name!r}", out)
        if hit:
            out.append(("Normal", "Approved", f"approved {', '.join(hit)} (annotation {ANN_APPROVE})"))
        return out

    def _warn(self, key: str, message: str, out: list[tuple[str, str, str]]) -> None:
        warned = self._warned.setdefault(key, set())
        if message not in warned:
            warned.add(message)
            out.append(("Warning", "InvalidControl", message))


# --- the command side, Kubernetes form: patch the annotations, wait for the status ----------------------
EXIT_REJECTED = 1
EXIT_BAD_INPUT = 2
WF_API = "chaosflow.io/v1alpha1"
FINISHED_PHASES = ("Succeed", "Failed")


class ControlRejected(Exception):
    """A control that cannot be sent: ``code`` is the exit code (1 rejected, 2 bad input)."""

    def __init__(self, message: str, code: int = EXIT_REJECTED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class KubePlan:
    """The annotations to merge-patch (None removes one) and how to tell from the object that the
    controller applied them."""

    annotations: dict[str, str | None]
    done: Callable[[dict[str, Any]], bool]
    says: str  # what is asked, for the output
    already: bool = False  # the status shows it already: nothing to patch


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("status") or {}


def _engine(obj: dict[str, Any]) -> dict[str, Any]:
    return _status(obj).get("engine") or {}


def _nodes(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(_status(obj).get("nodes") or [])


def _finished(obj: dict[str, Any]) -> bool:
    return _status(obj).get("phase") in FINISHED_PHASES


def _holding_suspends(obj: dict[str, Any], names: set[str]) -> set[str]:
    return {
        n["name"]
        for n in _nodes(obj)
        if n.get("name") in names and n.get("templateType") == "Suspend" and n.get("phase") == "Holding"
    }


def _resolve(obj: dict[str, Any], selector: str) -> list[dict[str, Any]]:
    """Unfinished nodes named ``selector``, else of template ``selector`` (from status.nodes)."""
    key = f"{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}"
    unfinished = [n for n in _nodes(obj) if n.get("phase") not in FINISHED_PHASES]
    named = [n for n in _nodes(obj) if n.get("name") == selector]
    if named:
        if named[0].get("phase") in FINISHED_PHASES:
            raise ControlRejected(f"{key}: node {selector} already finished ({named[0].get('phase')})")
        return named
    found = [n for n in unfinished if n.get("templateName") == selector]
    if found:
        return found
    templates = {t.get("name") for t in (obj.get("spec") or {}).get("templates") or []}
    if selector in templates:
        raise ControlRejected(f"{key}: no unfinished node of template {selector!r}")
    raise ControlRejected(f"{key}: no node or template {selector!r}")


def _approve_value(obj: dict[str, Any], add: list[str]) -> str:
    """The approve annotation with ``add``: entries naming finished nodes are dropped (ignored anyway)."""
    finished = {n.get("name") for n in _nodes(obj) if n.get("phase") in FINISHED_PHASES}
    old = split_names(_annotations_of(obj).get(ANN_APPROVE))
    keep = [n for n in old if n not in finished]
    return ",".join(dict.fromkeys([*keep, *add]))


def _annotations_of(obj: dict[str, Any]) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def kube_plan(action: str, obj: dict[str, Any], node: str | None = None) -> KubePlan:
    """What `chaosflow ACTION -n NS NAME [--node X]` patches into the Workflow ``obj``, and when it is
    applied (the same semantics as the local form: :func:`apply_control`)."""
    m = obj.get("metadata") or {}
    key = f"{m.get('namespace')}/{m.get('name')}"
    if _finished(obj):
        raise ControlRejected(f"workflow {key} already finished ({_status(obj).get('phase')})")
    ann = _annotations_of(obj)
    st = _status(obj)
    if action == "stop":
        return KubePlan(
            {ANN_ABORT: "true"},
            lambda o: bool(_engine(o).get("abortRequested")) or _finished(o),
            f"stop requested for {key}",
        )
    if action == "terminate":
        return KubePlan(
            {ANN_TERMINATE: "true"},
            lambda o: bool(_engine(o).get("terminated")) or _finished(o),
            f"terminate requested for {key}",
        )
    if action == "suspend":
        if node is None:
            return KubePlan(
                {ANN_SUSPEND: "true"},
                lambda o: _status(o).get("suspended") is True,
                f"workflow {key} suspended",
                already=st.get("suspended") is True and parse_annotations(ann).suspend,
            )
        names = sorted(n["name"] for n in _resolve(obj, node))
        sel = split_names(ann.get(ANN_SUSPEND_NODES))
        value = ",".join(dict.fromkeys([*sel, node]))

        def suspended(o: dict[str, Any]) -> bool:
            return set(names) <= set(_engine(o).get("suspendedNodes") or ())

        return KubePlan(
            {ANN_SUSPEND_NODES: value}, suspended, f"suspended {', '.join(names)}", already=suspended(obj)
        )
    if action == "unsuspend":
        want = parse_annotations(ann)
        patch: dict[str, str | None] = {}
        says: list[str] = []
        approve: list[str] = []
        if node is None:
            if want.suspend or st.get("suspended") is not None or want.suspend_nodes:
                patch.update({ANN_SUSPEND: None, ANN_SUSPEND_NODES: None})
                says.append(f"workflow {key} continues")
            approve = sorted(
                n["name"]
                for n in _nodes(obj)
                if n.get("templateType") == "Suspend"
                and n.get("phase") == "Holding"
                and (n.get("state") or {}).get("manual")
            )
        elif node in want.suspend_nodes:
            rest = [s for s in want.suspend_nodes if s != node]
            patch[ANN_SUSPEND_NODES] = ",".join(rest) if rest else None
            says.append(f"{node} continues")
        else:
            approve = sorted(
                n["name"]
                for n in _resolve(obj, node)
                if n.get("templateType") == "Suspend" and n.get("phase") == "Holding"
            )
        if approve:
            patch[ANN_APPROVE] = _approve_value(obj, approve)
            says.append(f"{', '.join(approve)} resumed")
        if not patch:
            raise ControlRejected(f"nothing to continue in {key}" + (f" for {node!r}" if node else ""))
        selectors = [s for s in want.suspend_nodes if s != node] if node is not None else []

        def continued(o: dict[str, Any]) -> bool:
            if _finished(o):
                return True
            if ANN_SUSPEND in patch and _status(o).get("suspended") is not None:
                return False
            if ANN_SUSPEND_NODES in patch and node is not None:
                left = set(_engine(o).get("suspendedNodes") or ())
                if any(n.get("name") in left and not _covered_d(n, selectors) for n in _nodes(o)):
                    return False
            return not _holding_suspends(o, set(approve))

        return KubePlan(patch, continued, "; ".join(says))
    raise ControlRejected(f"unknown action {action!r}", EXIT_BAD_INPUT)


def _covered_d(n: dict[str, Any], names: list[str]) -> bool:
    return n.get("name") in names or n.get("templateName") in names


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (as kubectl picks it), else ``default``."""
    try:
        from kubernetes.config.kube_config import list_kube_config_contexts

        contexts, active = list_kube_config_contexts(config_file=kubeconfig)
        ctx = next((c for c in contexts if c.get("name") == context), None) if context else active
        return str(((ctx or {}).get("context") or {}).get("namespace") or "default")
    except Exception:  # no kubeconfig, no contexts: KubePlayground reports it
        return "default"


def kube_control(
    action: str,
    name: str,
    *,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    node: str | None = None,
    wait: float = 30.0,
    out: TextIO,
    err: TextIO,
) -> int:
    """``chaosflow ACTION --kubeconfig K [-n NS] NAME``: merge-patch the control annotations of the
    Workflow, then wait (at most ``wait`` seconds; 0: not at all) until its status shows that the
    controller applied them. 0 applied, 1 rejected / not applied in time, 2 bad input."""
    from actors.base import ActorError
    from actors.kube import ClusterConfig, KubePlayground, RetryPolicy
    from actors.kube.errors import KubeError

    ns = namespace or _context_namespace(kubeconfig, context)
    key = f"{ns}/{name}"
    try:
        cfg = ClusterConfig(
            kubeconfig=kubeconfig,
            context=context,
            retry=RetryPolicy(attempts=3, initial=0.2, cap=1.0),
            request_timeout=10.0,
            connect_timeout=5.0,
        )
        pg = KubePlayground({"default": cfg})
    except (ValueError, ActorError) as e:
        print(f"error: {e}", file=err)
        return EXIT_BAD_INPUT

    def fail(e: ActorError) -> int:
        code = e.code if isinstance(e, KubeError) else None
        if code == 403:
            print(f"{key}: forbidden: {e} (`{action}` needs `patch` on workflows: docs/rbac.md)", file=err)
        else:
            print(f"{key}: error: {e}", file=err)
        return EXIT_REJECTED

    try:
        for _ in range(5):
            try:
                obj = pg.get("default", WF_API, "Workflow", ns, name)
            except ActorError as e:
                return fail(e)
            if obj is None:
                print(f"{key}: no such Workflow", file=err)
                return EXIT_BAD_INPUT
            try:
                plan = kube_plan(action, obj, node)
            except ControlRejected as e:
                print(str(e), file=err)
                return e.code
            if plan.already:
                print(f"{plan.says} (already)", file=out)
                return 0
            meta = {"annotations": plan.annotations, "resourceVersion": obj["metadata"]["resourceVersion"]}
            try:
                pg.patch("default", WF_API, "Workflow", ns, name, {"metadata": meta})
                break
            except KubeError as e:
                if e.code == 409:
                    continue  # changed meanwhile: plan again on the latest object
                if e.code == 404:
                    print(f"{key}: no such Workflow", file=err)
                    return EXIT_BAD_INPUT
                return fail(e)
            except ActorError as e:
                return fail(e)
        else:
            print(f"{key}: the object kept changing (5 conflicts); try again", file=err)
            return EXIT_REJECTED
        sets = ", ".join(f"{k}={v}" if v is not None else f"{k}-" for k, v in plan.annotations.items())
        if wait <= 0:
            print(f"{action} sent to {key} (annotations {sets})", file=out)
            return 0
        deadline = time.monotonic() + wait
        latest = obj
        while True:
            try:
                got = pg.get("default", WF_API, "Workflow", ns, name)
            except ActorError:
                got = latest  # a blip: try again until the deadline
            if got is None:
                print(f"{key}: the Workflow was deleted", file=err)
                return EXIT_REJECTED
            latest = got
            if plan.done(got):
                st = _status(got)
                phase = f" ({st.get('phase')}, {st.get('progress')})" if st.get("phase") else ""
                print(f"{plan.says}{phase}", file=out)
                return 0
            if _finished(got) and action == "suspend":
                print(f"{key} finished ({_status(got).get('phase')}) before it was suspended", file=err)
                return EXIT_REJECTED
            if time.monotonic() > deadline:
                if not _engine(got):
                    why = "no controller has picked the Workflow up yet (is `chaosflow controller` running?)"
                else:
                    why = "is the controller running?"
                print(
                    f"{key}: annotations set ({sets}) but not applied within {wait:g}s: {why}; "
                    "the controller applies them when it gets to it",
                    file=err,
                )
                return EXIT_REJECTED
            time.sleep(0.2)
    finally:
        pg.close()
