"""Parameters and {{ }} rendering: -p overrides, template parameters and their scope, rendered fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import InputError, ValidationFailed
from engine.loader import load_workflow_file, load_workflows_text
from engine.phases import NodePhase
from engine.render import override_parameters, parse_parameter_arg
from engine.runtime import Node, WorkflowRun
from tests.helpers import workflow
from tests.sim.conftest import Sim, make_sim
from tests.sim.test_cli_run import chaosflow

P = NodePhase
ROOT = Path(__file__).resolve().parents[2]


def one(run: WorkflowRun, name: str) -> Node:
    (n,) = [n for n in run.nodes.values() if n.template == name and n.kind != "Lifecycle"]
    return n


def echo(name: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Task",
        "task": {"container": {"image": "busybox", "command": ["echo", text]}},
        **extra,
    }


def rel(run: WorkflowRun, t: float | None) -> float:
    assert t is not None and run.start_time is not None
    return round(t - run.start_time, 3)


# --- workflow parameters and -p ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arg", "expected"),
    [("n=3", ("n", 3)), ("on=true", ("on", True)), ("lat=10ms", ("lat", "10ms")), ("s=", ("s", "")),
     ("l=[1, 2]", ("l", [1, 2])), ("x=a=b", ("x", "a=b")), ("q='3'", ("q", "3"))],
)  # fmt: skip
def test_parameter_args_are_yaml_scalars(arg: str, expected: tuple[str, Any]) -> None:
    assert parse_parameter_arg(arg) == expected


def test_override_replaces_declared_parameters_and_rejects_unknown_ones() -> None:
    wf = workflow(
        [{"name": "z", "templateType": "Suspend", "duration": "1s"}], parameters=[{"name": "a", "value": 1}]
    )
    assert override_parameters(wf, {"a": 5}).spec.parameters[0].value == 5
    assert wf.spec.parameters[0].value == 1  # the original is left alone
    with pytest.raises(InputError, match=r"has no parameter 'b' \(declared: a\)"):
        override_parameters(wf, {"b": 2})


def test_cli_p_overrides_workflow_parameters() -> None:
    example = str(ROOT / "examples" / "parameters.yaml")
    default = chaosflow("run", example, "-o", "json")
    assert default.returncode == 0, default.stderr
    proc = chaosflow("run", example, "-o", "json", "-p", "latency=250ms", "-p", "rounds=1")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert {p["name"]: p["value"] for p in obj["spec"]["parameters"]}["rounds"] == 1
    delays = [
        n
        for n in obj["status"]["nodes"]
        if n["templateType"] == "NetworkChaos" and "rendered" in n.get("state", {})
    ]
    assert delays and all(
        d["state"]["rendered"]["networkChaos"]["delay"]["latency"] == "250ms" for d in delays
    )
    bad = chaosflow("run", example, "-p", "nope=1")
    assert bad.returncode == 2 and "has no parameter 'nope'" in bad.stderr and "Traceback" not in bad.stderr


# --- template parameters ---------------------------------------------------------------------------------
def test_template_parameters_are_visible_to_descendants_innermost_wins(sim: Sim) -> None:
    wf = workflow(
        [
            {
                "name": "outer",
                "templateType": "Serial",
                "children": ["inner", "plain"],
                "parameters": {"who": "outer", "n": "{{ params.base * 2 }}"},
            },
            {"name": "inner", "templateType": "Serial", "children": ["show"], "parameters": {"who": "inner"}},
            echo("show", "{{ inputs.parameters.who }} {{ inputs.parameters.n }}"),
            echo("plain", "{{ inputs.parameters.who }}"),
        ],
        parameters=[{"name": "base", "value": 21}],
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert one(run, "show").outputs["stdout"] == "inner 42"
    assert one(run, "plain").outputs["stdout"] == "outer"
    assert one(run, "outer").state["parameters"] == {"who": "outer", "n": 42}  # typed: a lone placeholder


def test_later_parameters_see_earlier_ones_and_values_are_kept_for_resume(sim: Sim) -> None:
    wf = workflow(
        [echo("t", "{{ inputs.parameters.b }}", parameters={"a": "{{ randInt(1, 1000) }}", "b": "x{{ inputs.parameters.a }}"})]
    )  # fmt: skip
    run = sim.submit(wf)
    sim.run()
    t = one(run, "t")
    a = t.state["parameters"]["a"]
    assert isinstance(a, int) and t.state["parameters"]["b"] == f"x{a}" and t.outputs["stdout"] == f"x{a}"


def test_parameters_are_not_visible_to_siblings(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["a", "b"]},
            {"name": "a", "templateType": "Suspend", "duration": "1s", "parameters": {"secret": 1}},
            echo("b", "{{ inputs.parameters.secret }}"),
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    b = one(run, "b")
    assert b.reason == "ExpressionError" and "rendering task.container" in b.message and "secret" in b.message


# --- rendered fields -------------------------------------------------------------------------------------
def test_suspend_duration_from_a_parameter(sim: Sim) -> None:
    wf = workflow(
        [{"name": "z", "templateType": "Suspend", "duration": "{{ inputs.parameters.wait }}", "parameters": {"wait": "90s"}}]
    )  # fmt: skip
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed" and rel(run, run.finish_time) == 90


def test_suspend_duration_expression_may_give_seconds_or_a_range(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["a", "b"]},
            {"name": "a", "templateType": "Suspend", "duration": "{{ params.n * 10 }}"},
            {"name": "b", "templateType": "Suspend", "duration": "{{ {'min': '1s', 'max': '2s'} }}"},
        ],
        parameters=[{"name": "n", "value": 3}],
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Succeed", run.message
    assert rel(run, one(run, "a").finish_time) == 30
    assert 1 <= one(run, "b").state["rendered"]["duration"] <= 2


def test_chaos_manifest_and_inline_spec_are_rendered(sim: Sim) -> None:
    seen: list[dict[str, Any]] = []
    wf = workflow(
        [
            {
                "name": "p",
                "templateType": "Parallel",
                "children": ["generic", "mesh"],
                "parameters": {"lat": "75ms"},
            },
            {
                "name": "generic",
                "templateType": "Chaos",
                "duration": "{{ params.hold }}",
                "chaos": {
                    "manifest": {
                        "apiVersion": "chaos-mesh.org/v1alpha1",
                        "kind": "PodChaos",
                        "spec": {
                            "action": "pod-failure",
                            "mode": "{{ params.mode }}",
                            "selector": {"labelSelectors": {"app": "web"}},
                        },
                    }
                },
            },
            {
                "name": "mesh",
                "templateType": "NetworkChaos",
                "duration": "20s",
                "networkChaos": {
                    "action": "delay",
                    "mode": "all",
                    "selector": {"labelSelectors": {"app": "web"}},
                    "delay": {"latency": "{{ inputs.parameters.lat }}"},
                },
            },
        ],
        parameters=[{"name": "hold", "value": "30s"}, {"name": "mode", "value": "one"}],
    )
    run = sim.submit(wf)
    sim.at(5, lambda: seen.extend(sim.chaos_objects()))
    sim.run()
    assert run.phase.value == "Succeed", run.message
    by_kind = {o["kind"]: o["spec"] for o in seen}
    assert by_kind["PodChaos"]["mode"] == "one"
    assert by_kind["NetworkChaos"]["delay"]["latency"] == "75ms"
    assert rel(run, one(run, "generic").finish_time) == pytest.approx(30.2, abs=0.01)
    assert sim.chaos_objects() == []


def test_rendering_error_fails_the_node_with_the_message_and_never_stalls(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "s", "templateType": "Serial", "children": ["bad", "never"]},
            {"name": "bad", "templateType": "Suspend", "duration": "{{ params.missing }}"},
            {"name": "never", "templateType": "Suspend", "duration": "1s"},
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    bad = one(run, "bad")
    assert bad.reason == "ExpressionError"
    assert bad.message.startswith("rendering duration:") and "missing" in bad.message
    assert not [n for n in run.nodes.values() if n.template == "never"]


def test_bad_duration_value_and_bad_parameter_fail_at_start(sim: Sim) -> None:
    wf = workflow(
        [
            {"name": "p", "templateType": "Parallel", "children": ["a", "b"]},
            {"name": "a", "templateType": "Suspend", "duration": "{{ 'soon' }}"},
            {"name": "b", "templateType": "Suspend", "duration": "1s", "parameters": {"x": "{{ 1 / 0 }}"}},
        ]
    )
    run = sim.submit(wf)
    sim.run()
    assert run.phase.value == "Failed"
    assert "invalid duration" in one(run, "a").message
    assert one(run, "b").message.startswith("parameter x:")


def test_validation_checks_parameter_names_and_placeholder_syntax() -> None:
    doc = """
apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata: {name: w}
spec:
  entry: t
  templates:
    - name: t
      templateType: Task
      parameters: {"bad-name": 1, ok: "{{ 1 + }}"}
      task: {container: {image: busybox, command: ["echo", "{{ unclosed"]}}
"""
    with pytest.raises(ValidationFailed) as e:
        load_workflows_text(doc, "w.yaml")
    text = str(e.value)
    assert "parameters.bad-name: parameter names must be identifiers" in text
    assert "parameters.ok:" in text
    assert "task.container.command[1]:" in text and "unclosed" in text


def test_parameters_example_runs_and_is_deterministic() -> None:
    def once() -> list[tuple[str, Any, Any]]:
        (wf,) = load_workflow_file(str(ROOT / "examples" / "parameters.yaml"))
        s = make_sim()
        r = s.submit(wf)
        s.run()
        assert r.phase.value == "Succeed", r.message
        assert s.chaos_objects() == []
        return [(n.name, n.state.get("parameters"), n.state.get("rendered")) for n in r.nodes.values()]

    assert once() == once()
