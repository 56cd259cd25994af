"""Kubernetes label and field selectors: parsing (string and ``LabelSelector`` dict forms) and matching.

Label selector strings follow ``k8s.io/apimachinery/pkg/labels.Parse``: comma-separated
requirements ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists),
``!k`` (does not exist), ``k>1``/``k<1`` (integer comparison). ``!=`` and ``notin`` match objects
that lack the label, as in Kubernetes. Field selectors are ``path=value``, ``path==value`` and
``path!=value`` over any dotted path (``metadata.name``, ``status.phase``, ``spec.nodeName``); a
missing field compares as the empty string. Parse errors raise :class:`BadRequestError` (HTTP 400).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from actors.sim.errors import BadRequestError
from actors.sim.util import get_path

__all__ = [
    "FieldSelector",
    "LabelSelector",
    "compile_field_selector",
    "compile_label_selector",
    "validate_label_key",
    "validate_label_value",
]

_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_label_key(key: str) -> str | None:
    """Error text if ``key`` is not a qualified name (``[prefix/]name``), else None."""
    if not key:
        return "name part must be non-empty"
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character"
        )
    return None


def validate_label_value(value: str) -> str | None:
    """Error text if ``value`` is not a valid label value, else None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        )
    return None


# Requirement operators (internal names); ``=``/``==`` compile to _IN and ``!=`` to _NOTIN.
_IN, _NOTIN, _EXISTS, _NOTEXISTS, _GT, _LT = range(6)


class LabelSelector:
    """A compiled label selector. ``matches(labels)`` is the hot path."""

    __slots__ = ("_reqs", "empty", "text")

    def __init__(self, reqs: tuple[tuple[str, int, frozenset[str]], ...], text: str) -> None:
        self._reqs = reqs
        self.empty = not reqs
        self.text = text

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if not self._reqs:
            return True
        if labels is None:
            labels = {}
        for key, op, values in self._reqs:
            if op == _IN:
                v = labels.get(key)
                if v is None or v not in values:
                    return False
            elif op == _NOTIN:
                v = labels.get(key)
                if v is not None and v in values:
                    return False
            elif op == _EXISTS:
                if key not in labels:
                    return False
            elif op == _NOTEXISTS:
                if key in labels:
                    return False
            else:
                v = labels.get(key)
                if v is None:
                    return False
                try:
                    iv = int(v)
                except ValueError:
                    return False
                bound = int(next(iter(values)))
                if (op == _GT and not iv > bound) or (op == _LT and not iv < bound):
                    return False
        return True

    def __repr__(self) -> str:
        return f"LabelSelector({self.text!r})"


_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise BadRequestError(f"unable to parse requirement: unexpected input at {text[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _check_key(key: str) -> None:
    err = validate_label_key(key)
    if err is not None:
        raise BadRequestError(f'unable to parse requirement: invalid label key "{key}": {err}')


def _check_value(value: str) -> None:
    err = validate_label_value(value)
    if err is not None:
        raise BadRequestError(f'unable to parse requirement: invalid label value: "{value}": {err}')


@lru_cache(maxsize=4096)
def _parse_label_string(text: str) -> LabelSelector:
    tokens = _tokenize(text)
    reqs: list[tuple[str, int, frozenset[str]]] = []
    i = 0
    n = len(tokens)

    def word(at: int) -> str:
        if at >= n or tokens[at] in ("!=", "==", "=", "!", "(", ")", ",", ">", "<"):
            found = tokens[at] if at < n else "end of string"
            raise BadRequestError(f"unable to parse requirement: expected identifier, found {found!r}")
        return tokens[at]

    while i < n:
        if tokens[i] == "!":
            key = word(i + 1)
            _check_key(key)
            reqs.append((key, _NOTEXISTS, frozenset()))
            i += 2
        else:
            key = word(i)
            _check_key(key)
            i += 1
            op = tokens[i] if i < n else ","
            if op == ",":
                reqs.append((key, _EXISTS, frozenset()))
            elif op in ("=", "==", "!="):
                value = ""
                if i + 1 < n and tokens[i + 1] not in (",", "(", ")", "!", "=", "==", "!="):
                    value = tokens[i + 1]
                    i += 1
                _check_value(value)
                reqs.append((key, _NOTIN if op == "!=" else _IN, frozenset((value,))))
                i += 1
            elif op in (">", "<"):
                value = word(i + 1)
                try:
                    int(value)
                except ValueError:
                    raise BadRequestError(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                        f"an integer, got {value!r}"
                    ) from None
                reqs.append((key, _GT if op == ">" else _LT, frozenset((value,))))
                i += 2
            elif op in ("in", "notin"):
                if i + 1 >= n or tokens[i + 1] != "(":
                    raise BadRequestError(f"unable to parse requirement: expected '(' after {op!r}")
                i += 2
                values: list[str] = []
                expect_value = True
                while True:
                    if i >= n:
                        raise BadRequestError("unable to parse requirement: missing ')'")
                    tok = tokens[i]
                    if tok == ")":
                        if expect_value and values:
                            values.append("")
                        i += 1
                        break
                    if tok == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                    else:
                        if not expect_value:
                            raise BadRequestError(f"unable to parse requirement: unexpected {tok!r}")
                        _check_value(tok)
                        values.append(tok)
                        expect_value = False
                    i += 1
                if not values:
                    raise BadRequestError(
                        "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
                    )
                reqs.append((key, _IN if op == "in" else _NOTIN, frozenset(values)))
            else:
                raise BadRequestError(f"unable to parse requirement: found {op!r}, expected an operator")
        if i < n:
            if tokens[i] != ",":
                raise BadRequestError(f"unable to parse requirement: found {tokens[i]!r}, expected ','")
            i += 1
            if i >= n:
                raise BadRequestError("unable to parse requirement: found end of string, expected identifier")
    return LabelSelector(tuple(reqs), text)


_EXPR_OPS = {"In": _IN, "NotIn": _NOTIN, "Exists": _EXISTS, "DoesNotExist": _NOTEXISTS}


def _selector_from_dict(sel: Mapping[str, Any]) -> LabelSelector:
    reqs: list[tuple[str, int, frozenset[str]]] = []
    parts: list[str] = []
    for key in sorted((sel.get("matchLabels") or {}).keys()):
        value = str(sel["matchLabels"][key])
        _check_key(key)
        _check_value(value)
        reqs.append((key, _IN, frozenset((value,))))
        parts.append(f"{key}={value}")
    for expr in sel.get("matchExpressions") or ():
        key = str(expr.get("key", ""))
        op_name = str(expr.get("operator", ""))
        values = [str(v) for v in (expr.get("values") or ())]
        _check_key(key)
        op = _EXPR_OPS.get(op_name)
        if op is None:
            raise BadRequestError(f'"{op_name}" is not a valid label selector operator')
        if op in (_IN, _NOTIN) and not values:
            raise BadRequestError(f"values: Required value: must be specified when `operator` is '{op_name}'")
        if op in (_EXISTS, _NOTEXISTS) and values:
            raise BadRequestError(f"values: Forbidden: may not be specified when `operator` is '{op_name}'")
        for v in values:
            _check_value(v)
        reqs.append((key, op, frozenset(values)))
        if op == _IN:
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == _NOTIN:
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == _EXISTS:
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return LabelSelector(tuple(reqs), ",".join(parts))


_EVERYTHING = LabelSelector((), "")


def compile_label_selector(sel: str | Mapping[str, Any] | LabelSelector | None) -> LabelSelector:
    """Compile a selector given as a string, a ``{matchLabels, matchExpressions}`` dict, or None (all).

    A dict without ``matchLabels``/``matchExpressions`` keys is taken as plain ``matchLabels``.
    """
    if sel is None:
        return _EVERYTHING
    if isinstance(sel, LabelSelector):
        return sel
    if isinstance(sel, str):
        return _parse_label_string(sel.strip())
    if isinstance(sel, Mapping):
        if sel and not ({"matchLabels", "matchExpressions"} & set(sel.keys())):
            sel = {"matchLabels": sel}
        return _selector_from_dict(sel)
    raise BadRequestError(f"invalid label selector {sel!r}")


class FieldSelector:
    """A compiled field selector over dotted paths."""

    __slots__ = ("_reqs", "empty", "text")

    def __init__(self, reqs: tuple[tuple[str, bool, str], ...], text: str) -> None:
        self._reqs = reqs
        self.empty = not reqs
        self.text = text

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for path, equal, value in self._reqs:
            v = get_path(obj, path)
            if v is None:
                s = ""
            elif v is True:
                s = "true"
            elif v is False:
                s = "false"
            else:
                s = v if type(v) is str else str(v)
            if (s == value) != equal:
                return False
        return True

    def __repr__(self) -> str:
        return f"FieldSelector({self.text!r})"


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


@lru_cache(maxsize=1024)
def _parse_field_string(text: str) -> FieldSelector:
    reqs: list[tuple[str, bool, str]] = []
    if text.strip():
        for raw in _split_unescaped(text, ","):
            part = raw.strip()
            m = re.match(r"^([^=!\s]+)\s*(!=|==|=)\s*(.*)$", part)
            if m is None:
                raise BadRequestError(f"invalid selector: '{text}'; can't understand '{part}'")
            reqs.append((m.group(1), m.group(2) != "!=", _unescape(m.group(3).strip())))
    return FieldSelector(tuple(reqs), text)


_ALL_FIELDS = FieldSelector((), "")


def compile_field_selector(sel: str | FieldSelector | None) -> FieldSelector:
    if sel is None:
        return _ALL_FIELDS
    if isinstance(sel, FieldSelector):
        return sel
    if isinstance(sel, str):
        return _parse_field_string(sel)
    raise BadRequestError(f"invalid field selector {sel!r}")
