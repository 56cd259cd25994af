"""The expression environment of a node, and rendering of ``{{ expr }}`` in template fields.

Every expression (branch conditions, loop conditions, switch cases, resource conditions, ``{{ }}``
substitutions) is CEL evaluated against :func:`node_env` with the run's :class:`FunctionSet`
(``rand``, ``randInt``, ``pick``, ``shuffle``, ``uuid``, ``now`` — all drawn from the workflow's
seeded source, so a seed reproduces every value).

The environment:

``workflow``  ``{name, namespace, seed, parameters: {name: value}}``
``node``      ``{name, template}`` of the node evaluating
``nodes``     ``{template name: {name, phase, message, outputs}}`` — the latest finished node of
              each template so far (outputs of earlier steps)
``params``    the workflow parameters again, as a short form
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.expr import Expr, render_value

if TYPE_CHECKING:
    from engine.runtime import Node, WorkflowRun


def workflow_env(run: WorkflowRun) -> dict[str, Any]:
    params = {p.name: p.value for p in run.workflow.spec.parameters}
    return {"name": run.name, "namespace": run.namespace, "seed": run.seed, "parameters": params}


def node_env(run: WorkflowRun, node: Node, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    wf = workflow_env(run)
    nodes = {
        t: {"name": n.name, "phase": n.phase.value, "message": n.message, "outputs": n.outputs}
        for t, n in run.latest.items()
    }
    env: dict[str, Any] = {
        "workflow": wf,
        "params": wf["parameters"],
        "node": {"name": node.name, "template": node.template},
        "nodes": nodes,
    }
    if extra:
        env.update(extra)
    return env


def evaluate(run: WorkflowRun, node: Node, source: str, extra: dict[str, Any] | None = None) -> Any:
    """Evaluate a CEL expression for ``node``; raises ``ExprError`` with a clear message."""
    return Expr(source).evaluate(node_env(run, node, extra), run.functions)


def evaluate_bool(run: WorkflowRun, node: Node, source: str, extra: dict[str, Any] | None = None) -> bool:
    return Expr(source).evaluate_bool(node_env(run, node, extra), run.functions)


def render(run: WorkflowRun, node: Node, value: Any, extra: dict[str, Any] | None = None) -> Any:
    """Render every ``{{ expr }}`` in strings inside ``value`` (dicts, lists, scalars)."""
    return render_value(value, node_env(run, node, extra), run.functions)
