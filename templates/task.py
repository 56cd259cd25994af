"""Task: run a container in a Pod, evaluate conditional branches on its result, run the true ones.

Phases: Init -> Running (pod) -> Evaluating -> WaitingForSchedule -> WaitingForChild -> Succeed.

| event \\ phase           | Init               | Running                          | Evaluating             | WaitingForSchedule | WaitingForChild |
|-------------------------|--------------------|----------------------------------|------------------------|--------------------|-----------------|
| NodeCreated             | create the workflow ConfigMap -> Running | -              | -                      | -                  | -               |
| NodeActionDone          | -                  | ConfigMap created: create pod    | -                      | -                  | -               |
| NodePodCreated          | -                  | observe the pod                  | -                      | -                  | -               |
| NodeObjectChanged       | -                  | pod ended: collect exit code and logs; pod gone: -> Failed | - | -            | -               |
| NodePodFinished         | -                  | -> Evaluating                    | -                      | -                  | -               |
| NodeEvaluate            | -                  | -                                | branches -> WaitingForSchedule; error -> Failed | - | -         |
| NodePickChildToSchedule | -                  | -                                | -                      | create the true branches -> WaitingForChild; none -> Succeed | - |
| ChildNodeSucceed/Failed | -                  | -                                | -                      | -                  | as Parallel     |

Unlike Chaos Mesh: a pod that exits non-zero fails the node unless a conditional branch handled
the result (chaos-mesh #2407); ``task: {}`` is rejected at validation (#3092); a broken branch
expression fails the node with the error instead of stalling it; a pod that vanishes before it
finished fails the node and is not re-created, so side effects never repeat (#4878). The pod gets
the restricted security context unless the container sets its own.

Downward API (the seed's design, never built in Chaos Mesh): before the pod, a ConfigMap
``<object name>-workflow`` is created with the workflow as JSON (spec + status snapshot at task
start; the node list is left out beyond ~900 KB), mounted read-only at
``/var/run/chaos-mesh/workflow.json``; it carries the chaosflow labels and is deleted when the pod
has finished (or the task is stopped).

Outputs (``nodes.<task>.outputs``): ``exitCode`` (-1 when the container never reported one),
``stdout`` and ``failed`` (true when the task itself failed: a non-zero exit no branch handled, a
vanished pod, a pod that could not be created) — visible to later steps and exit handlers.
The container's fields may hold ``{{ expr }}``, rendered when the node starts.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from engine.expr import ExprError, check_syntax
from engine.model import LABEL_NODE, LABEL_TEMPLATE, LABEL_WORKFLOW
from engine.phases import Act, Effect, Event, Notify, Observe, StopRequest, Transition
from engine.render import rendered
from engine.schedulers import TaskScheduler
from templates.base import (
    IGNORED,
    CompositeMachine,
    E,
    P,
    child_failed_fail_fast,
    create_children,
    finish,
    finish_stopped,
)

if TYPE_CHECKING:
    from engine.model import Template
    from engine.runtime import Node, WorkflowRun

RESTRICTED_CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


DOWNWARD_API_DIR = "/var/run/chaos-mesh"
DOWNWARD_API_KEY = "workflow.json"
DOWNWARD_API_VOLUME = "chaosflow-workflow"
#: a ConfigMap holds at most 1 MiB; beyond this the snapshot leaves out the node list
MAX_SNAPSHOT_BYTES = 900_000


def _labels(run: WorkflowRun, node: Node, tmpl: Template) -> dict[str, str]:
    return {LABEL_WORKFLOW: run.name, LABEL_NODE: node.name, LABEL_TEMPLATE: tmpl.name}


def workflow_snapshot(run: WorkflowRun) -> str:
    """The workflow as JSON (spec + status now), for the task's Downward API file."""
    obj = run.to_object()
    text = json.dumps(obj, separators=(",", ":"))
    if len(text) > MAX_SNAPSHOT_BYTES:
        status = obj["status"]
        status["nodesOmitted"] = len(status.get("nodes") or [])
        status["nodes"] = []
        text = json.dumps(obj, separators=(",", ":"))
    return text


def config_map_ref(run: WorkflowRun, node: Node) -> dict[str, Any]:
    return {
        "cluster": "default",
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "namespace": run.namespace,
        "name": f"{run.object_name(node)}-workflow",
    }


def workflow_config_map(run: WorkflowRun, node: Node, tmpl: Template) -> dict[str, Any]:
    ref = config_map_ref(run, node)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ref["name"], "namespace": ref["namespace"], "labels": _labels(run, node, tmpl)},
        "data": {DOWNWARD_API_KEY: workflow_snapshot(run)},
    }


def task_pod(run: WorkflowRun, node: Node, tmpl: Template) -> dict[str, Any]:
    assert tmpl.task is not None and tmpl.task.container is not None  # validated
    container = dict(rendered(node, "task.container", tmpl.task.container))  # {{ }} rendered at start
    container.setdefault("name", "task")
    pod_sc: dict[str, Any] = {}
    if "securityContext" not in container:
        container["securityContext"] = RESTRICTED_CONTAINER_SECURITY_CONTEXT
        pod_sc = RESTRICTED_POD_SECURITY_CONTEXT
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": DOWNWARD_API_VOLUME, "mountPath": DOWNWARD_API_DIR, "readOnly": True},
    ]
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if pod_sc:
        spec["securityContext"] = pod_sc
    spec["volumes"] = [
        *tmpl.task.volumes,
        {"name": DOWNWARD_API_VOLUME, "configMap": {"name": config_map_ref(run, node)["name"]}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": run.object_name(node),
            "namespace": run.namespace,
            "labels": {**tmpl.task.labels, **_labels(run, node, tmpl)},
        },
        "spec": spec,
    }


def pod_ref(run: WorkflowRun, node: Node) -> dict[str, Any]:
    return {
        "cluster": "default",
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": run.namespace,
        "name": run.object_name(node),
    }


def _observe(ref: dict[str, Any]) -> Observe:
    return Observe(ref["cluster"], ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"])


def _create_config_map(run: WorkflowRun, node: Node) -> Act:
    cm = workflow_config_map(run, node, run.template(node))
    return Act("object.create", {**config_map_ref(run, node), "object": cm}, ok=E.NODE_ACTION_DONE)


def _create_pod(run: WorkflowRun, node: Node) -> Act:
    pod = task_pod(run, node, run.template(node))
    return Act("object.create", {**node.state["pod"], "object": pod}, ok=E.NODE_POD_CREATED)


def _delete_config_map(node: Node) -> list[Effect]:
    """Delete the Downward API ConfigMap (its result is ignored: the node has moved on)."""
    ref = node.state.get("configMap")
    if ref is None or node.state.get("configDeleted"):
        return []
    return [Act("object.delete", ref, ok=E.NODE_CHAOS_CLEANED, fail=E.NODE_CHAOS_CLEANED)]


def _failed_outputs() -> dict[str, Any]:
    return {"exitCode": -1, "stdout": "", "failed": True}


def on_created(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    return Transition(
        P.RUNNING,
        [_create_config_map(run, node)],
        state={"pod": pod_ref(run, node), "configMap": config_map_ref(run, node)},
    )


def on_config_created(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if node.state.get("configCreated"):
        return IGNORED
    return Transition(None, [_create_pod(run, node)], state={"configCreated": True})


def on_pod_created(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if node.state.get("podCreated"):
        return IGNORED
    return Transition(None, [_observe(node.state["pod"])], state={"podCreated": True})


def on_pod_changed(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    if node.state.get("collecting"):
        return IGNORED
    pod = ev.payload
    if pod is None:
        tr = finish(
            False,
            "task pod vanished before it finished; it is not re-created (one-shot task)",
            "PodVanished",
        )
        tr.effects += _delete_config_map(node)
        tr.outputs = _failed_outputs()
        return tr
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return IGNORED
    return Transition(
        None, [Act("task.collect", node.state["pod"], ok=E.NODE_POD_FINISHED)], state={"collecting": True}
    )


def on_pod_finished(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    result = ev.payload or {}
    # a trailing newline (from `echo`) is dropped so Chaos Mesh expressions like stdout == "x" hold
    outputs = {
        "exitCode": int(result.get("exitCode", 0)),
        "stdout": str(result.get("stdout", "")).rstrip("\n"),
    }
    return Transition(
        P.EVALUATING,
        [Notify(E.NODE_EVALUATE), *_delete_config_map(node)],  # the pod is done: its ConfigMap too
        state={"result": outputs, "configDeleted": True},
        outputs=outputs,
    )


def on_evaluate(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    tmpl = run.template(node)
    result = node.state.get("result") or {"exitCode": 0, "stdout": ""}
    branches = tmpl.conditionalBranches or []
    try:
        selected, status = TaskScheduler.evaluate(branches, result)
    except ExprError as e:
        tr = finish(False, f"evaluating conditional branches: {e}", "ExpressionError")
        tr.outputs = {"failed": True}
        return tr
    code = result["exitCode"]
    if code != 0 and not selected:
        tr = finish(False, f"task exited with code {code}", "TaskFailed")
        tr.outputs = {"failed": True}
        return tr
    return Transition(
        P.WAITING_FOR_SCHEDULE,
        [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)],
        state={"selected": selected, "branches": status},
        outputs={"failed": False},
    )


def on_pick(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    nxt = TaskScheduler.schedule_next(node, run)
    if not nxt:
        return finish(True)
    return Transition(P.WAITING_FOR_CHILD, [create_children(nxt)])


def on_child_succeed(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    stopped = m.after_stop_progress(node, run)
    if stopped is not None:
        return stopped
    if run.active_children(node):
        return IGNORED
    return finish(True)


def on_action_failed(m: TaskMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    what = "task pod" if node.state.get("configCreated") else "task workflow ConfigMap"
    tr = finish(False, f"{what}: {ev.payload}", "TaskPodFailed")
    tr.effects += _delete_config_map(node)
    tr.outputs = _failed_outputs()
    return tr


class TaskMachine(CompositeMachine):
    kind = "Task"
    leaf = True  # holds a parallelism slot while its pod runs (not while its branches run)
    phases = frozenset(
        {P.INIT, P.RUNNING, P.EVALUATING, P.WAITING_FOR_SCHEDULE, P.WAITING_FOR_CHILD, P.SUCCEED, P.FAILED}
    )
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.RUNNING, E.NODE_ACTION_DONE): on_config_created,
        (P.RUNNING, E.NODE_POD_CREATED): on_pod_created,
        (P.RUNNING, E.NODE_OBJECT_CHANGED): on_pod_changed,
        (P.RUNNING, E.NODE_POD_FINISHED): on_pod_finished,
        (P.RUNNING, E.NODE_ACTION_FAILED): on_action_failed,
        (P.EVALUATING, E.NODE_EVALUATE): on_evaluate,
        (P.WAITING_FOR_SCHEDULE, E.NODE_PICK_CHILD_TO_SCHEDULE): on_pick,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_SUCCEED): on_child_succeed,
        (P.WAITING_FOR_CHILD, E.CHILD_NODE_FAILED): child_failed_fail_fast,
    }

    def holds_slot(self, node: Node) -> bool:
        return node.phase is P.RUNNING

    def stop(self, node: Node, req: StopRequest, run: WorkflowRun, now: float) -> Transition:
        if node.phase is P.RUNNING:
            tr = finish_stopped(req)
            tr.effects.append(Act("object.delete", node.state["pod"], ok=E.NODE_CHAOS_CLEANED))
            tr.effects += _delete_config_map(node)
            return tr
        if node.phase in (P.INIT, P.EVALUATING):
            return finish_stopped(req)
        return super().stop(node, req, run, now)

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        st = node.state
        if node.phase is P.RUNNING:
            if st.get("collecting"):
                effects.append(Act("task.collect", st["pod"], ok=E.NODE_POD_FINISHED))
            elif st.get("podCreated"):
                effects.append(_observe(st["pod"]))
            elif st.get("configCreated") or "configMap" not in st:
                effects.append(_create_pod(run, node))
            else:
                effects.append(_create_config_map(run, node))
        elif node.phase is P.EVALUATING:
            effects.append(Notify(E.NODE_EVALUATE))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if tmpl.task is None:
            return [(("task",), "Task template needs task.container")]
        c = tmpl.task.container
        if not c:
            issues.append((("task", "container"), "Task template needs a container"))
        elif not isinstance(c.get("image"), str) or not c.get("image"):
            issues.append((("task", "container", "image"), "required"))
        for i, b in enumerate(tmpl.conditionalBranches or []):
            err = check_syntax(b.expression)
            if err:
                issues.append((("conditionalBranches", i, "expression"), err))
        return issues
