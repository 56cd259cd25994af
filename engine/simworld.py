"""The simulated world a workflow asks for, besides the embedded ``default`` cluster.

A Workflow (a CronWorkflow: in ``spec.workflowMetadata.annotations``) names it in the annotation
``chaosflow.io/sim-world`` as JSON; ``chaosflow megatest -o yaml|cron`` writes it. The local
runners on the sim (``chaosflow run``/``resume``/``cron``) build it before the first workflow
starts and restore it (with its controllers) from a ``--state`` checkpoint; on real clusters it is
ignored. ``chaosflow validate`` checks it (:func:`sim_world_issues`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from engine.errors import Path as ErrPath
from engine.errors import ValidationFailed, ValidationIssue, format_path

#: Annotation of a Workflow (of a CronWorkflow: in ``spec.workflowMetadata.annotations``) naming the
#: simulated world it needs besides the ``default`` cluster, as JSON. The local runners on the sim
#: (``chaosflow run``/``resume``/``cron``) build it before the first workflow starts and restore it
#: (with its controllers) from a ``--state`` checkpoint; on real clusters it is ignored.
ANNOTATION_SIM_WORLD = "chaosflow.io/sim-world"
#: kind "replicated-volumes": megatest's world (clusters "test" and "parent", actors.sim.rv)
SIM_WORLD_RV = "replicated-volumes"
_RV_FIELDS = ("kind", "storageClasses", "storageNodes", "vmNamespace", "bugs")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SimWorldRequest:
    """A parsed ``chaosflow.io/sim-world`` annotation (only kind ``replicated-volumes`` so far)."""

    kind: str
    storage_classes: tuple[str, ...]
    storage_nodes: int = 6
    vm_namespace: str = "e2e-sds-test-cluster"
    bugs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "storageClasses": list(self.storage_classes),
            "storageNodes": self.storage_nodes,
            "vmNamespace": self.vm_namespace,
            "bugs": list(self.bugs),
        }

    def annotation(self) -> str:
        """Compact JSON (no spaces, so YAML keeps it on one line)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SimWorldRequest:
        return cls(
            str(d["kind"]),
            tuple(d["storageClasses"]),
            int(d.get("storageNodes", 6)),
            str(d.get("vmNamespace", "e2e-sds-test-cluster")),
            tuple(d.get("bugs") or ()),
        )

    def world_spec(self) -> Any:
        """The :class:`actors.sim.rv.MegatestWorldSpec` of this request."""
        from actors.sim.rv import MegatestWorldSpec

        return MegatestWorldSpec.build(
            storage_classes=self.storage_classes,
            storage_nodes=self.storage_nodes,
            vm_namespace=self.vm_namespace,
            bugs=dict.fromkeys(self.bugs, True),
        )


def parse_sim_world(text: str, filename: str, path: ErrPath) -> SimWorldRequest:
    """Parse and check an annotation value; every problem is reported at its field path
    (``...annotations["chaosflow.io/sim-world"].storageClasses[1]``) as :class:`ValidationFailed`."""
    from actors.sim.rv import RVBugs, StorageClassSpec

    def fail(where: ErrPath, message: str) -> ValidationFailed:
        return ValidationFailed([ValidationIssue(filename, where, message)])

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(path, f"invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(doc, dict):
        raise fail(path, f'expected a JSON object such as {{"kind": "{SIM_WORLD_RV}", ...}}')
    issues: list[ValidationIssue] = []

    def bad(key: str | int, message: str, *more: str | int) -> None:
        issues.append(ValidationIssue(filename, (*path, key, *more), message))

    kind = doc.get("kind")
    if kind != SIM_WORLD_RV:
        bad(
            "kind",
            f"required: {SIM_WORLD_RV!r} (the only kind)"
            if kind is None
            else f"unknown kind {kind!r} (known: {SIM_WORLD_RV})",
        )
    for k in doc:
        if k not in _RV_FIELDS:
            bad(k, f"unknown field (known: {', '.join(_RV_FIELDS)})")
    classes = doc.get("storageClasses")
    if not isinstance(classes, list) or not classes:
        bad("storageClasses", 'required: a non-empty list of "name[:Replication[:Topology]]" strings')
    else:
        for i, sc in enumerate(classes):
            if not isinstance(sc, str):
                bad("storageClasses", f"expected a string, got {type(sc).__name__}", i)
                continue
            try:
                StorageClassSpec.parse(sc)
            except (ValueError, TypeError) as e:
                bad("storageClasses", str(e), i)
    nodes = doc.get("storageNodes", 6)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 200:
        bad("storageNodes", f"expected an integer from 1 to 200, got {json.dumps(nodes)}")
    ns = doc.get("vmNamespace", "e2e-sds-test-cluster")
    if not isinstance(ns, str) or not _DNS_LABEL.match(ns):
        bad("vmNamespace", f"expected a namespace name (DNS-1123 label), got {json.dumps(ns)}")
    bugs = doc.get("bugs", [])
    known = sorted(RVBugs.__dataclass_fields__)
    if not isinstance(bugs, list):
        bad("bugs", "expected a list of bug names (actors.sim.rv.RVBugs fields)")
    else:
        for i, b in enumerate(bugs):
            if b not in known:
                bad("bugs", f"unknown bug {json.dumps(b)} (known: {', '.join(known)})", i)
    if issues:
        raise ValidationFailed(issues)
    req = SimWorldRequest.from_dict(doc)
    try:
        req.world_spec()
    except (ValueError, TypeError) as e:  # e.g. two storage classes of the same name
        raise fail(path, str(e)) from None
    return req


def sim_world_of(
    sources: list[tuple[dict[str, str], str, ErrPath]],
) -> SimWorldRequest | None:
    """The world the annotations ask for: ``(annotations, filename, path of annotations)`` per
    workflow; None when none asks; ValidationFailed when one is invalid or two differ."""
    found: tuple[SimWorldRequest, str, ErrPath] | None = None
    for annots, filename, path in sources:
        text = annots.get(ANNOTATION_SIM_WORLD)
        if text is None:
            continue
        where: ErrPath = (*path, ANNOTATION_SIM_WORLD)
        req = parse_sim_world(text, filename, where)
        if found is None:
            found = (req, filename, where)
        elif req != found[0]:
            raise ValidationFailed(
                [
                    ValidationIssue(
                        filename,
                        where,
                        f"a different simulated world than {found[1]}: {format_path(found[2])} "
                        "(the workflows of one run share the simulated clusters)",
                    )
                ]
            )
    return found[0] if found else None


def build_sim_world(world: Any, req: SimWorldRequest) -> Any:
    """Build the requested world into a :class:`actors.sim.playground.SimWorld` (before any
    workflow starts; idempotent for objects that already exist)."""
    from actors.sim.rv import build_megatest_world

    return build_megatest_world(world, req.world_spec())


def restore_sim_world(world: Any, snapshot: dict[str, Any], req: SimWorldRequest | None) -> None:
    """Restore a :meth:`SimWorld.snapshot`; with a requested world its controllers are installed
    first, so they come back with their saved state (DRBD disks, network rules) and run on."""
    if req is None:
        world.restore(snapshot)
        return
    from actors.sim.rv import restore_megatest_world

    restore_megatest_world(world, snapshot)


def sim_world_issues(annotations: dict[str, str], filename: str, path: ErrPath) -> list[ValidationIssue]:
    """Validation: the problems of a ``chaosflow.io/sim-world`` annotation in ``annotations``
    (at ``path``), none when it is absent."""
    text = annotations.get(ANNOTATION_SIM_WORLD)
    if text is None:
        return []
    try:
        parse_sim_world(text, filename, (*path, ANNOTATION_SIM_WORLD))
    except ValidationFailed as e:
        return list(e.issues)
    return []
