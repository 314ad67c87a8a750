"""Repeat-factor sampling (LVIS-style class balancing, RepeatDataset, ClassBalancedDataset).

Each pass repeats record ``i`` ``floor(r_i)`` times plus once more with probability
``frac(r_i)``, then shuffles the expanded list. Pass ``p`` is keyed by ``(seed, p)`` and never
materialized: the extra copies come from systematic rounding with one keyed offset per pass
(:mod:`samplers.repeat_rounding`: running sums precomputed once per sampler, so a pass's
length is O(1)), and position ``j`` of the pass is the record whose count range holds
``KeyedPermutation(length, "shuffle", seed, p)[j]`` (a binary search in a small window).
Resuming at any depth of any pass costs O(chunk), not O(records).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog.errors import RecordFormatError
from catalog.storage.records import RecordColumns
from catalog.validation import check_float, check_int

from .errors import StateMismatchError
from .keyed_permutation import KeyedPermutation
from .pass_order import PassOrder, PermutedOrder, RangeOrder
from .repeat_rounding import MAX_FACTOR_SUM, ROUNDING, RoundedOrder, SystematicRounding
from .state_fields import MAX_PASS, LoadNotes, array_digest
from .stream import EndlessPassStream

__all__ = ["RepeatFactorTrainingSampler", "repeat_factors_from_category_frequency"]

logger = logging.getLogger(__name__)

#: How a state saved before ``config["rounding"]`` rounded the factors.
_OLD_ROUNDING = "independent per-record rounding (catmap before systematic rounding)"


def _check_threshold(repeat_thresh: Any) -> float:
    return check_float(
        repeat_thresh, "repeat_thresh", above=0, where="repeat_factors_from_category_frequency"
    )


def _dataset_label(dataset_dicts: Any) -> str:
    name = getattr(dataset_dicts, "name", None)
    return f" of dataset {name!r}" if name else ""


def _factors_from_columns(
    columns: RecordColumns, thresh: float, sqrt: bool, label: str
) -> np.ndarray:
    n = len(columns)
    cats = columns.category_ids
    offsets = columns.category_offsets
    counts = np.diff(offsets)
    if cats.size and int(cats.min()) < 0:
        position = int(np.flatnonzero(cats < 0)[0])
        record = int(np.searchsorted(offsets, position, side="right") - 1)
        raise RecordFormatError(
            f"record {record}{label}: annotation {position - int(offsets[record])} has no "
            f"integer 'category_id'"
        )
    if cats.size == 0:
        return np.ones(n, dtype=np.float64)
    num_categories = int(cats.max()) + 1
    # One key per (record, category); records are already in order, so a stable sort only
    # orders each record's few categories and duplicates become neighbours.
    keys = np.repeat(np.arange(n, dtype=np.int64), counts) * num_categories + cats
    keys = np.sort(keys, kind="stable")
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    image_count = np.bincount(keys[first] % num_categories, minlength=num_categories)
    frequency = image_count / float(n)
    with np.errstate(divide="ignore"):
        ratio = np.where(image_count > 0, thresh / np.maximum(frequency, 1e-300), 1.0)
    category_factor = np.maximum(1.0, np.sqrt(ratio) if sqrt else ratio)
    per_annotation = category_factor[cats]
    factors = np.ones(n, dtype=np.float64)
    nonempty = np.flatnonzero(counts > 0)
    if len(nonempty):
        factors[nonempty] = np.maximum.reduceat(per_annotation, offsets[nonempty])
    return factors


def _factors_from_records(
    dataset_dicts: Iterable[Any], thresh: float, sqrt: bool, label: str
) -> np.ndarray:
    per_record: list[set[int]] = []
    for index, record in enumerate(dataset_dicts):
        if not isinstance(record, dict):
            raise RecordFormatError(
                f"record {index}{label} is a {type(record).__name__}, not a dict"
            )
        categories: set[int] = set()
        for position, anno in enumerate(record.get("annotations") or ()):
            category = anno.get("category_id") if isinstance(anno, dict) else None
            where = f"record {index}{label}: annotation {position}"
            categories.add(check_int(category, "'category_id'", error=RecordFormatError, where=where))
        per_record.append(categories)
    n = len(per_record)
    image_count: dict[int, int] = {}
    for categories in per_record:
        for category in categories:
            image_count[category] = image_count.get(category, 0) + 1
    category_factor = {}
    for category, count in image_count.items():
        ratio = thresh / (count / n)
        category_factor[category] = max(1.0, math.sqrt(ratio) if sqrt else ratio)
    return np.asarray(
        [max((category_factor[c] for c in cats), default=1.0) for cats in per_record],
        dtype=np.float64,
    )


def repeat_factors_from_category_frequency(
    dataset_dicts: Sequence[dict] | Any, repeat_thresh: float, sqrt: bool = True
) -> torch.Tensor:
    """Per-record repeat factors from how rare each record's categories are (LVIS sampling).

    ``f(c)`` is the fraction of records containing category ``c``; ``r(c) = max(1, sqrt(t /
    f(c)))`` (``t / f(c)`` with ``sqrt=False``); a record's factor is the largest ``r(c)`` of its
    categories, 1.0 for a record without annotations. A SerializedList (what the catalog
    returns) is handled from its category columns without unpickling any record; a plain list
    of dicts is read record by record.

    Args:
        dataset_dicts: a SerializedList, or a sequence / iterable of record dicts.
        repeat_thresh: the frequency threshold ``t`` (> 0).
        sqrt: use the square root of ``t / f(c)``.

    Returns:
        float32 tensor of shape (N,).

    Raises:
        TypeError / ValueError: ``repeat_thresh`` is not a positive number.
        catalog.RecordFormatError: a record is not a dict or an annotation has no integer
            ``category_id`` (the message names the record and annotation index).

    Example:
        >>> records = [{"annotations": [{"category_id": 0}, {"category_id": 1}]},
        ...            {"annotations": [{"category_id": 0}]}, {"annotations": []}]
        >>> [round(float(r), 4) for r in repeat_factors_from_category_frequency(records, 0.5)]
        [1.2247, 1.0, 1.0]
    """
    thresh = _check_threshold(repeat_thresh)
    label = _dataset_label(dataset_dicts)
    columns = getattr(dataset_dicts, "columns", None)
    if isinstance(columns, RecordColumns):
        factors = _factors_from_columns(columns, thresh, bool(sqrt), label)
    else:
        factors = _factors_from_records(dataset_dicts, thresh, bool(sqrt), label)
    logger.info(
        "repeat factors%s: threshold %g, mean %.3f, max %.3f over %d records",
        label,
        thresh,
        float(factors.mean()) if len(factors) else 0.0,
        float(factors.max()) if len(factors) else 0.0,
        len(factors),
    )
    return torch.from_numpy(factors.astype(np.float32))


def _check_factors(repeat_factors: Any, owner: str) -> np.ndarray:
    """The factors as a read-only float64 array we own, checked."""
    if isinstance(repeat_factors, torch.Tensor):
        repeat_factors = repeat_factors.detach().cpu().numpy()
    try:
        factors = np.array(repeat_factors, dtype=np.float64)  # a copy we own
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{owner}: repeat_factors must be numbers ({exc})") from None
    if factors.ndim != 1 or factors.size == 0:
        raise ValueError(
            f"{owner}: repeat_factors must be a non-empty 1-D sequence, got shape "
            f"{factors.shape}"
        )
    bad = ~(np.isfinite(factors) & (factors > 0))
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{owner}: repeat factor of record {index} is {factors[index]}; factors must "
            f"be positive and finite"
        )
    total = float(factors.sum())
    if total < 1.0:
        raise ValueError(
            f"{owner}: the repeat factors sum to {total:.3g}; a pass could hold no "
            f"record (the sum must be >= 1)"
        )
    if total > MAX_FACTOR_SUM:
        raise ValueError(
            f"{owner}: the repeat factors sum to {total:.3g}; a pass of more than "
            f"2**52 indices is not supported"
        )
    factors.flags.writeable = False
    return factors


class RepeatFactorTrainingSampler(EndlessPassStream):
    """Endless passes where record ``i`` appears ``r_i`` times on average, shuffled.

    Replaces ``RepeatDataset(times=k)`` (a constant factor ``k``) and ``ClassBalancedDataset``
    (factors from :func:`repeat_factors_from_category_frequency`).

    In every pass record ``i`` appears ``floor(r_i)`` or ``ceil(r_i)`` times, ``ceil`` with
    probability ``frac(r_i)`` (to 53 bits, from keyed integer arithmetic), as in detectron2.
    The rounding is *systematic* (see :mod:`samplers.repeat_rounding`): one keyed offset per
    pass decides every record's extra copy, so a pass's length and any of its positions are
    computed without a per-pass O(records) step, and resuming at any depth is O(chunk).
    Each record's count has exactly the distribution of detectron2's independent per-image
    rounding; only the joint distribution differs (the pass length is the floor or ceil of
    the factors' sum, and extra copies are spread out along a fixed keyed order of the
    records instead of drawn independently). Construction does the O(records) work once
    (about 22 bytes per record kept, besides the factors).

    Args:
        repeat_factors: one positive finite factor per record (tensor, array or sequence).
        shuffle: shuffle each expanded pass (without shuffling, a pass lists the records in
            index order, and the extra copies are spread along the index order).
        seed: the shared seed (None: drawn on rank 0 and broadcast).
        rank: this process's rank (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Raises:
        TypeError: the factors are not numbers.
        ValueError: not 1-D, empty, a factor is not positive and finite (names the index), or
            the factors sum to less than 1 or more than 2**52.

    Example:
        >>> import itertools
        >>> s = RepeatFactorTrainingSampler([2.0, 1.0], seed=0, rank=0, world_size=1)
        >>> sorted(itertools.islice(s, 3))
        [0, 0, 1]
    """

    #: detectron2's spelling, ``RepeatFactorTrainingSampler.repeat_factors_from_category_frequency``
    #: (the same function as the module-level one), so detectron2 code moves over unchanged.
    repeat_factors_from_category_frequency = staticmethod(repeat_factors_from_category_frequency)

    def __init__(
        self,
        repeat_factors: Any,
        *,
        shuffle: bool = True,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._factors = _check_factors(repeat_factors, "RepeatFactorTrainingSampler")
        # hashed now (O(records), like the running sums) so that no load or save hashes them
        self._digest = array_digest(self._factors, "<f8")
        self._shuffle = bool(shuffle)
        self._rounding = SystematicRounding(self._factors, permute=self._shuffle)
        super().__init__(seed=seed, rank=rank, world_size=world_size)

    @classmethod
    def from_category_frequency(
        cls,
        dataset_dicts: Any,
        repeat_thresh: float,
        *,
        sqrt: bool = True,
        shuffle: bool = True,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> RepeatFactorTrainingSampler:
        """Build the sampler from :func:`repeat_factors_from_category_frequency`."""
        factors = repeat_factors_from_category_frequency(dataset_dicts, repeat_thresh, sqrt)
        return cls(factors, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)

    @property
    def dataset_size(self) -> int:
        """The number of records indices are drawn from."""
        return len(self._factors)

    @property
    def repeat_factors(self) -> np.ndarray:
        """The per-record factors (read-only float64 array)."""
        view = self._factors.view()
        view.flags.writeable = False
        return view

    def pass_counts(self, pass_index: int) -> np.ndarray:
        """How often each record appears in pass ``pass_index`` (int64, one per record;
        O(records), unlike iterating or resuming).

        Example:
            >>> s = RepeatFactorTrainingSampler([2.0, 0.5], seed=0, rank=0, world_size=1)
            >>> int(s.pass_counts(0)[0]), int(s.pass_counts(0)[1]) in (0, 1)
            (2, True)
        """
        index = check_int(pass_index, "pass_index", minimum=0, maximum=MAX_PASS - 1,
                          where="RepeatFactorTrainingSampler.pass_counts")
        return self._rounding.counts(self._rounding.offset(self._seed, index))

    def _make_pass(self, pass_index: int) -> PassOrder:
        offset = self._rounding.offset(self._seed, pass_index)
        length = self._rounding.length(offset)
        if self._shuffle and length:
            inner: PassOrder = PermutedOrder(
                KeyedPermutation(length, "shuffle", self._seed, pass_index)
            )
        else:
            inner = RangeOrder(length)
        return RoundedOrder(self._rounding, offset, inner)

    def _pass_length(self, seed: int, pass_index: int, extra: Any) -> int:
        return self._rounding.length(self._rounding.offset(seed, pass_index))

    def _constant_pass_length(self) -> int | None:
        return None if self._rounding.fractional else self._rounding.length(0)

    def _config(self) -> dict[str, Any]:
        return {
            "size": len(self._factors),
            "shuffle": self._shuffle,
            "repeat_factors": self._digest,
            "rounding": ROUNDING,
        }

    def _legacy_config(self) -> dict[str, Any]:
        return {"size": len(self._factors), "shuffle": self._shuffle}

    def _prepare_load(
        self, state_dict: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """As the base class, and refuse a state of the independent per-record rounding
        (saved before ``config["rounding"]`` existed) when some factor has a fraction: its
        passes held other counts. With integer factors both schemes give the same stream."""
        config = state_dict.get("config") if isinstance(state_dict, Mapping) else None
        if not isinstance(config, Mapping) or "rounding" in config:
            return super()._prepare_load(state_dict, strict=strict, notes=notes)
        patched = {**state_dict, "config": {**config, "rounding": ROUNDING}}
        commit = super()._prepare_load(patched, strict=strict, notes=notes)  # every other field
        if self._rounding.fractional:
            if strict:
                raise StateMismatchError(
                    f"RepeatFactorTrainingSampler.load_state_dict: the state was saved by an "
                    f"older catmap that rounded each record's repeat factor independently; "
                    f"this version rounds systematically ({ROUNDING!r}), so the resumed passes "
                    f"would hold other records (config key 'rounding'). Start the sampler "
                    f"afresh, or pass strict=False to keep its cursor in the new passes",
                    key="rounding",
                    saved=_OLD_ROUNDING,
                    current=ROUNDING,
                )
            notes.add(
                f"loaded with strict=False although the state was saved with "
                f"{_OLD_ROUNDING}: its cursor continues in passes rounded by {ROUNDING!r}"
            )
        return commit
