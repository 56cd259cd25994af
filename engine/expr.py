"""CEL expressions and ``{{ expr }}`` templates.

CEL (the language of Kubernetes validation rules) is chaosflow's only expression language; user
text is never evaluated as Python. Evaluation uses the Rust-backed ``cel`` package
(common-expression-language).

Chaos Mesh compatibility
------------------------
Chaos Mesh writes Task branch conditions in antonmedv/expr syntax. Before compiling, a small
tokenizer rewrites the expr-only spellings into CEL (only outside string literals), so those
conditions work unchanged:

=========================================  ==========================================
expr                                       CEL
=========================================  ==========================================
``a and b``, ``a or b``, ``not a``         ``a && b``, ``a || b``, ``!a``
``a contains b``                           ``a.contains(b)``
``a matches "re"``                         ``a.matches("re")`` (RE2 in both)
``a startsWith b``, ``a endsWith b``       ``a.startsWith(b)``, ``a.endsWith(b)``
``a not contains b`` (also ``not matches``,  ``!a.contains(b)`` / ``!(a in b)``
``not startsWith``, ``not endsWith``,
``not in``)
``len(x)``                                 ``size(x)``
``nil``                                    ``null``
```` `raw` ````                            ``r"raw"``
=========================================  ==========================================

The infix operators bind like comparisons in expr: their operands extend over ``.``, calls,
indexing and arithmetic, and stop at ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``&&``,
``||``, ``?``, ``:``, ``,``, a unary ``!`` on the left, and unbalanced brackets; so
``stdout contains "x" && exitCode == 0`` is ``stdout.contains("x") && exitCode == 0``. Everything
else must already be CEL (CEL never converts between int, uint, double and string implicitly:
``exitCode == 0`` with an int ``exitCode`` is fine, ``1 + 2.5`` is an error). Other expr features
(``??``, ``..`` ranges, ``**``, pipes, closures with ``#``) are not supported.

Functions
---------
:class:`FunctionSet` binds chaosflow's functions to a run's seeded :class:`random.Random` and
clock, so a seed reproduces every value: ``rand()`` (double in [0, 1)), ``randInt(a, b)`` (int in
[a, b]), ``pick(list)``, ``shuffle(list)`` (a new list), ``uuid()`` (RFC 4122 version 4, drawn
from the rng) and ``now()`` (a CEL ``timestamp`` from the run's clock, so ``now() - duration("1h")``
and ``string(now())`` work). CEL's own ``duration("1m30s")`` and ``timestamp("...")`` cover the
rest. :meth:`FunctionSet.register` adds more (e.g. the engine's ``lookup(kind, selector)``).

Templates
---------
:func:`render_string` substitutes ``{{ expr }}`` placeholders. A string that is exactly one
placeholder (no surrounding text, not even spaces) yields the typed value; otherwise each value is
stringified into the text: strings as-is, ``true``/``false``, ``null``, numbers in plain form
(``2.0`` -> ``2``), timestamps as RFC 3339, durations Go-style (``1m30s``), lists and maps as
compact JSON. Typed results are converted to the JSON data model too (timestamps -> RFC 3339
strings, durations -> Go duration strings, bytes -> text). A literal ``{{`` is written
``{{ "{{" }}``. Strings without ``{{`` are returned as they are, without any work.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
import re
import threading
import uuid as _uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NoReturn

import cel

from engine.clock import Clock, RealClock, rfc3339
from engine.duration import format_duration_ns
from engine.errors import ChaosflowError

__all__ = [
    "Expr",
    "ExprError",
    "FunctionSet",
    "check_syntax",
    "render_string",
    "render_value",
    "stringify",
    "to_json_value",
    "translate",
]

_CACHE_SIZE = 4096


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


class ExprError(ChaosflowError, ValueError):
    """An expression that does not compile or fails to evaluate (never a Python traceback).

    ``expression`` is the user's text and ``reason`` the underlying cause, both already in
    ``str(err)``.
    """

    def __init__(self, message: str, *, expression: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.reason = reason if reason is not None else message

    def __reduce__(self) -> Any:
        return (_rebuild_expr_error, (self.message, self.expression, self.reason))


def _rebuild_expr_error(message: str, expression: str | None, reason: str | None) -> ExprError:
    return ExprError(message, expression=expression, reason=reason)


# ============================================================================================
# expr -> CEL translation


_STRING = (
    # raw strings: no escapes at all
    r"(?:[rR][bB]?|[bB][rR])(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"[^\"\n\r]*\"|'[^'\n\r]*')"
    # ordinary strings and bytes
    r"|[bB]?(?:\"\"\"(?:\\[\s\S]|[^\\])*?\"\"\"|'''(?:\\[\s\S]|[^\\])*?'''"
    r"|\"(?:\\.|[^\\\"\n\r])*\"|'(?:\\.|[^\\'\n\r])*')"
)
_TOKEN_RE = re.compile(
    r"(?P<ws>\s+|//[^\n]*)"
    rf"|(?P<str>{_STRING})"
    r"|(?P<bt>`[^`]*`)"
    r"|(?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|\?\?|[-+*/%!<>?:.,()\[\]{}])"
    r"|(?P<other>[\s\S])"
)

WS, STR, BT, NUM, IDENT, OP, OTHER, INFIX = "ws", "str", "bt", "num", "ident", "op", "other", "infix"

_INFIX_METHODS = frozenset({"contains", "matches", "startsWith", "endsWith"})
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")": "(", "]": "[", "}": "{"}
# tokens that end an infix operand (precedence of comparisons or lower)
_BOUNDARY_OPS = frozenset({"&&", "||", "==", "!=", "<", "<=", ">", ">=", "?", ":", ",", "??"})
_BEGINS_OPERAND_OPS = frozenset({"(", "[", "{", "!", "-"})


@dataclass
class _Tok:
    kind: str
    text: str
    neg: bool = False  # for INFIX: "not contains", "not in", ...


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    n = len(src)
    match = _TOKEN_RE.match
    while pos < n:
        m = match(src, pos)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup or OTHER
        toks.append(_Tok(kind, m.group()))
        pos = m.end()
    return toks


def _ends_operand(t: _Tok) -> bool:
    if t.kind in (STR, BT, NUM):
        return True
    if t.kind == IDENT:
        return t.text != "in"
    return t.kind == OP and t.text in _CLOSE


def _begins_operand(t: _Tok) -> bool:
    if t.kind in (STR, BT, NUM):
        return True
    if t.kind == IDENT:
        return t.text != "in"
    return t.kind == OP and t.text in _BEGINS_OPERAND_OPS


def _backtick_to_cel(text: str) -> str:
    body = text[1:-1]
    for delim in ('"', "'"):
        if delim not in body and "\n" not in body and "\r" not in body:
            return f"r{delim}{body}{delim}"
    for delim in ('"""', "'''"):
        if delim not in body and not body.endswith(delim[0]):
            return f"r{delim}{body}{delim}"
    raise ExprError(
        f"cannot translate raw string {text}: use a CEL string literal", expression=text, reason="raw string"
    )


def _is_boundary(t: _Tok) -> bool:
    if t.kind == INFIX:
        return True
    if t.kind == IDENT:
        return t.text == "in"
    return t.kind == OP and t.text in _BOUNDARY_OPS


def _left_start(toks: list[_Tok], k: int) -> int:
    j = k - 1
    while j >= 0:
        t = toks[j]
        if t.kind == WS:
            j -= 1
            continue
        if t.kind == OP and t.text in _CLOSE:
            depth = 0
            while j >= 0:
                tt = toks[j]
                if tt.kind == OP and tt.text in _CLOSE:
                    depth += 1
                elif tt.kind == OP and tt.text in _OPEN:
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            if j < 0:
                return 0
            j -= 1
            continue
        if (t.kind == OP and (t.text in _OPEN or t.text == "!")) or _is_boundary(t):
            break
        j -= 1
    j += 1
    while j < k and toks[j].kind == WS:
        j += 1
    return j


def _right_end(toks: list[_Tok], k: int) -> int:
    """Exclusive end of the right operand of the infix operator at ``k``."""
    n = len(toks)
    j = k + 1
    last = k  # last significant token of the operand
    while j < n:
        t = toks[j]
        if t.kind == WS:
            j += 1
            continue
        if t.kind == OP and t.text in _OPEN:
            depth = 0
            while j < n:
                tt = toks[j]
                if tt.kind == OP and tt.text in _OPEN:
                    depth += 1
                elif tt.kind == OP and tt.text in _CLOSE:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                return n
            last = j
            j += 1
            continue
        if (t.kind == OP and t.text in _CLOSE) or _is_boundary(t):
            break
        last = j
        j += 1
    return last + 1


def _needs_parens(toks: list[_Tok]) -> bool:
    depth = 0
    for t in toks:
        if t.kind == OP:
            if t.text in _OPEN:
                depth += 1
            elif t.text in _CLOSE:
                depth -= 1
            elif depth == 0 and t.text != ".":
                return True
    return False


def _prev_sig(toks: list[_Tok], i: int) -> _Tok | None:
    i -= 1
    while i >= 0:
        if toks[i].kind != WS:
            return toks[i]
        i -= 1
    return None


def _next_sig_index(toks: list[_Tok], i: int) -> int:
    i += 1
    while i < len(toks) and toks[i].kind == WS:
        i += 1
    return i


def translate(src: str) -> str:
    """Rewrite the supported antonmedv/expr spellings into CEL (see the module docstring).

    Text that needs no rewriting is returned unchanged (so CEL error columns stay exact).
    """
    if not any(
        w in src
        for w in ("and", "or", "not", "contains", "matches", "startsWith", "endsWith", "len", "nil", "`")
    ):
        return src
    toks = _tokenize(src)
    changed = False
    # pass 1: keywords
    for i, t in enumerate(toks):
        if t.kind == BT:
            t.kind, t.text = STR, _backtick_to_cel(t.text)
            changed = True
            continue
        if t.kind != IDENT or t.text not in {"and", "or", "not", "len", "nil", *_INFIX_METHODS}:
            continue
        prev = _prev_sig(toks, i)
        if prev is not None and prev.kind == OP and prev.text == ".":
            continue  # a field or method name
        after_operand = prev is not None and _ends_operand(prev)
        ni = _next_sig_index(toks, i)
        nxt = toks[ni] if ni < len(toks) else None
        if t.text in ("and", "or") and after_operand:
            t.kind, t.text = OP, "&&" if t.text == "and" else "||"
            changed = True
        elif t.text == "not":
            if (
                after_operand
                and nxt is not None
                and nxt.kind == IDENT
                and (nxt.text in _INFIX_METHODS or nxt.text == "in")
            ):
                t.kind, t.text = WS, ""
                nxt.kind, nxt.neg = INFIX, True
                changed = True
            elif not after_operand and nxt is not None and _begins_operand(nxt):
                t.kind, t.text = OP, "!"
                for w in toks[i + 1 : ni]:
                    w.text = ""
                changed = True
        elif t.text in _INFIX_METHODS and after_operand:
            t.kind = INFIX
            changed = True
        elif t.text == "len" and nxt is not None and nxt.kind == OP and nxt.text == "(":
            t.text = "size"
            changed = True
        elif t.text == "nil":
            t.text = "null"
            changed = True
    if not changed:
        return src
    # pass 2: infix operators -> method calls, left to right (left-associative)
    while True:
        k = next((i for i, t in enumerate(toks) if t.kind == INFIX), -1)
        if k < 0:
            break
        op = toks[k]
        ls = _left_start(toks, k)
        re_ = _right_end(toks, k)
        left = toks[ls:k]
        while left and left[-1].kind == WS:
            left.pop()
        right = toks[k + 1 : re_]
        while right and right[0].kind == WS:
            right.pop(0)
        if not right:
            raise ExprError(
                f"invalid expression {_q(src)}: missing right operand of {op.text!r}",
                expression=src,
                reason=f"missing right operand of {op.text!r}",
            )
        if op.text == "in":
            new = [_Tok(OP, "!("), *left, _Tok(WS, " "), _Tok(IDENT, "in"), _Tok(WS, " "), *right]
            new.append(_Tok(OP, ")"))
        else:
            lhs = [_Tok(OP, "("), *left, _Tok(OP, ")")] if _needs_parens(left) else left
            new = [_Tok(OP, "!")] if op.neg else []
            new += [*lhs, _Tok(OP, "."), _Tok(IDENT, op.text), _Tok(OP, "("), *right, _Tok(OP, ")")]
        toks[ls:re_] = new
    return "".join(t.text for t in toks)


# ============================================================================================
# compilation


@dataclass(frozen=True)
class _Compiled:
    source: str
    cel_source: str
    program: Any  # cel.Program
    variables: tuple[str, ...]
    functions: tuple[str, ...]


_COMPILE_ERROR_RE = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")


def _compile_reason(exc: BaseException) -> str:
    msg = str(exc)
    found = _COMPILE_ERROR_RE.findall(msg)
    if found:
        parts: list[str] = []
        for line, col, raw in found:
            text = raw.strip()
            if text.startswith("Syntax error: "):
                text = "syntax error: " + text[len("Syntax error: ") :]
            parts.append(f"{line}:{col}: {text}")
        return "; ".join(parts)
    msg = re.sub(r"^Failed to parse expression '.*?': ", "", msg, flags=re.S)
    return msg.strip() or type(exc).__name__


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(source: str) -> _Compiled:
    if not isinstance(source, str):
        raise ExprError(f"expression must be a string, got {type(source).__name__}", reason="not a string")
    if not source.strip():
        raise ExprError("empty expression", expression=source, reason="empty expression")
    cel_source = translate(source)
    try:
        program = cel.compile(cel_source)
    except BaseException as e:  # ValueError, or pyo3's PanicException (a BaseException)
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        reason = _compile_reason(e)
        if cel_source != source:
            reason += f" (in the CEL translation {_q(cel_source)})"
        raise ExprError(
            f"invalid expression {_q(source)}: {reason}", expression=source, reason=reason
        ) from None
    try:
        variables = tuple(program.variables())
        functions = tuple(f for f in program.functions() if not f.startswith("_") and "@" not in f)
    except Exception:  # pragma: no cover - static analysis is best effort
        variables, functions = (), ()
    return _Compiled(source, cel_source, program, variables, functions)


def check_syntax(src: str) -> str | None:
    """None if ``src`` compiles, else the error message (for validation before a run)."""
    try:
        _compile(src)
    except ExprError as e:
        return str(e)
    return None


# ============================================================================================
# evaluation context


class _FunctionFailed(Exception):
    """Raised by chaosflow's own functions; its message is shown to the user as-is."""


_FAIL = object()  # returned by a wrapped function that raised: CEL cannot convert it -> error
_EMPTY: Mapping[str, Any] = {}


class _Evaluator:
    """One ``cel.Context`` reused across evaluations.

    Variables are supplied through a resolver that reads the current env, so only the variables
    an expression references are converted (a big env costs nothing) and no Context is built per
    call. A ``null`` variable (the resolver cannot return None) and nested evaluation (from inside
    a function) take a slower path with a fresh Context.
    """

    def __init__(self) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}
        self._ctx = cel.Context()
        self._ctx.set_variable_resolver(self._resolve)
        self._env: Mapping[str, Any] = _EMPTY
        self._lock = threading.RLock()
        self._depth = 0
        self._pending: tuple[str, BaseException] | None = None

    def _resolve(self, name: str) -> Any:
        try:
            return self._env.get(name)
        except Exception:
            return None

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception as e:
                self._pending = (name, e)
                return _FAIL

        with self._lock:
            self._functions[name] = call
            self._ctx.add_function(name, call)

    def run(self, c: _Compiled, env: Mapping[str, Any]) -> Any:
        with self._lock:
            fast = not self._depth
            if fast:
                get = env.get
                for n in c.variables:
                    if get(n, 0) is None:
                        fast = False
                        break
            self._pending = None
            self._depth += 1
            try:
                if fast:
                    self._env = env
                    try:
                        return c.program.execute(self._ctx)
                    finally:
                        self._env = _EMPTY
                ctx = cel.Context({n: env[n] for n in c.variables if n in env}, dict(self._functions))
                return c.program.execute(ctx)
            except Exception as e:
                _raise_eval_error(c, e, env, self._pending)
            except BaseException as e:  # a Rust panic surfaces as pyo3's PanicException
                if type(e).__name__ != "PanicException":
                    raise
                _raise_eval_error(c, RuntimeError(f"internal CEL error: {e}"), env, None)
            finally:
                self._depth -= 1


def _first_sentence(msg: str) -> str:
    m = re.match(r"(.*?[.!])(\s|$)", msg, re.S)
    return (m.group(1) if m else msg).strip()


def _raise_eval_error(
    c: _Compiled, exc: BaseException, env: Mapping[str, Any], pending: tuple[str, BaseException] | None
) -> NoReturn:
    msg = str(exc)
    if pending is not None and f"Function '{pending[0]}'" in msg:
        name, err = pending
        if isinstance(err, (_FunctionFailed, ExprError)):
            reason = f"{name}(): {err}"
        else:
            reason = f"{name}() failed: {type(err).__name__}: {err}"
    elif isinstance(exc, RuntimeError) and msg.startswith("Undefined variable or function:"):
        m = re.search(r"'([^']*)'", msg)
        name = m.group(1) if m else "?"
        known = sorted(k for k in env if isinstance(k, str))
        if name in env:
            reason = f"variable {name!r} holds a value CEL cannot represent ({type(env[name]).__name__})"
        elif name in c.functions:
            reason = f"unknown function {name}()"
        else:
            reason = f"undefined variable {name!r}"
            if known:
                more = ", ..." if len(known) > 20 else ""
                reason += f" (variables: {', '.join(known[:20])}{more})"
    elif isinstance(exc, KeyError):
        reason = f"no such key: {msg}"
    elif "Function '" in msg and "Failed to convert Python result" in msg:
        m = re.search(r"Function '([^']*)'", msg)
        reason = f"{m.group(1) if m else 'function'}() returned a value CEL cannot represent"
    elif m := re.match(r"Function '([^']*)' error: (.*?)(?:\.? Check function arguments.*)?$", msg, re.S):
        detail = " ".join(part.strip() for part in m.group(2).splitlines() if part.strip())
        reason = f"{m.group(1)}(): {detail}"
    elif msg.startswith("Conversion Error"):
        reason = "a variable holds a value CEL cannot represent: " + msg.split(":", 1)[-1].strip()
    elif msg.startswith(("No such overload", "Unsupported operation")):
        reason = (
            _first_sentence(msg).rstrip(".")
            + " (CEL never converts between int, uint, double and string implicitly:"
            " use int(x), double(x) or string(x))"
        )
    else:
        reason = _first_sentence(msg).rstrip(".") or type(exc).__name__
    raise ExprError(f"evaluating {_q(c.source)}: {reason}", expression=c.source, reason=reason) from None


_BARE = _Evaluator()


class _QuietCel(logging.Filter):
    """The ``cel`` package logs a warning for failures we report as :class:`ExprError` anyway."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not msg.startswith(("Variable resolver", "Python function"))


logging.getLogger("cel").addFilter(_QuietCel())


# ============================================================================================
# functions


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    raise _FunctionFailed(f"expects a list, got {_cel_type(value)}")


def _cel_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    if v is None:
        return "null"
    if isinstance(v, datetime):
        return "timestamp"
    if isinstance(v, timedelta):
        return "duration"
    return type(v).__name__


class FunctionSet:
    """chaosflow's CEL functions bound to a run's seeded random source and clock.

    ``rand()``, ``randInt(a, b)``, ``pick(list)``, ``shuffle(list)``, ``uuid()`` draw only from
    ``rng``, so the same seed and the same sequence of calls reproduce the same values; ``now()``
    reads ``clock`` (a :class:`engine.clock.Clock` or a callable returning epoch seconds) and
    returns a CEL timestamp. :meth:`register` adds functions such as ``lookup(kind, selector)``.

    Evaluations through one FunctionSet are serialized (a lock), which also keeps the rng
    sequence deterministic.
    """

    BUILTINS = ("rand", "randInt", "pick", "shuffle", "uuid", "now")

    def __init__(
        self,
        rng: random.Random | None = None,
        clock: Clock | Callable[[], float] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        if rng is None:
            rng = random.Random(seed)
        self.rng = rng
        if clock is None:
            clock = RealClock()
        self._now: Callable[[], float] = clock.now if hasattr(clock, "now") else clock
        self._evaluator = _Evaluator()
        self._names: set[str] = set()
        for name, fn in (
            ("rand", self._rand),
            ("randInt", self._rand_int),
            ("pick", self._pick),
            ("shuffle", self._shuffle),
            ("uuid", self._uuid),
            ("now", self._now_ts),
        ):
            self.register(name, fn)

    # -- registry -------------------------------------------------------------------------

    def register(self, name: str, fn: Callable[..., Any], *, replace: bool = False) -> None:
        """Make ``fn`` callable from CEL as ``name(...)``.

        Arguments arrive as Python values (int, float, str, bool, None, bytes, list, dict,
        datetime, timedelta); the result must be one of those. An exception raised by ``fn``
        becomes an :class:`ExprError` naming the function.
        """
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"invalid function name {name!r}")
        if name in self._names and not replace:
            raise ValueError(f"function {name!r} is already registered (pass replace=True)")
        self._names.add(name)
        self._evaluator.add(name, fn)

    def names(self) -> list[str]:
        return sorted(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    # -- built-ins --------------------------------------------------------------------------

    def _rand(self, *args: Any) -> float:
        _arity(args, 0)
        return self.rng.random()

    def _rand_int(self, *args: Any) -> int:
        _arity(args, 2)
        a, b = args
        for v in (a, b):
            if isinstance(v, bool) or not isinstance(v, int):
                raise _FunctionFailed(f"expects two ints, got {_cel_type(a)} and {_cel_type(b)}")
        if a > b:
            raise _FunctionFailed(f"empty range: {a} > {b}")
        return self.rng.randint(a, b)

    def _pick(self, *args: Any) -> Any:
        _arity(args, 1)
        lst = _as_list(args[0])
        if not lst:
            raise _FunctionFailed("cannot pick from an empty list")
        return lst[self.rng.randrange(len(lst))]

    def _shuffle(self, *args: Any) -> list[Any]:
        _arity(args, 1)
        lst = list(_as_list(args[0]))
        self.rng.shuffle(lst)
        return lst

    def _uuid(self, *args: Any) -> str:
        _arity(args, 0)
        return str(_uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _now_ts(self, *args: Any) -> datetime:
        _arity(args, 0)
        return datetime.fromtimestamp(self._now(), tz=UTC)


def _arity(args: tuple[Any, ...], n: int) -> None:
    if len(args) != n:
        want = {0: "no arguments", 1: "1 argument"}.get(n, f"{n} arguments")
        raise _FunctionFailed(f"takes {want}, got {len(args)}")


# ============================================================================================
# Expr


class Expr:
    """A CEL expression compiled once (programs are cached by source text in an LRU).

    Raises :class:`ExprError` at construction if the text does not compile.
    """

    __slots__ = ("_c",)

    def __init__(self, source: str) -> None:
        self._c = _compile(source)

    @property
    def source(self) -> str:
        return self._c.source

    @property
    def cel_source(self) -> str:
        """The CEL actually compiled (differs from :attr:`source` for expr-style syntax)."""
        return self._c.cel_source

    @property
    def variables(self) -> tuple[str, ...]:
        """Identifiers the expression references (static; includes comprehension variables)."""
        return self._c.variables

    @property
    def functions(self) -> tuple[str, ...]:
        """Named functions and methods the expression calls (static)."""
        return self._c.functions

    def evaluate(self, env: Mapping[str, Any] = _EMPTY, functions: FunctionSet | None = None) -> Any:
        """Evaluate with ``env`` as variables; ``functions`` supplies chaosflow's functions."""
        ev = functions._evaluator if functions is not None else _BARE
        return ev.run(self._c, env)

    def evaluate_bool(self, env: Mapping[str, Any] = _EMPTY, functions: FunctionSet | None = None) -> bool:
        """Like :meth:`evaluate` but the result must be a bool."""
        v = self.evaluate(env, functions)
        if not isinstance(v, bool):
            reason = f"must evaluate to a bool, got {_cel_type(v)} ({_short(v)})"
            raise ExprError(f"evaluating {_q(self.source)}: {reason}", expression=self.source, reason=reason)
        return v

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


def _short(v: Any) -> str:
    s = stringify(v) if not isinstance(v, str) else _q(v)
    return s if len(s) <= 60 else s[:57] + "..."


# ============================================================================================
# templates


def to_json_value(value: Any) -> Any:
    """Convert a CEL result to the JSON data model (timestamps, durations, bytes -> strings)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else stringify(k)): to_json_value(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return _fmt_time(value)
    if isinstance(value, timedelta):
        return format_duration_ns(value // timedelta(microseconds=1) * 1000)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, tuple):
        return [to_json_value(v) for v in value]
    return value


def _fmt_time(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return rfc3339(dt.timestamp()) or ""


def _fmt_float(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    r = repr(x)
    if "e" in r or "E" in r:
        return format(Decimal(r), "f")
    return r


def _json_default(v: Any) -> Any:
    converted = to_json_value(v)
    if converted is v:
        raise TypeError(f"cannot render {type(v).__name__}")
    return converted


def stringify(value: Any) -> str:
    """How a value is written into a template string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _fmt_float(value)
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(
            to_json_value(value), separators=(",", ":"), ensure_ascii=False, default=_json_default
        )
    converted = to_json_value(value)
    return converted if isinstance(converted, str) else str(converted)


@dataclass(frozen=True)
class _Placeholder:
    expr: Expr | None  # None when the expression failed to compile (error raised on render)
    error: ExprError | None
    offset: int


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}" if "\n" in text else f"column {col}"


def _placeholder_end(text: str, start: int) -> int:
    """Index of the ``}}`` closing the placeholder whose body starts at ``start``, or -1."""
    depth = 0
    pos = start
    n = len(text)
    match = _TOKEN_RE.match
    while pos < n:
        m = match(text, pos)
        assert m is not None
        kind = m.lastgroup
        tok = m.group()
        if kind == OP:
            if tok in _OPEN:
                depth += 1
            elif tok in _CLOSE:
                if tok == "}" and depth == 0 and text.startswith("}", pos + 1):
                    return pos
                depth = max(0, depth - 1)
        pos = m.end()
    return -1


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _parse_template(text: str) -> tuple[str | _Placeholder, ...]:
    parts: list[str | _Placeholder] = []
    pos = 0
    while True:
        i = text.find("{{", pos)
        if i < 0:
            if pos < len(text):
                parts.append(text[pos:])
            break
        if i > pos:
            parts.append(text[pos:i])
        end = _placeholder_end(text, i + 2)
        if end < 0:
            raise ExprError(
                f'unclosed "{{{{" at {_where(text, i)} (offset {i}) in {_q(text)}',
                expression=text[i:],
                reason="unclosed placeholder",
            )
        body = text[i + 2 : end].strip()
        if not body:
            raise ExprError(
                f"empty {{{{ }}}} at {_where(text, i)}", expression="", reason="empty placeholder"
            )
        try:
            parts.append(_Placeholder(Expr(body), None, i))
        except ExprError as e:
            err = ExprError(f"{_where(text, i)}: {e}", expression=e.expression, reason=e.reason)
            parts.append(_Placeholder(None, err, i))
        pos = end + 2
    return tuple(parts)


def _eval_placeholder(
    p: _Placeholder, text: str, env: Mapping[str, Any], functions: FunctionSet | None, single: bool
) -> Any:
    if p.expr is None:
        assert p.error is not None
        raise p.error
    try:
        return p.expr.evaluate(env, functions)
    except ExprError as e:
        if single:
            raise
        raise ExprError(f"{_where(text, p.offset)}: {e}", expression=e.expression, reason=e.reason) from None


def render_string(text: str, env: Mapping[str, Any] = _EMPTY, functions: FunctionSet | None = None) -> Any:
    """Substitute ``{{ expr }}`` placeholders (see the module docstring for the rules)."""
    if "{{" not in text:
        return text
    parts = _parse_template(text)
    if len(parts) == 1 and isinstance(parts[0], _Placeholder):
        return to_json_value(_eval_placeholder(parts[0], text, env, functions, True))
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        else:
            out.append(stringify(_eval_placeholder(p, text, env, functions, False)))
    return "".join(out)


def render_value(obj: Any, env: Mapping[str, Any] = _EMPTY, functions: FunctionSet | None = None) -> Any:
    """Render every string inside dicts/lists (mapping keys are left as they are).

    Returns a new structure; the input is never modified.
    """
    if isinstance(obj, str):
        return render_string(obj, env, functions) if "{{" in obj else obj
    if isinstance(obj, dict):
        return {k: render_value(v, env, functions) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [render_value(v, env, functions) for v in obj]
    return obj


def template_expressions(text: str) -> Iterable[str]:
    """The expression texts of a template's placeholders (for validation); raises on bad syntax."""
    if "{{" not in text:
        return ()
    out: list[str] = []
    for p in _parse_template(text):
        if isinstance(p, _Placeholder):
            if p.error is not None:
                raise p.error
            assert p.expr is not None
            out.append(p.expr.source)
    return out
