"""The baselines tools/bench_samplers.py measures catmap's samplers against.

Each computes what a sampler computes, the way it was done before (per-image Python loops as in
detectron2, a materialized permutation per pass, or catmap's independent per-record rounding of
repeat factors before systematic rounding). Kept apart from the benchmark stages so that each
file does one job; ``tools.bench_samplers`` re-exports them.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from catalog._common import numpy_generator
from samplers import TrainingSampler
from samplers.order import KeyedPermutation, PassOrder, keyed_bits53
from samplers.stream import CHUNK

__all__ = [
    "IndependentRounding",
    "PermutationTrainingSampler",
    "baseline_concat_resume",
    "baseline_expand_pass",
    "baseline_repeat_factors",
    "baseline_repeat_resume",
    "baseline_state",
    "baseline_training_stream",
]


def baseline_training_stream(size: int, seed: int, rank: int, world_size: int) -> Iterator[int]:
    """Endless permutations joined into one stream, every world_size-th item kept."""
    generator = torch.Generator()
    generator.manual_seed(seed)

    def endless() -> Iterator[int]:
        while True:
            yield from torch.randperm(size, generator=generator).tolist()

    return itertools.islice(endless(), rank, None, world_size)


class ArrayOrder(PassOrder):
    """A pass held as an int64 array."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = np.asarray(array, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._array)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._array[positions]


class PermutationTrainingSampler(TrainingSampler):
    """TrainingSampler as it was before keyed passes (the same cursor, chunking and state):
    each pass a materialized ``numpy`` permutation of ``(seed, pass)``."""

    def _make_pass(self, pass_index: int) -> PassOrder:
        return ArrayOrder(numpy_generator(self.seed, pass_index).permutation(self._size))


def baseline_state(items: int, position: int) -> dict[str, Any]:
    """A PermutationTrainingSampler state (seed 1) saved after ``position`` draws."""
    pass_index, offset = divmod(position, items)
    state = PermutationTrainingSampler(items, seed=1, rank=0, world_size=1).state_dict()
    return dict(state, pass_index=pass_index, offset=offset)


def baseline_repeat_resume(factors: np.ndarray, seed: int, pass_index: int, offset: int) -> int:
    """Resume inside a repeat-factor pass before keyed passes: draw the rounding of every
    record, expand, permute the whole pass, read one chunk."""
    generator = numpy_generator(seed, pass_index)
    whole = np.floor(factors)
    repeats = (whole + (generator.random(len(factors)) < factors - whole)).astype(np.int64)
    expanded = np.repeat(np.arange(len(factors), dtype=np.int64), repeats)
    order = expanded[generator.permutation(len(expanded))]
    return order[offset : offset + CHUNK].tolist()[0]


class IndependentRounding:
    """The repeat-factor passes of catmap before systematic rounding: record ``i`` gets its
    extra copy when its own keyed 53-bit draw of ``(seed, pass)`` lies below its fraction, so
    a pass's running counts are one O(records) draw and cumulative sum per pass (and per
    resume). The constructor does that scheme's one-time work."""

    def __init__(self, factors: np.ndarray) -> None:
        factors = np.array(factors, dtype=np.float64)  # the sampler's checked copy
        if not (np.isfinite(factors) & (factors > 0)).all() or factors.sum() < 1:
            raise ValueError("IndependentRounding: factors must be positive, finite, sum >= 1")
        self.int_part = np.floor(factors).astype(np.int64)
        self.rounded = np.flatnonzero(factors != self.int_part)
        self.thresholds = np.ceil(
            (factors - self.int_part)[self.rounded] * 2.0**53
        ).astype(np.uint64)

    def cumulative(self, seed: int, pass_index: int) -> np.ndarray:
        """The running counts of pass ``pass_index`` (drawn in chunks, as catmap did)."""
        counts = self.int_part.copy()
        for low in range(0, len(self.rounded), 1 << 16):
            where = self.rounded[low : low + (1 << 16)]
            draws = keyed_bits53(where, "rounding", seed, pass_index)
            counts[where] += draws < self.thresholds[low : low + (1 << 16)]
        return np.cumsum(counts, out=counts)

    def resume(self, seed: int, pass_index: int, offset: int) -> int:
        """The first index of a resume at ``offset`` of pass ``pass_index`` (one chunk)."""
        cumulative = self.cumulative(seed, pass_index)
        length = int(cumulative[-1])
        order = ExpandedOrder(
            cumulative, KeyedPermutation(length, "shuffle", seed, pass_index)
        )
        return int(order.slice(offset, offset + CHUNK)[0])


def baseline_concat_resume(sizes: list[int], seed: int, pass_index: int, offset: int) -> int:
    """Resume inside a concat pass before keyed passes: draw the part of every draw of the
    pass, permute each part's pass, assemble the pass, read one chunk."""
    generator = numpy_generator(seed, pass_index)
    total = sum(sizes)
    weights = np.cumsum(sizes) / total
    choices = np.searchsorted(weights, generator.random(total), side="right")
    out = np.empty(total, dtype=np.int64)
    start = 0
    for j, size in enumerate(sizes):
        where = np.flatnonzero(choices == j)
        order = numpy_generator(seed, j, pass_index).permutation(size)
        out[where] = np.resize(order, len(where)) + start
        start += size
    return out[offset : offset + CHUNK].tolist()[0]


def baseline_repeat_factors(records: list[dict], thresh: float) -> torch.Tensor:
    """Image frequency of each category and the per-image maximum, one image at a time."""
    images_with = collections.defaultdict(int)
    for record in records:
        for category in {a["category_id"] for a in record["annotations"]}:
            images_with[category] += 1
    n = len(records)
    factor_of = {c: max(1.0, math.sqrt(thresh / (count / n))) for c, count in images_with.items()}
    factors = []
    for record in records:
        categories = {a["category_id"] for a in record["annotations"]}
        factors.append(max((factor_of[c] for c in categories), default=1.0))
    return torch.tensor(factors, dtype=torch.float32)


def baseline_expand_pass(factors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Stochastic rounding, then one ``extend`` per image, then a shuffle."""
    whole = torch.trunc(factors)
    frac = factors - whole
    repeats = whole + (torch.rand(len(frac), generator=generator) < frac).float()
    indices: list[int] = []
    for image, count in enumerate(repeats):
        indices.extend([image] * int(count.item()))
    out = torch.tensor(indices, dtype=torch.int64)
    return out[torch.randperm(len(out), generator=generator)]


def keyed_uniform(values: Any, purpose: str, *parts: int) -> np.ndarray:
    """A keyed uniform float64 in ``[0, 1)`` per integer of ``values``."""
    return keyed_bits53(values, purpose, *parts).astype(np.float64) * (1.0 / 2**53)


class ExpandedOrder(PassOrder):
    """Index ``i`` repeated ``counts[i]`` times (``cumulative`` = running counts), read in
    ``inner``'s order of the expanded positions (a windowed binary search per position)."""

    __slots__ = ("_cumulative", "_inner", "_coarse")

    def __init__(self, cumulative: np.ndarray, inner: PassOrder) -> None:
        self._cumulative, self._inner = cumulative, inner
        starts = np.arange(0, (len(inner) // 64 + 2) * 64, 64, dtype=np.int64)
        self._coarse = np.searchsorted(cumulative, starts, side="right")

    def __len__(self) -> int:
        return len(self._inner)

    def at(self, positions: np.ndarray) -> np.ndarray:
        expanded = self._inner.at(positions)
        block = expanded // 64
        low, high = self._coarse[block], self._coarse[block + 1]
        while True:
            open_ = low < high
            if not open_.any():
                return low.astype(np.int64)
            mid = (low + high) >> 1
            mid[~open_] = 0
            right = (self._cumulative[mid] <= expanded) & open_
            low = np.where(right, mid + 1, low)
            high = np.where(right | ~open_, high, mid)
