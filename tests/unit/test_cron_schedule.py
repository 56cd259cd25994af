"""Cron schedules: every form, cron's day-of-week numbering, dom/dow rules, DST in both directions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers.cron import (
    MACROS,
    CronSchedule,
    IntervalSchedule,
    ScheduleError,
    ScheduleSet,
    parse_cron,
    parse_schedule,
)


def ts(*args: int, tz: str = "UTC") -> float:
    return datetime(*args, tzinfo=ZoneInfo(tz)).timestamp()  # type: ignore[arg-type,misc]


def upcoming(expr: str | list[str], start: float, n: int, tz: str | None = None) -> list[float]:
    return ScheduleSet([expr] if isinstance(expr, str) else expr, tz).upcoming(start, n)


def local(times: list[float], tz: str = "UTC", fmt: str = "%Y-%m-%d %H:%M %Z") -> list[str]:
    return [datetime.fromtimestamp(t, ZoneInfo(tz)).strftime(fmt) for t in times]


def weekdays(expr: str, n: int = 7) -> list[str]:
    # 2026-01-01 is a Thursday
    return local(upcoming(expr, ts(2026, 1, 1) - 1, n), fmt="%a")


# --- every form ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("* * * * *", ["00:00", "00:01", "00:02", "00:03"]),
        ("*/15 * * * *", ["00:00", "00:15", "00:30", "00:45"]),
        ("5,35 */6 * * *", ["00:05", "00:35", "06:05", "06:35"]),
        ("10-50/20 1 * * *", ["01:10", "01:30", "01:50", "01:10"]),
        ("5/20 2 * * *", ["02:05", "02:25", "02:45", "02:05"]),  # a/n = a-max/n
        ("0 9-17/4 * * *", ["09:00", "13:00", "17:00", "09:00"]),
        ("0 0 * * *", ["00:00", "00:00", "00:00", "00:00"]),
    ],
)
def test_minute_and_hour_fields(expr: str, expected: list[str]) -> None:
    assert local(upcoming(expr, ts(2026, 1, 1) - 1, 4), fmt="%H:%M") == expected


@pytest.mark.parametrize(
    ("macro", "first_two"),
    [
        ("@yearly", ["2027-01-01 00:00 UTC", "2028-01-01 00:00 UTC"]),
        ("@annually", ["2027-01-01 00:00 UTC", "2028-01-01 00:00 UTC"]),
        ("@monthly", ["2026-02-01 00:00 UTC", "2026-03-01 00:00 UTC"]),
        ("@weekly", ["2026-01-04 00:00 UTC", "2026-01-11 00:00 UTC"]),  # Sundays
        ("@daily", ["2026-01-02 00:00 UTC", "2026-01-03 00:00 UTC"]),
        ("@midnight", ["2026-01-02 00:00 UTC", "2026-01-03 00:00 UTC"]),
        ("@hourly", ["2026-01-01 01:00 UTC", "2026-01-01 02:00 UTC"]),
        ("@DAILY", ["2026-01-02 00:00 UTC", "2026-01-03 00:00 UTC"]),
    ],
)
def test_macros(macro: str, first_two: list[str]) -> None:
    assert local(upcoming(macro, ts(2026, 1, 1), 2)) == first_two


def test_every_macro_is_listed() -> None:
    assert set(MACROS) == {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def test_month_names_and_ranges() -> None:
    assert local(upcoming("0 0 1 JAN,jul *", ts(2026, 1, 1), 3), fmt="%Y-%m-%d") == [
        "2026-07-01",
        "2027-01-01",
        "2027-07-01",
    ]
    assert local(upcoming("0 0 15 MAR-MAY *", ts(2026, 1, 1), 4), fmt="%m-%d") == [
        "03-15",
        "04-15",
        "05-15",
        "03-15",
    ]


def test_every_duration_is_epoch_aligned_and_ignores_the_time_zone() -> None:
    start = ts(2026, 1, 1, 0, 10)
    assert local(upcoming("@every 90m", start, 3), fmt="%H:%M") == ["01:30", "03:00", "04:30"]
    assert upcoming("@every 90m", start, 3, "Europe/Berlin") == upcoming("@every 90m", start, 3)
    assert upcoming("@every 1h", ts(2026, 1, 1), 2) == [ts(2026, 1, 1, 1), ts(2026, 1, 1, 2)]
    assert upcoming("@every 45s", 0.0, 2) == [45.0, 90.0]
    s = parse_schedule("@every 1h30m")
    assert isinstance(s, IntervalSchedule) and s.seconds == 5400
    # strictly after: a fire time is never returned for the instant itself
    assert s.next_after(5400.0) == 10800.0 and s.next_after(5399.5) == 5400.0


def test_several_schedules_fire_at_the_union_once_per_instant() -> None:
    got = upcoming(["0 * * * *", "*/30 * * * *", "@every 1h"], ts(2026, 1, 1) - 1, 5)
    assert local(got, fmt="%H:%M") == ["00:00", "00:30", "01:00", "01:30", "02:00"]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty schedule"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * *", "expected 5 fields"),
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day of month: 0 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * * 8", "day of week: 8 is out of range 0-7"),
        ("* * * * FRI-MON", "goes backwards"),
        ("* * * * funday", "not a number"),
        ("*/0 * * * *", "step must be at least 1"),
        ("? * * * *", "only allowed in the day fields"),
        ("1,,2 * * * *", "cannot parse"),
        ("0 0 L * *", "not a number"),
        ("@fortnightly", "unknown macro"),
        ("@every", "needs a duration"),
        ("@every 0s", "at least 1s"),
        ("@every 1.5s", "whole seconds"),
        ("@every soon", "invalid duration"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("CRON_TZ=UTC 0 0 * * *", "spec.timezone"),
    ],
)
def test_invalid_schedules_are_rejected_with_a_reason(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_schedule(expr)


def test_unknown_time_zone() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        CronSchedule("0 0 * * *", "Mars/Olympus")


def test_february_29_fires_in_leap_years_only() -> None:
    assert local(upcoming("0 0 29 2 *", ts(2026, 1, 1), 2), fmt="%Y-%m-%d") == ["2028-02-29", "2032-02-29"]


# --- day of week: cron numbering, not APScheduler's --------------------------------------------------
@pytest.mark.parametrize("dow", ["0", "7", "SUN", "sun", "Sun", "0,7"])
def test_sunday_is_0_and_7(dow: str) -> None:
    assert weekdays(f"0 0 * * {dow}", 3) == ["Sun", "Sun", "Sun"]
    assert parse_cron(f"0 0 * * {dow}").weekdays == frozenset({0})


def test_apscheduler_from_crontab_would_get_sunday_wrong() -> None:
    # the reason we translate the field ourselves: APScheduler 3 numbers days from Monday = 0
    trig = CronTrigger.from_crontab("0 0 * * 0", timezone=UTC)
    assert trig.get_next_fire_time(None, datetime(2026, 1, 1, tzinfo=UTC)).strftime("%a") == "Mon"
    assert weekdays("0 0 * * 0", 1) == ["Sun"]


@pytest.mark.parametrize(
    ("dow", "days"),
    [
        ("MON-FRI", ["Thu", "Fri", "Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("1-5", ["Thu", "Fri", "Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("*/2", ["Thu", "Sat", "Sun", "Tue", "Thu", "Sat", "Sun"]),  # 0,2,4,6 = Sun,Tue,Thu,Sat
        ("1-7/2", ["Fri", "Sun", "Mon", "Wed", "Fri", "Sun", "Mon"]),  # 1,3,5,7 = Mon,Wed,Fri,Sun
        ("5-7", ["Fri", "Sat", "Sun", "Fri", "Sat", "Sun", "Fri"]),  # Fri..Sun through 7
        ("sat,SUN", ["Sat", "Sun", "Sat", "Sun", "Sat", "Sun", "Sat"]),
        ("6", ["Sat", "Sat", "Sat", "Sat", "Sat", "Sat", "Sat"]),
        ("?", ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]),
    ],
)
def test_day_of_week_forms(dow: str, days: list[str]) -> None:
    assert weekdays(f"0 0 * * {dow}") == days


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # ISC cron: '0 0 1,15 * MON' = the 1st, the 15th and every Monday
    got = local(upcoming("0 0 1,15 * MON", ts(2026, 1, 1), 6), fmt="%m-%d %a")
    assert got == ["01-05 Mon", "01-12 Mon", "01-15 Thu", "01-19 Mon", "01-26 Mon", "02-01 Sun"]
    # a field starting with * is unrestricted: then both must match (every other day AND Monday)
    got = local(upcoming("0 0 */2 * MON", ts(2026, 1, 1), 3), fmt="%m-%d %a")
    assert got == ["01-05 Mon", "01-19 Mon", "02-09 Mon"]
    # only the day-of-week restricted
    assert local(upcoming("0 0 * * MON", ts(2026, 1, 1), 2), fmt="%m-%d") == ["01-05", "01-12"]


# --- DST -----------------------------------------------------------------------------------------
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def test_spring_forward_berlin_nonexistent_time_runs_once_at_the_end_of_the_gap() -> None:
    # 2026-03-29: 02:00 CET -> 03:00 CEST; 02:30 does not exist
    got = upcoming("30 2 * * *", ts(2026, 3, 27, tz=BERLIN), 4, BERLIN)
    assert local(got, BERLIN) == [
        "2026-03-27 02:30 CET",
        "2026-03-28 02:30 CET",
        "2026-03-29 03:00 CEST",
        "2026-03-30 02:30 CEST",
    ]
    assert [b - a for a, b in itertools.pairwise(got)] == [86400, 86400 - 1800, 86400 - 1800]


def test_spring_forward_new_york() -> None:
    got = upcoming("30 2 * * *", ts(2026, 3, 7, tz=NEW_YORK), 3, NEW_YORK)
    assert local(got, NEW_YORK) == ["2026-03-07 02:30 EST", "2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"]


def test_fall_back_new_york_repeated_time_runs_once_at_its_first_occurrence() -> None:
    # 2026-11-01: 02:00 EDT -> 01:00 EST; 01:30 happens twice
    got = upcoming("30 1 * * *", ts(2026, 10, 31, tz=NEW_YORK), 3, NEW_YORK)
    assert local(got, NEW_YORK) == ["2026-10-31 01:30 EDT", "2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]


def test_fall_back_berlin() -> None:
    # 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens twice
    got = upcoming("30 2 * * *", ts(2026, 10, 24, tz=BERLIN), 3, BERLIN)
    assert local(got, BERLIN) == ["2026-10-24 02:30 CEST", "2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]


def test_several_specific_times_in_the_gap_collapse_into_one_run() -> None:
    got = upcoming("0,30 2 * * *", ts(2026, 3, 29, tz=BERLIN), 3, BERLIN)
    assert local(got, BERLIN) == ["2026-03-29 03:00 CEST", "2026-03-30 02:00 CEST", "2026-03-30 02:30 CEST"]


def test_hourly_schedules_follow_elapsed_time_across_both_transitions() -> None:
    # minute or hour field starting with '*': runs in both passes of the repeated hour and not in
    # the missing one, so the interval stays one real hour (ISC cron's "wildcard jobs")
    fall = upcoming("30 * * * *", ts(2026, 11, 1, tz=NEW_YORK), 5, NEW_YORK)
    assert local(fall, NEW_YORK, "%H:%M %Z") == [
        "00:30 EDT",
        "01:30 EDT",
        "01:30 EST",
        "02:30 EST",
        "03:30 EST",
    ]
    assert {b - a for a, b in itertools.pairwise(fall)} == {3600}
    spring = upcoming("30 * * * *", ts(2026, 3, 29, tz=BERLIN), 4, BERLIN)
    assert local(spring, BERLIN, "%H:%M %Z") == ["00:30 CET", "01:30 CET", "03:30 CEST", "04:30 CEST"]
    assert {b - a for a, b in itertools.pairwise(spring)} == {3600}


@pytest.mark.parametrize(
    ("tz", "day"),
    [(BERLIN, (2026, 3, 29)), (BERLIN, (2026, 10, 25)), (NEW_YORK, (2026, 3, 8)), (NEW_YORK, (2026, 11, 1))],
)
def test_every_15_minutes_is_every_15_real_minutes_across_a_transition(
    tz: str, day: tuple[int, int, int]
) -> None:
    got = upcoming("*/15 * * * *", ts(*day, tz=tz), 24 * 4, tz)
    assert {b - a for a, b in itertools.pairwise(got)} == {900}


def test_apscheduler_alone_would_run_twice_on_fall_back_day() -> None:
    # the reason for the wall-clock mapping: APScheduler 3 with a DST zone fires 01:30 twice
    z = ZoneInfo(NEW_YORK)
    trig = CronTrigger.from_crontab("30 1 * * *", timezone=z)
    first = trig.get_next_fire_time(None, datetime(2026, 11, 1, tzinfo=z))
    second = trig.get_next_fire_time(first, first + timedelta(seconds=1))
    assert second.timestamp() - first.timestamp() == 3600  # a double run
    ours = upcoming("30 1 * * *", ts(2026, 11, 1, tz=NEW_YORK), 2, NEW_YORK)
    assert ours[1] - ours[0] == 86400 + 3600  # next day (the day has 25 hours)


# --- an independent reference: minute-by-minute, the ISC cron rules spelled out -----------------
def _reference(expr: str, tz: str, start: float, end: float) -> list[float]:
    """Fire times in (start, end] found by looking at every minute (slow, obviously right)."""
    e = parse_cron(expr)
    z = ZoneInfo(tz)

    def match(w: datetime) -> bool:
        if w.minute not in e.minutes or w.hour not in e.hours or w.month not in e.months:
            return False
        dom = w.day in e.days
        dow = (w.isoweekday() % 7) in e.weekdays
        return (dom and dow) if (e.day_star or e.weekday_star) else (dom or dow)

    out: list[float] = []
    t = (int(start) // 60 + 1) * 60
    while t <= end:
        w = datetime.fromtimestamp(t, z).replace(tzinfo=None)
        prev = datetime.fromtimestamp(t - 60, z).replace(tzinfo=None)
        fires = match(w)
        if fires and not e.frequent:
            # specific-time job: not again in the second pass of a repeated hour
            earlier = datetime.fromtimestamp(t - 3600, z).replace(tzinfo=None)
            if earlier == w or datetime.fromtimestamp(t - 1800, z).replace(tzinfo=None) == w:
                fires = False
        if not fires and not e.frequent and w - prev > timedelta(minutes=1):
            # the first minute after a spring-forward gap: run the times that were skipped
            m = prev + timedelta(minutes=1)
            while m < w:
                if match(m):
                    fires = True
                    break
                m += timedelta(minutes=1)
        if fires:
            out.append(float(t))
        t += 60
    return out


@pytest.mark.parametrize(
    "expr", ["30 2 * * *", "0,30 1-3 * * *", "*/20 * * * *", "30 * * * *", "15 2 * * SUN"]
)
@pytest.mark.parametrize(
    ("tz", "day"),
    [
        (BERLIN, (2026, 3, 28)),
        (BERLIN, (2026, 10, 24)),
        (NEW_YORK, (2026, 3, 7)),
        (NEW_YORK, (2026, 10, 31)),
        ("Australia/Lord_Howe", (2026, 4, 4)),  # a 30-minute DST shift
        ("Australia/Lord_Howe", (2026, 10, 3)),
    ],
)
def test_matches_a_minute_by_minute_reference_around_transitions(
    expr: str, tz: str, day: tuple[int, int, int]
) -> None:
    start = ts(*day, tz=tz)
    end = start + 3 * 86400
    assert list(ScheduleSet([expr], tz).between(start, end)) == _reference(expr, tz, start, end)


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(["30 2 * * *", "30 1 * * *", "*/20 * * * *", "0 */2 * * *", "45 0-3 * * *"]),
    tz=st.sampled_from([BERLIN, NEW_YORK]),
    offset=st.integers(min_value=0, max_value=4 * 86400),
    probe=st.floats(min_value=0.0, max_value=1.0),
)
def test_next_after_is_consistent_from_any_point(expr: str, tz: str, offset: int, probe: float) -> None:
    # asking from anywhere between two fire times gives the same next fire time: a driver that
    # restarts at an arbitrary moment neither skips nor repeats a tick
    base = ts(2026, 10, 23, tz=tz) if offset % 2 else ts(2026, 3, 6, tz=tz)
    s = ScheduleSet([expr], tz)
    t = base + offset
    a = s.next_after(t)
    assert a is not None and a > t
    b = s.next_after(t + (a - t) * probe * 0.999)
    assert b == a
