from __future__ import annotations

import contextlib
import json
import random
import re
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.clock import VIRTUAL_EPOCH, VirtualClock
from engine.expr import (
    Expr,
    ExprError,
    FunctionSet,
    check_syntax,
    render_string,
    render_value,
    stringify,
    template_expressions,
    translate,
)


def fs(seed: int = 7) -> FunctionSet:
    return FunctionSet(random.Random(seed), VirtualClock())


# --------------------------------------------------------------------------------------------
# Chaos Mesh branch conditions


@pytest.mark.parametrize(
    ("src", "env", "expected"),
    [
        ('exitCode == 0 && stdout == "branch-a"', {"exitCode": 0, "stdout": "branch-a"}, True),
        ('exitCode == 0 && stdout == "branch-a"', {"exitCode": 0, "stdout": "branch-b"}, False),
        ("exitCode != 0", {"exitCode": 1, "stdout": ""}, True),
        ("exitCode != 0", {"exitCode": 0, "stdout": ""}, False),
        ('stdout contains "x"', {"stdout": "a x b"}, True),
        ('stdout contains "x"', {"stdout": "abc"}, False),
        ('stdout matches "^ok-[0-9]+$"', {"stdout": "ok-42"}, True),
        ('stdout matches "^ok-[0-9]+$"', {"stdout": "ok-x"}, False),
        ('stdout startsWith "ok"', {"stdout": "okay"}, True),
        ('stdout endsWith "ay"', {"stdout": "okay"}, True),
        ('exitCode == 0 and stdout contains "ready"', {"exitCode": 0, "stdout": "is ready"}, True),
        ('exitCode == 1 or stdout contains "ready"', {"exitCode": 0, "stdout": "nope"}, False),
        ('not (stdout contains "err")', {"stdout": "fine"}, True),
        ('stdout not contains "err"', {"stdout": "an err"}, False),
        ('stdout not matches "^a"', {"stdout": "b"}, True),
        ("exitCode not in [1, 2]", {"exitCode": 3}, True),
        ("exitCode in [1, 2]", {"exitCode": 2}, True),
        ("len(stdout) > 2", {"stdout": "abc"}, True),
        ("stdout != nil", {"stdout": "x"}, True),
        ("stdout matches `^\\d+$`", {"stdout": "123"}, True),
        ('stdout + "!" contains "x!"', {"stdout": "x"}, True),
        ('stdout.contains("a") && stdout.startsWith("a")', {"stdout": "abc"}, True),
        ('exitCode == 0 ? stdout contains "a" : false', {"exitCode": 0, "stdout": "a"}, True),
    ],
)
def test_chaos_mesh_and_expr_syntax(src: str, env: dict[str, object], expected: bool) -> None:
    assert Expr(src).evaluate_bool(env) is expected


@pytest.mark.parametrize(
    ("src", "cel"),
    [
        ('exitCode == 0 && stdout == "branch-a"', 'exitCode == 0 && stdout == "branch-a"'),
        ('stdout contains "x"', 'stdout.contains("x")'),
        ('stdout contains "x" && exitCode == 0', 'stdout.contains("x") && exitCode == 0'),
        ("a + b contains c", "(a + b).contains(c)"),
        ("f(a, b) matches 're'", "f(a, b).matches('re')"),
        ("a.b[0] startsWith p || c endsWith q", "a.b[0].startsWith(p) || c.endsWith(q)"),
        ("a contains b contains c", "a.contains(b).contains(c)"),
        ("a not contains b", "!a.contains(b)"),
        ("a not in [1]", "!(a in [1])"),
        ("a and not b or c", "a && !b || c"),
        ('x == "a and b or not c contains d"', 'x == "a and b or not c contains d"'),
        ("x == 'don''t'", "x == 'don''t'"),
        ('r"a and b" == x', 'r"a and b" == x'),
        ('"""and\nor""" == x', '"""and\nor""" == x'),
        ("x.contains(y)", "x.contains(y)"),
        ("contains", "contains"),
        ("android && orange", "android && orange"),
        ("len(x)", "size(x)"),
        ("m.len(x)", "m.len(x)"),
        ("x == nil", "x == null"),
    ],
)
def test_translation(src: str, cel: str) -> None:
    assert translate(src) == cel


def test_translation_leaves_plain_cel_untouched() -> None:
    src = "a.exists(x, x > 2) && b.map(y, y * 2).size() == 3"
    assert translate(src) is src


def test_translation_missing_operand() -> None:
    with pytest.raises(ExprError, match="missing right operand of 'contains'"):
        Expr("stdout contains")


# --------------------------------------------------------------------------------------------
# evaluation and errors


def test_typed_results() -> None:
    assert Expr("1 + 2").evaluate() == 3
    assert Expr("[1, 2, 3].map(x, x * 2)").evaluate() == [2, 4, 6]
    assert Expr('{"a": n}').evaluate({"n": 1.5}) == {"a": 1.5}
    assert Expr("a.b.c").evaluate({"a": {"b": {"c": "deep"}}}) == "deep"
    assert Expr("n == null").evaluate({"n": None}) is True
    assert Expr("n").evaluate({"n": None}) is None
    assert Expr('duration("1m30s")').evaluate() == timedelta(seconds=90)
    assert Expr("has(a.b) && !has(a.c)").evaluate({"a": {"b": 1}}) is True


def test_int_double_strictness_is_reported() -> None:
    with pytest.raises(ExprError) as info:
        Expr("x + 2.5").evaluate({"x": 1})
    msg = str(info.value)
    assert msg.startswith('evaluating "x + 2.5": ')
    assert "int(x), double(x) or string(x)" in msg
    assert Expr("double(x) + 2.5").evaluate({"x": 1}) == 3.5


@pytest.mark.parametrize(
    ("src", "env", "fragment"),
    [
        ("y > 1", {"x": 1}, "undefined variable 'y' (variables: x)"),
        ("nope(1)", {}, "unknown function nope()"),
        ('m["k"]', {"m": {"a": 1}}, "no such key"),
        ("l[3]", {"l": [1]}, "index out of bounds"),
        ("1 / x", {"x": 0}, "division by zero"),
        ('"a" + 1', {}, "string + int"),
        ("s", {"s": {1, 2}}, "variable 's' holds a value CEL cannot represent (set)"),
        (
            's.matches("(")',
            {"s": "x"},
            "matches(): '(' not a valid regex: regex parse error: ( ^ error: unclosed group",
        ),
        ("x + 1", {"x": 9223372036854775807}, "overflow"),
    ],
)
def test_evaluation_errors(src: str, env: dict[str, object], fragment: str) -> None:
    with pytest.raises(ExprError) as info:
        Expr(src).evaluate(env)
    err = info.value
    assert fragment in str(err)
    assert err.expression == src
    assert str(err).startswith(f"evaluating {json.dumps(src)}: ")
    assert "Traceback" not in str(err)


def test_evaluate_bool_requires_bool() -> None:
    with pytest.raises(
        ExprError, match=r'evaluating "exitCode \+ 1": must evaluate to a bool, got int \(1\)'
    ):
        Expr("exitCode + 1").evaluate_bool({"exitCode": 0})
    with pytest.raises(ExprError, match="got string"):
        Expr("stdout").evaluate_bool({"stdout": "true"})


@pytest.mark.parametrize(
    ("src", "fragment"),
    [
        ("1 +", "1:4: syntax error"),
        ('"abc', "syntax error"),
        ("a b", "1:3: syntax error: extraneous input 'b'"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("(((", "syntax error"),
    ],
)
def test_compile_errors(src: str, fragment: str) -> None:
    msg = check_syntax(src)
    assert msg is not None
    assert fragment in msg
    with pytest.raises(ExprError):
        Expr(src)


def test_check_syntax_ok() -> None:
    assert check_syntax('exitCode == 0 && stdout == "branch-a"') is None
    assert check_syntax('stdout contains "x"') is None
    assert check_syntax("undefinedVar > 1") is None  # names are resolved at evaluation


def test_compile_error_mentions_translation() -> None:
    msg = check_syntax('stdout contains "x" +')
    assert msg is not None
    assert "CEL translation" in msg


def test_expr_static_info_and_cache() -> None:
    e = Expr("exitCode == 0 && size(stdout) > 1 && rand() < 0.5")
    assert set(e.variables) == {"exitCode", "stdout"}
    assert {"size", "rand"} <= set(e.functions)
    assert Expr(e.source) == e
    assert hash(Expr(e.source)) == hash(e)
    assert Expr(e.source)._c is e._c  # compiled once, cached by source text


def test_big_env_is_not_converted() -> None:
    big = {"x": 1, "nodes": [{"name": f"n{i}", "labels": {"a": "b"}} for i in range(5000)]}
    e = Expr("x == 1")
    start = time.perf_counter()
    for _ in range(200):
        assert e.evaluate(big) is True
    assert time.perf_counter() - start < 0.5


def test_evaluate_is_fast() -> None:
    e = Expr('exitCode == 0 && stdout == "branch-a"')
    env = {"exitCode": 0, "stdout": "branch-a"}
    f = fs()
    e.evaluate(env, f)
    n = 2000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            e.evaluate(env, f)
        best = min(best, (time.perf_counter() - start) / n)
    assert best < 100e-6  # typically ~2-3 µs; generous bound for loaded CI machines


# --------------------------------------------------------------------------------------------
# functions


def test_functions_are_deterministic_per_seed() -> None:
    src = "[rand(), randInt(1, 100), pick(['a', 'b', 'c', 'd']), shuffle([1, 2, 3, 4, 5]), uuid()]"
    a = Expr(src).evaluate({}, fs(11))
    b = Expr(src).evaluate({}, fs(11))
    c = Expr(src).evaluate({}, fs(12))
    assert a == b
    assert a != c


def test_rand_range_and_types() -> None:
    f = fs()
    vals = [Expr("rand()").evaluate({}, f) for _ in range(500)]
    assert all(isinstance(v, float) and 0.0 <= v < 1.0 for v in vals)
    ints = [Expr("randInt(1, 3)").evaluate({}, f) for _ in range(300)]
    assert set(ints) == {1, 2, 3}
    assert Expr("randInt(5, 5)").evaluate({}, f) == 5
    assert Expr("rand() < 2.0").evaluate_bool({}, f) is True


def test_rand_matches_the_injected_rng() -> None:
    rng = random.Random(99)
    ref = random.Random(99)
    f = FunctionSet(rng)
    assert Expr("rand()").evaluate({}, f) == ref.random()
    assert Expr("randInt(1, 1000)").evaluate({}, f) == ref.randint(1, 1000)


def test_pick_and_shuffle() -> None:
    f = fs()
    items = ["a", "b", "c"]
    picks = {Expr("pick(xs)").evaluate({"xs": items}, f) for _ in range(100)}
    assert picks == set(items)
    out = Expr("shuffle(xs)").evaluate({"xs": items}, f)
    assert sorted(out) == items
    assert items == ["a", "b", "c"]  # input untouched
    seen = {tuple(Expr("shuffle([1, 2, 3])").evaluate({}, f)) for _ in range(100)}
    assert len(seen) == 6


def test_uuid_format_and_determinism() -> None:
    u1 = Expr("uuid()").evaluate({}, fs(5))
    u2 = Expr("uuid()").evaluate({}, fs(5))
    assert u1 == u2
    parsed = uuid.UUID(u1)
    assert parsed.version == 4
    assert parsed.variant == uuid.RFC_4122
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", u1)
    assert Expr("uuid() != uuid()").evaluate({}, fs(5)) is True


def test_now_is_a_timestamp_from_the_clock() -> None:
    clock = VirtualClock()
    f = FunctionSet(random.Random(1), clock)
    assert Expr("now()").evaluate({}, f) == datetime.fromtimestamp(VIRTUAL_EPOCH, tz=UTC)
    clock.advance(90)
    assert Expr('now() - duration("90s") == timestamp("2026-01-01T00:00:00Z")').evaluate({}, f) is True
    assert render_string("{{ now() }}", {}, f) == "2026-01-01T00:01:30Z"
    assert FunctionSet(clock=lambda: 0.0)._now_ts() == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("src", "fragment"),
    [
        ("randInt(3, 1)", "randInt(): empty range: 3 > 1"),
        ("randInt(1.0, 2)", "randInt(): expects two ints, got double and int"),
        ("pick([])", "pick(): cannot pick from an empty list"),
        ('pick("abc")', "pick(): expects a list, got string"),
        ("shuffle(1)", "shuffle(): expects a list, got int"),
        ("rand(1)", "rand(): takes no arguments, got 1"),
        ("uuid(1, 2)", "uuid(): takes no arguments, got 2"),
    ],
)
def test_function_errors(src: str, fragment: str) -> None:
    with pytest.raises(ExprError) as info:
        Expr(src).evaluate({}, fs())
    assert fragment in str(info.value)


def test_functions_unavailable_without_function_set() -> None:
    with pytest.raises(ExprError, match=r"unknown function rand\(\)"):
        Expr("rand()").evaluate({})


def test_register_extra_functions() -> None:
    f = fs()
    calls: list[tuple[str, dict[str, str]]] = []

    def lookup(kind: str, selector: dict[str, str]) -> list[dict[str, str]]:
        calls.append((kind, selector))
        return [{"name": "pod-a"}, {"name": "pod-b"}]

    f.register("lookup", lookup)
    assert "lookup" in f
    assert "lookup" in f.names()
    src = 'lookup("Pod", {"app": "web"}).map(p, p.name)'
    assert Expr(src).evaluate({}, f) == ["pod-a", "pod-b"]
    assert calls == [("Pod", {"app": "web"})]
    with pytest.raises(ValueError, match="already registered"):
        f.register("lookup", lookup)
    f.register("lookup", lambda k, s: [], replace=True)
    assert Expr(src).evaluate({}, f) == []
    with pytest.raises(ValueError, match="invalid function name"):
        f.register("not a name", lookup)


def test_failing_extra_function_is_reported_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    f = fs()

    def boom(x: int) -> int:
        raise KeyError("cluster unreachable")

    f.register("boom", boom)
    with pytest.raises(ExprError) as info:
        Expr("boom(1) == 1").evaluate({}, f)
    assert str(info.value) == "evaluating \"boom(1) == 1\": boom() failed: KeyError: 'cluster unreachable'"
    assert not [r for r in caplog.records if r.name == "cel"]


def test_function_returning_unsupported_value() -> None:
    f = fs()
    f.register("weird", object)
    with pytest.raises(ExprError, match=r"weird\(\) returned a value CEL cannot represent"):
        Expr("weird()").evaluate({}, f)


def test_nested_evaluation_from_a_function() -> None:
    f = fs()
    f.register("inner", lambda x: Expr("x * 2").evaluate({"x": x}, f))
    assert Expr("inner(n) + n").evaluate({"n": 5}, f) == 15


def test_context_does_not_leak_between_evaluations() -> None:
    f = fs()
    assert Expr("a").evaluate({"a": 1}, f) == 1
    with pytest.raises(ExprError, match="undefined variable 'a'"):
        Expr("a").evaluate({"b": 1}, f)
    assert Expr("a == null").evaluate({"a": None}, f) is True
    with pytest.raises(ExprError, match="undefined variable 'a'"):
        Expr("a").evaluate({}, f)


def test_threads_share_a_function_set() -> None:
    f = fs()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(200):
                assert Expr("x + y").evaluate({"x": i, "y": j}, f) == i + j
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# --------------------------------------------------------------------------------------------
# templates


def test_render_fast_path_returns_same_object() -> None:
    s = "no placeholders here"
    assert render_string(s, {}) is s


def test_render_typed_single_placeholder() -> None:
    env = {"n": 3, "items": [1, 2], "m": {"a": True}}
    assert render_string("{{ n }}", env) == 3
    assert render_string("{{n+1}}", env) == 4
    assert render_string("{{ items }}", env) == [1, 2]
    assert render_string("{{ m }}", env) == {"a": True}
    assert render_string("{{ null }}", env) is None
    assert render_string('{{ duration("90s") }}', env) == "1m30s"
    assert render_string('{{ timestamp("2026-01-01T00:00:00Z") }}', env) == "2026-01-01T00:00:00Z"
    assert render_string(" {{ n }}", env) == " 3"  # surrounding text -> string


def test_render_interpolation() -> None:
    env = {"name": "vol", "i": 7, "f": 2.0, "g": 0.25, "l": [1, "a"], "m": {"k": 1}, "b": False}
    assert render_string("{{ name }}-{{ i }}", env) == "vol-7"
    assert render_string("f={{ f }} g={{ g }} b={{ b }} n={{ null }}", env) == "f=2 g=0.25 b=false n=null"
    assert render_string("l={{ l }} m={{ m }}", env) == 'l=[1,"a"] m={"k":1}'
    assert render_string('d={{ duration("1h") }}', env) == "d=1h0m0s"
    assert render_string("x{{ 1e20 }}", env) == "x100000000000000000000"
    assert render_string("multi\nline {{ i }}\n", env) == "multi\nline 7\n"


def test_render_braces_inside_expressions() -> None:
    assert render_string('{{ {"a": {"b": 1}} }}') == {"a": {"b": 1}}
    assert render_string('x{{ {"a": 1}["a"] }}y') == "x1y"
    assert render_string('{{ "}}" }}') == "}}"
    assert render_string('a {{ "x}}y" }} b') == "a x}}y b"


def test_render_escape_literal_braces() -> None:
    assert render_string('{{ "{{" }} not a placeholder }}') == "{{ not a placeholder }}"
    assert render_string('{{ "{{" }}') == "{{"


def test_render_errors_name_the_position() -> None:
    with pytest.raises(ExprError, match=r'unclosed "\{\{" at column 5 \(offset 4\)'):
        render_string("abc {{ 1 + ", {})
    with pytest.raises(ExprError, match=r"unclosed .* at line 2, column 3"):
        render_string("ok\nx {{ y", {})
    with pytest.raises(ExprError, match=r"empty \{\{ \}\} at column 3"):
        render_string("x {{ }} y", {})
    with pytest.raises(ExprError, match=r"column 3: evaluating \"y\": undefined variable 'y'"):
        render_string("a {{ y }}", {})
    with pytest.raises(ExprError, match=r"column 2: invalid expression \"1 \+\""):
        render_string("x{{ 1 + }}", {})
    with pytest.raises(ExprError, match=r'^evaluating "y"'):
        render_string("{{ y }}", {})


def test_render_with_functions_is_seeded() -> None:
    a = render_string("vol-{{ uuid() }}-{{ randInt(1, 9) }}", {}, fs(3))
    b = render_string("vol-{{ uuid() }}-{{ randInt(1, 9) }}", {}, fs(3))
    assert a == b
    assert re.fullmatch(r"vol-[0-9a-f-]{36}-[1-9]", a)


def test_render_value_walks_structures() -> None:
    doc = {
        "name": "{{ prefix }}-x",
        "replicas": "{{ n }}",
        "list": ["{{ n * 2 }}", "plain", 5, None, {"deep": ["{{ prefix }}"]}],
        "{{ key }}": "keys are not rendered",
        "flag": True,
    }
    original = {k: v for k, v in doc.items()}
    out = render_value(doc, {"prefix": "p", "n": 2})
    assert out == {
        "name": "p-x",
        "replicas": 2,
        "list": [4, "plain", 5, None, {"deep": ["p"]}],
        "{{ key }}": "keys are not rendered",
        "flag": True,
    }
    assert doc == original
    assert out["list"] is not doc["list"]
    assert render_value((1, "{{ 2 }}")) == [1, 2]


def test_template_expressions() -> None:
    assert list(template_expressions("a {{ x }} b {{ y + 1 }}")) == ["x", "y + 1"]
    assert list(template_expressions("plain")) == []
    with pytest.raises(ExprError):
        template_expressions("{{ 1 + }}")


def test_stringify() -> None:
    assert stringify("s") == "s"
    assert stringify(True) == "true"
    assert stringify(None) == "null"
    assert stringify(3) == "3"
    assert stringify(2.0) == "2"
    assert stringify(0.1) == "0.1"
    assert stringify(1e-7) == "0.0000001"
    assert stringify(float("nan")) == "NaN"
    assert stringify([1, {"a": None}]) == '[1,{"a":null}]'
    assert stringify(timedelta(milliseconds=1500)) == "1.5s"
    assert stringify(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00Z"
    assert stringify(b"bytes") == "bytes"
    assert stringify([timedelta(seconds=60)]) == '["1m0s"]'


@given(st.integers(min_value=-(2**62), max_value=2**62), st.text(max_size=20))
def test_render_roundtrip_values(n: int, s: str) -> None:
    env = {"n": n, "s": s}
    assert render_string("{{ n }}", env) == n
    assert render_string("{{ s }}", env) == s
    assert render_string("<{{ n }}>", env) == f"<{n}>"
    assert render_string("<{{ s }}>", env) == f"<{s}>"


@given(st.text(alphabet=st.sampled_from(list("ab {}\"'\\n")), max_size=30))
def test_render_never_crashes_unexpectedly(text: str) -> None:
    with contextlib.suppress(ExprError):
        render_string(text, {"a": 1, "b": "x"})
