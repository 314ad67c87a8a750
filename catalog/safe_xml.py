"""Parsing untrusted XML files (Pascal VOC annotations) into ElementTree elements, safely.

The document is parsed by expat and built with :class:`xml.etree.ElementTree.TreeBuilder`,
with these rules (every refusal is an :class:`~catalog.errors.AnnotationFormatError` naming
the file and the line):

* a document type declaration (``<!DOCTYPE ...>``), and with it every entity declaration,
  external entity and external DTD, is refused: no entity expansion ("billion laughs"), no
  file or network access, whatever the expat version. Only the five predefined entities and
  character references are understood (as XML without a DTD allows);
* processing instructions and comments are ignored;
* elements nested deeper than :data:`MAX_XML_DEPTH`, or more than :data:`MAX_XML_ELEMENTS`
  elements, are refused;
* the file is read with :func:`catalog.safe_parse.read_bytes` (regular files only) and refused
  beyond :data:`MAX_XML_BYTES`.

defusedxml is not needed: the same rules hold whether it is installed or not.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any
from xml.parsers import expat

from .errors import AnnotationFormatError
from .safe_parse import read_bytes

__all__ = ["MAX_XML_BYTES", "MAX_XML_DEPTH", "MAX_XML_ELEMENTS", "parse_xml_bytes", "read_xml_file"]

#: Largest XML file read (a Pascal VOC annotation is a few KiB).
MAX_XML_BYTES = 4 * 1024 * 1024
#: Deepest element nesting accepted (the root is 1).
MAX_XML_DEPTH = 64
#: Most elements accepted in one document.
MAX_XML_ELEMENTS = 200_000


class _Refused(Exception):
    """Raised inside expat callbacks; turned into an AnnotationFormatError."""


def parse_xml_bytes(data: bytes, path: str) -> ET.Element:
    """The root element of the XML document ``data`` read from ``path`` (named in errors).

    Raises:
        AnnotationFormatError: not well-formed XML, an unknown or unsupported declared encoding,
            a DTD or entity declaration, too deep or too many elements.

    Example:
        >>> parse_xml_bytes(b"<a><b>1 &amp; 2</b></a>", "x.xml").find("b").text
        '1 & 2'
    """
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
            f"{path}: XML refused near line {parser.CurrentLineNumber}: {exc}"
        ) from None
    except expat.ExpatError as exc:
        raise AnnotationFormatError(f"{path}: not well-formed XML: {exc}") from None
    except (LookupError, ValueError) as exc:  # an unknown or multi-byte declared encoding
        raise AnnotationFormatError(f"{path}: XML in an unsupported encoding: {exc}") from None
    return builder.close()


def read_xml_file(path: str, *, limit: int = MAX_XML_BYTES) -> ET.Element:
    """The root element of the XML file ``path``, read and parsed under the rules above.

    Raises:
        FileNotFoundError, PermissionError: the file cannot be opened.
        AnnotationFormatError: not a regular file, larger than ``limit`` bytes, or refused by
            :func:`parse_xml_bytes`.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("wb", suffix=".xml", delete=False) as f:
        ...     _ = f.write(b"<annotation><size/></annotation>")
        >>> read_xml_file(f.name).tag
        'annotation'
    """
    return parse_xml_bytes(read_bytes(path, limit=limit, what="XML file"), path)
