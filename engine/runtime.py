"""Runtime structures the engine works on: a Node per running template, a WorkflowRun per workflow.

These are deliberately light (slotted dataclasses, plain dicts) because the hot path handles
tens of thousands of transitions per second; the pydantic models are parsed once per workflow.
Node ``state`` holds everything a kind needs to resume after a crash (absolute due times, object
references, flags) and must stay JSON-serializable.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.clock import rfc3339
from engine.duration import DurationRange
from engine.expr import FunctionSet
from engine.model import NodeStatus, Template, Workflow, WorkflowStatus
from engine.phases import Event, NodePhase, StopReason, StopRequest, WorkflowPhase


@dataclass(slots=True)
class Node:
    name: str
    template: str
    kind: str
    parent: str | None
    phase: NodePhase = NodePhase.INIT
    children: list[str] = field(default_factory=list)
    start_time: float | None = None
    finish_time: float | None = None
    message: str = ""
    reason: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)

    def to_status(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "templateName": self.template,
            "templateType": self.kind,
            "phase": self.phase.value,
            "parent": self.parent,
            "children": list(self.children),
            "startTime": rfc3339(self.start_time),
            "finishTime": rfc3339(self.finish_time),
            "message": self.message,
        }
        if self.reason:
            d["reason"] = self.reason
        if "exitFor" in self.state:
            d["exitHandler"] = True  # runs because the workflow or the node exitFor ended
        if self.outputs:
            d["outputs"] = self.outputs
        if self.state:
            d["state"] = self.state
        return d

    @classmethod
    def from_status(cls, d: dict[str, Any], times: dict[str, float | None]) -> Node:
        return cls(
            name=d["name"],
            template=d["templateName"],
            kind=d["templateType"],
            parent=d.get("parent"),
            phase=NodePhase(d["phase"]),
            children=list(d.get("children") or []),
            start_time=times.get("start"),
            finish_time=times.get("finish"),
            message=d.get("message") or "",
            reason=d.get("reason"),
            state=dict(d.get("state") or {}),
            outputs=dict(d.get("outputs") or {}),
        )


def stop_to_dict(req: StopRequest) -> dict[str, Any]:
    return {
        "reason": req.reason.value,
        "message": req.message,
        "succeed": req.succeed,
        "cleanup": req.cleanup,
    }


def stop_from_dict(d: dict[str, Any]) -> StopRequest:
    return StopRequest(
        StopReason(d["reason"]), d["message"], bool(d["succeed"]), bool(d.get("cleanup", True))
    )


class WorkflowRun:
    """One workflow being driven by the engine: its spec, its nodes and its random source."""

    __slots__ = (
        "abort_requested",
        "deadline_at",
        "entry_node",
        "exit_node",
        "finish_time",
        "functions",
        "gated",
        "held",
        "key",
        "latest",
        "message",
        "name",
        "namespace",
        "node_counter",
        "nodes",
        "parallelism",
        "phase",
        "rng",
        "seed",
        "slot_queue",
        "slots",
        "start_plans",
        "start_time",
        "suspended",
        "suspended_nodes",
        "templates",
        "terminated",
        "transitions",
        "workflow",
    )

    def __init__(self, workflow: Workflow, seed: int | None = None) -> None:
        self.workflow = workflow
        self.name = workflow.name
        self.namespace = workflow.namespace
        self.key = f"{self.namespace}/{self.name}"
        self.templates: dict[str, Template] = workflow.template_map()
        self.nodes: dict[str, Node] = {}
        self.latest: dict[str, Node] = {}  # template name -> its latest finished node
        self.phase = WorkflowPhase.INIT
        self.start_time: float | None = None
        self.finish_time: float | None = None
        self.deadline_at: float | None = None
        self.entry_node: str | None = None
        self.message = ""
        self.node_counter = 0
        self.seed = (
            seed if seed is not None else (workflow.spec.seed if workflow.spec.seed is not None else 0)
        )
        self.rng = random.Random(self.seed)
        self.functions: FunctionSet | None = None  # CEL functions bound to rng and clock (set by the manager)
        self.transitions = 0
        self.abort_requested = False
        # --- workflow-level features (engine/manager.py, engine/control.py) ---
        self.exit_node: str | None = None  # the node running spec.onExit
        self.terminated = False  # terminate: exit handlers are skipped
        self.suspended = False  # the whole workflow is suspended: nothing new starts
        self.suspended_nodes: set[str] = set()  # suspended subtrees
        self.parallelism = workflow.spec.parallelism or 0  # max running leaf nodes; 0 = unlimited
        self.slots: set[str] = set()  # leaf nodes holding a parallelism slot
        self.slot_queue: deque[str] = deque()  # leaf nodes waiting for a slot, in creation order
        self.held: list[Event] = []  # events held while suspended (re-sent on unsuspend)
        self.start_plans: dict[str, Any] = {}  # template -> what to evaluate at node start (cache)
        self.gated = bool(self.parallelism)  # any of the above needs the manager's start gate

    # --- helpers used by the state machines (read-only apart from the rng) ---------------------
    def template(self, node: Node) -> Template:
        return self.templates[node.template]

    def draw(self, spec: float | DurationRange) -> float:
        """A duration from a fixed value or a range, drawn from the workflow's seeded source."""
        if isinstance(spec, DurationRange):
            return spec.draw(self.rng)
        return float(spec)

    def duration(self, node: Node) -> float:
        """The node's ``duration``: rendered when the node started (a ``{{ }}`` string), or drawn."""
        rendered = node.state.get("rendered")
        if rendered is not None and "duration" in rendered:
            return float(rendered["duration"])
        spec = self.templates[node.template].duration
        assert spec is not None and not isinstance(spec, str)  # validated / rendered at start
        return self.draw(spec)

    def update_gate(self) -> None:
        self.gated = bool(self.parallelism or self.suspended or self.suspended_nodes)

    def is_suspended(self, node: Node) -> bool:
        """Whether the workflow, the node or one of its ancestors is suspended — exit handlers
        (and everything under them) are cleanup and never held."""
        if not self.suspended and not self.suspended_nodes:
            return False
        sus = self.suspended_nodes
        held = self.suspended
        nodes = self.nodes
        n: Node | None = node
        while n is not None:
            if "exitFor" in n.state:
                return False
            if n.name in sus:
                held = True
            n = nodes.get(n.parent) if n.parent is not None else None
        return held

    def active_children(self, node: Node) -> list[str]:
        nodes = self.nodes
        return [c for c in node.children if not nodes[c].phase.finished]

    def child_phase(self, name: str) -> NodePhase:
        return self.nodes[name].phase

    def new_node_name(self, template: str) -> str:
        n = self.node_counter
        self.node_counter = n + 1
        return f"{template}-{n}"

    def object_name(self, node: Node) -> str:
        """A deterministic, DNS-1123 name for objects a node creates (<= 63 characters)."""
        from engine.naming import object_name

        return object_name(self.name, node.name)

    # --- status ----------------------------------------------------------------------------------
    def progress(self) -> str:
        done = sum(1 for n in self.nodes.values() if n.phase.finished)
        return f"{done}/{len(self.nodes)}"

    def status(self) -> WorkflowStatus:
        extra: dict[str, Any] = {}
        if self.exit_node is not None:
            extra["exitNode"] = self.exit_node
        if self.suspended or self.suspended_nodes:
            extra["suspended"] = True if self.suspended else sorted(self.suspended_nodes)
        return WorkflowStatus(
            phase=self.phase.value,
            startTime=rfc3339(self.start_time),
            finishTime=rfc3339(self.finish_time),
            entryNode=self.entry_node,
            message=self.message,
            progress=self.progress(),
            nodes=[NodeStatus.model_validate(n.to_status()) for n in self.nodes.values()],
            **extra,
        )

    def to_object(self) -> dict[str, Any]:
        """The Workflow object with its status, as `chaosflow run --output json` prints it."""
        obj = self.workflow.model_dump(mode="json", exclude_none=True, exclude={"status"})
        obj["status"] = self.status().model_dump(mode="json")
        return obj


# --- persistence ---------------------------------------------------------------------------------
def control_fields(run: WorkflowRun) -> dict[str, Any]:
    """Workflow-level state a restart needs beyond the nodes: the exit handler node, terminate and
    suspension flags (every store persists these; see :func:`restore_control_fields`)."""
    return {
        "exitNode": run.exit_node,
        "terminated": run.terminated,
        "suspended": run.suspended,
        "suspendedNodes": sorted(run.suspended_nodes),
    }


def restore_control_fields(run: WorkflowRun, d: dict[str, Any]) -> None:
    run.exit_node = d.get("exitNode")
    run.terminated = bool(d.get("terminated", False))
    run.suspended = bool(d.get("suspended", False))
    run.suspended_nodes = set(d.get("suspendedNodes") or ())
    run.update_gate()


def run_to_record(run: WorkflowRun) -> dict[str, Any]:
    """Everything needed to continue a run after a crash (JSON-serializable)."""
    version, internal, gauss = run.rng.getstate()
    return {
        "workflow": run.workflow.model_dump(mode="json", exclude_none=True, exclude={"status"}),
        "phase": run.phase.value,
        "startTime": run.start_time,
        "finishTime": run.finish_time,
        "deadlineAt": run.deadline_at,
        "entryNode": run.entry_node,
        "message": run.message,
        "nodeCounter": run.node_counter,
        "seed": run.seed,
        "rng": [version, list(internal), gauss],
        "abortRequested": run.abort_requested,
        **control_fields(run),
        "nodes": [{**n.to_status(), "t": [n.start_time, n.finish_time]} for n in run.nodes.values()],
    }


def run_from_record(rec: dict[str, Any]) -> WorkflowRun:
    wf = Workflow.model_validate(rec["workflow"])
    run = WorkflowRun(wf, seed=rec["seed"])
    run.phase = WorkflowPhase(rec["phase"])
    run.start_time = rec["startTime"]
    run.finish_time = rec["finishTime"]
    run.deadline_at = rec["deadlineAt"]
    run.entry_node = rec["entryNode"]
    run.message = rec["message"]
    run.node_counter = rec["nodeCounter"]
    run.abort_requested = rec.get("abortRequested", False)
    restore_control_fields(run, rec)
    version, internal, gauss = rec["rng"]
    run.rng.setstate((version, tuple(internal), gauss))
    for d in rec["nodes"]:
        start, finish = d.get("t") or [None, None]
        node = Node.from_status(d, {"start": start, "finish": finish})
        run.nodes[node.name] = node
        if node.phase.finished:
            run.latest[node.template] = node
    return run
