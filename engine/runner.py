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
from engine.errors import Path as ErrPath
from engine.manager import WorkflowManager
from engine.model import Workflow
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from engine.simworld import (
    SimWorldRequest,
    build_sim_world,
    restore_sim_world,
    sim_world_of,
)
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
    parameters: dict[str, Any] = field(default_factory=dict)  # -p name=value: workflow parameters
    clusters: dict[str, Any] | None = None  # name -> actors.kube.ClusterConfig: real clusters, real clock
    metrics_addr: str | None = None  # HOST:PORT to serve Prometheus /metrics on during the run
    pace: float | None = None  # virtual clock: at most PACE virtual seconds per wall second
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

    clock: Clock = RealClock() if opts.real_time else paced_or_virtual_clock(opts.pace, clock_start)
    trigger = OperableTrigger(clock)
    world = SimWorld(clock, trigger, seed=seed)
    store = None
    if opts.state:
        store = SQLiteStore(opts.state, min_interval=opts.checkpoint_interval)
        store.snapshots["sim"] = world.snapshot
        store.snapshots["clock"] = clock.now
    manager = WorkflowManager(world.playground, clock, trigger, store)
    return LocalEnv(clock, trigger, manager, store, world)


class PacedVirtualClock(VirtualClock):
    """A virtual clock that moves no faster than ``factor`` x wall time, so a simulated run can be
    watched live (and scraped by Prometheus). While waiting for the next timer it moves smoothly."""

    def __init__(self, start: float, factor: float) -> None:
        super().__init__(start)
        self.factor = float(factor)
        self._anchor: tuple[float, float] | None = None  # (virtual, wall) at the first advance

    def advance_to(self, t: float) -> None:
        if t <= self._now:
            return
        if self._anchor is None:
            self._anchor = (self._now, time.monotonic())
        v0, w0 = self._anchor
        due = w0 + (t - v0) / self.factor
        while (left := due - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
            self._now = min(t, max(self._now, v0 + (time.monotonic() - w0) * self.factor))
        self._now = t


def metrics_addr_problem(addr: str) -> str | None:
    """Why ``addr`` is not a usable ``--metrics-addr HOST:PORT`` (None when it is)."""
    _host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return f"--metrics-addr: {addr!r} is not HOST:PORT (e.g. 127.0.0.1:9090 or :9090)"
    return None


@dataclass
class MetricsServer:
    """Engine metrics served on ``/metrics`` for the length of a local run (:func:`serve_metrics`)."""

    metrics: Any  # engine.metrics.Metrics
    server: Any  # the HTTP server of prometheus_client.start_http_server

    def close(self) -> None:
        """Stop serving and unregister the metrics (another run in this process may serve again)."""
        self.server.shutdown()
        self.server.server_close()
        self.metrics.unregister()


def serve_metrics(addr: str, manager: WorkflowManager, err: TextIO | None = None) -> MetricsServer:
    """``--metrics-addr HOST:PORT`` of a local run (``chaosflow run``, ``resume``, ``megatest``):
    attach engine metrics (default registry) to ``manager`` and serve them on /metrics."""
    from prometheus_client import REGISTRY, start_http_server

    from engine.metrics import Metrics

    host, _, port = addr.rpartition(":")
    metrics = Metrics().attach(manager)
    metrics.set_leader(True)  # a local run is its own, only engine
    try:
        server, _thread = start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0", registry=REGISTRY)
    except BaseException:
        metrics.unregister()
        raise
    print(f"serving metrics on http://{addr}/metrics", file=err or sys.stderr)
    return MetricsServer(metrics, server)


def paced_or_virtual_clock(pace: float | None, start: float = VIRTUAL_EPOCH) -> VirtualClock:
    """``--pace FACTOR``: a virtual clock that runs no faster than FACTOR x wall time; else a plain one."""
    return PacedVirtualClock(start, pace) if pace else VirtualClock(start)


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
    served = serve_metrics(opts.metrics_addr, mgr, opts.err) if opts.metrics_addr else None
    poller = None
    if env.store is not None:  # chaosflow stop|terminate|suspend|unsuspend STATE from elsewhere
        from engine.control import ControlPoller

        def on_wait(what: str) -> None:
            print(
                f"waiting: {what} — continue with `chaosflow unsuspend {opts.state} [--node NAME]`",
                file=opts.err,
            )

        poller = ControlPoller(mgr, env.store, on_wait=on_wait).attach()
    wall0 = time.perf_counter()
    if opts.crash_after_events is not None:
        limit = opts.crash_after_events
        mgr.run(max_events=limit)
        if not all(r.phase.finished for r in runs):
            os._exit(137)  # simulated crash: nothing beyond the last checkpoint is written
    mgr.run()
    if poller is not None:
        poller.detach()
    if env.store is not None:
        env.store.flush()
    wall = time.perf_counter() - wall0
    stuck = [r for r in runs if not r.phase.finished]
    waiting = bool(stuck) and mgr.waiting_for_input()
    for r in stuck:
        if waiting:
            r.message = r.message or (
                "waiting for input (suspended, or a manual Suspend step): run with --state and use "
                "`chaosflow unsuspend STATE`"
            )
        r.message = r.message or "stuck: nothing left to run and the workflow did not finish"
    _report(runs, opts, wall, mgr)
    mgr.close()
    if served is not None:
        served.close()
    return EXIT_OK if all(r.phase.value == "Succeed" for r in runs) else EXIT_FAILED


def build_kube_env(opts: RunOptions) -> LocalEnv:
    """Real clusters (``opts.clusters``) on the real clock; actors on a thread pool."""
    from actors.kube import KubePlayground

    assert opts.clusters
    clock = RealClock()
    trigger = OperableTrigger(clock)
    playground = KubePlayground(opts.clusters)
    store = SQLiteStore(opts.state, min_interval=opts.checkpoint_interval) if opts.state else None
    manager = WorkflowManager(playground, clock, trigger, store, actor_workers=8)
    return LocalEnv(clock, trigger, manager, store, None)


def _clusters_meta(clusters: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        n: [str(c.kubeconfig) if c.kubeconfig else None, c.context, c.incluster] for n, c in clusters.items()
    }


def _clusters_from_meta(meta: dict[str, list[Any]]) -> dict[str, Any]:
    from actors.kube import ClusterConfig

    return {n: ClusterConfig(kubeconfig=k, context=c, incluster=bool(i)) for n, (k, c, i) in meta.items()}


def _workflow_sources(workflows: list[Workflow]) -> list[tuple[dict[str, str], str, ErrPath]]:
    return [
        (wf.metadata.annotations, f"Workflow {wf.namespace}/{wf.name}", ("metadata", "annotations"))
        for wf in workflows
    ]


def run_local(workflows: list[Workflow], opts: RunOptions) -> int:
    seed = opts.seed if opts.seed is not None else (workflows[0].spec.seed or 0)
    request = None if opts.clusters else sim_world_of(_workflow_sources(workflows))
    env = build_kube_env(opts) if opts.clusters else build_sim_env(opts, seed)
    if env.world is not None:
        env.world.load_world_file(opts.world)
        if request is not None:
            build_sim_world(env.world, request)
    if env.store is not None:
        meta: dict[str, Any] = {"seed": seed, "real_time": opts.real_time}
        if opts.clusters:
            meta["clusters"] = _clusters_meta(opts.clusters)
        if request is not None:
            meta["simWorld"] = request.to_dict()
        env.store.put_meta("options", meta)
    if opts.parameters:
        from engine.render import override_parameters

        workflows = [override_parameters(wf, opts.parameters) for wf in workflows]
    runs = [env.manager.submit(wf, seed=opts.seed) for wf in workflows]
    return _drive(env, opts, runs)


def resume_local(state: str, opts: RunOptions) -> int:
    if not Path(state).exists():
        print(f"{state}: no such state file", file=opts.err)
        return EXIT_INVALID
    store = SQLiteStore(state)
    from engine.control import engine_alive

    engine = store.get_engine()
    if engine_alive(engine):
        store.close()
        assert engine is not None
        print(
            f"{state}: a live engine (pid {engine.get('pid')}) is running this state; control it with "
            f"`chaosflow stop|terminate|suspend|unsuspend {state}`",
            file=opts.err,
        )
        return EXIT_INVALID
    meta = store.get_meta("options", {}) or {}
    clock_at = store.get_meta("clock", VIRTUAL_EPOCH)
    sim = store.get_meta("sim")
    store.close()
    opts.state = state
    opts.real_time = bool(meta.get("real_time", False))
    if meta.get("clusters"):
        opts.clusters = opts.clusters or _clusters_from_meta(meta["clusters"])
        env = build_kube_env(opts)
    else:
        env = build_sim_env(opts, int(meta.get("seed", 0)), clock_start=clock_at)
    if env.world is not None:
        request = SimWorldRequest.from_dict(meta["simWorld"]) if meta.get("simWorld") else None
        if sim is not None:
            restore_sim_world(env.world, sim, request)
        elif request is not None:  # crashed before the first checkpoint
            build_sim_world(env.world, request)
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
