"""Chaos: create a chaos object, hold it for a duration, delete it — and always delete it.

One state machine serves the generic ``Chaos`` kind (any manifest, in a named cluster) and Chaos
Mesh's kinds (``NetworkChaos`` with an inline ``networkChaos`` spec, ...), which become
``chaos-mesh.org/v1alpha1`` objects. The seed's table (Init, Running, Holding, Succeed, Failed):

| event \\ phase      | Init                        | Running                                  | Holding |
|--------------------|-----------------------------|------------------------------------------|---------|
| NodeCreated        | -> Running, create by Actor | -                                        | -       |
| NodeChaosInjected  | -                           | -> Holding, NodeHoldingAwake after duration | -    |
| NodeHoldingAwake   | -                           | -                                        | -> Running, delete by Actor |
| NodeChaosCleaned   | -                           | -> Succeed, tell parent                  | -       |

Beyond the seed (and unlike Chaos Mesh, which has open reports for each):
* one-shot chaos (``oneShot: true``, PodChaos pod-kill/container-kill) completes once injected —
  it is deleted right after, no hold (chaos-mesh #3345, #4539);
* a chaos-mesh.org object counts as injected when its ``AllInjected`` condition is True;
* if the object reports failure, or vanishes while held, the node fails (after cleanup);
* abort and deadline delete the object before the node finishes; a failed delete is retried
  with backoff and reported if it never succeeds (the object is never silently left behind).
* a named chaos actor (``chaos: {action, params}``, ``actors/chaos_registry.py``) runs through the
  same table: "create" is the actor call ``chaos.inject`` and "delete" is ``chaos.recover`` with
  the object refs the actor returned, kept in the node state (so cleanup and resume work).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.chaos_registry import is_one_shot as actor_one_shot
from actors.chaos_registry import validate_action
from engine.model import CHAOS_MESH_API_VERSION, CHAOS_MESH_KINDS, LABEL_NODE, LABEL_TEMPLATE, LABEL_WORKFLOW
from engine.phases import Act, Effect, Event, NotifyAt, Observe, StopRequest, Transition
from engine.render import rendered
from templates.base import IGNORED, E, NodeMachine, P, finish, finish_stopped, stop_state, stopping

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

ONE_SHOT_POD_ACTIONS = frozenset({"pod-kill", "container-kill"})
DELETE_RETRY_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
#: how long a chaos-mesh.org object may take to report AllInjected before the node fails
INJECT_TIMEOUT = 120.0


def is_one_shot(tmpl: Template) -> bool:
    if tmpl.chaos is not None:
        return tmpl.chaos.oneShot or (tmpl.chaos.action is not None and actor_one_shot(tmpl.chaos.action))
    if tmpl.templateType == "PodChaos":
        return (tmpl.podChaos or {}).get("action") in ONE_SHOT_POD_ACTIONS
    return False


def chaos_object(run: WorkflowRun, node: Node, tmpl: Template) -> tuple[str, dict[str, Any]]:
    """(cluster, object) this node injects. Names are deterministic, so creation is idempotent."""
    if tmpl.chaos is not None:
        cluster = tmpl.chaos.cluster
        manifest = rendered(node, "chaos.manifest", tmpl.chaos.manifest) or {}  # {{ }} rendered at start
        obj: dict[str, Any] = {k: v for k, v in manifest.items() if k != "metadata"}
        meta = dict(manifest.get("metadata") or {})
    else:
        cluster = "default"
        field = CHAOS_MESH_KINDS[tmpl.templateType]
        obj = {
            "apiVersion": CHAOS_MESH_API_VERSION,
            "kind": tmpl.templateType,
            "spec": rendered(node, field, getattr(tmpl, field)) or {},
        }
        meta = {}
    meta.setdefault("name", run.object_name(node))
    meta.setdefault("namespace", run.namespace)
    meta["labels"] = {
        **(meta.get("labels") or {}),
        LABEL_WORKFLOW: run.name,
        LABEL_NODE: node.name,
        LABEL_TEMPLATE: tmpl.name,
    }
    obj["metadata"] = meta
    return cluster, obj


def ref_of(cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
    m = obj["metadata"]
    return {
        "cluster": cluster,
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": m.get("namespace"),
        "name": m["name"],
    }


def observe(ref: dict[str, Any]) -> Observe:
    return Observe(ref["cluster"], ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"])


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): str(c.get("status")) for c in conds if isinstance(c, dict)}


def needs_confirmation(obj: dict[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).startswith("chaos-mesh.org/")


def is_injected(obj: dict[str, Any]) -> bool:
    return _conditions(obj).get("AllInjected") == "True"


def failure_of(obj: dict[str, Any]) -> str | None:
    status = obj.get("status") or {}
    if status.get("phase") == "Failed":
        return str(status.get("message") or status.get("reason") or "object reports phase Failed")
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Failed" and c.get("status") == "True":
            return str(c.get("message") or c.get("reason") or "object reports condition Failed")
    return None


def _delete(node: Node, extra: dict[str, Any] | None = None) -> Transition:
    state = {"deleting": True, **(extra or {})}
    if "actor" in node.state:  # a named chaos actor: recover what it injected
        return Transition(P.RUNNING, [_recover_act(node.state)], state=state)
    return Transition(
        P.RUNNING, [Act("object.delete", node.state["object"], ok=E.NODE_CHAOS_CLEANED)], state=state
    )


# --- named chaos actors (actors/chaos_registry.py) -----------------------------------------------
# The call (action, rendered params, context) and the refs the actor returned live in node.state
# ("actor", "refs"), so cleanup and resume work from the stored state alone.
def _named_created(run: WorkflowRun, node: Node, tmpl: Template) -> Transition:
    spec = tmpl.chaos
    assert spec is not None and spec.action is not None
    params = dict(rendered(node, "chaos.params", spec.params))  # {{ }} rendered as the node started
    labels = {LABEL_WORKFLOW: run.name, LABEL_NODE: node.name, LABEL_TEMPLATE: tmpl.name}
    ctx = {
        "workflow": run.name,
        "namespace": run.namespace,
        "node": node.name,
        "name": run.object_name(node),
        "cluster": spec.cluster,
        "labels": labels,
        "seed": run.rng.getrandbits(32),
    }
    call = {"action": spec.action, "params": params, "ctx": ctx}
    return Transition(
        P.RUNNING,
        [Act("chaos.inject", call, ok=E.NODE_CHAOS_INJECTED)],
        state={"actor": call, "injected": False},
    )


def _recover_act(st: dict[str, Any]) -> Act:
    return Act("chaos.recover", {**st["actor"], "refs": st.get("refs") or []}, ok=E.NODE_CHAOS_CLEANED)


def _named_injected(node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    res = ev.payload if isinstance(ev.payload, dict) else {}
    refs = list(res.get("refs") or [])
    tmpl = run.template(node)
    if stopping(node) is not None or is_one_shot(tmpl):
        st = {"deleting": True, "injected": True, "refs": refs}
        tr = Transition(P.RUNNING, [_recover_act({**node.state, **st})], state=st)
    else:
        assert tmpl.duration is not None  # validated
        until = now + run.duration(node)  # drawn, or rendered from a {{ }} string at start
        tr = Transition(
            P.HOLDING,
            [NotifyAt(E.NODE_HOLDING_AWAKE, until)],
            state={"injected": True, "holdUntil": until, "refs": refs},
        )
    tr.outputs = {**(res.get("outputs") or {}), "objects": len(refs)}
    return tr


def _named_resume(node: Node, run: WorkflowRun) -> list[Effect]:
    st = node.state
    if node.phase is P.HOLDING:
        return [NotifyAt(E.NODE_HOLDING_AWAKE, st["holdUntil"])]
    if st.get("deleting"):
        return [_recover_act(st)]
    if not st.get("injected"):
        return [Act("chaos.inject", st["actor"], ok=E.NODE_CHAOS_INJECTED)]  # idempotent per ctx.name
    return []


def _injected(m: ChaosMachine, node: Node, run: WorkflowRun, now: float) -> Transition:
    """The object is in place: hold it, or release it at once (one-shot, stopping, failed)."""
    tmpl = run.template(node)
    if stopping(node) is not None or node.state.get("failure"):
        return _delete(node, {"injected": True})
    if is_one_shot(tmpl):
        return _delete(node, {"injected": True})
    assert tmpl.duration is not None  # validated
    until = now + run.duration(node)  # drawn, or rendered from a {{ }} string at start
    return Transition(
        P.HOLDING,
        [NotifyAt(E.NODE_HOLDING_AWAKE, until), observe(node.state["object"])],
        state={"injected": True, "holdUntil": until, "awaiting": False},
    )


def on_created(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    tmpl = run.template(node)
    if tmpl.chaos is not None and tmpl.chaos.action is not None:
        return _named_created(run, node, tmpl)
    cluster, obj = chaos_object(run, node, tmpl)
    ref = ref_of(cluster, obj)
    return Transition(
        P.RUNNING,
        [Act("object.create", {**ref, "object": obj}, ok=E.NODE_CHAOS_INJECTED)],
        state={"object": ref, "injected": False},
    )


def on_injected(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if node.state.get("deleting") or node.state.get("injected"):
        return IGNORED
    if "actor" in node.state:
        return _named_injected(node, ev, run, now)
    obj = ev.payload if isinstance(ev.payload, dict) else {}
    failure = failure_of(obj)
    if failure:
        return _delete(node, {"injected": True, "failure": failure})
    if needs_confirmation(obj) and not is_injected(obj):
        if stopping(node) is not None:
            return _delete(node, {"created": True})
        return Transition(
            None,
            [observe(node.state["object"]), NotifyAt(E.NODE_RETRY, now + INJECT_TIMEOUT)],
            state={"awaiting": True, "created": True, "injectBy": now + INJECT_TIMEOUT},
        )
    tr = _injected(m, node, run, now)
    tr.state = {**(tr.state or {}), "created": True}
    return tr


def on_object_changed(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    obj = ev.payload
    st = node.state
    if st.get("deleting"):
        if obj is None and st.get("awaitGone"):
            return _finish_cleaned(node)
        return IGNORED
    if obj is None:
        if node.phase is P.HOLDING or st.get("awaiting"):
            return finish(False, "chaos object was deleted by someone else while injected", "ObjectVanished")
        return IGNORED
    failure = failure_of(obj)
    if failure:
        return _delete(node, {"failure": failure})
    if st.get("awaiting") and is_injected(obj):
        return _injected(m, node, run, now)
    if st.get("awaiting"):
        return Transition(None, [], state={"lastStatus": _condition_summary(obj)})
    return IGNORED


def on_awake(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if now < node.state.get("holdUntil", now):
        return IGNORED
    return _delete(node)


def _finish_cleaned(node: Node) -> Transition:
    failure = node.state.get("failure")
    if failure:
        return finish(False, f"chaos failed: {failure}", "ChaosFailed")
    req = stopping(node)
    if req is not None:
        return finish_stopped(req)
    return finish(True)


def on_cleaned(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if not node.state.get("deleting"):
        return IGNORED
    result = ev.payload if isinstance(ev.payload, dict) else {}
    if result.get("gone", True):
        return _finish_cleaned(node)
    # deletion accepted but the object still exists (finalizers): wait until it is gone
    return Transition(None, [observe(node.state["object"])], state={"awaitGone": True})


def on_action_failed(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    msg = str(ev.payload)
    if not node.state.get("deleting"):
        if "actor" in node.state:
            return finish(
                False, f"chaos action {node.state['actor']['action']} failed: {msg}", "ChaosCreateFailed"
            )
        return finish(False, f"creating chaos object failed: {msg}", "ChaosCreateFailed")
    attempts = int(node.state.get("deleteAttempts", 0))
    if attempts >= len(DELETE_RETRY_BACKOFF):
        return finish(
            False, f"chaos cleanup failed after {attempts + 1} attempts: {msg}", "ChaosCleanupFailed"
        )
    return Transition(
        None,
        [NotifyAt(E.NODE_RETRY, now + DELETE_RETRY_BACKOFF[attempts])],
        state={"deleteAttempts": attempts + 1, "lastError": msg},
    )


def on_retry(m: ChaosMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    if st.get("deleting"):
        return _delete(node)
    if st.get("awaiting") and now >= st.get("injectBy", now):
        detail = st.get("lastStatus") or "no status reported"
        return _delete(node, {"failure": f"not injected within {INJECT_TIMEOUT:g}s ({detail})"})
    return IGNORED


def _condition_summary(obj: dict[str, Any]) -> str:
    conds = (obj.get("status") or {}).get("conditions") or []
    return ", ".join(f"{c.get('type')}={c.get('status')}" for c in conds if isinstance(c, dict))


class ChaosMachine(NodeMachine):
    kind = "Chaos"
    phases = frozenset({P.INIT, P.RUNNING, P.HOLDING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.RUNNING, E.NODE_CHAOS_INJECTED): on_injected,
        (P.RUNNING, E.NODE_OBJECT_CHANGED): on_object_changed,
        (P.HOLDING, E.NODE_OBJECT_CHANGED): on_object_changed,
        (P.HOLDING, E.NODE_HOLDING_AWAKE): on_awake,
        (P.RUNNING, E.NODE_CHAOS_CLEANED): on_cleaned,
        (P.RUNNING, E.NODE_ACTION_FAILED): on_action_failed,
        (P.RUNNING, E.NODE_RETRY): on_retry,
    }

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        if node.phase is P.INIT:
            return finish_stopped(req)
        if node.phase is P.HOLDING:
            return _delete(node, stop_state(req))
        if node.state.get("created") and not node.state.get("deleting"):
            return _delete(node, stop_state(req))  # created, still waiting to be injected
        # Running: the create is in flight (delete once it returns) or already deleting
        return Transition(None, [], state=stop_state(req))

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        st = node.state
        if "actor" in st:
            return effects + _named_resume(node, run)
        ref = st.get("object")
        if ref is None:
            return effects
        if node.phase is P.HOLDING:
            effects += [NotifyAt(E.NODE_HOLDING_AWAKE, st["holdUntil"]), observe(ref)]
        elif node.phase is P.RUNNING:
            if st.get("deleting"):
                effects.append(Act("object.delete", ref, ok=E.NODE_CHAOS_CLEANED))
            elif st.get("awaiting"):
                effects += [observe(ref), NotifyAt(E.NODE_RETRY, st.get("injectBy", now))]
            else:
                tmpl = run.template(node)
                _, obj = chaos_object(run, node, tmpl)
                effects.append(Act("object.create", {**ref, "object": obj}, ok=E.NODE_CHAOS_INJECTED))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if tmpl.templateType == "Chaos":
            if tmpl.chaos is None:
                return [(("chaos",), "Chaos template needs a chaos spec")]
            if tmpl.chaos.manifest is None and tmpl.chaos.action is None:
                issues.append((("chaos",), "Chaos template needs chaos.manifest or chaos.action"))
            if tmpl.chaos.action is not None:
                if tmpl.chaos.manifest is not None:
                    issues.append((("chaos",), "set either chaos.manifest or chaos.action, not both"))
                issues += [
                    (("chaos", *p), msg) for p, msg in validate_action(tmpl.chaos.action, tmpl.chaos.params)
                ]
            man = tmpl.chaos.manifest
            if man is not None:
                for f in ("apiVersion", "kind"):
                    if not isinstance(man.get(f), str) or not man.get(f):
                        issues.append((("chaos", "manifest", f), "required"))
        else:
            field = CHAOS_MESH_KINDS[tmpl.templateType]
            if getattr(tmpl, field) is None:
                issues.append(((field,), f"{tmpl.templateType} template needs {field}"))
        if tmpl.duration is None and not is_one_shot(tmpl):
            issues.append(
                (
                    ("duration",),
                    "chaos needs a duration (Chaos Mesh format: deadline) unless it is one-shot; "
                    "without one it would never end",
                )
            )
        return issues
