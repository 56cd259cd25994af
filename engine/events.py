"""Kubernetes Events for Workflows, with the reasons users know from Chaos Mesh.

Phase listeners (engine thread) call :meth:`EventRecorder.node_changed` / ``workflow_changed``;
those only enqueue (bounded: beyond ``max_queue`` events are dropped and counted). A background
thread posts ``core/v1`` Events at a bounded rate (token bucket), each naming the Workflow as its
``involvedObject``. Reasons: EntryCreated, NodesCreated, ChaosCRCreated, ChaosCRDeleted,
TaskPodSpawned, TaskPodCompleted, ConditionalBranchesSelected, NodeDeadlineExceed,
ParentNodeDeadlineExceed, NodeAccomplished, NodeFailed, ParentNodeAborted, WorkflowAccomplished,
WorkflowFailed, WorkflowAborted.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from typing import Any

from actors.base import ActorError
from actors.kube.playground import KubePlayground
from actors.kube.ratelimit import TokenBucket
from engine.clock import rfc3339
from engine.model import API_VERSION, CHAOS_MESH_KINDS
from engine.phases import NodePhase, WorkflowPhase
from engine.runtime import Node, WorkflowRun

log = logging.getLogger("chaosflow.events")
P = NodePhase

CHAOS_KINDS = frozenset({"Chaos", *CHAOS_MESH_KINDS})


def node_reasons(run: WorkflowRun, node: Node, old: NodePhase) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events a node phase change warrants."""
    out: list[tuple[str, str, str]] = []
    new = node.phase
    if old is P.INIT:
        if node.name == run.entry_node:
            out.append(("Normal", "EntryCreated", f"entry node {node.name} created"))
        else:
            out.append(("Normal", "NodesCreated", f"node {node.name} created by {node.parent}"))
    if node.kind in CHAOS_KINDS:
        ref = node.state.get("object") or {}
        what = f"{ref.get('kind')} {ref.get('name')}"
        if new is P.HOLDING:
            out.append(("Normal", "ChaosCRCreated", f"{node.name}: {what} injected"))
        elif new.finished and (node.state.get("deleting") or node.state.get("awaitGone")):
            out.append(("Normal", "ChaosCRDeleted", f"{node.name}: {what} deleted"))
    if node.kind == "Task":
        if new is P.RUNNING and old is P.INIT:
            pod = (node.state.get("pod") or {}).get("name")
            out.append(("Normal", "TaskPodSpawned", f"{node.name}: pod {pod}"))
        elif new is P.EVALUATING:
            out.append(
                ("Normal", "TaskPodCompleted", f"{node.name}: exit code {node.outputs.get('exitCode')}")
            )
        elif new is P.WAITING_FOR_CHILD and old is P.WAITING_FOR_SCHEDULE:
            out.append(("Normal", "ConditionalBranchesSelected", f"{node.name}: {', '.join(node.children)}"))
    if new.finished:
        reason = node.reason or ""
        if reason == "DeadlineExceeded":
            out.append(("Warning", "NodeDeadlineExceed", f"{node.name}: {node.message}"))
        elif reason == "ParentStopped" and "deadline" in node.message:
            out.append(("Warning", "ParentNodeDeadlineExceed", f"{node.name}: {node.message}"))
        elif reason in ("ParentStopped", "Aborted") and run.abort_requested:
            out.append(("Normal", "ParentNodeAborted", f"{node.name}: {node.message}"))
        elif new is P.SUCCEED:
            out.append(("Normal", "NodeAccomplished", f"{node.name} accomplished"))
        else:
            out.append(("Warning", "NodeFailed", f"{node.name}: {node.message}"))
    return out


def workflow_reasons(run: WorkflowRun) -> list[tuple[str, str, str]]:
    if run.phase is WorkflowPhase.SUCCEED:
        return [("Normal", "WorkflowAccomplished", f"workflow {run.name} accomplished")]
    if run.phase is WorkflowPhase.FAILED:
        if run.abort_requested:
            return [("Warning", "WorkflowAborted", run.message or "aborted")]
        return [("Warning", "WorkflowFailed", run.message or "failed")]
    return []


class EventRecorder:
    def __init__(
        self,
        playground: KubePlayground,
        cluster: str = "default",
        component: str = "chaosflow-controller",
        *,
        qps: float = 10.0,
        burst: int = 50,
        max_queue: int = 1000,
    ) -> None:
        self.pg = playground
        self.cluster = cluster
        self.component = component
        self.host = ""
        self.uids: dict[str, str] = {}  # workflow key -> uid (set by the controller)
        self._q: queue.Queue[dict[str, Any] | None] = queue.Queue(max_queue)
        self._bucket = TokenBucket(qps, burst)
        self.dropped = 0
        self.posted = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="chaosflow-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        with contextlib.suppress(queue.Full):
            self._q.put_nowait(None)
        self._thread.join(timeout)

    # --- listeners (engine thread: enqueue only) ---------------------------------------------------
    def node_changed(self, run: WorkflowRun, node: Node, old: NodePhase) -> None:
        for etype, reason, msg in node_reasons(run, node, old):
            self.emit(run, etype, reason, msg)

    def workflow_changed(self, run: WorkflowRun) -> None:
        for etype, reason, msg in workflow_reasons(run):
            self.emit(run, etype, reason, msg)

    def emit(self, run: WorkflowRun, etype: str, reason: str, message: str) -> None:
        self.emit_for(run.namespace, run.name, etype, reason, message)

    def emit_for(self, namespace: str, name: str, etype: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": API_VERSION,
            "kind": "Workflow",
            "namespace": namespace,
            "name": name,
            "uid": self.uids.get(f"{namespace}/{name}", ""),
        }
        self.emit_object(involved, etype, reason, message, labels={"chaosflow.io/workflow": name})

    def emit_object(
        self,
        involved: dict[str, Any],
        etype: str,
        reason: str,
        message: str,
        labels: dict[str, str] | None = None,
    ) -> None:
        """An Event about any object (``involved``: apiVersion, kind, namespace, name, uid)."""
        now = rfc3339(time.time())
        name = str(involved["name"])
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{name}.{uuid.uuid4().hex[:16]}",
                "namespace": involved["namespace"],
                "labels": dict(labels or {}),
            },
            "involvedObject": dict(involved),
            "type": etype,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._q.put_nowait(ev)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            ev = self._q.get()
            if ev is None:
                return
            self._bucket.acquire()
            try:
                self.pg.create(self.cluster, ev)
                self.posted += 1
            except ActorError as e:
                self.failed += 1
                log.debug("event %s not posted: %s", ev["reason"], e)
