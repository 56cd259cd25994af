"""Loop: run a child template again and again, one iteration (a child node) at a time.

The loop ends when ``count`` iterations ran, ``maxIterations`` is reached, ``while`` (CEL, before
each iteration) no longer holds, ``until`` (CEL, after each iteration) holds, an iteration fails
(unless ``continueOnFailure``), or when its deadline / an abort stops it — then the running
iteration is stopped with cleanup first. Iterations are spaced by ``interval`` (fixed or a range
drawn from the workflow's seeded source).

| event \\ phase           | Init                        | WaitingForSchedule                        | WaitingForChild | Holding |
|-------------------------|-----------------------------|-------------------------------------------|-----------------|---------|
| NodeCreated             | -> WaitingForSchedule, pick | -                                         | -               | -       |
| NodePickChildToSchedule | -                           | limit reached / while false: -> Succeed; while error: -> Failed; else create the iteration -> WaitingForChild | - | - |
| ChildNodeSucceed        | -                           | -                                         | count it; until holds / limit reached: -> Succeed; interval: -> Holding; else -> WaitingForSchedule, pick | - |
| ChildNodeFailed         | -                           | -                                         | continueOnFailure: as ChildNodeSucceed; else -> Failed | - |
| NodeHoldingAwake        | -                           | -                                         | -               | -> WaitingForSchedule, pick |

Abort / deadline: in WaitingForChild the iteration is stopped (``StopChildren``) and the loop
finishes once it ended (Succeed when the deadline is a lifetime, ``onDeadline: Succeed``); in the
other phases the loop finishes at once.

Expressions see the node environment plus ``iteration``: ``{index, number, succeeded, failed}``
(``index`` 0-based, ``number`` = index + 1; for ``while`` the iteration about to start, for
``until`` the one that just ended, whose node is also ``nodes.<child>``; ``succeeded``/``failed``
count the finished iterations). Templates running inside an iteration (a Switch, a Resource, a
Wait) see the ``iteration`` of their nearest enclosing Loop. (The name is not ``loop``: that is a
reserved word in CEL.)

History: at most ``historyLimit`` finished iteration nodes stay in the run (older ones and their
subtrees are dropped); the counts ``succeeded`` / ``failed`` stay in the node's state and outputs.

A loop with no count, until, while or maxIterations must be bounded by a deadline on itself, on
every template that contains it, or on the workflow (validation, :func:`unbounded_loop_issues`).
At run time, a loop without count/maxIterations whose iterations start at the same instant (they
take no time and there is no interval) is failed after ``MAX_INSTANT_ITERATIONS`` of them in a row
(``LoopSpinning``): on the virtual clock it would otherwise spin forever, and on a real clock it
would burn a CPU until its deadline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.duration import DurationSpec
from engine.expr import ExprError, check_syntax
from engine.phases import (
    DropChildren,
    Effect,
    Event,
    Notify,
    NotifyAt,
    StopChildren,
    StopReason,
    StopRequest,
    Transition,
)
from engine.render import evaluate_bool
from templates.base import (
    IGNORED,
    CompositeMachine,
    E,
    NodeMachine,
    P,
    create_children,
    finish,
    finish_stopped,
    stopping,
)

if TYPE_CHECKING:
    from engine.model import Template, Workflow
    from engine.runtime import Node, WorkflowRun

#: the expression variable describing the iteration (``loop`` is a reserved word in CEL)
ITERATION = "iteration"
#: iterations started less than INSTANT seconds after the previous one, in a row, after which a
#: loop without count / maxIterations fails (it would spin forever without time passing)
MAX_INSTANT_ITERATIONS = 10_000
INSTANT = 0.001


class LoopSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    child: str = Field(description="Name of the template each iteration runs.")
    count: int | None = Field(default=None, ge=0, description="Run exactly this many iterations.")
    until: str | None = Field(
        default=None, description="CEL, evaluated after each iteration: the loop ends when it holds."
    )
    while_: str | None = Field(
        default=None,
        alias="while",
        description="CEL, evaluated before each iteration: the loop ends when it does not hold.",
    )
    maxIterations: int | None = Field(default=None, ge=0, description="Upper bound on the iterations.")
    interval: DurationSpec | None = Field(
        default=None, description="Pause between iterations (fixed, or a {min, max} range)."
    )
    historyLimit: int = Field(
        default=100, ge=0, description="Finished iteration nodes kept in the status (older are dropped)."
    )
    continueOnFailure: bool = Field(
        default=False, description="A failed iteration is counted and the loop goes on (else it fails)."
    )


def _spec(run: WorkflowRun, node: Node) -> LoopSpec:
    spec = run.template(node).loop
    assert spec is not None  # validated
    return spec


def _counts(st: dict[str, Any]) -> dict[str, int]:
    return {
        "iterations": int(st.get("started", 0)),
        "succeeded": int(st.get("succeeded", 0)),
        "failed": int(st.get("failed", 0)),
    }


def _loop_vars(st: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "index": index,
        "number": index + 1,
        "succeeded": int(st.get("succeeded", 0)),
        "failed": int(st.get("failed", 0)),
    }


def loop_context(run: WorkflowRun, node: Node) -> dict[str, Any]:
    """``{"iteration": {...}}`` of the nearest Loop enclosing ``node`` (its running iteration), or {}."""
    parent = node.parent
    while parent is not None:
        p = run.nodes.get(parent)
        if p is None:
            return {}
        if p.kind == "Loop":
            st = p.state
            return {ITERATION: _loop_vars(st, int(st.get("index", 0)))}
        parent = p.parent
    return {}


def _limit_reached(spec: LoopSpec, started: int) -> bool:
    if spec.count is not None and started >= spec.count:
        return True
    return spec.maxIterations is not None and started >= spec.maxIterations


def _done_message(st: dict[str, Any], why: str) -> str:
    c = _counts(st)
    msg = f"{c['iterations']} iteration(s): {why}"
    if c["failed"]:
        msg += f" ({c['failed']} failed)"
    return msg


def on_created(m: LoopMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    state = {"started": 0, "succeeded": 0, "failed": 0}
    return Transition(
        P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)], state=state, outputs=_counts(state)
    )


def on_pick(m: LoopMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    st = node.state
    started = int(st.get("started", 0))
    if _limit_reached(spec, started):
        why = "count reached" if spec.count is not None and started >= spec.count else "maxIterations reached"
        return finish(True, _done_message(st, why))
    if spec.while_ is not None:
        extra = {**loop_context(run, node), ITERATION: _loop_vars(st, started)}
        try:
            holds = evaluate_bool(run, node, spec.while_, extra)
        except ExprError as e:
            return finish(False, f"loop.while: {e}", "ExpressionError")
        if not holds:
            return finish(True, _done_message(st, f'while "{spec.while_}" no longer holds'))
    last = st.get("lastPickAt")
    instant = int(st.get("instant", 0)) + 1 if last is not None and now - last < INSTANT else 0
    unbounded = spec.count is None and spec.maxIterations is None
    if unbounded and instant >= MAX_INSTANT_ITERATIONS:
        return finish(
            False,
            _done_message(
                st,
                f"the loop spins: {instant} iterations in a row took no time; "
                "give it an interval or a Suspend in the iteration",
            ),
            "LoopSpinning",
        )
    state = {"started": started + 1, "index": started, "lastPickAt": now, "instant": instant}
    return Transition(
        P.WAITING_FOR_CHILD,
        [create_children([spec.child])],
        state=state,
        outputs={**_counts({**st, **state})},
    )


def _prune(node: Node, run: WorkflowRun, limit: int) -> list[Effect]:
    finished = [c for c in node.children if c in run.nodes and run.nodes[c].phase.finished]
    if len(finished) <= limit:
        return []
    return [DropChildren(tuple(finished[: len(finished) - limit]))]


def on_child_done(m: LoopMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if not node.children:
        return IGNORED
    cur = run.nodes[node.children[-1]]
    if not cur.phase.finished:
        return IGNORED
    st = node.state
    spec = _spec(run, node)
    if st.get("counted") == cur.name:
        return IGNORED  # a duplicate event
    req = stopping(node)
    ok = cur.phase is P.SUCCEED
    state: dict[str, Any] = {
        "counted": cur.name,
        "succeeded": int(st.get("succeeded", 0)) + (1 if ok else 0),
        "failed": int(st.get("failed", 0)) + (0 if ok else 1),
    }
    merged = {**st, **state}
    outputs = _counts(merged)
    effects = _prune(node, run, spec.historyLimit)
    index = int(st.get("index", 0))

    def end(tr: Transition) -> Transition:
        tr.state = state
        tr.outputs = outputs
        tr.effects.extend(effects)
        return tr

    if req is not None:  # the iteration ended because the loop is stopping
        stopped = finish_stopped(req)
        stopped.message = _done_message(merged, req.message)
        return end(stopped)
    if not ok and not spec.continueOnFailure:
        msg = f"iteration {index} ({cur.name}) failed"
        if cur.message:
            msg += f": {cur.message}"
        return end(finish(False, msg, StopReason.CHILD_FAILED.value))
    if spec.until is not None:
        extra = {ITERATION: _loop_vars(merged, index)}
        try:
            holds = evaluate_bool(run, node, spec.until, extra)
        except ExprError as e:
            return end(finish(False, f"loop.until: {e}", "ExpressionError"))
        if holds:
            return end(finish(True, _done_message(merged, f'until "{spec.until}" holds')))
    started = int(st.get("started", 0))
    if _limit_reached(spec, started):
        why = "count reached" if spec.count is not None and started >= spec.count else "maxIterations reached"
        return end(finish(True, _done_message(merged, why)))
    if spec.interval is not None:
        at = now + run.draw(spec.interval)
        state["nextAt"] = at
        return end(Transition(P.HOLDING, [NotifyAt(E.NODE_HOLDING_AWAKE, at)]))
    return end(Transition(P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]))


def on_awake(m: LoopMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if now < node.state.get("nextAt", now):
        return IGNORED  # a stale timer
    return Transition(P.WAITING_FOR_SCHEDULE, [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)])


class LoopMachine(CompositeMachine):
    kind = "Loop"
    phases = frozenset({P.INIT, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_done,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): on_child_done,
        (P.HOLDING, E.NODE_HOLDING_AWAKE): on_awake,
    }

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        tr = super().stop(node, req, run, now)
        if tr.phase is P.SUCCEED or tr.phase is P.FAILED:
            tr.message = _done_message(node.state, req.message)
        return tr

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = NodeMachine.resume(self, node, run, now)
        st = node.state
        if node.phase is P.WAITING_FOR_SCHEDULE:
            effects.append(Notify(E.NODE_PICK_CHILD_TO_SCHEDULE))
        elif node.phase is P.HOLDING:
            effects.append(NotifyAt(E.NODE_HOLDING_AWAKE, st.get("nextAt", now)))
        elif node.phase is P.WAITING_FOR_CHILD:
            req = stopping(node)
            if req is not None and run.active_children(node):
                effects.append(StopChildren(StopRequest(StopReason.PARENT_STOPPED, req.message, req.succeed)))
            if node.children and run.nodes[node.children[-1]].phase.finished:
                last = node.children[-1]
                ev = E.CHILD_NODE_SUCCEED if run.nodes[last].phase is P.SUCCEED else E.CHILD_NODE_FAILED
                effects.append(Notify(ev, payload={"child": last}))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        spec = tmpl.loop
        if spec is None:
            return [(("loop",), "Loop template needs loop.child")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        for field, src in (("until", spec.until), ("while", spec.while_)):
            if src is not None:
                err = check_syntax(src)
                if err:
                    issues.append((("loop", field), err))
        return issues


def _bounded(spec: LoopSpec) -> bool:
    return (
        spec.count is not None
        or spec.maxIterations is not None
        or spec.until is not None
        or spec.while_ is not None
    )


def unbounded_loop_issues(wf: Workflow) -> list[tuple[tuple[str | int, ...], str]]:
    """Loops that can never end: no count/until/while/maxIterations and no deadline on the loop,
    on every template on some path from the entry to it, or on the workflow. (Exit handlers are
    not followed: one whose template sets no deadline runs under the workflow's onExitDeadline.)

    Returns (path from the document root, message) pairs.
    """
    from engine.validate import reachable_without_deadline

    templates = wf.template_map()
    index = {t.name: i for i, t in enumerate(wf.spec.templates)}
    # exit handlers are bounded by the workflow's onExitDeadline when they set no deadline
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for name in reachable_without_deadline(wf, follow_exit_handlers=False):
        t = templates[name]
        if t.templateType != "Loop" or t.loop is None or _bounded(t.loop):
            continue
        issues.append(
            (
                ("spec", "templates", index[name], "loop"),
                f'Loop "{name}" can never end: give it count, until, while or maxIterations, or a deadline '
                "(on the loop, on every template that contains it, or on the workflow; "
                "onDeadline: Succeed makes the deadline a lifetime)",
            )
        )
    return issues
