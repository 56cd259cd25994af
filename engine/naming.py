"""Deterministic object names: the same workflow and node always give the same name."""

from __future__ import annotations

import hashlib
import re

_INVALID = re.compile(r"[^a-z0-9-]+")


def sanitize(s: str) -> str:
    return _INVALID.sub("-", s.lower()).strip("-") or "x"


def object_name(workflow: str, node: str, limit: int = 63) -> str:
    """``<workflow>-<node>``, shortened with a stable hash suffix when longer than ``limit``."""
    name = sanitize(f"{workflow}-{node}")
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"
