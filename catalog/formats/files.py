"""Bounded reading of untrusted files: regular files only (no FIFO or device can block),
JSON (msgspec), YAML (bounded nesting and aliases, JSON types only) and XML (no entities).
"""

from __future__ import annotations

import os
import posixpath
import stat
import xml.etree.ElementTree as ET
from typing import Any
from xml.parsers import expat

import msgspec
import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from ..dataset_catalog import DatasetCatalog
from .._common import AnnotationFormatError
from ..metadata import MetadataCatalog


#: Deepest nesting of lists and mappings accepted in an annotation file (the top level is 1).
MAX_DEPTH = 100
#: With YAML aliases allowed: at most this many nodes beyond those the file itself holds.
MAX_ALIAS_EXPANSION = 1_000_000
#: Longest YAML int or float scalar accepted, in characters.
MAX_NUMBER_CHARS = 64
#: Largest text file (e.g. a classes file) read by :func:`read_text_lines`.
MAX_TEXT_FILE_BYTES = 16 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"


def read_bytes(path: str, *, limit: int | None = None, nofollow: bool = False,
               what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, read without blocking on FIFOs or devices."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if nofollow and os.path.islink(path):
            raise AnnotationFormatError(
                f"{what} {path!r} is a symbolic link; refused (name the file it points to)"
            ) from None
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise AnnotationFormatError(f"{what} {path!r} cannot be opened: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AnnotationFormatError(
                f"{what} {path!r} is not a regular file (a directory, FIFO, socket or device)")
        if limit is not None and info.st_size > limit:
            raise AnnotationFormatError(
                f"{what} {path!r} has {info.st_size} bytes; the limit is {limit}")
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:  # grew while being read
        raise AnnotationFormatError(f"{what} {path!r} has more than {limit} bytes")
    return data


def outside_root_problem(file_name: str) -> str | None:
    """Why an image ``file_name`` read from an annotation file does not resolve under the data
    root (``image_root``), or None: an absolute path, or a ``..`` that climbs out of the root
    (``a/../b.jpg`` stays inside). Loaders refuse such names unless the user passed
    ``allow_outside_root=True``.

    Example:
        >>> outside_root_problem("train/a/../b.jpg") is None, outside_root_problem("../b.jpg")
        (True, "climbs out of image_root with '..'")
    """
    if file_name.startswith(("/", "\\")) or os.path.isabs(file_name):
        return "is an absolute path"
    if ".." in file_name:
        normal = posixpath.normpath(file_name.replace("\\", "/"))
        if normal == ".." or normal.startswith("../"):
            return "climbs out of image_root with '..'"
    return None


def _decode_utf8(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnnotationFormatError(
            f"{path}: not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 4]!r}); "
            "annotation and class files must be UTF-8") from None


def read_text_lines(path: str, *, limit: int = MAX_TEXT_FILE_BYTES,
                    what: str = "file") -> list[str]:
    """The stripped, non-empty lines of a small UTF-8 text file (a regular file, no symlink)."""
    data = read_bytes(path, limit=limit, nofollow=True, what=what)
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    text = _decode_utf8(data, path)
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_json(data: bytes, path: str, *, bom: bool = False) -> Any:
    """Parse JSON bytes read from ``path`` (a UTF-8 byte order mark skipped when ``bom``);
    every failure is an AnnotationFormatError naming the file."""
    if bom and data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        raise AnnotationFormatError(f"{path}: not valid JSON: nested too deep") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        _decode_utf8(data, path)  # name the byte when the problem is the encoding
        raise AnnotationFormatError(f"{path}: not valid JSON: {exc}") from None


def _refusal(problem: str, mark: Any) -> yaml.MarkedYAMLError:
    """A YAML error at ``mark``, reported by :func:`parse_yaml` with the file and line."""
    return yaml.MarkedYAMLError(None, None, problem, mark)


def _refuse_tag(loader: yaml.SafeLoader, node: Node) -> Any:
    raise _refusal(
        f"the YAML tag {node.tag} is refused in annotation files (only JSON value types)",
        node.start_mark)


def _bounded_number(kind: str) -> Any:
    base = getattr(yaml.SafeLoader, f"construct_yaml_{kind}")

    def construct(loader: yaml.SafeLoader, node: Node) -> Any:
        if isinstance(node.value, str) and len(node.value) > MAX_NUMBER_CHARS:
            raise _refusal(
                f"a YAML {kind} of {len(node.value)} characters (the limit is "
                f"{MAX_NUMBER_CHARS})", node.start_mark)
        return base(loader, node)

    return construct


def _timestamp_as_string(loader: yaml.SafeLoader, node: Node) -> str:
    return loader.construct_scalar(node)


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that bounds nesting while composing and refuses anchors and aliases
    unless allowed (then the expansion is checked before any object is built).
    """

    def __init__(self, stream: str, *, max_depth: int, allow_aliases: bool) -> None:
        super().__init__(stream)
        self.max_depth = max_depth
        self.allow_aliases = allow_aliases
        self.depth = 0
        self.nodes = 0
        self.saw_alias = False

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent) or event.anchor is not None:
            if not self.allow_aliases:
                raise _refusal(
                    "YAML anchors and aliases are refused in annotation files (they can expand "
                    "to billions of values); pass allow_yaml_aliases=True to accept bounded use",
                    event.start_mark)
            self.saw_alias = True
        self.nodes += 1
        if not isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            return super().compose_node(parent, index)
        self.depth += 1  # lists and mappings count, as in JSON (the top level is 1)
        if self.depth > self.max_depth:
            raise _refusal(f"YAML nested more than {self.max_depth} levels deep", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


for _tag in ("binary", "set", "omap", "pairs"):
    _BoundedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_number("int"))
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _bounded_number("float"))
_BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_string)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _check_expansion(root: Node, composed: int, max_depth: int) -> None:
    """Refuse a node graph whose alias expansion is recursive, too large or too deep."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    limit = composed + MAX_ALIAS_EXPANSION
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            own = 1 if isinstance(node, (SequenceNode, MappingNode)) else 0
            height[key] = own + max((height[id(c)] for c in children), default=0)
            on_stack.discard(key)
            if size[key] > limit:
                raise _refusal(
                    f"YAML aliases expand to more than {limit} values ({composed} in the file "
                    f"+ {MAX_ALIAS_EXPANSION} allowed by expansion)", node.start_mark)
            if height[key] > max_depth:
                raise _refusal(f"YAML aliases expand to nesting deeper than {max_depth} levels",
                               node.start_mark)
            continue
        if key in size:
            continue
        if key in on_stack:
            raise _refusal("a YAML alias refers to a node that contains it", node.start_mark)
        on_stack.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def parse_yaml(data: bytes, path: str, *, max_depth: int = MAX_DEPTH,
               allow_aliases: bool = False) -> Any:
    """Parse one YAML document with the bounds described in this module."""
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    text = _decode_utf8(data, path)
    loader = None
    try:
        loader = _BoundedLoader(text, max_depth=max_depth, allow_aliases=allow_aliases)
        node = loader.get_single_node()
        if node is None:
            return None
        if loader.saw_alias:
            _check_expansion(node, loader.nodes, max_depth)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise AnnotationFormatError(
            f"{path}: {where}not valid YAML for a bounded yaml.safe_load: {problem}") from None
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError, TypeError) as exc:
        raise AnnotationFormatError(
            f"{path}: not valid YAML for a bounded yaml.safe_load ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()

#: Largest XML file read (a Pascal VOC annotation is a few KiB).
MAX_XML_BYTES = 4 * 1024 * 1024
#: Deepest element nesting accepted (the root is 1).
MAX_XML_DEPTH = 64
#: Most elements accepted in one document.
MAX_XML_ELEMENTS = 200_000


class _Refused(Exception):
    """Raised inside expat callbacks; turned into an AnnotationFormatError."""


def parse_xml_bytes(data: bytes, path: str) -> ET.Element:
    """The root element of the XML document ``data`` read from ``path`` (named in errors)."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    state = {"depth": 0, "count": 0}

    def refuse(what: str) -> Any:
        def handler(*_args: Any) -> Any:
            raise _Refused(what)

        return handler

    def start(tag: str, attrs: dict[str, str]) -> None:
        state["depth"] += 1
        state["count"] += 1
        if state["depth"] > MAX_XML_DEPTH:
            raise _Refused(f"elements nested deeper than {MAX_XML_DEPTH}")
        if state["count"] > MAX_XML_ELEMENTS:
            raise _Refused(f"more than {MAX_XML_ELEMENTS} elements")
        builder.start(tag, attrs)

    def end(tag: str) -> None:
        state["depth"] -= 1
        builder.end(tag)

    parser.StartDoctypeDeclHandler = refuse("a document type declaration (DTD) is refused")
    parser.EntityDeclHandler = refuse("an entity declaration is refused")
    parser.UnparsedEntityDeclHandler = refuse("an entity declaration is refused")
    parser.ExternalEntityRefHandler = refuse("an external entity is refused")
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True
    try:
        parser.Parse(data, True)
    except _Refused as exc:
        raise AnnotationFormatError(
            f"{path}: XML refused near line {parser.CurrentLineNumber}: {exc}") from None
    except expat.ExpatError as exc:
        raise AnnotationFormatError(f"{path}: not well-formed XML: {exc}") from None
    except (LookupError, ValueError) as exc:  # an unknown or multi-byte declared encoding
        raise AnnotationFormatError(f"{path}: XML in an unsupported encoding: {exc}") from None
    return builder.close()


def read_xml_file(path: str, *, limit: int = MAX_XML_BYTES) -> ET.Element:
    """The root element of the XML file ``path``, read and parsed under the rules above."""
    return parse_xml_bytes(read_bytes(path, limit=limit, what="XML file"), path)


def set_metadata(name: str, values: dict[str, Any]) -> None:
    """Set the metadata of the dataset just registered as ``name``; unregister it on failure."""
    try:
        MetadataCatalog.get(name).set(**values)
    except Exception:
        DatasetCatalog.remove(name)
        raise
