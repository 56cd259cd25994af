"""Safe loading of user documents (YAML, and JSON since JSON is YAML) and YAML output.

:func:`load_documents` returns plain data (dicts, lists, str, int, float, bool, None) and refuses
hostile or ambiguous input with an :class:`~engine.errors.InputError` naming the file and the line
or field path -- never a traceback, never a hang:

- more than ``Limits.max_bytes`` (8 MiB) of input, or invalid UTF-8;
- nesting deeper than ``Limits.max_depth`` (64) -- checked while composing, so 10 000 nested
  lists stop at level 65 without recursion;
- alias bombs ("billion laughs"): every alias counts the nodes it expands to, and more than
  ``Limits.max_alias_nodes`` (100 000) in a document is refused; recursive aliases are refused.
  Aliased values are copied, so the result is a tree (no shared sub-objects);
- more than ``Limits.max_documents`` (100) documents in the stream;
- mapping keys that are not strings (including YAML 1.1's ``yes``/``no``/``on``/``off``, which read
  as booleans: quote them) and duplicate keys (YAML silently keeps the last one; we refuse);
- tags other than plain data (``!!binary``, ``!!set``, ``!!timestamp``, ``!custom``, ``!!python/...``);
- syntax errors, reported with line and column.

Scalars follow YAML 1.1 like Kubernetes (``yes``/``on`` are booleans, ``0644`` is octal) with two
exceptions that avoid surprises: dates stay strings (``2026-01-01`` is not a ``date``) and
``1:30`` stays a string (not sexagesimal 90). JSON numbers such as ``1e5`` are floats. Merge keys
(``<<: *base``) are supported. Empty documents (``---`` with nothing after it) are skipped.
JSON is read as YAML (so positions are known); JSON that YAML cannot read -- surrogate-pair
escapes like ``"\\ud83d\\ude00"`` -- falls back to the ``json`` module (without positions). Known
YAML 1.1 quirk: a *raw* U+0085/U+2028/U+2029 inside a JSON string reads as a line break (escaped
``\\u2028`` is fine).

Each :class:`Document` can map a field path such as ``("spec", "templates", 2)`` to its line
(:meth:`Document.position`), used by validation messages (``FILE:LINE: PATH: message``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver

from engine.errors import InputError, Path, SourcePos, ValidationIssue, format_path

_CParser: Any = None
try:  # libyaml's C parser (fast); the composition below is ours either way
    from yaml import _yaml

    _CParser = _yaml.CParser
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    pass
HAVE_LIBYAML = _CParser is not None

__all__ = [
    "DEFAULT",
    "HAVE_LIBYAML",
    "Document",
    "InputError",
    "Limits",
    "Path",
    "SourcePos",
    "ValidationIssue",
    "dump_yaml",
    "dump_yaml_all",
    "format_path",
    "load_document",
    "load_documents",
]


@dataclass(frozen=True)
class Limits:
    """Bounds on what a single file may contain."""

    max_bytes: int = 8 * 1024 * 1024
    max_depth: int = 64
    max_documents: int = 100
    #: nodes materialized through aliases in one document, counting nested expansion
    max_alias_nodes: int = 100_000


DEFAULT = Limits()

# --------------------------------------------------------------------------------------------
# scalar resolution

_T = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, SEQ, MAP, MERGE = (
    _T + "str",
    _T + "int",
    _T + "float",
    _T + "bool",
    _T + "null",
    _T + "seq",
    _T + "map",
    _T + "merge",
)
_SCALAR_TAGS = frozenset({STR, INT, FLOAT, BOOL, NULL})


class _Resolver(BaseResolver):
    """YAML 1.1 implicit types minus timestamps, sexagesimal numbers and ``=``; JSON exponents."""

    yaml_implicit_resolvers: dict[Any, Any] = {}


_Resolver.add_implicit_resolver(
    BOOL,
    re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_Resolver.add_implicit_resolver(
    INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_Resolver.add_implicit_resolver(
    FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?(?:[0-9][0-9_]*)[eE][-+]?[0-9]+"
        r"|[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)"
        r"|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Resolver.add_implicit_resolver(MERGE, re.compile(r"^(?:<<)$"), ["<"])
_Resolver.add_implicit_resolver(NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])


class _Constructor(SafeConstructor):
    """SafeConstructor; only plain-data tags reach it (the composer refuses the others)."""


# --------------------------------------------------------------------------------------------
# parsing front-ends


class _PyParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)

    def dispose(self) -> None:
        self.states = []
        self.state = None


def _make_parser(text: str) -> Any:
    if _CParser is not None:
        return _CParser(text)
    return _PyParser(text)  # pragma: no cover


# --------------------------------------------------------------------------------------------
# composition with limits


class _Abort(Exception):
    def __init__(self, where: Path | SourcePos | None, message: str, pos: SourcePos | None = None) -> None:
        super().__init__(message)
        self.where = where
        self.message = message
        self.pos = pos


def _pos(mark: Any) -> SourcePos | None:
    if mark is None:
        return None
    return SourcePos(mark.line + 1, mark.column + 1)


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag


_SURROGATE = re.compile("[\ud800-\udfff]")
_TAG_NAMES = {INT: "an int", FLOAT: "a float", BOOL: "a boolean", NULL: "null"}


class _Composer:
    """Builds the node graph from parser events, enforcing :class:`Limits` as it goes."""

    def __init__(self, parser: Any, limits: Limits) -> None:
        self.parser = parser
        self.limits = limits
        self.resolver = _Resolver()
        self.anchors: dict[str, Node] = {}
        self.open_anchors: set[str] = set()
        self.alias_nodes = 0
        self.path: list[str | int] = []
        # (expanded size, height) of every composed node, by id (nodes live as long as the document)
        self.meta: dict[int, tuple[int, int]] = {}

    def reset(self) -> None:
        self.meta = {}
        self.anchors = {}
        self.open_anchors = set()
        self.alias_nodes = 0
        self.path = []

    def fail(self, message: str, mark: Any = None) -> _Abort:
        return _Abort(tuple(self.path), message, _pos(mark))

    def compose(self, depth: int, key: bool = False) -> Node:
        p = self.parser
        event: Any = p.get_event()
        if isinstance(event, AliasEvent):
            return self._alias(event, depth)
        anchor = getattr(event, "anchor", None)
        if isinstance(event, ScalarEvent):
            node: Node = self._scalar(event, key)
        elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            if depth + 1 > self.limits.max_depth:
                raise _Abort(
                    None, f"nesting deeper than {self.limits.max_depth} levels", _pos(event.start_mark)
                )
            if anchor is not None:
                self.open_anchors.add(anchor)
            if isinstance(event, SequenceStartEvent):
                node = self._sequence(event, depth + 1)
            else:
                node = self._mapping(event, depth + 1)
            if anchor is not None:
                self.open_anchors.discard(anchor)
        else:  # pragma: no cover - the parser guarantees a node event here
            raise self.fail(f"unexpected {type(event).__name__}", event.start_mark)
        if anchor is not None:
            self.anchors[anchor] = node
        return node

    def _scalar(self, event: Any, key: bool) -> ScalarNode:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolver.resolve(ScalarNode, event.value, event.implicit)
        if tag == MERGE and not key:
            tag = STR
        if tag not in _SCALAR_TAGS and tag != MERGE:
            raise self.fail(
                f"unsupported tag {_short_tag(tag)} (only plain YAML/JSON data is accepted)", event.start_mark
            )
        value = event.value
        if _SURROGATE.search(value):  # pure-Python scanner: "\ud83d\ude00" escapes stay split
            try:
                value = value.encode("utf-16", "surrogatepass").decode("utf-16")
            except UnicodeDecodeError:
                raise self.fail("invalid Unicode escape (unpaired surrogate)", event.start_mark) from None
        node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
        self.meta[id(node)] = (1, 0)
        return node

    def _collection_tag(self, event: Any, kind: type[Node], default: str) -> str:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolver.resolve(kind, None, event.implicit)
        if tag != default:
            raise self.fail(
                f"unsupported tag {_short_tag(tag)} (only plain YAML/JSON data is accepted)", event.start_mark
            )
        return tag

    def _sequence(self, start: Any, depth: int) -> SequenceNode:
        tag = self._collection_tag(start, SequenceNode, SEQ)
        node = SequenceNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        size, height = 1, 0
        index = 0
        p = self.parser
        while not p.check_event(SequenceEndEvent):
            self.path.append(index)
            child = self.compose(depth)
            self.path.pop()
            node.value.append(child)
            csize, cheight = self.meta[id(child)]
            size += csize
            height = max(height, cheight)
            index += 1
        node.end_mark = p.get_event().end_mark
        self.meta[id(node)] = (size, height + 1)
        return node

    def _mapping(self, start: Any, depth: int) -> MappingNode:
        tag = self._collection_tag(start, MappingNode, MAP)
        node = MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        size, height = 1, 0
        seen: dict[str, Any] = {}
        p = self.parser
        while not p.check_event(MappingEndEvent):
            key = self.compose(depth, key=True)
            if not isinstance(key, ScalarNode):
                raise self.fail("mapping keys must be strings, not a sequence or mapping", key.start_mark)
            if key.tag == MERGE:
                name = "<<"
            elif key.tag != STR:
                raise self.fail(_non_string_key(key), key.start_mark)
            else:
                name = str(key.value)
            if name in seen:
                raise _Abort(
                    (*self.path, name),
                    f"duplicate key {_q(name)} (first defined at line {seen[name].line + 1})",
                    _pos(key.start_mark),
                )
            seen[name] = key.start_mark
            self.path.append(name)
            value = self.compose(depth)
            self.path.pop()
            node.value.append((key, value))
            vsize, vheight = self.meta[id(value)]
            size += 1 + vsize
            height = max(height, vheight)
        node.end_mark = p.get_event().end_mark
        self.meta[id(node)] = (size, height + 1)
        return node

    def _alias(self, event: Any, depth: int) -> Node:
        name = event.anchor
        if name in self.open_anchors:
            raise self.fail(f"recursive alias *{name} (an anchor cannot contain itself)", event.start_mark)
        target = self.anchors.get(name)
        if target is None:
            raise self.fail(f"undefined alias *{name}", event.start_mark)
        size, height = self.meta[id(target)]
        self.alias_nodes += size
        if self.alias_nodes > self.limits.max_alias_nodes:
            raise self.fail(
                f"aliases expand to more than {self.limits.max_alias_nodes} nodes (alias bomb?)",
                event.start_mark,
            )
        if depth + height > self.limits.max_depth:
            raise _Abort(
                None,
                f"nesting deeper than {self.limits.max_depth} levels (through alias *{name})",
                _pos(event.start_mark),
            )
        if isinstance(target, ScalarNode):
            return target
        copy = self._clone(target)
        copy.start_mark = event.start_mark
        return copy

    def _clone(self, node: Node) -> Node:
        """Structural copy of a collection node (scalars are immutable and shared)."""
        new: Node
        if isinstance(node, SequenceNode):
            new = SequenceNode(
                node.tag,
                [self._clone(c) for c in node.value],
                node.start_mark,
                node.end_mark,
                flow_style=node.flow_style,
            )
        elif isinstance(node, MappingNode):
            new = MappingNode(
                node.tag,
                [(k, self._clone(v)) for k, v in node.value],
                node.start_mark,
                node.end_mark,
                flow_style=node.flow_style,
            )
        else:
            return node
        self.meta[id(new)] = self.meta[id(node)]
        return new


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _non_string_key(key: ScalarNode) -> str:
    kind = _TAG_NAMES.get(key.tag, _short_tag(key.tag))
    if key.tag == NULL:
        return "mapping key is empty or null; keys must be strings"
    hint = ""
    if key.tag == BOOL and key.value.lower() in ("yes", "no", "on", "off"):
        hint = " (YAML reads yes/no/on/off as booleans)"
    return f"mapping key {key.value} is {kind}, not a string{hint}; quote it: {_q(key.value)}"


# --------------------------------------------------------------------------------------------
# positions


# (line, column, children): children is dict[str, _PosEntry] | list[_PosEntry] | None
_PosEntry = tuple[int, int, Any]


def _positions(node: Node, line: int, column: int) -> _PosEntry:
    if isinstance(node, MappingNode):
        children: dict[str, _PosEntry] = {}
        for k, v in node.value:
            if isinstance(k, ScalarNode):
                children[k.value] = _positions(v, k.start_mark.line + 1, k.start_mark.column + 1)
        return (line, column, children)
    if isinstance(node, SequenceNode):
        return (
            line,
            column,
            [_positions(c, c.start_mark.line + 1, c.start_mark.column + 1) for c in node.value],
        )
    return (line, column, None)


@dataclass
class Document:
    """One document of a file: its plain data and where its fields are in the source."""

    data: Any
    filename: str
    index: int  # 0-based position in the stream (empty documents count)
    line: int  # 1-based line where the document's content starts
    _positions: _PosEntry | None = field(default=None, repr=False, compare=False)

    def position(self, path: Sequence[str | int]) -> SourcePos | None:
        """Source position of ``path`` (of its nearest existing ancestor if it does not exist).

        For a mapping entry this is the position of its key; for a list item, of the item.
        """
        entry = self._positions
        if entry is None:
            return None
        for part in path:
            children = entry[2]
            nxt: _PosEntry | None = None
            if isinstance(children, dict) and isinstance(part, str):
                nxt = children.get(part)
            elif (
                isinstance(children, list)
                and isinstance(part, int)
                and -len(children) <= part < len(children)
            ):
                nxt = children[part]
            if nxt is None:
                break
            entry = nxt
        return SourcePos(entry[0], entry[1])

    def line_of(self, path: Sequence[str | int]) -> int | None:
        pos = self.position(path)
        return pos.line if pos is not None else None

    def issue(self, path: Sequence[str | int], message: str) -> ValidationIssue:
        """A :class:`ValidationIssue` for ``path`` in this document, with its line."""
        return ValidationIssue(self.filename, tuple(path), message, line=self.line_of(path))

    def error(self, path: Sequence[str | int], message: str) -> InputError:
        return InputError(self.filename, tuple(path), message, pos=self.position(path))


# --------------------------------------------------------------------------------------------
# loading


def _decode(data: str | bytes, filename: str, limits: Limits) -> str:
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as e:
            line = data.count("\n", 0, e.start) + 1
            raise InputError(filename, line, "invalid character (unpaired surrogate)") from None
        size = len(raw)
        text = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        size = len(raw)
        if size > limits.max_bytes:
            raise InputError(filename, None, _too_big(size, limits))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
            raise InputError(
                filename, SourcePos(line, column), f"invalid UTF-8 (byte 0x{raw[e.start]:02x})"
            ) from None
    else:
        raise TypeError(f"load_documents() takes str or bytes, not {type(data).__name__}")
    if size > limits.max_bytes:
        raise InputError(filename, None, _too_big(size, limits))
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def _too_big(size: int, limits: Limits) -> str:
    return f"file is too large ({size} bytes; the limit is {limits.max_bytes})"


def _yaml_error(filename: str, e: yaml.YAMLError, src: str) -> InputError:
    if isinstance(e, yaml.MarkedYAMLError):
        problem = (e.problem or "invalid YAML").strip()
        context = (e.context or "").strip()
        cmark = e.context_mark
        if context and cmark is not None:
            context = f"{context} at line {cmark.line + 1}, column {cmark.column + 1}"
        message = f"{problem} ({context})" if context else problem
        mark = e.problem_mark or e.context_mark
        return InputError(filename, _pos(mark), message)
    if isinstance(e, yaml.reader.ReaderError):
        what = "invalid character"
        if isinstance(e.character, int):
            what = f"invalid character #x{e.character:04x}"
        where: SourcePos | None = None
        if isinstance(e.position, int) and 0 <= e.position <= len(src):
            where = SourcePos(
                src.count("\n", 0, e.position) + 1, e.position - (src.rfind("\n", 0, e.position) + 1) + 1
            )
        return InputError(filename, where, f"{what}: {e.reason}")
    return InputError(filename, None, str(e).strip() or "invalid YAML")


def load_documents(
    text: str | bytes, filename: str, limits: Limits = DEFAULT, *, positions: bool = True
) -> list[Document]:
    """Parse every document of a YAML (or JSON) stream into plain data, safely.

    Raises :class:`InputError` (``FILE:LINE:COL: PATH: message``) for anything refused; see the
    module docstring. ``positions=False`` skips recording field positions (saves memory on very
    large inputs).
    """
    src = _decode(text, filename, limits)
    parser: Any = None
    docs: list[Document] = []
    index = 0
    try:
        parser = _make_parser(src)
        composer = _Composer(parser, limits)
        parser.get_event()  # StreamStartEvent
        while not parser.check_event(StreamEndEvent):
            if index >= limits.max_documents:
                ev = parser.peek_event()
                raise _Abort(_pos(ev.start_mark), f"more than {limits.max_documents} documents")
            start = parser.get_event()
            assert isinstance(start, DocumentStartEvent)
            composer.reset()
            root = composer.compose(0)
            end = parser.get_event()
            assert isinstance(end, DocumentEndEvent)
            if not (isinstance(root, ScalarNode) and root.tag == NULL):
                constructor = _Constructor()
                data = constructor.construct_document(root)
                line = root.start_mark.line + 1
                pos = _positions(root, line, root.start_mark.column + 1) if positions else None
                docs.append(Document(data, filename, index, line, pos))
            index += 1
    except _Abort as e:
        where = e.where
        raise InputError(filename, where, e.message, pos=e.pos) from None
    except yaml.YAMLError as e:
        # JSON that YAML cannot read (surrogate-pair escapes such as "\ud83d\ude00", which
        # json.dumps emits by default) is still JSON: fall back to the json module.
        fallback = _json_fallback(src, filename, limits)
        if fallback is None:
            raise _yaml_error(filename, e, src) from None
        return fallback
    except RecursionError:  # pragma: no cover - depth is bounded before recursion gets deep
        raise InputError(filename, None, "document is too deeply nested") from None
    finally:
        if parser is not None:
            parser.dispose()
    return docs


class _JsonDuplicate(Exception):
    pass


def _json_pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in items:
        if k in out:
            raise _JsonDuplicate(k)
        out[k] = v
    return out


def _depth(data: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            d += 1
            deepest = max(deepest, d)
            stack.extend((c, d) for c in (node.values() if isinstance(node, dict) else node))
    return deepest


def _json_fallback(src: str, filename: str, limits: Limits) -> list[Document] | None:
    if not src.lstrip().startswith(("{", "[")):
        return None
    try:
        data = json.loads(src, object_pairs_hook=_json_pairs)
    except _JsonDuplicate as e:
        raise InputError(filename, None, f"duplicate key {_q(str(e.args[0]))}") from None
    except (ValueError, RecursionError):
        return None
    if _depth(data) > limits.max_depth:
        raise InputError(filename, None, f"nesting deeper than {limits.max_depth} levels")
    line = src[: len(src) - len(src.lstrip())].count("\n") + 1
    return [Document(data, filename, 0, line, None)]


def load_document(text: str | bytes, filename: str, limits: Limits = DEFAULT) -> Document:
    """Exactly one (non-empty) document."""
    docs = load_documents(text, filename, limits)
    if len(docs) != 1:
        if not docs:
            raise InputError(filename, None, "no document found (the file is empty)")
        raise InputError(
            filename, docs[1].line, f"expected a single document, found {len(docs)} (separated by ---)"
        )
    return docs[0]


# --------------------------------------------------------------------------------------------
# dumping


class _DumpResolver(yaml.resolver.Resolver):
    """PyYAML's resolver (timestamps, sexagesimal, ...) plus JSON exponents: any string another
    YAML reader could take for a non-string gets quoted."""


_DumpResolver.add_implicit_resolver(
    FLOAT, re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


class _Dumper(
    yaml.emitter.Emitter, yaml.serializer.Serializer, yaml.representer.SafeRepresenter, _DumpResolver
):
    def __init__(self, stream: Any, **kw: Any) -> None:
        yaml.emitter.Emitter.__init__(
            self,
            stream,
            canonical=None,
            indent=kw.get("indent", 2),
            width=kw.get("width", 1 << 30),
            allow_unicode=True,
            line_break=None,
        )
        yaml.serializer.Serializer.__init__(
            self,
            encoding=None,
            explicit_start=kw.get("explicit_start"),
            explicit_end=None,
            version=None,
            tags=None,
        )
        yaml.representer.SafeRepresenter.__init__(
            self, default_style=None, default_flow_style=False, sort_keys=False
        )
        _DumpResolver.__init__(self)

    def ignore_aliases(self, data: Any) -> bool:
        return True


_ODD_BREAKS = re.compile("[\r\x85\u2028\u2029]")


def _represent_str(dumper: _Dumper, data: str) -> Node:
    data = str.__str__(data)  # the value of str subclasses such as str-valued Enums
    style: str | None = None
    if _ODD_BREAKS.search(data):
        style = '"'  # PyYAML would fold these in plain/single-quoted/block styles; escape them
    elif "\n" in data:
        style = "|"
    return dumper.represent_scalar(STR, data, style=style)


def _represent_list(dumper: _Dumper, data: Any) -> Node:
    return dumper.represent_list(list(data))


def _represent_map(dumper: _Dumper, data: Any) -> Node:
    return dumper.represent_dict(dict(data))


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(tuple, _represent_list)
_Dumper.add_multi_representer(str, _represent_str)
_Dumper.add_multi_representer(int, lambda d, v: d.represent_int(int(v)))
_Dumper.add_multi_representer(float, lambda d, v: d.represent_float(float(v)))
_Dumper.add_multi_representer(dict, _represent_map)


def dump_yaml(obj: Any) -> str:
    """YAML for humans: keys in their order, multi-line strings as ``|`` blocks, no aliases."""
    return yaml.dump(obj, Dumper=_Dumper)


def dump_yaml_all(objs: Iterable[Any]) -> str:
    """Several documents separated by ``---``."""
    return yaml.dump_all(list(objs), Dumper=_Dumper, explicit_start=True)
