from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from engine.duration import (
    MAX_DURATION_NS,
    Duration,
    DurationError,
    DurationRange,
    DurationSpec,
    draw_duration,
    format_duration,
    format_duration_ns,
    format_duration_spec,
    parse_duration,
    parse_duration_ns,
    parse_duration_spec,
)

# --------------------------------------------------------------------------------------------
# parse: the cases of Go's time.ParseDuration tests


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("5s", 5 * 10**9),
        ("30s", 30 * 10**9),
        ("1478s", 1478 * 10**9),
        ("+5s", 5 * 10**9),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * 10**9),
        ("5.6s", 5_600_000_000),
        ("5.s", 5 * 10**9),
        (".5s", 500_000_000),
        ("1.0s", 10**9),
        ("1.00s", 10**9),
        ("1.004s", 1_004_000_000),
        ("1.0040s", 1_004_000_000),
        ("100.00100s", 100_001_000_000),
        ("10ns", 10),
        ("11us", 11_000),
        ("12µs", 12_000),  # U+00B5
        ("12μs", 12_000),  # U+03BC
        ("13ms", 13_000_000),
        ("14s", 14 * 10**9),
        ("15m", 15 * 60 * 10**9),
        ("16h", 16 * 3600 * 10**9),
        ("3h30m", (3 * 3600 + 30 * 60) * 10**9),
        ("10.5s4m", (4 * 60 + 10) * 10**9 + 500_000_000),
        ("1h2m3s4ms5us6ns", 3723 * 10**9 + 4_005_006),
        ("39h9m14.425s", (39 * 3600 + 9 * 60 + 14) * 10**9 + 425_000_000),
        ("52763797000ns", 52_763_797_000),
        ("0.3333333333333333333h", 1_200_000_000_000),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", MAX_DURATION_NS),
        ("9223372036854775.807us", MAX_DURATION_NS),
        ("9223372036s854ms775us807ns", MAX_DURATION_NS),
        ("0.100000000000000000000h", 360 * 10**9),
        ("0.830103483285477580700h", 2_988_372_539_827),
        ("90s", 90 * 10**9),
        ("1m30s", 90 * 10**9),
        ("1.5h", 5400 * 10**9),
        ("300ms", 300_000_000),
        ("2h45m", (2 * 3600 + 45 * 60) * 10**9),
        ("1us", 1000),
        ("1µs", 1000),
    ],
)
def test_parse_matches_go(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns
    assert parse_duration(text) == ns / 10**9


def test_parse_negative_only_when_allowed() -> None:
    assert parse_duration_ns("-5s", allow_negative=True) == -5 * 10**9
    assert parse_duration_ns("-9223372036854775808ns", allow_negative=True) == -(1 << 63)
    assert parse_duration("-1.5s", allow_negative=True) == -1.5
    with pytest.raises(DurationError, match=r'invalid duration "-1s": must not be negative'):
        parse_duration("-1s")
    assert parse_duration("-0s") == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1x", 'invalid duration "1x": unknown unit "x" (valid: ns, us, ms, s, m, h)'),
        ("3000000h", 'invalid duration "3000000h": out of range'),
        ("9223372036854775808ns", 'invalid duration "9223372036854775808ns": out of range'),
        ("9223372036854775.808us", 'invalid duration "9223372036854775.808us": out of range'),
        ("9223372036854ms775us808ns", 'invalid duration "9223372036854ms775us808ns": out of range'),
        ("", 'invalid duration "": empty'),
        ("3", 'invalid duration "3": missing unit (valid: ns, us, ms, s, m, h); did you mean "3s"?'),
        ("1h30", 'invalid duration "1h30": missing unit (valid: ns, us, ms, s, m, h)'),
        ("-", 'invalid duration "-": expected a number after the sign'),
        ("s", 'invalid duration "s": expected a number at "s"'),
        (".", 'invalid duration ".": expected digits around the decimal point at "."'),
        ("-.", 'invalid duration "-.": expected digits around the decimal point at "."'),
        (".s", 'invalid duration ".s": expected digits around the decimal point at ".s"'),
        ("+.s", 'invalid duration "+.s": expected digits around the decimal point at ".s"'),
        (" 1s", 'invalid duration " 1s": expected a number at " 1s"'),
        ("1s ", 'invalid duration "1s ": unknown unit "s " (valid: ns, us, ms, s, m, h)'),
        ("1d", 'invalid duration "1d": unknown unit "d" (valid: ns, us, ms, s, m, h)'),
        ("1e3s", 'invalid duration "1e3s": unknown unit "e" (valid: ns, us, ms, s, m, h)'),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(text, allow_negative=True)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_parse_numbers_are_seconds() -> None:
    assert parse_duration(90) == 90.0
    assert parse_duration(2.5) == 2.5
    assert parse_duration(0) == 0.0
    assert isinstance(parse_duration(3), float)
    with pytest.raises(DurationError, match="must not be negative"):
        parse_duration(-1)
    assert parse_duration(-1, allow_negative=True) == -1.0
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(DurationError, match="must be finite"):
            parse_duration(bad)
    with pytest.raises(DurationError, match="out of range"):
        parse_duration(10**12)
    with pytest.raises(DurationError):
        parse_duration(True)
    with pytest.raises(DurationError):
        parse_duration(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# format: Go's Duration.String cases


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1100, "1.1µs"),
        (2_200_000, "2.2ms"),
        (3_300_000_000, "3.3s"),
        (4 * 60 * 10**9 + 5 * 10**9, "4m5s"),
        (4 * 60 * 10**9 + 5_001_000_000, "4m5.001s"),
        (5 * 3600 * 10**9 + 6 * 60 * 10**9 + 7_001_000_000, "5h6m7.001s"),
        (8 * 60 * 10**9 + 1, "8m0.000000001s"),
        (MAX_DURATION_NS, "2562047h47m16.854775807s"),
        (-(1 << 63), "-2562047h47m16.854775808s"),
        (-1, "-1ns"),
        (-1100, "-1.1µs"),
        (3600 * 10**9, "1h0m0s"),
        (90 * 10**9, "1m30s"),
        (500_000_000, "500ms"),
    ],
)
def test_format_matches_go(ns: int, text: str) -> None:
    assert format_duration_ns(ns) == text


def test_format_float_seconds() -> None:
    assert format_duration(90) == "1m30s"
    assert format_duration(3600.0) == "1h0m0s"
    assert format_duration(0.5) == "500ms"
    assert format_duration(0) == "0s"
    assert format_duration(0.1) == "100ms"  # decimal value, not the binary approximation
    assert format_duration(1e-9) == "1ns"
    assert format_duration(-90.0) == "-1m30s"
    assert format_duration(parse_duration("2562047h47m16.854775807s")) == "2562047h47m16.854775807s"
    with pytest.raises(DurationError):
        format_duration(float("nan"))


@given(st.integers(min_value=-(1 << 63), max_value=MAX_DURATION_NS))
def test_roundtrip_exact_nanoseconds(ns: int) -> None:
    assert parse_duration_ns(format_duration_ns(ns), allow_negative=True) == ns


@given(st.integers(min_value=0, max_value=10**12))
def test_roundtrip_milliseconds(ms: int) -> None:
    seconds = ms / 1000
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.floats(min_value=0, max_value=9.2e9, allow_nan=False, allow_infinity=False))
def test_format_is_stable(seconds: float) -> None:
    text = format_duration(seconds)
    assert format_duration(parse_duration(text)) == text
    assert abs(parse_duration(text) - seconds) <= max(1e-9, abs(seconds) * 1e-15)


# --------------------------------------------------------------------------------------------
# ranges and specs


def test_range_draw_is_seeded_uniform_and_millisecond_rounded() -> None:
    r = DurationRange(10.0, 30.0)
    a = [r.draw(random.Random(42)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng1, rng2 = random.Random(7), random.Random(7)
    seq1 = [r.draw(rng1) for _ in range(200)]
    seq2 = [r.draw(rng2) for _ in range(200)]
    assert seq1 == seq2
    assert all(10.0 <= v <= 30.0 for v in seq1)
    assert all(round(v, 3) == v for v in seq1)
    assert len(set(seq1)) > 150
    assert 15 < sum(seq1) / len(seq1) < 25


def test_range_draw_consumes_one_random_call() -> None:
    rng, ref = random.Random(3), random.Random(3)
    DurationRange(1, 2).draw(rng)
    ref.random()
    assert rng.random() == ref.random()


def test_range_degenerate_and_clamped() -> None:
    assert DurationRange(5, 5).draw(random.Random(1)) == 5
    tiny = DurationRange(0.0004, 0.0006)
    for seed in range(50):
        v = tiny.draw(random.Random(seed))
        assert 0.0004 <= v <= 0.0006


def test_range_validation() -> None:
    with pytest.raises(DurationError, match="min 30s is greater than max 10s"):
        DurationRange(30, 10)
    with pytest.raises(DurationError, match="must not be negative"):
        DurationRange(-1, 10)
    with pytest.raises(DurationError, match="finite"):
        DurationRange(0, float("inf"))


def test_parse_duration_spec_forms() -> None:
    assert parse_duration_spec("1m30s") == 90.0
    assert parse_duration_spec(12) == 12.0
    assert parse_duration_spec(1.5) == 1.5
    assert parse_duration_spec({"min": "10s", "max": "30s"}) == DurationRange(10.0, 30.0)
    assert parse_duration_spec({"min": 1, "max": "1m"}) == DurationRange(1.0, 60.0)
    r = DurationRange(1, 2)
    assert parse_duration_spec(r) is r


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"min": "30s", "max": "10s"}, "invalid duration range: min 30s is greater than max 10s"),
        ({"min": "1s"}, "invalid duration range: missing max"),
        ({}, "invalid duration range: missing min and max"),
        ({"min": "1s", "max": "2s", "avg": 1}, 'invalid duration range: unknown field(s) "avg"'),
        ({"min": "1x", "max": "2s"}, 'invalid duration range: min: invalid duration "1x": unknown unit'),
        ({"min": "1s", "max": [2]}, "invalid duration range: max must be a duration string or seconds"),
        ([1, 2], "invalid duration [1, 2]: expected a string"),
        (None, "invalid duration None"),
        (True, "invalid duration True"),
    ],
)
def test_parse_duration_spec_errors(value: object, message: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration_spec(value)
    assert str(info.value).startswith(message)


def test_draw_duration_and_format_spec() -> None:
    assert draw_duration(5.0, random.Random(1)) == 5.0
    assert 1 <= draw_duration(DurationRange(1, 2), random.Random(1)) <= 2
    assert format_duration_spec(90.0) == "1m30s"
    assert format_duration_spec(DurationRange(10, 90)) == {"min": "10s", "max": "1m30s"}
    assert str(DurationRange(10, 90)) == "10s..1m30s"


# --------------------------------------------------------------------------------------------
# pydantic


class _Model(BaseModel):
    hold: DurationSpec
    timeout: Duration = 30.0
    pause: DurationSpec | None = None


def test_pydantic_validates_all_forms() -> None:
    m = _Model(hold="1m30s", timeout=5, pause={"min": "10s", "max": "30s"})
    assert m.hold == 90.0
    assert m.timeout == 5.0
    assert m.pause == DurationRange(10.0, 30.0)


def test_pydantic_serializes_back_to_go_style() -> None:
    m = _Model(hold={"min": "1s", "max": "2m"}, timeout="90s")
    assert m.model_dump() == {"hold": {"min": "1s", "max": "2m0s"}, "timeout": "1m30s", "pause": None}
    dumped = m.model_dump_json()
    assert json.loads(dumped) == {"hold": {"min": "1s", "max": "2m0s"}, "timeout": "1m30s", "pause": None}
    assert _Model.model_validate_json(dumped) == m
    assert _Model.model_validate(m.model_dump()) == m


def test_pydantic_errors_are_clear() -> None:
    with pytest.raises(ValidationError) as info:
        _Model(hold="1x")
    assert 'invalid duration "1x": unknown unit "x"' in str(info.value)
    with pytest.raises(ValidationError, match="greater than max"):
        _Model(hold={"min": "3s", "max": "1s"})
    with pytest.raises(ValidationError, match="invalid duration"):
        _Model(hold="1s", timeout={"min": "1s", "max": "2s"})  # fixed-only field


def test_pydantic_json_schema() -> None:
    props = _Model.model_json_schema()["properties"]
    spec = props["hold"]
    assert [s["type"] for s in spec["anyOf"]] == ["string", "object"]
    obj = spec["anyOf"][1]
    assert obj["required"] == ["min", "max"]
    assert obj["additionalProperties"] is False
    assert obj["properties"]["min"]["type"] == "string"
    assert props["timeout"]["type"] == "string"
    import re

    pattern = re.compile(props["timeout"]["pattern"])
    for ok in ("0", "90s", "1m30s", "1.5h", "300ms", "1µs", ".5s"):
        assert pattern.match(ok), ok
    for bad in ("", "1", "1x", "-1s", "s"):
        assert not pattern.match(bad), bad
