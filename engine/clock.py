"""Clocks: real wall-clock time and a virtual clock that jumps to the next timer.

A run on the simulated cluster uses :class:`VirtualClock`; time only moves when the engine has
nothing runnable and advances to the next due timer, so an hour of chaos takes milliseconds and a
run is reproducible. Every time in chaosflow is a float of seconds since the Unix epoch; the
virtual clock starts at :data:`VIRTUAL_EPOCH` (2026-01-01T00:00:00Z) unless told otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

VIRTUAL_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


class Clock(Protocol):
    """Source of the current time for a run."""

    @property
    def virtual(self) -> bool: ...

    def now(self) -> float: ...


class TimerService(Protocol):
    """What simulated controllers and actors need to schedule work on the run's clock.

    ``call_later`` runs ``callback`` on the engine thread once the clock reaches ``now() + delay``;
    callbacks due at the same instant run in the order they were scheduled (deterministic).
    """

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> None: ...


class RealClock:
    virtual = False

    def now(self) -> float:
        return time.time()


class VirtualClock:
    """A clock that only moves when told to. Never goes backwards."""

    virtual = True

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        self._now = max(self._now, t)

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)


def rfc3339(t: float | None) -> str | None:
    """Format a clock time as RFC 3339 (UTC, second precision unless sub-second)."""
    if t is None:
        return None
    dt = datetime.fromtimestamp(t, tz=UTC)
    if dt.microsecond:
        return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_rfc3339(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
