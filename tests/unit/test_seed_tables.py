"""Every cell of the seed's transition tables (Serial, Suspend, Chaos) is a test.

The seed (chaos-mesh-workflow-internal-design.md) gives, per kind, the available phases and what
each event does in each phase; "-" means the event is ignored in that phase.
"""

from __future__ import annotations

import pytest

from engine.phases import (
    IGNORED,
    Act,
    CreateChildren,
    Event,
    EventType,
    NodePhase,
    Notify,
    NotifyAt,
    NotifyParent,
)
from templates import machine_for
from tests.helpers import add_child, run_with_node

E = EventType
P = NodePhase
NOW = 1_000.0

SERIAL = [
    {"name": "s", "templateType": "Serial", "children": ["a", "b"]},
    {"name": "a", "templateType": "Suspend", "duration": "1s"},
    {"name": "b", "templateType": "Suspend", "duration": "1s"},
]
SUSPEND = [{"name": "z", "templateType": "Suspend", "duration": "10s"}]
CHAOS = [
    {
        "name": "c",
        "templateType": "NetworkChaos",
        "duration": "20s",
        "networkChaos": {"action": "delay", "mode": "all", "selector": {}},
    }
]


def dash_cells(
    phases: list[str], events: list[EventType], active: set[tuple[str, EventType]]
) -> list[tuple[str, EventType]]:
    return [(p, e) for p in phases for e in events if (p, e) not in active]


def ev(t: EventType, payload: object = None) -> Event:
    return Event("default/wf", "x", t, payload)


# ----------------------------------------------------------------------------------- Serial
SERIAL_PHASES = ["Init", "WaitingForSchedule", "WaitingForChild", "Succeed", "Failed"]
SERIAL_EVENTS = [E.NODE_CREATED, E.NODE_PICK_CHILD_TO_SCHEDULE, E.CHILD_NODE_SUCCEED, E.CHILD_NODE_FAILED]
SERIAL_ACTIVE = {
    ("Init", E.NODE_CREATED),
    ("WaitingForSchedule", E.NODE_PICK_CHILD_TO_SCHEDULE),
    ("WaitingForChild", E.CHILD_NODE_SUCCEED),
    ("WaitingForChild", E.CHILD_NODE_FAILED),
}


@pytest.mark.parametrize(("phase", "event"), dash_cells(SERIAL_PHASES, SERIAL_EVENTS, SERIAL_ACTIVE))
def test_serial_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(SERIAL, "s", phase)
    assert machine_for("Serial").handle(node, ev(event), run, NOW) is IGNORED


def test_serial_init_node_created() -> None:
    run, node = run_with_node(SERIAL, "s", "Init")
    tr = machine_for("Serial").handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.WAITING_FOR_SCHEDULE
    assert tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]


def test_serial_pick_creates_first_child() -> None:
    run, node = run_with_node(SERIAL, "s", "WaitingForSchedule")
    tr = machine_for("Serial").handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.phase is P.WAITING_FOR_CHILD
    assert tr.effects == [CreateChildren(("a",))]


def test_serial_pick_creates_next_child() -> None:
    run, node = run_with_node(SERIAL, "s", "WaitingForSchedule")
    add_child(run, node, "a", "Succeed")
    tr = machine_for("Serial").handle(node, ev(E.NODE_PICK_CHILD_TO_SCHEDULE), run, NOW)
    assert tr.effects == [CreateChildren(("b",))]


def test_serial_child_succeed_with_more_children_goes_back_to_schedule() -> None:
    run, node = run_with_node(SERIAL, "s", "WaitingForChild")
    add_child(run, node, "a", "Succeed")
    tr = machine_for("Serial").handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.WAITING_FOR_SCHEDULE
    assert tr.effects == [Notify(E.NODE_PICK_CHILD_TO_SCHEDULE)]


def test_serial_last_child_succeed_succeeds_and_tells_parent() -> None:
    run, node = run_with_node(SERIAL, "s", "WaitingForChild")
    add_child(run, node, "a", "Succeed")
    add_child(run, node, "b", "Succeed")
    tr = machine_for("Serial").handle(node, ev(E.CHILD_NODE_SUCCEED), run, NOW)
    assert tr.phase is P.SUCCEED
    assert tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]


def test_serial_child_failed_fails_and_tells_parent() -> None:
    run, node = run_with_node(SERIAL, "s", "WaitingForChild")
    add_child(run, node, "a", "Failed")
    tr = machine_for("Serial").handle(node, ev(E.CHILD_NODE_FAILED), run, NOW)
    assert tr.phase is P.FAILED
    assert tr.effects == [NotifyParent(E.CHILD_NODE_FAILED)]
    assert "child a-1 failed" in (tr.message or "")


# ---------------------------------------------------------------------------------- Suspend
SUSPEND_PHASES = ["Init", "Holding", "Succeed"]
SUSPEND_EVENTS = [E.NODE_CREATED, E.NODE_HOLDING_AWAKE]
SUSPEND_ACTIVE = {("Init", E.NODE_CREATED), ("Holding", E.NODE_HOLDING_AWAKE)}


@pytest.mark.parametrize(("phase", "event"), dash_cells(SUSPEND_PHASES, SUSPEND_EVENTS, SUSPEND_ACTIVE))
def test_suspend_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(SUSPEND, "z", phase, {"holdUntil": NOW})
    assert machine_for("Suspend").handle(node, ev(event), run, NOW) is IGNORED


def test_suspend_init_created_holds_and_delays_awake() -> None:
    run, node = run_with_node(SUSPEND, "z", "Init")
    tr = machine_for("Suspend").handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.HOLDING
    assert tr.effects == [NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 10)]


def test_suspend_holding_awake_succeeds() -> None:
    run, node = run_with_node(SUSPEND, "z", "Holding", {"holdUntil": NOW})
    tr = machine_for("Suspend").handle(node, ev(E.NODE_HOLDING_AWAKE), run, NOW)
    assert tr.phase is P.SUCCEED
    assert tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]


# ------------------------------------------------------------------------------------ Chaos
CHAOS_PHASES = ["Init", "Running", "Holding", "Succeed", "Failed"]
CHAOS_EVENTS = [E.NODE_CREATED, E.NODE_CHAOS_INJECTED, E.NODE_HOLDING_AWAKE, E.NODE_CHAOS_CLEANED]
CHAOS_ACTIVE = {
    ("Init", E.NODE_CREATED),
    ("Running", E.NODE_CHAOS_INJECTED),
    ("Holding", E.NODE_HOLDING_AWAKE),
    ("Running", E.NODE_CHAOS_CLEANED),
}
REF = {
    "cluster": "default",
    "apiVersion": "chaos-mesh.org/v1alpha1",
    "kind": "NetworkChaos",
    "namespace": "default",
    "name": "wf-c-0",
}
INJECTED_OBJ = {
    "apiVersion": "chaos-mesh.org/v1alpha1",
    "kind": "NetworkChaos",
    "metadata": {"name": "wf-c-0", "namespace": "default"},
    "status": {"conditions": [{"type": "AllInjected", "status": "True"}]},
}


@pytest.mark.parametrize(("phase", "event"), dash_cells(CHAOS_PHASES, CHAOS_EVENTS, CHAOS_ACTIVE))
def test_chaos_dash_cells_are_ignored(phase: str, event: EventType) -> None:
    run, node = run_with_node(CHAOS, "c", phase, {"object": REF, "holdUntil": NOW})
    assert machine_for("NetworkChaos").handle(node, ev(event, INJECTED_OBJ), run, NOW) is IGNORED


def test_chaos_init_created_runs_and_creates_by_actor() -> None:
    run, node = run_with_node(CHAOS, "c", "Init")
    tr = machine_for("NetworkChaos").handle(node, ev(E.NODE_CREATED), run, NOW)
    assert tr.phase is P.RUNNING
    (act,) = tr.effects
    assert isinstance(act, Act) and act.action == "object.create" and act.ok is E.NODE_CHAOS_INJECTED
    obj = act.params["object"]
    assert obj["kind"] == "NetworkChaos" and obj["metadata"]["name"] == "wf-c-0"
    assert obj["metadata"]["labels"]["chaosflow.io/workflow"] == "wf"
    assert obj["metadata"]["labels"]["chaosflow.io/node"] == "c-0"
    assert obj["spec"]["action"] == "delay"


def test_chaos_running_injected_holds_for_duration() -> None:
    run, node = run_with_node(CHAOS, "c", "Running", {"object": REF, "injected": False})
    tr = machine_for("NetworkChaos").handle(node, ev(E.NODE_CHAOS_INJECTED, INJECTED_OBJ), run, NOW)
    assert tr.phase is P.HOLDING
    assert NotifyAt(E.NODE_HOLDING_AWAKE, NOW + 20) in tr.effects


def test_chaos_holding_awake_runs_and_deletes_by_actor() -> None:
    run, node = run_with_node(CHAOS, "c", "Holding", {"object": REF, "injected": True, "holdUntil": NOW})
    tr = machine_for("NetworkChaos").handle(node, ev(E.NODE_HOLDING_AWAKE), run, NOW)
    assert tr.phase is P.RUNNING
    assert tr.effects == [Act("object.delete", REF, ok=E.NODE_CHAOS_CLEANED)]


def test_chaos_running_cleaned_succeeds_and_tells_parent() -> None:
    run, node = run_with_node(CHAOS, "c", "Running", {"object": REF, "injected": True, "deleting": True})
    tr = machine_for("NetworkChaos").handle(node, ev(E.NODE_CHAOS_CLEANED, {"gone": True}), run, NOW)
    assert tr.phase is P.SUCCEED
    assert tr.effects == [NotifyParent(E.CHILD_NODE_SUCCEED)]
