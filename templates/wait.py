"""Wait: hold until a CEL condition over sets of cluster objects holds (or a timeout passes).

``objects`` names the sets the condition reads: each is a kind in a cluster and namespace,
narrowed to one object (``name``; the variable is the object or ``null``) or to a label selector
(the variable is the list of matching objects, sorted by namespace/name; without name and selector
every object of the kind in the namespace). Fields are ``{{ }}``-rendered when the node starts.
The sets are kept current from watch events (``ObserveKind``), and the condition is evaluated on
every change of any of them: no polling. A condition that reads a field that does not exist yet
(or a field of an object that does not exist yet) does not hold yet; any other evaluation error
fails the node with the message. ``timeout`` fails the node, naming the condition and the last
values it saw.

| event \\ phase     | Init                          | Holding                                         |
|-------------------|-------------------------------|-------------------------------------------------|
| NodeCreated       | observe the sets -> Holding   | -                                               |
| NodeObjectChanged | -                             | condition holds: -> Succeed; error: -> Failed; else remember the values |
| NodeTimeout       | -                             | -> Failed                                       |

Abort / deadline end the wait at once (Succeed when the deadline is a lifetime).

Every change the wait sees (once every set has been listed) is also told live to the manager's
``observation_listeners`` (``Transition.observations``): one ``objectsChanged`` observation
``{objects: {var: object | null | [objects]}, holds}`` with the values the condition was evaluated
on (shared with the watch: listeners must not modify them). It changes nothing in the run, so a
Wait whose condition never holds (``"false"``) is a plain watcher for logs, stopped by its parent
(megatest's volume-checker logs the replicas' conditions from it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.duration import Duration, format_duration
from engine.expr import Expr, ExprError, check_syntax
from engine.phases import (
    Effect,
    Event,
    NotifyAt,
    Observation,
    ObservedLists,
    ObserveKind,
    StopRequest,
    Transition,
)
from engine.render import evaluate_bool, render
from templates.base import IGNORED, E, NodeMachine, P, finish, finish_stopped
from templates.loop import loop_context

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

#: environment names a set may not take
RESERVED = frozenset({"workflow", "params", "node", "nodes", "iteration", "object", "inputs"})
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SUMMARY_MAX = 600


class WaitObjects(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(default="default", description="Name of the cluster.")
    apiVersion: str = Field(description="apiVersion of the kind, e.g. v1 or apps/v1.")
    kind: str = Field(description="Kind of the objects, e.g. Pod.")
    namespace: str | None = Field(
        default=None, description='Namespace; default: the workflow\'s; "" = all namespaces.'
    )
    name: str | None = Field(default=None, description="One object: the variable is it, or null.")
    labelSelector: str | dict[str, Any] | None = Field(
        default=None,
        description="Label selector (string, or {matchLabels, matchExpressions}): the variable is "
        "the list of matching objects.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class WaitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    condition: str = Field(description="CEL over the named object sets (and the node environment).")
    objects: dict[str, WaitObjects] = Field(
        default_factory=dict, description="Variable name -> the objects it holds."
    )
    timeout: Duration | None = Field(
        default=None, description="Fail when the condition does not hold by then."
    )


def _spec(run: WorkflowRun, node: Node) -> WaitSpec:
    spec = run.template(node).wait
    assert spec is not None  # validated
    return spec


# --- shared with Resource ------------------------------------------------------------------------
def _not_yet(e: ExprError, src: str, env: dict[str, Any]) -> bool:
    if e.reason.startswith("no such key"):
        return True
    if e.reason.startswith("No such overload"):
        try:
            names = Expr(src).variables
        except ExprError:
            return False
        return any(n in env and env[n] is None for n in names)
    return False


def eval_condition(run: WorkflowRun, node: Node, src: str, extra: dict[str, Any]) -> tuple[bool, str | None]:
    """(holds, why not yet) — a missing field means "not yet"; other errors raise ExprError."""
    try:
        return evaluate_bool(run, node, src, extra), None
    except ExprError as e:
        if _not_yet(e, src, extra):
            return False, e.reason
        raise


def summarize(obj: Any) -> str:
    """A short description of an object (kind, name, phase, conditions) or a list of them."""
    if obj is None:
        return "null"
    if isinstance(obj, list):
        names = [summarize(o) for o in obj[:3]]
        more = f", ... ({len(obj)} in all)" if len(obj) > 3 else ""
        return f"[{'; '.join(names)}{more}]"
    if not isinstance(obj, dict):
        return repr(obj)[:_SUMMARY_MAX]
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    parts: list[str] = []
    status = obj.get("status")
    if isinstance(status, dict):
        if "phase" in status:
            parts.append(f"phase={status['phase']}")
        for c in status.get("conditions") or []:
            if isinstance(c, dict):
                parts.append(f"{c.get('type')}={c.get('status')}")
    if meta.get("deletionTimestamp"):
        parts.append("deleting")
    text = f"{obj.get('kind', 'object')} {ns}{meta.get('name', '?')}"
    if parts:
        text += f" ({', '.join(parts)})"
    return text[:_SUMMARY_MAX]


# --- the machine ---------------------------------------------------------------------------------
def _render_sets(run: WorkflowRun, node: Node, spec: WaitSpec) -> dict[str, dict[str, Any]]:
    """The observed sets with {{ }} rendered and defaults applied (stored in the node's state)."""
    from actors.sim.selectors import compile_label_selector

    extra = loop_context(run, node)
    out: dict[str, dict[str, Any]] = {}
    for var, o in spec.objects.items():
        d = render(run, node, o.model_dump(exclude_none=True), extra)
        ns = d.get("namespace")
        sel = d.get("labelSelector")
        if sel is not None and not isinstance(sel, str):
            sel = compile_label_selector(sel).text
        out[var] = {
            "cluster": str(d.get("cluster", "default")),
            "apiVersion": str(d["apiVersion"]),
            "kind": str(d["kind"]),
            "namespace": run.namespace if ns is None else (str(ns) or None),
            "name": None if d.get("name") is None else str(d["name"]),
            "labelSelector": sel,
        }
    return out


def _observes(sets: dict[str, dict[str, Any]]) -> list[Effect]:
    return [
        ObserveKind(
            s["cluster"], s["apiVersion"], s["kind"], s["namespace"], s["labelSelector"], s["name"], key=var
        )
        for var, s in sets.items()
    ]


def on_created(m: WaitMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    try:
        sets = _render_sets(run, node, spec)
    except ExprError as e:
        return finish(False, f"rendering wait.objects: {e}", "ExpressionError")
    except Exception as e:  # a selector that does not parse (BadRequestError)
        return finish(False, f"wait.objects: {e}", "InvalidSelector")
    state: dict[str, Any] = {"sets": sets}
    effects = _observes(sets)
    if spec.timeout is not None:
        state["timeoutAt"] = now + spec.timeout
        effects.append(NotifyAt(E.NODE_TIMEOUT, now + spec.timeout))
    return Transition(P.HOLDING, effects, state=state)


def on_changed(m: WaitMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if not isinstance(ev.payload, ObservedLists):
        return IGNORED
    spec = _spec(run, node)
    sets: dict[str, dict[str, Any]] = node.state.get("sets") or {}
    lists = ev.payload.lists
    if any(var not in lists for var in sets):
        return IGNORED  # not every set has been listed yet
    values: dict[str, Any] = {}
    for var, s in sets.items():
        items = lists[var]
        values[var] = (items[0] if items else None) if s.get("name") is not None else items
    extra = {**loop_context(run, node), **values}
    summary = "; ".join(f"{var}={summarize(v)}" for var, v in values.items())
    try:
        holds, pending = eval_condition(run, node, spec.condition, extra)
    except ExprError as e:
        tr = finish(False, f"wait.condition: {e}", "ExpressionError")
        tr.observations = (_observation(values, False),)
        return tr
    if holds:
        outputs = {
            "objects": {
                var: ([_ref(o) for o in v] if isinstance(v, list) else (None if v is None else _ref(v)))
                for var, v in values.items()
            }
        }
        tr = finish(True, f'condition "{spec.condition}" holds')
        tr.outputs = outputs
        tr.observations = (_observation(values, True),)
        return tr
    return Transition(
        None,
        [],
        state={"last": summary, "lastError": pending},
        observations=(_observation(values, False),),
    )


def _observation(values: dict[str, Any], holds: bool) -> Observation:
    """What the wait saw, for the manager's observation listeners (live logs)."""
    return Observation("objectsChanged", {"objects": values, "holds": holds})


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def on_timeout(m: WaitMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    at = st.get("timeoutAt")
    if at is None or now < at:
        return IGNORED
    spec = _spec(run, node)
    assert spec.timeout is not None
    last = st.get("last") or "no values received"
    msg = f'timeout {format_duration(spec.timeout)}: condition "{spec.condition}" did not hold (last: {last})'
    if st.get("lastError"):
        msg += f"; last evaluation: {st['lastError']}"
    return finish(False, msg, "Timeout")


class WaitMachine(NodeMachine):
    kind = "Wait"
    phases = frozenset({P.INIT, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.HOLDING, E.NODE_OBJECT_CHANGED): on_changed,
        (P.HOLDING, E.NODE_TIMEOUT): on_timeout,
    }

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        return finish_stopped(req)

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is P.HOLDING:
            st = node.state
            if st.get("timeoutAt") is not None:
                effects.append(NotifyAt(E.NODE_TIMEOUT, st["timeoutAt"]))
            effects += _observes(st.get("sets") or {})
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        from actors.sim.selectors import compile_label_selector

        spec = tmpl.wait
        if spec is None:
            return [(("wait",), "Wait template needs wait.condition and wait.objects")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        err = check_syntax(spec.condition)
        if err:
            issues.append((("wait", "condition"), err))
        if not spec.objects:
            issues.append((("wait", "objects"), "name at least one object set the condition reads"))
        for var, o in spec.objects.items():
            p: tuple[str | int, ...] = ("wait", "objects", var)
            if not _IDENT.match(var):
                issues.append((p, f'"{var}" is not a CEL identifier (letters, digits, _)'))
            elif var in RESERVED:
                issues.append((p, f'"{var}" is a reserved name ({", ".join(sorted(RESERVED))})'))
            if o.name is not None and o.labelSelector is not None:
                issues.append((p, "give name or labelSelector, not both"))
            sel = o.labelSelector
            if sel is not None and not (isinstance(sel, str) and "{{" in sel):
                try:
                    compile_label_selector(sel)
                except Exception as e:
                    issues.append(((*p, "labelSelector"), f"invalid label selector: {e}"))
        return issues
