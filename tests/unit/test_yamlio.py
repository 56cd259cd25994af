from __future__ import annotations

import json
import pickle
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import yamlio
from engine.errors import InputError, SourcePos, ValidationFailed, ValidationIssue, format_path
from engine.yamlio import Limits, dump_yaml, dump_yaml_all, load_document, load_documents


@pytest.fixture(params=["libyaml", "python"])
def parser_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with libyaml's parser and with PyYAML's pure-Python parser."""
    if request.param == "libyaml":
        if not yamlio.HAVE_LIBYAML:
            pytest.skip("PyYAML built without libyaml")
    else:
        monkeypatch.setattr(yamlio, "_CParser", None)
    yield request.param


def load(text: str | bytes, limits: Limits = yamlio.DEFAULT) -> list[Any]:
    return [d.data for d in load_documents(text, "wf.yaml", limits)]


def error(text: str | bytes, limits: Limits = yamlio.DEFAULT) -> InputError:
    with pytest.raises(InputError) as info:
        load_documents(text, "wf.yaml", limits)
    err = info.value
    assert err.filename == "wf.yaml"
    assert str(err).startswith("wf.yaml")
    assert "Traceback" not in str(err)
    return err


# --------------------------------------------------------------------------------------------
# errors.py


def test_format_path() -> None:
    assert format_path(("spec", "templates", 2, "children", 0)) == "spec.templates[2].children[0]"
    assert format_path(()) == ""
    assert format_path((0, "a")) == "[0].a"
    assert format_path(("metadata", "labels", "app.kubernetes.io/name")) == (
        'metadata.labels["app.kubernetes.io/name"]'
    )
    assert format_path(("a", "has space", "x-y")) == 'a["has space"].x-y'
    assert yamlio.format_path is format_path


def test_validation_issue_str() -> None:
    issue = ValidationIssue("wf.yaml", ("spec", "templates", 2, "children", 0), 'unknown template "foo"')
    assert str(issue) == 'wf.yaml: spec.templates[2].children[0]: unknown template "foo"'
    assert str(ValidationIssue("wf.yaml", (), "empty")) == "wf.yaml: empty"
    with_line = ValidationIssue("wf.yaml", ("spec",), "bad", line=4)
    assert str(with_line) == "wf.yaml:4: spec: bad"
    assert with_line == ValidationIssue("wf.yaml", ("spec",), "bad")  # line is informational
    failed = ValidationFailed([issue, with_line])
    assert str(failed).splitlines() == [str(issue), str(with_line)]
    assert pickle.loads(pickle.dumps(failed)).issues == failed.issues


def test_input_error_str() -> None:
    assert str(InputError("f.yaml", ("spec", "x"), "bad")) == "f.yaml: spec.x: bad"
    assert str(InputError("f.yaml", SourcePos(3, 5), "bad")) == "f.yaml:3:5: bad"
    assert str(InputError("f.yaml", 7, "bad")) == "f.yaml:7: bad"
    assert str(InputError("f.yaml", None, "bad")) == "f.yaml: bad"
    e = InputError("f.yaml", ("a", 0), "dup", pos=SourcePos(2, 1))
    assert str(e) == "f.yaml:2:1: a[0]: dup"
    assert e.path == ("a", 0)
    assert e.line == 2
    assert isinstance(e, ValueError)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


# --------------------------------------------------------------------------------------------
# plain loading


def test_loads_yaml_and_json(parser_kind: str) -> None:
    assert load("a: 1\nb: [1, 2, {c: d}]\n") == [{"a": 1, "b": [1, 2, {"c": "d"}]}]
    assert load('{"a": 1e5, "b": [true, null, "x"], "c": -1.5E-3, "d": 0}') == [
        {"a": 100000.0, "b": [True, None, "x"], "c": -0.0015, "d": 0}
    ]
    assert load("- 1\n- two\n") == [[1, "two"]]
    assert load("just a string") == ["just a string"]


def test_scalar_resolution(parser_kind: str) -> None:
    text = (
        (
            "date: 2026-01-01\nsexa: 1:30\neq: =\noctal: 0644\nhex: 0x1F\non: on\nyes: yes\n"
            "inf: .inf\nfloat: 1.5\nexp: 1e3\nnull1: ~\nnull2:\nmerge_value: <<\nquoted: '123'\n"
        )
        .replace("on: on", '"on": on')
        .replace("yes: yes", '"yes": yes')
    )
    (doc,) = load(text)
    assert doc == {
        "date": "2026-01-01",
        "sexa": "1:30",
        "eq": "=",
        "octal": 420,
        "hex": 31,
        "on": True,
        "yes": True,
        "inf": float("inf"),
        "float": 1.5,
        "exp": 1000.0,
        "null1": None,
        "null2": None,
        "merge_value": "<<",
        "quoted": "123",
    }


def test_json_with_surrogate_pair_escapes(parser_kind: str) -> None:
    text = json.dumps({"emoji": "\U0001f600", "n": [1, {"x": None}]})
    assert "\\ud83d" in text
    (doc,) = load_documents(text, "wf.json")
    assert doc.data == {"emoji": "\U0001f600", "n": [1, {"x": None}]}
    dup = '{"a": "\\ud83d\\ude00", "a": 1}'
    assert 'duplicate key "a"' in str(error(dup))
    deep = "[" * 70 + '"\\ud83d\\ude00"' + "]" * 70
    assert "nesting deeper than 64 levels" in str(error(deep))
    error('{"a": "\\ud83d\\ude00", }}')  # neither YAML nor JSON


def test_multiple_documents_and_empty_ones(parser_kind: str) -> None:
    docs = load_documents("a: 1\n---\n---\nb: 2\n---\n", "wf.yaml")
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}]
    assert [d.index for d in docs] == [0, 2]
    assert [d.line for d in docs] == [1, 4]
    assert load("") == []
    assert load("# only a comment\n") == []


def test_bytes_input_and_bom(parser_kind: str) -> None:
    assert load("a: é\n".encode()) == [{"a": "é"}]
    assert load(b"\xef\xbb\xbfa: 1\n") == [{"a": 1}]
    assert load("\ufeffa: 1\n") == [{"a": 1}]


def test_merge_keys(parser_kind: str) -> None:
    text = "base: &b {x: 1, y: 2}\nder:\n  <<: *b\n  y: 3\n"
    assert load(text) == [{"base": {"x": 1, "y": 2}, "der": {"x": 1, "y": 3}}]


def test_aliases_are_copied_not_shared(parser_kind: str) -> None:
    (doc,) = load("a: &x {k: [1, 2]}\nb: *x\nc: *x\n")
    assert doc["a"] == doc["b"] == doc["c"] == {"k": [1, 2]}
    assert doc["a"] is not doc["b"]
    assert doc["b"]["k"] is not doc["c"]["k"]
    doc["b"]["k"].append(3)
    assert doc["c"]["k"] == [1, 2]


def test_load_document_single() -> None:
    assert load_document("a: 1\n", "wf.yaml").data == {"a": 1}
    with pytest.raises(InputError, match="no document found"):
        load_document("", "wf.yaml")
    with pytest.raises(InputError, match=r"wf.yaml:3: expected a single document, found 2"):
        load_document("a: 1\n---\nb: 2\n", "wf.yaml")


# --------------------------------------------------------------------------------------------
# hostile input


def test_duplicate_keys(parser_kind: str) -> None:
    err = error("a: 1\nb: 2\na: 3\n")
    assert str(err) == 'wf.yaml:3:1: a: duplicate key "a" (first defined at line 1)'
    err = error("spec:\n  templates:\n    - name: a\n      name: b\n")
    assert str(err) == 'wf.yaml:4:7: spec.templates[0].name: duplicate key "name" (first defined at line 3)'
    err = error('{"a": 1, "a": 2}')
    assert 'duplicate key "a"' in str(err)


def test_non_string_keys(parser_kind: str) -> None:
    assert "mapping key 1 is an int, not a string; quote it" in str(error("1: a\n"))
    err = error("spec:\n  on: true\n")
    assert str(err) == (
        "wf.yaml:2:3: spec: mapping key on is a boolean, not a string "
        '(YAML reads yes/no/on/off as booleans); quote it: "on"'
    )
    assert "mapping key is empty or null" in str(error("~: a\n"))
    assert "mapping key 1.5 is a float" in str(error("1.5: a\n"))
    assert "mapping keys must be strings, not a sequence or mapping" in str(error("? [a]\n: b\n"))
    assert load('"1": a\n') == [{"1": "a"}]


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("a: !!binary aGVsbG8=\n", "!!binary"),
        ("a: !!timestamp 2026-01-01\n", "!!timestamp"),
        ("a: !!set {x}\n", "!!set"),
        ("a: !!omap [x: 1]\n", "!!omap"),
        ("a: !custom x\n", "!custom"),
        ("a: !!python/object/apply:os.system [echo]\n", "!!python/object/apply:os.system"),
    ],
)
def test_unsupported_tags(parser_kind: str, text: str, tag: str) -> None:
    err = error(text)
    assert f"a: unsupported tag {tag} (only plain YAML/JSON data is accepted)" in str(err)


def test_explicit_plain_tags_are_fine(parser_kind: str) -> None:
    assert load("a: !!str 123\nb: !!int '7'\nc: !!map {x: 1}\n") == [{"a": "123", "b": 7, "c": {"x": 1}}]


def _billion_laughs(levels: int = 9) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghijklmnop"[: levels - 1]:
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = name
    return text


def test_billion_laughs_fails_fast(parser_kind: str) -> None:
    start = time.perf_counter()
    err = error(_billion_laughs())
    assert time.perf_counter() - start < 2.0
    assert "aliases expand to more than 100000 nodes (alias bomb?)" in str(err)
    assert err.line is not None


def test_alias_limit_is_configurable(parser_kind: str) -> None:
    small = _billion_laughs(3)  # 9 + 9*10 + 9*100 ... well under the default
    assert load(small)
    assert "alias bomb" in str(error(small, Limits(max_alias_nodes=50)))


def test_recursive_and_undefined_aliases(parser_kind: str) -> None:
    assert "a[0]: recursive alias *a" in str(error("a: &a [*a]\n"))
    assert "recursive alias *m" in str(error("m: &m {self: *m}\n"))
    assert "a: undefined alias *nope" in str(error("a: *nope\n"))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 10000 + "]" * 10000,
        "{a: " * 10000 + "1" + "}" * 10000,
        "- " * 10000 + "x\n",
        "".join(f"{'  ' * i}k{i}:\n" for i in range(2000)) + "  " * 2000 + "x\n",
    ],
    ids=["flow-lists", "flow-maps", "block-lists", "block-maps"],
)
def test_deep_nesting_fails_fast(parser_kind: str, text: str) -> None:
    start = time.perf_counter()
    err = error(text)
    assert time.perf_counter() - start < 2.0
    assert "nesting" in str(err)


def test_depth_limit_boundary(parser_kind: str) -> None:
    ok = "[" * 64 + "]" * 64
    assert load(ok)
    assert "nesting deeper than 64 levels" in str(error("[" * 65 + "]" * 65))
    assert load("[[1]]", Limits(max_depth=2)) == [[[1]]]
    assert "nesting deeper than 2 levels" in str(error("[[[1]]]", Limits(max_depth=2)))


def test_depth_through_aliases(parser_kind: str) -> None:
    text = "a: &deep [[[1]]]\nb: [[*deep]]\n"
    assert load(text, Limits(max_depth=6))
    assert "through alias *deep" in str(error(text, Limits(max_depth=5)))


def test_too_many_documents(parser_kind: str) -> None:
    assert len(load("---\na: 1\n" * 100)) == 100
    err = error("---\na: 1\n" * 101)
    assert "more than 100 documents" in str(err)
    assert "more than 3 documents" in str(error("---\na: 1\n" * 4, Limits(max_documents=3)))


def test_size_limit() -> None:
    big = "a: " + "x" * 100
    assert load(big, Limits(max_bytes=200))
    assert str(error(big, Limits(max_bytes=50))) == "wf.yaml: file is too large (103 bytes; the limit is 50)"
    assert "too large" in str(error(big.encode(), Limits(max_bytes=50)))
    assert "too large (5 bytes" in str(error("a: é", Limits(max_bytes=4)))  # UTF-8 bytes, not chars
    start = time.perf_counter()
    assert "too large" in str(error(b"a" * (9 * 1024 * 1024)))
    assert time.perf_counter() - start < 1.0


def test_invalid_utf8() -> None:
    err = error(b"a: 1\nb: \xff\xfe\n")
    assert str(err) == "wf.yaml:2:4: invalid UTF-8 (byte 0xff)"
    assert "unpaired surrogate" in str(error("a: \udc80"))


def test_control_characters(parser_kind: str) -> None:
    err = error("a: 1\nb: \x00\n")
    assert "invalid character #x0000" in str(err)
    assert err.line == 2


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("a: [1, 2\n", 2, "flow sequence"),
        ("a: b: c\n", 1, "mapping values are not allowed"),
        ("a: 1\n\tb: 2\n", 2, ""),
        ("a: 'unterminated\n", 2, "quoted scalar"),
        ("key: value\n  bad indent: x\n", 2, ""),
    ],
)
def test_syntax_errors_have_line_and_column(parser_kind: str, text: str, line: int, fragment: str) -> None:
    err = error(text)
    assert err.pos is not None
    assert err.pos.line == line
    assert err.pos.column is not None
    assert str(err).startswith(f"wf.yaml:{line}:{err.pos.column}: ")
    assert fragment in str(err)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{},&*!|>'\"#\n\t ~?<")), max_size=40))
def test_arbitrary_text_never_raises_anything_else(text: str) -> None:
    try:
        docs = load_documents(text, "fuzz.yaml")
    except InputError as e:
        assert str(e).startswith("fuzz.yaml")
    else:
        for d in docs:
            json.dumps(d.data)  # plain data only


# --------------------------------------------------------------------------------------------
# positions


def test_positions(parser_kind: str) -> None:
    text = (
        "apiVersion: v1\n"
        "spec:\n"
        "  templates:\n"
        "    - name: a\n"
        "      children: [x, y]\n"
        "    - name: b\n"
        "      children:\n"
        "        - p\n"
        "        - q\n"
    )
    (doc,) = load_documents(text, "wf.yaml")
    assert doc.position(()) == SourcePos(1, 1)
    assert doc.position(("spec",)) == SourcePos(2, 1)
    assert doc.position(("spec", "templates", 0, "name")) == SourcePos(4, 7)
    assert doc.position(("spec", "templates", 0, "children", 1)) == SourcePos(5, 21)
    assert doc.line_of(("spec", "templates", 1, "children", 1)) == 9
    assert doc.line_of(("spec", "templates", -1)) == 6
    # missing paths fall back to the nearest existing ancestor
    assert doc.line_of(("spec", "templates", 1, "nope", 3)) == 6
    assert doc.line_of(("spec", "templates", 7)) == 3
    issue = doc.issue(("spec", "templates", 1, "children", 1), 'unknown template "q"')
    assert str(issue) == 'wf.yaml:9: spec.templates[1].children[1]: unknown template "q"'
    assert str(doc.error(("spec",), "bad")) == "wf.yaml:2:1: spec: bad"


def test_positions_second_document_and_disabled() -> None:
    docs = load_documents("a: 1\n---\nb:\n  c: 2\n", "wf.yaml")
    assert docs[1].line_of(("b", "c")) == 4
    (nopos,) = load_documents("a: 1\n", "wf.yaml", positions=False)
    assert nopos.position(("a",)) is None
    assert nopos.issue(("a",), "m").line is None


# --------------------------------------------------------------------------------------------
# dumping


def test_dump_block_scalars_and_order() -> None:
    out = dump_yaml({"z": 1, "script": "echo a\necho b\n", "a": ["x", {"k": "v"}]})
    assert out == "z: 1\nscript: |\n  echo a\n  echo b\na:\n- x\n- k: v\n"


def test_dump_quotes_ambiguous_strings_and_roundtrips() -> None:
    data = {
        "s": ["yes", "on", "1e5", "2026-01-01", "1:30", "123", "null", "", "=", "~", "0644"],
        "n": [1, 1.5, 1e20, None, True],
        "long": "x" * 500,
        "nested": {"a": [[1, 2], {"b": "multi\nline"}]},
        "tuple": (1, 2),
    }
    out = dump_yaml(data)
    expected = dict(data, tuple=[1, 2])
    assert load(out) == [expected]
    assert yaml.safe_load(out) == expected  # other YAML 1.1 readers agree
    assert "\n" not in out.split("long: ")[1].split("\n")[0][:-1]  # no line folding


def test_dump_no_aliases_and_str_subclasses() -> None:
    from enum import Enum

    class Phase(str, Enum):  # noqa: UP042 - the pre-3.11 idiom many models still use
        RUNNING = "Running"

    shared = {"k": 1}
    out = dump_yaml({"a": shared, "b": shared, "p": Phase.RUNNING})
    assert "&" not in out and "*" not in out
    assert load(out) == [{"a": {"k": 1}, "b": {"k": 1}, "p": "Running"}]


def test_dump_all() -> None:
    out = dump_yaml_all([{"a": 1}, {"b": 2}])
    assert out == "---\na: 1\n---\nb: 2\n"
    assert load(out) == [{"a": 1}, {"b": 2}]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(_json_values)
def test_dump_load_roundtrip(value: Any) -> None:
    assert load(dump_yaml({"v": value})) == [{"v": value}]
    assert load(json.dumps({"v": value})) == [{"v": value}]
    raw_json = json.dumps({"v": value}, ensure_ascii=False)
    if not any(c in raw_json for c in "\x85\u2028\u2029"):  # YAML 1.1 reads raw NEL/LS/PS as breaks
        assert load(raw_json) == [{"v": value}]


def test_dump_special_floats() -> None:
    assert load(dump_yaml({"a": float("inf"), "b": float("-inf")})) == [
        {"a": float("inf"), "b": float("-inf")}
    ]
