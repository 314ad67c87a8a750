"""RecordColumns: compact numpy columns describing each record of a SerializedList.

Extracted while serializing (image height and width, per-annotation category ids and crowd
flags) so that samplers can compute aspect-ratio groups and repeat factors, and
``get_detection_dataset_dicts`` can filter, without unpickling a record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RecordColumns", "concat_columns"]


class RecordColumns:
    """Compact numpy columns describing each record, extracted while serializing.

    Attributes:
        heights: int32 (N,), the record's ``height`` (-1 when absent).
        widths: int32 (N,), the record's ``width`` (-1 when absent).
        category_ids: int32 (M,), the ``category_id`` of every annotation of every record,
            record after record (-1 when an annotation has none).
        iscrowd: uint8 (M,), the ``iscrowd`` flag of the same annotations (0 when absent).
        category_offsets: int64 (N + 1,), record i's annotations are
            ``category_ids[category_offsets[i]:category_offsets[i + 1]]``.

    Example:
        >>> from catalog import SerializedList
        >>> cols = SerializedList([{"height": 2, "width": 3, "annotations": []}]).columns
        >>> cols.heights.tolist(), cols.num_annotations().tolist()
        ([2], [0])
    """

    __slots__ = ("heights", "widths", "category_ids", "iscrowd", "category_offsets", "__weakref__")

    def __init__(
        self,
        heights: np.ndarray,
        widths: np.ndarray,
        category_ids: np.ndarray,
        iscrowd: np.ndarray,
        category_offsets: np.ndarray,
    ) -> None:
        self.heights = np.asarray(heights, dtype=np.int32)
        self.widths = np.asarray(widths, dtype=np.int32)
        self.category_ids = np.asarray(category_ids, dtype=np.int32)
        self.iscrowd = np.asarray(iscrowd, dtype=np.uint8)
        self.category_offsets = np.asarray(category_offsets, dtype=np.int64)
        n = len(self.heights)
        if len(self.widths) != n or len(self.category_offsets) != n + 1:
            raise ValueError(
                f"record columns disagree: {n} heights, {len(self.widths)} widths, "
                f"{len(self.category_offsets)} category offsets (expected {n + 1})"
            )
        if len(self.iscrowd) != len(self.category_ids):
            raise ValueError(
                f"record columns disagree: {len(self.category_ids)} category ids but "
                f"{len(self.iscrowd)} crowd flags"
            )
        for arr in self.arrays():
            arr.flags.writeable = False

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The five arrays, in constructor order."""
        return (self.heights, self.widths, self.category_ids, self.iscrowd, self.category_offsets)

    def __len__(self) -> int:
        return len(self.heights)

    @property
    def nbytes(self) -> int:
        """Total bytes of the five arrays."""
        return int(sum(a.nbytes for a in self.arrays()))

    def num_annotations(self) -> np.ndarray:
        """int64 (N,): the number of annotations of each record."""
        return np.diff(self.category_offsets)

    def categories_of(self, index: int) -> np.ndarray:
        """The category ids of record ``index``'s annotations (a read-only view)."""
        return self.category_ids[self.category_offsets[index] : self.category_offsets[index + 1]]

    def aspect_ratios(self) -> np.ndarray:
        """float64 (N,): width / height of each record (NaN where either is missing)."""
        h = self.heights.astype(np.float64)
        w = self.widths.astype(np.float64)
        valid = (h > 0) & (w > 0)
        out = np.full(len(h), np.nan)
        np.divide(w, h, out=out, where=valid)
        return out

    def take(self, indices: np.ndarray) -> RecordColumns:
        """The columns of the records at ``indices`` (int64 array, any order)."""
        indices = np.asarray(indices, dtype=np.int64)
        starts = self.category_offsets[indices]
        counts = self.category_offsets[indices + 1] - starts
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = _ranges_to_index(starts, counts, int(offsets[-1]))
        return RecordColumns(
            self.heights[indices],
            self.widths[indices],
            self.category_ids[flat],
            self.iscrowd[flat],
            offsets,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordColumns, self.arrays())


def _ranges_to_index(starts: np.ndarray, counts: np.ndarray, total: int) -> np.ndarray:
    """Concatenate ``arange(s, s + c)`` for every (s, c) pair, vectorized."""
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    nonzero = counts > 0
    starts = starts[nonzero]
    counts = counts[nonzero]
    steps = np.ones(total, dtype=np.int64)
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    steps[first] = starts
    steps[first[1:]] -= starts[:-1] + counts[:-1] - 1
    return np.cumsum(steps)


def _int_column(values: list[Any]) -> np.ndarray:
    """int32 column from Python values; anything that is not an integer becomes -1."""
    if not values:
        return np.zeros(0, dtype=np.int32)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):  # ragged or exotic values
        arr = None
    if (
        arr is not None
        and arr.dtype.kind in "iu"
        and arr.ndim == 1
        and _INT32.min <= arr.min()
        and arr.max() <= _INT32.max
    ):
        return arr.astype(np.int32)
    return np.asarray([_as_int32_or_minus_one(v) for v in values], dtype=np.int32)


_INT32 = np.iinfo(np.int32)


def _as_int32_or_minus_one(value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if _INT32.min <= value <= _INT32.max:
            return int(value)
    return -1


def _flag_column(values: list[Any]) -> np.ndarray:
    """uint8 column: 1 where the value is truthy, else 0."""
    if not values:
        return np.zeros(0, dtype=np.uint8)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        arr = None
    if arr is not None and arr.dtype.kind in "iub" and arr.ndim == 1:
        return (arr != 0).astype(np.uint8)
    return np.asarray([1 if v else 0 for v in values], dtype=np.uint8)


def _columns_of(record: dict) -> tuple[int, int, list[int], list[int]]:
    height = record.get("height", -1)
    width = record.get("width", -1)
    annos = record.get("annotations")
    if not isinstance(annos, (list, tuple)):
        annos = ()  # no annotations, or not a sequence of them: nothing for the columns
    cats: list[int] = []
    crowd: list[int] = []
    for anno in annos:
        if isinstance(anno, dict):
            cats.append(anno.get("category_id", -1))
            crowd.append(1 if anno.get("iscrowd", 0) else 0)
    return height, width, cats, crowd


def concat_columns(parts: Sequence[RecordColumns]) -> RecordColumns:
    """The columns of several record lists joined in order (new arrays).

    Example:
        >>> a = RecordColumns([1], [2], [5], [0], [0, 1])
        >>> b = RecordColumns([3], [4], [6, 7], [0, 1], [0, 2])
        >>> c = concat_columns([a, b])
        >>> c.heights.tolist(), c.category_ids.tolist(), c.category_offsets.tolist()
        ([1, 3], [5, 6, 7], [0, 1, 3])
    """
    if len(parts) == 1:
        return parts[0]
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    for part in parts:
        offsets.append(part.category_offsets[1:] + base)
        base += int(part.category_offsets[-1])
    return RecordColumns(
        np.concatenate([np.zeros(0, np.int32)] + [p.heights for p in parts]),
        np.concatenate([np.zeros(0, np.int32)] + [p.widths for p in parts]),
        np.concatenate([np.zeros(0, np.int32)] + [p.category_ids for p in parts]),
        np.concatenate([np.zeros(0, np.uint8)] + [p.iscrowd for p in parts]),
        np.concatenate(offsets),
    )
