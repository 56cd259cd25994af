"""The expression environment of a node, and rendering of ``{{ expr }}`` in template fields.

Every expression (branch conditions, loop conditions, switch cases, resource conditions, ``{{ }}``
substitutions) is CEL evaluated against :func:`node_env` with the run's :class:`FunctionSet`
(``rand``, ``randInt``, ``pick``, ``shuffle``, ``uuid``, ``now`` — all drawn from the workflow's
seeded source, so a seed reproduces every value).

The environment:

``workflow``  ``{name, namespace, seed, parameters: {name: value}, status, message}`` —
              ``status`` is the workflow's phase (``Running``); in the workflow's exit handler it
              is the outcome of the main tree (``Succeed`` / ``Failed``) and ``message`` says why
``node``      ``{name, template, status, message, reason, attempt}`` of the node evaluating; inside
              an exit handler (and its descendants) ``status`` / ``message`` / ``reason`` are the
              outcome of the node the handler runs for (for the workflow's handler: the main tree);
              ``attempt`` is the 1-based attempt of the innermost enclosing retried template (1
              outside retries)
``nodes``     ``{template name: {name, phase, message, outputs}}`` — the latest finished node of
              each template so far (outputs of earlier steps)
``params``    the workflow parameters again, as a short form
``inputs``    ``{parameters: {name: value}}`` — template ``parameters`` of the node and of its
              ancestors in the node tree, evaluated when each started; the innermost wins. An
              exit handler sees the parameters of the node it runs for; the workflow's exit handler
              only workflow parameters.

Rendering at node start (:func:`start_node`): a template's ``parameters`` are evaluated in order
(later ones may use earlier ones), then the kind's renderable fields (:data:`RENDERED_FIELDS`, and a
``duration`` given as a ``{{ }}`` string) are rendered with the node's environment. The results are
kept in ``node.state`` (``parameters``, ``rendered``) so a resumed node uses the same values even
when the expressions drew random numbers. A failure raises :class:`StartError`; the node fails with
its message.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from engine.duration import DurationError, DurationRange, parse_duration_spec
from engine.errors import ChaosflowError
from engine.expr import Expr, ExprError, render_value
from engine.kinds import CHAOS_MESH_KINDS

if TYPE_CHECKING:
    from engine.model import Template, Workflow
    from engine.runtime import Node, WorkflowRun

#: Template fields rendered (``{{ }}``) when a node of the kind starts, as dotted paths. A kind
#: reads the result with :func:`rendered`. Kinds may register their own fields here.
RENDERED_FIELDS: dict[str, tuple[str, ...]] = {
    "Task": ("task.container",),
    "Chaos": ("chaos.manifest", "chaos.params"),
    **{kind: (field,) for kind, field in CHAOS_MESH_KINDS.items()},
}


class StartError(ChaosflowError):
    """A template parameter or field could not be evaluated when the node started."""


def workflow_env(run: WorkflowRun) -> dict[str, Any]:
    params = {p.name: p.value for p in run.workflow.spec.parameters}
    status = run.phase.value
    message = run.message
    if run.exit_node is not None and run.entry_node is not None:
        entry = run.nodes.get(run.entry_node)
        if entry is not None:  # in the workflow's exit handler: the outcome of the main tree
            status = entry.phase.value
            message = run.message or entry.message
    return {
        "name": run.name,
        "namespace": run.namespace,
        "seed": run.seed,
        "parameters": params,
        "status": status,
        "message": message,
    }


def _scope(run: WorkflowRun, node: Node) -> tuple[dict[str, Any], str | None, int]:
    """Template parameters visible to ``node`` (innermost wins), the exit-handler mark and the
    innermost attempt number."""
    inputs: dict[str, Any] = {}
    exit_for: str | None = None
    attempt = 0
    nodes = run.nodes
    n: Node | None = node
    while n is not None:
        st = n.state
        if st:
            p = st.get("parameters")
            if p:
                for k, v in p.items():
                    inputs.setdefault(k, v)
            if exit_for is None and "exitFor" in st:
                exit_for = st["exitFor"] or ""
            if not attempt and "attempt" in st:
                attempt = int(st["attempt"])
        n = nodes.get(n.parent) if n.parent is not None else None
    return inputs, exit_for, attempt or 1


def _node_vars(run: WorkflowRun, node: Node, exit_for: str | None, attempt: int) -> dict[str, Any]:
    status, message, reason = node.phase.value, node.message, node.reason
    if exit_for == "":  # the workflow's exit handler: the main tree's outcome
        entry = run.nodes.get(run.entry_node or "")
        if entry is not None:
            status, message, reason = entry.phase.value, run.message or entry.message, entry.reason
    elif exit_for is not None:  # a template's exit handler: the outcome of the node it runs for
        owner = run.nodes.get(exit_for)
        outcome = owner.state.get("outcome") if owner is not None else None
        if outcome:
            status, message, reason = outcome["status"], outcome["message"], outcome.get("reason")
    return {
        "name": node.name,
        "template": node.template,
        "status": status,
        "message": message,
        "reason": reason,
        "attempt": attempt,
    }


_NODES_REF = re.compile(r"""\bnodes\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"'\]]+)["']\s*\])""")
_NODES_WORD = re.compile(r"\bnodes\b")


@functools.lru_cache(maxsize=4096)
def referenced_nodes(text: str) -> frozenset[str] | None:
    """Templates whose outputs ``text`` reads as ``nodes.x`` / ``nodes["x"]``; None = any (e.g. ``size(nodes)``).

    The CEL binding converts a whole variable on every evaluation, so passing only the entries an
    expression can read keeps evaluation cost independent of how many nodes have finished.
    """
    names = {a or b for a, b in _NODES_REF.findall(text)}
    if len(_NODES_WORD.findall(text)) != len(_NODES_REF.findall(text)):
        return None
    return frozenset(names)


def _strings(value: Any, out: list[str]) -> list[str]:
    if isinstance(value, str):
        if "{{" in value:
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)
    return out


def node_env(
    run: WorkflowRun, node: Node, extra: dict[str, Any] | None = None, *, only: frozenset[str] | None = None
) -> dict[str, Any]:
    """The env of ``node``; with ``only``, ``nodes`` holds just those templates' entries."""
    wf = workflow_env(run)
    latest = run.latest
    items = latest.items() if only is None else ((t, latest[t]) for t in only if t in latest)
    nodes = {
        t: {"name": n.name, "phase": n.phase.value, "message": n.message, "outputs": n.outputs}
        for t, n in items
    }
    inputs, exit_for, attempt = _scope(run, node)
    env: dict[str, Any] = {
        "workflow": wf,
        "params": wf["parameters"],
        "node": _node_vars(run, node, exit_for, attempt),
        "nodes": nodes,
        "inputs": {"parameters": inputs},
    }
    if extra:
        env.update(extra)
    return env


def evaluate(run: WorkflowRun, node: Node, source: str, extra: dict[str, Any] | None = None) -> Any:
    """Evaluate a CEL expression for ``node``; raises ``ExprError`` with a clear message."""
    return Expr(source).evaluate(node_env(run, node, extra, only=referenced_nodes(source)), run.functions)


def evaluate_bool(run: WorkflowRun, node: Node, source: str, extra: dict[str, Any] | None = None) -> bool:
    return Expr(source).evaluate_bool(
        node_env(run, node, extra, only=referenced_nodes(source)), run.functions
    )


def render(run: WorkflowRun, node: Node, value: Any, extra: dict[str, Any] | None = None) -> Any:
    """Render every ``{{ expr }}`` in strings inside ``value`` (dicts, lists, scalars)."""
    only = referenced_nodes("\n".join(_strings(value, [])))
    return render_value(value, node_env(run, node, extra, only=only), run.functions)


# --- rendering when a node starts ------------------------------------------------------------------
def template_field(tmpl: Template, path: str) -> Any:
    obj: Any = tmpl
    for part in path.split("."):
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, dict):
        return any(has_placeholder(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_placeholder(v) for v in value)
    return False


def start_plan(tmpl: Template) -> tuple[bool, tuple[str, ...]] | None:
    """What a node of ``tmpl`` evaluates when it starts: (parameters?, fields to render); None = nothing."""
    kind_fields = RENDERED_FIELDS.get(tmpl.templateType)
    if kind_fields is None and not tmpl.parameters and not isinstance(tmpl.duration, str):
        return None  # the common case, e.g. Serial / Parallel / Suspend without expressions
    fields = [p for p in kind_fields or () if has_placeholder(template_field(tmpl, p))]
    if isinstance(tmpl.duration, str):
        fields.append("duration")
    if not tmpl.parameters and not fields:
        return None
    return bool(tmpl.parameters), tuple(fields)


def start_node(run: WorkflowRun, node: Node, parameters: bool, fields: tuple[str, ...]) -> dict[str, Any]:
    """Evaluate the template's parameters and render ``fields``; returns the node's state updates.

    Raises :class:`StartError` with a message naming the parameter or field.
    """
    tmpl = run.template(node)
    texts = _strings(tmpl.parameters if parameters else None, [])
    for path in fields:
        _strings(template_field(tmpl, path), texts)
    env = node_env(run, node, only=referenced_nodes("\n".join(texts)))
    visible: dict[str, Any] = env["inputs"]["parameters"]
    out: dict[str, Any] = {}
    if parameters and tmpl.parameters:
        values: dict[str, Any] = {}
        for name, raw in tmpl.parameters.items():
            try:
                value = render_value(raw, env, run.functions)
            except ExprError as e:
                raise StartError(f"parameter {name}: {e}") from None
            values[name] = value
            visible[name] = value  # later parameters (and the fields below) see it
        out["parameters"] = values
    if fields:
        rendered: dict[str, Any] = {}
        for path in fields:
            raw = template_field(tmpl, path)
            try:
                value = render_value(raw, env, run.functions)
                if path == "duration":
                    spec = parse_duration_spec(value)
                    value = spec.draw(run.rng) if isinstance(spec, DurationRange) else float(spec)
            except (ExprError, DurationError) as e:
                raise StartError(f"rendering {path}: {e}") from None
            rendered[path] = value
        out["rendered"] = rendered
    return out


def rendered(node: Node, path: str, default: Any) -> Any:
    """The value of template field ``path`` as rendered when the node started (else ``default``)."""
    r = node.state.get("rendered")
    if r is not None and path in r:
        return r[path]
    return default


def override_parameters(wf: Workflow, values: dict[str, Any]) -> Workflow:
    """``chaosflow run -p name=value``: a copy of ``wf`` with those workflow parameters replaced.

    Raises :class:`~engine.errors.InputError` for a name the workflow does not declare (a typo
    would otherwise be silently ignored).
    """
    if not values:
        return wf
    from engine.errors import InputError

    declared = [p.name for p in wf.spec.parameters]
    unknown = [n for n in values if n not in declared]
    if unknown:
        have = ", ".join(declared) or "none"
        raise InputError(
            "-p",
            None,
            f"workflow {wf.name} has no parameter {', '.join(map(repr, unknown))} (declared: {have})",
        )
    params = [
        p.model_copy(update={"value": values[p.name]}) if p.name in values else p for p in wf.spec.parameters
    ]
    return wf.model_copy(update={"spec": wf.spec.model_copy(update={"parameters": params})})


def parse_parameter_arg(arg: str) -> tuple[str, Any]:
    """``name=value`` with the value read as a YAML scalar (``3`` -> 3, ``true`` -> True, ``10ms``)."""
    import yaml

    from engine.errors import InputError

    name, sep, raw = arg.partition("=")
    name = name.strip()
    if not sep or not name:
        raise InputError("-p", None, f"expected name=value, got {arg!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return name, value
