"""Local runs: a workflow on the simulated cluster (virtual clock) or real clusters, to the end.

``chaosflow run`` and ``chaosflow resume`` are thin wrappers around :func:`run_local` and
:func:`resume_local`. State goes to SQLite so a crashed run can be continued.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from engine.clock import VIRTUAL_EPOCH, Clock, RealClock, VirtualClock
from engine.manager import WorkflowManager
from engine.model import Workflow
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from engine.store import SQLiteStore
from triggers.operable import OperableTrigger

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


@dataclass
class RunOptions:
    seed: int | None = None
    output: str = "text"  # text | json | yaml
    state: str | None = None  # SQLite file; None = no persistence
    progress: bool = True
    real_time: bool = False
    checkpoint_interval: float = 0.25
    world: str | None = None  # YAML objects for the sim cluster; None = the bundled default world
    crash_after_events: int | None = None  # testing hook: os._exit(137) after N events
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


@dataclass
class LocalEnv:
    clock: Clock
    trigger: OperableTrigger
    manager: WorkflowManager
    store: SQLiteStore | None
    world: Any  # actors.sim.SimWorld


def build_sim_env(opts: RunOptions, seed: int, clock_start: float = VIRTUAL_EPOCH) -> LocalEnv:
    from actors.sim.playground import SimWorld

    clock: Clock = RealClock() if opts.real_time else VirtualClock(clock_start)
    trigger = OperableTrigger(clock)
    world = SimWorld(clock, trigger, seed=seed)
    store = None
    if opts.state:
        store = SQLiteStore(opts.state, min_interval=opts.checkpoint_interval)
        store.snapshots["sim"] = world.snapshot
        store.snapshots["clock"] = clock.now
    manager = WorkflowManager(world.playground, clock, trigger, store)
    return LocalEnv(clock, trigger, manager, store, world)


def _progress_listener(opts: RunOptions, env: LocalEnv) -> Any:
    start = env.clock.now()

    def on_phase(run: WorkflowRun, node: Node, old: NodePhase) -> None:
        t = env.clock.now() - start
        h, rem = divmod(int(t), 3600)
        m, s = divmod(rem, 60)
        msg = f"  ({node.message})" if node.message and node.phase.finished else ""
        print(
            f"[{h:02d}:{m:02d}:{s:02d}] {run.name}/{node.name:<32} {old.value} -> {node.phase.value}{msg}",
            file=opts.err,
        )

    return on_phase


def _drive(env: LocalEnv, opts: RunOptions, runs: list[WorkflowRun]) -> int:
    mgr = env.manager
    if opts.progress and opts.output == "text":
        mgr.phase_listeners.append(_progress_listener(opts, env))
    wall0 = time.perf_counter()
    if opts.crash_after_events is not None:
        limit = opts.crash_after_events
        mgr.run(max_events=limit)
        if not all(r.phase.finished for r in runs):
            os._exit(137)  # simulated crash: nothing beyond the last checkpoint is written
    mgr.run()
    if env.store is not None:
        env.store.flush()
    wall = time.perf_counter() - wall0
    stuck = [r for r in runs if not r.phase.finished]
    for r in stuck:
        r.message = r.message or "stuck: nothing left to run and the workflow did not finish"
    _report(runs, opts, wall, mgr)
    mgr.close()
    return EXIT_OK if all(r.phase.value == "Succeed" for r in runs) else EXIT_FAILED


def run_local(workflows: list[Workflow], opts: RunOptions) -> int:
    seed = opts.seed if opts.seed is not None else (workflows[0].spec.seed or 0)
    env = build_sim_env(opts, seed)
    env.world.load_world_file(opts.world)
    if env.store is not None:
        env.store.put_meta("options", {"seed": seed, "real_time": opts.real_time})
    runs = [env.manager.submit(wf, seed=opts.seed) for wf in workflows]
    return _drive(env, opts, runs)


def resume_local(state: str, opts: RunOptions) -> int:
    if not Path(state).exists():
        print(f"{state}: no such state file", file=opts.err)
        return EXIT_INVALID
    store = SQLiteStore(state)
    meta = store.get_meta("options", {}) or {}
    clock_at = store.get_meta("clock", VIRTUAL_EPOCH)
    sim = store.get_meta("sim")
    store.close()
    opts.state = state
    opts.real_time = bool(meta.get("real_time", False))
    env = build_sim_env(opts, int(meta.get("seed", 0)), clock_start=clock_at)
    if sim is not None:
        env.world.restore(sim)
    assert env.store is not None
    runs = env.store.load_all()
    for r in runs:
        env.manager.adopt(r)
    return _drive(env, opts, runs)


# --- reporting -------------------------------------------------------------------------------------
def _report(runs: list[WorkflowRun], opts: RunOptions, wall: float, mgr: WorkflowManager) -> None:
    if opts.output == "json":
        objs = [r.to_object() for r in runs]
        doc = objs[0] if len(objs) == 1 else {"apiVersion": "v1", "kind": "List", "items": objs}
        print(json.dumps(doc, indent=2), file=opts.out)
        return
    if opts.output == "yaml":
        from engine.yamlio import dump_yaml

        objs = [r.to_object() for r in runs]
        print(
            dump_yaml(objs[0] if len(objs) == 1 else {"apiVersion": "v1", "kind": "List", "items": objs}),
            file=opts.out,
        )
        return
    from engine.report import render_tree

    for r in runs:
        render_tree(r, opts.out)
    print(
        f"{len(runs)} workflow(s), {mgr.transitions} node transitions, {mgr.events} events, wall {wall:.3f}s",
        file=opts.out,
    )
