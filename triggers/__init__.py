"""Triggers feed the engine: the operable queue, cluster watches, and cron schedules."""

from __future__ import annotations

from triggers.operable import OperableTrigger, QueueStats, Trigger

__all__ = ["OperableTrigger", "QueueStats", "Trigger"]
