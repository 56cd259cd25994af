"""Semantic validation of a Workflow: everything is checked before anything runs.

Each problem is a :class:`ValidationIssue` with the field path, e.g.
``wf.yaml: spec.templates[2].children[0]: unknown template "foo"``. The structural checks (names,
references, cycles, reachability, size) also run on the raw document when the schema check
failed, so one ``chaosflow validate`` reports every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx

from engine.errors import Path, ValidationIssue
from engine.model import CHAOS_MESH_KINDS, DNS1123_LABEL, DNS1123_SUBDOMAIN

if TYPE_CHECKING:
    from engine.model import Template, Workflow

MAX_TEMPLATES = 10_000
#: upper bound on the size of the expanded node tree (templates may be referenced many times)
MAX_EXPANDED_NODES = 1_000_000

# Which optional template fields each kind uses (the rest must be unset).
_KIND_FIELDS: dict[str, set[str]] = {
    "Serial": {"children"},
    "Parallel": {"children", "parallelism", "endWith"},
    "Suspend": {"duration", "manual"},
    "Task": {"task", "conditionalBranches"},
    "Chaos": {"chaos", "duration"},
    "Resource": {"resource"},
    "Wait": {"wait"},
    "Loop": {"loop"},
    "Switch": {"switch"},
    "StatusCheck": {"statusCheck", "abortWithStatusCheck"},
    "Workflow": {"workflow"},
}
_OPTIONAL = {"duration", "children", "task", "conditionalBranches", "chaos", *CHAOS_MESH_KINDS.values()}
_OPTIONAL |= {"resource", "wait", "loop", "switch"}
_OPTIONAL |= {"statusCheck", "abortWithStatusCheck", "workflow"}
_OPTIONAL |= {"parallelism", "manual", "endWith"}


def _kind_fields(kind: str) -> set[str]:
    if kind in CHAOS_MESH_KINDS:
        return {CHAOS_MESH_KINDS[kind], "duration"}
    return _KIND_FIELDS.get(kind, set())


@dataclass
class _T:
    """What the structural checks need of a template; built from a model or a raw dict."""

    index: int
    name: str
    targets: list[tuple[Path, str]] = field(default_factory=list)


def _targets_of_model(t: Template) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = [(("children", i), c) for i, c in enumerate(t.children or [])]
    out += [
        (("conditionalBranches", i, "target"), b.target) for i, b in enumerate(t.conditionalBranches or [])
    ]
    if t.loop is not None:
        out.append((("loop", "child"), t.loop.child))
    if t.switch is not None:
        out += [(("switch", "cases", i, "target"), c.target) for i, c in enumerate(t.switch.cases or [])]
        if t.switch.default is not None:
            out.append((("switch", "default"), t.switch.default))
        out += [
            (("switch", "weights", i, "target"), w.target)
            for i, w in enumerate(t.switch.weights or [])
            if w.target is not None
        ]
    if t.workflow is not None and t.workflow.from_ is not None:
        out.append((("workflow", "from"), t.workflow.from_))
    if t.onExit is not None:
        out.append((("onExit",), t.onExit))
    return out


def _targets_of_raw(t: dict[str, Any]) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    children = t.get("children")
    if isinstance(children, list):
        out += [(("children", i), c) for i, c in enumerate(children) if isinstance(c, str)]
    branches = t.get("conditionalBranches")
    if isinstance(branches, list):
        for i, b in enumerate(branches):
            if isinstance(b, dict) and isinstance(b.get("target"), str):
                out.append((("conditionalBranches", i, "target"), b["target"]))
    loop = t.get("loop")
    if isinstance(loop, dict) and isinstance(loop.get("child"), str):
        out.append((("loop", "child"), loop["child"]))
    switch = t.get("switch")
    if isinstance(switch, dict):
        for field_name in ("cases", "weights"):
            entries = switch.get(field_name)
            if isinstance(entries, list):
                for i, c in enumerate(entries):
                    if isinstance(c, dict) and isinstance(c.get("target"), str):
                        out.append((("switch", field_name, i, "target"), c["target"]))
        if isinstance(switch.get("default"), str):
            out.append((("switch", "default"), switch["default"]))
    child_wf = t.get("workflow")
    if isinstance(child_wf, dict) and isinstance(child_wf.get("from"), str):
        out.append((("workflow", "from"), child_wf["from"]))
    if isinstance(t.get("onExit"), str):
        out.append((("onExit",), t["onExit"]))
    return out


def reachable_without_deadline(wf: Workflow, follow_exit_handlers: bool = True) -> list[str]:
    """Templates reachable from the entry along a path on which no template sets a deadline
    (in document order); empty when the workflow itself has a deadline. Validation uses it to
    reject nodes that could run forever (unbounded Loops, Continuous StatusChecks)."""
    if wf.spec.deadline is not None:
        return []
    templates = wf.template_map()
    seen: set[str] = set()
    stack = [wf.spec.entry]
    while stack:
        name = stack.pop()
        t = templates.get(name)
        if t is None or name in seen or t.deadline is not None:
            continue
        seen.add(name)
        stack.extend(
            target for rel, target in _targets_of_model(t) if follow_exit_handlers or rel[:1] != ("onExit",)
        )
    return [t.name for t in wf.spec.templates if t.name in seen]


def structure_issues(
    entry: Any, items: list[_T], filename: str, base: Path = (), on_exit: Any = None
) -> list[ValidationIssue]:
    """Names, duplicates, the entry, references, cycles, reachability and expanded size.

    ``on_exit`` (spec.onExit) is a second root: templates reachable from it are reachable."""
    issues: list[ValidationIssue] = []

    def add(path: Path, msg: str) -> None:
        issues.append(ValidationIssue(filename, base + path, msg))

    if len(items) > MAX_TEMPLATES:
        add(("spec", "templates"), f"too many templates ({len(items)} > {MAX_TEMPLATES})")
        return issues
    index: dict[str, _T] = {}
    for t in items:
        p: Path = ("spec", "templates", t.index, "name")
        if len(t.name) > 63 or not DNS1123_LABEL.match(t.name):
            add(p, f'invalid template name "{t.name}": must be a lowercase RFC 1123 label (<= 63 characters)')
        if t.name in index:
            add(p, f'duplicate template name "{t.name}" (first at spec.templates[{index[t.name].index}])')
        else:
            index[t.name] = t
    if not isinstance(entry, str):
        return issues
    if entry not in index:
        add(("spec", "entry"), f'unknown template "{entry}"')
    if isinstance(on_exit, str) and on_exit not in index:
        add(("spec", "onExit"), f'unknown template "{on_exit}"')
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(index)
    for t in items:
        for rel, target in t.targets:
            if target not in index:
                add(("spec", "templates", t.index, *rel), f'unknown template "{target}"')
            else:
                graph.add_edge(t.name, target)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        names = [u for u, _ in cycle] + [cycle[0][0]]
        add(("spec", "templates", index[cycle[0][0]].index), "cycle: " + " -> ".join(names))
        return issues
    if entry not in index:
        return issues
    reachable = nx.descendants(graph, entry) | {entry}
    if isinstance(on_exit, str) and on_exit in index:
        reachable |= nx.descendants(graph, on_exit) | {on_exit}
    for t in items:
        if t.name not in reachable and index.get(t.name) is t:
            add(("spec", "templates", t.index), f'template "{t.name}" is unreachable from entry "{entry}"')
    size: dict[str, int] = {}
    for name in reversed(list(nx.topological_sort(graph))):
        total = 1 + sum(size[target] for _, target in index[name].targets if target in size)
        size[name] = min(total, MAX_EXPANDED_NODES + 1)
    if size.get(entry, 0) > MAX_EXPANDED_NODES:
        add(("spec", "entry"), f"the workflow expands to more than {MAX_EXPANDED_NODES} nodes")
    return issues


def raw_structure_issues(doc: dict[str, Any], filename: str, base: Path = ()) -> list[ValidationIssue]:
    spec = doc.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("templates"), list):
        return []
    items = [
        _T(i, t["name"], _targets_of_raw(t))
        for i, t in enumerate(spec["templates"])
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    ]
    return structure_issues(spec.get("entry"), items, filename, base, spec.get("onExit"))


def metadata_issues(
    name: Any, generate_name: Any, namespace: Any, filename: str, base: Path = ()
) -> list[ValidationIssue]:
    issues: list[ValidationIssue] = []
    if name is None and generate_name is None:
        issues.append(ValidationIssue(filename, (*base, "metadata", "name"), "required"))
    elif isinstance(name, str) and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
        issues.append(
            ValidationIssue(
                filename,
                (*base, "metadata", "name"),
                f'invalid name "{name}": must be a lowercase RFC 1123 subdomain',
            )
        )
    if isinstance(namespace, str) and not DNS1123_LABEL.match(namespace):
        issues.append(
            ValidationIssue(filename, (*base, "metadata", "namespace"), f'invalid namespace "{namespace}"')
        )
    return issues


def template_issues(t: Template, i: int, filename: str, base: Path = ()) -> list[ValidationIssue]:
    """Fields the kind does not use, and the kind's own checks (from its template module)."""
    from templates import machine_for

    p: Path = (*base, "spec", "templates", i)
    issues = [
        ValidationIssue(filename, (*p, f), f"not used by templateType {t.templateType}")
        for f in sorted(_OPTIONAL - _kind_fields(t.templateType))
        if getattr(t, f) is not None
    ]
    issues += [
        ValidationIssue(filename, (*p, *rel), msg) for rel, msg in machine_for(t.templateType).validate(t)
    ]
    issues += [ValidationIssue(filename, (*p, *rel), msg) for rel, msg in _workflow_feature_issues(t)]
    return issues


def _placeholder_issues(value: Any, path: Path) -> list[tuple[Path, str]]:
    """``{{ }}`` syntax inside strings of ``value`` (nested dicts and lists)."""
    from engine.expr import ExprError, check_syntax, template_expressions

    out: list[tuple[Path, str]] = []
    if isinstance(value, str):
        try:
            exprs = list(template_expressions(value))
        except ExprError as e:
            return [(path, str(e))]
        for src in exprs:
            err = check_syntax(src)
            if err:
                out.append((path, err))
    elif isinstance(value, dict):
        for k, v in value.items():
            out += _placeholder_issues(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _placeholder_issues(v, (*path, i))
    return out


def _workflow_feature_issues(t: Template) -> list[tuple[Path, str]]:
    """Fields every kind has: parameters, retryStrategy, and ``{{ }}`` in rendered fields."""
    import re

    from engine.render import RENDERED_FIELDS, template_field

    out: list[tuple[Path, str]] = []
    for name, value in (t.parameters or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.append((("parameters", name), "parameter names must be identifiers (letters, digits, _)"))
        out += _placeholder_issues(value, ("parameters", name))
    if isinstance(t.duration, str):
        out += _placeholder_issues(t.duration, ("duration",))
    for dotted in RENDERED_FIELDS.get(t.templateType, ()):
        out += _placeholder_issues(template_field(t, dotted), tuple(dotted.split(".")))
    rs = t.retryStrategy
    if rs is not None and rs.limit is None and (rs.backoff is None or rs.backoff.maxDuration is None):
        why = "retryStrategy needs limit or backoff.maxDuration (it would retry forever)"
        out.append((("retryStrategy",), why))
    return out


def validate_workflow(wf: Workflow, filename: str, base: Path = ()) -> list[ValidationIssue]:
    meta = wf.metadata
    issues = metadata_issues(meta.name, meta.generateName, meta.namespace, filename, base)
    for i, t in enumerate(wf.spec.templates):
        issues += template_issues(t, i, filename, base)
    items = [_T(i, t.name, _targets_of_model(t)) for i, t in enumerate(wf.spec.templates)]
    issues += structure_issues(wf.spec.entry, items, filename, base, wf.spec.onExit)
    from templates.loop import unbounded_loop_issues

    issues += [ValidationIssue(filename, (*base, *p), msg) for p, msg in unbounded_loop_issues(wf)]
    from templates.statuscheck import unbounded_check_issues

    issues += [ValidationIssue(filename, (*base, *p), msg) for p, msg in unbounded_check_issues(wf)]
    from engine.simworld import sim_world_issues

    issues += sim_world_issues(meta.annotations, filename, (*base, "metadata", "annotations"))
    return issues


def raw_issues(doc: dict[str, Any], filename: str, base: Path = ()) -> list[ValidationIssue]:
    """The checks that still make sense when the document as a whole failed the schema."""
    from pydantic import ValidationError

    from engine.model import Template

    issues: list[ValidationIssue] = []
    meta = doc.get("metadata")
    if isinstance(meta, dict):
        issues += metadata_issues(
            meta.get("name"), meta.get("generateName"), meta.get("namespace"), filename, base
        )
    spec = doc.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("templates"), list):
        for i, raw in enumerate(spec["templates"]):
            try:
                t = Template.model_validate(raw)
            except ValidationError:
                continue  # already reported by the whole-document check
            issues += template_issues(t, i, filename, base)
    return issues + raw_structure_issues(doc, filename, base)


def pydantic_issues(errors: list[Any], filename: str, base: Path = ()) -> list[ValidationIssue]:
    """Turn pydantic's errors into path-precise issues (one line each)."""
    out: list[ValidationIssue] = []
    for e in errors:
        loc: Path = tuple(p for p in e.get("loc", ()) if isinstance(p, (str, int)) and not _is_type_tag(p))
        typ = e.get("type", "")
        msg = str(e.get("msg", "invalid"))
        if typ == "missing":
            msg = "required"
        elif typ == "extra_forbidden":
            msg = "unknown field"
        elif typ == "literal_error":
            msg = f"invalid value {e.get('input')!r}: {msg.removeprefix('Input should be ')} expected"
        for prefix in ("Value error, ", "Assertion failed, "):
            msg = msg.removeprefix(prefix)
        out.append(ValidationIssue(filename, base + loc, msg))
    return out


def _is_type_tag(p: str | int) -> bool:
    # pydantic adds union member tags such as 'function-plain[...]' or 'list[...]' to locations
    return isinstance(p, str) and ("[" in p or p.startswith("function-"))
