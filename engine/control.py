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
from collections.abc import Callable
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
