"""``pod-kill``: delete N pods that match a label selector (one-shot chaos).

.. code-block:: yaml

    templateType: Chaos
    chaos:
      cluster: default          # the cluster to act in
      action: pod-kill
      params:
        namespace: default      # default: the workflow's namespace
        selector: {app: web}    # labels, {matchLabels, matchExpressions}, or "app=web,tier!=db"
        count: 1                # how many pods (default 1), or "all"

The pods are picked from the matching pods (sorted by name, pods already terminating left out)
with the node's seeded random source, so a seed reproduces the choice. The names of the killed
pods are the node's output ``killed``. No pod matching is an error (the node fails): chaos that
hits nothing is not silently counted as done. Nothing is created, so there is nothing to recover.
"""

from __future__ import annotations

from typing import Any

from actors.base import ActorError, Playground
from actors.chaos_registry import ChaosContext, ObjectRef


def label_selector(sel: Any) -> str:
    """A Kubernetes label selector string from a string, a label map, or a LabelSelector."""
    if isinstance(sel, str):
        return sel
    if not isinstance(sel, dict):
        raise ValueError(f"selector must be a string or a mapping, got {type(sel).__name__}")
    structured = {"matchLabels", "matchExpressions", "labelSelectors"} & set(sel)
    labels: dict[str, Any] = (
        {**(sel.get("matchLabels") or {}), **(sel.get("labelSelectors") or {})} if structured else sel
    )
    parts = [f"{k}={v}" for k, v in sorted(labels.items())]
    for e in sel.get("matchExpressions") or [] if structured else []:
        key, op, values = e.get("key"), e.get("operator"), list(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ValueError(f"unknown matchExpressions operator {op!r}")
    return ",".join(parts)


def _templated(v: Any) -> bool:
    return isinstance(v, str) and "{{" in v


class PodKill:
    description = "delete N pods matching a label selector (one-shot)"
    one_shot = True

    def validate(self, params: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        unknown = sorted(set(params) - {"namespace", "selector", "count"})
        if unknown:
            problems.append(
                f"pod-kill: unknown params {', '.join(unknown)} (known: namespace, selector, count)"
            )
        sel = params.get("selector")
        if sel is None or sel in ("", {}):
            problems.append(
                "pod-kill: params.selector is required (a pod-kill without a selector kills anything)"
            )
        elif not _templated(sel):
            try:
                label_selector(sel)
            except ValueError as e:
                problems.append(f"pod-kill: params.selector: {e}")
        count = params.get("count", 1)
        if (
            not _templated(count)
            and count != "all"
            and (isinstance(count, bool) or not isinstance(count, int) or count < 1)
        ):
            problems.append(f'pod-kill: params.count must be a positive integer or "all", got {count!r}')
        return problems

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        problems = self.validate(params)
        if problems:
            raise ActorError("; ".join(problems))
        namespace = str(params.get("namespace") or ctx.namespace)
        selector = label_selector(params["selector"])
        pods = playground.list(ctx.cluster, "v1", "Pod", namespace, selector)
        alive = sorted(
            (p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")),
            key=lambda p: str(p["metadata"]["name"]),
        )
        if not alive:
            raise ActorError(f'pod-kill: no pod in namespace {namespace} matches "{selector}"')
        count = params.get("count", 1)
        n = len(alive) if count == "all" else min(int(count), len(alive))
        victims = sorted(ctx.rng().sample([str(p["metadata"]["name"]) for p in alive], n))
        for name in victims:
            playground.delete(ctx.cluster, "v1", "Pod", namespace, name)
        ctx.outputs["killed"] = victims
        ctx.outputs["namespace"] = namespace
        return []

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        return None
