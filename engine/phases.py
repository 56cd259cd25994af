"""The vocabulary of the node-tree state machine: phases, events and effects.

Everything here is plain data. A template kind's state machine (``templates/<kind>.py``) is a pure
function ``(node, event, ctx) -> Transition``; the WorkflowManager applies the transition: it sets
the phase, merges state, and carries out the effects (notify, delayed notify, create children, run
an actor, observe an object). Phases and events are the ones of the Chaos Mesh Workflow design
(``seeds/chaos-mesh-workflow-internal-design.md``) plus the few we add for deadlines, abort and
actor results.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class NodePhase(enum.StrEnum):
    INIT = "Init"
    WAITING_FOR_SCHEDULE = "WaitingForSchedule"
    WAITING_FOR_CHILD = "WaitingForChild"
    RUNNING = "Running"
    EVALUATING = "Evaluating"
    HOLDING = "Holding"
    SUCCEED = "Succeed"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        return self is NodePhase.SUCCEED or self is NodePhase.FAILED


FINISHED_PHASES = frozenset({NodePhase.SUCCEED, NodePhase.FAILED})


class WorkflowPhase(enum.StrEnum):
    INIT = "Init"
    RUNNING = "Running"
    SUCCEED = "Succeed"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        return self is WorkflowPhase.SUCCEED or self is WorkflowPhase.FAILED


class EventType(enum.StrEnum):
    # --- the seed's events -------------------------------------------------------------------
    NODE_CREATED = "NodeCreated"
    NODE_PICK_CHILD_TO_SCHEDULE = "NodePickChildToSchedule"
    CHILD_NODE_SUCCEED = "ChildNodeSucceed"
    CHILD_NODE_FAILED = "ChildNodeFailed"
    NODE_HOLDING_AWAKE = "NodeHoldingAwake"
    NODE_CHAOS_INJECTED = "NodeChaosInjected"
    NODE_CHAOS_CLEANED = "NodeChaosCleaned"
    # --- ours ----------------------------------------------------------------------------------
    NODE_DEADLINE_EXCEEDED = "NodeDeadlineExceeded"
    NODE_ABORT = "NodeAbort"  # payload: StopRequest; abort and parent deadline propagate with it
    NODE_ACTION_FAILED = "NodeActionFailed"  # an actor call failed; payload: message
    NODE_OBJECT_CHANGED = "NodeObjectChanged"  # an observed object changed; payload: object|None
    NODE_POD_CREATED = "NodePodCreated"
    NODE_POD_FINISHED = "NodePodFinished"  # payload: {"exitCode": int, "stdout": str}
    NODE_RESUME = "NodeResume"  # manual resume of a suspended node
    NODE_EVALUATE = "NodeEvaluate"  # Task: evaluate conditional branches (phase Evaluating)
    NODE_RETRY = "NodeRetry"  # retry a failed actor call (e.g. chaos cleanup) after a backoff
    NODE_ACTION_DONE = "NodeActionDone"  # an actor call succeeded (Resource); payload: its result
    NODE_TIMEOUT = "NodeTimeout"  # a kind's own timeout (Resource, Wait) is due
    NODE_PROBE = "NodeProbe"  # StatusCheck: a probe is due
    NODE_PROBE_RESULT = "NodeProbeResult"  # StatusCheck: a probe's result; payload: the result
    NODE_WORKFLOW_SUBMITTED = "NodeWorkflowSubmitted"  # child Workflow submitted/found; payload: status
    NODE_WORKFLOW_FINISHED = "NodeWorkflowFinished"  # child Workflow finished; payload: status
    # --- workflow-level (node is None) ---------------------------------------------------------
    WORKFLOW_START = "WorkflowStart"
    WORKFLOW_DEADLINE_EXCEEDED = "WorkflowDeadlineExceeded"
    WORKFLOW_ABORT = "WorkflowAbort"


class StopReason(enum.StrEnum):
    ABORTED = "Aborted"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PARENT_STOPPED = "ParentStopped"
    SIBLING_FAILED = "SiblingFailed"
    CHILD_FAILED = "ChildFailed"


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Why a node is asked to stop, and how it should end once its cleanup is done."""

    reason: StopReason
    message: str
    succeed: bool = False  # end in Succeed (e.g. a deadline used as a lifetime) instead of Failed
    cleanup: bool = True  # False = terminate: skip cleanup handlers (chaos is still removed)


@dataclass(slots=True)
class Event:
    workflow: str
    node: str | None
    type: EventType
    payload: Any = None
    enqueued: float = 0.0  # perf_counter() at enqueue, for queue latency

    def key(self) -> tuple[str, str | None]:
        return (self.workflow, self.node)


# --- effects a transition may ask for ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Notify:
    """Enqueue ``type`` for ``node`` (None = the node itself) now."""

    type: EventType
    node: str | None = None
    payload: Any = None


@dataclass(frozen=True, slots=True)
class NotifyParent:
    type: EventType
    payload: Any = None


@dataclass(frozen=True, slots=True)
class NotifyAt:
    """Enqueue ``type`` for the node itself at absolute clock time ``at``."""

    type: EventType
    at: float
    payload: Any = None


@dataclass(frozen=True, slots=True)
class CreateChildren:
    """Instantiate nodes for ``templates`` under this node, then send each NodeCreated in order.

    ``state`` (optional) is the new nodes' initial state, e.g. the exit-handler mark.
    """

    templates: tuple[str, ...]
    state: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StopChildren:
    """Send NodeAbort with ``request`` to every unfinished child."""

    request: StopRequest


@dataclass(frozen=True, slots=True)
class Act:
    """Run actor ``action`` with ``params`` through the Playground.

    The result comes back to this node as event ``ok`` (payload: the actor's result) or
    ``fail`` (payload: error message). Actors are idempotent, so re-running after a crash is safe.
    """

    action: str
    params: dict[str, Any]
    ok: EventType
    fail: EventType = EventType.NODE_ACTION_FAILED


@dataclass(frozen=True, slots=True)
class Observe:
    """Deliver NodeObjectChanged to this node whenever the object changes (until it finishes)."""

    cluster: str
    api_version: str
    kind: str
    namespace: str | None
    name: str


@dataclass(frozen=True, slots=True)
class ObserveKind:
    """Deliver NodeObjectChanged with an :class:`ObservedLists` payload to this node now and
    whenever an object of the kind that matches (namespace, label selector, name) changes,
    appears or disappears (until the node finishes). ``key`` names this set in the payload, so a
    node can observe several sets; observing the same key again replaces it."""

    cluster: str
    api_version: str
    kind: str
    namespace: str | None = None  # None = all namespaces
    label_selector: str | None = None  # Kubernetes selector syntax; None = every object
    name: str | None = None  # only the object with this name
    key: str = ""


@dataclass(frozen=True, slots=True)
class ObservedLists:
    """Payload of NodeObjectChanged for ObserveKind: every observed set of the node, by key; each
    list holds the matching objects sorted by namespace/name."""

    lists: dict[str, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class DropChildren:
    """Forget finished children (and their descendants): remove them from ``run.nodes`` and
    ``node.children`` (bounded history, e.g. a Loop's ``historyLimit``)."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubmitWorkflow:
    """Submit ``workflow`` (a Workflow document) as a child run of this node, or find it.

    Idempotent by name: if a run with that namespace/name exists and carries this node's
    parent labels it is reported (never started twice); one started by someone else is an error.
    The result comes back as ``ok`` (payload: ``{"workflow", "phase", "message"}``) or ``fail``.
    """

    workflow: dict[str, Any]
    seed: int | None = None
    ok: EventType = EventType.NODE_WORKFLOW_SUBMITTED
    fail: EventType = EventType.NODE_ACTION_FAILED


@dataclass(frozen=True, slots=True)
class AbortWorkflow:
    """Abort the workflow ``key`` (``namespace/name``; a child or the node's own workflow)."""

    key: str
    message: str
    terminate: bool = False


Effect = (
    Notify
    | NotifyParent
    | NotifyAt
    | CreateChildren
    | StopChildren
    | Act
    | Observe
    | ObserveKind
    | DropChildren
    | SubmitWorkflow
    | AbortWorkflow
)


@dataclass(frozen=True, slots=True)
class Observation:
    """Something a node observed, told live to the manager's ``observation_listeners`` (logs,
    metrics) when the transition is applied; it changes nothing in the run. ``what`` names it
    (StatusCheck: ``conditionChanged``, ``healthChanged``; Wait: ``objectsChanged``), ``data`` is
    plain data."""

    what: str
    data: dict[str, Any]


@dataclass(slots=True)
class Transition:
    """The result of one state-machine step. ``phase`` None = unchanged."""

    phase: NodePhase | None = None
    effects: list[Effect] = field(default_factory=list)
    state: dict[str, Any] | None = None  # merged into node.state
    outputs: dict[str, Any] | None = None  # merged into node.outputs (visible as nodes.<template>.outputs)
    message: str | None = None
    reason: str | None = None
    observations: tuple[Observation, ...] = ()  # for observation listeners only (no engine effect)


IGNORED = Transition()
