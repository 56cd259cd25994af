from __future__ import annotations

import random

import pytest

from actors.sim import SimAPIServer, SimCluster, SimConfig
from engine.clock import VirtualClock
from tests.sim_api.timers import FakeTimers


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def timers(clock: VirtualClock) -> FakeTimers:
    return FakeTimers(clock)


@pytest.fixture
def api(clock: VirtualClock) -> SimAPIServer:
    return SimAPIServer(clock, name="test", raise_callback_errors=True)


@pytest.fixture
def cluster(clock: VirtualClock, timers: FakeTimers) -> SimCluster:
    return SimCluster("test", clock, timers, random.Random(7), config=SimConfig(strict=True))
