"""A tiny, safe interpreter for the shell commands of simulated containers.

Nothing is ever executed on the host: a container's ``command`` + ``args`` are *interpreted* to
derive what the simulated container does — its exit code, its output (with the time each piece
appears) and how long it runs. The result is a pure function of the pod spec, so it can be
recomputed at any time (after a snapshot/restore too).

Rules (see also :func:`plan_container`):

* ``argv`` is ``command + args``; with no ``command``, ``args`` alone are taken as the argv (the
  image's entrypoint is unknown). An empty argv (image default) exits 0 at once with no output.
* ``sh``/``bash``/``ash``/``dash`` (any path) with ``-c SCRIPT [NAME [ARGS...]]`` run SCRIPT; flags
  such as ``-e``, ``-x``, ``-u``, ``-o pipefail`` before ``-c`` are honoured or ignored. Other argv
  run as one simple command.
* Scripts: statements separated by ``;``, newlines, ``&`` (run in the foreground), ``&&``,
  ``||``; pipelines ``a | b`` (stdout of the pipeline is the last command's; ``!`` negates);
  ``'single'``/``"double"`` quotes, backslash escapes, ``# comments``, line continuations.
  Redirections: ``>file``/``>>file`` drop stdout, ``2>file`` drops stderr, ``>&2``/``2>&1`` move
  streams (logs contain stdout and stderr, like ``kubectl logs``), ``<`` is ignored.
* Expansion: ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, ``${NAME:+word}``,
  ``${#NAME}``, ``$?``, ``$$``, ``$#``, ``$@``, ``$*``, ``$0``-``$9``; variables come from the
  container's ``env`` (plain ``value`` only), ``NAME=value`` statements and ``export``. Unquoted
  expansions are split on whitespace; no globbing. Command substitution (``$(...)``, backticks) and
  arithmetic (``$((...))``) expand to the empty string.
* Builtins: ``echo [-n] [-e] [-E]``, ``printf FORMAT ARGS...`` (``%s %d %i %u %x %o %c %b %f %%``,
  field widths), ``sleep N[s|m|h|d]...`` (also ``infinity``), ``exit [N]``, ``true``, ``false``,
  ``:``, ``set [-e|+e|-o errexit|-o pipefail|...]`` (errexit follows POSIX: not for commands
  before ``&&``/``||`` or after ``!``), ``export``, ``unset``, ``test``/``[ ]`` (strings, integers,
  ``-z``/``-n``; file tests are false: there is no filesystem), ``cat`` (stdin only),
  ``sh -c`` (nested, as a subshell), ``exec CMD...``, ``cd``/``trap``/``wait``/``ulimit``/...
  (no-ops). Pipeline members run as subshells (``exit`` there ends only that member).
* ``( list )`` runs in a subshell (``exit`` ends only the group); ``{ list; }`` in this shell.
* Anything else — unknown programs (``python``, ``curl``, ``/app/run``...) and compound
  commands (``if``/``for``/``while``/``case``: each part is a separate unknown command) —
  **succeeds at once with no output**.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.sim.util import parse_go_duration

__all__ = [
    "ANNOTATION_DURATION",
    "ANNOTATION_EXIT_CODE",
    "ANNOTATION_STDOUT",
    "ContainerRun",
    "plan_container",
    "run_argv",
    "run_script",
]

log = logging.getLogger(__name__)

ANNOTATION_EXIT_CODE = "sim.chaosflow.io/exit-code"
ANNOTATION_STDOUT = "sim.chaosflow.io/stdout"
ANNOTATION_DURATION = "sim.chaosflow.io/duration"

_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "busybox-sh"})
_NOOPS = frozenset(
    {"cd", "trap", "wait", "ulimit", "umask", "shift", "local", "readonly", "alias", "hash", "type", "sync"}
)
_MAX_OUTPUT = 1 << 20  # bytes of log kept per container run


@dataclass(frozen=True, slots=True)
class ContainerRun:
    """What a simulated container does: exit code, duration (may be ``inf``) and timed output."""

    exit_code: int = 0
    duration: float = 0.0
    #: ``(seconds after start, text)`` in order; logs are the chunks whose offset has passed.
    output: tuple[tuple[float, str], ...] = ()

    @property
    def stdout(self) -> str:
        """The complete output (stdout and stderr interleaved, as in ``kubectl logs``)."""
        return "".join(text for _, text in self.output)

    def output_until(self, elapsed: float) -> str:
        """The output written during the first ``elapsed`` seconds of the run."""
        return "".join(text for t, text in self.output if t <= elapsed + 1e-9)


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


# ------------------------------------------------------------------ tokens

# A word is a list of parts: ("lit", text, quoted) or ("var", name, op, word, quoted).
Part = tuple[Any, ...]


@dataclass(slots=True)
class _Word:
    parts: list[Part] = field(default_factory=list)

    def literal(self) -> str | None:
        """The word's text if it has no expansions."""
        if all(p[0] == "lit" for p in self.parts):
            return "".join(p[1] for p in self.parts)
        return None

    def is_unquoted_literal(self) -> bool:
        return all(p[0] == "lit" and not p[2] for p in self.parts)


@dataclass(slots=True)
class _Redir:
    fd: int
    op: str  # ">", ">>", "<", ">&", "&>"
    target: _Word


@dataclass(slots=True)
class _Command:
    assignments: list[tuple[str, _Word]] = field(default_factory=list)
    words: list[_Word] = field(default_factory=list)
    redirs: list[_Redir] = field(default_factory=list)
    #: ``( list )``: run in a subshell
    group: list[_AndOr] | None = None


@dataclass(slots=True)
class _Pipeline:
    commands: list[_Command]
    negated: bool = False


@dataclass(slots=True)
class _AndOr:
    first: _Pipeline
    rest: list[tuple[str, _Pipeline]] = field(default_factory=list)


_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_SPECIAL_VARS = frozenset("?$#@*!-0123456789")


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.tokens: list[tuple[str, Any]] = []
        self.word: _Word | None = None

    def _lit(self, text: str, quoted: bool) -> None:
        if self.word is None:
            self.word = _Word()
        parts = self.word.parts
        if parts and parts[-1][0] == "lit" and parts[-1][2] == quoted:
            parts[-1] = ("lit", parts[-1][1] + text, quoted)
        else:
            parts.append(("lit", text, quoted))

    def _flush(self) -> None:
        if self.word is not None:
            self.tokens.append(("word", self.word))
            self.word = None

    def _op(self, op: str) -> None:
        self._flush()
        self.tokens.append(("op", op))

    def _skip_balanced(self, open_c: str, close_c: str) -> None:
        depth = 1
        while self.i < len(self.s) and depth:
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == open_c:
                depth += 1
            elif c == close_c:
                depth -= 1
            self.i += 1

    def _dollar(self, quoted: bool) -> None:
        s = self.s
        self.i += 1  # past "$"
        if self.i >= len(s):
            self._lit("$", quoted)
            return
        c = s[self.i]
        if c == "(":
            self.i += 1
            self._skip_balanced("(", ")")  # $(...) and $((...)): unsupported -> ""
            self._add_var("", "subst", "", quoted)
            return
        if c == "{":
            end = s.find("}", self.i)
            if end < 0:
                self._lit("${", quoted)
                self.i += 1
                return
            body = s[self.i + 1 : end]
            self.i = end + 1
            if body.startswith("#") and len(body) > 1:
                self._add_var(body[1:], "len", "", quoted)
                return
            j = 0
            while j < len(body) and (body[j] in _NAME_CHARS or (j == 0 and body[j] in _SPECIAL_VARS)):
                j += 1
                if j == 1 and body[0] in _SPECIAL_VARS and body[0] not in _NAME_CHARS:
                    break
            name, rest = body[:j], body[j:]
            for op in (":-", ":=", ":+", "-", "=", "+"):
                if rest.startswith(op):
                    self._add_var(name, op, rest[len(op) :], quoted)
                    return
            self._add_var(name, "", "", quoted)
            return
        if c in _SPECIAL_VARS:
            self.i += 1
            self._add_var(c, "", "", quoted)
            return
        if c in _NAME_START:
            j = self.i
            while j < len(s) and s[j] in _NAME_CHARS:
                j += 1
            self._add_var(s[self.i : j], "", "", quoted)
            self.i = j
            return
        self._lit("$", quoted)

    def _add_var(self, name: str, op: str, word: str, quoted: bool) -> None:
        if self.word is None:
            self.word = _Word()
        self.word.parts.append(("var", name, op, word, quoted))

    def _redirect(self) -> None:
        s = self.s
        fd = 1
        if self.word is not None:
            lit = self.word.literal()
            if lit is not None and lit.isdigit() and self.word.is_unquoted_literal():
                fd = int(lit)
                self.word = None
        self._flush()
        c = s[self.i]
        if c == "<":
            fd = 0 if fd == 1 else fd
            op = "<"
            self.i += 1
            if self.i < len(s) and s[self.i] in "<>":
                self.i += 1
        else:
            op = ">"
            self.i += 1
            if self.i < len(s) and s[self.i] == ">":
                op = ">>"
                self.i += 1
            elif self.i < len(s) and s[self.i] == "|":
                self.i += 1
        if self.i < len(s) and s[self.i] == "&" and op != "<":
            self.i += 1
            j = self.i
            while j < len(s) and (s[j].isdigit() or s[j] == "-"):
                j += 1
            self.tokens.append(("redir", _Redir(fd, ">&", _Word([("lit", s[self.i : j], False)]))))
            self.i = j
            return
        self.tokens.append(("redir_pending", (fd, op)))

    def lex(self) -> list[tuple[str, Any]]:
        s = self.s
        n = len(s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self._flush()
                self.i += 1
            elif c == "\\":
                if self.i + 1 < n and s[self.i + 1] == "\n":
                    self.i += 2
                elif self.i + 1 < n:
                    self._lit(s[self.i + 1], True)
                    self.i += 2
                else:
                    self.i += 1
            elif c in "\n;":
                self._op(";")
                self.i += 1
                if c == ";" and self.i < n and s[self.i] == ";":
                    self.i += 1
            elif c == "&":
                if s.startswith("&&", self.i):
                    self._op("&&")
                    self.i += 2
                elif s.startswith("&>", self.i):
                    self._flush()
                    self.i += 2
                    if self.i < n and s[self.i] == ">":
                        self.i += 1
                    self.tokens.append(("redir_pending", (-1, ">")))
                else:
                    self._op(";")
                    self.i += 1
            elif c == "|":
                if s.startswith("||", self.i):
                    self._op("||")
                    self.i += 2
                else:
                    self._op("|")
                    self.i += 1
            elif c in "<>":
                self._redirect()
            elif c in "()":
                self._op(c)
                self.i += 1
            elif c in "{}" and self.word is None:
                self._op(";")  # { list; } runs in the current shell: braces are just separators
                self.i += 1
            elif c == "#" and self.word is None:
                while self.i < n and s[self.i] != "\n":
                    self.i += 1
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    end = n
                self._lit(s[self.i + 1 : end], True)
                self.i = end + 1
            elif c == '"':
                self._double_quoted()
            elif c == "$":
                self._dollar(False)
            elif c == "`":
                self.i += 1
                end = s.find("`", self.i)
                self.i = n if end < 0 else end + 1
                self._add_var("", "subst", "", False)
            else:
                self._lit(c, False)
                self.i += 1
        self._flush()
        # attach redirection targets
        out: list[tuple[str, Any]] = []
        k = 0
        while k < len(self.tokens):
            kind, val = self.tokens[k]
            if kind == "redir_pending":
                fd, op = val
                target = _Word()
                if k + 1 < len(self.tokens) and self.tokens[k + 1][0] == "word":
                    target = self.tokens[k + 1][1]
                    k += 1
                out.append(("redir", _Redir(fd, op if fd != -1 else "&>", target)))
            else:
                out.append((kind, val))
            k += 1
        return out

    def _double_quoted(self) -> None:
        s = self.s
        n = len(s)
        self.i += 1
        if self.word is None:
            self.word = _Word()
        self.word.parts.append(("lit", "", True))
        while self.i < n and s[self.i] != '"':
            c = s[self.i]
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in '"\\$`\n':
                if s[self.i + 1] != "\n":
                    self._lit(s[self.i + 1], True)
                self.i += 2
            elif c == "$":
                self._dollar(True)
            elif c == "`":
                self.i += 1
                end = s.find("`", self.i)
                self.i = n if end < 0 else end + 1
                self._add_var("", "subst", "", True)
            else:
                self._lit(c, True)
                self.i += 1
        self.i += 1


def _parse(tokens: list[tuple[str, Any]]) -> list[_AndOr]:
    pos = 0
    n = len(tokens)

    def parse_command() -> _Command:
        nonlocal pos
        cmd = _Command()
        if pos < n and tokens[pos] == ("op", "("):
            pos += 1
            cmd.group = parse_list(")")
            if pos < n and tokens[pos] == ("op", ")"):
                pos += 1
        while pos < n and tokens[pos][0] in ("word", "redir"):
            kind, val = tokens[pos]
            if kind == "redir":
                cmd.redirs.append(val)
            elif cmd.group is not None:
                pass  # words after a subshell group: a syntax error in sh; ignored
            else:
                lit = (
                    val.parts[0][1] if val.parts and val.parts[0][0] == "lit" and not val.parts[0][2] else ""
                )
                eq = lit.find("=")
                if (
                    not cmd.words
                    and eq > 0
                    and all(ch in _NAME_CHARS for ch in lit[:eq])
                    and lit[0] in _NAME_START
                ):
                    first = ("lit", lit[eq + 1 :], False)
                    cmd.assignments.append((lit[:eq], _Word([first, *val.parts[1:]])))
                else:
                    cmd.words.append(val)
            pos += 1
        return cmd

    def parse_pipeline() -> _Pipeline | None:
        nonlocal pos
        negated = False
        while pos < n and tokens[pos][0] == "word" and tokens[pos][1].literal() == "!":
            negated = not negated
            pos += 1
        commands = [parse_command()]
        while pos < n and tokens[pos] == ("op", "|"):
            pos += 1
            while pos < n and tokens[pos] == ("op", ";"):
                pos += 1
            commands.append(parse_command())
        empty = all(not c.words and not c.assignments and not c.redirs and c.group is None for c in commands)
        if empty and not negated:
            return None
        return _Pipeline(commands, negated)

    def parse_list(stop: str | None) -> list[_AndOr]:
        nonlocal pos
        program: list[_AndOr] = []
        while pos < n:
            tok = tokens[pos]
            if stop is not None and tok == ("op", stop):
                break
            if tok[0] == "op" and tok[1] in (";", "&&", "||", "|", ")"):
                pos += 1
                continue
            first = parse_pipeline()
            if first is None:
                pos += 1
                continue
            andor = _AndOr(first)
            while pos < n and tokens[pos][0] == "op" and tokens[pos][1] in ("&&", "||"):
                op = tokens[pos][1]
                pos += 1
                while pos < n and tokens[pos] == ("op", ";"):
                    pos += 1
                nxt = parse_pipeline()
                if nxt is None:
                    break
                andor.rest.append((op, nxt))
            program.append(andor)
        return program

    return parse_list(None)


# ------------------------------------------------------------- execution


@dataclass(slots=True)
class _Result:
    status: int = 0
    out: str = ""
    err: str = ""
    duration: float = 0.0


class _Shell:
    def __init__(self, env: Mapping[str, str], positional: Sequence[str] = ("sh",)) -> None:
        self.env: dict[str, str] = dict(env)
        self.positional = list(positional) or ["sh"]
        self.status = 0
        self.errexit = False
        self.pipefail = False
        self.elapsed = 0.0
        self.chunks: list[tuple[float, str]] = []
        self.size = 0

    def emit(self, text: str) -> None:
        if not text or self.size >= _MAX_OUTPUT:
            return
        text = text[: _MAX_OUTPUT - self.size]
        self.size += len(text)
        if self.chunks and self.chunks[-1][0] == self.elapsed:
            self.chunks[-1] = (self.elapsed, self.chunks[-1][1] + text)
        else:
            self.chunks.append((self.elapsed, text))

    # expansion

    def _var(self, name: str) -> str | None:
        if name == "?":
            return str(self.status)
        if name == "$":
            return "1"
        if name == "#":
            return str(len(self.positional) - 1)
        if name in ("@", "*"):
            return " ".join(self.positional[1:])
        if name in ("!", "-"):
            return ""
        if name.isdigit():
            i = int(name)
            return self.positional[i] if i < len(self.positional) else None
        return self.env.get(name)

    def _expand_part(self, part: Part) -> str:
        _, name, op, word, _quoted = part
        if op == "subst":
            return ""
        value = self._var(name)
        if op == "len":
            return str(len(value or ""))
        if op in (":-", ":="):
            if not value:
                value = word
                if op == ":=":
                    self.env[name] = word
        elif op in ("-", "="):
            if value is None:
                value = word
                if op == "=":
                    self.env[name] = word
        elif op == ":+":
            value = word if value else ""
        elif op == "+":
            value = word if value is not None else ""
        return value or ""

    def expand(self, word: _Word) -> list[str]:
        """Expand one word into fields (unquoted expansions split on whitespace)."""
        fields: list[str] = []
        cur: list[str] = []
        have = False  # a (possibly empty) field is in progress
        for part in word.parts:
            if part[0] == "lit":
                cur.append(part[1])
                have = have or bool(part[1]) or part[2]
                continue
            value = self._expand_part(part)
            if part[4]:  # quoted
                cur.append(value)
                have = True
                continue
            pieces = value.split()
            if not pieces:
                continue
            if value[:1].isspace() and have:
                fields.append("".join(cur))
                cur = []
            for k, piece in enumerate(pieces):
                if k:
                    fields.append("".join(cur))
                    cur = []
                cur.append(piece)
            have = True
            if value[-1:].isspace():
                fields.append("".join(cur))
                cur = []
                have = False
        if have or cur:
            fields.append("".join(cur))
        return fields

    def expand_one(self, word: _Word) -> str:
        return " ".join(self.expand(word))

    # execution

    def run_program(self, program: list[_AndOr]) -> None:
        for andor in program:
            self.run_andor(andor)

    def run_andor(self, andor: _AndOr) -> None:
        status = self.run_pipeline(andor.first)
        last_ran_final = not andor.rest
        last_negated = andor.first.negated
        for idx, (op, pipeline) in enumerate(andor.rest):
            if (op == "&&" and status != 0) or (op == "||" and status == 0):
                continue
            status = self.run_pipeline(pipeline)
            last_negated = pipeline.negated
            last_ran_final = idx == len(andor.rest) - 1
        self.status = status
        if self.errexit and status != 0 and last_ran_final and not last_negated:
            raise _Exit(status)

    def run_pipeline(self, pipeline: _Pipeline) -> int:
        if len(pipeline.commands) == 1:
            res = self.run_command(pipeline.commands[0], stdin="", subshell=False)
            status = res.status
        else:
            stdin = ""
            start = self.elapsed
            longest = 0.0
            statuses: list[int] = []
            for i, cmd in enumerate(pipeline.commands):
                last = i == len(pipeline.commands) - 1
                sub = _Shell(self.env, self.positional)
                sub.status = self.status
                sub.errexit = self.errexit
                res = sub.run_command(cmd, stdin=stdin, subshell=True)
                longest = max(longest, res.duration)
                statuses.append(res.status)
                self.emit(res.err)
                if last:
                    self.emit(res.out)
                stdin = res.out
            self.elapsed = start + longest
            status = statuses[-1]
            if self.pipefail:
                status = next((s for s in reversed(statuses) if s != 0), 0)
        if pipeline.negated:
            status = 0 if status != 0 else 1
        self.status = status
        return status

    def run_group(self, cmd: _Command, *, subshell: bool) -> _Result:
        assert cmd.group is not None
        sub = _Shell(self.env, self.positional)
        sub.status = self.status
        sub.errexit = self.errexit
        sub.pipefail = self.pipefail
        try:
            sub.run_program(cmd.group)
            status = sub.status
        except _Exit as e:
            status = e.status
        if subshell:
            return _Result(status, "".join(text for _, text in sub.chunks), "", sub.elapsed)
        start = self.elapsed
        for offset, text in sub.chunks:
            self.elapsed = start + offset
            self.emit(text)
        self.elapsed = start + sub.elapsed
        self.status = status
        return _Result(status)

    def run_command(self, cmd: _Command, *, stdin: str, subshell: bool) -> _Result:
        if cmd.group is not None:
            return self.run_group(cmd, subshell=subshell)
        argv: list[str] = []
        for w in cmd.words:
            argv.extend(self.expand(w))
        if not argv:
            for name, w in cmd.assignments:
                self.env[name] = self.expand_one(w)
            return _Result(0)
        # redirections decide where stdout/stderr go
        out_to: str | None = "out"
        err_to: str | None = "err"
        for r in cmd.redirs:
            target = self.expand_one(r.target)
            if r.op == "<":
                continue
            if r.op == "&>":
                keep = target in ("/dev/stdout", "/dev/stderr", "/proc/1/fd/1", "/proc/1/fd/2")
                out_to = "out" if keep else None
                err_to = "err" if keep else None
            elif r.op == ">&":
                dest = {"1": out_to, "2": err_to}.get(target)
                if target == "-":
                    dest = None
                if r.fd == 1:
                    out_to = dest
                elif r.fd == 2:
                    err_to = dest
            else:
                keep = target in ("/dev/stdout", "/dev/stderr", "/proc/1/fd/1", "/proc/1/fd/2", "/dev/tty")
                if r.fd == 1:
                    out_to = ("err" if target in ("/dev/stderr", "/proc/1/fd/2") else "out") if keep else None
                elif r.fd == 2:
                    err_to = ("out" if target in ("/dev/stdout", "/proc/1/fd/1") else "err") if keep else None
        start = self.elapsed
        try:
            res = self.builtin(argv, stdin, subshell)
        except _Exit as e:
            if subshell:
                return _Result(e.status)
            raise
        streams = {"out": "", "err": ""}
        if out_to is not None:
            streams[out_to] += res.out
        if err_to is not None:
            streams[err_to] += res.err
        res.out, res.err = streams["out"], streams["err"]
        if not subshell:
            self.emit(res.err)
            self.emit(res.out)
            self.elapsed = start + res.duration
            res.out = res.err = ""
        return res

    def builtin(self, argv: list[str], stdin: str, subshell: bool) -> _Result:
        name = argv[0].rsplit("/", 1)[-1]
        args = argv[1:]
        if name == "echo":
            return _Result(0, _echo(args))
        if name == "printf":
            if not args:
                return _Result(2, err="printf: usage: printf format [arguments]\n")
            return _Result(0, _printf(args[0], args[1:]))
        if name == "sleep":
            return _sleep(args)
        if name == "exit":
            status = self.status
            if args:
                try:
                    status = int(args[0]) & 0xFF
                except ValueError:
                    self.emit(f"sh: exit: Illegal number: {args[0]}\n")
                    status = 2
            raise _Exit(status)
        if name in ("true", ":"):
            return _Result(0)
        if name == "false":
            return _Result(1)
        if name == "set":
            self._set(args)
            return _Result(0)
        if name == "export":
            for a in args:
                if a in ("-p", "-n"):
                    continue
                key, eq, value = a.partition("=")
                if eq:
                    self.env[key] = value
            return _Result(0)
        if name == "unset":
            for a in args:
                self.env.pop(a, None)
            return _Result(0)
        if name in ("test", "["):
            if name == "[":
                if not args or args[-1] != "]":
                    return _Result(2, err="[: missing ]\n")
                args = args[:-1]
            return _Result(_test(args))
        if name == "cat":
            files = [a for a in args if a != "-" and not a.startswith("-")]
            return _Result(0, stdin if not files or "-" in args else "")
        if name in _SHELLS:
            run = run_argv(argv, self.env)
            return _Result(run.exit_code, run.stdout, "", run.duration)
        if name == "exec":
            if not args:
                return _Result(0)
            res = self.builtin(args, stdin, subshell)
            self.emit(res.err)
            self.emit(res.out)
            self.elapsed += res.duration
            raise _Exit(res.status)
        if name in _NOOPS:
            return _Result(0)
        # unknown program: succeeds at once with no output
        return _Result(0)

    def _set(self, args: list[str]) -> None:
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("-o", "+o") and i + 1 < len(args):
                on = a == "-o"
                opt = args[i + 1]
                if opt == "errexit":
                    self.errexit = on
                elif opt == "pipefail":
                    self.pipefail = on
                i += 2
                continue
            if a == "--":
                self.positional = [self.positional[0], *args[i + 1 :]]
                return
            if a[:1] in "-+" and len(a) > 1:
                on = a[0] == "-"
                for flag in a[1:]:
                    if flag == "e":
                        self.errexit = on
                    elif flag == "o" and i + 1 < len(args):
                        opt = args[i + 1]
                        if opt == "errexit":
                            self.errexit = on
                        elif opt == "pipefail":
                            self.pipefail = on
                        i += 1
            i += 1


def _echo(args: list[str]) -> str:
    newline = True
    escapes = False
    i = 0
    while i < len(args) and len(args[i]) > 1 and args[i][0] == "-" and set(args[i][1:]) <= {"n", "e", "E"}:
        for f in args[i][1:]:
            if f == "n":
                newline = False
            elif f == "e":
                escapes = True
            else:
                escapes = False
        i += 1
    text = " ".join(args[i:])
    if escapes:
        text, stop = _backslash_escapes(text)
        if stop:
            return text
    return text + ("\n" if newline else "")


_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
}


def _backslash_escapes(text: str) -> tuple[str, bool]:
    """Interpret ``\\n``-style escapes; returns (text, stop) where ``\\c`` stops output."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "c":
                return "".join(out), True
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt == "0" or nxt.isdigit():
                j = i + 1 + (nxt == "0")
                k = j
                while k < len(text) and k < j + 3 and text[k] in "01234567":
                    k += 1
                out.append(chr(int(text[j:k] or "0", 8) & 0xFF))
                i = k
                continue
        out.append(c)
        i += 1
    return "".join(out), False


def _to_int(arg: str) -> int:
    arg = arg.strip()
    if arg[:1] in ("'", '"') and len(arg) > 1:
        return ord(arg[1])
    try:
        return int(arg, 0) if arg.lower().startswith(("0x", "-0x")) else int(arg)
    except ValueError:
        try:
            return int(float(arg))
        except ValueError:
            return 0


def _printf(fmt: str, args: list[str]) -> str:
    out: list[str] = []
    pos = 0
    while True:
        consumed = False
        i = 0
        while i < len(fmt):
            c = fmt[i]
            if c == "\\":
                text, stop = _backslash_escapes(
                    fmt[i : i + 2] if fmt[i + 1 : i + 2] != "0" else fmt[i : i + 5]
                )
                if stop:
                    return "".join(out)
                out.append(text)
                i += 2 if fmt[i + 1 : i + 2] != "0" else 5
                continue
            if c != "%":
                out.append(c)
                i += 1
                continue
            if fmt[i + 1 : i + 2] == "%":
                out.append("%")
                i += 2
                continue
            start = i
            j = i + 1
            while j < len(fmt) and fmt[j] in "-+ #0123456789.":
                j += 1
            if j >= len(fmt):
                out.append(fmt[i:])
                break
            conv = fmt[j]
            spec = fmt[i + 1 : j]
            arg = args[pos] if pos < len(args) else None
            if arg is not None:
                pos += 1
                consumed = True
            i = j + 1
            try:
                if conv == "s":
                    out.append(f"%{spec}s" % (arg or ""))
                elif conv == "b":
                    text, _ = _backslash_escapes(arg or "")
                    out.append(f"%{spec}s" % text)
                elif conv in "diu":
                    out.append(f"%{spec}d" % _to_int(arg or "0"))
                elif conv in "xXoc":
                    if conv == "c":
                        out.append((arg or "")[:1])
                    else:
                        out.append(f"%{spec}{conv}" % _to_int(arg or "0"))
                elif conv in "feEgG":
                    try:
                        num = float(arg or "0")
                    except ValueError:
                        num = 0.0
                    out.append(f"%{spec}{conv}" % num)
                else:
                    out.append(fmt[start:i])
            except (TypeError, ValueError):
                out.append(arg or "")
        if not consumed or pos >= len(args):
            break
    return "".join(out)


def _sleep(args: list[str]) -> _Result:
    if not args:
        return _Result(1, err="sleep: missing operand\n")
    total = 0.0
    for a in args:
        if a in ("inf", "infinity"):
            return _Result(0, duration=math.inf)
        unit = 1.0
        num = a
        if a and a[-1] in "smhd":
            unit = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}[a[-1]]
            num = a[:-1]
        try:
            value = float(num)
        except ValueError:
            return _Result(1, err=f"sleep: invalid time interval '{a}'\n")
        if value < 0 or math.isnan(value):
            return _Result(1, err=f"sleep: invalid time interval '{a}'\n")
        total += value * unit
    return _Result(0, duration=total)


def _test(args: list[str]) -> int:
    """``test`` expression evaluation: 0 true, 1 false, 2 error."""
    if not args:
        return 1
    if args[0] == "!":
        r = _test(args[1:])
        return r if r == 2 else 1 - r
    if len(args) == 1:
        return 0 if args[0] else 1
    if len(args) == 2:
        op, val = args
        if op == "-z":
            return 0 if not val else 1
        if op == "-n":
            return 0 if val else 1
        if op in ("-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-p", "-S", "-b", "-c"):
            return 1  # there is no filesystem
        return 2
    if len(args) == 3:
        a, op, b = args
        if op in ("=", "=="):
            return 0 if a == b else 1
        if op == "!=":
            return 0 if a != b else 1
        ints = {
            "-eq": "__eq__",
            "-ne": "__ne__",
            "-lt": "__lt__",
            "-le": "__le__",
            "-gt": "__gt__",
            "-ge": "__ge__",
        }
        if op in ints:
            try:
                return 0 if getattr(int(a), ints[op])(int(b)) else 1
            except ValueError:
                return 2
        if op in ("-a", "-o"):
            left, right = _test([a]), _test([b])
            return 0 if (left == 0 and right == 0) or (op == "-o" and (left == 0 or right == 0)) else 1
        return 2
    for i, a in enumerate(args):
        if a in ("-a", "-o") and 0 < i < len(args) - 1:
            left, right = _test(args[:i]), _test(args[i + 1 :])
            if a == "-a":
                return 0 if left == 0 and right == 0 else 1
            return 0 if left == 0 or right == 0 else 1
    return 2


# ------------------------------------------------------------------ public


def _finish(shell: _Shell, status: int) -> ContainerRun:
    return ContainerRun(exit_code=status & 0xFF, duration=shell.elapsed, output=tuple(shell.chunks))


def run_script(
    script: str,
    env: Mapping[str, str] | None = None,
    *,
    positional: Sequence[str] = ("sh",),
    errexit: bool = False,
) -> ContainerRun:
    """Interpret a shell script (as ``sh -c SCRIPT``)."""
    shell = _Shell(env or {}, positional)
    shell.errexit = errexit
    try:
        shell.run_program(_parse(_Lexer(script).lex()))
        status = shell.status
    except _Exit as e:
        status = e.status
    return _finish(shell, status)


def run_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ContainerRun:
    """Interpret a container argv (``["sh", "-c", "..."]``, ``["echo", "hi"]``, ``["sleep", "5"]``)."""
    if not argv:
        return ContainerRun()
    prog = argv[0].rsplit("/", 1)[-1]
    if prog in _SHELLS or (prog == "busybox" and len(argv) > 1 and argv[1] in _SHELLS):
        rest = list(argv[1:]) if prog != "busybox" else list(argv[2:])
        errexit = False
        script: str | None = None
        i = 0
        while i < len(rest):
            a = rest[i]
            if a in ("-o", "+o") and i + 1 < len(rest):
                if rest[i + 1] == "errexit":
                    errexit = a == "-o"
                i += 2
                continue
            if a.startswith("-") and len(a) > 1 and a != "--":
                if "e" in a[1:]:
                    errexit = True
                if "c" in a[1:]:
                    if i + 1 < len(rest):
                        script = rest[i + 1]
                        positional = rest[i + 2 :] or ["sh"]
                        return run_script(script, env, positional=positional, errexit=errexit)
                    return ContainerRun(2, 0.0, ((0.0, "sh: -c: option requires an argument\n"),))
                i += 1
                continue
            break
        # `sh script.sh` or a bare interactive shell: nothing we can read, succeeds at once
        return ContainerRun()
    if prog == "busybox" and len(argv) > 1:
        return run_argv(argv[1:], env)
    shell = _Shell(env or {})
    cmd = _Command(words=[_Word([("lit", a, True)]) for a in argv])
    try:
        res = shell.run_command(cmd, stdin="", subshell=False)
        status = res.status
    except _Exit as e:
        status = e.status
    return _finish(shell, status)


def _annotation(annotations: Mapping[str, str], key: str, container: str) -> str | None:
    value = annotations.get(f"{key}.{container}")
    if value is None:
        value = annotations.get(key)
    return value


def plan_container(
    container: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> ContainerRun:
    """What a container of a pod does.

    Annotations on the pod override the interpreter: ``sim.chaosflow.io/exit-code``,
    ``sim.chaosflow.io/stdout`` (written at start) and ``sim.chaosflow.io/duration`` (Go duration,
    e.g. ``10s``, ``1m30s``); a ``.<container-name>`` suffix targets one container. Values that do
    not parse are ignored (with a warning).
    """
    env: dict[str, str] = {
        "HOME": "/root",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    if extra_env:
        env.update(extra_env)
    for e in container.get("env") or ():
        if isinstance(e, Mapping) and e.get("name"):
            env[str(e["name"])] = str(e.get("value") or "")
    argv = [str(a) for a in (container.get("command") or ())] + [
        str(a) for a in (container.get("args") or ())
    ]
    run = run_argv(argv, env)
    if not annotations:
        return run
    name = str(container.get("name", ""))
    exit_code, duration, output = run.exit_code, run.duration, run.output
    raw = _annotation(annotations, ANNOTATION_EXIT_CODE, name)
    if raw is not None:
        try:
            exit_code = int(raw) & 0xFF
        except ValueError:
            log.warning("ignoring annotation %s=%r: not an integer", ANNOTATION_EXIT_CODE, raw)
    raw = _annotation(annotations, ANNOTATION_DURATION, name)
    if raw is not None:
        try:
            parsed = parse_go_duration(raw)
            if parsed < 0:
                raise ValueError("negative")
            duration = parsed
            output = tuple((min(t, duration), text) for t, text in output)
        except ValueError:
            log.warning("ignoring annotation %s=%r: not a duration", ANNOTATION_DURATION, raw)
    raw = _annotation(annotations, ANNOTATION_STDOUT, name)
    if raw is not None:
        output = ((0.0, raw),) if raw else ()
    return ContainerRun(exit_code, duration, output)
