"""OperableTrigger: the engine's one event queue, with a timer heap and rate limiting.

As in the seed: ``notify`` enqueues, ``notify_delay`` enqueues after a delay, ``acquire`` dequeues.
Timers are kept in a heap keyed by clock time; callbacks (simulated controllers) share the heap, so
on a virtual clock every kind of future work is ordered in one place and time can jump straight to
the next due item when nothing is runnable. Items due at the same instant keep insertion order.

Rate limiting follows client-go's workqueue: a token bucket over dequeues (``qps``/``burst``;
off by default) and a per-key exponential backoff for retries (``notify_rate_limited``/``forget``).
Depth, adds and queue latency are observable through :class:`QueueStats`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

from engine.clock import Clock, VirtualClock
from engine.phases import Event

TimerItem = Event | Callable[[], None]


class Trigger(Protocol):
    def trigger_name(self) -> str: ...

    def acquire(self, timeout: float | None = None) -> Event | None: ...


@dataclass(slots=True)
class QueueStats:
    adds: int = 0
    delayed_adds: int = 0
    acquired: int = 0
    retries: int = 0
    throttled: int = 0
    latency_sum: float = 0.0  # seconds of wall time events waited in the ready queue
    latency_max: float = 0.0
    latency_samples: list[float] = field(default_factory=list)
    sample_latency: bool = False


class OperableTrigger:
    def __init__(
        self,
        clock: Clock,
        name: str = "workflow",
        qps: float | None = None,
        burst: int = 1,
        base_backoff: float = 0.005,
        max_backoff: float = 1000.0,
    ) -> None:
        self.clock = clock
        self.name = name
        self._ready: deque[Event] = deque()
        self._heap: list[tuple[float, int, TimerItem]] = []
        self._seq = 0
        self._cond = threading.Condition(threading.Lock())
        self._qps = qps
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._tokens_at = clock.now()
        self._failures: dict[Hashable, int] = {}
        self._base_backoff = base_backoff
        self._max_backoff = max_backoff
        self._closed = False
        self.stats = QueueStats()
        self.on_add: Callable[[], None] | None = None  # metrics hook

    # --- the seed's interface -----------------------------------------------------------------
    def trigger_name(self) -> str:
        return self.name

    def notify(self, event: Event) -> None:
        event.enqueued = time.perf_counter()
        with self._cond:
            self._ready.append(event)
            self.stats.adds += 1
            self._cond.notify()

    def notify_delay(self, event: Event, delay: float) -> None:
        self.notify_at(event, self.clock.now() + max(0.0, delay))

    def notify_at(self, event: Event, at: float) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (at, self._seq, event))
            self.stats.delayed_adds += 1
            self._cond.notify()

    def acquire(self, timeout: float | None = None) -> Event | None:
        """Dequeue the next event, waiting for timers on a real clock; None when nothing is left.

        On a virtual clock the wait is a jump: time advances to the next due timer. ``None`` then
        means the queue and the timer heap are both empty (or ``timeout`` elapsed on a real clock).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ev = self.pop_ready()
            if ev is not None:
                return ev
            if self.clock.virtual:
                if not self.advance():
                    return None
                continue
            with self._cond:
                if self._closed:
                    return None
                wait = self._wait_time()
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                if not self._ready:
                    self._cond.wait(wait)

    # --- timers for simulated controllers and actors ---------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.call_at(self.clock.now() + max(0.0, delay), callback)

    def call_at(self, at: float, callback: Callable[[], None]) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (at, self._seq, callback))
            self._cond.notify()

    # --- rate limiting ------------------------------------------------------------------------
    def notify_rate_limited(self, event: Event, key: Hashable) -> float:
        """Re-enqueue after a per-key exponential backoff; returns the delay used."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self._base_backoff * (2**n), self._max_backoff)
        self.stats.retries += 1
        self.notify_delay(event, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def _take_token(self) -> bool:
        if self._qps is None:
            return True
        now = self.clock.now()
        self._tokens = min(float(self._burst), self._tokens + (now - self._tokens_at) * self._qps)
        self._tokens_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.stats.throttled += 1
        return False

    def _next_token_at(self) -> float:
        assert self._qps is not None
        return self._tokens_at + (1.0 - self._tokens) / self._qps

    # --- engine-loop primitives --------------------------------------------------------------
    def pop_ready(self) -> Event | None:
        """Non-blocking: move due timers to the ready queue (running due callbacks) and pop one."""
        now = self.clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            with self._cond:
                if not heap or heap[0][0] > now:
                    break
                _, _, item = heapq.heappop(heap)
            if isinstance(item, Event):
                item.enqueued = time.perf_counter()
                self._ready.append(item)
                self.stats.adds += 1
            else:
                item()
        if not self._ready:
            return None
        if not self._take_token():
            return None
        with self._cond:
            if not self._ready:
                return None
            ev = self._ready.popleft()
        st = self.stats
        st.acquired += 1
        lat = time.perf_counter() - ev.enqueued
        st.latency_sum += lat
        st.latency_max = max(st.latency_max, lat)
        if st.sample_latency:
            st.latency_samples.append(lat)
        return ev

    def _wait_time(self) -> float | None:
        """Seconds until the next timer or token (real clock), None when nothing is scheduled."""
        nxt: float | None = self._heap[0][0] if self._heap else None
        if self._ready and self._qps is not None:
            t = self._next_token_at()
            nxt = t if nxt is None else min(nxt, t)
        if nxt is None:
            return None
        return max(0.0, nxt - self.clock.now())

    def next_due(self) -> float | None:
        with self._cond:
            nxt: float | None = self._heap[0][0] if self._heap else None
            if self._ready and self._qps is not None:
                t = self._next_token_at()
                nxt = t if nxt is None else min(nxt, t)
            return nxt

    def advance(self) -> bool:
        """Virtual clock only: jump to the next due timer. False when there is none."""
        clock = self.clock
        assert isinstance(clock, VirtualClock), "advance() needs a virtual clock"
        nxt = self.next_due()
        if nxt is None:
            return False
        clock.advance_to(nxt)
        return True

    def wait(self, timeout: float | None) -> None:
        """Real clock: block until something is enqueued, a timer is due, or ``timeout``."""
        with self._cond:
            if self._ready or self._closed:
                return
            wait = self._wait_time()
            if timeout is not None:
                wait = timeout if wait is None else min(wait, timeout)
            self._cond.wait(wait)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- observability ------------------------------------------------------------------------
    def depth(self) -> int:
        return len(self._ready)

    def delayed_depth(self) -> int:
        return len(self._heap)

    def has_ready(self) -> bool:
        return bool(self._ready)
