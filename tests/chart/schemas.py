"""JSON schemas for kubeconform, generated offline (no internet, no schema downloads).

- Kubernetes kinds: from the ``/openapi/v2`` document of a real kube-apiserver (the e2e harness),
  as openapi2jsonschema does it: one standalone file per group/version/kind, ``int-or-string`` and
  ``Quantity`` widened to what the API server accepts, and in strict mode
  ``additionalProperties: false`` on every object that lists its properties. Unlike
  openapi2jsonschema, ``$ref``s are not inlined but copied into the file's ``definitions``
  (``JSONSchemaProps`` refers to itself, which cannot be inlined).
- CustomResources: from the ``openAPIV3Schema`` of CRD manifests (ours in charts/chaosflow/crds,
  the prometheus-operator fixtures in tests/chart/fixtures), honouring ``nullable``,
  ``x-kubernetes-int-or-string`` and ``x-kubernetes-preserve-unknown-fields``.

Layout: ``DIR/<group or "v1" for core>/<kind lowercased>_<version>.json``, which is kubeconform's
``-schema-location 'DIR/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

SCHEMA_LOCATION = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def schema_path(out_dir: Path, group: str, version: str, kind: str) -> Path:
    return out_dir / (group or version) / f"{kind.lower()}_{version}.json"


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strict(schema: Any) -> Any:
    """``additionalProperties: false`` on every object schema that lists properties (walks the
    schema structure, so a field that is itself named ``properties`` is not mistaken for one)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(v) for v in out[key]]
    return out


def _fix_openapi_v2(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    if name == INT_OR_STRING or schema.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    if name == QUANTITY:
        return {"oneOf": [{"type": "string"}, {"type": "number"}]}
    return schema


def openapi_v2_to_kubeconform(openapi: dict[str, Any], out_dir: Path, *, strict: bool = True) -> int:
    """Writes one schema per group/version/kind in ``openapi['definitions']``; returns the count."""
    definitions: dict[str, Any] = {
        name: _fix_openapi_v2(name, schema) for name, schema in openapi["definitions"].items()
    }
    # Nested int-or-string fields are written inline with a format in some definitions.
    definitions = {name: _replace_inline_int_or_string(schema) for name, schema in definitions.items()}
    if strict:
        definitions = {name: _strict(schema) for name, schema in definitions.items()}
    written = 0
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            needed: dict[str, Any] = {}
            todo = [name]
            while todo:
                ref = todo.pop()
                if ref in needed:
                    continue
                needed[ref] = definitions[ref]
                todo.extend(_refs(definitions[ref]))
            doc = {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "$ref": f"#/definitions/{name}",
                "definitions": needed,  # refs stay "#/definitions/<name>"
            }
            path = schema_path(out_dir, gvk["group"], gvk["version"], gvk["kind"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc))
            written += 1
    return written


def _replace_inline_int_or_string(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("format") == "int-or-string":
            return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        return {k: _replace_inline_int_or_string(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_inline_int_or_string(v) for v in node]
    return node


def _crd_schema(node: Any) -> Any:
    """An openAPIV3Schema (structural) -> JSON schema draft 7, strict where the CRD is closed."""
    if isinstance(node, list):
        return [_crd_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {k: _crd_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _crd_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_crd_schema(v) for v in value]
        elif key.startswith("x-kubernetes-") or key in ("nullable", "default", "example"):
            continue
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        base = {k: v for k, v in out.items() if k not in ("anyOf", "oneOf")}
        return {**base, "oneOf": [{"type": "string"}, {"type": "integer"}]}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", True)
    elif out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
    return out


def crd_to_kubeconform(crd: dict[str, Any], out_dir: Path) -> int:
    """Writes one schema per served version of a CustomResourceDefinition; returns the count."""
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    written = 0
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = _crd_schema(version["schema"]["openAPIV3Schema"])
        props = schema.setdefault("properties", {})
        api_version = f"{group}/{version['name']}"
        props["apiVersion"] = {"type": "string", "enum": [api_version]}
        props["kind"] = {"type": "string", "enum": [kind]}
        # The API server validates metadata itself; a CRD schema says little about it.
        props.setdefault("metadata", {"type": "object"})
        schema.setdefault("type", "object")
        schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})
        doc = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
        path = schema_path(out_dir, group, version["name"], kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        written += 1
    return written


def crd_files_to_kubeconform(files: Iterable[Path], out_dir: Path) -> int:
    written = 0
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                written += crd_to_kubeconform(doc, out_dir)
    return written
