"""Encoding the numbers of annotation columns: exact-float checks, fixed-point and int
encoding, polygon and keypoint streams, and laying streams out record by record.

Helpers of :mod:`catalog.record_split` (which decides what goes into the columns).
"""

from __future__ import annotations

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
    raw = np.frombuffer(data, dtype=np.uint8)
    head, full = len(_PICKLE_HEAD), k // _BATCH
    stride = 9 * _BATCH + 2
    items = [raw[head : head + full * stride].reshape(full, stride)[:, 1 : 1 + 9 * _BATCH]]
    rest = k - full * _BATCH
    if rest:
        start = head + full * stride + 1
        items.append(raw[start : start + 9 * rest])
    cells = np.concatenate([part.reshape(-1) for part in items]).reshape(k, 9)
    if not bool((cells[:, 0] == ord("G")).all()):
        return None
    return np.ascontiguousarray(cells[:, 1:]).view(">f8").reshape(-1).astype(np.float64)


class _Flat:
    """The numbers of a list of lists, iterated in order without building a flat list."""

    __slots__ = ("lists",)

    def __init__(self, lists: list[list[Any]]) -> None:
        self.lists = lists

    def iter(self) -> Iterable[Any]:
        return chain.from_iterable(self.lists)


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any]]:
    """Per annotation: coordinate count, and the shapes stream ([count, lengths...]) with
    its per-annotation sizes; the coordinates. Marks annotations with a non-list polygon."""
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
    return per_anno, shape, sizes, polys


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
