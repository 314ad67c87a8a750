"""Datasets that wrap record lists: DatasetFromList, MapDataset (ToIterableDataset lives in
:mod:`mappers.to_iterable` and is re-exported here).

``MapDataset`` applies a mapper to every record. A mapper may return ``None`` to say "this
record gives no usable sample" (an unreadable image, a crop without boxes); another index is
then tried. Unlike detectron2 (fixed seed 42 in every worker, endless loop when every record
fails) and mmengine (global RNG, bare ``Exception``), the retries here are

* drawn from the sample's own generators (:mod:`mappers.random_state`): attempt ``a`` of the
  sample draws its replacement index, and maps it, with a generator derived from (seed, the
  sample's global stream position, ``a``) inside a catmap loader, or from (seed, index, ``a``)
  without one. The replacement depends on nothing else: not on the worker, the number of
  workers, what failed earlier in the process, or a restore; global random state is never
  drawn from;
* bounded: ``max_refetch`` consecutive failures for one request raise
  :class:`~mappers.errors.RefetchExhaustedError`.
"""

from __future__ import annotations

import collections
import copy
import logging
import operator
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils import data

from catalog.log_limits import warn_limited
from catalog.seeding import derive_seed
from catalog.storage.records import SerializedList
from catalog.validation import check_int

from ._function_pickle import unwrap, wrap_for_pickling
from .errors import RefetchExhaustedError
from .exception_context import add_context
from .pickled_list import PickledList
from .random_state import attempt_generator, current_sample, index_sample_seed
from .record_source import records_of
from .to_iterable import ToIterableDataset

__all__ = [
    "DEFAULT_MAX_REFETCH",
    "DatasetFromList",
    "MapDataset",
    "MapIterableDataset",
    "ToIterableDataset",
]

logger = logging.getLogger(__name__)

#: Default number of other indices MapDataset tries after a record maps to None.
DEFAULT_MAX_REFETCH = 100

#: How many of the last failing indices a RefetchExhaustedError lists.
_LAST_FAILED_SHOWN = 10


class DatasetFromList(data.Dataset):
    """A map-style dataset over a list of records.

    Items need not be dicts (as in detectron2): any picklable item works.

    Args:
        lst: the records (a list, or a catalog ``SerializedList`` which is used as it is).
        copy: with ``serialize=False``, return a deep copy of each record on access so the
            caller may modify it freely. Serialized records are fresh objects on every access
            and are never copied again.
        serialize: ``True`` stores the records in one shared buffer, no per-worker copies: a
            ``SerializedList`` when every item is a dict, else a :class:`PickledList`; a
            callable is called with the list and must return an indexable, sized container;
            ``False`` keeps the Python list.

    Raises:
        TypeError: ``lst`` is an IterableDataset or has no length, or ``serialize`` is neither
            a bool nor a callable.

    Example:
        >>> ds = DatasetFromList([{"file_name": "a.jpg"}, {"file_name": "b.jpg"}])
        >>> len(ds), ds[1]["file_name"]
        (2, 'b.jpg')
    """

    def __init__(
        self,
        lst: Sequence[Any],
        copy: bool = True,
        serialize: bool | Callable[[Sequence[Any]], Sequence[Any]] = True,
    ) -> None:
        if isinstance(lst, data.IterableDataset):
            raise TypeError(
                f"DatasetFromList: lst must be a list of records, got the IterableDataset "
                f"{type(lst).__name__}; use it as it is (MapDataset, the loader builders)"
            )
        if not hasattr(lst, "__len__"):
            if serialize is not True:
                raise TypeError(
                    f"DatasetFromList: lst must be a sized sequence of records unless "
                    f"serialize=True, got {type(lst).__name__}"
                )
            lst = list(lst)  # a generator: serialized below
        if not isinstance(serialize, bool) and not callable(serialize):
            raise TypeError(
                f"DatasetFromList: serialize must be a bool or a callable, got "
                f"{type(serialize).__name__}"
            )
        self._copy = bool(copy)
        self._serialized = False
        if isinstance(lst, (SerializedList, PickledList)):
            self._lst: Sequence[Any] = lst
            self._serialized = True
        elif callable(serialize):
            self._lst = serialize(lst)
            self._serialized = True
        elif serialize:
            if all(type(item) is dict or isinstance(item, dict) for item in lst):
                self._lst = SerializedList(lst)
            else:
                self._lst = PickledList(lst)
            self._serialized = True
        else:
            self._lst = lst
        logger.debug("DatasetFromList: %d records (serialized=%s)", len(self._lst), self._serialized)

    @property
    def records(self) -> Sequence[Any]:
        """The container item ``i`` is read from (a SerializedList or PickledList when
        serialized); the ``records`` of :mod:`mappers.record_source`."""
        return self._lst

    def __len__(self) -> int:
        return len(self._lst)

    def __getitem__(self, index: int) -> Any:
        item = self._lst[index]
        if self._copy and not self._serialized:
            return copy.deepcopy(item)
        return item

    def __repr__(self) -> str:
        return f"DatasetFromList({len(self)} records, serialized={self._serialized})"


class _ProcessState:
    """Failure statistics of one process (never pickled, reset after fork). They feed the
    warnings and :meth:`MapDataset.failure_stats` only: no result depends on them."""

    __slots__ = ("pid", "ever_failed", "warned", "num_failures")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ever_failed: set[int] = set()
        self.warned: set[int] = set()
        self.num_failures = 0


def _file_name_of(record: Any) -> str | None:
    if isinstance(record, dict):
        name = record.get("file_name")
        return str(name) if name is not None else None
    return None


def _describe(index: int, record: Any) -> str:
    name = _file_name_of(record)
    return f"index {index}" + (f" (file_name={name!r})" if name else "")


class _MapBase:
    """What MapDataset and MapIterableDataset share: the mapper, the seed, per-process state."""

    def __init__(
        self,
        dataset: Any,
        map_func: Callable[[Any], Any],
        *,
        max_refetch: int = DEFAULT_MAX_REFETCH,
        seed: int | None = None,
    ) -> None:
        """Validate and store the arguments (documented on MapDataset).

        Raises:
            TypeError: ``map_func`` is not callable.
            ValueError: ``max_refetch`` is not an int >= 0.
        """
        if not callable(map_func):
            raise TypeError(f"MapDataset: map_func must be callable, got {type(map_func).__name__}")
        max_refetch = check_int(
            max_refetch, "max_refetch", minimum=0, error=ValueError, where="MapDataset"
        )
        self._dataset = dataset
        self._map_func = wrap_for_pickling(map_func)
        self.max_refetch = max_refetch
        # seed=None: derived from the main process's torch seed at construction time, so it
        # is fixed for this dataset object and shipped to every worker. Used only outside a
        # sample-seeded loader (the loader's sample seeds already carry its seed).
        self.seed = int(seed) if seed is not None else derive_seed(torch.initial_seed())
        self._state: _ProcessState | None = None

    @property
    def dataset(self) -> Any:
        """The wrapped dataset."""
        return self._dataset

    @property
    def map_func(self) -> Callable[[Any], Any]:
        """The mapping function."""
        return unwrap(self._map_func)

    def __len__(self) -> int:
        return len(self._dataset)

    def _process_state(self) -> _ProcessState:
        state = self._state
        if state is None or state.pid != os.getpid():
            state = self._state = _ProcessState()
        return state

    def failure_stats(self) -> dict[str, Any]:
        """Failures seen in this process so far.

        Returns:
            ``{"num_failures": int, "failed_indices": sorted list[int]}``: how many times the
            mapper returned None, and every index (stream position for an iterable input)
            that returned None at least once.
        """
        state = self._process_state()
        return {"num_failures": state.num_failures, "failed_indices": sorted(state.ever_failed)}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class MapDataset(_MapBase, data.Dataset):
    """Apply ``map_func`` to every record; a None result is replaced by another record's.

    ``ds[i]`` returns ``map_func(dataset[i])``. When that is None, another index is drawn
    uniformly from ``[0, len)`` and mapped, until a result is not None. Attempt ``a`` (0 is
    the requested index) draws from its own generator (see :mod:`mappers.random_state`):

    * inside a catmap loader (``mappers.random_state.sample_scope``, entered for each sample
      with the seed of its global stream position), the sample's attempt generator: the
      replacement index and every augmentation draw of that attempt come from it, and the
      global RNGs are seeded from it;
    * otherwise, ``attempt_generator(index_sample_seed(seed, i), a)`` for the index only
      (augmentations draw from the current generator, as in any other code).

    So the records a request ends up mapping depend only on (seed, position or index,
    attempt), never on the worker or on earlier failures. One warning is logged per failing
    index per process.

    An IterableDataset input gives a :class:`MapIterableDataset` that skips None results.

    Args:
        dataset: a map-style dataset (or an IterableDataset, see above).
        map_func: ``record -> sample or None``. Lambdas and closures are fine: they are
            pickled by value with cloudpickle when the dataset is sent to spawn workers.
        max_refetch: how many other indices to try after the requested one maps to None;
            ``max_refetch + 1`` consecutive failures raise RefetchExhaustedError.
        seed: the refetch seed used outside a sample-seeded loader. None draws one from
            ``torch.initial_seed()`` of the process that constructs the dataset (the main
            process), at construction time.

    Raises:
        RefetchExhaustedError: (a RuntimeError) from ``ds[i]`` when ``max_refetch + 1``
            records in a row map to None.

    Example:
        >>> ds = MapDataset([1, 2, 3, 4], lambda x: x * 10 if x % 2 == 0 else None, seed=0)
        >>> ds[1], ds[0] in (20, 40)
        (20, True)
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        dataset = args[0] if args else kwargs.get("dataset")
        if cls is MapDataset and isinstance(dataset, data.IterableDataset):
            return MapIterableDataset(*args, **kwargs)
        return super().__new__(cls)

    @property
    def records(self) -> Sequence[dict] | None:
        """The records item ``i`` is mapped from (``records[i]``, before any refetch): those of
        the wrapped dataset (see :mod:`mappers.record_source`), or None."""
        return records_of(self._dataset)

    def __getitem__(self, index: int) -> Any:
        state = self._process_state()
        n = len(self._dataset)
        requested = operator.index(index)
        if not -n <= requested < n:
            raise IndexError(f"MapDataset: index {requested} out of range for {n} records")
        if requested < 0:
            requested += n
        sample = current_sample()
        own_seed = None  # outside a sample scope: derived from (seed, index) when needed
        current = requested
        recent: collections.deque[int] = collections.deque(maxlen=_LAST_FAILED_SHOWN)
        map_func = self._map_func
        described = ""
        for attempt in range(self.max_refetch + 1):
            if attempt:
                if sample is not None:
                    current = int(sample.next_attempt().integers(n))
                else:
                    if own_seed is None:
                        own_seed = index_sample_seed(self.seed, requested)
                    current = int(attempt_generator(own_seed, attempt).integers(n))
            record = self._dataset[current]
            try:
                result = map_func(record)
            except Exception as exc:
                context = f"MapDataset: map_func failed on {_describe(current, record)}"
                if current != requested:
                    context += f", refetched for requested index {requested}"
                add_context(exc, context)
                raise
            if result is not None:
                return result
            if not attempt:
                described = _describe(requested, record)
            self._record_failure(state, current, record)
            recent.append(current)
        tried = self.max_refetch + 1
        raise RefetchExhaustedError(
            f"MapDataset: {described} and {tried - 1} refetched indices all mapped to "
            f"None (max_refetch={self.max_refetch}); last failing indices: {list(recent)}. "
            f"{state.num_failures} failures so far in this process.",
            index=requested,
            tried=tried,
            last_failed=list(recent),
        )

    def _record_failure(self, state: _ProcessState, index: int, record: Any) -> None:
        state.num_failures += 1
        state.ever_failed.add(index)
        if index not in state.warned:
            state.warned.add(index)
            warn_limited(
                logger,
                "MapDataset.refetch",
                "MapDataset: %s mapped to None; trying another index (%d failures so far in "
                "this process)",
                _describe(index, record),
                state.num_failures,
            )

    def __repr__(self) -> str:
        return (
            f"MapDataset({self._dataset!r}, {self.map_func!r}, max_refetch={self.max_refetch})"
        )


class MapIterableDataset(_MapBase, data.IterableDataset):
    """MapDataset over an IterableDataset: yields ``map_func(item)``, skipping None results.

    ``max_refetch + 1`` None results in a row raise RefetchExhaustedError (so an endless
    stream in which everything fails cannot loop forever). Skips are logged at the 1st, 2nd,
    4th, 8th, ... occurrence. ``len`` is the input's ``len``. Usually built through
    ``MapDataset(iterable, map_func)``.

    Example:
        >>> class Numbers(data.IterableDataset):
        ...     def __iter__(self):
        ...         return iter(range(5))
        >>> list(MapDataset(Numbers(), lambda x: x if x % 2 else None))
        [1, 3]
    """

    def __iter__(self) -> Iterator[Any]:
        state = self._process_state()
        map_func = self._map_func
        consecutive = 0
        recent: collections.deque[int] = collections.deque(maxlen=_LAST_FAILED_SHOWN)
        for position, record in enumerate(self._dataset):
            try:
                result = map_func(record)
            except Exception as exc:
                add_context(
                    exc, f"MapDataset: map_func failed on stream item {_describe(position, record)}"
                )
                raise
            if result is not None:
                consecutive = 0
                yield result
                continue
            consecutive += 1
            recent.append(position)
            state.num_failures += 1
            state.ever_failed.add(position)
            count = state.num_failures
            if count & (count - 1) == 0:
                warn_limited(
                    logger,
                    "MapDataset.stream_skip",
                    "MapDataset: stream item %s mapped to None and is skipped (%d skipped so "
                    "far in this process)",
                    _describe(position, record),
                    count,
                )
            if consecutive > self.max_refetch:
                raise RefetchExhaustedError(
                    f"MapDataset: {consecutive} stream items in a row mapped to None "
                    f"(max_refetch={self.max_refetch}); last failing positions: {list(recent)}.",
                    index=position,
                    tried=consecutive,
                    last_failed=list(recent),
                )

    def __repr__(self) -> str:
        return f"MapDataset({self._dataset!r}, {self.map_func!r}, iterable)"
