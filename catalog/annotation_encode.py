"""Encoding the numbers of annotation columns: exact-float checks, fixed-point and int
encoding, polygon and keypoint streams, and laying streams out record by record.

Helpers of :mod:`catalog.record_split` (which decides what goes into the columns).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from itertools import chain, compress, repeat
from operator import is_
from typing import Any

import numpy as np

from .annotation_columns import (
    _INT32_MAX,
    _INT32_MIN,
    _fixed_point,
    _ints,
    _per_record,
    _place,
    _within,
)

__all__: list[str] = []


def _mask(values: Iterable[Any], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=bool, count=count)


def _per_rec_sum(per_anno: np.ndarray, n: np.ndarray) -> np.ndarray:
    cum = np.zeros(len(per_anno) + 1, dtype=np.int64)
    np.cumsum(per_anno, out=cum[1:])
    ends = np.cumsum(n)
    return cum[ends] - cum[ends - n]


def _int_mask(vals: list[Any], allowed: frozenset[int] | None = None) -> np.ndarray:
    if allowed is not None:
        return _mask(map(allowed.__contains__, vals), len(vals))
    if not vals or (_INT32_MIN <= min(vals) and max(vals) <= _INT32_MAX):
        return np.ones(len(vals), dtype=bool)
    return _mask((_INT32_MIN <= v <= _INT32_MAX for v in vals), len(vals))


_PICKLE_HEAD = b"\x80\x02]q\x00"
_BATCH = 1000  # items per MARK ... APPENDS batch of the pickle module
_BINFLOAT, _MARK, _APPENDS, _EMPTY_LIST = ord("G"), ord("("), ord("e"), ord("]")
_FAST_HEAD = b"\x80\x02]"  # protocol 2, an empty list (no memo put in fast mode)


def _exact_floats(values: list[Any]) -> np.ndarray | None:
    """``values`` as float64 if every one is exactly a ``float`` (not an int, a bool or a
    float subclass such as ``np.float64``), else None.

    Pickle (C speed) writes an exact float as the 9 bytes ``G`` + big-endian double and any
    other object starting with another opcode, so the list's protocol-2 pickle has ``G`` at
    every item position if and only if every item is a float; the doubles are then read
    straight out of it.

    Example:
        >>> _exact_floats([1.5, 2.25]).tolist(), _exact_floats([1.5, 2])
        ([1.5, 2.25], None)
    """
    k = len(values)
    if k < 2:
        return None if any(type(v) is not float for v in values) else np.asarray(
            values, dtype=np.float64
        )
    data = pickle.dumps(values, protocol=2)
    batches = -(-k // _BATCH)
    if len(data) != len(_PICKLE_HEAD) + 2 * batches + 9 * k + 1 or not data.startswith(
        _PICKLE_HEAD
    ):
        return None
    # Strided views of the pickle: full batches are rows of ``_BATCH`` 9-byte items, each
    # batch framed by MARK and APPENDS; the doubles are read (byte-swapped) in one copy.
    full, rest = divmod(k, _BATCH)
    stride = 9 * _BATCH + 2
    first = len(_PICKLE_HEAD) + 1  # the first item's opcode
    views = []
    if full:
        views.append(((full, _BATCH), first, (stride, 9)))
    if rest:
        views.append(((rest,), first + full * stride, (9,)))
    for shape, offset, strides in views:
        opcodes = np.ndarray(shape, dtype=np.uint8, buffer=data, offset=offset, strides=strides)
        if not bool((opcodes == _BINFLOAT).all()):
            return None
    out = np.empty(k, dtype=np.float64)
    done = 0
    for shape, offset, strides in views:
        size = int(np.prod(shape))
        out[done : done + size].reshape(shape)[...] = np.ndarray(
            shape, dtype=">f8", buffer=data, offset=offset + 1, strides=strides
        )
        done += size
    return out


_UNKNOWN: Any = object()  # _uniform_floats could not decide: use _exact_floats


def _uniform_floats(lists: list[list[Any]], width: int) -> Any:
    """The numbers of ``lists`` (exact lists of ``width`` items each) as float64 in order if
    every one is exactly a ``float``, else None; :data:`_UNKNOWN` where this cannot tell
    (then :func:`_exact_floats` of the flattened numbers decides, as before).

    The same idea as :func:`_exact_floats` without building a flat list: the lists are
    pickled as they are (protocol 2, no memo), where an exact float is ``G`` + 8 bytes and
    every list ``]`` (``(`` items ``e``), batched by 1000 inside ``(`` ... ``e`` in the outer
    list. With every list of ``width`` numbers that layout is periodic: the opcodes, the
    length and the ``G`` of every number are checked through strided views, and the doubles
    read out of the pickle in one copy.

    Example:
        >>> _uniform_floats([[1.5, 2.0], [3.0, 4.25]], 2).tolist()
        [1.5, 2.0, 3.0, 4.25]
        >>> _uniform_floats([[1.5, 2.0], [3.0, 4]], 2) is None
        True
    """
    count = len(lists)
    if count < 2 or not 2 <= width <= _BATCH:
        return _UNKNOWN
    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=2)
    pickler.fast = True  # no memo: the layout depends only on the lengths
    try:
        pickler.dump(lists)
    except Exception:  # noqa: BLE001 - a cycle, an unpicklable value: the flat way decides
        return _UNKNOWN
    data = stream.getvalue()
    size = 9 * width + 3  # one inner list: ] ( G... e
    full, rest = divmod(count, _BATCH)
    stride = _BATCH * size + 2  # one outer batch: ( lists... e
    if len(data) != 3 + count * size + 2 * (full + (rest > 0)) + 1 or not (
        data.startswith(_FAST_HEAD) and data.endswith(b".")
    ):
        return None
    blocks = [(full, _BATCH, 3)] if full else []
    if rest:
        blocks.append((1, rest, 3 + full * stride))

    def view(dtype: str, shape: tuple[int, ...], offset: int, steps: tuple[int, ...]) -> Any:
        return np.ndarray(shape, dtype=dtype, buffer=data, offset=offset, strides=steps)

    for batches, per, base in blocks:
        checks = (
            (view("u1", (batches,), base, (stride,)), _MARK),
            (view("u1", (batches,), base + 1 + per * size, (stride,)), _APPENDS),
            (view("u1", (batches, per), base + 1, (stride, size)), _EMPTY_LIST),
            (view("u1", (batches, per), base + 2, (stride, size)), _MARK),
            (view("u1", (batches, per), base + 3 + 9 * width, (stride, size)), _APPENDS),
            (view("u1", (batches, per, width), base + 3, (stride, size, 9)), _BINFLOAT),
        )
        if not all(bool((opcodes == code).all()) for opcodes, code in checks):
            return None
    out = np.empty(count * width, dtype=np.float64)
    done = 0
    for batches, per, base in blocks:
        shape = (batches, per, width)
        out[done : done + batches * per * width].reshape(shape)[...] = view(
            ">f8", shape, base + 4, (stride, size, 9)
        )
        done += batches * per * width
    return out


class _Flat:
    """The numbers of a list of lists, iterated in order without building a flat list;
    ``width`` is the length of every list when they all have the same (else None)."""

    __slots__ = ("lists", "width")

    def __init__(self, lists: list[list[Any]], width: int | None = None) -> None:
        self.lists = lists
        self.width = width

    def iter(self) -> Iterable[Any]:
        return chain.from_iterable(self.lists)

    def floats(self) -> np.ndarray | None:
        """:func:`_exact_floats` of the numbers, without a flat list when the lists are uniform."""
        if self.width is not None:
            arr = _uniform_floats(self.lists, self.width)
            if arr is not _UNKNOWN:
                return arr
        return _exact_floats(list(self.iter()))


def _by_record(
    streams: list[tuple[Any, np.ndarray]], n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Streams of per-annotation segments laid out record by record, stream after stream;
    and the per-record totals."""
    if not streams:
        return np.zeros(0, np.int64), np.zeros(len(n), np.int64)
    counts = np.stack([_per_rec_sum(c, n) for _, c in streams], axis=1)
    width = len(streams)
    rows = np.arange(len(n), dtype=np.int64) * width
    parts = [(rows + s, np.asarray(data, dtype=np.int64)) for s, (data, _) in enumerate(streams)]
    return _place(counts, parts), counts.sum(axis=1)


def _mixed(values: list[Any], kind: type = float) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point floats (``kind=float``) or ints (``kind=int``); any value of another type
    is marked not representable."""
    wanted = _mask(map(is_, map(type, values), repeat(kind)), len(values))
    enc = np.zeros(len(values), dtype=np.int64)
    ok = np.zeros(len(values), dtype=bool)
    if wanted.any():
        encode = _fixed_point if kind is float else _ints
        enc[wanted], ok[wanted] = encode(list(compress(values, wanted.tolist())))
    return enc, ok


def _fast_polygons(
    vals: list[list[Any]], m: int, bad: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any], int | None]:
    """Per annotation: coordinate count, and the shapes stream ([count, lengths...]) with
    its per-annotation sizes; the polygons (lists of coordinates); the length of every
    polygon when they all have the same (else None). Marks annotations with a non-list
    polygon."""
    counts = np.fromiter(map(len, vals), dtype=np.int64, count=m)
    polys = list(chain.from_iterable(vals))
    if polys and set(map(type, polys)) != {list}:
        lists = _mask(map(is_, map(type, polys), repeat(list)), len(polys))
        bad |= _per_record(~lists, counts)
        polys = [p if ok else [] for p, ok in zip(polys, lists.tolist(), strict=True)]
    lengths = np.fromiter(map(len, polys), dtype=np.int64, count=len(polys))
    per_anno = _per_rec_sum(lengths, counts)
    sizes = counts + 1
    shape = np.zeros(int(sizes.sum()), dtype=np.int64)
    firsts = np.cumsum(sizes) - sizes
    shape[firsts] = counts
    shape[np.repeat(firsts + 1, counts) + _within(counts)] = lengths
    width = int(lengths[0]) if len(lengths) and lengths.min() == lengths.max() else None
    return per_anno, shape, sizes, polys, width


def _fast_keypoints(
    vals: list[list[Any]], m: int, bad: np.ndarray
) -> tuple[np.ndarray, list[Any], tuple[list[Any], np.ndarray]]:
    """Per annotation the number of keypoints; the (x, y) coordinates in pairs; the
    visibilities and their per-annotation counts. Marks lengths not a multiple of 3."""
    lengths = np.fromiter(map(len, vals), dtype=np.int64, count=m)
    odd = lengths % 3 != 0
    if odd.any():
        bad |= odd
        vals = [kp if not o else [] for kp, o in zip(vals, odd.tolist(), strict=True)]
        lengths[odd] = 0
    flat = list(chain.from_iterable(vals))
    xy = list(chain.from_iterable(zip(flat[0::3], flat[1::3], strict=True)))
    triplets = lengths // 3
    return triplets, xy, (flat[2::3], triplets)


def _polygons(vals: list[Any], coords: list[Any], shapes: list[int]) -> bool:
    polys = list(chain.from_iterable(vals))
    if polys and set(map(type, polys)) != {list}:
        return False
    lengths = list(map(len, polys))
    pos = 0
    for count in map(len, vals):
        shapes.append(count)
        shapes += lengths[pos : pos + count]
        pos += count
    coords.extend(chain.from_iterable(polys))
    return True


def _keypoints(vals: list[Any], coords: list[Any], vis: list[Any], shapes: list[int]) -> bool:
    lengths = list(map(len, vals))
    if any(length % 3 for length in lengths):
        return False
    visibility = list(chain.from_iterable(kp[2::3] for kp in vals))
    if visibility and set(map(type, visibility)) != {int}:
        return False
    for kp in vals:
        coords.extend(chain.from_iterable(zip(kp[0::3], kp[1::3], strict=True)))
    vis += visibility
    shapes += [length // 3 for length in lengths]
    return True


_STR = frozenset({str})


def _str_keys(annotation: dict) -> bool:
    """Whether every key is exactly a str (equal keys of other types would share a schema)."""
    return set(map(type, annotation)) <= _STR


_ANNOTATIONS = repeat("annotations")


def _candidates(records: list[Any]) -> tuple[list[int], list[list[Any]], list[int] | None]:
    """The positions of the records that are dicts with a non-empty list of annotations, and
    those lists (C-level passes, no Python code per record); the number of annotations of
    every record when all are dicts with a list of annotations, else None."""
    count = len(records)
    positions: Any = range(count)
    dicts = records
    if set(map(type, records)) != {dict}:
        mask = list(map(is_, map(type, records), repeat(dict)))
        positions = list(compress(positions, mask))
        dicts = list(compress(records, mask))
    alists = list(map(dict.get, dicts, _ANNOTATIONS))
    if set(map(type, alists)) != {list}:
        mask = list(map(is_, map(type, alists), repeat(list)))
        positions = list(compress(positions, mask))
        alists = list(compress(alists, mask))
    nonempty = list(map(len, alists))
    all_counts = nonempty if len(nonempty) == count else None
    if 0 in nonempty:
        positions = list(compress(positions, nonempty))
        alists = list(compress(alists, nonempty))
    return list(positions), alists, all_counts
