"""Named chaos actors on the simulated cluster: the built-in pod-kill (an entry point) and actors
registered in-process; hold, one-shot, abort, deadline, retried recovery, resume, no leftovers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.base import Playground
from actors.chaos_registry import ChaosContext, ObjectRef, register_chaos_actor, unregister_chaos_actor
from engine.loader import load_workflow_file
from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import took, workflow
from tests.sim.conftest import Sim, make_sim
from tests.sim.test_statuscheck import resume_elsewhere

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


class ConfigMapChaos:
    """Creates ``params.count`` ConfigMaps (stand-ins for network policies); recovery deletes them."""

    def __init__(self, finalizer: bool = False) -> None:
        self.finalizer = finalizer
        self.injects = 0

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        self.injects += 1
        refs: list[ObjectRef] = []
        for i in range(int(params.get("count", 1))):
            meta: dict[str, Any] = {
                "name": f"{ctx.name}-{i}",
                "namespace": ctx.namespace,
                "labels": ctx.labels,
            }
            if self.finalizer:
                meta["finalizers"] = ["test/hold"]
            playground.create(ctx.cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
            refs.append(
                {
                    "cluster": ctx.cluster,
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "namespace": ctx.namespace,
                    "name": meta["name"],
                }
            )
        ctx.outputs["created"] = [r["name"] for r in refs]
        return refs

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        for r in refs:
            playground.delete(r["cluster"], r["apiVersion"], r["kind"], r["namespace"], r["name"])


@pytest.fixture
def cm_chaos() -> Iterator[ConfigMapChaos]:
    actor = ConfigMapChaos()
    register_chaos_actor("cm-chaos", actor)
    yield actor
    unregister_chaos_actor("cm-chaos")


def only(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template]
    return n


def cm_chaos_tmpl(
    name: str = "c", duration: str | None = "1m", count: int = 2, **extra: Any
) -> dict[str, Any]:
    t: dict[str, Any] = {
        "name": name,
        "templateType": "Chaos",
        "chaos": {"action": "cm-chaos", "params": {"count": count}},
        **extra,
    }
    if duration is not None:
        t["duration"] = duration
    return t


def configmaps(sim: Sim) -> list[str]:
    return [o["metadata"]["name"] for o in sim.labelled("ConfigMap")]


def web_pods(sim: Sim) -> list[str]:
    return [p["metadata"]["name"] for p in sim.api.list("Pod", "default", "app=web")["items"]]


# --- pod-kill (built in, through the entry point) ---------------------------------------------------
def test_pod_kill_in_a_serial_completes(sim: Sim) -> None:
    """chaos-mesh #3345/#4539 for named actors: one-shot chaos completes and the next step runs."""
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["kill", "after"]},
            {
                "name": "kill",
                "templateType": "Chaos",
                "chaos": {"action": "pod-kill", "params": {"selector": {"app": "web"}, "count": 2}},
            },
            {"name": "after", "templateType": "Suspend", "duration": "5s"},
        ],
        seed=1,
    )
    before = web_pods(sim)
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    kill = only(run, "kill")
    killed = kill.outputs["killed"]
    assert len(killed) == 2 and set(killed) <= set(before)
    assert sorted(web_pods(sim)) == sorted(set(before) - set(killed))
    assert took(run) == pytest.approx(5)


def test_pod_kill_with_templated_params_and_no_target(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "kill",
                "templateType": "Chaos",
                "chaos": {"action": "pod-kill", "params": {"selector": "{{ 'app=' + params.app }}"}},
            }
        ],
        parameters=[{"name": "app", "value": "nothing"}],
    )
    run = sim.submit(wf)
    sim.run()
    kill = only(run, "kill")
    assert kill.phase is P.FAILED
    assert (
        kill.message
        == 'chaos action pod-kill failed: pod-kill: no pod in namespace default matches "app=nothing"'
    )


# --- an actor registered in-process -------------------------------------------------------------------
def test_named_chaos_is_held_then_recovered(sim: Sim, cm_chaos: ConfigMapChaos) -> None:
    seen: list[tuple[float, list[str]]] = []
    run = sim.submit(workflow([cm_chaos_tmpl()]))
    for t in (0.5, 59.5):
        sim.at(t, lambda t=t: seen.append((t, sorted(configmaps(sim)))))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert seen == [(0.5, ["wf-c-0-0", "wf-c-0-1"]), (59.5, ["wf-c-0-0", "wf-c-0-1"])]
    assert took(run) == 60 and configmaps(sim) == []
    c = only(run, "c")
    assert c.outputs == {"created": ["wf-c-0-0", "wf-c-0-1"], "objects": 2}


@pytest.mark.parametrize("how", ["abort", "deadline", "sibling"])
def test_named_chaos_is_always_recovered(sim: Sim, cm_chaos: ConfigMapChaos, how: str) -> None:
    tmpls: list[dict[str, Any]] = [
        {"name": "p", "templateType": "Parallel", "children": ["c", "other"]},
        cm_chaos_tmpl(duration="1h", deadline="30s" if how == "deadline" else None),
    ]
    if how == "sibling":
        tmpls.append(
            {
                "name": "other",
                "templateType": "Task",
                "task": {"container": {"image": "busybox", "command": ["sh", "-c", "sleep 20; exit 1"]}},
            }
        )
    else:
        tmpls.append({"name": "other", "templateType": "Suspend", "duration": "2h"})
    for t in tmpls:
        if t.get("deadline") is None:
            t.pop("deadline", None)
    run = sim.submit(workflow(tmpls))
    if how == "abort":
        sim.at(40, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert configmaps(sim) == []
    c = only(run, "c")
    assert c.phase is P.FAILED
    assert (
        c.reason
        == {"abort": "ParentStopped", "deadline": "DeadlineExceeded", "sibling": "SiblingFailed"}[how]
    )
    assert took(run) < 45


def test_recovery_waits_for_finalizers_with_retries(sim: Sim) -> None:
    actor = ConfigMapChaos(finalizer=True)
    register_chaos_actor("cm-chaos", actor, replace=True)
    try:
        run = sim.submit(workflow([cm_chaos_tmpl(duration="10s", count=1)]))

        def release() -> None:
            sim.api.patch("ConfigMap", "wf-c-0-0", {"metadata": {"finalizers": None}}, "default")

        sim.at(12.5, release)  # deletion requested at 10 s; the finalizer goes at 12.5 s
        sim.run()
    finally:
        unregister_chaos_actor("cm-chaos")
    assert run.phase.value == "Succeed", run.message
    c = only(run, "c")
    assert c.state["deleteAttempts"] == 2  # retried after 1 s and 2 s more: gone at 13 s
    assert "still present after recover" in c.state["lastError"]
    assert took(run) == pytest.approx(13)
    assert configmaps(sim) == []


def test_aborting_a_parent_removes_named_chaos_a_child_workflow_injected(
    sim: Sim, cm_chaos: ConfigMapChaos
) -> None:
    wf = workflow(
        [
            {"name": "spawn", "templateType": "Workflow", "workflow": {"from": "c"}},
            cm_chaos_tmpl(duration="1h"),
        ]
    )
    run = sim.submit(wf)
    sim.at(100, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert len(sim.manager.runs) == 2 and all(r.phase.value == "Failed" for r in sim.manager.runs.values())
    assert configmaps(sim) == []


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 6])
def test_resume_recovers_named_chaos_on_time(crash_after: int) -> None:
    actor = ConfigMapChaos()
    register_chaos_actor("cm-chaos", actor, replace=True)
    try:
        sim = make_sim()
        sim.submit(workflow([cm_chaos_tmpl(duration="1m")]))
        resumed = resume_elsewhere(sim, crash_after)
        resumed.run()
    finally:
        unregister_chaos_actor("cm-chaos")
    (run,) = resumed.manager.runs.values()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(60)
    assert actor.injects <= 2  # a re-issued inject finds its objects (deterministic names)
    assert configmaps(resumed) == []


def test_example_runs() -> None:
    sim = make_sim()
    (wf,) = load_workflow_file(str(ROOT / "examples" / "named-chaos.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert len(web_pods(sim)) == 2
