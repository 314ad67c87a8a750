"""The pass of a :class:`~samplers.concat.ConcatSampler`, computed at any position.

A pass of ``T`` draws picks a part per draw, independently with the part weights, and gives the
``r``-th draw of part ``j`` in the pass the ``r``-th index of part ``j``'s own stream from where
the part stood when the pass began. Nothing of size ``T`` is built:

* the pass is cut into leaves of :data:`LEAF` draws arranged in a balanced binary tree; the
  part counts of the whole pass are one multinomial draw, and each tree node splits its counts
  between its halves with a multivariate hypergeometric draw (exactly the law of the counts of
  independent draws), every draw from a generator keyed by ``(seed, pass, node)``;
* a leaf's draws are its counts arranged by a keyed permutation of the leaf;
* so position ``t`` needs the ``log2(T / LEAF)`` splits down to its leaf, the leaf (``LEAF``
  draws), and the part samplers' indices at the resulting stream offsets (see
  :func:`part_indices_at`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .keyed_permutation import KeyedPermutation, round_keys
from .pass_order import PassOrder

__all__ = ["LEAF", "ConcatOrder", "cursor_after", "part_indices_at"]

#: Draws per leaf of a concat pass.
LEAF = 4096

#: Pass orders of a part kept for reading its stream (a pass may be read across chunks).
_SIDE_CACHE = 4
#: Tree splits kept per pass (a path from the root is ~log2(pass / LEAF) splits).
_SPLIT_CACHE = 256


def _generator(purpose: str, *parts: int) -> np.random.Generator:
    key = round_keys(purpose, *parts, count=2)
    return np.random.Generator(np.random.Philox(key=key))


def _side_order(part: Any, pass_index: int) -> PassOrder:
    """Pass ``pass_index`` of a keyed part sampler, from a small cache of its own."""
    cache: dict[Any, PassOrder] = part._side_orders
    key = (part.seed, pass_index)
    order = cache.get(key)
    if order is None:
        order = part._make_pass(pass_index)
        if len(cache) >= _SIDE_CACHE:
            cache.pop(next(iter(cache)))
        cache[key] = order
    return order


def _length(part: Any, pass_index: int) -> int:
    constant = part._constant_pass_length()
    return constant if constant is not None else part._pass_length(part.seed, pass_index, None)


def cursor_after(part: Any, cursor: tuple[int, int], count: int) -> tuple[int, int]:
    """The cursor ``count`` indices after ``cursor`` in a keyed part sampler's stream, with its
    offset inside its pass (O(1) for constant pass lengths, else one step per pass crossed)."""
    pass_index, offset = cursor[0], cursor[1] + int(count)
    constant = part._constant_pass_length()
    if constant is not None:
        return pass_index + offset // constant, offset % constant
    while offset >= (length := _length(part, pass_index)):
        offset -= length
        pass_index += 1
    return pass_index, offset


def part_indices_at(part: Any, cursor: tuple[int, int], offsets: np.ndarray) -> np.ndarray:
    """The indices at ``offsets`` (non-negative ints) after ``cursor`` in a part's stream."""
    out = np.empty(len(offsets), dtype=np.int64)
    if not len(offsets):
        return out
    absolute = cursor[1] + offsets
    constant = part._constant_pass_length()
    if constant is not None:
        passes, positions = np.divmod(absolute, constant)
        for step in np.unique(passes).tolist():
            where = passes == step
            out[where] = _side_order(part, cursor[0] + step).at(positions[where])
        return out
    order = np.argsort(absolute, kind="stable")
    ranked = absolute[order]
    pass_index, base, done = cursor[0], 0, 0
    while done < len(ranked):
        length = _length(part, pass_index)
        stop = int(np.searchsorted(ranked, base + length, side="left"))
        if stop > done:
            out[order[done:stop]] = _side_order(part, pass_index).at(ranked[done:stop] - base)
        done, base, pass_index = stop, base + length, pass_index + 1
    return out


class ConcatOrder(PassOrder):
    """One ConcatSampler pass: ``total`` draws over ``parts`` (see the module docstring).

    Args:
        total: the draws of the pass.
        weights: the normalized part weights.
        parts: the part samplers (keyed: a pass depends on ``(seed, pass)`` only).
        starts: each part's cursor ``(pass, offset)`` when the pass begins.
        offsets: the start of each part in the concatenated index space.
        seed / pass_index: the key of the pass.
    """

    def __init__(
        self,
        total: int,
        weights: np.ndarray,
        parts: list[Any],
        starts: list[tuple[int, int]],
        offsets: np.ndarray,
        seed: int,
        pass_index: int,
    ) -> None:
        self._total = int(total)
        self._parts = parts
        self._starts = starts
        self._offsets = offsets
        self._key = (seed, pass_index)
        self._leaves = -(-self._total // LEAF)
        self.counts = (
            _generator("concat-pass", seed, pass_index)
            .multinomial(self._total, weights)
            .astype(np.int64)
        )
        self._leaf_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._splits: dict[tuple[int, int], np.ndarray] = {}  # consecutive leaves share paths

    def __len__(self) -> int:
        return self._total

    def _leaf_counts(self, leaf: int) -> tuple[np.ndarray, np.ndarray]:
        """Draws of each part before ``leaf`` in the pass, and inside it."""
        counts = self.counts
        before = np.zeros_like(counts)
        low, high = 0, self._leaves
        while high - low > 1:
            mid = (low + high) // 2
            left = self._splits.get((low, high))
            if left is None:
                drawn = min(mid * LEAF, self._total) - low * LEAF
                generator = _generator("concat-split", *self._key, low, high)
                left = generator.multivariate_hypergeometric(counts, drawn, method="marginals")
                if len(self._splits) >= _SPLIT_CACHE:
                    self._splits.clear()
                self._splits[(low, high)] = left
            if leaf < mid:
                counts, high = left, mid
            else:
                before, counts, low = before + left, counts - left, mid
        return before, counts

    def _leaf(self, leaf: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A leaf's part per draw, each draw's rank among its part's draws in the leaf, and
        the draws of each part before the leaf."""
        found = self._leaf_cache.get(leaf)
        if found is not None:
            return found
        before, counts = self._leaf_counts(leaf)
        size = int(counts.sum())
        arranged = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        choice = arranged[KeyedPermutation(size, "concat-leaf", *self._key, leaf).to_array()]
        order = np.argsort(choice, kind="stable")
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(size, dtype=np.int64)
        rank[order] = np.arange(size, dtype=np.int64) - firsts[choice[order]]
        if len(self._leaf_cache) >= 4:
            self._leaf_cache.pop(next(iter(self._leaf_cache)))
        self._leaf_cache[leaf] = (choice, rank, before)
        return choice, rank, before

    def at(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        leaves, inside = np.divmod(positions, LEAF)
        part_of = np.empty(len(positions), dtype=np.int64)
        offset = np.empty(len(positions), dtype=np.int64)
        for leaf in np.unique(leaves).tolist():
            where = leaves == leaf
            choice, rank, before = self._leaf(leaf)
            picked = choice[inside[where]]
            part_of[where] = picked
            offset[where] = before[picked] + rank[inside[where]]
        out = np.empty(len(positions), dtype=np.int64)
        for j, part in enumerate(self._parts):
            where = part_of == j
            if where.any():
                values = part_indices_at(part, self._starts[j], offset[where])
                out[where] = values + self._offsets[j]
        return out
