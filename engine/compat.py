"""Chaos Mesh Workflow (chaos-mesh.org/v1alpha1) as input.

The template fields are the same; what differs is meaning. In Chaos Mesh a Suspend waits for its
``deadline`` and a chaos node holds its chaos until its ``deadline``; on any other node the
deadline ends the node as *finished*, not failed. We translate that into our fields: ``duration``
for Suspend and chaos kinds, and ``onDeadline: Succeed`` elsewhere.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.model import API_VERSION, CHAOS_MESH_API_VERSION, CHAOS_MESH_KINDS

SOURCE_ANNOTATION = "chaosflow.io/source-api-version"
CHAOS_MESH_ABORT_ANNOTATION = "workflow.chaos-mesh.org/abort"


def is_chaos_mesh(doc: dict[str, Any]) -> bool:
    return doc.get("apiVersion") == CHAOS_MESH_API_VERSION


def from_chaos_mesh(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["apiVersion"] = API_VERSION
    meta = out.setdefault("metadata", {})
    if isinstance(meta, dict):
        ann = meta.setdefault("annotations", {})
        if isinstance(ann, dict):
            ann[SOURCE_ANNOTATION] = CHAOS_MESH_API_VERSION
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    for t in spec.get("templates") or []:
        if not isinstance(t, dict):
            continue
        tt = t.get("templateType")
        if tt == "Suspend" or tt in CHAOS_MESH_KINDS:
            if "deadline" in t and "duration" not in t:
                t["duration"] = t.pop("deadline")
        elif "deadline" in t:
            t.setdefault("onDeadline", "Succeed")
    return out
