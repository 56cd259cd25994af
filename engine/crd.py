"""CustomResourceDefinitions generated from the pydantic models (``chaosflow crds``).

The chart's ``charts/chaosflow/crds/*.yaml`` are this module's output (a unit test compares them).
Pydantic's JSON schema is turned into a Kubernetes *structural* schema:

- every ``$ref`` is inlined; ``anyOf [X, null]`` becomes ``X`` with ``nullable: true``;
- free-form objects (embedded manifests, containers, chaos specs) and untyped values (parameter
  values) become ``x-kubernetes-preserve-unknown-fields: true``;
- a fixed duration (``"90s"`` or a number of seconds) is ``x-kubernetes-int-or-string``; a duration
  that may also be a range ``{min, max}`` cannot be a typed ``anyOf`` in a structural schema, so it is
  a preserve-unknown-fields value (the engine validates it);
- titles, defaults (the engine applies them) and ``additionalProperties: false`` are dropped;
- ``status`` keeps unknown fields (node state, engine internals).

Descriptions are kept short so that client-side ``kubectl apply`` fits the CRD into its
last-applied annotation (256 KiB limit) with a wide margin.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import yaml
from pydantic import BaseModel

from engine.model import GROUP, VERSION, Workflow

#: how long a description may be in the generated schema (keeps the CRDs small)
MAX_DESCRIPTION = 160
#: the annotation limit client-side `kubectl apply` has to fit the whole CRD into
ANNOTATION_LIMIT = 256 * 1024

DURATION_FIXED = "A duration: a Go duration string (90s, 1m30s) or a number of seconds."
DURATION_SPEC = "A duration (90s, 1m30s, or seconds) or a range {min, max} drawn from the workflow's seed."


def _short(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_DESCRIPTION:
        return text
    cut = text[: MAX_DESCRIPTION - 3].rsplit(" ", 1)[0]
    return cut + "..."


def _is_duration_string(s: dict[str, Any]) -> bool:
    return s.get("type") == "string" and "(ns|us|" in str(s.get("pattern", ""))


class _Converter:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def resolve(self, s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            name = s["$ref"].rsplit("/", 1)[-1]
            extra = {k: v for k, v in s.items() if k != "$ref"}
            s = {**self.defs[name], **extra}
        return s

    def convert(self, s: dict[str, Any]) -> dict[str, Any]:
        s = self.resolve(s)
        desc = s.get("description")
        preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
        nullable = False
        if "anyOf" in s:
            branches = [self.resolve(b) for b in s["anyOf"]]
            nonnull = [b for b in branches if b.get("type") != "null"]
            nullable = len(nonnull) < len(branches)
            if len(nonnull) == 1:
                inner = {k: v for k, v in s.items() if k not in ("anyOf", "default", "title")}
                one = self.convert({**nonnull[0], **inner})
                if nullable:
                    one["nullable"] = True
                return one
            # several typed branches: a duration spec (string | {min, max}) or anything else
            durations = any(_is_duration_string(b) for b in nonnull)
            anyv: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
            anyv["description"] = DURATION_SPEC if durations else _short(desc or "Any value.")
            if nullable:
                anyv["nullable"] = True
            return anyv
        if _is_duration_string(s):
            text = f"{desc} {DURATION_FIXED}" if desc and "Go duration" not in desc else DURATION_FIXED
            return {"x-kubernetes-int-or-string": True, "description": _short(text)}
        out: dict[str, Any] = {}
        t = s.get("type")
        if desc:
            out["description"] = _short(desc)
        if t is None:
            # untyped (Any): structural schemas allow it only with preserve-unknown-fields
            out["x-kubernetes-preserve-unknown-fields"] = True
            return out
        out["type"] = t
        if t == "object":
            props = s.get("properties")
            addl = s.get("additionalProperties")
            if props:
                out["properties"] = {k: self.convert(v) for k, v in props.items()}
                req = [r for r in s.get("required", []) if r in props]
                if req:
                    out["required"] = req
            if isinstance(addl, dict) and addl:
                out["additionalProperties"] = self.convert(addl)
            elif (addl is True or preserve or (not props and addl is None)) and not (
                isinstance(addl, dict) and addl
            ):
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif t == "array":
            out["items"] = self.convert(s.get("items") or {})
            for k in ("minItems", "maxItems"):
                if k in s:
                    out[k] = s[k]
        else:
            for k in ("enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "format"):
                if k in s:
                    out[k] = s[k]
            if "const" in s:
                out["enum"] = [s["const"]]
        return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural openAPIV3Schema of a top-level object model (spec typed, status open)."""
    js = model.model_json_schema()
    conv = _Converter(js.get("$defs", {}))
    props = js["properties"]
    spec = conv.convert(props["spec"])
    spec.pop("description", None)
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {
                "type": "object",
                "description": "Written by the engine: phase, progress, nodes[] and engine internals.",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "phase": {"type": "string"},
                    "progress": {"type": "string"},
                    "message": {"type": "string"},
                    "startTime": {"type": "string", "nullable": True},
                    "finishTime": {"type": "string", "nullable": True},
                    "entryNode": {"type": "string", "nullable": True},
                },
            },
        },
        "required": ["spec"],
    }


def crd(
    model: type[BaseModel],
    kind: str,
    plural: str,
    short_names: list[str],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["chaosflow"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": structural_schema(model)},
                }
            ],
        },
    }


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def workflow_crd() -> dict[str, Any]:
    return crd(
        Workflow,
        "Workflow",
        "workflows",
        ["wf"],
        [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
            AGE,
            {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
        ],
    )


def cron_workflow_crd() -> dict[str, Any] | None:
    """The CronWorkflow CRD, when ``engine.cron`` defines a ``CronWorkflow`` model."""
    try:
        cron = importlib.import_module("engine.cron")
    except ImportError:
        return None
    model = getattr(cron, "CronWorkflow", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    props = model.model_json_schema().get("properties", {})
    if "spec" not in props:
        return None
    return crd(
        model,
        "CronWorkflow",
        "cronworkflows",
        ["cwf"],
        [
            {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedules"},
            {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
            {"name": "Last", "type": "date", "jsonPath": ".status.lastScheduledTime"},
            AGE,
        ],
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """File name in charts/chaosflow/crds/ -> CRD object."""
    out = {"workflows.yaml": workflow_crd()}
    cwf = cron_workflow_crd()
    if cwf is not None:
        out["cronworkflows.yaml"] = cwf
    return out


HEADER = "# Generated by `chaosflow crds` from engine/model.py — do not edit.\n"


def render(obj: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(copy.deepcopy(obj), sort_keys=False, width=120, allow_unicode=True)


def render_all() -> str:
    return "---\n".join(render(o) for o in all_crds().values())
