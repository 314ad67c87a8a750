"""Datasets over record lists: DatasetFromList, MapDataset (seeded, bounded refetch) and
detectron2's ToIterableDataset.

A mapper returning None means "use another record", drawn from the sample's own generator
(:mod:`mappers.random_state`); ``max_refetch`` failures in a row raise RefetchExhaustedError.

Example:
    >>> ds = MapDataset(DatasetFromList([{"file_name": "a.jpg"}]), lambda r: r["file_name"])
    >>> ds[0]
    'a.jpg'
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import itertools
import logging
import operator
import os
import pickle
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.utils import data

from catalog._common import check_int, derive_seed, warn_limited
from catalog.storage.records import SerializedList
from catalog.storage.shard_cache import SHARD_SOURCES, install_shard_sources

from .errors import MapFuncPickleError, RefetchExhaustedError, add_context
from .random_state import attempt_generator, current_sample, index_sample_seed

__all__ = [
    "DEFAULT_MAX_REFETCH",
    "DatasetFromList",
    "HasRecords",
    "MapDataset",
    "MapIterableDataset",
    "PicklableCallable",
    "ToIterableDataset",
    "needs_by_value",
    "records_of",
    "set_default_dataset_from_list_serialize_method",
    "unwrap",
    "wrap_for_pickling",
]

logger = logging.getLogger(__name__)

#: Default number of other indices MapDataset tries after a record maps to None.
DEFAULT_MAX_REFETCH = 100
_LAST_FAILED_SHOWN = 10


def needs_by_value(fn: Any) -> bool:
    """Whether pickle cannot store ``fn`` by name (a lambda, closure or nested function, or
    a partial / method of one)."""
    if isinstance(fn, functools.partial):
        return any(map(needs_by_value, (fn.func, *fn.args, *fn.keywords.values())))
    if isinstance(fn, types.MethodType):
        return needs_by_value(fn.__func__)
    if not isinstance(fn, types.FunctionType):
        return False
    try:  # a function pickles by module + qualified name: cheap, and fails for these
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, ImportError, TypeError):
        return True
    return False


class PicklableCallable:
    """Calls ``fn``; pickles it by value with cloudpickle (the ``catmap[spawn]`` extra) when
    plain pickle cannot, so lambdas reach spawn workers."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.fn)

    def __reduce__(self) -> tuple[Any, ...]:
        if not needs_by_value(self.fn):
            return (PicklableCallable, (self.fn,))
        try:
            import cloudpickle
        except ImportError:
            raise MapFuncPickleError(
                f"cannot send {self.fn!r} to spawn/forkserver DataLoader workers: a lambda, "
                'closure or nested function needs cloudpickle: pip install "catmap[spawn]" '
                "(or use a module-level function or a callable class)"
            ) from None
        try:
            return (_loads_callable, (cloudpickle.dumps(self.fn),))
        except Exception as exc:
            raise MapFuncPickleError(f"cloudpickle could not pickle {self.fn!r}: {exc}") from exc


def _loads_callable(payload: bytes) -> PicklableCallable:
    return PicklableCallable(pickle.loads(payload))  # our own bytes, inside the outer pickle


def wrap_for_pickling(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` in a :class:`PicklableCallable` when it needs by-value pickling, else ``fn``."""
    return PicklableCallable(fn) if needs_by_value(fn) else fn


def unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable inside a :class:`PicklableCallable` (or ``fn`` itself)."""
    return fn.fn if isinstance(fn, PicklableCallable) else fn


@runtime_checkable
class HasRecords(Protocol):
    """A dataset whose item ``i`` is built from ``records[i]`` (read by the loader builders
    to group by aspect ratio)."""

    @property
    def records(self) -> Any:
        """The record sequence, index for index."""


def records_of(dataset: Any) -> Sequence[dict] | None:
    """The record dicts behind ``dataset``, following public ``records`` links, or None.

    Example:
        >>> records_of([{"file_name": "a.jpg"}])[0]["file_name"], records_of(range(3))
        ('a.jpg', None)
    """
    current = dataset
    for _ in range(17):
        if isinstance(current, SerializedList):
            return current
        if isinstance(current, (list, tuple)):
            return current if all(isinstance(item, dict) for item in current[:1]) else None
        if current is None or not isinstance(current, HasRecords):
            return None
        inner = current.records
        if inner is current:
            return None
        current = inner
    return None


class PickledList(Sequence[Any]):
    """Non-dict items pickled into one buffer shared by workers (built from the caller's own
    objects); each access returns a fresh copy."""

    def __init__(self, items: Iterable[Any]) -> None:
        blobs = []
        for index, item in enumerate(items):
            try:
                blobs.append(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise TypeError(
                    f"PickledList: item {index} ({type(item).__name__}) cannot be pickled: {exc}"
                ) from exc
        self._ends = np.cumsum([len(b) for b in blobs], dtype=np.int64)
        self._buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: Any) -> Any:  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n, i = len(self._ends), operator.index(index)
        if not -n <= i < n:
            raise IndexError(f"PickledList: index {i} out of range for {n} items")
        i %= n
        start = int(self._ends[i - 1]) if i else 0
        return pickle.loads(self._buffer[start : int(self._ends[i])].tobytes())


def _default_serialize(items: Sequence[Any]) -> Sequence[Any]:
    """A :class:`SerializedList` for dicts, else a :class:`PickledList`."""
    return SerializedList(items) if all(isinstance(item, dict) for item in items) else PickledList(items)


_serialize_method: Callable[[Sequence[Any]], Sequence[Any]] = _default_serialize


@contextlib.contextmanager
def set_default_dataset_from_list_serialize_method(
        method: Callable[[Sequence[Any]], Sequence[Any]]) -> Iterator[None]:
    """Within the block, ``DatasetFromList(..., serialize=True)`` stores its items as
    ``method(items)``; the previous default is restored on leaving (also on an error).

    Example:
        >>> with set_default_dataset_from_list_serialize_method(tuple):
        ...     DatasetFromList([1, 2]).records
        (1, 2)
        >>> type(DatasetFromList([1, 2]).records).__name__
        'PickledList'
    """
    global _serialize_method
    if not callable(method):
        raise TypeError(f"set_default_dataset_from_list_serialize_method: method must be callable, "
                        f"got {type(method).__name__}")
    previous, _serialize_method = _serialize_method, method
    try:
        yield
    finally:
        _serialize_method = previous


class DatasetFromList(data.Dataset):
    """A map-style dataset over a list of records (any picklable items, as in detectron2).

    ``serialize=True`` stores them in one buffer shared by all workers (a ``SerializedList``
    for dicts; see :func:`set_default_dataset_from_list_serialize_method`); a callable builds
    the container; False keeps the list, deep-copied on access when ``copy``.

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
                f"{type(lst).__name__}; use it as it is (MapDataset, the loader builders)")
        if not hasattr(lst, "__len__"):
            if serialize is not True:
                raise TypeError(
                    f"DatasetFromList: lst must be a sized sequence of records unless "
                    f"serialize=True, got {type(lst).__name__}")
            lst = list(lst)
        if not isinstance(serialize, bool) and not callable(serialize):
            raise TypeError(
                f"DatasetFromList: serialize must be a bool or a callable, got "
                f"{type(serialize).__name__}")
        self._copy = bool(copy)
        self._serialized = serialize is not False or isinstance(lst, (SerializedList, PickledList))
        if isinstance(lst, (SerializedList, PickledList)):
            self._lst: Sequence[Any] = lst
        elif serialize:
            self._lst = (serialize if callable(serialize) else _serialize_method)(lst)
        else:
            self._lst = lst

    @property
    def records(self) -> Sequence[Any]:
        """The container item ``i`` is read from (see :func:`records_of`)."""
        return self._lst

    def __len__(self) -> int:
        return len(self._lst)

    def __getitem__(self, index: int) -> Any:
        item = self._lst[index]
        return copy.deepcopy(item) if self._copy and not self._serialized else item

    def __repr__(self) -> str:
        return f"DatasetFromList({len(self)} records, serialized={self._serialized})"


class _Failures:
    """Failure counts of one process (reset after fork, not pickled), for warnings only."""

    __slots__ = ("pid", "ever_failed", "num_failures")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ever_failed: set[int] = set()
        self.num_failures = 0


def _describe(index: int, record: Any) -> str:
    name = record.get("file_name") if isinstance(record, dict) else None
    return f"index {index}" + (f" (file_name={str(name)!r})" if name is not None else "")


class MapDataset(data.Dataset):
    """``ds[i]`` is ``map_func(dataset[i])``; a None result is replaced by another record's.

    ``max_refetch + 1`` None results in a row raise RefetchExhaustedError; ``seed`` (default
    from ``torch.initial_seed()``) is used outside a sample-seeded loader.

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

    def __init__(
        self,
        dataset: Any,
        map_func: Callable[[Any], Any],
        *,
        max_refetch: int = DEFAULT_MAX_REFETCH,
        seed: int | None = None,
    ) -> None:
        if not callable(map_func):
            raise TypeError(f"MapDataset: map_func must be callable, got {type(map_func).__name__}")
        self.max_refetch = check_int(
            max_refetch, "max_refetch", minimum=0, error=ValueError, where="MapDataset")
        self._dataset = dataset
        self._map_func = map_func  # wrapped for pickling when pickled (spawn workers)
        self.seed = int(seed) if seed is not None else derive_seed(torch.initial_seed())
        self._failures: _Failures | None = None

    @property
    def dataset(self) -> Any:
        """The wrapped dataset."""
        return self._dataset

    @property
    def map_func(self) -> Callable[[Any], Any]:
        """The mapping function."""
        return unwrap(self._map_func)

    @property
    def records(self) -> Sequence[dict] | None:
        """The records item ``i`` is mapped from (before any refetch), or None."""
        return records_of(self._dataset)

    def __len__(self) -> int:
        return len(self._dataset)

    def _process_failures(self) -> _Failures:
        if self._failures is None or self._failures.pid != os.getpid():
            self._failures = _Failures()
        return self._failures

    def failure_stats(self) -> dict[str, Any]:
        """``{"num_failures", "failed_indices"}``: this process's None results and the indices
        that gave them."""
        failures = self._process_failures()
        failed = sorted(failures.ever_failed)
        return {"num_failures": failures.num_failures, "failed_indices": failed}

    def __getstate__(self) -> dict[str, Any]:  # shard sources travel to spawned workers
        return {**self.__dict__, "_failures": None, "_map_func": wrap_for_pickling(self._map_func),
                "_shard_sources": dict(SHARD_SOURCES)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        install_shard_sources(state.pop("_shard_sources", None))
        self.__dict__.update(state)

    def __getitem__(self, index: int) -> Any:
        return self.finish(index, None)

    @property
    def uses_global_rngs(self) -> bool:
        """False when records (no code of a user) are mapped by a function whose
        ``uses_global_rngs`` is False (a DatasetMapper with catmap's augmentations): a loader
        then does not seed random, numpy and torch per sample (about 2% of a worker)."""
        return not (type(self._dataset) in (SerializedList, DatasetFromList, list, tuple)
                    and getattr(unwrap(self._map_func), "uses_global_rngs", True) is False)

    def prepare(self, index: int) -> tuple[Any, Any] | None:
        """``(record, map_func.prepare(record))`` for a map function that maps in two steps
        and uses no global RNG (``DatasetMapper`` with catmap's augmentations, not a subclass
        that may map otherwise), else None, also on any error (``finish`` without it then maps
        as ``self[index]``, raising that error in its place)."""
        map_func = unwrap(self._map_func)
        if getattr(map_func, "uses_global_rngs", True) is not False:
            return None
        prepare = map_func.prepare
        try:
            record = self._dataset[index]  # out of range: finish raises IndexError
            return record, prepare(record)
        except Exception:  # noqa: BLE001
            return None

    def read(self, prepared: tuple[Any, Any]) -> tuple[Any, Any]:
        """``prepared`` (from :meth:`prepare`) with ``map_func.read`` done: its image decoded
        and augmented, ahead of ``finish``."""
        return prepared[0], unwrap(self._map_func).read(prepared[1])

    def finish(self, index: int, prepared: tuple[Any, Any] | None) -> Any:
        """``self[index]``, its first attempt finished from ``prepared = self.prepare(index)``
        by ``map_func.finish``.

        Example:
            >>> ds = MapDataset([1, 2], lambda x: x * 10, seed=0)  # a function: one step
            >>> ds.prepare(1), ds.finish(1, None)
            (None, 20)
        """
        n, requested = len(self._dataset), operator.index(index)
        if not -n <= requested < n:
            raise IndexError(f"MapDataset: index {requested} out of range for {n} records")
        requested %= n
        current, recent = requested, []
        for attempt in range(self.max_refetch + 1):
            if attempt:
                sample = current_sample()
                rng = (sample.next_attempt() if sample is not None else
                       attempt_generator(index_sample_seed(self.seed, requested), attempt))
                current = int(rng.integers(n))
            record = prepared[0] if prepared is not None and not attempt else self._dataset[current]
            try:
                result = (unwrap(self._map_func).finish(prepared[1])
                          if prepared is not None and not attempt else self._map_func(record))
            except Exception as exc:
                context = f"MapDataset: map_func failed on {_describe(current, record)}"
                if current != requested:
                    context += f", refetched for requested index {requested}"
                add_context(exc, context)
                raise
            if result is not None:
                return result
            if not recent:
                described = _describe(requested, record)
            self._failed(current, record)
            recent = [*recent[1 - _LAST_FAILED_SHOWN:], current]
        failures = self._process_failures()
        raise RefetchExhaustedError(
            f"MapDataset: {described} and {self.max_refetch} refetched indices all mapped to "
            f"None (max_refetch={self.max_refetch}); last failing indices: {recent}. "
            f"{failures.num_failures} failures so far in this process.",
            index=requested, tried=self.max_refetch + 1, last_failed=recent)

    def _failed(self, index: int, record: Any, stream: bool = False) -> int:
        """Count a None result; warn once per index (per power of two for a stream)."""
        failures = self._process_failures()
        first = index not in failures.ever_failed
        failures.ever_failed.add(index)
        failures.num_failures += 1
        count = failures.num_failures
        if stream and count & (count - 1) == 0:
            warn_limited(logger, "MapDataset.stream_skip", "MapDataset: stream item %s mapped to "
                         "None and is skipped (%d skipped so far in this process)",
                         _describe(index, record), count)
        elif not stream and first:
            warn_limited(logger, "MapDataset.refetch", "MapDataset: %s mapped to None; trying "
                         "another index (%d failures so far in this process)",
                         _describe(index, record), count)
        return count

    def __repr__(self) -> str:
        return f"MapDataset({self._dataset!r}, {self.map_func!r}, max_refetch={self.max_refetch})"


class MapIterableDataset(MapDataset, data.IterableDataset):
    """MapDataset over an IterableDataset: skips None results, ``max_refetch + 1`` in a row
    raise RefetchExhaustedError.
    """

    def __getitem__(self, index: int) -> Any:
        raise TypeError("MapDataset over an IterableDataset cannot be indexed; iterate it")

    records = None  # a stream names no records

    def __iter__(self) -> Iterator[Any]:
        consecutive, recent = 0, []
        for position, record in enumerate(self._dataset):
            try:
                result = self._map_func(record)
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
            recent = [*recent[1 - _LAST_FAILED_SHOWN:], position]
            self._failed(position, record, stream=True)
            if consecutive > self.max_refetch:
                raise RefetchExhaustedError(
                    f"MapDataset: {consecutive} stream items in a row mapped to None "
                    f"(max_refetch={self.max_refetch}); last failing positions: {recent}.",
                    index=position, tried=consecutive, last_failed=recent)

    def __repr__(self) -> str:
        return f"MapDataset({self._dataset!r}, {self.map_func!r}, iterable)"


class ToIterableDataset(data.IterableDataset):
    """detectron2's: an IterableDataset of ``dataset[i]`` for ``i`` in ``sampler``.

    With N workers each worker keeps every N-th chunk of ``shard_chunk_size`` indices, so a
    DataLoader with ``batch_size == shard_chunk_size`` yields the sequence of 0 workers.

    Example:
        >>> list(ToIterableDataset(["a", "b", "c"], [2, 0, 1]))
        ['c', 'a', 'b']
    """

    def __init__(
        self,
        dataset: Any,
        sampler: Iterable[int],
        shard_sampler: bool = True,
        shard_chunk_size: int = 1,
    ) -> None:
        if isinstance(dataset, data.IterableDataset):
            raise TypeError("ToIterableDataset: dataset must be map-style, got an IterableDataset")
        self.shard_chunk_size = check_int(
            shard_chunk_size, "shard_chunk_size", minimum=1, error=ValueError,
            where="ToIterableDataset",
        )
        if not isinstance(sampler, Iterable):
            raise TypeError(
                f"ToIterableDataset: sampler must be an iterable of indices, got "
                f"{type(sampler).__name__}")
        self.dataset = dataset
        self.sampler = sampler
        self.shard_sampler = bool(shard_sampler)

    def __iter__(self) -> Iterator[Any]:
        info = data.get_worker_info()
        indices: Iterator[int] = iter(self.sampler)
        if self.shard_sampler and info is not None and info.num_workers > 1:
            indices = self._shard(indices, info.id, info.num_workers)
        for index in indices:
            yield self.dataset[index]

    def _shard(self, indices: Iterator[int], worker: int, num_workers: int) -> Iterator[int]:
        chunk = self.shard_chunk_size
        skip_before, skip_after = worker * chunk, (num_workers - 1 - worker) * chunk
        consume = collections.deque(maxlen=0).extend
        consume(itertools.islice(indices, skip_before))
        while taken := list(itertools.islice(indices, chunk)):
            yield from taken
            if len(taken) < chunk:
                return
            consume(itertools.islice(indices, skip_after + skip_before))

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"ToIterableDataset({self.dataset!r}, sampler={self.sampler!r}, "
            f"shard_chunk_size={self.shard_chunk_size})")
