"""Wait tells every change it sees to the manager's observation listeners (``objectsChanged``):
the values its condition was evaluated on, and whether it held. A Wait whose condition never holds
is a plain watcher (megatest's replica watch), stopped by its parent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from engine.manager import WorkflowManager
from engine.phases import IGNORED, Event, EventType, NodePhase, Observation, ObservedLists
from engine.runtime import Node, WorkflowRun
from templates import machine_for
from tests.helpers import run_with_node, workflow
from triggers.operable import OperableTrigger

E = EventType
P = NodePhase
NOW = 1_000.0
M = machine_for("Wait")
FLAG = {"apiVersion": "v1", "kind": "ConfigMap", "name": "flag"}
WEB = {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": "app=web"}


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": {"v": "1"},
    }


def _started(condition: str) -> tuple[WorkflowRun, Node]:
    tmpl = {
        "name": "w",
        "templateType": "Wait",
        "wait": {"condition": condition, "objects": {"flag": FLAG, "web": WEB}},
    }
    run, node = run_with_node([tmpl], "w")
    tr = M.handle(node, Event("default/wf", "w-0", E.NODE_CREATED), run, NOW)
    node.phase = P.HOLDING
    node.state.update(tr.state or {})
    return run, node


def _changed(run: WorkflowRun, node: Node, lists: dict[str, list[dict[str, Any]]]) -> Any:
    return M.handle(node, Event("default/wf", "w-0", E.NODE_OBJECT_CHANGED, ObservedLists(lists)), run, NOW)


def test_every_change_is_an_observation_with_the_values_seen() -> None:
    run, node = _started("flag != null")
    assert _changed(run, node, {"flag": []}) is IGNORED  # not every set listed yet: nothing seen
    web = [_cm("a", app="web")]
    tr = _changed(run, node, {"flag": [], "web": web})
    assert tr.phase is None
    assert tr.observations == (
        Observation("objectsChanged", {"objects": {"flag": None, "web": web}, "holds": False}),
    )
    assert tr.observations[0].data["objects"]["web"] is web  # shared with the watch, not copied
    flag = _cm("flag")
    tr = _changed(run, node, {"flag": [flag], "web": web})
    assert tr.phase is P.SUCCEED
    assert tr.observations == (
        Observation("objectsChanged", {"objects": {"flag": flag, "web": web}, "holds": True}),
    )


def test_an_evaluation_error_is_observed_too() -> None:
    run, node = _started("size(web) + 'x' == 1")
    tr = _changed(run, node, {"flag": [], "web": []})
    assert tr.phase is P.FAILED and tr.reason == "ExpressionError"
    assert [o.data["holds"] for o in tr.observations] == [False]


def _discarding(fn: Callable[[], object]) -> Callable[[], None]:
    def call() -> None:
        fn()

    return call


def test_a_never_holding_wait_is_a_watcher_for_the_listeners() -> None:
    """On the engine: the listener hears the set now and at each change, until the deadline."""
    clock = VirtualClock()
    trigger = OperableTrigger(clock)
    world = SimWorld(clock, trigger)
    mgr = WorkflowManager(world.playground, clock, trigger)
    heard: list[tuple[float, list[str]]] = []

    def listen(run: WorkflowRun, node: Node, ob: Observation, now: float) -> None:
        if ob.what == "objectsChanged":
            names = [o["metadata"]["name"] + "=" + o["data"]["v"] for o in ob.data["objects"]["web"]]
            heard.append((now - t0, names))

    mgr.observation_listeners.append(listen)
    pg = world.playground
    pg.create("default", _cm("a", app="web"))
    wf = workflow(
        [{"name": "w", "templateType": "Wait", "wait": {"condition": "false", "objects": {"web": WEB}}}],
        deadline="10m",
        onDeadline="Succeed",
    )
    t0 = clock.now()
    changes: list[tuple[float, Callable[[], object]]] = [
        (60, lambda: pg.create("default", _cm("b", app="web"))),
        (120, lambda: pg.patch("default", "v1", "ConfigMap", "default", "a", {"data": {"v": "2"}})),
        (180, lambda: pg.create("default", _cm("other", app="db"))),  # not in the set
        (240, lambda: pg.delete("default", "v1", "ConfigMap", "default", "b")),
    ]
    for at, change in changes:
        trigger.call_at(t0 + at, _discarding(change))
    run = mgr.submit(wf)
    mgr.run()
    assert run.phase.value == "Succeed", run.message
    assert heard == [(0.0, ["a=1"]), (60.0, ["a=1", "b=1"]), (120.0, ["a=2", "b=1"]), (240.0, ["a=2"])]
    assert mgr.watch.observed_sets() == 0  # the watcher ended with the deadline
