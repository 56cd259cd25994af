"""onExit handlers (workflow and template level), stop vs terminate, on the sim with the virtual clock."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from engine.phases import NodePhase
from engine.runtime import Node, WorkflowRun
from tests.helpers import by_template, net, suspend, workflow
from tests.sim.conftest import Sim

P = NodePhase
ROOT = Path(__file__).resolve().parents[2]


def one(run: WorkflowRun, name: str) -> Node:
    (n,) = by_template(run, name)
    return n


def echo(name: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": ["echo", text]}},
        **extra,
    }


def fail(name: str, code: int = 3, **extra: Any) -> dict[str, Any]:
    cmd = ["sh", "-c", f"exit {code}"]
    return {
        "name": name,
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": cmd}},
        **extra,
    }


# --- workflow-level onExit -------------------------------------------------------------------------
def test_workflow_on_exit_runs_after_success_and_sees_the_status(sim: Sim) -> None:
    wf = workflow(
        [suspend("main", "10s"), echo("bye", "{{ workflow.status }}/{{ node.status }}")], onExit="bye"
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    bye = one(run, "bye")
    assert run.exit_node == bye.name and bye.parent is None
    assert bye.state["exitFor"] == "" and bye.to_status()["exitHandler"] is True
    assert bye.outputs["stdout"] == "Succeed/Succeed"
    assert bye.start_time == 10 + run.start_time  # type: ignore[operator]  # right after the main tree
    st = run.status().model_dump()
    assert st["exitNode"] == bye.name


def test_workflow_on_exit_runs_after_failure_and_keeps_the_original_message(sim: Sim) -> None:
    wf = workflow([fail("main"), echo("bye", "{{ workflow.status }}: {{ workflow.message }}")], onExit="bye")
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert run.message == "task exited with code 3"
    assert one(run, "bye").outputs["stdout"] == "Failed: task exited with code 3"


def test_failing_exit_handler_fails_a_successful_workflow(sim: Sim) -> None:
    run = sim.submit(workflow([suspend("main", "1s"), fail("bye", 2)], onExit="bye"))
    sim.run()
    assert run.phase.value == "Failed"
    assert one(run, "main").phase is P.SUCCEED  # the original outcome stays visible
    assert run.message == "exit handler bye-1 failed: task exited with code 2"


def test_failing_exit_handler_after_failure_keeps_both_messages(sim: Sim) -> None:
    run = sim.submit(workflow([fail("main", 3), fail("bye", 2)], onExit="bye"))
    sim.run()
    assert run.phase.value == "Failed"
    assert run.message == "task exited with code 3; exit handler bye-1 failed: task exited with code 2"


# --- template-level onExit ---------------------------------------------------------------------------
def test_template_exit_handlers_run_innermost_first_then_the_workflows(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "outer", "templateType": "Serial", "children": ["inner"], "onExit": "outer-exit"},
            {"name": "inner", "templateType": "Serial", "children": ["work"], "onExit": "inner-exit"},
            suspend("work", "10s"),
            suspend("inner-exit", "1s"),
            suspend("outer-exit", "2s"),
            suspend("wf-exit", "3s"),
        ],
        onExit="wf-exit",
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    t0 = run.start_time
    assert t0 is not None
    starts = {t: one(run, t).start_time - t0 for t in ("work", "inner-exit", "outer-exit", "wf-exit")}  # type: ignore[operator]
    assert starts == {"work": 0, "inner-exit": 10, "outer-exit": 11, "wf-exit": 13}
    assert run.finish_time - t0 == 16  # type: ignore[operator]
    # the handler is a child of the Lifecycle node of the template it belongs to
    inner = one(run, "inner-exit")
    owner = run.nodes[inner.parent or ""]
    assert owner.kind == "Lifecycle" and owner.template == "inner"


def test_template_exit_handler_sees_the_outcome_as_node_status(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["guarded"]},
            fail("guarded", 5, onExit="report"),
            echo("report", "{{ node.status }} {{ node.reason }}: {{ node.message }}"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert one(run, "report").outputs["stdout"] == "Failed TaskFailed: task exited with code 5"
    (lifecycle,) = [n for n in by_template(run, "guarded") if n.kind == "Lifecycle"]
    assert lifecycle.message == "task exited with code 5"
    assert lifecycle.outputs["exitCode"] == 5  # nodes.guarded.outputs after the node ended


def test_template_exit_handler_failure_fails_the_node_and_keeps_its_outcome_first(sim: Sim) -> None:
    wf = workflow([fail("main", 1, onExit="bye"), fail("bye", 2)])
    run = sim.submit(wf)
    sim.run()
    (lc,) = [n for n in by_template(run, "main") if n.kind == "Lifecycle"]
    assert lc.phase is P.FAILED
    assert lc.message == "task exited with code 1; exit handler bye-2 failed: task exited with code 2"
    assert lc.reason == "TaskFailed"


def test_exit_handler_runs_after_a_template_deadline(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "main",
                "templateType": "Serial",
                "children": ["c"],
                "deadline": "30s",
                "onExit": "cleanup",
            },
            net("c", "1h"),
            suspend("cleanup", "5s"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert run.message == "deadline 30s exceeded"
    cleanup = one(run, "cleanup")
    assert cleanup.phase is P.SUCCEED
    assert cleanup.start_time - run.start_time >= 30  # type: ignore[operator]
    assert sim.chaos_objects() == []


# --- deadline, stop, terminate ---------------------------------------------------------------------------
def test_workflow_deadline_does_not_skip_exit_handlers(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["c"], "onExit": "t-exit"},
            net("c", "1h"),
            suspend("t-exit", "2m"),  # longer than what is left of the deadline: still runs to its end
            suspend("wf-exit", "1m"),
        ],
        deadline="5m",
        onExit="wf-exit",
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert run.message == "workflow deadline 300s exceeded"
    assert one(run, "t-exit").phase is P.SUCCEED and one(run, "wf-exit").phase is P.SUCCEED
    assert run.finish_time - run.start_time == pytest.approx(300 + 0.1 + 120 + 60, abs=0.01)  # type: ignore[operator]
    assert sim.chaos_objects() == []


def test_exit_handlers_have_their_own_deadline(sim: Sim) -> None:
    wf = workflow(
        [suspend("main", "1s"), net("slow-cleanup", "1h")], onExit="slow-cleanup", onExitDeadline="10m"
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    handler = one(run, "slow-cleanup")
    assert handler.reason == "DeadlineExceeded" and handler.message == "deadline 600s exceeded"
    assert run.message.startswith("exit handler slow-cleanup-1 failed: deadline 600s exceeded")
    assert sim.chaos_objects() == []  # the handler's chaos was removed at its deadline


def stop_scenario() -> Any:
    return workflow(
        [
            {"name": "main", "templateType": "Parallel", "children": ["a", "b"]},
            {"name": "a", "templateType": "Serial", "children": ["c"], "onExit": "a-exit"},
            net("c", "1h"),
            suspend("b", "1h", onExit="b-exit"),
            suspend("a-exit", "10s"),
            suspend("b-exit", "20s"),
            echo("wf-exit", "{{ workflow.status }}: {{ workflow.message }}"),
        ],
        onExit="wf-exit",
    )


def test_stop_runs_cleanup_and_exit_handlers(sim: Sim) -> None:
    run = sim.submit(stop_scenario())
    sim.at(60, lambda: sim.manager.abort(run.key, "stopped by user"))
    sim.run()
    assert run.phase.value == "Failed" and run.message == "stopped by user"
    for t in ("a-exit", "b-exit"):
        h = one(run, t)
        assert h.phase is P.SUCCEED and h.start_time - run.start_time >= 60  # type: ignore[operator]
    assert one(run, "wf-exit").outputs["stdout"] == "Failed: stopped by user"
    assert one(run, "wf-exit").start_time - run.start_time >= 80  # type: ignore[operator]  # after b-exit
    assert sim.chaos_objects() == []


def test_terminate_skips_exit_handlers_but_removes_chaos(sim: Sim) -> None:
    run = sim.submit(stop_scenario())
    sim.at(60, lambda: sim.manager.abort(run.key, "terminated", terminate=True))
    sim.run()
    assert run.phase.value == "Failed" and run.message == "terminated"
    assert (
        not by_template(run, "a-exit") and not by_template(run, "b-exit") and not by_template(run, "wf-exit")
    )
    assert run.exit_node is None
    assert run.finish_time - run.start_time == pytest.approx(60.1, abs=0.01)  # type: ignore[operator]
    assert sim.chaos_objects() == []
    assert all(n.phase.finished for n in run.nodes.values())


def test_terminate_after_stop_terminates_running_exit_handlers(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "main", "templateType": "Serial", "children": ["c"], "onExit": "cleanup"},
            net("c", "1h"),
            net("cleanup", "1h"),  # an exit handler that injects chaos and hangs on to it
            suspend("wf-exit", "1m"),
        ],
        onExit="wf-exit",
    )
    run = sim.submit(wf)
    sim.at(10, lambda: sim.manager.abort(run.key, "stop"))
    sim.at(100, lambda: sim.manager.abort(run.key, "terminate", terminate=True))
    sim.run()
    assert run.phase.value == "Failed"
    cleanup = one(run, "cleanup")
    assert cleanup.phase is P.FAILED and cleanup.reason == "ParentStopped"
    assert run.finish_time - run.start_time == pytest.approx(100.1, abs=0.01)  # type: ignore[operator]
    assert not by_template(run, "wf-exit")
    assert sim.chaos_objects() == []


def test_terminate_while_the_workflow_exit_handler_runs_stops_it(sim: Sim) -> None:
    run = sim.submit(workflow([suspend("main", "1s"), net("wf-exit", "1h")], onExit="wf-exit"))
    sim.at(30, lambda: sim.manager.abort(run.key, "stop"))  # a stop lets the exit handler run on
    sim.at(60, lambda: sim.manager.abort(run.key, "terminate", terminate=True))
    sim.run()
    assert run.phase.value == "Failed"
    h = one(run, "wf-exit")
    assert h.phase is P.FAILED and h.finish_time - run.start_time == pytest.approx(60.1, abs=0.01)  # type: ignore[operator]
    # the stop did not interrupt the exit handler; the terminate did
    assert run.message == "exit handler wf-exit-1 failed: terminate"
    assert sim.chaos_objects() == []


# --- the example, crash and resume ------------------------------------------------------------------------
def test_onexit_retry_example_succeeds() -> None:
    from engine.loader import load_workflow_file
    from tests.sim.conftest import make_sim

    (wf,) = load_workflow_file(str(ROOT / "examples" / "onexit-retry.yaml"))
    s = make_sim()
    run = s.submit(wf)
    s.run()
    assert run.phase.value == "Succeed", run.message
    assert s.chaos_objects() == []
    assert [n for n in run.nodes.values() if "exitFor" in n.state]


@functools.cache
def _uninterrupted(example: str) -> Any:
    from tests.sim.test_cli_run import chaosflow

    reference = chaosflow("run", example, "-o", "json")
    assert reference.returncode == 0, reference.stderr
    return json.loads(reference.stdout)


@pytest.mark.parametrize("crash_after", [15, 40, 63])
def test_crash_during_retries_and_exit_handlers_then_resume(tmp_path: Path, crash_after: int) -> None:
    from tests.sim.test_cli_run import chaosflow

    example = str(ROOT / "examples" / "onexit-retry.yaml")
    reference = _uninterrupted(example)
    state = tmp_path / "run.sqlite"
    crashed = chaosflow(
        "run", example, "-o", "json", "--state", str(state), "--checkpoint", "0",
        env={"CHAOSFLOW_CRASH_AFTER_EVENTS": str(crash_after)},
    )  # fmt: skip
    assert crashed.returncode == 137, crashed.stderr
    resumed = chaosflow("resume", str(state), "-o", "json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == reference
