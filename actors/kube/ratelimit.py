"""Client-side request rate limiting: a token bucket like client-go's QPS/Burst limiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; every request takes one.

    :meth:`acquire` never fails: it reserves the next token and sleeps until that token is due
    (tokens may go negative, so concurrent callers queue up fairly instead of spinning, as with
    Go's ``rate.Limiter``). ``qps <= 0`` disables limiting. Thread-safe. ``clock`` and ``sleep``
    are injectable for tests."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 when qps > 0, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()
        self.waits = 0  # requests that had to wait
        self.waited = 0.0  # total seconds waited

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def _refill(self, now: float) -> None:
        if now > self._last:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now

    def reserve(self) -> float:
        """Takes a token now or in the future; returns how long the caller must wait for it."""
        if self.unlimited:
            return 0.0
        with self._lock:
            self._refill(self._clock())
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            wait = -self._tokens / self.qps
            self.waits += 1
            self.waited += wait
            return wait

    def try_acquire(self) -> bool:
        """Takes a token if one is available right now."""
        if self.unlimited:
            return True
        with self._lock:
            self._refill(self._clock())
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def acquire(self) -> float:
        """Blocks until a token is available; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait

    def available(self) -> float:
        """Tokens available now (negative while callers are queued)."""
        if self.unlimited:
            return float("inf")
        with self._lock:
            self._refill(self._clock())
            return self._tokens
