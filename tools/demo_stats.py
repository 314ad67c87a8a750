"""The demo's text output and class counts: aligned tables, bars, instances per class.

Also used by :mod:`tools.analyze_dataset`; re-exported by :mod:`tools.demo`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "class_counts_of_indices",
    "format_table",
    "per_record_class_counts",
    "text_bar",
    "to_numpy",
]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Format rows as an aligned text table (first column left-aligned, others right).

    Example:
        >>> print(format_table(["class", "n"], [["circle", 3], ["star", 10]]))
        class    n
        ------  --
        circle   3
        star    10
    """
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        parts = [row[0].ljust(widths[0]), *rest]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells[1:]]
    return "\n".join(out)


def text_bar(fraction: float, width: int = 24) -> str:
    """A horizontal bar of block characters, ``fraction`` of ``width`` cells long.

    Example:
        >>> text_bar(0.5, width=4)
        '██  '
    """
    full = fraction * width
    blocks = int(full)
    partial = " ▏▎▍▌▋▊▉"[int((full - blocks) * 8)] if blocks < width else ""
    return ("█" * blocks + partial).ljust(width)


def per_record_class_counts(columns: Any, num_classes: int) -> np.ndarray:
    """Return an (N, K) matrix: non-crowd annotations of class k in record i, computed from a
    SerializedList's category columns (no record is unpickled).

    Example:
        >>> from catalog import SerializedList
        >>> recs = [{"annotations": [{"category_id": 0}, {"category_id": 1}]},
        ...         {"annotations": [{"category_id": 1}]}]
        >>> per_record_class_counts(SerializedList(recs).columns, 2).tolist()
        [[1, 1], [0, 1]]
    """
    offsets = np.asarray(columns.category_offsets)
    cats = np.asarray(columns.category_ids)
    per_record = np.zeros((len(offsets) - 1, num_classes), dtype=np.int64)
    owners = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    valid = (cats >= 0) & (cats < num_classes) & (np.asarray(columns.iscrowd) == 0)
    np.add.at(per_record, (owners[valid], cats[valid]), 1)
    return per_record


def class_counts_of_indices(per_record: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Instances per class over the records at ``indices`` (repeated indices count again).

    Example:
        >>> class_counts_of_indices(np.array([[1, 1], [0, 1]]), np.array([0, 1, 1])).tolist()
        [1, 3]
    """
    return per_record[np.asarray(indices, dtype=np.int64)].sum(axis=0)


def to_numpy(values: Any) -> np.ndarray:
    """``values`` (a torch tensor, on any device, or anything numpy takes) as a numpy array.

    Example:
        >>> to_numpy([1, 2]).tolist()
        [1, 2]
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)
