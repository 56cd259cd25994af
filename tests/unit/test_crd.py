"""The CRDs are generated from the models, structural, small, and the chart's copy is current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.crd import ANNOTATION_LIMIT, all_crds, render, render_all, workflow_crd

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "chaosflow" / "crds"


@pytest.mark.parametrize("fname", sorted(all_crds()))
def test_chart_copy_equals_generator_output(fname: str) -> None:
    path = CHART_CRDS / fname
    assert path.exists(), f"{path} missing: run `chaosflow crds --output-dir {CHART_CRDS}`"
    assert path.read_text() == render(all_crds()[fname]), (
        f"{path} is stale: run `chaosflow crds --output-dir charts/chaosflow/crds`"
    )


def test_no_extra_files_in_chart_crds() -> None:
    assert sorted(p.name for p in CHART_CRDS.glob("*.yaml")) == sorted(all_crds())


def _walk(s: dict[str, Any], path: str, problems: list[str]) -> None:
    """The structural-schema rules the API server enforces (the subset our generator could break)."""
    for bad in ("$ref", "anyOf", "oneOf", "allOf", "title", "default", "const"):
        if bad in s:
            problems.append(f"{path}: has {bad}")
    open_value = s.get("x-kubernetes-preserve-unknown-fields") or s.get("x-kubernetes-int-or-string")
    if "type" not in s and not open_value:
        problems.append(f"{path}: no type")
    if s.get("additionalProperties") is not None and "properties" in s:
        problems.append(f"{path}: properties and additionalProperties together")
    for k, v in (s.get("properties") or {}).items():
        _walk(v, f"{path}.{k}", problems)
    if isinstance(s.get("items"), dict):
        _walk(s["items"], f"{path}[]", problems)
    if isinstance(s.get("additionalProperties"), dict):
        _walk(s["additionalProperties"], f"{path}{{}}", problems)


@pytest.mark.parametrize("fname", sorted(all_crds()))
def test_schema_is_structural(fname: str) -> None:
    problems: list[str] = []
    version = all_crds()[fname]["spec"]["versions"][0]
    _walk(version["schema"]["openAPIV3Schema"], "", problems)
    assert problems == []


def test_workflow_crd_shape() -> None:
    c = workflow_crd()
    assert c["metadata"]["name"] == "workflows.chaosflow.io"
    assert c["spec"]["names"]["shortNames"] == ["wf"]
    v = c["spec"]["versions"][0]
    assert v["name"] == "v1alpha1" and v["subresources"] == {"status": {}}
    assert [col["name"] for col in v["additionalPrinterColumns"]][:3] == ["Phase", "Progress", "Age"]
    schema = v["schema"]["openAPIV3Schema"]
    assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    tmpl = schema["properties"]["spec"]["properties"]["templates"]["items"]["properties"]
    assert tmpl["duration"].get("x-kubernetes-preserve-unknown-fields") is True  # string or {min,max}
    assert tmpl["deadline"].get("x-kubernetes-int-or-string") is True
    assert tmpl["networkChaos"]["x-kubernetes-preserve-unknown-fields"] is True
    assert tmpl["chaos"]["properties"]["manifest"]["x-kubernetes-preserve-unknown-fields"] is True
    assert tmpl["task"]["nullable"] is True


@pytest.mark.parametrize("fname", sorted(all_crds()))
def test_small_enough_for_client_side_apply(fname: str) -> None:
    # kubectl stores the whole object as JSON in the last-applied-configuration annotation
    size = len(json.dumps(all_crds()[fname], separators=(",", ":")))
    assert size < ANNOTATION_LIMIT / 10, size


def test_render_all_is_a_yaml_stream_of_crds() -> None:
    docs = list(yaml.safe_load_all(render_all()))
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition"] * len(all_crds())
