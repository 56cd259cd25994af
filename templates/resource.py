"""Resource: create / apply / patch / delete one object, optionally wait for a condition on it.

The manifest (and the patch) are rendered (``{{ expr }}``) when the node starts and kept in the
node's state, so a resumed node re-issues exactly the same, idempotent call: ``create`` treats
AlreadyExists as success, ``apply`` creates or merge-patches the existing object, ``delete``
treats NotFound as success. Object names are the manifest's, or ``generateName`` plus a suffix
derived from the node (deterministic), or the node's object name.

With a ``successCondition`` the node watches the object (``Observe``: every change, no polling)
and succeeds when the condition holds; a ``failureCondition`` that holds fails it at once. Both are
CEL over ``object`` plus the node environment. A condition that reads a field the object does not
have yet does not hold yet. Without a successCondition, a failureCondition is checked once, on the
object the action returned. ``delete`` with ``waitForDeletion`` waits until the object is gone
(finalizers). ``timeout`` (from the node's start) fails the node, naming the condition and the last
state of the object.

Outputs: ``name``, ``namespace``, ``uid`` and ``object`` (the last object seen, without
``metadata.managedFields``).

| event \\ phase     | Init                          | Running                                        | Holding |
|-------------------|-------------------------------|------------------------------------------------|---------|
| NodeCreated       | render, act -> Running        | -                                              | -       |
| NodeActionDone    | -                             | no wait: -> Succeed; condition / deletion pending: observe -> Holding; failureCondition: -> Failed | - |
| NodeActionFailed  | -                             | -> Failed                                      | -       |
| NodeObjectChanged | -                             | -                                              | success: -> Succeed; failure / object gone: -> Failed; deleted (waitForDeletion): -> Succeed |
| NodeTimeout       | -                             | -> Failed                                      | -> Failed |

Abort / deadline end the node at once: a Resource holds nothing (the object it created or changed
stays; remove it in an ``onExit`` handler or another Resource if needed).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonDict

from engine.duration import Duration, format_duration
from engine.expr import ExprError, check_syntax, template_expressions
from engine.phases import Act, Effect, Event, NotifyAt, Observe, StopRequest, Transition
from engine.render import render
from templates.base import IGNORED, E, NodeMachine, P, finish, finish_stopped
from templates.lifecycle import ERROR_REASONS
from templates.loop import loop_context
from templates.wait import eval_condition, summarize

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

#: the API refused or could not carry out the call: an error for ``retryPolicy: OnError``
ERROR_REASONS.add("ResourceActionFailed")

_PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}


class ResourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(default="default", description="Name of the cluster the object is in.")
    action: Literal["create", "apply", "patch", "delete"] = Field(
        description="create (AlreadyExists is success), apply (create or merge-patch), patch, delete."
    )
    manifest: dict[str, Any] = Field(
        description="The object (apiVersion, kind, metadata, ...); {{ }} placeholders are rendered. "
        "For patch and delete it names the object; for a merge patch its other fields are the patch.",
        json_schema_extra=_PRESERVE,
    )
    patchType: Literal["merge", "json"] = Field(default="merge", description="patch: merge or json.")
    patch: Any = Field(
        default=None,
        description="patch: the patch document (a JSON patch is a list of operations); "
        "default for merge: the manifest's fields other than apiVersion, kind, name and namespace.",
        json_schema_extra=_PRESERVE,
    )
    successCondition: str | None = Field(
        default=None, description="CEL over `object`: wait (watching the object) until it holds."
    )
    failureCondition: str | None = Field(default=None, description="CEL over `object`: fail when it holds.")
    timeout: Duration | None = Field(
        default=None, description="Fail when not done this long after the start."
    )
    waitForDeletion: bool = Field(default=False, description="delete: wait until the object is gone.")


_ACTIONS = {
    "create": "object.create",
    "apply": "object.apply",
    "patch": "object.patch",
    "delete": "object.delete",
}


def _spec(run: WorkflowRun, node: Node) -> ResourceSpec:
    spec = run.template(node).resource
    assert spec is not None  # validated
    return spec


def _suffix(run: WorkflowRun, node: Node) -> str:
    h = hashlib.sha256(f"{run.key}/{node.name}".encode()).hexdigest()
    return "".join("bcdfghjklmnpqrstvwxz2456789"[int(h[i : i + 2], 16) % 27] for i in range(0, 10, 2))


def trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _outputs(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "object": trimmed(obj),
    }


def build_call(run: WorkflowRun, node: Node, spec: ResourceSpec) -> dict[str, Any]:
    """Render the manifest and build the actor call: ``{"action", "params", "object"}`` (object =
    the reference). Raises ExprError (rendering) or ValueError (an unusable manifest)."""
    extra = loop_context(run, node)
    manifest = render(run, node, spec.manifest, extra)
    if not isinstance(manifest, dict):
        raise ValueError("the rendered manifest is not an object")
    for f in ("apiVersion", "kind"):
        if not isinstance(manifest.get(f), str) or not manifest.get(f):
            raise ValueError(f"the rendered manifest has no {f}")
    meta = dict(manifest.get("metadata") or {})
    if not meta.get("name"):
        if spec.action in ("patch", "delete"):
            raise ValueError(f"{spec.action} needs manifest.metadata.name")
        gen = meta.pop("generateName", None)
        meta["name"] = f"{gen}{_suffix(run, node)}" if gen else run.object_name(node)
    meta.setdefault("namespace", run.namespace)
    ref = {
        "cluster": spec.cluster,
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "namespace": meta["namespace"],
        "name": meta["name"],
    }
    action = spec.action
    params: dict[str, Any]
    if action in ("create", "apply"):
        from engine.model import LABEL_NODE, LABEL_TEMPLATE, LABEL_WORKFLOW

        labels = {**(meta.get("labels") or {}), LABEL_WORKFLOW: run.name, LABEL_TEMPLATE: node.template}
        if action == "create":  # apply keeps the object's labels stable across nodes
            labels[LABEL_NODE] = node.name
        meta["labels"] = labels
        params = {**ref, "object": {**manifest, "metadata": meta}}
    elif action == "patch":
        patch = render(run, node, spec.patch, extra) if spec.patch is not None else None
        if patch is None:
            body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
            rest = {k: v for k, v in meta.items() if k not in ("name", "namespace")}
            if rest:
                body["metadata"] = rest
            patch = body
        if spec.patchType == "json" and not isinstance(patch, list):
            raise ValueError("a json patch is a list of operations")
        if spec.patchType == "merge" and not isinstance(patch, dict):
            raise ValueError("a merge patch is an object")
        params = {**ref, "patch": patch, "patchType": spec.patchType}
    else:
        params = dict(ref)
    return {"action": _ACTIONS[action], "params": params, "object": ref}


def _what(spec: ResourceSpec, ref: dict[str, Any]) -> str:
    ns = f"{ref['namespace']}/" if ref.get("namespace") else ""
    return f"{spec.action} {ref['kind']} {ns}{ref['name']}"


def _check(run: WorkflowRun, node: Node, spec: ResourceSpec, obj: dict[str, Any]) -> Transition | None:
    """Evaluate the conditions on ``obj``: a finishing transition, or None (keep waiting)."""
    extra = {**loop_context(run, node), "object": obj}
    outputs = _outputs(obj)
    notes: list[str] = []
    for name, src in (
        ("failureCondition", spec.failureCondition),
        ("successCondition", spec.successCondition),
    ):
        if src is None:
            continue
        try:
            holds, pending = eval_condition(run, node, src, extra)
        except ExprError as e:
            tr = finish(False, f"{name}: {e}", "ExpressionError")
            tr.outputs = outputs
            return tr
        if pending:
            notes.append(f"{name}: {pending}")
        if holds:
            tr = (
                finish(False, f'failureCondition "{src}" holds ({summarize(obj)})', "FailureCondition")
                if name == "failureCondition"
                else finish(True)
            )
            tr.outputs = outputs
            return tr
    if spec.successCondition is None:
        tr = finish(True)
        tr.outputs = outputs
        return tr
    return None


def on_created(m: ResourceMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    try:
        call = build_call(run, node, spec)
    except ExprError as e:
        return finish(False, f"rendering the manifest: {e}", "ExpressionError")
    except ValueError as e:
        return finish(False, str(e), "InvalidManifest")
    state: dict[str, Any] = {"call": call, "object": call["object"]}
    effects: list[Effect] = [Act(call["action"], call["params"], ok=E.NODE_ACTION_DONE)]
    if spec.timeout is not None:
        state["timeoutAt"] = now + spec.timeout
        effects.append(NotifyAt(E.NODE_TIMEOUT, now + spec.timeout))
    return Transition(P.RUNNING, effects, state=state)


def on_done(m: ResourceMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    ref = node.state["object"]
    if spec.action == "delete":
        gone = bool((ev.payload or {}).get("gone", True)) if isinstance(ev.payload, dict) else True
        outputs = {"name": ref["name"], "namespace": ref["namespace"]}
        if gone or not spec.waitForDeletion:
            tr = finish(True)
            tr.outputs = outputs
            return tr
        return Transition(P.HOLDING, [_observe(ref)], state={"awaitGone": True}, outputs=outputs)
    obj = ev.payload if isinstance(ev.payload, dict) else {}
    done = _check(run, node, spec, obj)
    if done is not None:
        return done
    return Transition(P.HOLDING, [_observe(ref)], state={"last": summarize(obj)}, outputs=_outputs(obj))


def _observe(ref: dict[str, Any]) -> Observe:
    return Observe(ref["cluster"], ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"])


def on_object_changed(m: ResourceMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    obj = ev.payload
    st = node.state
    if st.get("awaitGone"):
        if obj is None:
            return finish(True)
        return Transition(None, [], state={"last": summarize(obj)})
    if obj is None:
        return finish(
            False,
            f"{_what(spec, st['object'])}: the object was deleted while waiting for "
            f'successCondition "{spec.successCondition}"',
            "ObjectVanished",
        )
    if not isinstance(obj, dict):
        return IGNORED
    done = _check(run, node, spec, obj)
    if done is not None:
        return done
    return Transition(None, [], state={"last": summarize(obj)}, outputs=_outputs(obj))


def on_timeout(m: ResourceMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    at = st.get("timeoutAt")
    if at is None or now < at:
        return IGNORED
    spec = _spec(run, node)
    assert spec.timeout is not None
    t = format_duration(spec.timeout)
    what = _what(spec, st["object"])
    last = st.get("last") or "nothing seen"
    if node.phase is P.RUNNING:
        msg = f"timeout {t}: {what} did not complete"
    elif st.get("awaitGone"):
        msg = f"timeout {t}: {what}: the object still exists ({last})"
    else:
        msg = f'timeout {t}: {what}: successCondition "{spec.successCondition}" did not hold (last: {last})'
    return finish(False, msg, "Timeout")


def on_action_failed(m: ResourceMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    spec = _spec(run, node)
    return finish(False, f"{_what(spec, node.state['object'])}: {ev.payload}", "ResourceActionFailed")


class ResourceMachine(NodeMachine):
    kind = "Resource"
    phases = frozenset({P.INIT, P.RUNNING, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.RUNNING, E.NODE_ACTION_DONE): on_done,
        (P.RUNNING, E.NODE_ACTION_FAILED): on_action_failed,
        (P.RUNNING, E.NODE_TIMEOUT): on_timeout,
        (P.HOLDING, E.NODE_OBJECT_CHANGED): on_object_changed,
        (P.HOLDING, E.NODE_TIMEOUT): on_timeout,
    }

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        return finish_stopped(req)

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        st = node.state
        if node.phase in (P.RUNNING, P.HOLDING) and st.get("timeoutAt") is not None:
            effects.append(NotifyAt(E.NODE_TIMEOUT, st["timeoutAt"]))
        if node.phase is P.RUNNING:
            call = st["call"]
            effects.append(Act(call["action"], call["params"], ok=E.NODE_ACTION_DONE))
        elif node.phase is P.HOLDING:
            effects.append(_observe(st["object"]))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        spec = tmpl.resource
        if spec is None:
            return [(("resource",), "Resource template needs resource.action and resource.manifest")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        man = spec.manifest
        for f in ("apiVersion", "kind"):
            if not isinstance(man.get(f), str) or not man.get(f):
                issues.append((("resource", "manifest", f), "required"))
        meta = man.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            issues.append((("resource", "manifest", "metadata"), "must be an object"))
            meta = None
        if spec.action in ("patch", "delete") and not (meta or {}).get("name"):
            issues.append((("resource", "manifest", "metadata", "name"), f"required for {spec.action}"))
        if spec.action == "patch":
            if spec.patchType == "json" and not isinstance(spec.patch, list):
                issues.append((("resource", "patch"), "a json patch is a list of operations"))
            if spec.patchType == "merge" and spec.patch is not None and not isinstance(spec.patch, dict):
                issues.append((("resource", "patch"), "a merge patch is an object"))
        elif spec.patch is not None:
            issues.append((("resource", "patch"), f"not used by action {spec.action}"))
        if spec.action == "delete":
            for f in ("successCondition", "failureCondition"):
                if getattr(spec, f) is not None:
                    issues.append((("resource", f), "not used by action delete (use waitForDeletion)"))
        elif spec.waitForDeletion:
            issues.append((("resource", "waitForDeletion"), f"not used by action {spec.action}"))
        for f in ("successCondition", "failureCondition"):
            src = getattr(spec, f)
            if src is not None:
                err = check_syntax(src)
                if err:
                    issues.append((("resource", f), err))
        issues += _template_issues(("resource", "manifest"), man)
        if spec.patch is not None:
            issues += _template_issues(("resource", "patch"), spec.patch)
        return issues


def _template_issues(path: tuple[str | int, ...], value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Syntax errors of ``{{ }}`` placeholders anywhere in ``value``."""
    if isinstance(value, str):
        try:
            template_expressions(value)
        except ExprError as e:
            return [(path, str(e))]
        return []
    out: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _template_issues((*path, str(k)), v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _template_issues((*path, i), v)
    return out
