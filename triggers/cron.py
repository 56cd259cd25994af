"""Cron schedules for CronWorkflows: when does a schedule fire, as instants on the run's clock.

Accepted forms (one string per schedule):

- standard 5-field cron ``minute hour day-of-month month day-of-week`` with ``*``, ``?`` (day
  fields), lists ``1,15``, ranges ``1-5``, steps ``*/15``, ``10-50/20``, ``5/10`` (= ``5-max/10``),
  month names ``JAN``..``DEC`` and weekday names ``SUN``..``SAT`` (case-insensitive). Day of week
  follows cron: **Sunday is 0 and 7**, Monday is 1.
- macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly``;
- ``@every <duration>`` (Go-style duration, whole seconds, >= 1s): every multiple of the duration
  since the Unix epoch, so ``@every 1h`` fires at the top of every hour and a restart never shifts
  the phase. It ignores the time zone (it is elapsed time).

Matching follows ISC (Vixie) cron, the cron of Debian, Ubuntu and cronie:

- when both day-of-month and day-of-week are restricted (neither starts with ``*``), a day matches
  when *either* matches (``0 0 1,15 * MON`` = the 1st, the 15th and every Monday); otherwise both
  must match;
- time zones and DST (see :class:`CronSchedule`): a job at a *specific time* (neither the minute nor
  the hour field starts with ``*``) whose local time does not exist (spring forward) runs once at
  the end of the gap; one whose local time exists twice (fall back) runs once, at the first
  occurrence. Jobs that run more often (minute or hour field starts with ``*``) follow elapsed
  time: they run at the times that exist, in both passes of a repeated hour.

APScheduler is the calendar: :class:`~apscheduler.triggers.cron.CronTrigger` finds the next
matching wall-clock time and :class:`~apscheduler.triggers.interval.IntervalTrigger` the next
``@every`` time. Two of its behaviours are not cron's and are handled here: ``from_crontab``
numbers weekdays from Monday = 0 (we expand the day-of-week field ourselves and hand it weekday
*names*), and with a DST zone it runs a fixed time twice on fall-back day (we run it on a naive
wall-clock calendar and map wall times to instants with the rules above).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

__all__ = [
    "MACROS",
    "CronExpr",
    "CronSchedule",
    "IntervalSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduleSet",
    "load_timezone",
    "parse_cron",
    "parse_schedule",
]


class ScheduleError(ValueError):
    """A schedule string or time zone that cannot be accepted."""


MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]  # cron numbering: 0 = Sunday
# APScheduler's day_of_week names (its numbers start at Monday = 0, so we only ever pass names)
_APS_WEEKDAY = {0: "sun", 1: "mon", 2: "tue", 3: "wed", 4: "thu", 5: "fri", 6: "sat"}


@dataclass(frozen=True)
class _FieldDef:
    name: str
    lo: int
    hi: int
    names: dict[str, int]
    star_hi: int  # upper bound that `*` expands to (day of week: 6, although 7 is accepted)
    question: bool  # `?` allowed (day fields, as Quartz and robfig/cron accept it)


_FIELDS = (
    _FieldDef("minute", 0, 59, {}, 59, False),
    _FieldDef("hour", 0, 23, {}, 23, False),
    _FieldDef("day of month", 1, 31, {}, 31, True),
    _FieldDef("month", 1, 12, {n: i + 1 for i, n in enumerate(_MONTHS)}, 12, False),
    _FieldDef("day of week", 0, 7, {n: i for i, n in enumerate(_WEEKDAYS)}, 6, True),
)
_ELEMENT = re.compile(r"^(?P<range>\*|\?|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?$")


@dataclass(frozen=True)
class CronExpr:
    """A parsed 5-field cron expression: the matching values of each field (cron numbering)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday (7 folded into 0)
    day_star: bool  # day-of-month starts with `*` or `?` (unrestricted)
    weekday_star: bool
    frequent: bool  # minute or hour field starts with `*`: runs more often than at fixed times


def _value(tok: str, f: _FieldDef, text: str) -> int:
    low = tok.lower()
    if low in f.names:
        return f.names[low]
    if not tok.isdigit():
        known = f" (names: {', '.join(n.upper() for n in f.names)})" if f.names else ""
        raise ScheduleError(f"{text!r}: {f.name}: {tok!r} is not a number{known}")
    v = int(tok)
    if not f.lo <= v <= f.hi:
        raise ScheduleError(f"{text!r}: {f.name}: {v} is out of range {f.lo}-{f.hi}")
    return v


def _parse_field(src: str, f: _FieldDef, text: str) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    for element in src.split(","):
        m = _ELEMENT.match(element)
        if not m:
            raise ScheduleError(f"{text!r}: {f.name}: cannot parse {element!r}")
        rng, step_s = m.group("range"), m.group("step")
        step = 1
        if step_s is not None:
            step = int(step_s)
            if step < 1:
                raise ScheduleError(f"{text!r}: {f.name}: step must be at least 1")
        if rng in ("*", "?"):
            if rng == "?" and not f.question:
                raise ScheduleError(f"{text!r}: {f.name}: '?' is only allowed in the day fields")
            lo, hi = f.lo, f.star_hi
        elif "-" in rng:
            a, b = rng.split("-", 1)
            lo, hi = _value(a, f, text), _value(b, f, text)
            if lo > hi:
                raise ScheduleError(
                    f"{text!r}: {f.name}: range {rng!r} goes backwards (cron ranges do not wrap; "
                    "use a list such as 'FRI-SAT,SUN')"
                )
        else:
            lo = _value(rng, f, text)
            hi = f.hi if step_s is not None else lo  # `5/10` = from 5 to the maximum, every 10
        values.update(range(lo, hi + 1, step))
    if f.name == "day of week" and 7 in values:
        values.discard(7)
        values.add(0)  # Sunday is 0 and 7
    return frozenset(values), src[:1] in ("*", "?")


def parse_cron(text: str) -> CronExpr:
    """Parse a 5-field cron expression or a macro (``@daily``, ...); raises ScheduleError."""
    src = text.strip()
    if src.startswith("@"):
        macro = MACROS.get(src.lower())
        if macro is None:
            raise ScheduleError(f"{text!r}: unknown macro (known: {', '.join(MACROS)}, @every <duration>)")
        src = macro
    if re.match(r"^(CRON_)?TZ=", src):
        raise ScheduleError(f"{text!r}: set the time zone with spec.timezone, not in the schedule")
    parts = src.split()
    if len(parts) != 5:
        raise ScheduleError(
            f"{text!r}: expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}"
        )
    sets = [_parse_field(p, f, text) for p, f in zip(parts, _FIELDS, strict=True)]
    return CronExpr(
        text=text,
        minutes=sets[0][0],
        hours=sets[1][0],
        days=sets[2][0],
        months=sets[3][0],
        weekdays=sets[4][0],
        day_star=sets[2][1],
        weekday_star=sets[4][1],
        frequent=sets[0][1] or sets[1][1],
    )


def load_timezone(name: str | None) -> ZoneInfo:
    """An IANA time zone (None or empty = UTC); raises ScheduleError for unknown names."""
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (expected an IANA name such as Europe/Berlin)"
        ) from None


class Schedule(Protocol):
    text: str

    def next_after(self, t: float) -> float | None:
        """The first fire time strictly after ``t`` (seconds since the epoch), None if never."""
        ...


def _aps(values: frozenset[int], lo: int, hi: int) -> str:
    """A compact APScheduler field expression for a set of values (it evaluates each list item
    separately, so ``0,1,...,59`` is 60 times slower than ``*``)."""
    vals = sorted(values)
    if vals == list(range(lo, hi + 1)):
        return "*"
    if len(vals) >= 3:
        step = vals[1] - vals[0]
        if all(b - a == step for a, b in itertools.pairwise(vals)):
            return f"{vals[0]}-{vals[-1]}/{step}"
    runs: list[str] = []
    start = prev = vals[0]
    for v in [*vals[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(runs)


_ONE_SECOND = timedelta(seconds=1)
_DST_MARGIN = 3 * 3600.0  # the largest DST shift we account for (real ones are 30 min .. 2 h)
_HORIZON = timedelta(days=366 * 9)  # every valid cron expression fires within 8 years (Feb 29)


class CronSchedule:
    """A cron expression in a time zone. See the module docstring for the DST rules.

    Matching wall-clock times are found by APScheduler on a naive (UTC-like) calendar, then mapped
    to instants: a wall time that exists once gives that instant; one inside a spring-forward gap
    gives the first instant after the gap (specific-time jobs) or nothing (frequent jobs); one
    that exists twice gives its first occurrence (specific-time jobs) or both (frequent jobs).
    Several wall times mapping to the same instant fire once.
    """

    def __init__(self, text: str, timezone: str | None = None) -> None:
        self.text = text
        self.expr = parse_cron(text)
        self.tz = load_timezone(timezone)
        e = self.expr
        common = {
            "minute": _aps(e.minutes, 0, 59),
            "hour": _aps(e.hours, 0, 23),
            "month": _aps(e.months, 1, 12),
            "second": "0",
        }
        days = _aps(e.days, 1, 31)
        weekdays = "*" if len(e.weekdays) == 7 else ",".join(_APS_WEEKDAY[d] for d in sorted(e.weekdays))
        if e.day_star or e.weekday_star:
            specs = [{"day": days, "day_of_week": weekdays}]  # both must match
        else:
            specs = [{"day": days, "day_of_week": "*"}, {"day": "*", "day_of_week": weekdays}]
        self._triggers = [CronTrigger(**common, **s, timezone=UTC) for s in specs]
        probe = datetime(2021, 1, 1, tzinfo=UTC)
        bounded = [CronTrigger(**common, **s, timezone=UTC, end_date=probe + _HORIZON) for s in specs]
        if all(t.get_next_fire_time(None, probe) is None for t in bounded):
            raise ScheduleError(f"{text!r}: never fires (no such day)")

    def __repr__(self) -> str:
        return f"CronSchedule({self.text!r}, {self.tz.key!r})"

    # --- the naive wall-clock calendar (APScheduler) ------------------------------------------
    def next_wall(self, after: datetime) -> datetime:
        """The first matching naive wall time strictly after ``after`` (naive)."""
        now = (after + _ONE_SECOND).replace(microsecond=0, tzinfo=UTC)
        best: datetime | None = None
        for trig in self._triggers:
            nxt = trig.get_next_fire_time(None, now)
            if nxt is not None and (best is None or nxt < best):
                best = nxt
        assert best is not None  # a schedule that never fires is rejected in __init__
        return best.replace(tzinfo=None)

    # --- wall time <-> instant -------------------------------------------------------------------
    def wall(self, t: float) -> datetime:
        return datetime.fromtimestamp(t, self.tz).replace(tzinfo=None)

    def _gap_end(self, before: float, after: float) -> float:
        """The instant the UTC offset changes in (before, after] (a spring-forward transition)."""
        off = datetime.fromtimestamp(before, self.tz).utcoffset()
        lo, hi = before, after  # offset(lo) == off, offset(hi) != off
        while hi - lo > 1.0:
            mid = float(int((lo + hi) / 2))
            if mid <= lo:
                break
            if datetime.fromtimestamp(mid, self.tz).utcoffset() == off:
                lo = mid
            else:
                hi = mid
        return hi

    def instants(self, w: datetime) -> tuple[float, list[float]]:
        """(lower bound, fire instants) of the naive wall time ``w`` under the DST rules."""
        t0 = w.replace(tzinfo=self.tz, fold=0).timestamp()
        t1 = w.replace(tzinfo=self.tz, fold=1).timestamp()
        if self.wall(t0) != w:  # in a spring-forward gap: t1 < transition <= t0
            end = self._gap_end(t1, t0)
            return end, ([] if self.expr.frequent else [end])
        if t1 != t0:  # exists twice (fall back): t0 first pass, t1 second pass
            return t0, ([t0, t1] if self.expr.frequent else [t0])
        return t0, [t0]

    def next_after(self, t: float) -> float | None:
        start = self.wall(t)
        ahead = self.wall(t + _DST_MARGIN) - timedelta(seconds=_DST_MARGIN)
        start = min(start, ahead)  # a fall-back transition is near: earlier wall times fire again
        w = self.next_wall(start - _ONE_SECOND)
        best: float | None = None
        limit = t + _HORIZON.total_seconds()
        while True:
            lower, fires = self.instants(w)
            if best is not None and lower >= best:
                return best
            if lower > limit:
                return best
            for i in fires:
                if i > t and (best is None or i < best):
                    best = i
            w = self.next_wall(w)


class IntervalSchedule:
    """``@every <duration>``: every multiple of the interval since the Unix epoch (UTC)."""

    def __init__(self, text: str, seconds: int) -> None:
        if seconds < 1:
            raise ScheduleError(f"{text!r}: the interval must be at least 1s")
        self.text = text
        self.seconds = seconds
        self._trigger = IntervalTrigger(
            seconds=seconds, start_date=datetime(1970, 1, 1, tzinfo=UTC), timezone=UTC
        )

    def __repr__(self) -> str:
        return f"IntervalSchedule({self.text!r})"

    def next_after(self, t: float) -> float | None:
        now = datetime.fromtimestamp(t, UTC)
        nxt = self._trigger.get_next_fire_time(None, now)
        if nxt is None:  # pragma: no cover - no end date
            return None
        at = nxt.timestamp()
        while at <= t:
            at += self.seconds
        return at


def _parse_every(text: str) -> IntervalSchedule:
    from engine.duration import DurationError, parse_duration_ns

    arg = text.strip()[len("@every") :].strip()
    if not arg:
        raise ScheduleError(f"{text!r}: @every needs a duration, e.g. '@every 90m'")
    try:
        ns = parse_duration_ns(arg)
    except DurationError as e:
        raise ScheduleError(f"{text!r}: {e}") from None
    if ns % 1_000_000_000:
        raise ScheduleError(f"{text!r}: the interval must be whole seconds")
    return IntervalSchedule(text, ns // 1_000_000_000)


def parse_schedule(text: str, timezone: str | None = None) -> Schedule:
    """One schedule string -> a Schedule; raises ScheduleError with a user-facing message."""
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError("empty schedule")
    if text.strip().lower().startswith("@every"):
        return _parse_every(text)
    return CronSchedule(text, timezone)


class ScheduleSet:
    """Several schedules (``spec.schedules``): fires at the union of their fire times."""

    def __init__(self, texts: Sequence[str], timezone: str | None = None) -> None:
        if not texts:
            raise ScheduleError("at least one schedule is required")
        self.timezone = load_timezone(timezone)
        self.schedules: list[Schedule] = [parse_schedule(s, timezone) for s in texts]

    def next_after(self, t: float) -> float | None:
        best: float | None = None
        for s in self.schedules:
            n = s.next_after(t)
            if n is not None and (best is None or n < best):
                best = n
        return best

    def between(self, after: float, until: float) -> Iterator[float]:
        """Fire times in (after, until], in order (each instant once)."""
        t = after
        while True:
            n = self.next_after(t)
            if n is None or n > until:
                return
            yield n
            t = n

    def upcoming(self, after: float, count: int) -> list[float]:
        out: list[float] = []
        t = after
        while len(out) < count:
            n = self.next_after(t)
            if n is None:
                break
            out.append(n)
            t = n
        return out
