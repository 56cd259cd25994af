"""Schedulers pick the template(s) to run next and the parent node of the new node(s).

As in the seed: ``EntryScheduler`` picks the workflow's entry; ``SerialScheduler`` the next one
child; ``ParallelScheduler`` all children (up to a parallelism limit); ``TaskScheduler`` is the
parallel one over the conditional branches whose CEL expression holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.expr import Expr, ExprError

if TYPE_CHECKING:
    from engine.model import ConditionalBranch
    from engine.runtime import Node, WorkflowRun


class EntryScheduler:
    @staticmethod
    def schedule_next(run: WorkflowRun) -> tuple[list[str], str | None]:
        if run.entry_node is not None:
            return [], None
        return [run.workflow.spec.entry], None


class SerialScheduler:
    @staticmethod
    def schedule_next(node: Node, run: WorkflowRun) -> list[str]:
        children = run.templates[node.template].children or []
        i = len(node.children)
        return [children[i]] if i < len(children) else []


class ParallelScheduler:
    @staticmethod
    def schedule_next(node: Node, run: WorkflowRun) -> list[str]:
        """Children not yet created, in order; with ``parallelism`` only as many as may run now."""
        tmpl = run.templates[node.template]
        children = tmpl.children or []
        rest = children[len(node.children) :]
        limit = tmpl.parallelism
        if limit and rest:
            free = limit - len(run.active_children(node))
            rest = rest[: max(0, free)]
        return list(rest)


class TaskScheduler:
    """Evaluates conditional branches over the task's result; the true ones run in parallel."""

    @staticmethod
    def evaluate(
        branches: list[ConditionalBranch], env: dict[str, Any]
    ) -> tuple[list[str], list[dict[str, str]]]:
        """Returns (targets, per-branch status). Raises ExprError on a broken expression."""
        targets: list[str] = []
        status: list[dict[str, str]] = []
        for b in branches:
            try:
                ok = Expr(b.expression).evaluate_bool(env)
            except ExprError as e:
                raise ExprError(f"branch to {b.target!r}: {e}") from None
            status.append({"target": b.target, "evaluationResult": "True" if ok else "False"})
            if ok:
                targets.append(b.target)
        return targets, status

    @staticmethod
    def schedule_next(node: Node, run: WorkflowRun) -> list[str]:
        selected: list[str] = node.state.get("selected", [])
        return selected[len(node.children) :]
