"""Shared test helpers: build workflows and runs from compact dicts."""

from __future__ import annotations

from typing import Any

from engine.model import Workflow
from engine.runtime import Node, WorkflowRun


def workflow(
    templates: list[dict[str, Any]], entry: str | None = None, name: str = "wf", **spec: Any
) -> Workflow:
    return Workflow.model_validate(
        {
            "apiVersion": "chaosflow.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"entry": entry or templates[0]["name"], "templates": templates, **spec},
        }
    )


def run_with_node(
    templates: list[dict[str, Any]],
    node_template: str,
    phase: str = "Init",
    state: dict[str, Any] | None = None,
) -> tuple[WorkflowRun, Node]:
    run = WorkflowRun(workflow(templates))
    from engine.phases import NodePhase

    tmpl = run.templates[node_template]
    node = Node(
        f"{node_template}-0",
        node_template,
        tmpl.templateType,
        None,
        NodePhase(phase),
        state=dict(state or {}),
    )
    run.nodes[node.name] = node
    run.node_counter = 1
    return run, node


def add_child(run: WorkflowRun, parent: Node, template: str, phase: str) -> Node:
    from engine.phases import NodePhase

    tmpl = run.templates[template]
    child = Node(run.new_node_name(template), template, tmpl.templateType, parent.name, NodePhase(phase))
    run.nodes[child.name] = child
    parent.children.append(child.name)
    return child


def by_template(run: WorkflowRun, name: str) -> list[Node]:
    """The nodes of one template, in creation order."""
    return [n for n in run.nodes.values() if n.template == name]


def took(run: WorkflowRun) -> float:
    """The run's duration on its clock."""
    assert run.start_time is not None and run.finish_time is not None
    return run.finish_time - run.start_time


def net(name: str, duration: Any = "20s", **extra: Any) -> dict[str, Any]:
    """A NetworkChaos template against the default world's app=web pods."""
    return {
        "name": name,
        "templateType": "NetworkChaos",
        "duration": duration,
        "networkChaos": {
            "action": "delay",
            "mode": "all",
            "selector": {"labelSelectors": {"app": "web"}},
            "delay": {"latency": "10ms"},
        },
        **extra,
    }


def suspend(name: str, duration: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "templateType": "Suspend", "duration": duration, **extra}
