"""retryStrategy: attempts as child nodes of a Lifecycle node, policies, backoff on the virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from templates.lifecycle import failure_class
from tests.helpers import workflow
from tests.sim.conftest import Sim

P = NodePhase


def attempts(run: WorkflowRun, template: str) -> list[Node]:
    return [n for n in run.nodes.values() if n.template == template and n.kind != "Lifecycle"]


def lifecycle(run: WorkflowRun, template: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == template and n.kind == "Lifecycle"]
    return n


def task(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": ["sh", "-c", script]}},
        **extra,
    }


def rel(run: WorkflowRun, t: float | None) -> float:
    assert t is not None and run.start_time is not None
    return round(t - run.start_time, 3)


# Each sim pod takes 1s from creation to its end.
POD = 1.0


def test_retries_until_an_attempt_succeeds(sim: Sim) -> None:
    wf = workflow(
        [
            task(
                "t",
                "echo try {{ node.attempt }}; exit {{ node.attempt < 3 ? 1 : 0 }}",
                retryStrategy={"limit": 5},
            )
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    tries = attempts(run, "t")
    assert [(a.phase.value, a.state["attempt"]) for a in tries] == [
        ("Failed", 1),
        ("Failed", 2),
        ("Succeed", 3),
    ]
    assert len({a.name for a in tries}) == 3  # fresh nodes: fresh object names
    lc = lifecycle(run, "t")
    assert lc.phase is P.SUCCEED and lc.children == [a.name for a in tries]
    assert lc.outputs["stdout"] == "try 3"  # nodes.t.outputs = the successful attempt's
    assert sorted(p["metadata"]["name"] for p in sim.labelled("Pod")) == sorted(f"wf-{a.name}" for a in tries)


def test_limit_exhausted_fails_with_the_last_attempts_message(sim: Sim) -> None:
    run = sim.submit(workflow([task("t", "exit 7", retryStrategy={"limit": 2})]))
    sim.run()
    assert run.phase.value == "Failed"
    assert len(attempts(run, "t")) == 3
    assert lifecycle(run, "t").message == "failed after 3 attempts: task exited with code 7"
    assert lifecycle(run, "t").reason == "TaskFailed"


def test_backoff_delays_grow_by_factor_and_are_capped(sim: Sim) -> None:
    rs = {"limit": 4, "backoff": {"duration": "10s", "factor": 3, "cap": "1m"}}
    run = sim.submit(workflow([task("t", "exit 1", retryStrategy=rs)]))
    sim.run()
    starts = [rel(run, a.start_time) for a in attempts(run, "t")]
    # attempt ends 1s after it starts; delays 10s, 30s, 60s (90s capped), 60s
    assert starts == [0, 11, 42, 103, 164]
    assert rel(run, run.finish_time) == 165


def test_backoff_max_duration_stops_retrying(sim: Sim) -> None:
    rs = {
        "backoff": {"duration": "10s", "factor": 2, "maxDuration": "40s"}
    }  # no limit: maxDuration bounds it
    run = sim.submit(workflow([task("t", "exit 1", retryStrategy=rs)]))
    sim.run()
    # 0 -> 11 (+10) -> 32 (+20); the next would start at 33 + 40 = 73 > 40s after the first start
    assert [rel(run, a.start_time) for a in attempts(run, "t")] == [0, 11, 32]
    assert run.phase.value == "Failed"


def test_backoff_range_is_drawn_from_the_seeded_source(sim: Sim) -> None:
    def once(seed: int) -> list[float]:
        from tests.sim.conftest import make_sim

        s = make_sim()
        rs = {"limit": 3, "backoff": {"duration": {"min": "1s", "max": "1m"}}}
        r = s.submit(workflow([task("t", "exit 1", retryStrategy=rs)], seed=seed))
        s.run()
        return [rel(r, a.start_time) for a in attempts(r, "t")]

    assert once(1) == once(1)
    assert once(1) != once(2)


def vanishing_then_failing(policy: str) -> Any:
    return workflow([task("t", "sleep 30; exit 1", retryStrategy={"limit": 3, "retryPolicy": policy})])


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # attempt 1: its pod is deleted at 10s (an error); later attempts exit 1 (a failure)
        ("OnError", ["PodVanished", "TaskFailed"]),
        ("OnFailure", ["PodVanished"]),
        ("Always", ["PodVanished", "TaskFailed", "TaskFailed", "TaskFailed"]),
    ],
)
def test_retry_policy_distinguishes_errors_from_failures(sim: Sim, policy: str, expected: list[str]) -> None:
    run = sim.submit(vanishing_then_failing(policy))
    sim.at(10, lambda: sim.api.delete("Pod", "wf-t-1", "default", grace_period_seconds=0))
    sim.run()
    assert run.phase.value == "Failed"
    assert [a.reason for a in attempts(run, "t")] == expected


def test_onfailure_does_not_retry_infrastructure_errors_in_a_composite(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["t"], "retryStrategy": {"limit": 2}},
            task("t", "sleep 30"),
        ]
    )
    run = sim.submit(wf)
    sim.at(5, lambda: sim.api.delete("Pod", "wf-t-2", "default", grace_period_seconds=0))
    sim.run()
    (attempt,) = attempts(run, "s")
    assert attempt.reason == "ChildFailed"
    assert failure_class(run, attempt) == "error"  # the root cause is the vanished pod
    assert run.phase.value == "Failed"


def test_abort_during_backoff_wait_stops_at_once(sim: Sim) -> None:
    run = sim.submit(
        workflow([task("t", "exit 1", retryStrategy={"limit": 3, "backoff": {"duration": "1h"}})])
    )
    sim.at(100, lambda: sim.manager.abort(run.key, "stop"))
    sim.run()
    assert run.phase.value == "Failed" and run.message == "stop"
    assert rel(run, run.finish_time) == 100
    assert len(attempts(run, "t")) == 1
    assert lifecycle(run, "t").reason == "Aborted"


def test_abort_is_never_retried(sim: Sim) -> None:
    run = sim.submit(workflow([task("t", "sleep 60", retryStrategy={"limit": 3, "retryPolicy": "Always"})]))
    sim.at(10, lambda: sim.manager.abort(run.key, "stop"))
    sim.run()
    assert len(attempts(run, "t")) == 1 and run.phase.value == "Failed"


def test_retried_chaos_composite_leaves_no_chaos_behind(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["c", "t"], "retryStrategy": {"limit": 2}},
            {
                "name": "c",
                "templateType": "NetworkChaos",
                "duration": "30s",
                "networkChaos": {
                    "action": "delay",
                    "mode": "all",
                    "selector": {"labelSelectors": {"app": "web"}},
                },
            },
            task("t", "exit 1"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert len(attempts(run, "s")) == 3
    assert sorted(sim.created) == ["wf-c-2", "wf-c-5", "wf-c-8"]  # a fresh chaos object per attempt
    assert sim.chaos_objects() == []


def test_deadline_applies_to_each_attempt(sim: Sim) -> None:
    wf = workflow(
        [task("t", "sleep {{ node.attempt == 1 ? 100 : 5 }}", deadline="30s", retryStrategy={"limit": 1})]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    first, second = attempts(run, "t")
    assert first.reason == "DeadlineExceeded" and rel(run, first.finish_time) == 30
    assert second.phase is P.SUCCEED


def test_parameters_are_evaluated_once_fields_per_attempt(sim: Sim) -> None:
    wf = workflow(
        [
            task(
                "t",
                "echo {{ inputs.parameters.token }}-{{ randInt(0, 1000000) }}; exit {{ node.attempt < 2 ? 1 : 0 }}",
                parameters={"token": "{{ uuid() }}"},
                retryStrategy={"limit": 1},
            )
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    token = lifecycle(run, "t").state["parameters"]["token"]  # evaluated once, on the Lifecycle node
    cmds = [a.state["rendered"]["task.container"]["command"][2] for a in attempts(run, "t")]
    assert all(c.startswith(f"echo {token}-") for c in cmds)
    assert cmds[0] != cmds[1]  # each attempt rendered its own fields (a new randInt)


def test_retry_strategy_without_bound_is_rejected() -> None:
    from engine.errors import ValidationFailed
    from engine.loader import load_workflows_text

    doc = """
apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata: {name: w}
spec:
  entry: t
  templates:
    - {name: t, templateType: Suspend, duration: 1s, retryStrategy: {retryPolicy: Always}}
"""
    with pytest.raises(
        ValidationFailed, match=r"retryStrategy: retryStrategy needs limit or backoff.maxDuration"
    ):
        load_workflows_text(doc, "w.yaml")
