"""API models (pydantic v2) for chaosflow.io/v1alpha1 Workflow, and Chaos Mesh's Workflow as input.

The models are the schema users write and the shape the CRDs are generated from. The engine runs
on light runtime structures (``engine.runtime``); these models are parsed once per workflow.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
)

from engine.duration import _SPEC_SCHEMA as _DURATION_SPEC_SCHEMA
from engine.duration import Duration, DurationRange, DurationSpec, format_duration_spec, parse_duration_spec
from engine.kinds import CHAOS_MESH_KINDS  # noqa: F401  (re-exported)

GROUP = "chaosflow.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CHAOS_MESH_API_VERSION = "chaos-mesh.org/v1alpha1"

LABEL_WORKFLOW = f"{GROUP}/workflow"
LABEL_NODE = f"{GROUP}/node"
LABEL_TEMPLATE = f"{GROUP}/template"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=False)


class ObjectMeta(BaseModel):
    """The subset of metav1.ObjectMeta we read; other fields are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ConditionalBranch(_Model):
    target: str = Field(description="Name of the template to run when the expression holds.")
    expression: str = Field(
        description="CEL expression over exitCode (int) and stdout (string); Chaos Mesh syntax accepted."
    )


class TaskSpec(_Model):
    container: dict[str, Any] | None = Field(
        default=None,
        description="A core/v1 Container. Its securityContext defaults to the restricted profile.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)


class ChaosSpec(_Model):
    """Generic chaos: create any object in a named cluster, hold it, delete it."""

    cluster: str = Field(default="default", description="Name of the cluster to create the object in.")
    manifest: dict[str, Any] | None = Field(
        default=None,
        description="The object to create (apiVersion, kind, metadata, spec).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    action: str | None = Field(default=None, description="A named chaos actor from the registry.")
    params: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    oneShot: bool = Field(default=False, description="Complete once created; no hold, no delete.")


def _duration_or_template(value: Any) -> float | DurationRange | str:
    if isinstance(value, str) and "{{" in value:
        return value  # rendered when the node starts (engine.render.start_node)
    return parse_duration_spec(value)


def _dump_duration_or_template(value: float | DurationRange | str) -> str | dict[str, str]:
    return value if isinstance(value, str) else format_duration_spec(value)


#: A DurationSpec, or a ``{{ expr }}`` string rendered when the node starts (e.g. a parameter).
TemplatedDurationSpec = Annotated[
    float | DurationRange | str,
    PlainValidator(_duration_or_template),
    PlainSerializer(_dump_duration_or_template, return_type=str | dict[str, str]),
    WithJsonSchema(
        {
            "anyOf": [
                *_DURATION_SPEC_SCHEMA["anyOf"],
                {"type": "string", "description": 'A "{{ expr }}" rendered when the node starts.'},
            ]
        }
    ),
]


class Backoff(_Model):
    """Delay before each retry: ``duration * factor**(n-1)`` for retry n, at most ``cap``."""

    duration: DurationSpec = Field(description="Delay before the first retry (fixed or a range).")
    factor: float = Field(default=2.0, ge=1.0, description="Multiplier per further retry.")
    cap: Duration | None = Field(default=None, description="Upper bound of one delay.")
    maxDuration: Duration | None = Field(
        default=None,
        description="No retry starts later than this after the first attempt started.",
    )


class RetryStrategy(_Model):
    """Run the template again (a new attempt node) when an attempt fails."""

    limit: int | None = Field(
        default=None, ge=0, description="Retries after the first attempt (attempts = limit + 1)."
    )
    retryPolicy: Literal["Always", "OnFailure", "OnError"] = Field(
        default="OnFailure",
        description="OnFailure: the attempt's own failure (exit code, failure condition, deadline, "
        "expression); OnError: infrastructure errors (an actor call failed, the pod or object "
        "vanished, cleanup failed); Always: both. Stops (abort, sibling failure) never retry.",
    )
    backoff: Backoff | None = None


class Template(_Model):
    name: str
    templateType: str
    description: str | None = None
    deadline: Duration | None = Field(
        default=None, description="Maximum run time of the node; what happens then is onDeadline."
    )
    onDeadline: Literal["Fail", "Succeed"] = Field(
        default="Fail",
        description="Fail: the node fails at its deadline. Succeed: the deadline is a lifetime; "
        "active children are stopped (with cleanup) and the node succeeds.",
    )
    duration: TemplatedDurationSpec | None = Field(
        default=None, description="Suspend: how long to wait. Chaos: how long to hold the chaos."
    )
    parameters: dict[str, Any] | None = Field(
        default=None,
        description="name -> value, evaluated when the node starts (strings with {{ expr }} are "
        "rendered; a lone placeholder keeps its type); inputs.parameters.<name> for the node and "
        "its descendants.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    onExit: str | None = Field(
        default=None, description="Template run when this node ends for any reason (an exit handler)."
    )
    retryStrategy: RetryStrategy | None = None
    parallelism: int | None = Field(
        default=None, ge=1, description="Parallel: at most this many children run at once."
    )
    manual: bool | None = Field(
        default=None, description="Suspend: without a duration, wait until resumed (manual approval)."
    )
    endWith: list[str] | None = Field(
        default=None,
        description="Parallel: when a child of one of these templates succeeds, the other active "
        "children are stopped (with cleanup) and the Parallel succeeds once they ended.",
    )
    children: list[str] | None = None
    task: TaskSpec | None = None
    conditionalBranches: list[ConditionalBranch] | None = None
    chaos: ChaosSpec | None = None
    resource: ResourceSpec | None = None
    wait: WaitSpec | None = None
    loop: LoopSpec | None = None
    switch: SwitchSpec | None = None
    statusCheck: StatusCheckSpec | None = None
    abortWithStatusCheck: bool | None = Field(
        default=None, description="StatusCheck: a failed check aborts the whole workflow (with cleanup)."
    )
    workflow: ChildWorkflowSpec | None = None
    # Chaos Mesh inline chaos specs (one per chaos kind).
    podChaos: dict[str, Any] | None = None
    networkChaos: dict[str, Any] | None = None
    stressChaos: dict[str, Any] | None = None
    ioChaos: dict[str, Any] | None = None
    timeChaos: dict[str, Any] | None = None
    kernelChaos: dict[str, Any] | None = None
    dnsChaos: dict[str, Any] | None = None
    httpChaos: dict[str, Any] | None = None
    jvmChaos: dict[str, Any] | None = None
    awsChaos: dict[str, Any] | None = None
    gcpChaos: dict[str, Any] | None = None
    azureChaos: dict[str, Any] | None = None
    blockChaos: dict[str, Any] | None = None
    physicalmachineChaos: dict[str, Any] | None = None

    @field_validator("templateType")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        from templates import known_kinds

        kinds = known_kinds()
        if v not in kinds:
            raise ValueError(f'unknown templateType "{v}" (known: {", ".join(sorted(kinds))})')
        return v


class Parameter(_Model):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="A CEL identifier.")
    value: Any = Field(default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    description: str | None = None


class WorkflowSpec(_Model):
    entry: str
    parameters: list[Parameter] = Field(
        default_factory=list, description="Workflow parameters: workflow.parameters.<name> in expressions."
    )
    templates: list[Template] = Field(min_length=1)
    seed: int | None = Field(default=None, description="Seed of the workflow's random source.")
    deadline: Duration | None = Field(default=None, description="Maximum run time of the whole workflow.")
    onDeadline: Literal["Fail", "Succeed"] = "Fail"
    onExit: str | None = Field(
        default=None,
        description="Template run when the workflow ends for any reason (not after terminate).",
    )
    onExitDeadline: Duration | None = Field(
        default=None,
        description="Maximum run time of an exit handler whose template sets no deadline (default 10m); "
        "the workflow's deadline never stops exit handlers.",
    )
    parallelism: int | None = Field(
        default=None, ge=1, description="At most this many leaf nodes (pods, chaos, waits) run at once."
    )


class NodeStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    templateName: str
    templateType: str
    phase: str
    parent: str | None = None
    children: list[str] = Field(default_factory=list)
    startTime: str | None = None
    finishTime: str | None = None
    message: str = ""
    reason: str | None = None


class WorkflowStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    phase: str = "Init"
    startTime: str | None = None
    finishTime: str | None = None
    entryNode: str | None = None
    message: str = ""
    progress: str = "0/0"
    nodes: list[NodeStatus] = Field(default_factory=list)


class Workflow(_Model):
    apiVersion: Literal["chaosflow.io/v1alpha1"] = "chaosflow.io/v1alpha1"
    kind: Literal["Workflow"] = "Workflow"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: WorkflowSpec
    status: WorkflowStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or "workflow"

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    def template_map(self) -> dict[str, Template]:
        return {t.name: t for t in self.spec.templates}


# Kind specs defined in their template modules (templates/<kind>.py), imported last so that those
# modules may import anything from this one; the models that refer to them are completed here.
from templates.loop import LoopSpec  # noqa: E402
from templates.resource import ResourceSpec  # noqa: E402
from templates.statuscheck import StatusCheckSpec  # noqa: E402
from templates.switch import SwitchSpec  # noqa: E402
from templates.wait import WaitSpec  # noqa: E402
from templates.workflow import ChildWorkflowSpec  # noqa: E402

for _model in list(globals().values()):
    if isinstance(_model, type) and issubclass(_model, BaseModel) and _model.__module__ == __name__:
        _model.model_rebuild()
