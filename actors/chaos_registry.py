"""Named chaos actors: ``Chaos`` templates with ``chaos: {action: <name>, params: {...}}``.

A chaos actor is any object with

``inject(playground, params, ctx) -> list[ObjectRef]``
    do the chaos; return references to every object it created (``{cluster, apiVersion, kind,
    namespace, name}``) so that they can be removed later, also after a crash. It must be
    idempotent for one ``ctx.name`` (create objects under deterministic names derived from it,
    AlreadyExists = done) and all-or-nothing: if it raises, it has undone its partial work.
``recover(playground, refs, ctx) -> None``
    undo the chaos: remove the objects in ``refs`` (NotFound = done) and restore anything else.

and optionally

``one_shot: bool``
    the chaos is done once injected (pod kill): the node completes without a hold or a duration.
``validate(params) -> list[str]``
    problems with ``params``, reported by ``chaosflow validate`` before anything runs (values that
    are still ``{{ expr }}`` templates are only known at run time).
``description: str``

Actors are found by name in two places: the in-process registry (:func:`register_chaos_actor`,
for tests and embedding) and the Python entry point group ``chaosflow.chaos_actors`` (a
distribution declares ``[project.entry-points."chaosflow.chaos_actors"] my-chaos =
"pkg.mod:MyChaos"``; a class is instantiated without arguments, anything else is used as it is).
In-process registrations win over entry points of the same name.

The engine reaches actors through two generic actions, ``chaos.inject`` and ``chaos.recover``
(:data:`actors.base.ACTIONS`). ``chaos.recover`` also checks that every referenced object is really
gone and fails (transiently, so the Chaos node retries with backoff) while one still exists:
chaos is never silently left behind.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from actors.base import ActorError, Playground

log = logging.getLogger("chaosflow.actors.chaos")

ENTRY_POINT_GROUP = "chaosflow.chaos_actors"

ObjectRef = dict[str, Any]
_REF_FIELDS = ("cluster", "apiVersion", "kind", "name")


@dataclass
class ChaosContext:
    """What an actor knows about the node it acts for (JSON-serializable, kept in node state)."""

    workflow: str  # workflow name
    namespace: str  # workflow namespace: the default namespace for objects
    node: str  # node name
    name: str  # deterministic object name (<workflow>-<node>, DNS-1123, <= 63 characters)
    cluster: str  # the template's chaos.cluster
    labels: dict[str, str] = field(default_factory=dict)  # put these on every object created
    seed: int = 0  # drawn from the workflow's seeded source when the node started
    outputs: dict[str, Any] = field(default_factory=dict)  # inject may fill: the node's outputs

    def rng(self) -> random.Random:
        """A random source that gives the same values for this node every time (also on resume)."""
        return random.Random(f"{self.seed}:{self.name}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("outputs")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChaosContext:
        return cls(
            workflow=str(d["workflow"]),
            namespace=str(d["namespace"]),
            node=str(d["node"]),
            name=str(d["name"]),
            cluster=str(d.get("cluster", "default")),
            labels=dict(d.get("labels") or {}),
            seed=int(d.get("seed", 0)),
        )


@runtime_checkable
class ChaosActor(Protocol):
    def inject(
        self, playground: Playground, params: dict[str, Any], ctx: ChaosContext
    ) -> list[ObjectRef]: ...

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None: ...


class UnknownChaosAction(ActorError):
    pass


_registered: dict[str, ChaosActor] = {}
_entry_points: dict[str, ChaosActor] | None = None
_entry_point_errors: dict[str, str] = {}


def register_chaos_actor(name: str, actor: ChaosActor, *, replace: bool = False) -> None:
    """Register ``actor`` under ``name`` in this process (wins over an entry point of that name)."""
    if not isinstance(actor, ChaosActor):
        raise TypeError(f"chaos actor {name!r} must have inject(playground, params, ctx) and recover(...)")
    if name in _registered and not replace:
        raise ValueError(f"chaos actor {name!r} is already registered (pass replace=True)")
    _registered[name] = actor


def unregister_chaos_actor(name: str) -> None:
    _registered.pop(name, None)


def _load_entry_points() -> dict[str, ChaosActor]:
    global _entry_points
    if _entry_points is not None:
        return _entry_points
    found: dict[str, ChaosActor] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            actor = obj() if isinstance(obj, type) else obj
        except Exception as e:  # a broken plugin must not take the engine down
            _entry_point_errors[ep.name] = f"{type(e).__name__}: {e}"
            log.warning("chaos actor entry point %s (%s) failed to load: %s", ep.name, ep.value, e)
            continue
        if not isinstance(actor, ChaosActor):
            _entry_point_errors[ep.name] = f"{ep.value} has no inject()/recover()"
            log.warning("chaos actor entry point %s (%s) is not a chaos actor", ep.name, ep.value)
            continue
        found[ep.name] = actor
    _entry_points = found
    return found


def reload_entry_points() -> None:
    """Forget the loaded entry points (they are read again on the next lookup)."""
    global _entry_points
    _entry_points = None
    _entry_point_errors.clear()


def known_chaos_actions() -> list[str]:
    return sorted({*_load_entry_points(), *_registered})


def get_chaos_actor(name: str) -> ChaosActor:
    actor = _registered.get(name) or _load_entry_points().get(name)
    if actor is None:
        known = ", ".join(known_chaos_actions()) or "none"
        why = (
            f" (its entry point failed to load: {_entry_point_errors[name]})"
            if name in _entry_point_errors
            else ""
        )
        raise UnknownChaosAction(f"unknown chaos action {name!r}{why} (known: {known})")
    return actor


def is_one_shot(name: str) -> bool:
    try:
        return bool(getattr(get_chaos_actor(name), "one_shot", False))
    except UnknownChaosAction:
        return False


def validate_action(name: str, params: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """Validation issues for ``chaos.action``/``chaos.params``: (path under ``chaos``, message)."""
    try:
        actor = get_chaos_actor(name)
    except UnknownChaosAction as e:
        return [(("action",), str(e))]
    check = getattr(actor, "validate", None)
    if check is None:
        return []
    try:
        problems = list(check(params))
    except Exception as e:
        return [(("params",), f"{name}: validating params failed: {type(e).__name__}: {e}")]
    return [(("params",), str(p)) for p in problems]


def _check_refs(name: str, refs: Any) -> list[ObjectRef]:
    if refs is None:
        return []
    if not isinstance(refs, list):
        raise ActorError(f"chaos actor {name!r}: inject() must return a list of object refs")
    out: list[ObjectRef] = []
    for r in refs:
        if not isinstance(r, dict) or not all(isinstance(r.get(f), str) and r.get(f) for f in _REF_FIELDS):
            raise ActorError(
                f"chaos actor {name!r}: inject() returned {r!r}; a ref needs cluster, apiVersion, kind, name"
            )
        out.append(
            {
                "cluster": r["cluster"],
                "apiVersion": r["apiVersion"],
                "kind": r["kind"],
                "namespace": r.get("namespace"),
                "name": r["name"],
            }
        )
    return out


def chaos_inject(pg: Playground, p: dict[str, Any]) -> dict[str, Any]:
    """Action ``chaos.inject``: ``{action, params, ctx}`` -> ``{refs, outputs}``."""
    name = str(p["action"])
    actor = get_chaos_actor(name)
    ctx = ChaosContext.from_dict(p["ctx"])
    refs = _check_refs(name, actor.inject(pg, dict(p.get("params") or {}), ctx))
    return {"refs": refs, "outputs": dict(ctx.outputs)}


def chaos_recover(pg: Playground, p: dict[str, Any]) -> dict[str, Any]:
    """Action ``chaos.recover``: ``{action, params, ctx, refs}`` -> ``{gone: True}``.

    Raises a transient :class:`ActorError` while a referenced object still exists (finalizers),
    so the caller retries with backoff instead of leaving chaos behind.
    """
    name = str(p["action"])
    actor = get_chaos_actor(name)
    ctx = ChaosContext.from_dict(p["ctx"])
    refs: list[ObjectRef] = list(p.get("refs") or [])
    actor.recover(pg, refs, ctx)
    left = [
        r
        for r in refs
        if pg.get(r["cluster"], r["apiVersion"], r["kind"], r.get("namespace"), r["name"]) is not None
    ]
    if left:
        names = ", ".join(f"{r['kind']} {r['name']}" for r in left)
        raise ActorError(f"chaos {name!r}: still present after recover: {names}", transient=True)
    return {"gone": True}
