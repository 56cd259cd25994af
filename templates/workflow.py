"""Workflow: start a child workflow — a separate WorkflowRun in the same WorkflowManager.

.. code-block:: yaml

    templateType: Workflow
    workflow:
      from: volume-main          # entry template; the child gets this workflow's templates
      # spec: {entry, templates, parameters, deadline, ...}   # ... or an inline WorkflowSpec
      parameters: {rv: "{{ 'rv-' + string(randInt(1, 1000)) }}"}   # values or {{ expr }}
      name: vol                  # name prefix (default: the parent workflow's name)
      labels: {role: volume}
      wait: true                 # false: detach (the node succeeds once the child is started)
      stopWithParent: true       # detached: abort the child when the parent workflow is stopped

The child's name is deterministic, ``<prefix>-<node>`` (DNS-1123, hashed beyond 63 characters),
so a restarted engine finds it instead of starting it twice. It carries the labels
``chaosflow.io/parent-workflow`` and ``chaosflow.io/parent-node`` plus the user's labels, runs in
the parent's namespace with a seed drawn from the parent's seeded source (unless an inline spec
sets one), and inherits the parent's workflow parameters (``from``) with ``parameters`` applied on
top (rendered in the parent node's expression environment).

- ``wait: true``: the node ends with the child's phase. Abort or deadline of the node (or of an
  ancestor, or of the workflow) aborts the child — with cleanup, or without it when terminating —
  and the node ends once the child has ended (so its chaos is gone by then).
- ``wait: false``: the node succeeds as soon as the child is started. With ``stopWithParent``
  (default) the child is aborted when the parent workflow is aborted, exceeds its deadline or
  fails; a parent that succeeds leaves detached children running.

CEL gets ``countWorkflows(selector, phase?)``: the number of workflows in the evaluating
workflow's namespace whose labels match ``selector`` (a map), optionally only in ``phase`` (a
phase name or a list of them), e.g. ``countWorkflows({"chaosflow.io/parent-workflow":
workflow.name, "role": "volume"}, "Running")``.

| event \\ phase          | Init                               | Running |
|------------------------|------------------------------------|---------|
| NodeCreated            | render; submit the child -> Running | -      |
| NodeWorkflowSubmitted  | -                                  | detached: -> Succeed; child already finished: -> its phase; stopping: abort the child |
| NodeWorkflowFinished   | -                                  | -> Succeed / Failed as the child (stopping: as the stop request) |
| NodeActionFailed       | -                                  | submission failed -> Failed |
| NodeRetry              | -                                  | submit again (resume: finds the child by name) |
"""

from __future__ import annotations

import copy
import logging
from itertools import islice
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.naming import object_name
from engine.phases import (
    AbortWorkflow,
    Effect,
    Event,
    EventType,
    Notify,
    StopRequest,
    SubmitWorkflow,
    Transition,
    WorkflowPhase,
)
from engine.render import RENDERED_FIELDS, rendered
from templates.base import IGNORED, E, NodeMachine, P, finish, finish_stopped, stop_state, stopping

if TYPE_CHECKING:
    from engine.manager import WorkflowManager
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

log = logging.getLogger("chaosflow.engine")

LABEL_PARENT_WORKFLOW = "chaosflow.io/parent-workflow"
LABEL_PARENT_NODE = "chaosflow.io/parent-node"
ANNOTATION_STOP_WITH_PARENT = "chaosflow.io/stop-with-parent"


class ChildWorkflowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    from_: str | None = Field(
        default=None,
        alias="from",
        description="Entry template of the child; the child gets this workflow's templates.",
    )
    spec: dict[str, Any] | None = Field(
        default=None,
        description="An inline WorkflowSpec for the child (instead of from).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Workflow parameters of the child: values or {{ expr }} (rendered in the parent).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    name: str | None = Field(
        default=None, description="Name prefix of the child (default: the parent workflow's name)."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Labels of the child workflow.")
    wait: bool = Field(default=True, description="Wait for the child and end with its phase.")
    stopWithParent: bool = Field(
        default=True, description="Detached: abort the child when the parent workflow is stopped."
    )


#: rendered when the node starts (engine.render.start_node), in the parent node's environment; an
#: inline spec is not rendered here: its expressions belong to the child
RENDERED_FIELDS["Workflow"] = ("workflow.parameters", "workflow.labels", "workflow.name")


# --- building the child ---------------------------------------------------------------------------
def _cw(run: WorkflowRun, node: Node) -> ChildWorkflowSpec:
    cw = run.template(node).workflow
    assert cw is not None  # validated
    return cw


def reachable_templates(run: WorkflowRun, entry: str) -> set[str]:
    from engine.validate import _targets_of_model

    seen: set[str] = set()
    stack = [entry]
    while stack:
        name = stack.pop()
        t = run.templates.get(name)
        if t is None or name in seen:
            continue
        seen.add(name)
        stack.extend(target for _, target in _targets_of_model(t))
    return seen


def _merge_parameters(base: list[dict[str, Any]], given: dict[str, Any]) -> list[dict[str, Any]]:
    out = [dict(p) for p in base]
    for name, value in given.items():
        for p in out:
            if p.get("name") == name:
                p["value"] = value
                break
        else:
            out.append({"name": name, "value": value})
    return out


def child_document(run: WorkflowRun, node: Node, st: dict[str, Any]) -> dict[str, Any]:
    """The child's Workflow document (pure: from the template and the node's rendered state)."""
    cw = _cw(run, node)
    params: dict[str, Any] = st.get("parameters") or {}
    if cw.from_ is not None:
        keep = reachable_templates(run, cw.from_)
        spec: dict[str, Any] = {
            "entry": cw.from_,
            "templates": [
                t.model_dump(mode="json", exclude_none=True, by_alias=True)
                for t in run.workflow.spec.templates
                if t.name in keep
            ],
        }
        base = [p.model_dump(mode="json", exclude_none=True) for p in run.workflow.spec.parameters]
    else:
        spec = copy.deepcopy(cw.spec or {})
        base = list(spec.get("parameters") or [])
    spec["parameters"] = _merge_parameters(base, params)
    labels = {
        **(st.get("labels") or {}),
        LABEL_PARENT_WORKFLOW: run.name,
        LABEL_PARENT_NODE: node.name,
    }
    return {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": st["childName"],
            "namespace": run.namespace,
            "labels": labels,
            "annotations": {ANNOTATION_STOP_WITH_PARENT: "true" if cw.stopWithParent or cw.wait else "false"},
        },
        "spec": spec,
    }


def _submit(run: WorkflowRun, node: Node, st: dict[str, Any]) -> SubmitWorkflow:
    return SubmitWorkflow(child_document(run, node, st), seed=st.get("seed"))


# --- handlers ----------------------------------------------------------------------------------------
def on_created(m: WorkflowMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    cw = _cw(run, node)
    params = dict(rendered(node, "workflow.parameters", cw.parameters))
    labels = {str(k): str(v) for k, v in rendered(node, "workflow.labels", cw.labels).items()}
    prefix = str(rendered(node, "workflow.name", cw.name) or run.name)
    name = object_name(prefix.rstrip("-"), node.name)
    inline_seed = (cw.spec or {}).get("seed") if cw.spec is not None else None
    seed = None if inline_seed is not None else run.rng.getrandbits(31)
    st: dict[str, Any] = {
        "child": f"{run.namespace}/{name}",
        "childName": name,
        "seed": seed,
        "parameters": params,
        "labels": labels,
        "submitted": False,
    }
    return Transition(
        P.RUNNING,
        [_submit(run, node, st)],
        state=st,
        outputs={"workflow": name, "namespace": run.namespace},
    )


def _child_outcome(node: Node, payload: dict[str, Any]) -> Transition:
    phase = payload.get("phase")
    key = payload.get("workflow") or node.state.get("child")
    req = stopping(node)
    if req is not None:
        return finish_stopped(req)
    if phase == WorkflowPhase.SUCCEED.value:
        return finish(True, f"child workflow {key} succeeded")
    msg = payload.get("message") or ""
    return finish(False, f"child workflow {key} failed{': ' + msg if msg else ''}", "ChildWorkflowFailed")


def _finished_phase(payload: dict[str, Any]) -> bool:
    return payload.get("phase") in (WorkflowPhase.SUCCEED.value, WorkflowPhase.FAILED.value)


def on_submitted(m: WorkflowMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    payload = ev.payload if isinstance(ev.payload, dict) else {}
    if payload.get("workflow") not in (None, node.state.get("child")):
        return IGNORED
    cw = _cw(run, node)
    outputs = {"workflow": node.state["childName"], "namespace": run.namespace, "phase": payload.get("phase")}
    req = stopping(node)
    if req is not None:
        if _finished_phase(payload):
            tr = finish_stopped(req)
        elif cw.wait:
            tr = Transition(None, [_abort_child(node, req)])  # ends when the child has ended
        else:
            tr = finish_stopped(req)
            if cw.stopWithParent:
                tr.effects.append(_abort_child(node, req))
    elif _finished_phase(payload) and cw.wait:
        tr = _child_outcome(node, payload)
    elif not cw.wait:
        tr = finish(True, f"started child workflow {node.state['child']} (detached)")
    elif node.state.get("submitted"):
        return IGNORED
    else:
        tr = Transition(None, [])
    tr.state = {**(tr.state or {}), "submitted": True}
    tr.outputs = outputs
    return tr


def on_finished(m: WorkflowMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    payload = ev.payload if isinstance(ev.payload, dict) else {}
    if payload.get("workflow") != node.state.get("child") or not _finished_phase(payload):
        return IGNORED
    tr = _child_outcome(node, payload)
    tr.outputs = {"phase": payload.get("phase")}
    return tr


def on_action_failed(m: WorkflowMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    req = stopping(node)
    if req is not None:
        return finish_stopped(req)
    return finish(
        False, f"starting child workflow {node.state.get('child')}: {ev.payload}", "ChildWorkflowSubmitFailed"
    )


def on_retry(m: WorkflowMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return Transition(None, [_submit(run, node, node.state)])


def _abort_child(node: Node, req: StopRequest) -> AbortWorkflow:
    return AbortWorkflow(
        node.state["child"], f"parent node {node.name}: {req.message}", terminate=not req.cleanup
    )


class WorkflowMachine(NodeMachine):
    kind = "Workflow"
    phases = frozenset({P.INIT, P.RUNNING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.RUNNING, E.NODE_WORKFLOW_SUBMITTED): on_submitted,
        (P.RUNNING, E.NODE_WORKFLOW_FINISHED): on_finished,
        (P.RUNNING, E.NODE_ACTION_FAILED): on_action_failed,
        (P.RUNNING, E.NODE_RETRY): on_retry,
    }

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        if node.phase is P.INIT:
            return finish_stopped(req)
        if not node.state.get("submitted"):
            # the submission's answer is on its way: decide when it arrives (on_submitted)
            return Transition(None, [], state=stop_state(req))
        # waiting for the child (a detached node has already finished): abort it, end when it ends
        return Transition(None, [_abort_child(node, req)], state=stop_state(req))

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is P.RUNNING:
            # submitting again finds the child by name (never a second start) and reports its phase;
            # as an event, so that every stored run is adopted before it is looked up
            effects.append(Notify(E.NODE_RETRY))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        cw = tmpl.workflow
        if cw is None:
            return [(("workflow",), "Workflow template needs a workflow spec (from or spec)")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if (cw.from_ is None) == (cw.spec is None):
            issues.append((("workflow",), "set exactly one of workflow.from and workflow.spec"))
        if cw.spec is not None:
            issues += [(("workflow", "spec", *p), msg) for p, msg in inline_spec_issues(cw.spec)]
        # {{ }} syntax of parameters, labels and name is checked for every kind (engine.validate)
        return issues


def inline_spec_issues(spec: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """Validate an inline WorkflowSpec as a whole workflow would be (paths relative to the spec)."""
    from engine.errors import ValidationIssue
    from engine.model import Workflow
    from engine.validate import pydantic_issues, raw_issues, validate_workflow

    doc = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "child"},
        "spec": spec,
    }
    try:
        wf = Workflow.model_validate(doc)
    except ValidationError as e:
        found: list[ValidationIssue] = pydantic_issues(e.errors(), "")
        seen = {i.path for i in found}
        found += [i for i in raw_issues(doc, "") if i.path not in seen]
    else:
        found = validate_workflow(wf, "")
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i in found:
        path = tuple(i.path)
        if path[:1] == ("spec",):
            path = path[1:]
        out.append((path, i.message))
    return out


# --- the manager's side: submitting, finding, counting and stopping child workflows ---------------
class ChildWorkflows:
    """Installed on a WorkflowManager: carries out SubmitWorkflow, tells parent nodes when their
    child finished, stops detached children of a stopped parent and counts workflows for CEL."""

    def __init__(self, manager: WorkflowManager) -> None:
        self.manager = manager
        self._by_parent: dict[str, list[str]] = {}
        self._indexed = 0
        manager.workflow_listeners.append(self.on_workflow_changed)

    # -- index of children by parent (built lazily from labels, so adopted runs are found too) --
    def _sync(self) -> None:
        runs = self.manager.runs
        if len(runs) < self._indexed:
            self._by_parent.clear()
            self._indexed = 0
        for run in islice(runs.values(), self._indexed, None):
            parent = run.workflow.metadata.labels.get(LABEL_PARENT_WORKFLOW)
            if parent is not None:
                self._by_parent.setdefault(f"{run.namespace}/{parent}", []).append(run.key)
        self._indexed = len(runs)

    def children_of(self, key: str) -> list[WorkflowRun]:
        self._sync()
        runs = self.manager.runs
        return [runs[k] for k in self._by_parent.get(key, ()) if k in runs]

    # -- effects ------------------------------------------------------------------------------------
    def submit(self, parent: WorkflowRun, node: Node, eff: SubmitWorkflow) -> None:
        from engine.model import Workflow
        from engine.phases import Event

        mgr = self.manager
        meta = eff.workflow.get("metadata") or {}
        key = f"{meta.get('namespace') or parent.namespace}/{meta.get('name')}"

        def reply(ok: bool, payload: Any) -> None:
            mgr.trigger.notify(Event(parent.key, node.name, eff.ok if ok else eff.fail, payload))

        existing = mgr.runs.get(key)
        if existing is not None:
            labels = existing.workflow.metadata.labels
            if labels.get(LABEL_PARENT_WORKFLOW) != parent.name or labels.get(LABEL_PARENT_NODE) != node.name:
                reply(False, f"workflow {key} already exists and was not started by this node")
            else:
                reply(True, _status(existing))
            return
        try:
            wf = Workflow.model_validate(eff.workflow)
        except ValidationError as e:
            reply(False, f"invalid child workflow: {_summary(e)}")
            return
        try:
            child = mgr.submit(wf, seed=eff.seed)
        except ValueError as e:
            reply(False, str(e))
            return
        mgr._mark(child)
        self._sync()
        reply(True, _status(child))

    # -- the workflow listener ---------------------------------------------------------------------
    def on_workflow_changed(self, run: WorkflowRun) -> None:
        if not run.phase.finished:
            return
        mgr = self.manager
        labels = run.workflow.metadata.labels
        parent = labels.get(LABEL_PARENT_WORKFLOW)
        parent_node = labels.get(LABEL_PARENT_NODE)
        if parent is not None and parent_node is not None:
            from engine.phases import Event

            pkey = f"{run.namespace}/{parent}"
            if pkey in mgr.runs:
                mgr.trigger.notify(Event(pkey, parent_node, EventType.NODE_WORKFLOW_FINISHED, _status(run)))
        if _was_stopped(run):
            self._stop_children(run)

    def _stop_children(self, run: WorkflowRun) -> None:
        for child in self.children_of(run.key):
            if not child.phase.finished and _stops_with_parent(child):
                self.manager.abort(child.key, _stop_message(run))

    # -- CEL: countWorkflows(selector, phase?) -----------------------------------------------------
    def bind(self, run: WorkflowRun) -> None:
        """Called for every run the manager submits or adopts: registers the CEL functions and,
        for runs loaded after a restart, re-derives the stop of detached children whose parent
        was stopped before the crash (whichever of the two is adopted second sees the other)."""
        if run.functions is not None:
            namespace = run.namespace

            def count_workflows(*args: Any) -> int:
                return self.count(namespace, *args)

            run.functions.register("countWorkflows", count_workflows, replace=True)
        mgr = self.manager
        if run.phase.finished and _was_stopped(run):
            self._stop_children(run)
            return
        parent = run.workflow.metadata.labels.get(LABEL_PARENT_WORKFLOW)
        if parent is None or run.phase.finished:
            return
        p = mgr.runs.get(f"{run.namespace}/{parent}")
        if p is not None and p.phase.finished and _was_stopped(p) and _stops_with_parent(run):
            mgr.abort(run.key, _stop_message(p))

    def count(self, namespace: str, *args: Any) -> int:
        if not 1 <= len(args) <= 2:
            raise ValueError(f"takes a label map and an optional phase, got {len(args)} arguments")
        selector = args[0]
        if not isinstance(selector, dict):
            raise ValueError(f"the selector must be a map of labels, got {type(selector).__name__}")
        phases: set[str] | None = None
        if len(args) == 2 and args[1] is not None:
            p = args[1]
            phases = {str(x) for x in p} if isinstance(p, list) else {str(p)}
            unknown = phases - {ph.value for ph in WorkflowPhase}
            if unknown:
                known = ", ".join(ph.value for ph in WorkflowPhase)
                raise ValueError(f"unknown phase {', '.join(sorted(unknown))} (known: {known})")
        want = {str(k): str(v) for k, v in selector.items()}
        n = 0
        for run in self.manager.runs.values():
            if run.namespace != namespace or (phases is not None and run.phase.value not in phases):
                continue
            labels = run.workflow.metadata.labels
            if all(labels.get(k) == v for k, v in want.items()):
                n += 1
        return n


def _status(run: WorkflowRun) -> dict[str, Any]:
    return {"workflow": run.key, "phase": run.phase.value, "message": run.message}


def _stops_with_parent(child: WorkflowRun) -> bool:
    return child.workflow.metadata.annotations.get(ANNOTATION_STOP_WITH_PARENT, "true") == "true"


def _stop_message(parent: WorkflowRun) -> str:
    return f"parent workflow {parent.name} stopped: {parent.message or parent.phase.value}"


def _was_stopped(run: WorkflowRun) -> bool:
    """Aborted, past its deadline, or failed (a parent that simply succeeded is not 'stopped')."""
    if run.abort_requested or run.phase is WorkflowPhase.FAILED:
        return True
    return run.deadline_at is not None and run.finish_time is not None and run.finish_time >= run.deadline_at


def _summary(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    more = f" (+{e.error_count() - 5} more)" if e.error_count() > 5 else ""
    return "; ".join(parts) + more


__all__ = [
    "ANNOTATION_STOP_WITH_PARENT",
    "LABEL_PARENT_NODE",
    "LABEL_PARENT_WORKFLOW",
    "ChildWorkflowSpec",
    "ChildWorkflows",
    "WorkflowMachine",
    "child_document",
]
