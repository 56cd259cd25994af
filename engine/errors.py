"""Errors shared by the whole project.

Every problem found in a user document is reported as ``FILE: PATH: message`` where ``PATH`` is a
field path such as ``spec.templates[2].children[0]`` (see :func:`format_path`). Problems found
while *reading* a document (size, syntax, nesting, aliases, duplicate keys, ...) raise
:class:`InputError`; problems found while *validating* a loaded document are collected as
:class:`ValidationIssue` values (and may be raised together as :class:`ValidationFailed`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A field path inside a document: mapping keys (str) and sequence indexes (int).
Path = tuple[str | int, ...]

_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*\Z")


def format_path(path: Sequence[str | int]) -> str:
    """Render a field path the way every chaosflow message does.

    ``("spec", "templates", 2, "children", 0)`` -> ``spec.templates[2].children[0]``.
    Keys that are not plain identifiers are quoted: ``metadata.labels["app.kubernetes.io/name"]``.
    The empty path (the document root) renders as ``""``.
    """
    out: list[str] = []
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out.append(f"[{part}]")
        elif isinstance(part, str) and _PLAIN_KEY.match(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(str(part), ensure_ascii=False)}]")
    return "".join(out)


@dataclass(frozen=True)
class SourcePos:
    """A 1-based position in a source file."""

    line: int
    column: int | None = None

    def __str__(self) -> str:
        if self.column is None:
            return f"line {self.line}"
        return f"line {self.line}, column {self.column}"


class ChaosflowError(Exception):
    """Base class of chaosflow's own errors (messages are meant for users, not tracebacks)."""


class InputError(ChaosflowError, ValueError):
    """A user document could not be read.

    ``where`` is a field path (tuple), a :class:`SourcePos`, a 1-based line number (int), or None
    when the problem concerns the whole file; ``pos`` optionally adds the source position to a
    path. ``str(err)`` is compiler-style: ``FILE[:LINE[:COLUMN]]: [PATH: ]message``, e.g.
    ``wf.yaml:7:3: spec.templates[0]: duplicate key "name" (first defined at line 4)``.
    """

    def __init__(
        self,
        filename: str,
        where: Path | SourcePos | int | None,
        message: str,
        *,
        pos: SourcePos | None = None,
    ) -> None:
        path: Path | None = None
        if isinstance(where, SourcePos):
            pos = where
        elif isinstance(where, int):
            pos = SourcePos(where)
        elif where is not None:
            path = tuple(where)
        self.filename = filename
        self.path = path
        self.pos = pos
        self.message = message
        super().__init__(self._render())

    @property
    def line(self) -> int | None:
        return self.pos.line if self.pos is not None else None

    def _render(self) -> str:
        head = self.filename
        if self.pos is not None:
            head += f":{self.pos.line}"
            if self.pos.column is not None:
                head += f":{self.pos.column}"
        parts = [p for p in (head, format_path(self.path or ()), self.message) if p]
        return ": ".join(parts)

    def __reduce__(self) -> Any:
        return (_rebuild_input_error, (self.filename, self.path, self.message, self.pos))


def _rebuild_input_error(filename: str, path: Path | None, message: str, pos: SourcePos | None) -> InputError:
    return InputError(filename, path, message, pos=pos)


@dataclass(frozen=True)
class ValidationIssue:
    """One problem found while validating a document.

    ``str(issue)`` gives ``wf.yaml: spec.templates[2].children[0]: unknown template "foo"``; when
    the line is known it is added compiler-style: ``wf.yaml:14: spec.templates[2]...``.
    """

    file: str
    path: Path
    message: str
    line: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        head = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [p for p in (head, format_path(self.path), self.message) if p]
        return ": ".join(parts)


class ValidationFailed(ChaosflowError, ValueError):
    """One or more :class:`ValidationIssue` values, raised together."""

    def __init__(self, issues: Iterable[ValidationIssue]) -> None:
        self.issues: list[ValidationIssue] = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues) or "validation failed")

    def __reduce__(self) -> Any:
        return (type(self), (self.issues,))
