"""Index samplers: the endless, resumable, rank-sharded training streams and InferenceSampler,
and the rank, world size and shared seed they take from torch.distributed.

A training sampler gives pass ``p`` as a :class:`~samplers.order.PassOrder` keyed by
``(seed, p)``; rank ``r`` takes global positions ``r, r + world_size, ...``. The state is the
seed, the cursor ``(pass, offset)`` (rank 0's next position, so it re-shards) and a config
fingerprint; loading is O(1). ``iter()`` restarts at the origin (construction or last load).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import copy

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from catalog._common import (
    RecordFormatError,
    check_float,
    check_int,
    check_list,
    check_positive_size,
    check_seed,
    derive_seed,
)
from catalog.storage.records import RecordColumns

from .errors import SamplerConfigError, SamplerStateError, StateMismatchError, SupersededIteratorError
from .order import (
    MAX_FACTOR_SUM, ROUNDING, ComposedOrder, ConcatOrder, KeyedPermutation, PassOrder, RangeOrder,
    RoundedOrder, SystematicRounding, cursor_after,
)
from .state import (
    MAX_PASS, MAX_POSITION, MAX_SEED, MAX_WORLD_SIZE, STATE_VERSION, Notes, array_digest,
    check_config, check_int as check_state_int, check_state,
)

logger = logging.getLogger(__name__)

#: Indices converted to Python ints at a time while iterating.
CHUNK = 8192
#: The pass order algorithm, saved in every training sampler's fingerprint.
ORDER = "keyed-feistel-1"


# ---------------------------------------------------------------- rank, world size, shared seed
def get_rank() -> int:
    """This process's rank (0 when not distributed)."""
    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    """The default process group's size (1 when not distributed)."""
    return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1


def resolve_rank_and_world_size(rank: int | None, world_size: int | None,
                                owner: str = "sampler") -> tuple[int, int]:
    """Missing values from torch.distributed; TypeError / ValueError when out of range."""
    joined = dist.is_available() and dist.is_initialized()
    world_size = (int(dist.get_world_size()) if joined else 1) if world_size is None else world_size
    rank = (int(dist.get_rank()) if joined else 0) if rank is None else rank
    world_size = check_int(world_size, "world_size", minimum=1, maximum=MAX_WORLD_SIZE, where=owner)
    rank = check_int(rank, "rank", minimum=0, maximum=world_size - 1, where=owner)
    return rank, world_size


def shared_random_seed() -> int:
    """A seed in ``[0, 2**31)`` every rank agrees on: drawn from torch's default generator
    (``torch.manual_seed`` makes it reproducible) and broadcast from rank 0."""
    seed = int(torch.randint(2**31, (1,)).item())
    if dist.is_available() and dist.is_initialized():
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        seed = int(box[0])
    return seed


# ---------------------------------------------------------------- the training streams
class StreamSampler(Sampler[int]):
    """Base of the training samplers: a subclass passes its ``config`` (the fingerprint) and defines
    ``_make_pass(p)`` and ``constant_length`` (or ``_pass_length``); nested state: an override
    of ``state_dict`` adding ``extra_keys``, checked by ``_prepare_extra``.
    """

    constant_length: int | None = None
    #: The state keys a sampler nests besides seed, cursor, world size and config.
    extra_keys: tuple[str, ...] = ("pass_start",)

    def __init__(self, *, seed: int | None, rank: int | None, world_size: int | None,
                 config: dict[str, Any]) -> None:
        owner = type(self).__name__
        self.rank, self.world_size = resolve_rank_and_world_size(rank, world_size, owner)
        seed = check_seed(seed, "seed", error=SamplerConfigError, where=owner)
        self.seed = shared_random_seed() if seed is None else seed
        self._fingerprint = {"order": ORDER, **config}  # saved in every state, compared on load
        self._cursor_pass = self._cursor_offset = 0
        self._orders: dict[int, PassOrder] = {}
        self._chunk: tuple[Iterator[int], int, int, int] | None = None  # iterator, len, pass, offset
        self._origin: dict[str, Any] | None = None  # the state iter() restarts from
        self._generation = 0

    # -------------------------------------------------------------- the pass protocol
    def _make_pass(self, pass_index: int) -> PassOrder:
        raise NotImplementedError

    def _pass_length(self, seed: int, pass_index: int) -> int:
        if self.constant_length is None:
            raise NotImplementedError(f"{type(self).__name__}: a varying pass length needs _pass_length")
        return self.constant_length

    def _prepare_extra(self, state: Mapping[str, Any], *, strict: bool, notes: Notes) -> Callable[[], None]:
        if state["pass_start"] is not None:
            raise SamplerStateError(
                f"{type(self).__name__}.load_state_dict: 'pass_start' must be None, got "
                f"{type(state['pass_start']).__name__}"
            )
        return lambda: None

    # -------------------------------------------------------------- properties
    @property
    def position(self) -> tuple[int, int]:
        """The cursor ``(pass, offset)``: rank 0's next global position."""
        self._sync_cursor()
        return self._cursor_pass, self._cursor_offset

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(dataset_size={getattr(self, 'dataset_size', None)}, "
                f"seed={self.seed}, rank={self.rank}, world_size={self.world_size})")

    # -------------------------------------------------------------- passes and cursor
    def _order(self, pass_index: int) -> PassOrder:
        """Pass ``pass_index``; made in order (a concat pass moves its parts)."""
        orders = self._orders
        nxt = max(orders) + 1 if orders else self._cursor_pass
        while nxt <= pass_index:
            orders[nxt] = self._make_pass(nxt)
            nxt += 1
        return orders[pass_index]

    def _sync_cursor(self) -> None:
        if self._chunk is not None:
            iterator, length, pass_index, offset = self._chunk
            consumed = length - operator.length_hint(iterator)
            self._cursor_pass, self._cursor_offset = pass_index, offset + consumed * self.world_size

    def _move_to(self, cursor: tuple[int, int]) -> None:
        self._orders.clear()
        self._chunk = None
        self._cursor_pass, self._cursor_offset = cursor

    # -------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[int]:
        self._sync_cursor()
        origin = self._origin
        if origin is None:
            self._origin = self.state_dict()
        else:  # restart: the origin is this sampler's own state
            self._prepare_load(origin, strict=True, notes=Notes())()
            self._origin = origin
        self._generation += 1
        return self._generate(self._generation)

    def _generate(self, generation: int) -> Iterator[int]:
        rank, world = self.rank, self.world_size
        while True:
            if generation != self._generation:
                self._superseded()
            self._sync_cursor()
            self._chunk = None
            while self._cursor_offset >= (length := len(self._order(self._cursor_pass))):
                self._cursor_offset -= length  # the cursor moves to the next pass
                self._orders.pop(self._cursor_pass, None)
                self._cursor_pass += 1
            pass_index, offset = self._cursor_pass, self._cursor_offset
            order = self._order(pass_index)
            start = offset + rank
            if start < length:
                stop = min(length, start + world * CHUNK)
                chunk = order.at(np.arange(start, stop, world, dtype=np.int64)).tolist()
                iterator = iter(chunk)
                current = self._chunk = (iterator, len(chunk), pass_index, offset)
                for value in iterator:
                    yield value
                    if current is not self._chunk:  # a newer iter() or a load
                        if generation != self._generation:
                            self._superseded()
                        break
            else:  # this rank's next index lies in a later pass
                q, t = pass_index, start
                while t >= len(self._order(q)):
                    t -= len(self._order(q))
                    q += 1
                self._cursor_offset = offset + world
                yield self._order(q).item(t)

    def _superseded(self) -> None:
        raise SupersededIteratorError(
            f"{type(self).__name__}: this iterator was superseded by a newer iter() of the same "
            "sampler (each iter() restarts from the origin; a sampler yields one stream at a time)"
        )

    # -------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Seed, cursor, world size, nested state and fingerprint; equal on every rank.

        Example:
            >>> s = TrainingSampler(10, seed=0, rank=0, world_size=1)
            >>> it = iter(s); _ = [next(it) for _ in range(3)]
            >>> s.state_dict()["offset"], s.state_dict()["config"]
            (3, {'order': 'keyed-feistel-1', 'size': 10, 'shuffle': True})
        """
        self._sync_cursor()
        pass_index, offset = self._cursor_pass, self._cursor_offset
        while offset >= len(self._order(pass_index)):
            offset -= len(self._order(pass_index))
            pass_index += 1
        return {"type": type(self).__name__, "version": STATE_VERSION, "seed": self.seed,
                "pass_index": pass_index, "offset": offset, "world_size": self.world_size,
                "config": copy.deepcopy(self._fingerprint), "pass_start": None}

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Continue where the saved sampler stood (re-sharded); the state's seed wins. A rejected
        state changes nothing: StateMismatchError (another config; ``strict=False`` warns
        instead) or SamplerStateError (malformed).
        """
        notes = Notes()
        commit = self._prepare_load(state_dict, strict=bool(strict), notes=notes)
        notes.emit(type(self).__name__)
        commit()

    def _prepare_load(self, state_dict: Any, *, strict: bool, notes: Notes) -> Callable[[], None]:
        name = type(self).__name__
        keys = ["seed", "pass_index", "offset", "world_size", "config", *self.extra_keys]
        state = check_state(state_dict, name, keys)
        check_config(state["config"], self._fingerprint, name, strict=strict, notes=notes)
        seed = check_state_int(state["seed"], "seed", name, 0, MAX_SEED)
        pass_index = check_state_int(state["pass_index"], "pass_index", name, 0, MAX_PASS)
        saved_world = check_state_int(state["world_size"], "world_size", name, 1, MAX_WORLD_SIZE + 1)
        offset = check_state_int(state["offset"], "offset", name, 0, MAX_POSITION)
        apply_extra = self._prepare_extra(state, strict=strict, notes=notes)
        length = self._pass_length(seed, pass_index)
        if offset >= length:
            raise SamplerStateError(
                f"{name}.load_state_dict: offset {offset} lies beyond pass {pass_index} ({length} "
                "indices) of this sampler; the state does not belong to it"
            )

        def commit() -> None:
            self._origin = None
            apply_extra()
            self.seed = seed
            self._orders.clear()
            self._chunk = None
            self._cursor_pass, self._cursor_offset = pass_index, offset
            if saved_world != self.world_size:
                logger.info("%s: state of world size %d continues over %d ranks", name,
                            saved_world, self.world_size)

        return commit


class TrainingSampler(StreamSampler):
    """Endless passes over ``range(size)``, each a keyed permutation of ``(seed, pass)``;
    ``seed=None`` draws a seed shared by all ranks.

    Example:
        >>> import itertools
        >>> list(itertools.islice(TrainingSampler(4, shuffle=False, rank=1, world_size=2), 4))
        [1, 3, 1, 3]
    """

    def __init__(self, size: int, shuffle: bool = True, seed: int | None = None, *,
                 rank: int | None = None, world_size: int | None = None) -> None:
        self._size = self.dataset_size = self.constant_length = check_positive_size(
            size, where="TrainingSampler")
        self._shuffle = bool(shuffle)
        super().__init__(seed=seed, rank=rank, world_size=world_size,
                         config={"size": self._size, "shuffle": self._shuffle})

    def _make_pass(self, pass_index: int) -> PassOrder:
        if not self._shuffle:
            return RangeOrder(self._size)
        return KeyedPermutation(self._size, "shuffle", self.seed, pass_index)

    def __repr__(self) -> str:
        return (f"TrainingSampler(size={self._size}, shuffle={self._shuffle}, seed={self.seed}, "
                f"rank={self.rank}, world_size={self.world_size})")


class RandomSubsetTrainingSampler(StreamSampler):
    """Endless passes over a fixed random subset of ``int(size * subset_ratio)`` records (keyed
    by ``seed_subset``), each pass shuffled by ``(seed_shuffle, pass)``.

    Example:
        >>> import itertools
        >>> s = RandomSubsetTrainingSampler(10, 0.5, seed_shuffle=1, seed_subset=2,
        ...                                 rank=0, world_size=1)
        >>> len(set(itertools.islice(s, 50)))
        5
    """

    extra_keys = ("pass_start", "seed_subset")

    def __init__(self, size: int, subset_ratio: float, shuffle: bool = True,
                 seed_shuffle: int | None = None, seed_subset: int | None = None, *,
                 rank: int | None = None, world_size: int | None = None) -> None:
        owner = "RandomSubsetTrainingSampler"
        self._size = self.dataset_size = check_positive_size(size, where=owner)
        self._ratio = check_float(subset_ratio, "subset_ratio", above=0, maximum=1, where=owner)
        self.constant_length = int(self._size * self._ratio)
        if self.constant_length < 1:
            raise ValueError(f"{owner}: int({self._size} * {self._ratio}) = 0 records; choose a "
                             "larger subset_ratio")
        self._shuffle = bool(shuffle)
        seed_subset = check_seed(seed_subset, "seed_subset", error=SamplerConfigError, where=owner)
        super().__init__(seed=seed_shuffle, rank=rank, world_size=world_size,
                         config={"size": self._size, "subset_ratio": self._ratio,
                                 "subset_size": self.constant_length, "shuffle": self._shuffle})
        self._seed_subset = shared_random_seed() if seed_subset is None else seed_subset
        self._subset = KeyedPermutation(self._size, "subset", self._seed_subset)
        logger.info("%s: training on %d of %d records", owner, self.constant_length, self._size)

    @property
    def subset(self) -> np.ndarray:
        """The chosen record indices in the subset's order (computed on each call: O(k))."""
        return self._subset.slice(0, self.constant_length)

    @property
    def seed_subset(self) -> int:
        return self._seed_subset

    def _make_pass(self, pass_index: int) -> PassOrder:
        k = self.constant_length
        inner = KeyedPermutation(k, "shuffle", self.seed, pass_index) if self._shuffle else RangeOrder(k)
        return ComposedOrder(inner, self._subset)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seed_subset": self._seed_subset}

    def _prepare_extra(self, state: Mapping[str, Any], *, strict: bool, notes: Notes) -> Callable[[], None]:
        super()._prepare_extra(state, strict=strict, notes=notes)
        seed = check_state_int(state["seed_subset"], "seed_subset", "RandomSubsetTrainingSampler", 0, MAX_SEED)
        subset = self._subset if seed == self._seed_subset else KeyedPermutation(self._size, "subset", seed)

        def apply() -> None:
            self._seed_subset, self._subset = seed, subset

        return apply


# ---------------------------------------------------------------- repeat factors
def _factors(n: int, cats: np.ndarray, offsets: np.ndarray, thresh: float, sqrt: bool,
             label: str) -> np.ndarray:
    """Repeat factors of ``n`` records whose annotations' categories are
    ``cats[offsets[i]:offsets[i + 1]]`` (-1: no integer category)."""
    counts = np.diff(offsets)
    if cats.size and int(cats.min()) < 0:
        position = int(np.flatnonzero(cats < 0)[0])
        record = int(np.searchsorted(offsets, position, side="right") - 1)
        raise RecordFormatError(f"record {record}{label}: annotation "
                                f"{position - int(offsets[record])} has no integer 'category_id'")
    if cats.size == 0:
        return np.ones(n, dtype=np.float64)
    cats = np.unique(cats, return_inverse=True)[1].reshape(-1)  # dense ids: any id range is cheap
    num_categories = int(cats.max()) + 1
    # one key per (record, category), sorted: duplicates become neighbours
    keys = np.sort(np.repeat(np.arange(n, dtype=np.int64), counts) * num_categories + cats, kind="stable")
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    image_count = np.bincount(keys[first] % num_categories, minlength=num_categories)
    with np.errstate(divide="ignore"):
        ratio = np.where(image_count > 0, thresh / np.maximum(image_count / float(n), 1e-300), 1.0)
    per_annotation = np.maximum(1.0, np.sqrt(ratio) if sqrt else ratio)[cats]
    factors = np.ones(n, dtype=np.float64)
    nonempty = np.flatnonzero(counts > 0)
    if len(nonempty):
        factors[nonempty] = np.maximum.reduceat(per_annotation, offsets[nonempty])
    return factors


def _category_columns(records: Iterable[Any], label: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(records, category ids, offsets) of plain record dicts; RecordFormatError on a bad one."""
    cats: list[int] = []
    offsets = [0]
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise RecordFormatError(f"record {index}{label} is a {type(record).__name__}, not a dict")
        for position, anno in enumerate(record.get("annotations") or ()):
            category = anno.get("category_id") if isinstance(anno, dict) else None
            cats.append(check_int(category, "'category_id'", error=RecordFormatError, minimum=0,
                                  maximum=2**63 - 1, where=f"record {index}{label}: annotation {position}"))
        offsets.append(len(cats))
    return len(offsets) - 1, np.asarray(cats, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


def repeat_factors_from_category_frequency(dataset_dicts: Sequence[dict] | Any, repeat_thresh: float,
                                           sqrt: bool = True) -> torch.Tensor:
    """Per-record repeat factors (LVIS): a record's largest ``max(1, sqrt(t / f(c)))`` over its
    categories ``c`` (``f``: fraction of records with ``c``); RecordFormatError on a bad record.

    Example:
        >>> records = [{"annotations": [{"category_id": 0}, {"category_id": 1}]},
        ...            {"annotations": [{"category_id": 0}]}, {"annotations": []}]
        >>> [round(float(r), 4) for r in repeat_factors_from_category_frequency(records, 0.5)]
        [1.2247, 1.0, 1.0]
    """
    thresh = check_float(repeat_thresh, "repeat_thresh", above=0,
                         where="repeat_factors_from_category_frequency")
    name = getattr(dataset_dicts, "name", None)
    label = f" of dataset {name!r}" if name else ""
    columns = getattr(dataset_dicts, "columns", None)
    if isinstance(columns, RecordColumns):
        n, cats, offsets = len(columns), columns.category_ids, columns.category_offsets
    else:
        n, cats, offsets = _category_columns(dataset_dicts, label)
    factors = _factors(n, cats, offsets, thresh, bool(sqrt), label)
    logger.info("repeat factors%s: threshold %g, mean %.3f over %d records", label, thresh,
                float(factors.mean()) if len(factors) else 0.0, len(factors))
    return torch.from_numpy(factors.astype(np.float32))


def _check_factors(repeat_factors: Any, owner: str) -> np.ndarray:
    if isinstance(repeat_factors, torch.Tensor):
        repeat_factors = repeat_factors.detach().cpu().numpy()
    try:
        factors = np.array(repeat_factors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{owner}: repeat_factors must be numbers ({exc})") from None
    if factors.ndim != 1 or factors.size == 0:
        raise ValueError(f"{owner}: repeat_factors must be a non-empty 1-D sequence, got shape "
                         f"{factors.shape}")
    bad = ~(np.isfinite(factors) & (factors > 0))
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{owner}: repeat factor of record {index} is {factors[index]}; factors "
                         "must be positive and finite")
    total = float(factors.sum())
    if not 1.0 <= total <= MAX_FACTOR_SUM:
        raise ValueError(f"{owner}: the repeat factors sum to {total:.3g}; the sum must lie in "
                         "[1, 2**52] (a pass of at least one and at most 2**52 indices)")
    factors.flags.writeable = False
    return factors


class RepeatFactorTrainingSampler(StreamSampler):
    """Endless shuffled passes where record ``i`` appears ``floor(r_i)`` or ``ceil(r_i)`` times,
    as in detectron2 (systematic rounding: resuming at any depth is O(chunk)).

    Example:
        >>> import itertools
        >>> s = RepeatFactorTrainingSampler([2.0, 1.0], seed=0, rank=0, world_size=1)
        >>> sorted(itertools.islice(s, 3))
        [0, 0, 1]
    """

    repeat_factors_from_category_frequency = staticmethod(repeat_factors_from_category_frequency)

    def __init__(self, repeat_factors: Any, *, shuffle: bool = True, seed: int | None = None,
                 rank: int | None = None, world_size: int | None = None) -> None:
        self._factors = _check_factors(repeat_factors, "RepeatFactorTrainingSampler")
        self._digest = array_digest(self._factors, "<f8")  # hashed once, not per save
        self._shuffle = bool(shuffle)
        self._rounding = SystematicRounding(self._factors, permute=self._shuffle)
        self.constant_length = None if self._rounding.fractional else self._rounding.length(0)
        self.dataset_size = len(self._factors)
        super().__init__(seed=seed, rank=rank, world_size=world_size,
                         config={"size": len(self._factors), "shuffle": self._shuffle,
                                 "repeat_factors": self._digest, "rounding": ROUNDING})

    @classmethod
    def from_category_frequency(cls, dataset_dicts: Any, repeat_thresh: float, *, sqrt: bool = True,
                                **kwargs: Any) -> RepeatFactorTrainingSampler:
        return cls(repeat_factors_from_category_frequency(dataset_dicts, repeat_thresh, sqrt), **kwargs)

    @property
    def repeat_factors(self) -> np.ndarray:
        return self._factors.view()

    def pass_counts(self, pass_index: int) -> np.ndarray:
        """Copies of each record in pass ``pass_index`` (O(records))."""
        index = check_int(pass_index, "pass_index", minimum=0, maximum=MAX_PASS - 1,
                          where="RepeatFactorTrainingSampler.pass_counts")
        return self._rounding.counts(self._rounding.offset(self.seed, index))

    def _make_pass(self, pass_index: int) -> PassOrder:
        offset = self._rounding.offset(self.seed, pass_index)
        length = self._rounding.length(offset)
        inner: PassOrder = (KeyedPermutation(length, "shuffle", self.seed, pass_index)
                            if self._shuffle and length else RangeOrder(length))
        return RoundedOrder(self._rounding, offset, inner)

    def _pass_length(self, seed: int, pass_index: int) -> int:
        return self._rounding.length(self._rounding.offset(seed, pass_index))



# ---------------------------------------------------------------- concatenation
class ConcatSampler(StreamSampler):
    """Global indices into concatenated datasets: each draw picks part ``j`` with probability
    ``weights[j] / sum(weights)`` (default: by ``sizes``) and takes that part sampler's next
    index. The state nests the part states.

    Example:
        >>> import itertools
        >>> s = ConcatSampler([3, 100], weights=[1, 1], seed=0, rank=0, world_size=1)
        >>> draws = list(itertools.islice(s, 1000))
        >>> 0.4 < sum(i < 3 for i in draws) / 1000 < 0.6
        True
    """

    def __init__(self, sizes: Sequence[int], *, weights: Sequence[float] | None = None,
                 samplers: Sequence[StreamSampler | None] | None = None, shuffle: bool = True,
                 seed: int | None = None, rank: int | None = None, world_size: int | None = None) -> None:
        owner = "ConcatSampler"
        self._sizes = check_list(sizes, "sizes", check_positive_size, what="ints",
                                 element="of part", where=owner)
        if not self._sizes:
            raise TypeError("ConcatSampler: sizes must be a non-empty list of ints, got []")
        chosen = check_list(self._sizes if weights is None else weights, "weights", check_float,
                            what="numbers", element="of part", above=0, where=owner)
        if len(chosen) != len(self._sizes):
            raise ValueError(f"ConcatSampler: {len(chosen)} weights for {len(self._sizes)} parts")
        self._weights = np.asarray(chosen, dtype=np.float64) / sum(chosen)
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self.constant_length = self.dataset_size = int(sum(self._sizes))
        if samplers is not None and (isinstance(samplers, (str, bytes)) or not isinstance(samplers, Sequence)):
            raise TypeError(f"ConcatSampler: samplers must be a list, got {samplers!r}")
        if samplers is not None and len(samplers) != len(self._sizes):
            raise ValueError(f"ConcatSampler: {len(samplers)} samplers for {len(self._sizes)} parts")
        super().__init__(seed=seed, rank=rank, world_size=world_size,
                         config={"sizes": list(self._sizes), "weights": self._weights.tolist()})
        self._parts: list[StreamSampler] = []
        for j, size in enumerate(self._sizes):
            part = samplers[j] if samplers is not None else None
            if part is None:
                part = TrainingSampler(size, shuffle=shuffle, seed=derive_seed(self.seed, j),
                                       rank=0, world_size=1)
            elif not isinstance(part, StreamSampler) or isinstance(part, ConcatSampler):
                raise TypeError(f"ConcatSampler: sampler of part {j} must be a catmap training "
                                f"sampler other than ConcatSampler, got {type(part).__name__}")
            elif getattr(part, "dataset_size", size) != size:
                raise ValueError(f"ConcatSampler: sampler of part {j} draws from "
                                 f"{part.dataset_size} records, the part has {size}")
            self._parts.append(part)
        self._fingerprint["parts"] = [type(part).__name__ for part in self._parts]
        self._pass_starts: dict[int, list[dict[str, Any]]] = {}

    @property
    def weights(self) -> np.ndarray:
        return self._weights.copy()

    @property
    def part_samplers(self) -> list[StreamSampler]:
        return list(self._parts)

    def _make_pass(self, pass_index: int) -> PassOrder:
        for old in [p for p in self._pass_starts if p < self._cursor_pass]:
            del self._pass_starts[old]
        self._pass_starts[pass_index] = [part.state_dict() for part in self._parts]
        starts = [cursor_after(part, part.position, 0) for part in self._parts]
        order = ConcatOrder(self.constant_length, self._weights, self._parts, starts, self._starts,
                            self.seed, pass_index)
        # each part continues, in the next pass, after the draws it gets in this one
        for part, start, count in zip(self._parts, starts, order.counts.tolist()):
            part._move_to(cursor_after(part, start, count))
        return order

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["pass_start"] = self._pass_starts[state["pass_index"]]
        return state

    def _prepare_extra(self, state: Mapping[str, Any], *, strict: bool, notes: Notes) -> Callable[[], None]:
        saved = state["pass_start"]
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self._parts):
            raise SamplerStateError(
                f"ConcatSampler.load_state_dict: 'pass_start' must hold {len(self._parts)} part "
                f"states, got {type(saved).__name__} {repr(saved)[:80]}")
        restores = []
        for j, (part, part_state) in enumerate(zip(self._parts, saved)):
            try:
                restores.append(part._prepare_load(part_state, strict=strict, notes=notes))
            except StateMismatchError as exc:
                raise StateMismatchError(f"ConcatSampler.load_state_dict: part {j}: {exc}",
                                         key=f"part {j}: {exc.key}", saved=exc.saved,
                                         current=exc.current) from exc
            except SamplerStateError as exc:
                raise SamplerStateError(f"ConcatSampler.load_state_dict: part {j}: {exc}") from exc

        def restore() -> None:
            self._pass_starts.clear()
            for apply in restores:
                apply()

        return restore

    def __repr__(self) -> str:
        return (f"ConcatSampler(sizes={self._sizes}, weights={np.round(self._weights, 4).tolist()}, "
                f"seed={self.seed}, rank={self.rank}, world_size={self.world_size})")


class InferenceSampler(Sampler[int]):
    """This rank's contiguous shard of ``range(size)``, once, without padding.

    Example:
        >>> [len(InferenceSampler(2, rank=r, world_size=3)) for r in range(3)]
        [1, 1, 0]
        >>> list(InferenceSampler(5, rank=1, world_size=2))
        [3, 4]
    """

    def __init__(self, size: int, *, rank: int | None = None, world_size: int | None = None) -> None:
        self._size = self.dataset_size = check_positive_size(size, allow_zero=True, where="InferenceSampler")
        self.rank, self.world_size = resolve_rank_and_world_size(rank, world_size, "InferenceSampler")
        base, extra = divmod(self._size, self.world_size)
        self._start = self.rank * base + min(self.rank, extra)
        self._stop = self._start + base + (1 if self.rank < extra else 0)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._start, self._stop))

    def __len__(self) -> int:
        return self._stop - self._start

    def __repr__(self) -> str:
        return (f"InferenceSampler(size={self._size}, rank={self.rank}, world_size="
                f"{self.world_size}, shard=[{self._start}, {self._stop}))")
