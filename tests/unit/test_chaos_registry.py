"""Named chaos actors: the registry, entry points, pod-kill's params, and the Chaos machine's hook."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import pytest

from actors import chaos_registry as reg
from actors.base import ActorError, Playground
from actors.chaos.pod_kill import PodKill, label_selector
from actors.chaos_registry import ChaosContext, ObjectRef, register_chaos_actor, unregister_chaos_actor
from engine.errors import ValidationFailed
from engine.loader import load_workflows_text
from engine.phases import Act, Event, EventType, NodePhase, NotifyAt, StopReason, StopRequest
from templates import machine_for
from tests.helpers import run_with_node

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Chaos")


class Recorder:
    """A test actor: creates nothing real, records calls."""

    def __init__(self, one_shot: bool = False) -> None:
        self.one_shot = one_shot
        self.calls: list[tuple[str, Any]] = []

    def inject(self, playground: Playground, params: dict[str, Any], ctx: ChaosContext) -> list[ObjectRef]:
        self.calls.append(("inject", params))
        ctx.outputs["hit"] = params.get("n", 0)
        return [
            {
                "cluster": ctx.cluster,
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": "default",
                "name": ctx.name,
            }
        ]

    def recover(self, playground: Playground, refs: list[ObjectRef], ctx: ChaosContext) -> None:
        self.calls.append(("recover", refs))

    def validate(self, params: dict[str, Any]) -> list[str]:
        return [] if "n" in params else ["recorder: params.n is required"]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    register_chaos_actor("recorder", r)
    yield r
    unregister_chaos_actor("recorder")


# --- registry ---------------------------------------------------------------------------------------
def test_pod_kill_comes_from_the_entry_point() -> None:
    reg.reload_entry_points()
    assert "pod-kill" in reg.known_chaos_actions()
    actor = reg.get_chaos_actor("pod-kill")
    assert isinstance(actor, PodKill) and reg.is_one_shot("pod-kill")


def test_register_replace_and_unknown(recorder: Recorder) -> None:
    assert reg.get_chaos_actor("recorder") is recorder
    with pytest.raises(ValueError, match="already registered"):
        register_chaos_actor("recorder", Recorder())
    other = Recorder()
    register_chaos_actor("recorder", other, replace=True)
    assert reg.get_chaos_actor("recorder") is other
    with pytest.raises(TypeError):
        register_chaos_actor("broken", object())  # type: ignore[arg-type]
    with pytest.raises(reg.UnknownChaosAction, match=r"unknown chaos action 'nope' \(known: .*pod-kill"):
        reg.get_chaos_actor("nope")


def test_in_process_registration_wins_over_an_entry_point() -> None:
    mine = Recorder(one_shot=False)
    register_chaos_actor("pod-kill", mine)
    try:
        assert reg.get_chaos_actor("pod-kill") is mine and not reg.is_one_shot("pod-kill")
    finally:
        unregister_chaos_actor("pod-kill")
    assert isinstance(reg.get_chaos_actor("pod-kill"), PodKill)


def test_a_broken_entry_point_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    class EP:
        def __init__(self, name: str, value: str, fn: Any) -> None:
            self.name, self.value, self._fn = name, value, fn

        def load(self) -> Any:
            return self._fn()

    def boom() -> Any:
        raise ImportError("no module named nowhere")

    eps = [
        EP("bad", "nowhere:Bad", boom),
        EP("notactor", "x:y", lambda: 42),
        EP("good", "x:Rec", lambda: Recorder),
    ]
    monkeypatch.setattr(reg, "entry_points", lambda group: eps if group == reg.ENTRY_POINT_GROUP else [])
    reg.reload_entry_points()
    try:
        known = reg.known_chaos_actions()  # in-process registrations (e.g. megatest's) may be listed too
        assert "good" in known and "bad" not in known and "notactor" not in known
        assert isinstance(reg.get_chaos_actor("good"), Recorder)  # a class is instantiated
        with pytest.raises(reg.UnknownChaosAction, match="failed to load: ImportError"):
            reg.get_chaos_actor("bad")
    finally:
        monkeypatch.undo()
        reg.reload_entry_points()


def test_inject_and_recover_actions(recorder: Recorder) -> None:
    ctx = {
        "workflow": "wf",
        "namespace": "default",
        "node": "c-0",
        "name": "wf-c-0",
        "cluster": "default",
        "seed": 1,
    }
    out = reg.chaos_inject(fake(), {"action": "recorder", "params": {"n": 3}, "ctx": ctx})
    assert out == {
        "refs": [
            {
                "cluster": "default",
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": "default",
                "name": "wf-c-0",
            }
        ],
        "outputs": {"hit": 3},
    }
    pg = fake(present={"wf-c-0"})
    with pytest.raises(ActorError, match="still present after recover: ConfigMap wf-c-0") as e:
        reg.chaos_recover(pg, {"action": "recorder", "ctx": ctx, "refs": out["refs"]})
    assert e.value.transient
    assert reg.chaos_recover(fake(), {"action": "recorder", "ctx": ctx, "refs": out["refs"]}) == {
        "gone": True
    }


def test_bad_refs_are_an_actor_error(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder, "inject", lambda pg, params, ctx: [{"name": "x"}])
    ctx = {"workflow": "wf", "namespace": "default", "node": "c-0", "name": "wf-c-0", "cluster": "default"}
    with pytest.raises(ActorError, match="a ref needs cluster, apiVersion, kind, name"):
        reg.chaos_inject(fake(), {"action": "recorder", "params": {}, "ctx": ctx})


class FakePG:
    def __init__(self, present: set[str] | None = None, pods: list[str] | None = None) -> None:
        self.present = present or set()
        self.pods = pods or []
        self.deleted: list[str] = []
        self.selectors: list[str | None] = []

    def get(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        return {"metadata": {"name": name}} if name in self.present else None

    def list(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        self.selectors.append(label_selector)
        return [{"metadata": {"name": p}} for p in self.pods]

    def delete(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        self.deleted.append(name)
        return True


def fake(present: set[str] | None = None) -> Playground:
    return cast(Playground, FakePG(present))


# --- pod-kill -------------------------------------------------------------------------------------------
def test_label_selectors() -> None:
    assert label_selector("app=web") == "app=web"
    assert label_selector({"app": "web", "tier": "fe"}) == "app=web,tier=fe"
    assert label_selector({"labelSelectors": {"app": "web"}}) == "app=web"
    sel = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "owner", "operator": "Exists"},
        ],
    }
    assert label_selector(sel) == "app=web,zone in (a,b),!canary,tier notin (db),owner"
    with pytest.raises(ValueError):
        label_selector({"matchExpressions": [{"key": "a", "operator": "Gt"}]})


def test_pod_kill_params() -> None:
    pk = PodKill()
    assert pk.validate({"selector": {"app": "web"}, "count": 2}) == []
    assert pk.validate({"selector": "app=web", "count": "all"}) == []
    assert pk.validate({"selector": "{{ params.sel }}", "count": "{{ params.n }}"}) == []
    assert pk.validate({}) == [
        "pod-kill: params.selector is required (a pod-kill without a selector kills anything)"
    ]
    assert pk.validate({"selector": "a=b", "count": 0}) == [
        'pod-kill: params.count must be a positive integer or "all", got 0'
    ]
    assert pk.validate({"selector": "a=b", "mode": "one"})[0].startswith("pod-kill: unknown params mode")


def test_pod_kill_picks_with_the_seeded_source_and_reports_the_victims() -> None:
    def kill(seed: int, count: Any) -> list[str]:
        pg = FakePG(pods=[f"web-{i}" for i in range(6)])
        ctx = ChaosContext("wf", "default", "k-0", "wf-k-0", "default", seed=seed)
        assert PodKill().inject(cast(Playground, pg), {"selector": {"app": "web"}, "count": count}, ctx) == []
        assert ctx.outputs["killed"] == sorted(pg.deleted) and pg.selectors == ["app=web"]
        return pg.deleted

    assert kill(1, 2) == kill(1, 2)
    assert len({tuple(kill(s, 2)) for s in range(20)}) > 3
    assert sorted(kill(1, "all")) == [f"web-{i}" for i in range(6)]
    assert len(kill(1, 10)) == 6
    with pytest.raises(ActorError, match="no pod in namespace default matches"):
        PodKill().inject(
            fake(), {"selector": "app=none"}, ChaosContext("wf", "default", "k-0", "wf-k-0", "default")
        )


# --- the Chaos machine with a named actor ----------------------------------------------------------------
def named(action: str = "recorder", **extra: Any) -> dict[str, Any]:
    return {"name": "c", "templateType": "Chaos", "chaos": {"action": action, "params": {"n": 2}}, **extra}


def ev(t: EventType, payload: Any = None) -> Event:
    return Event("default/wf", "c-0", t, payload)


def test_named_actor_is_driven_by_the_chaos_machine(recorder: Recorder) -> None:
    run, node = run_with_node([named(duration="30s")], "c")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    (act,) = tr.effects
    assert isinstance(act, Act) and act.action == "chaos.inject" and tr.phase is P.RUNNING
    assert act.params["action"] == "recorder" and act.params["params"] == {"n": 2}
    ctx = act.params["ctx"]
    assert ctx["name"] == "wf-c-0" and ctx["labels"]["chaosflow.io/node"] == "c-0"
    assert isinstance(ctx["seed"], int)
    node.phase, node.state = P.RUNNING, dict(tr.state or {})
    ref = {"cluster": "default", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "x"}
    tr = M.handle(node, ev(E.NODE_CHAOS_INJECTED, {"refs": [ref], "outputs": {"hit": 2}}), run, NOW + 1)
    assert tr.phase is P.HOLDING and tr.effects == [NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 31)]
    assert tr.outputs == {"hit": 2, "objects": 1}
    node.phase = P.HOLDING
    node.state.update(tr.state or {})
    # resume while holding: only the timer (there is nothing to observe)
    assert M.resume(node, run, NOW + 2) == [NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 31)]
    # abort while holding: recover with the stored refs before finishing
    tr = M.handle(node, ev(E.NODE_ABORT, StopRequest(StopReason.ABORTED, "stop")), run, NOW + 5)
    (rec,) = tr.effects
    assert isinstance(rec, Act) and rec.action == "chaos.recover" and rec.params["refs"] == [ref]
    node.phase = P.RUNNING
    node.state.update(tr.state or {})
    assert M.resume(node, run, NOW + 6) == [rec]  # a restart re-issues the recovery
    tr = M.handle(node, ev(E.NODE_CHAOS_CLEANED, {"gone": True}), run, NOW + 6)
    assert tr.phase is P.FAILED and tr.reason == "Aborted"


def test_one_shot_named_actor_recovers_at_once(recorder: Recorder) -> None:
    recorder.one_shot = True
    run, node = run_with_node([named()], "c")  # no duration needed
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    node.phase, node.state = P.RUNNING, dict(tr.state or {})
    assert M.resume(node, run, NOW) == list(tr.effects)  # a restart before the answer injects again
    tr = M.handle(node, ev(E.NODE_CHAOS_INJECTED, {"refs": [], "outputs": {}}), run, NOW)
    assert tr.phase is P.RUNNING and [e.action for e in tr.effects if isinstance(e, Act)] == ["chaos.recover"]
    node.state.update(tr.state or {})
    assert M.handle(node, ev(E.NODE_CHAOS_CLEANED, {"gone": True}), run, NOW).phase is P.SUCCEED


def test_inject_failure_fails_the_node_and_recover_failure_is_retried(recorder: Recorder) -> None:
    run, node = run_with_node([named(duration="1m")], "c")
    tr = M.handle(node, ev(E.NODE_CREATED), run, NOW)
    node.phase, node.state = P.RUNNING, dict(tr.state or {})
    tr = M.handle(node, ev(E.NODE_ACTION_FAILED, "no target"), run, NOW)
    assert tr.phase is P.FAILED and tr.message == "chaos action recorder failed: no target"
    node.state.update({"deleting": True, "injected": True, "refs": []})
    tr = M.handle(node, ev(E.NODE_ACTION_FAILED, "still present"), run, NOW)
    assert tr.phase is None and tr.effects == [NotifyAt(E.NODE_RETRY, NOW + 1)]
    node.state.update(tr.state or {})
    tr = M.handle(node, ev(E.NODE_RETRY), run, NOW + 1)
    assert [e.action for e in tr.effects if isinstance(e, Act)] == ["chaos.recover"]


# --- validation ----------------------------------------------------------------------------------------
def _problems(tmpl: dict[str, Any]) -> list[str]:
    doc = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entry": tmpl["name"], "templates": [tmpl]},
    }
    try:
        load_workflows_text(json.dumps(doc), "wf.yaml")
    except ValidationFailed as e:
        return [str(i) for i in e.issues]
    return []


def test_unknown_action_is_rejected_with_the_known_ones(recorder: Recorder) -> None:
    (p,) = _problems(named("network-blok", duration="1m"))
    assert p.startswith(
        "wf.yaml: spec.templates[0].chaos.action: unknown chaos action 'network-blok' (known: "
    )
    assert "pod-kill" in p and "recorder" in p


def test_actor_params_are_validated(recorder: Recorder) -> None:
    bad = named(duration="1m")
    bad["chaos"]["params"] = {}
    assert _problems(bad) == ["wf.yaml: spec.templates[0].chaos.params: recorder: params.n is required"]
    assert _problems(named(duration="1m")) == []
    assert (
        _problems(
            {
                "name": "k",
                "templateType": "Chaos",
                "chaos": {"action": "pod-kill", "params": {"selector": "app=web"}},
            }
        )
        == []
    )
    both = named(duration="1m")
    both["chaos"]["manifest"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    assert (
        "wf.yaml: spec.templates[0].chaos: set either chaos.manifest or chaos.action, not both"
        in _problems(both)
    )
    assert any("needs a duration" in p for p in _problems(named()))  # not one-shot: needs a duration
