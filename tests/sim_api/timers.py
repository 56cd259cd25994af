"""A small deterministic TimerService for the sim tests: a heap of (due, seq, callback)."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from engine.clock import VirtualClock


class FakeTimers:
    """``call_later`` pushes onto a heap; ``run_*`` pops in (due, insertion) order and moves the
    virtual clock to each due time before calling back."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.fired = 0

    def now(self) -> float:
        return self.clock.now()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.clock.now() + max(0.0, delay), self._seq, callback))

    @property
    def pending(self) -> int:
        return len(self._heap)

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_until(self, t: float, max_steps: int = 1_000_000) -> int:
        """Fire every timer due at or before ``t``; leave the clock at ``t``."""
        steps = 0
        while self._heap and self._heap[0][0] <= t:
            due, _, cb = heapq.heappop(self._heap)
            self.clock.advance_to(due)
            cb()
            self.fired += 1
            steps += 1
            if steps >= max_steps:
                raise RuntimeError("too many timer steps: livelock?")
        self.clock.advance_to(t)
        return steps

    def advance(self, seconds: float) -> int:
        return self.run_until(self.clock.now() + seconds)

    def run_until_idle(self, limit: float = 86_400.0, max_steps: int = 1_000_000) -> int:
        """Fire timers until none is left (or the clock would pass now + ``limit``)."""
        end = self.clock.now() + limit
        steps = 0
        while self._heap and self._heap[0][0] <= end:
            due, _, cb = heapq.heappop(self._heap)
            self.clock.advance_to(due)
            cb()
            steps += 1
            if steps >= max_steps:
                raise RuntimeError("too many timer steps: livelock?")
        self.fired += steps
        return steps
