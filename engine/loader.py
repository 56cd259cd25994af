"""Reading Workflow documents: YAML/JSON -> (Chaos Mesh translation) -> models -> validation."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from engine.compat import from_chaos_mesh, is_chaos_mesh
from engine.errors import InputError, Path, ValidationFailed, ValidationIssue
from engine.model import API_VERSION, CHAOS_MESH_API_VERSION, Workflow
from engine.validate import pydantic_issues, raw_issues, validate_workflow
from engine.yamlio import load_documents

ACCEPTED_API_VERSIONS = (API_VERSION, CHAOS_MESH_API_VERSION)


def parse_workflow(doc: Any, filename: str, base: Path = ()) -> tuple[Workflow | None, list[ValidationIssue]]:
    """Validate one document; returns the model (None when invalid) and the issues found."""
    if not isinstance(doc, dict):
        return None, [ValidationIssue(filename, base, "expected a mapping (a Workflow object)")]
    issues: list[ValidationIssue] = []
    api_version = doc.get("apiVersion")
    if api_version not in ACCEPTED_API_VERSIONS:
        issues.append(
            ValidationIssue(
                filename,
                (*base, "apiVersion"),
                f"unsupported apiVersion {api_version!r} (expected one of: {', '.join(ACCEPTED_API_VERSIONS)})",
            )
        )
    if doc.get("kind") != "Workflow":
        issues.append(
            ValidationIssue(
                filename, (*base, "kind"), f"unsupported kind {doc.get('kind')!r} (expected Workflow)"
            )
        )
    if issues:
        return None, issues
    if is_chaos_mesh(doc):
        doc = from_chaos_mesh(doc)
    try:
        wf = Workflow.model_validate(doc)
    except ValidationError as e:
        issues = pydantic_issues(e.errors(), filename, base)
        seen = {i.path for i in issues}
        issues += [i for i in raw_issues(doc, filename, base) if i.path not in seen]
        return None, issues
    issues = validate_workflow(wf, filename, base)
    return (None if issues else wf), issues


def load_workflows_text(text: str | bytes, filename: str) -> list[Workflow]:
    """All Workflow documents of a file; raises InputError or ValidationFailed."""
    docs = load_documents(text, filename)
    workflows: list[Workflow] = []
    issues: list[ValidationIssue] = []
    multi = len(docs) > 1
    for i, d in enumerate(docs):
        data = d.data
        if data is None:
            continue
        wf, errs = parse_workflow(data, filename if not multi else f"{filename}[doc {i}]")
        issues += errs
        if wf is not None:
            workflows.append(wf)
    if issues:
        raise ValidationFailed(issues)
    if not workflows:
        raise InputError(filename, None, "no Workflow document found")
    return workflows


def load_workflow_file(path: str) -> list[Workflow]:
    p = FsPath(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(path, None, f"cannot read file: {e.strerror or e}") from None
    return load_workflows_text(data, path)
