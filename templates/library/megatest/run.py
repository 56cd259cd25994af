"""``chaosflow megatest``: build the Workflow from the flags and run it on the simulated world
(clusters "test" and "parent" from :mod:`actors.sim.rv`) or on real clusters (KubePlayground)."""

from __future__ import annotations

import argparse
import sys
import time
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
    o: MegatestOptions, report: str = "text", out: TextIO | None = None, setup: Any = None
) -> MegatestResult:
    """Run megatest to the end; ``setup(sim)`` may adjust the simulated world before the start."""
    out = out or sys.stdout
    wf = build_workflow(o)
    if o.sim:
        from actors.sim.playground import SimWorld
        from actors.sim.rv import build_megatest_world
        from engine.clock import VirtualClock
        from engine.manager import WorkflowManager
        from triggers.operable import OperableTrigger

        vclock = VirtualClock()
        trigger = OperableTrigger(vclock)
        world = SimWorld(vclock, trigger, seed=o.seed)
        sim = build_megatest_world(world, sim_world_spec(o))
        if setup is not None:
            setup(sim)
        manager = WorkflowManager(world.playground, vclock, trigger)
    else:
        from actors.kube import ClusterConfig, KubePlayground
        from engine.clock import RealClock
        from engine.manager import WorkflowManager
        from triggers.operable import OperableTrigger

        clusters = {"test": ClusterConfig(kubeconfig=o.kubeconfig)}
        clusters["parent"] = ClusterConfig(kubeconfig=o.parent_kubeconfig or o.kubeconfig)
        clock = RealClock()
        trigger = OperableTrigger(clock)
        manager = WorkflowManager(KubePlayground(clusters), clock, trigger, None, actor_workers=8)
        sim = None
    recorder = MegatestRecorder(wf.name)
    manager.phase_listeners.append(recorder)
    wall0 = time.perf_counter()
    main = manager.submit(wf, seed=o.seed)
    manager.run()
    wall = time.perf_counter() - wall0
    runs = list(manager.runs.values())
    recorder.finish(runs)
    manager.close()
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
        "defaults; simulated clusters without --kubeconfig; -o yaml prints the Workflow. Exit 1 when "
        "an RV ends broken (odd IOReady/Quorum transitions) or cleanup failed, 2 on invalid flags.",
    )
    add_megatest_flags(p)


__all__ = ["InputError", "MegatestResult", "add_megatest_parser", "cmd_megatest", "run_megatest"]
