"""Resource types (the discovery registry) of the simulated API server."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUILTIN_TYPES", "ResourceType", "split_api_version", "version_priority_key"]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served group/version/kind, like an entry of ``kubectl api-resources``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    has_status_subresource: bool = False
    short_names: tuple[str, ...] = ()
    singular: str = ""
    #: Filled in for kinds defined by a CustomResourceDefinition (the CRD's name).
    crd: str | None = None
    api_version: str = field(init=False)
    #: Storage key shared by all versions of one group/kind: ``Kind.group`` (``Pod.`` for core).
    gk: str = field(init=False)
    #: The ``plural.group`` resource name used in messages and metrics (``pods``, ``jobs.batch``).
    resource: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "api_version", f"{self.group}/{self.version}" if self.group else self.version
        )
        object.__setattr__(self, "gk", f"{self.kind}.{self.group}")
        object.__setattr__(self, "resource", f"{self.plural}.{self.group}" if self.group else self.plural)
        if not self.singular:
            object.__setattr__(self, "singular", self.kind.lower())
        object.__setattr__(self, "short_names", tuple(self.short_names))

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "version": self.version,
            "kind": self.kind,
            "plural": self.plural,
            "namespaced": self.namespaced,
            "has_status_subresource": self.has_status_subresource,
            "short_names": list(self.short_names),
            "singular": self.singular,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResourceType:
        return cls(
            group=data["group"],
            version=data["version"],
            kind=data["kind"],
            plural=data["plural"],
            namespaced=bool(data.get("namespaced", True)),
            has_status_subresource=bool(data.get("has_status_subresource", False)),
            short_names=tuple(data.get("short_names") or ()),
            singular=data.get("singular") or "",
        )


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority_key(version: str) -> tuple[int, int, int, str]:
    """Sort key giving Kubernetes version priority: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > others."""
    m = _KUBE_VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, version)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "Namespace", "namespaces", False, True, ("ns",)),
    ResourceType("", "v1", "Pod", "pods", True, True, ("po",)),
    ResourceType("", "v1", "ConfigMap", "configmaps", True, False, ("cm",)),
    ResourceType("", "v1", "Secret", "secrets", True, False),
    ResourceType("", "v1", "Service", "services", True, True, ("svc",)),
    ResourceType("", "v1", "Node", "nodes", False, True, ("no",)),
    ResourceType("", "v1", "Event", "events", True, False, ("ev",)),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, False, ("sa",)),
    ResourceType("batch", "v1", "Job", "jobs", True, True),
    ResourceType("apps", "v1", "Deployment", "deployments", True, True, ("deploy",)),
    ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True, False),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        True,
        ("crd", "crds"),
    ),
)
