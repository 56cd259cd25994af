"""API models (pydantic v2) for chaosflow.io/v1alpha1 Workflow, and Chaos Mesh's Workflow as input.

The models are the schema users write and the shape the CRDs are generated from. The engine runs
on light runtime structures (``engine.runtime``); these models are parsed once per workflow.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.duration import Duration, DurationSpec

GROUP = "chaosflow.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CHAOS_MESH_API_VERSION = "chaos-mesh.org/v1alpha1"

LABEL_WORKFLOW = f"{GROUP}/workflow"
LABEL_NODE = f"{GROUP}/node"
LABEL_TEMPLATE = f"{GROUP}/template"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Chaos Mesh's chaos kinds: templateType -> field holding the inline chaos spec.
CHAOS_MESH_KINDS: dict[str, str] = {
    "PodChaos": "podChaos",
    "NetworkChaos": "networkChaos",
    "StressChaos": "stressChaos",
    "IOChaos": "ioChaos",
    "TimeChaos": "timeChaos",
    "KernelChaos": "kernelChaos",
    "DNSChaos": "dnsChaos",
    "HTTPChaos": "httpChaos",
    "JVMChaos": "jvmChaos",
    "AWSChaos": "awsChaos",
    "GCPChaos": "gcpChaos",
    "AzureChaos": "azureChaos",
    "BlockChaos": "blockChaos",
    "PhysicalMachineChaos": "physicalmachineChaos",
}


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
    duration: DurationSpec | None = Field(
        default=None, description="Suspend: how long to wait. Chaos: how long to hold the chaos."
    )
    children: list[str] | None = None
    task: TaskSpec | None = None
    conditionalBranches: list[ConditionalBranch] | None = None
    chaos: ChaosSpec | None = None
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
