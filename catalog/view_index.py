"""How a record view stores which records it holds: explicit positions, or the gaps.

A filter keeps most records in their order (``filter_empty`` drops about 1% of COCO train).
Storing every kept position costs 4 bytes per kept record in *every* local rank (the view
is built by each rank from the shared records); storing only the dropped positions costs 4
bytes (8 above 2**31 records) per *dropped* record. :func:`encode_index` picks the smaller:

``"index"``
    the positions themselves, any order, repeats allowed (``subset([5, 1, 1])``).
``"gaps"``
    for a strictly increasing index with fewer dropped than kept records: ``gaps[j] =
    dropped[j] - j`` (non-decreasing), so that view position ``i`` is record
    ``i + searchsorted(gaps, i, side="right")`` of the bases' concatenation.

Either array is read-only; :func:`positions` maps view positions to base positions for both.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["IndexKind", "check_stored", "encode_index", "index_dtype", "positions", "view_length"]

IndexKind = Literal["index", "gaps"]


def index_dtype(total: int) -> type:
    """int32 for indices into fewer than 2**31 records (4 bytes per record), else int64.

    Example:
        >>> index_dtype(118_287).__name__, index_dtype(2**31).__name__
        ('int32', 'int64')
    """
    return np.int32 if total <= np.iinfo(np.int32).max else np.int64


def _read_only(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def encode_index(index: np.ndarray, total: int) -> tuple[IndexKind, np.ndarray]:
    """The smaller storage of ``index`` (positions in ``range(total)``, already checked).

    Example:
        >>> kind, gaps = encode_index(np.array([0, 2, 3, 4]), total=5); kind, gaps.tolist()
        ('gaps', [1])
        >>> encode_index(np.array([3, 1]), total=5)[0]
        'index'
    """
    dtype = index_dtype(total)
    index = np.asarray(index).reshape(-1)
    dropped_count = total - len(index)
    if len(index) > 1 and 0 <= dropped_count < len(index) and bool(np.all(index[1:] > index[:-1])):
        mask = np.ones(total, dtype=bool)
        mask[index] = False
        dropped = np.flatnonzero(mask)
        gaps = (dropped - np.arange(len(dropped))).astype(dtype)
        return "gaps", _read_only(gaps)
    return "index", _read_only(np.asarray(index, dtype=dtype))


def view_length(kind: IndexKind, stored: np.ndarray, total: int) -> int:
    """The number of records of a view over ``total`` base records.

    Example:
        >>> view_length("gaps", np.array([1]), 5), view_length("index", np.array([3, 1]), 5)
        (4, 2)
    """
    return total - len(stored) if kind == "gaps" else len(stored)


def positions(kind: IndexKind, stored: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Base positions (int64) of the view positions ``idx`` (in range, non-negative).

    Example:
        >>> positions("gaps", np.array([1, 1]), np.arange(3)).tolist()  # dropped 1 and 2
        [0, 3, 4]
    """
    idx = np.asarray(idx, dtype=np.int64)
    if kind == "gaps":
        return idx + np.searchsorted(stored, idx, side="right")
    return stored[idx].astype(np.int64)


def check_stored(
    kind: IndexKind, stored: np.ndarray, total: int, name: str | None = None
) -> np.ndarray:
    """``stored`` validated against ``total`` base records, read-only, in its dtype.

    Raises:
        IndexError: a position is out of range, or gaps that decrease.
        TypeError: not an integer array.
        ValueError: an unknown kind.

    Example:
        >>> check_stored("gaps", np.array([2, 1]), 5)
        Traceback (most recent call last):
        IndexError: view gaps must not decrease and lie within 5 records of a dataset
    """
    stored = np.asarray(stored).reshape(-1)
    if stored.size and not np.issubdtype(stored.dtype, np.integer):
        raise TypeError(f"a view index holds ints, got an array of {stored.dtype}")
    of = f"{total} records of {name or 'a dataset'}"
    if kind == "index":
        if len(stored) and (int(stored.min()) < 0 or int(stored.max()) >= total):
            raise IndexError(f"view index out of range for {of}")
    elif kind == "gaps":
        last = len(stored) - 1
        if len(stored) and (
            int(stored[0]) < 0
            or int(stored[-1]) + last >= total
            or bool(np.any(stored[1:] < stored[:-1]))
        ):
            raise IndexError(f"view gaps must not decrease and lie within {of}")
    else:
        raise ValueError(f"unknown view index kind {kind!r}")
    return _read_only(stored.astype(index_dtype(total), copy=False))
