"""The embedded simulated cluster: an in-memory Kubernetes-shaped API and simulated controllers.

Public surface::

    SimCluster(name, clock, timers, rng=None, *, config=None)   # API server + controllers
    SimAPIServer(clock, uid_source=None, name="sim")             # the API alone
    APIError and subclasses                                      # Kubernetes-shaped errors
"""

from __future__ import annotations

from actors.sim.apiserver import ADDED, DELETED, MODIFIED, SimAPIServer, Watch
from actors.sim.cluster import SimCluster, SimConfig
from actors.sim.controllers import CHAOS_KINDS, ChaosTiming, PodTiming
from actors.sim.errors import (
    AlreadyExistsError,
    APIError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    MethodNotAllowedError,
    NotFoundError,
    api_error_for,
)
from actors.sim.types import ResourceType

__all__ = [
    "ADDED",
    "CHAOS_KINDS",
    "DELETED",
    "MODIFIED",
    "APIError",
    "AlreadyExistsError",
    "BadRequestError",
    "ChaosTiming",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "MethodNotAllowedError",
    "NotFoundError",
    "PodTiming",
    "ResourceType",
    "SimAPIServer",
    "SimCluster",
    "SimConfig",
    "Watch",
    "api_error_for",
]
