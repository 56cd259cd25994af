"""Engine benchmark: node transitions per second and schedule-next latency on the sim.

Many concurrent workflows of ~100 nodes each (a Parallel of Serials of Suspends with drawn
durations, so events interleave across workflows), driven to completion on the virtual clock.
Writes JSON. Usage: python -m bench.engine_bench --workflows 10000 --out bench/results.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import sys
import time
from typing import Any

from engine.clock import VirtualClock
from engine.manager import WorkflowManager
from engine.model import Workflow
from triggers.operable import OperableTrigger


def bench_workflow(i: int, branches: int = 9, depth: int = 10) -> Workflow:
    templates: list[dict[str, Any]] = [
        {"name": "root", "templateType": "Parallel", "children": [f"s{b}" for b in range(branches)]}
    ]
    for b in range(branches):
        steps = [f"s{b}-{d}" for d in range(depth)]
        templates.append({"name": f"s{b}", "templateType": "Serial", "children": steps})
        templates += [
            {"name": n, "templateType": "Suspend", "duration": {"min": "1s", "max": "30s"}} for n in steps
        ]
    return Workflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": f"bench-{i}", "namespace": "default"},
            "spec": {"entry": "root", "templates": templates, "seed": i},
        }
    )


class _NoPlayground:
    """The benchmark tree only has Serial/Parallel/Suspend: no cluster effects."""

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - never called
        raise AssertionError(f"unexpected playground call {name}")


def run(workflows: int, branches: int, depth: int, stagger: float) -> dict[str, Any]:
    clock = VirtualClock()
    trigger = OperableTrigger(clock)
    mgr = WorkflowManager(_NoPlayground(), clock, trigger)  # type: ignore[arg-type]
    mgr.schedule_latencies = []
    template = bench_workflow(0, branches, depth)
    t0 = time.perf_counter()
    for i in range(workflows):
        wf = template.model_copy(deep=False)
        wf.metadata = template.metadata.model_copy(update={"name": f"bench-{i}"})
        # workflows arrive spread over `stagger` virtual seconds, as concurrent work does
        mgr.submit(wf, seed=i, start_at=clock.now() + (i * stagger / workflows))
    submit_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)  # as the CLI does: many long-lived nodes, few cycles
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    mgr.run()
    wall = time.perf_counter() - t1
    cpu = time.process_time() - cpu1
    runs = list(mgr.runs.values())
    assert all(r.phase.value == "Succeed" for r in runs), "benchmark workflows must all succeed"
    nodes = sum(len(r.nodes) for r in runs)
    lat = sorted(mgr.schedule_latencies)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else 0.0

    return {
        "workflows": workflows,
        "stagger_virtual_seconds": stagger,
        "nodes_per_workflow": nodes // max(1, workflows),
        "nodes": nodes,
        "events": mgr.events,
        "transitions": mgr.transitions,
        "submit_seconds": round(submit_s, 3),
        "run_wall_seconds": round(wall, 3),
        "run_cpu_seconds": round(cpu, 3),
        "transitions_per_second": round(mgr.transitions / wall, 1),
        "events_per_second": round(mgr.events / wall, 1),
        "schedule_next_latency_ms": {
            "samples": len(lat),
            "p50": round(pct(0.50), 3),
            "p99": round(pct(0.99), 3),
            "max": round(lat[-1] * 1000, 3) if lat else 0.0,
            "mean": round(statistics.fmean(lat) * 1000, 3) if lat else 0.0,
        },
        "virtual_seconds": round(clock.now() - runs[0].start_time, 1) if runs and runs[0].start_time else 0,
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workflows", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--branches", type=int, default=9)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--stagger", type=float, default=60.0, help="virtual seconds over which workflows start")
    ap.add_argument("--out", default="bench/results.json")
    args = ap.parse_args(argv)
    results = []
    for n in args.workflows:
        r = run(n, args.branches, args.depth, args.stagger)
        print(json.dumps(r), file=sys.stderr)
        results.append(r)
    doc = {
        "benchmark": "engine",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "note": "schedule-next latency: wall time from the event that lets a parent schedule to the "
        "creation of the next child node(s), including queue wait; one process, one core",
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
