"""Switch: choose branches without a pod — by CEL cases, or by a weighted random draw.

``cases`` are evaluated in order over the node environment (plus ``iteration`` inside a Loop); the
first true case wins (``mode: first``, default) or every true case runs in parallel
(``mode: all``); ``default`` runs when no case holds. ``weights`` draws one target with
probability weight/total from the workflow's seeded source (deterministic per seed); a weight
without a target is the choice "run nothing". The chosen targets run as children; the choice is
in the outputs (``selected``, ``target``, and per-case results under ``cases``).

| event \\ phase           | Init                | Evaluating                                   | WaitingForSchedule | WaitingForChild |
|-------------------------|---------------------|----------------------------------------------|--------------------|-----------------|
| NodeCreated             | -> Evaluating, evaluate | -                                        | -                  | -               |
| NodeEvaluate            | -                   | choose -> WaitingForSchedule, pick; expression error -> Failed | - | -           |
| NodePickChildToSchedule | -                   | -                                            | create the chosen -> WaitingForChild; none -> Succeed | - |
| ChildNodeSucceed        | -                   | -                                            | -                  | all done: -> Succeed |
| ChildNodeFailed         | -                   | -                                            | -                  | stop the others, then -> Failed |

Abort / deadline stop the running branches (with cleanup) before the node finishes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.expr import ExprError, check_syntax
from engine.phases import Effect, Event, Notify, Transition
from engine.render import evaluate_bool
from engine.schedulers import TaskScheduler
from templates.base import IGNORED, CompositeMachine, E, P, child_failed_fail_fast, create_children, finish
from templates.loop import loop_context

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun


class SwitchCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    when: str = Field(description="CEL condition over the node environment.")
    target: str = Field(description="Template to run when the condition holds.")


class SwitchWeight(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(default=None, description="Template to run; none = run nothing.")
    weight: float = Field(ge=0, description="Relative weight (probability weight / sum of weights).")


class SwitchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["first", "all"] = Field(
        default="first", description="first: the first true case runs; all: every true case runs."
    )
    cases: list[SwitchCase] | None = Field(default=None, description="Conditional cases, in order.")
    default: str | None = Field(default=None, description="Template to run when no case holds.")
    weights: list[SwitchWeight] | None = Field(
        default=None, description="Weighted random choice of one target (instead of cases)."
    )


def _spec(run: WorkflowRun, node: Node) -> SwitchSpec:
    spec = run.template(node).switch
    assert spec is not None  # validated
    return spec


def draw_weighted(weights: list[SwitchWeight], r: float) -> int:
    """Index of the entry chosen by ``r`` in [0, 1) (weight 0 is never chosen)."""
    total = sum(w.weight for w in weights)
    x = r * total
    acc = 0.0
    last = 0
    for i, w in enumerate(weights):
        if w.weight <= 0:
            continue
        acc += w.weight
        last = i
        if x < acc:
            return i
    return last  # rounding at the very top of the range


def on_created(m: SwitchMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return Transition(P.EVALUATING, [Notify(E.NODE_EVALUATE)])


def on_evaluate(m: SwitchMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    outputs: dict[str, Any]
    if spec.weights is not None:
        i = draw_weighted(spec.weights, run.rng.random())
        target = spec.weights[i].target
        selected = [target] if target else []
        outputs = {"selected": selected, "target": target, "choice": i}
    else:
        extra = loop_context(run, node)
        selected = []
        results: list[dict[str, Any]] = []
        for i, case in enumerate(spec.cases or []):
            try:
                holds = evaluate_bool(run, node, case.when, extra)
            except ExprError as e:
                return finish(False, f"case {i} (target {case.target}): {e}", "ExpressionError")
            results.append({"target": case.target, "result": holds})
            if holds:
                selected.append(case.target)
                if spec.mode == "first":
                    break
        if not selected and spec.default is not None:
            selected = [spec.default]
        outputs = {"selected": selected, "target": selected[0] if selected else None, "cases": results}
    return Transition(
        P.WAITING_FOR_SCHEDULE,
        [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)],
        state={"selected": selected},
        outputs=outputs,
    )


def on_pick(m: SwitchMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    nxt = TaskScheduler.schedule_next(node, run)  # state["selected"] not yet created
    if not nxt:
        if run.active_children(node):
            return Transition(P.WAITING_FOR_CHILD)
        return finish(True)
    return Transition(P.WAITING_FOR_CHILD, [create_children(nxt)])


def on_child_succeed(m: SwitchMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    if run.active_children(node) or len(node.children) < len(node.state.get("selected", [])):
        return IGNORED
    return finish(True)


class SwitchMachine(CompositeMachine):
    kind = "Switch"
    phases = frozenset(
        {P.INIT, P.EVALUATING, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.SUCCEED, P.FAILED}
    )
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.EVALUATING, E.NODE_EVALUATE): on_evaluate,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_succeed,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): child_failed_fail_fast,
    }

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is P.EVALUATING:
            effects.append(Notify(E.NODE_EVALUATE))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        spec = tmpl.switch
        if spec is None:
            return [(("switch",), "Switch template needs switch.cases or switch.weights")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if (spec.cases is None) == (spec.weights is None):
            issues.append((("switch",), "Switch needs exactly one of cases and weights"))
        if spec.cases is not None:
            if not spec.cases:
                issues.append((("switch", "cases"), "at least one case is needed"))
            for i, case in enumerate(spec.cases):
                err = check_syntax(case.when)
                if err:
                    issues.append((("switch", "cases", i, "when"), err))
        if spec.weights is not None:
            if spec.default is not None:
                issues.append(
                    (("switch", "default"), "default is for cases; give weights a weight without target")
                )
            if spec.mode != "first":
                issues.append((("switch", "mode"), "mode applies to cases; a weighted draw picks one"))
            if not any(w.weight > 0 for w in spec.weights):
                issues.append((("switch", "weights"), "at least one weight must be greater than 0"))
        return issues
