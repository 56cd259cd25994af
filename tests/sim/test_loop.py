"""Loop on the simulated cluster with the virtual clock (and crash/resume of loops)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.loader import load_workflow_file
from engine.model import Workflow
from engine.phases import NodePhase
from engine.runner import RunOptions, build_sim_env
from engine.runtime import Node, WorkflowRun
from engine.store import SQLiteStore
from tests.helpers import net, suspend, took, workflow
from tests.sim.conftest import Sim, make_sim

ROOT = Path(__file__).resolve().parents[2]
P = NodePhase


def nodes_of(run: WorkflowRun, template: str) -> list[Node]:
    return [n for n in run.nodes.values() if n.template == template]


def node_of(run: WorkflowRun, template: str) -> Node:
    (n,) = nodes_of(run, template)
    return n


def loop(name: str, child: str, **spec: Any) -> dict[str, Any]:
    extra = {k: spec.pop(k) for k in ("deadline", "onDeadline") if k in spec}
    return {"name": name, "templateType": "Loop", "loop": {"child": child, **spec}, **extra}


def cm_chaos(name: str, duration: str = "10s") -> dict[str, Any]:
    """The simplest chaos object on the sim: a ConfigMap held for a duration."""
    return {
        "name": name,
        "templateType": "Chaos",
        "duration": duration,
        "chaos": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"chaos": "yes"}}},
    }


def leftovers(sim: Sim) -> list[Any]:
    return sim.chaos_objects() + sim.labelled("ConfigMap")


def test_example_runs(sim: Sim) -> None:
    (wf,) = load_workflow_file(str(ROOT / "examples" / "loop.yaml"))
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert leftovers(sim) == []


def test_count_runs_each_iteration_as_a_child_node(sim: Sim) -> None:
    run = sim.submit(workflow([loop("l", "z", count=4), suspend("z", "15s")]))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(60)
    loop_node = node_of(run, "l")
    assert loop_node.outputs == {"iterations": 4, "succeeded": 4, "failed": 0}
    assert loop_node.children == [n.name for n in nodes_of(run, "z")] and len(loop_node.children) == 4
    assert loop_node.message == "4 iteration(s): count reached"


def test_until_reads_the_iteration_and_the_last_child(sim: Sim) -> None:
    wf = workflow(
        [
            loop("l", "bump", until="nodes.bump.outputs.object.data.n == '3'", maxIterations=10),
            {
                "name": "bump",
                "templateType": "Resource",
                "resource": {
                    "action": "apply",
                    "manifest": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "counter"},
                        "data": {"n": "{{ string(iteration.index) }}"},
                    },
                },
            },
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert node_of(run, "l").outputs["iterations"] == 4
    assert sim.api.get("ConfigMap", "counter", "default")["data"] == {"n": "3"}


def test_while_and_interval_range_are_deterministic_per_seed() -> None:
    def timeline(seed: int) -> list[float | None]:
        s = make_sim()
        wf = workflow(
            [
                loop("l", "z", **{"while": "iteration.index < 5", "interval": {"min": "1s", "max": "1m"}}),
                suspend("z", "1s"),
            ],
            seed=seed,
        )
        run = s.submit(wf)
        s.run()
        assert run.phase.value == "Succeed", run.message
        assert node_of(run, "l").outputs["iterations"] == 5
        return [n.start_time for n in nodes_of(run, "z")]

    assert timeline(1) == timeline(1)
    assert timeline(1) != timeline(2)


def test_history_is_bounded(sim: Sim) -> None:
    run = sim.submit(workflow([loop("l", "z", count=500, historyLimit=5), suspend("z", "1s")]))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    loop_node = node_of(run, "l")
    assert loop_node.outputs == {"iterations": 500, "succeeded": 500, "failed": 0}
    assert len(loop_node.children) == 5 and len(run.nodes) == 6
    assert loop_node.children == sorted(loop_node.children, key=lambda c: int(c.rsplit("-", 1)[1]))
    assert run.nodes[loop_node.children[-1]].name == "z-500"


def test_history_drops_whole_subtrees(sim: Sim) -> None:
    wf = workflow(
        [
            loop("l", "s", count=20, historyLimit=2),
            {"name": "s", "templateType": "Serial", "children": ["a", "b"]},
            suspend("a", "1s"),
            cm_chaos("b", "1s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert len(run.nodes) == 1 + 2 * 3
    assert all(n.parent is None or n.parent in run.nodes for n in run.nodes.values())
    assert leftovers(sim) == []


def test_deadline_as_lifetime_stops_the_running_iteration(sim: Sim) -> None:
    wf = workflow(
        [
            loop("l", "s", deadline="1m", onDeadline="Succeed"),
            {"name": "s", "templateType": "Serial", "children": ["c", "z"]},
            cm_chaos("c", "10s"),
            suspend("z", "7s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(60)
    loop_node = node_of(run, "l")
    assert loop_node.reason == "DeadlineExceeded"
    assert loop_node.outputs["iterations"] == 4  # 3 x 17s, the 4th stopped at 60s
    assert all(n.phase is P.SUCCEED for n in run.nodes.values())
    assert leftovers(sim) == []


def test_loops_end_at_a_parents_lifetime_deadline(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "life",
                "templateType": "Parallel",
                "children": ["chaos-loop", "sleepy-loop"],
                "deadline": "10m",
                "onDeadline": "Succeed",
            },
            loop("chaos-loop", "inject", interval={"min": "5s", "max": "30s"}),
            net("inject", "20s"),
            loop("sleepy-loop", "nap"),
            suspend("nap", {"min": "10s", "max": "2m"}),
        ],
        seed=4,
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert took(run) == pytest.approx(600, abs=0.5)
    assert node_of(run, "chaos-loop").outputs["iterations"] > 10
    assert sim.chaos_objects() == []
    assert sim.created and all(v == 1 for v in sim.created.values())


def test_abort_mid_iteration_removes_chaos(sim: Sim) -> None:
    wf = workflow([loop("l", "inject", count=100), net("inject", "1m")])
    run = sim.submit(wf)
    sim.at(150, lambda: sim.manager.abort(run.key))
    sim.run()
    assert run.phase.value == "Failed"
    assert took(run) == pytest.approx(150, abs=0.5)
    assert node_of(run, "l").reason == "Aborted"
    assert sim.chaos_objects() == []


def test_failed_iteration_fails_the_loop_unless_continue_on_failure(sim: Sim) -> None:
    task = {
        "name": "t",
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": ["sh", "-c", "exit 1"]}},
    }
    run = sim.submit(workflow([loop("l", "t", count=3), task]))
    sim.run()
    assert run.phase.value == "Failed"
    assert node_of(run, "l").message.startswith("iteration 0 (t-1) failed: task exited with code 1")
    run2 = sim.submit(workflow([loop("l", "t", count=3, continueOnFailure=True), task], name="wf2"))
    sim.run()
    assert run2.phase.value == "Succeed", run2.message
    assert node_of(run2, "l").outputs == {"iterations": 3, "succeeded": 0, "failed": 3}
    assert node_of(run2, "l").message == "3 iteration(s): count reached (3 failed)"


def test_an_instant_unbounded_loop_fails_instead_of_spinning(
    sim: Sim, monkeypatch: pytest.MonkeyPatch
) -> None:
    import templates.loop

    monkeypatch.setattr(templates.loop, "MAX_INSTANT_ITERATIONS", 50)
    wf = workflow(
        [
            loop("l", "sw", deadline="1h"),
            {"name": "sw", "templateType": "Switch", "switch": {"cases": [{"when": "false", "target": "z"}]}},
            suspend("z", "1s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert node_of(run, "l").reason == "LoopSpinning"
    assert took(run) == 0


# --- crash and resume ------------------------------------------------------------------------------
def resumable_workflow() -> Workflow:
    return workflow(
        [
            loop("l", "s", count=4, interval={"min": "1s", "max": "20s"}, historyLimit=2),
            {"name": "s", "templateType": "Serial", "children": ["sw", "mark", "gate"]},
            {
                "name": "sw",
                "templateType": "Switch",
                "switch": {"weights": [{"target": "inject", "weight": 2}, {"target": "nap", "weight": 1}]},
            },
            net("inject", "15s"),
            suspend("nap", {"min": "5s", "max": "30s"}),
            {
                "name": "mark",
                "templateType": "Resource",
                "resource": {
                    "action": "apply",
                    "manifest": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "mark"},
                        "data": {"i": "{{ string(iteration.index) }}", "r": "{{ string(randInt(0, 999)) }}"},
                    },
                },
            },
            {
                "name": "gate",
                "templateType": "Wait",
                "wait": {
                    "objects": {"mark": {"apiVersion": "v1", "kind": "ConfigMap", "name": "mark"}},
                    "condition": "mark != null && mark.data.i == string(iteration.index)",
                    "timeout": "1m",
                },
            },
        ],
        seed=9,
    )


def _run_to_end(state: Path | None, crash_after: int | None = None) -> dict[str, Any] | None:
    opts = RunOptions(seed=9, state=str(state) if state else None, checkpoint_interval=0, progress=False)
    env = build_sim_env(opts, 9)
    env.world.load_world_file()
    run = env.manager.submit(resumable_workflow(), seed=9)
    if crash_after is not None:
        env.manager.run(max_events=crash_after)
        assert not run.phase.finished, "crash point after the end"
        return None  # "crash": nothing is written after the last checkpoint
    env.manager.run()
    return run.to_object()


def _resume(state: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    store = SQLiteStore(state)
    clock_at = store.get_meta("clock")
    snapshot = store.get_meta("sim")
    store.close()
    opts = RunOptions(seed=9, state=str(state), checkpoint_interval=0, progress=False)
    env = build_sim_env(opts, 9, clock_start=clock_at)
    env.world.restore(snapshot)
    assert env.store is not None
    (run,) = env.store.load_all()
    env.manager.adopt(run)
    env.manager.run()
    return run.to_object(), env.world.snapshot()


@pytest.mark.parametrize("crash_after", [3, 20, 45, 70, 85, 100])
def test_crash_then_resume_ends_as_an_uninterrupted_run(tmp_path: Path, crash_after: int) -> None:
    reference = _run_to_end(None)
    assert reference is not None and reference["status"]["phase"] == "Succeed", reference["status"]["message"]
    state = tmp_path / "run.sqlite"
    _run_to_end(state, crash_after)
    resumed, world = _resume(state)
    assert resumed == reference
    objects = world["default"]["api"]["objects"]
    assert not [o for o in objects if o["apiVersion"].startswith("chaos-mesh.org/")]
