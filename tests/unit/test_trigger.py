"""OperableTrigger: Notify / NotifyDelay / Acquire, the timer heap, rate limits, observability."""

from __future__ import annotations

import threading
import time

from engine.clock import RealClock, VirtualClock
from engine.phases import Event, EventType
from triggers.operable import OperableTrigger

E = EventType


def ev(node: str, t: EventType = E.NODE_CREATED) -> Event:
    return Event("ns/wf", node, t)


def test_notify_then_acquire_is_fifo() -> None:
    q = OperableTrigger(VirtualClock())
    for n in "abc":
        q.notify(ev(n))
    assert [q.acquire().node for _ in range(3)] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert q.acquire() is None  # nothing ready, no timers: the virtual clock has nowhere to go


def test_notify_delay_jumps_virtual_time_in_due_order() -> None:
    clock = VirtualClock(1000.0)
    q = OperableTrigger(clock)
    q.notify_delay(ev("late"), 30)
    q.notify_delay(ev("early"), 10)
    q.notify_delay(ev("same-1"), 20)
    q.notify_delay(ev("same-2"), 20)
    got = []
    while (e := q.acquire()) is not None:
        got.append((e.node, clock.now()))
    assert got == [("early", 1010.0), ("same-1", 1020.0), ("same-2", 1020.0), ("late", 1030.0)]


def test_ready_events_run_before_time_advances() -> None:
    clock = VirtualClock(0.0)
    q = OperableTrigger(clock)
    q.notify_delay(ev("timer"), 5)
    q.notify(ev("now"))
    assert q.acquire().node == "now"  # type: ignore[union-attr]
    assert clock.now() == 0.0
    assert q.acquire().node == "timer"  # type: ignore[union-attr]
    assert clock.now() == 5.0


def test_callbacks_share_the_heap() -> None:
    clock = VirtualClock(0.0)
    q = OperableTrigger(clock)
    seen: list[float] = []
    q.call_later(3, lambda: (seen.append(clock.now()), q.notify(ev("from-callback"))))
    assert q.acquire().node == "from-callback"  # type: ignore[union-attr]
    assert seen == [3.0]


def test_token_bucket_rate_limits_dequeues_on_virtual_time() -> None:
    clock = VirtualClock(0.0)
    q = OperableTrigger(clock, qps=10, burst=2)
    for i in range(6):
        q.notify(ev(str(i)))
    times = []
    while q.acquire() is not None:
        times.append(round(clock.now(), 3))
    assert times == [0.0, 0.0, 0.1, 0.2, 0.3, 0.4]
    assert q.stats.throttled > 0


def test_per_key_exponential_backoff_and_forget() -> None:
    clock = VirtualClock(0.0)
    q = OperableTrigger(clock, base_backoff=1.0, max_backoff=5.0)
    delays = [q.notify_rate_limited(ev("x"), key="x") for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert q.num_requeues("x") == 5
    q.forget("x")
    assert q.num_requeues("x") == 0
    assert q.notify_rate_limited(ev("x"), key="x") == 1.0


def test_depth_adds_and_latency_are_observable() -> None:
    q = OperableTrigger(VirtualClock())
    q.stats.sample_latency = True
    q.notify(ev("a"))
    q.notify_delay(ev("b"), 1)
    assert q.depth() == 1 and q.delayed_depth() == 1
    q.acquire()
    q.acquire()
    assert q.stats.adds == 2  # entries into the ready queue: a, then b when its timer fired
    assert q.stats.delayed_adds == 1
    assert q.stats.acquired == 2
    assert len(q.stats.latency_samples) == 2 and q.stats.latency_max >= 0


def test_real_clock_acquire_blocks_until_notified_from_another_thread() -> None:
    q = OperableTrigger(RealClock())
    threading.Timer(0.05, lambda: q.notify(ev("x"))).start()
    t0 = time.monotonic()
    e = q.acquire(timeout=5)
    assert e is not None and e.node == "x"
    assert time.monotonic() - t0 < 2


def test_real_clock_acquire_times_out() -> None:
    q = OperableTrigger(RealClock())
    assert q.acquire(timeout=0.01) is None


def test_real_clock_delayed_event_fires() -> None:
    q = OperableTrigger(RealClock())
    q.notify_delay(ev("soon"), 0.02)
    e = q.acquire(timeout=5)
    assert e is not None and e.node == "soon"
