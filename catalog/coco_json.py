"""Parsing an untrusted COCO json file into Python objects, with the same verdict whatever the
parser (orjson when installed, else the json module) and the same verdict as the typed msgspec
path (:mod:`catalog.coco_typed`).

The accepted language is RFC 8259 JSON in UTF-8, with these rules on every path:

* bytes that are not UTF-8 (a byte order mark included), lone UTF-16 surrogate escapes
  (``"\\ud800"``), ``NaN`` / ``Infinity`` and trailing data: :class:`AnnotationFormatError`;
* arrays and objects nested deeper than :data:`~catalog.coco_common.MAX_JSON_DEPTH`:
  :class:`AnnotationFormatError`, decided by a scan of the bytes *before* any parser runs
  (orjson 3.8 has no depth limit and crashes the process on very deep input);
* numbers too large for a double, or integers of more than 4,300 digits, are refused only where
  the loader reads them: elsewhere (``info``, unread keys) they are ignored, as msgspec does.
  orjson refuses them anywhere, so the file is then parsed with the json module, which reads
  such a number as an infinity, refused by every range check;
* integers are exact: orjson turns an integer beyond 64 bits into a float, so a file holding a
  run of 19 or more digits is parsed with the json module (a huge id is then refused as an
  int out of range on every path, never accepted as a float on one of them).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import numpy as np

from .coco_common import MAX_JSON_DEPTH
from .errors import AnnotationFormatError

__all__ = [
    "PARSERS",
    "best_parser",
    "check_utf8",
    "json_depth",
    "parse_json_bytes",
    "read_json_file",
]

try:  # orjson parses large files several times faster than json
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None

#: The Python parsers, fastest first ("orjson" only when installed).
PARSERS = ("orjson", "json") if _orjson is not None else ("json",)

_STRUCTURAL = b'"[]{}'
_DELETE = bytes(b for b in range(256) if b not in _STRUCTURAL)
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[list(b"[{")] = 1
_DEPTH_STEP[list(b"]}")] = -1
_SURROGATE_HINT = re.compile(r"\\u[dD][89a-fA-F]")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.S)
_UTF8_CHUNK = 1 << 20
_DIGIT_TABLE = bytes(ord("0") if 48 <= b <= 57 else ord(".") for b in range(256))
#: 19 digits: the shortest integer orjson may turn into a float (below -2**63).
_LONG_DIGIT_RUN = b"0" * 19


def best_parser() -> str:
    """The parser used when none is forced: orjson when installed, else json."""
    return PARSERS[0]


def read_json_file(path: str) -> Any:
    """Parse a JSON file under the rules of this module with the best available parser.

    Raises:
        AnnotationFormatError: the file is not valid JSON under those rules (names the file).

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        ...     json.dump({"a": 1}, f)
        >>> read_json_file(f.name)
        {'a': 1}
    """
    with open(path, "rb") as f:
        return parse_json_bytes(f.read(), path)


def parse_json_bytes(data: bytes, path: str, parser: str | None = None) -> Any:
    """Parse JSON bytes read from ``path`` (named in errors) with ``parser`` ("orjson" or
    "json"; default: the best available).

    Raises:
        AnnotationFormatError: not valid JSON under the rules of this module.

    Example:
        >>> parse_json_bytes(b'{"a": [1, 2.5]}', "x.json", "json")
        {'a': [1, 2.5]}
    """
    parser = parser or best_parser()
    if parser not in PARSERS:
        raise ValueError(f"parser must be one of {PARSERS}, got {parser!r}")
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise AnnotationFormatError(
            f"{path}: not valid JSON: nested {depth} deep, deeper than {MAX_JSON_DEPTH}"
        )
    if parser == "orjson" and _LONG_DIGIT_RUN not in data.translate(_DIGIT_TABLE):
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError as exc:
            if "number" not in str(exc):  # only numbers out of range are re-read with json
                raise AnnotationFormatError(f"{path}: not valid JSON: {exc}") from None
    return _json_loads(data, path)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _huge_int(text: str) -> Any:
    # Integers beyond the digit limit of int() read as infinity, like a huge float.
    return int(text) if len(text) <= 4300 else float("inf")


def _json_loads(data: bytes, path: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnnotationFormatError(
            f"{path}: not valid JSON: not UTF-8 near byte {exc.start}"
        ) from None
    old_limit = sys.getrecursionlimit()
    needed = _stack_depth() + MAX_JSON_DEPTH + 50
    try:
        if needed > old_limit:  # depth is already bounded by the scan above
            sys.setrecursionlimit(needed)
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            if "integer string conversion" not in str(exc):
                raise
            value = json.loads(text, parse_constant=_reject_constant, parse_int=_huge_int)
    except (ValueError, RecursionError) as exc:
        raise AnnotationFormatError(f"{path}: not valid JSON: {exc}") from None
    finally:
        if needed > old_limit:
            sys.setrecursionlimit(old_limit)
    if _SURROGATE_HINT.search(text) and _has_lone_surrogate(text):
        raise AnnotationFormatError(f"{path}: not valid JSON: a lone UTF-16 surrogate escape")
    return value


def _stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def _has_lone_surrogate(text: str) -> bool:
    # Only called on text json accepted: every backslash starts an escape inside a string, so
    # scanning escapes left to right tokenizes them exactly.
    pending_high = -1  # end offset of a high surrogate escape waiting for its low half
    for match in _ESCAPE.finditer(text):
        code = int(match.group(1), 16) if match.group(1) else -1
        if pending_high >= 0:
            if match.start() == pending_high and 0xDC00 <= code <= 0xDFFF:
                pending_high = -1
                continue
            return True
        if 0xD800 <= code <= 0xDBFF:
            pending_high = match.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return True
    return pending_high >= 0


def check_utf8(data: bytes, path: str) -> None:
    """Raise unless ``data`` is UTF-8 (no byte order mark check: JSON parsers refuse one).

    Pure-ASCII 1 MiB chunks are skipped with ``bytes.isascii`` (a memory-speed check), so a
    typical COCO file costs a few milliseconds per hundred MiB.

    Raises:
        AnnotationFormatError: an invalid byte sequence (names the file and the byte offset).

    Example:
        >>> check_utf8("é".encode(), "x.json")
    """
    if data.isascii():
        return
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), _UTF8_CHUNK):
        chunk = data[start : start + _UTF8_CHUNK]
        if chunk.isascii() and not decoder.getstate()[0]:
            continue
        try:
            decoder.decode(view[start : start + _UTF8_CHUNK])
        except UnicodeDecodeError as exc:
            raise AnnotationFormatError(
                f"{path}: not valid JSON: not UTF-8 near byte {start + exc.start}"
            ) from None
    try:
        decoder.decode(b"", True)
    except UnicodeDecodeError:
        raise AnnotationFormatError(
            f"{path}: not valid JSON: ends inside a UTF-8 character"
        ) from None


def json_depth(data: bytes) -> int:
    """How deep arrays and objects nest in ``data``: exact for valid JSON, an upper bound on
    what any parser reaches before its first error otherwise. Linear time, no recursion.

    Strings are taken out first: with escapes neutralized, every string shrinks to ``""``
    (its brackets, if any, stay between its quotes and are masked by quote parity).

    Example:
        >>> json_depth(b'{"a": [[1], "]]"], "b": {}}')
        3
    """
    source: bytes | bytearray = _neutralize_escapes(data) if b"\\" in data else data
    reduced = source.translate(None, _DELETE).replace(b'""', b"")
    if not reduced:
        return 0
    codes = np.frombuffer(reduced, np.uint8)
    steps = _DEPTH_STEP[codes]
    if b'"' in reduced:  # brackets inside strings: mask them by quote parity
        inside = np.cumsum(codes == ord('"'), dtype=np.int64) & 1
        steps[inside.astype(bool)] = 0
    return int(max(np.cumsum(steps, dtype=np.int64).max(), 0))


def _neutralize_escapes(data: bytes) -> bytearray:
    """``data`` with the character after every odd run of backslashes replaced by ``x`` (an
    escaped quote must not end a string); the backslashes are dropped later with the rest."""
    codes = np.frombuffer(data, np.uint8)
    slashes = np.flatnonzero(codes == ord("\\"))
    run_start = np.ones(len(slashes), bool)
    run_start[1:] = np.diff(slashes) != 1
    starts = np.flatnonzero(run_start)
    ends = np.append(starts[1:], len(slashes))  # exclusive, in slash indices
    odd = (ends - starts) % 2 == 1
    escaped = slashes[ends[odd] - 1] + 1
    escaped = escaped[escaped < len(data)]
    out = bytearray(data)
    np.frombuffer(out, np.uint8)[escaped] = ord("x")
    return out
