"""A training pass as a function of the position: ``order.at(positions) -> indices``.

A :class:`~samplers.stream.EndlessPassStream` asks its pass for the indices at a chunk of positions
(``order.slice(start, stop, world_size)``); the pass is never materialized unless the sampler
defines it as an array. Orders compose: a shuffled subset is a keyed permutation of the subset
positions read through the subset's own keyed permutation, a repeat-factor pass is a keyed
permutation of the expanded positions read through the cumulative repeat counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .keyed_permutation import KeyedPermutation

__all__ = [
    "ArrayOrder", "ComposedOrder", "ExpandedOrder", "PassOrder", "PermutedOrder", "RangeOrder"
]

#: Positions computed at a time by :meth:`PassOrder.to_array`.
_CHUNK = 1 << 15
#: Expanded positions per entry of :class:`ExpandedOrder`'s coarse table.
_STRIDE = 64


class PassOrder:
    """The order of one pass: ``len(order)`` indices, ``order.at(positions)`` computes some.

    Subclasses implement ``__len__`` and :meth:`at` (positions are an int64 array, every
    position in ``[0, len(order))``).

    Example:
        >>> RangeOrder(5).slice(1, 5, 2).tolist()
        [1, 3]
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The indices at ``positions`` (an int64 array of positions inside the pass)."""
        raise NotImplementedError

    def slice(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        """The indices at positions ``range(start, min(stop, len(self)), step)``."""
        return self.at(np.arange(start, min(stop, len(self)), step, dtype=np.int64))

    def item(self, position: int) -> int:
        """The index at one position."""
        return int(self.at(np.array([position], dtype=np.int64))[0])

    def to_array(self) -> np.ndarray:
        """The whole pass, materialized (O(len): for tests, benchmarks and small passes),
        computed in chunks so that the temporaries stay small."""
        length = len(self)
        out = np.empty(length, dtype=np.int64)
        for low in range(0, length, _CHUNK):
            out[low : low + _CHUNK] = self.slice(low, low + _CHUNK)
        return out


class RangeOrder(PassOrder):
    """``0, 1, ..., size - 1`` (a pass without shuffling).

    Example:
        >>> RangeOrder(3).to_array().tolist()
        [0, 1, 2]
    """

    __slots__ = ("_size",)

    def __init__(self, size: int) -> None:
        self._size = int(size)

    def __len__(self) -> int:
        return self._size

    def at(self, positions: np.ndarray) -> np.ndarray:
        return np.array(positions, dtype=np.int64)


class ArrayOrder(PassOrder):
    """A pass held as an int64 array (for samplers whose pass is built, not computed).

    Example:
        >>> ArrayOrder([4, 2, 9]).item(1)
        2
    """

    __slots__ = ("_array",)

    def __init__(self, array: Any) -> None:
        values = np.asarray(array, dtype=np.int64)
        values.flags.writeable = False
        self._array = values

    def __len__(self) -> int:
        return len(self._array)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._array[positions]

    def to_array(self) -> np.ndarray:
        return self._array


class PermutedOrder(PassOrder):
    """The positions of a :class:`KeyedPermutation` (a shuffled ``range(size)``).

    Example:
        >>> order = PermutedOrder(KeyedPermutation(6, "shuffle", 0, 0))
        >>> sorted(order.to_array().tolist())
        [0, 1, 2, 3, 4, 5]
    """

    __slots__ = ("_perm",)

    def __init__(self, permutation: KeyedPermutation) -> None:
        self._perm = permutation

    def __len__(self) -> int:
        return len(self._perm)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._perm.at(positions)


class ComposedOrder(PassOrder):
    """``outer.at(inner.at(positions))``: e.g. a shuffled pass over a subset.

    Example:
        >>> ComposedOrder(RangeOrder(2), ArrayOrder([7, 5, 3])).to_array().tolist()
        [7, 5]
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, inner: PassOrder, outer: PassOrder) -> None:
        self._inner = inner
        self._outer = outer

    def __len__(self) -> int:
        return len(self._inner)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._outer.at(self._inner.at(positions))


class ExpandedOrder(PassOrder):
    """Index ``i`` repeated ``counts[i]`` times, read in ``inner``'s order of the expanded
    positions: expanded position ``e`` holds the index ``i`` with
    ``cumulative[i - 1] <= e < cumulative[i]`` (one binary search per position).

    Args:
        cumulative: the running sum of the repeat counts (int64, one entry per index).
        inner: the order of the expanded positions (``RangeOrder`` keeps index order).

    Example:
        >>> cum = np.cumsum([2, 0, 1])
        >>> ExpandedOrder(cum, RangeOrder(int(cum[-1]))).to_array().tolist()
        [0, 0, 2]
    """

    __slots__ = ("_cumulative", "_inner", "_coarse")

    def __init__(self, cumulative: np.ndarray, inner: PassOrder) -> None:
        self._cumulative = cumulative
        self._inner = inner
        self._coarse: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._inner)

    def _coarse_table(self) -> np.ndarray:
        """The record holding every ``_STRIDE``-th expanded position (one sorted search; a
        ``len / _STRIDE`` table that keeps the searches of :meth:`at` in small windows)."""
        if self._coarse is None:
            starts = np.arange(0, (len(self) // _STRIDE + 2) * _STRIDE, _STRIDE, dtype=np.int64)
            self._coarse = np.searchsorted(self._cumulative, starts, side="right")
        return self._coarse

    def at(self, positions: np.ndarray) -> np.ndarray:
        expanded = self._inner.at(positions)
        cumulative = self._cumulative
        coarse = self._coarse_table()
        block = expanded // _STRIDE
        low, high = coarse[block], coarse[block + 1]  # the record lies in [low, high]
        while True:  # a vectorized binary search inside each window: few, cache-friendly steps
            open_ = low < high
            if not open_.any():
                return low.astype(np.int64)
            mid = (low + high) >> 1
            mid[~open_] = 0  # settled entries: any valid index (their bounds do not move)
            right = (cumulative[mid] <= expanded) & open_
            low = np.where(right, mid + 1, low)
            high = np.where(right | ~open_, high, mid)
