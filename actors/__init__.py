"""Actors do every dirty effect, through a Playground.

A Playground is the engine's view of one or more named clusters (``default`` is the one the
workflow runs in). It is implemented by the embedded simulated cluster (``actors.sim``) and by real
clusters through the ``kubernetes`` client (``actors.kube``). Actors are idempotent: objects have
deterministic names, ``AlreadyExists`` on create returns the existing object and ``NotFound`` on
delete counts as done, so re-running an actor after a crash never injects anything twice.
"""

from __future__ import annotations

from actors.base import ACTIONS, Actor, ActorError, Playground, WatchHandle, run_action

__all__ = ["ACTIONS", "Actor", "ActorError", "Playground", "WatchHandle", "run_action"]
