"""``chaosflow megatest``: build the Workflow from the flags and run it on the simulated world
(clusters "test" and "parent" from :mod:`actors.sim.rv`) or on real clusters (KubePlayground)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from engine.errors import InputError
from templates.library.megatest.builder import build_workflow
from templates.library.megatest.options import MegatestOptions, options_from_args
from templates.library.megatest.report import MegatestRecorder, render_report

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


@dataclass
class MegatestResult:
    exit_code: int
    report: dict[str, Any]
    wall: float
    sim: Any = None  # actors.sim.rv.MegatestSim on the sim


def sim_world_spec(o: MegatestOptions) -> Any:
    from actors.sim.rv import MegatestWorldSpec

    return MegatestWorldSpec.build(
        storage_classes=o.storage_classes,
        storage_nodes=o.sim_storage_nodes,
        vm_namespace=o.vm_ns,
        bugs=dict.fromkeys(o.sim_bugs, True),
    )


def check(o: MegatestOptions) -> list[str]:
    problems = o.problems()
    if o.sim:
        from actors.sim.rv import RVBugs

        known = {f for f in RVBugs.__dataclass_fields__}
        problems += [
            f"--sim-bug: unknown bug {b!r} (known: {', '.join(sorted(known))})"
            for b in o.sim_bugs
            if b not in known
        ]
        if not problems:
            try:
                sim_world_spec(o)
            except (ValueError, TypeError) as e:
                problems.append(f"--storage-classes: {e}")
    return problems


def run_megatest(
    o: MegatestOptions,
    report: str = "text",
    out: TextIO | None = None,
    setup: Any = None,
    metrics: Any = None,
) -> MegatestResult:
    """Run megatest to the end; ``setup(sim)`` may adjust the simulated world before the start.
    ``o.metrics_addr`` serves engine metrics and the megatest figures (fed live) on /metrics;
    without it, ``metrics`` (an unattached :class:`engine.metrics.Metrics`) is attached and fed."""
    out = out or sys.stdout
    wf = build_workflow(o)
    close_playground: Callable[[], None] | None = None
    if o.sim:
        from actors.sim.playground import SimWorld
        from actors.sim.rv import build_megatest_world
        from engine.manager import WorkflowManager
        from engine.runner import paced_or_virtual_clock
        from triggers.operable import OperableTrigger

        vclock = paced_or_virtual_clock(o.pace)  # --pace: no faster than PACE x wall time
        trigger = OperableTrigger(vclock)
        world = SimWorld(vclock, trigger, seed=o.seed)
        sim = build_megatest_world(world, sim_world_spec(o))
        if setup is not None:
            setup(sim)
        manager = WorkflowManager(world.playground, vclock, trigger)
    else:
        from actors.base import ActorError
        from actors.kube import ClusterConfig, KubePlayground
        from actors.megatest import STORAGE_API, VIRT_API
        from engine.clock import RealClock
        from engine.manager import WorkflowManager
        from triggers.operable import OperableTrigger

        clusters = {"test": ClusterConfig(kubeconfig=o.kubeconfig)}
        clusters["parent"] = ClusterConfig(kubeconfig=o.parent_kubeconfig or o.kubeconfig)
        flags = {
            "test": "--kubeconfig",
            "parent": "--parent-kubeconfig" if o.parent_kubeconfig else "--kubeconfig",
        }
        # Preflight (exit 2 with one "megatest: ..." line per problem, no traceback): both
        # kubeconfigs load, the test cluster serves the storage kinds and has the storage classes,
        # the parent serves VirtualMachines in --vm-namespace (chaos only).
        problems: list[str] = []
        for cname, cfg in clusters.items():
            if cname == "parent" and not o.parent_kubeconfig:
                continue  # the same kubeconfig as the test cluster
            try:
                cfg.build_configuration(cname)
            except ActorError as e:
                problems.append(f"{flags[cname]}: {e}")
        if problems:
            raise InputError("megatest", None, "\nmegatest: ".join(dict.fromkeys(problems)))
        playground = KubePlayground(clusters)
        try:
            rscs = {
                str(x["metadata"]["name"])
                for x in playground.list("test", STORAGE_API, "ReplicatedStorageClass")
            }
            unknown = [s for s in o.storage_classes if s.split(":")[0] not in rscs]
            if unknown:
                problems.append(
                    f"--storage-classes: no ReplicatedStorageClass {', '.join(unknown)} on the cluster "
                    f"(known: {', '.join(sorted(rscs)) or 'none'})"
                )
        except ActorError as e:
            problems.append(f"--kubeconfig: {e}")
        if o.chaos:
            try:
                if not playground.list("parent", VIRT_API, "VirtualMachine", o.vm_namespace):
                    problems.append(
                        f"--vm-namespace: no VirtualMachine in namespace {o.vm_namespace} of the parent cluster"
                    )
            except ActorError as e:
                problems.append(f"{flags['parent']}: {e}")
        if problems:
            playground.close()
            raise InputError("megatest", None, "\nmegatest: ".join(problems))
        clock = RealClock()
        trigger = OperableTrigger(clock)
        manager = WorkflowManager(playground, clock, trigger, None, actor_workers=8)
        close_playground = playground.close
        sim = None
        # SIGINT/SIGTERM must not leave chaos behind (CiliumNetworkPolicies, iptables Jobs,
        # volumes): the first signal aborts the run (volume teardown and chaos recovery run, then
        # the report), the second terminates it (exit handlers skipped, chaos still recovered), a
        # third one is not caught any more. The handler only records the signal; the engine loop
        # acts on it (a tick hook, within 0.5 s), never inside the handler.
        import logging
        import signal
        import threading

        got: list[int] = []
        acted: list[int] = []
        caught = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.getsignal(s) for s in caught}

        def restore_signals() -> None:
            if threading.current_thread() is threading.main_thread():
                for s, h in previous.items():
                    if signal.getsignal(s) is on_signal:
                        signal.signal(s, h)

        def on_signal(signum: int, frame: Any) -> None:
            got.append(signum)
            if len(got) >= 2:
                restore_signals()

        def abort_on_signal() -> None:
            for signum in got[len(acted) :]:
                acted.append(signum)
                terminate = len(acted) > 1
                name = signal.Signals(signum).name
                logging.getLogger("chaosflow.megatest").warning(
                    "megatest interrupted by %s: %s",
                    name,
                    "terminating (exit handlers skipped, chaos still recovered)"
                    if terminate
                    else "aborting: volumes are torn down and chaos is recovered "
                    "(send it again to skip the volume teardown)",
                    extra={"signal": name, "terminate": terminate},
                )
                for r in list(manager.runs.values()):
                    if not r.phase.finished and not r.workflow.metadata.labels.get(
                        "chaosflow.io/parent-workflow"
                    ):  # root runs; volume workflows stop with their parent
                        manager.abort(r.key, f"interrupted by {name}", terminate=terminate)

        def restore_when_done(_run: Any) -> None:
            if all(r.phase.finished for r in manager.runs.values()):
                restore_signals()

        if threading.current_thread() is threading.main_thread():
            for s in caught:
                signal.signal(s, on_signal)
            manager.tick_hooks.append(abort_on_signal)
            manager.workflow_listeners.append(restore_when_done)
    served = None
    if o.metrics_addr:  # engine metrics and the megatest figures on /metrics while the run lasts
        from engine.runner import serve_metrics

        served = serve_metrics(o.metrics_addr, manager)
        metrics = served.metrics
    elif metrics is not None:
        metrics.attach(manager)
    recorder = MegatestRecorder(wf.name, metrics).attach(manager)
    try:
        wall0 = time.perf_counter()
        main = manager.submit(wf, seed=o.seed)
        manager.run()
        wall = time.perf_counter() - wall0
        runs = list(manager.runs.values())
        recorder.finish(runs)
        manager.close()
    finally:
        if served is not None:
            served.close()
        if close_playground is not None:  # the real clusters' connections (watches, pools)
            close_playground()
    doc = recorder.to_dict(main)
    render_report(doc, report, out)
    code = EXIT_FAILED if recorder.failed(main) else EXIT_OK
    return MegatestResult(code, doc, wall, sim)


def cmd_megatest(args: argparse.Namespace) -> int:
    o = options_from_args(args)
    problems = check(o)
    if problems:
        for p in problems:
            print(f"megatest: {p}", file=sys.stderr)
        return EXIT_INVALID
    from templates.library.megatest.cron import cron_problems, cron_yaml

    problems = cron_problems(args)
    if problems:
        for p in problems:
            print(f"megatest: {p}", file=sys.stderr)
        return EXIT_INVALID
    if getattr(args, "output", None) == "cron":
        if getattr(args, "seed", None) is not None:
            print(
                "megatest: note: --seed is not used with -o cron: each tick's Workflow gets its own seed "
                "(its spec.seed), derived from the CronWorkflow and the scheduled time",
                file=sys.stderr,
            )
        sys.stdout.write(cron_yaml(o, build_workflow(o), args))
        return EXIT_OK
    if getattr(args, "output", None) == "yaml":
        from engine.yamlio import dump_yaml

        wf = build_workflow(o)
        sys.stdout.write(dump_yaml(wf.model_dump(mode="json", exclude_none=True, by_alias=True)))
        return EXIT_OK
    res = run_megatest(o, args.report)
    print(
        f"megatest: simulated {o.duration:g}s in {res.wall:.2f}s wall"
        if o.sim
        else f"megatest: {res.wall:.1f}s",
        file=sys.stderr,
    )
    return res.exit_code


def add_megatest_parser(sub: Any) -> None:
    from templates.library.megatest.options import add_megatest_flags

    p = sub.add_parser(
        "megatest",
        help="the randomized stress/chaos test of replicated volumes, as a workflow",
        description="megatest (seeds/megatest-goroutines.ru.md) as a Workflow: the seed's flags and "
        "defaults; simulated clusters without --kubeconfig; -o yaml prints the Workflow, -o cron "
        "--schedule CRON a CronWorkflow running it on schedule (docs/megatest.md). Exit 1 when "
        "an RV ends broken (odd IOReady/Quorum transitions) or cleanup failed, 2 on invalid flags.",
    )
    add_megatest_flags(p)


__all__ = ["InputError", "MegatestResult", "add_megatest_parser", "cmd_megatest", "run_megatest"]
