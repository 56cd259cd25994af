"""Small fast helpers for JSON-shaped objects: copying, RFC 7386 merge patch, Go durations."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from actors.sim.errors import BadRequestError

__all__ = [
    "copy_json",
    "format_go_duration",
    "get_path",
    "merge_patch",
    "normalize_json",
    "parse_go_duration",
]

_dict = dict
_list = list


def copy_json(obj: Any) -> Any:
    """Deep-copy already-normalized JSON data (dicts, lists, scalars). ~8x faster than deepcopy."""
    t = type(obj)
    if t is _dict:
        out = {}
        for k, v in obj.items():
            tv = type(v)
            out[k] = copy_json(v) if (tv is _dict or tv is _list) else v
        return out
    if t is _list:
        return [copy_json(v) if (type(v) is _dict or type(v) is _list) else v for v in obj]
    return obj


_SCALAR_TYPES = frozenset({str, int, bool, type(None)})


def normalize_json(obj: Any, path: str = "") -> Any:
    """Deep-copy caller data into plain JSON types (tuples become lists), rejecting anything else.

    Raises :class:`BadRequestError` for values JSON cannot carry (sets, bytes, NaN, non-string keys).
    """
    t = type(obj)
    if t in _SCALAR_TYPES:
        return obj
    if t is _dict or isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, v in obj.items():
            if type(key) is str:
                k = key
            elif isinstance(key, str):
                k = str(key)
            else:
                raise BadRequestError(f"invalid object: non-string key {key!r} at {path or '.'}")
            tv = type(v)
            out[k] = v if tv in _SCALAR_TYPES else normalize_json(v, f"{path}.{k}")
        return out
    if t is _list or t is tuple:
        return [v if type(v) in _SCALAR_TYPES else normalize_json(v, path) for v in obj]
    if t is float:
        if math.isnan(obj) or math.isinf(obj):
            raise BadRequestError(f"invalid object: {obj!r} is not a JSON number at {path or '.'}")
        return obj
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return normalize_json(float(obj), path)
    raise BadRequestError(f"invalid object: value of type {t.__name__} at {path or '.'} is not JSON")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, functional: ``target`` is not modified.

    Unchanged subtrees of ``target`` are shared with the result (the store treats stored objects
    as immutable, so sharing is safe); values from ``patch`` are copied.
    """
    if type(patch) is not _dict:
        return normalize_json(patch)
    result: dict[str, Any] = dict(target) if type(target) is _dict else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        elif type(v) is _dict:
            result[k] = merge_patch(result.get(k), v)
        else:
            result[k] = normalize_json(v)
    return result


def get_path(obj: Any, path: str) -> Any:
    """Value at a dotted path (``status.phase``), or None when any step is missing."""
    cur = obj
    for part in path.split("."):
        if type(cur) is _dict:
            cur = cur.get(part)
        elif type(cur) is _list and part.isdigit():
            i = int(part)
            cur = cur[i] if i < len(cur) else None
        else:
            return None
        if cur is None:
            return None
    return cur


_GO_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.Duration`` string (``1h2m3.5s``, ``300ms``, ``-1s``) into seconds.

    A bare number is accepted as seconds (lenient). Raises ``ValueError`` when malformed.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    try:
        return sign * float(s)
    except ValueError:
        pass
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _GO_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Format seconds the way Go prints a Duration (``1m30s``, ``500ms``, ``0s``)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        ms = s * 1000
        return f"{sign}{ms:g}ms"
    hours, rem = divmod(s, 3600)
    minutes, secs = divmod(rem, 60)
    out = sign
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    out += f"{round(secs, 9):g}s"
    return out
