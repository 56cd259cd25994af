"""Watch registration that fails (API server down) is retried with backoff instead of crashing the
engine loop, and dropped when the node stops observing."""

from __future__ import annotations

from typing import Any

from actors.base import ActorError
from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from engine.phases import Event, EventType, ObservedLists
from triggers.operable import OperableTrigger
from triggers.watch import ObjectWatchTrigger


class Flaky:
    """Delegates to a playground; get/list fail while ``down`` is positive (counting down)."""

    def __init__(self, inner: Any, down: int) -> None:
        self.inner = inner
        self.down = down
        self.calls = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.down > 0:
            self.down -= 1
            raise ActorError("connection refused", transient=True)

    def get(self, *a: Any) -> Any:
        self._maybe_fail()
        return self.inner.get(*a)

    def list(self, *a: Any) -> Any:
        self._maybe_fail()
        return self.inner.list(*a)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def setup(down: int) -> tuple[SimWorld, OperableTrigger, Flaky, ObjectWatchTrigger, list[Event]]:
    clock = VirtualClock()
    trigger = OperableTrigger(clock)
    w = SimWorld(clock, trigger)
    pg = Flaky(w.playground, down)
    events: list[Event] = []
    return w, trigger, pg, ObjectWatchTrigger(pg, events.append, trigger.call_later), events


def run_timers(trigger: OperableTrigger, seconds: float, stop: Any = lambda: False) -> None:
    """Advance the virtual clock timer by timer (running due callbacks) for at most ``seconds``."""
    end = trigger.now() + seconds
    while not stop() and trigger.advance() and trigger.now() <= end:
        trigger.pop_ready()


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


def test_observe_retries_with_backoff_until_the_api_answers() -> None:
    w, trigger, pg, trig, events = setup(down=3)
    w.clusters["default"].api.create(cm("a"))
    t0 = trigger.now()
    trig.observe("wf", "n", "default", "v1", "ConfigMap", "default", "a")
    assert events == []
    run_timers(trigger, 120, lambda: bool(events))
    assert len(events) == 1 and events[0].type is EventType.NODE_OBJECT_CHANGED
    assert events[0].payload["metadata"]["name"] == "a"
    assert trigger.now() - t0 == 1 + 2 + 4  # three failures: 1 s, 2 s, 4 s
    assert pg.calls == 4
    # once registered, changes arrive through the watch as usual
    w.clusters["default"].api.patch("ConfigMap", "a", {"data": {"k": "v"}}, "default")
    assert events[-1].payload["data"] == {"k": "v"}


def test_observe_kind_retries_and_the_retry_is_dropped_when_the_node_stops() -> None:
    _w, trigger, _pg, trig, events = setup(down=1)
    trig.observe_kind("wf", "n", "default", "v1", "ConfigMap", "default", None, None, "cms")
    trig.observe_kind("wf", "m", "default", "v1", "ConfigMap", "default", None, None, "cms")
    assert len(events) == 1 and events[0].node == "m"  # n failed once, m went through
    trig.unobserve_node("wf", "n")
    run_timers(trigger, 120)
    assert len(events) == 1  # n's retry found the node gone
    assert isinstance(events[0].payload, ObservedLists)


def test_without_a_retry_scheduler_the_error_is_raised() -> None:
    clock = VirtualClock()
    w = SimWorld(clock, OperableTrigger(clock))
    trig = ObjectWatchTrigger(Flaky(w.playground, 1), lambda e: None)
    try:
        trig.observe("wf", "n", "default", "v1", "ConfigMap", "default", "a")
    except ActorError as e:
        assert "connection refused" in str(e)
    else:  # pragma: no cover
        raise AssertionError("expected ActorError")
