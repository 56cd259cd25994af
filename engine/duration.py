"""Go-style durations, fixed or drawn from a range.

Every duration in a chaosflow document is written like Go's ``time.ParseDuration`` accepts it
(``90s``, ``1m30s``, ``1.5h``, ``300ms``, ``2h45m``, ``1us``/``1µs``, ``10ns``, ``0``) or as a plain
number of seconds, and wherever a duration is allowed a range ``{min: 10s, max: 30s}`` may be given
instead; the run draws a value from its seeded random source (:meth:`DurationRange.draw`).

Internally a duration is a float of seconds (like every time in chaosflow, see
:mod:`engine.clock`); :func:`parse_duration_ns` / :func:`format_duration_ns` work on exact integer
nanoseconds like Go's ``time.Duration``.

For pydantic models use :data:`DurationSpec` (fixed or range) or :data:`Duration` (fixed only):
they validate every accepted form, serialize back to Go-style strings (``"1m30s"`` /
``{"min": "10s", "max": "30s"}``), and describe themselves in the JSON schema.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

__all__ = [
    "MAX_DURATION_NS",
    "Duration",
    "DurationError",
    "DurationRange",
    "DurationSpec",
    "draw_duration",
    "format_duration",
    "format_duration_ns",
    "format_duration_spec",
    "parse_duration",
    "parse_duration_ns",
    "parse_duration_spec",
]

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

#: Largest representable duration (Go's ``math.MaxInt64`` nanoseconds, about 292 years).
MAX_DURATION_NS = (1 << 63) - 1
_MAX_SECONDS = MAX_DURATION_NS / SECOND

_UNITS: dict[str, int] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # U+00B5 micro sign (what Go prints)
    "\u03bcs": MICROSECOND,  # U+03BC Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_VALID_UNITS = "valid: ns, us, ms, s, m, h"
_DIGITS = frozenset("0123456789")


class DurationError(ValueError):
    """A duration (or duration range) that cannot be accepted."""


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _invalid(orig: str, why: str) -> DurationError:
    return DurationError(f"invalid duration {_q(orig)}: {why}")


# --------------------------------------------------------------------------------------------
# parsing


def _leading_int(s: str, i: int) -> tuple[int, int, bool]:
    """Go's leadingInt: digits from ``i``; returns (value, new index, overflow)."""
    x = 0
    n = len(s)
    while i < n and s[i] in _DIGITS:
        if x > (1 << 63) // 10:
            return 0, i, True
        x = x * 10 + ord(s[i]) - 48
        if x > 1 << 63:
            return 0, i, True
        i += 1
    return x, i, False


def _leading_fraction(s: str, i: int) -> tuple[int, float, int]:
    """Go's leadingFraction: digits after the dot; extra precision is silently dropped."""
    x = 0
    scale = 1.0
    overflow = False
    n = len(s)
    while i < n and s[i] in _DIGITS:
        if not overflow:
            if x > ((1 << 63) - 1) // 10:
                overflow = True
            else:
                y = x * 10 + ord(s[i]) - 48
                if y > 1 << 63:
                    overflow = True
                else:
                    x = y
                    scale *= 10
        i += 1
    return x, scale, i


def parse_duration_ns(s: str, *, allow_negative: bool = False) -> int:
    """Parse a Go duration string into integer nanoseconds, exactly like ``time.ParseDuration``.

    A duration string is a possibly signed sequence of decimal numbers, each with an optional
    fraction and a unit suffix (``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``); ``"0"`` needs
    no unit. Negative values raise unless ``allow_negative``.
    """
    if not isinstance(s, str):
        raise DurationError(f"invalid duration {s!r}: expected a string")
    orig = s
    i = 0
    n = len(s)
    neg = False
    if n and s[0] in "+-":
        neg = s[0] == "-"
        i = 1
    if s[i:] == "0":
        return 0
    if i == n:
        raise _invalid(orig, "empty" if not orig else "expected a number after the sign")
    total = 0
    while i < n:
        c = s[i]
        if not (c == "." or c in _DIGITS):
            raise _invalid(orig, f"expected a number at {_q(s[i:])}")
        start = i
        v, i, overflow = _leading_int(s, i)
        if overflow:
            raise _invalid(orig, "out of range")
        pre = i != start
        f, scale, post = 0, 1.0, False
        if i < n and s[i] == ".":
            i += 1
            fstart = i
            f, scale, i = _leading_fraction(s, i)
            post = i != fstart
        if not pre and not post:
            raise _invalid(orig, f"expected digits around the decimal point at {_q(s[start:])}")
        ustart = i
        while i < n and not (s[i] == "." or s[i] in _DIGITS):
            i += 1
        if i == ustart:
            hint = ""
            if total == 0 and not neg and ustart == n:
                hint = f'; did you mean "{orig}s"?'
            raise _invalid(orig, f"missing unit ({_VALID_UNITS}){hint}")
        u = s[ustart:i]
        unit = _UNITS.get(u)
        if unit is None:
            raise _invalid(orig, f"unknown unit {_q(u)} ({_VALID_UNITS})")
        if v > (1 << 63) // unit:
            raise _invalid(orig, "out of range")
        v *= unit
        if f > 0:
            # float64 is needed to be nanosecond accurate for fractions of hours (as in Go).
            v += int(float(f) * (float(unit) / scale))
            if v > 1 << 63:
                raise _invalid(orig, "out of range")
        total += v
        if total > 1 << 63:
            raise _invalid(orig, "out of range")
    if neg:
        if total and not allow_negative:
            raise _invalid(orig, "must not be negative")
        return -total
    if total > MAX_DURATION_NS:
        raise _invalid(orig, "out of range")
    return total


def _seconds_to_ns(seconds: float) -> int:
    """Seconds -> integer nanoseconds, rounding the *written* decimal value (repr), not binary."""
    if isinstance(seconds, int):
        return seconds * SECOND
    try:
        d = Decimal(repr(float(seconds))).scaleb(9).to_integral_value(rounding=ROUND_HALF_EVEN)
    except InvalidOperation as e:  # pragma: no cover - guarded by isfinite checks
        raise DurationError(f"invalid duration {seconds!r}") from e
    # The float nearest to the largest duration rounds just above it: clamp instead of failing.
    return max(-MAX_DURATION_NS, min(MAX_DURATION_NS, int(d)))


def _check_number(value: float, allow_negative: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DurationError(f'invalid duration {value!r}: expected a string like "1m30s" or seconds')
    if isinstance(value, float) and not math.isfinite(value):
        raise DurationError(f"invalid duration {value!r}: must be finite")
    if value < 0 and not allow_negative:
        raise DurationError(f"invalid duration {value!r}: must not be negative")
    if abs(float(value)) > _MAX_SECONDS:
        raise DurationError(f"invalid duration {value!r}: out of range")
    return float(value)


def parse_duration(s: str | float, *, allow_negative: bool = False) -> float:
    """Parse a Go duration string (or a number of seconds) into float seconds.

    >>> parse_duration("1m30s")
    90.0
    >>> parse_duration(2.5)
    2.5

    Raises :class:`DurationError`, e.g.
    ``invalid duration "1x": unknown unit "x" (valid: ns, us, ms, s, m, h)``.
    """
    if isinstance(s, str):
        return parse_duration_ns(s, allow_negative=allow_negative) / SECOND
    return _check_number(s, allow_negative)


# --------------------------------------------------------------------------------------------
# formatting


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    digits: list[str] = []
    printing = False
    for _ in range(prec):
        d = v % 10
        printing = printing or d != 0
        if printing:
            digits.append(chr(48 + d))
        v //= 10
    frac = "." + "".join(reversed(digits)) if printing else ""
    return frac, v


def format_duration_ns(ns: int) -> str:
    """Format integer nanoseconds exactly like Go's ``Duration.String()``.

    ``90 s`` -> ``1m30s``, ``1 h`` -> ``1h0m0s``, ``0.5 s`` -> ``500ms``, ``1.5 µs`` -> ``1.5µs``,
    ``0`` -> ``0s``. Leading zero units are omitted; sub-second values use ms/µs/ns.
    """
    if abs(ns) > 1 << 63:
        raise DurationError(f"duration {ns}ns out of range")
    neg = ns < 0
    u = -ns if neg else ns
    if u < SECOND:
        if u == 0:
            return "0s"
        if u < MICROSECOND:
            prec, unit = 0, "ns"
        elif u < MILLISECOND:
            prec, unit = 3, "\u00b5s"
        else:
            prec, unit = 6, "ms"
        frac, u = _fmt_frac(u, prec)
        out = f"{u}{frac}{unit}"
    else:
        frac, u = _fmt_frac(u, 9)
        out = f"{u % 60}{frac}s"
        u //= 60
        if u > 0:
            out = f"{u % 60}m{out}"
            u //= 60
            if u > 0:
                out = f"{u}h{out}"
    return "-" + out if neg else out


def format_duration(seconds: float) -> str:
    """Format float seconds in Go's style (``1m30s``, ``1h0m0s``, ``500ms``, ``0s``).

    The value is rounded to whole nanoseconds using its shortest decimal form, so
    ``format_duration(0.1)`` is ``100ms`` and ``parse_duration(format_duration(x)) == x`` for
    values with at most nanosecond precision.
    """
    _check_number(seconds, allow_negative=True)
    return format_duration_ns(_seconds_to_ns(seconds))


# --------------------------------------------------------------------------------------------
# ranges


@dataclass(frozen=True)
class DurationRange:
    """A duration drawn uniformly from ``[min, max]`` seconds by the run's seeded random source."""

    min: float
    max: float

    def __post_init__(self) -> None:
        for name in ("min", "max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise DurationError(f"invalid duration range: {name} must be a finite number, got {v!r}")
            if v < 0:
                raise DurationError(f"invalid duration range: {name} must not be negative")
        if self.min > self.max:
            raise DurationError(
                f"invalid duration range: min {format_duration(self.min)} is greater than "
                f"max {format_duration(self.max)}"
            )

    def draw(self, rng: random.Random) -> float:
        """A uniform value in ``[min, max]`` rounded to milliseconds (stable across platforms).

        Consumes exactly one ``rng.random()`` call, so a seed reproduces the whole sequence.
        """
        v = round(self.min + (self.max - self.min) * rng.random(), 3)
        return min(max(v, self.min), self.max)

    def to_spec(self) -> dict[str, str]:
        """``{"min": "10s", "max": "30s"}``."""
        return {"min": format_duration(self.min), "max": format_duration(self.max)}

    def __str__(self) -> str:
        return f"{format_duration(self.min)}..{format_duration(self.max)}"


def parse_duration_spec(value: Any, *, allow_negative: bool = False) -> float | DurationRange:
    """A fixed duration (string or number of seconds) or a range mapping ``{min: .., max: ..}``."""
    if isinstance(value, DurationRange):
        return value
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return parse_duration(value, allow_negative=allow_negative)
    if isinstance(value, Mapping):
        keys = set(value)
        extra = sorted(str(k) for k in keys - {"min", "max"})
        if extra:
            raise DurationError(
                f"invalid duration range: unknown field(s) {', '.join(map(_q, extra))} (expected min and max)"
            )
        missing = [k for k in ("min", "max") if k not in keys]
        if missing:
            raise DurationError(f"invalid duration range: missing {' and '.join(missing)}")
        return DurationRange(_range_bound(value["min"], "min"), _range_bound(value["max"], "max"))
    raise DurationError(
        f'invalid duration {value!r}: expected a string like "1m30s", a number of seconds, '
        'or a range {min: "10s", max: "30s"}'
    )


def _range_bound(v: Any, name: str) -> float:
    if isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        try:
            return parse_duration(v)
        except DurationError as e:
            raise DurationError(f"invalid duration range: {name}: {e}") from None
    raise DurationError(f"invalid duration range: {name} must be a duration string or seconds, got {v!r}")


def draw_duration(spec: float | DurationRange, rng: random.Random) -> float:
    """Resolve a parsed spec: fixed values are returned as-is, ranges are drawn from ``rng``."""
    if isinstance(spec, DurationRange):
        return spec.draw(rng)
    return spec


def format_duration_spec(spec: float | DurationRange) -> str | dict[str, str]:
    """Inverse of :func:`parse_duration_spec`: ``"1m30s"`` or ``{"min": "10s", "max": "30s"}``."""
    if isinstance(spec, DurationRange):
        return spec.to_spec()
    return format_duration(spec)


# --------------------------------------------------------------------------------------------
# pydantic


_GO_DURATION_PATTERN = r"^(0|\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"

_FIXED_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": _GO_DURATION_PATTERN,
    "description": 'A Go duration such as "90s", "1m30s", "1.5h", "300ms" (a number means seconds).',
}

_SPEC_SCHEMA: dict[str, Any] = {
    "anyOf": [
        _FIXED_SCHEMA,
        {
            "type": "object",
            "description": "A duration drawn uniformly from [min, max] by the workflow's seeded random.",
            "properties": {"min": _FIXED_SCHEMA, "max": _FIXED_SCHEMA},
            "required": ["min", "max"],
            "additionalProperties": False,
        },
    ]
}


def _validate_fixed(value: Any) -> float:
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return parse_duration(value)
    raise DurationError(f'invalid duration {value!r}: expected a string like "1m30s" or a number of seconds')


#: A fixed, non-negative duration in float seconds; accepts ``"1m30s"`` or ``90``; dumps ``"1m30s"``.
Duration = Annotated[
    float,
    PlainValidator(_validate_fixed),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(_FIXED_SCHEMA),
]

#: A fixed duration or a :class:`DurationRange`; accepts ``"1m30s"``, ``90`` or ``{min, max}``;
#: dumps ``"1m30s"`` or ``{"min": "10s", "max": "30s"}``.
DurationSpec = Annotated[
    float | DurationRange,
    PlainValidator(parse_duration_spec),
    PlainSerializer(format_duration_spec, return_type=str | dict[str, str]),
    WithJsonSchema(_SPEC_SCHEMA),
]
