"""Columnar storage of the annotations of a SerializedList's records.

A detection record is mostly numbers: boxes, polygons and keypoints as lists of floats, plus
small ints (category id, crowd flag, box mode) repeated under the same keys in every
annotation. Pickling them inside every record spends 9 bytes per float and re-writes the key
names of every annotation. Here, a record whose annotations can be stored exactly is split:

* the record dict with its ``"annotations"`` value replaced (a *skeleton*) is pickled as
  before, holding any annotation values the columns do not take (RLE masks, extra keys);
* the annotations' numbers go into flat columns: boxes, polygon and keypoint coordinates as
  fixed-point ``int32`` (value x 100, used only when that gives back the very same float) or
  as plain ints, keypoint visibilities as ints, polygon and keypoint lengths in a shape
  stream; category ids and crowd flags are the :class:`~catalog.record_columns.RecordColumns`
  columns the samplers read anyway; the annotations' key order and box mode are one entry of
  a small schema table shared by the records.

Every record is rebuilt on access exactly as it was given: the same keys in the same order,
the same values and Python types (a float stays a float, an int an int). Anything the columns
cannot represent exactly (mixed int and float coordinates, a coordinate with more than two
decimals, annotations with different keys, a dict subclass, ...) keeps the pickled form, per
record (or, for single keys such as an RLE ``segmentation``, inside the skeleton).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np

from .box_mode import BoxMode

__all__ = ["ARRAY_NAMES", "AnnotationColumns", "KIND_FLOAT", "KIND_INT", "KIND_PICKLED"]

#: How a record is stored: pickled as is, or skeleton + columns with fixed-point float or int
#: coordinates.
KIND_PICKLED, KIND_FLOAT, KIND_INT = 0, 1, 2
#: Code of an annotation key in a schema.
C_LEFT, C_BBOX, C_CAT, C_CROWD, C_MODE, C_POLY, C_KPTS = range(7)
_SCALE = 100.0
_MAX_SCHEMAS = 255
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MODE_TYPES = (int, BoxMode)
_FLOAT, _INT = frozenset((float,)), frozenset((int,))
_CROWD_VALUES = frozenset((0, 1))

_ARRAY_DTYPES = (
    ("kinds", np.uint8),
    ("schema_ids", np.uint8),
    ("value_offsets", np.int64),
    ("values", np.int32),
    ("shape_offsets", np.int64),
    ("shapes", np.int32),
    ("schemas", np.uint8),
)
#: The names of the arrays, in :meth:`AnnotationColumns.arrays` order.
ARRAY_NAMES = tuple(name for name, _ in _ARRAY_DTYPES)


class AnnotationColumns:
    """The columns holding the annotations of a SerializedList's columnar records.

    Attributes:
        kinds: uint8 (N,): :data:`KIND_PICKLED`, :data:`KIND_FLOAT` or :data:`KIND_INT`.
        schema_ids: uint8 (N,): the record's entry in the schema table (0 when pickled).
        value_offsets: int64 (N + 1,): record i's numbers are ``values[vo[i]:vo[i + 1]]``.
        values: int32: coordinates (x 100 for KIND_FLOAT) then keypoint visibilities.
        shape_offsets: int64 (N + 1,): record i's shapes are ``shapes[so[i]:so[i + 1]]``.
        shapes: int32: per annotation, its polygon count then each polygon's length, and
            its number of keypoints, in the order of the schema's keys.
        schemas: uint8: the pickled schema table, ``[(keys, codes, box mode), ...]``.

    Example:
        >>> from catalog import SerializedList
        >>> sl = SerializedList([{"annotations": [{"bbox": [1.5, 2.0, 3.25, 4.0]}]}],
        ...                     columnar=True)
        >>> sl.annotation_columns.kinds.tolist(), sl.annotation_columns.values.tolist()
        ([1], [150, 200, 325, 400])
    """

    __slots__ = (*ARRAY_NAMES, "_plans", "__weakref__")

    def __init__(self, *arrays: Any) -> None:
        if len(arrays) != len(_ARRAY_DTYPES):
            raise ValueError(f"{len(_ARRAY_DTYPES)} annotation arrays expected, got {len(arrays)}")
        for (name, dtype), arr in zip(_ARRAY_DTYPES, arrays, strict=True):
            arr = np.asarray(arr, dtype=dtype).reshape(-1)
            if arr.flags.writeable:
                arr = arr.view()
                arr.flags.writeable = False
            setattr(self, name, arr)
        n = len(self.kinds)
        if len(self.schema_ids) != n or len(self.value_offsets) != n + 1 or len(
            self.shape_offsets
        ) != n + 1:
            raise ValueError(
                f"annotation columns disagree: {n} kinds, {len(self.schema_ids)} schema ids, "
                f"{len(self.value_offsets)} value offsets, {len(self.shape_offsets)} shape "
                f"offsets (expected {n + 1})"
            )
        for offsets, data in ((self.value_offsets, self.values), (self.shape_offsets, self.shapes)):
            if n and (
                int(offsets[0]) != 0
                or int(offsets[-1]) != len(data)
                or bool((offsets[1:] < offsets[:-1]).any())  # no int64 temporary per record
            ):
                raise ValueError("annotation column offsets are not monotonic from 0 to the end")
        self._plans: list[Any] | None = None

    @classmethod
    def empty(cls, n: int) -> AnnotationColumns:
        """Columns for ``n`` records that are all stored pickled."""
        zeros = np.zeros(n + 1, dtype=np.int64)
        none = np.zeros(n, dtype=np.uint8)
        blob = np.frombuffer(pickle.dumps([None]), dtype=np.uint8)
        return cls(none, none, zeros, np.zeros(0, np.int32), zeros, np.zeros(0, np.int32), blob)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The seven arrays, in constructor order (:data:`ARRAY_NAMES`)."""
        return tuple(getattr(self, name) for name in ARRAY_NAMES)

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def nbytes(self) -> int:
        """Total bytes of the arrays."""
        return int(sum(a.nbytes for a in self.arrays()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (AnnotationColumns, self.arrays())

    def plans(self) -> list[Any]:
        """The schema table, decoded once (it is stored with the records, as trusted as they)."""
        if self._plans is None:
            plans = pickle.loads(self.schemas.tobytes()) if len(self.schemas) else [None]
            if not isinstance(plans, list) or not all(
                p is None or (isinstance(p, tuple) and len(p) == 3) for p in plans
            ):
                raise ValueError("malformed annotation schema table")
            self._plans = plans
        return self._plans

    def rebuild(
        self, skeleton: Any, i: int, kind: int, category_ids: np.ndarray, iscrowd: np.ndarray,
        lo: int, hi: int,
    ) -> Any:
        """Put record ``i``'s annotations back into its unpickled ``skeleton`` (in place)."""
        keys, codes, mode = (self._plans or self.plans())[int(self.schema_ids[i])]
        n = hi - lo
        v0, v1 = self.value_offsets[i : i + 2].tolist()
        s = self.values[v0:v1]
        numbers = (s / _SCALE).tolist() if kind == KIND_FLOAT else s.tolist()
        shapes: list[int] = []
        if C_POLY in codes or C_KPTS in codes:
            q0, q1 = self.shape_offsets[i : i + 2].tolist()
            shapes = self.shapes[q0:q1].tolist()
        left = skeleton["annotations"]
        columns: list[Any] = []
        p = q = li = 0
        for code in codes:
            if code == C_BBOX:
                columns.append([numbers[j : j + 4] for j in range(p, p + 4 * n, 4)])
                p += 4 * n
            elif code == C_CAT:
                columns.append(category_ids[lo:hi].tolist())
            elif code == C_CROWD:
                columns.append(iscrowd[lo:hi].tolist())
            elif code == C_MODE:
                columns.append([mode] * n)
            elif code == C_LEFT:
                columns.append(left[li])
                li += 1
            elif code == C_POLY:
                segms = []
                for _ in range(n):
                    count = shapes[q]
                    if count == 1:  # the common case: one polygon
                        length = shapes[q + 1]
                        segms.append([numbers[p : p + length]])
                        p += length
                        q += 2
                        continue
                    polys = []
                    for length in shapes[q + 1 : q + 1 + count]:
                        polys.append(numbers[p : p + length])
                        p += length
                    q += 1 + count
                    segms.append(polys)
                columns.append(segms)
            else:  # C_KPTS: (x, y) pairs among the coordinates, visibilities at the end
                counts = shapes[q : q + n]
                q += n
                vis = s[len(s) - sum(counts) :].tolist()
                kps, v = [], 0
                for t in counts:
                    pairs = numbers[p : p + 2 * t]
                    kps.append(
                        list(chain.from_iterable(
                            zip(pairs[0::2], pairs[1::2], vis[v : v + t], strict=True)
                        ))
                    )  # fmt: skip
                    p += 2 * t
                    v += t
                columns.append(kps)
        if keys:
            rows = zip(*columns, strict=True)
            skeleton["annotations"] = list(map(dict, map(zip, repeat(keys, n), rows)))
        else:
            skeleton["annotations"] = [{} for _ in range(n)]
        return skeleton


def _cat(parts: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """The integer arrays ``parts`` joined, cast to ``dtype`` as they are copied (one pass)."""
    return np.concatenate([np.zeros(0, dtype), *parts], dtype=dtype, casting="unsafe")


def _per_record(bad_values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per record: whether any of its ``counts`` consecutive values is bad."""
    cum = np.zeros(len(bad_values) + 1, dtype=np.int64)
    np.cumsum(bad_values, out=cum[1:])
    ends = np.cumsum(counts)
    return (cum[ends] - cum[ends - counts]) > 0


def _fixed_point(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Floats as round(v x 100) and whether that gives back exactly v (sign of zero too)."""
    arr = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        k = arr * _SCALE
        np.rint(k, out=k)
        ok = k / _SCALE == arr
        ok &= np.abs(k) <= _INT32_MAX
        zero = arr == 0
        if zero.any():  # -0.0 is not stored (it would come back as 0.0)
            ok &= ~(zero & np.signbit(arr))
        np.copyto(k, 0.0, where=~ok)
        return k.astype(np.int64), ok


def _ints(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    try:
        arr = np.asarray(values, dtype=np.int64)
    except OverflowError:
        arr = np.asarray([v if _INT32_MIN <= v <= _INT32_MAX else 2**40 for v in values])
    ok = (arr >= _INT32_MIN) & (arr <= _INT32_MAX)
    return np.where(ok, arr, 0).astype(np.int64), ok


def _within(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for every count c, concatenated."""
    total = int(counts.sum())
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - firsts


def _place(counts: np.ndarray, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Scatter segments into one array: ``counts`` (int64, any shape) is the length of every
    segment in output order (row-major); each part is ``(segment numbers, data)``, its data the
    concatenation of those segments in the order given."""
    flat = counts.reshape(-1)
    total = int(flat.sum())
    if len(parts) == 1:  # one part holding every number in output order: nothing moves
        segments, data = parts[0]
        if len(data) == total and (len(segments) < 2 or bool((segments[1:] > segments[:-1]).all())):
            if int(flat[segments].sum()) == total:
                return np.asarray(data).astype(np.int64, copy=False)
    starts = np.cumsum(flat) - flat
    out = np.zeros(total, dtype=np.int64)
    for segments, data in parts:
        sizes = flat[segments]
        # each number goes to its segment's output start + its offset in the segment, i.e.
        # its position in ``data`` shifted by (output start - start in data) of its segment
        shift = starts[segments] - (np.cumsum(sizes) - sizes)
        where = np.repeat(shift, sizes)
        where += np.arange(len(where), dtype=np.int64)
        out[where] = data
    return out
