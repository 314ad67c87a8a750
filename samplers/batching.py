"""Batch samplers: fixed-size and aspect-ratio-grouped batches of ``(index, global position)``,
resumable when the sampler is; :class:`AspectRatioGroupedDataset` groups an IterableDataset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, Sampler

from catalog.storage.records import RecordColumns
from catalog._common import check_positive_size, is_int, is_number

from .errors import ImageSizeKeyError, NotResumableError, ReshardError, SamplerConfigError, SamplerStateError
from .state import (
    MAX_LIST, MAX_POSITION, Notes, array_digest, check_config, check_int, check_int_list,
    Stateful, check_state, make_state, prepare_nested_load,
)

logger = logging.getLogger(__name__)

#: Group of records whose width or height is unknown.
UNKNOWN_SIZE_GROUP = 2
MAX_GROUPS = 2**16


class PositionedBatchSampler(Sampler[list[int]]):
    """Shared by the batch samplers: each index comes with its global stream position (rank
    ``r`` of ``w`` draws positions ``r, r + w, ...``; ``_cursor`` is rank 0's next);
    ``iter()`` drops the positions; loading checks first."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        self.sampler = sampler
        self.batch_size = check_positive_size(batch_size, "batch_size", error=SamplerConfigError,
                                              where=type(self).__name__)
        self.drop_last = bool(drop_last)
        rank, world = getattr(sampler, "rank", None), getattr(sampler, "world_size", None)
        valid = isinstance(rank, int) and isinstance(world, int) and 0 <= rank < world
        self._rank, self._world_size = (rank, world) if valid else (0, 1)  # a plain sampler: 0 of 1
        self._cursor = 0

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.iter_with_positions():
            yield [index for index, _ in batch]

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        raise NotImplementedError

    def _prepare_load(self, state_dict: Any, *, strict: bool, notes: Notes) -> Callable[[], None]:
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restore a saved state (untrusted); a rejected state changes nothing."""
        notes = Notes()
        commit = self._prepare_load(state_dict, strict=bool(strict), notes=notes)
        notes.emit(type(self).__name__)
        commit()

    def _require_stateful(self, method: str) -> None:
        if not isinstance(self.sampler, Stateful):
            raise NotResumableError(f"{type(self).__name__}: {type(self.sampler).__name__} has no "
                                    f"{method}(); use a catmap training sampler for exact resume")



class ResumableBatchSampler(PositionedBatchSampler):
    """Lists of ``batch_size`` indices, never pulling an index it does not deliver.

    Example:
        >>> from samplers import TrainingSampler
        >>> b = ResumableBatchSampler(TrainingSampler(5, shuffle=False, rank=0, world_size=1), 2)
        >>> it = iter(b); next(it), next(it), next(it)
        ([0, 1], [2, 3], [4, 0])
    """

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool = False) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self._origin: int | None = None

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        if self._origin is None:
            self._origin = self._cursor
        else:
            self._cursor = self._origin
        batch: list[tuple[int, int]] = []
        rank, world = self._rank, self._world_size
        for index in self.sampler:
            batch.append((index, self._cursor + rank))
            self._cursor += world
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # TypeError for endless samplers
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _config(self) -> dict[str, Any]:
        return {"global_batch_size": self.batch_size * self._world_size,
                "drop_last": self.drop_last}

    def state_dict(self) -> dict[str, Any]:
        self._require_stateful("state_dict")
        return make_state("ResumableBatchSampler", position=self._cursor,
                          sampler=self.sampler.state_dict(), config=self._config())

    def _prepare_load(self, state_dict: Any, *, strict: bool, notes: Notes) -> Callable[[], None]:
        name = "ResumableBatchSampler"
        state = check_state(state_dict, name, ["sampler", "position", "config"])
        check_config(state["config"], self._config(), name, strict=strict, notes=notes)
        self._require_stateful("load_state_dict")
        cursor = check_int(state["position"], "position", name, 0, MAX_POSITION)
        load_sampler = prepare_nested_load(self.sampler, state["sampler"], strict=strict, notes=notes)

        def commit() -> None:
            load_sampler()
            self._cursor, self._origin = cursor, None

        return commit


def aspect_ratio_group_ids(dataset_dicts: Any) -> np.ndarray:
    """Group per record: 0 when ``width > height``, 1 otherwise, 2 when either is unknown.

    Example:
        >>> aspect_ratio_group_ids([{"width": 4, "height": 3}, {"width": 3, "height": 4}, {}])
        array([0, 1, 2])
    """
    columns = getattr(dataset_dicts, "columns", None)
    if isinstance(columns, RecordColumns):
        widths, heights = columns.widths.astype(np.int64), columns.heights.astype(np.int64)
    else:
        def size(record: Any, key: str) -> int:
            value = record.get(key, -1) if isinstance(record, dict) else -1
            return value if is_int(value) else -1

        widths = np.array([size(r, "width") for r in dataset_dicts], dtype=np.int64)
        heights = np.array([size(r, "height") for r in dataset_dicts], dtype=np.int64)
    groups = np.where(widths > heights, 0, 1).astype(np.int64)
    unknown = (widths <= 0) | (heights <= 0)
    if unknown.any():
        groups[unknown] = UNKNOWN_SIZE_GROUP
        name = getattr(dataset_dicts, "name", None)
        logger.warning("%d of %d records%s have no width/height; they are batched in a group of "
                       "their own", int(unknown.sum()), len(groups), f" of dataset {name!r}" if name else "")
    return groups


class GroupedBatchSampler(PositionedBatchSampler):
    """Batches of ``batch_size`` indices that share a group (e.g. landscape / portrait); the
    state holds the pending indices, so it loads only on the same rank (ReshardError).

    Example:
        >>> from samplers import TrainingSampler
        >>> s = TrainingSampler(4, shuffle=False, rank=0, world_size=1)
        >>> it = iter(GroupedBatchSampler(s, [0, 1, 0, 1], 2))
        >>> next(it), next(it)
        ([0, 2], [1, 3])
    """

    def __init__(self, sampler: Any, group_ids: Any, batch_size: int, drop_last: bool = True) -> None:
        super().__init__(sampler, batch_size, drop_last)
        ids = np.asarray(group_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(f"GroupedBatchSampler: group_ids must be a 1-D sequence of ints, got "
                            f"dtype {ids.dtype} and shape {ids.shape}")
        ids = ids.astype(np.int64)
        if ids.size and int(ids.min()) < 0:
            raise ValueError(f"GroupedBatchSampler: group id of index {int(np.argmin(ids))} is negative")
        if ids.size and int(ids.max()) >= MAX_GROUPS:
            raise ValueError(f"GroupedBatchSampler: group id of index {int(np.argmax(ids))} is "
                             f"{int(ids.max())}; group ids must be below {MAX_GROUPS}")
        # kept by every rank for the whole run: 1 byte per record (2 above 256 groups)
        self.group_ids = ids.astype(np.uint8 if not ids.size or int(ids.max()) < 256 else np.uint16)
        self.group_ids.flags.writeable = False
        self._ids_digest: str | None = None
        self.num_groups = int(ids.max()) + 1 if ids.size else 0
        # the pending (index, position) pairs of each group; iteration works on list copies
        self._buckets: Sequence[Sequence[tuple[int, int]]] = ((),) * self.num_groups
        self._origin: tuple[int, Sequence[Sequence[tuple[int, int]]]] | None = None

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        if self._origin is None:
            self._origin = (self._cursor, self._buckets)
        self._cursor = self._origin[0]
        self._buckets = buckets = list(map(list, self._origin[1]))  # the origin stays as it was
        group_ids, size, total = self.group_ids, self.batch_size, len(self.group_ids)
        rank, world = self._rank, self._world_size
        for index in self.sampler:
            if not 0 <= index < total:
                raise IndexError(f"GroupedBatchSampler: the sampler yielded index {index}, but "
                                 f"group_ids covers {total} records")
            bucket = buckets[group_ids[index]]
            bucket.append((index, self._cursor + rank))
            self._cursor += world
            if len(bucket) >= size:
                batch = bucket[:size]
                del bucket[:size]
                yield batch
        for bucket in buckets:
            if bucket and not self.drop_last:
                yield bucket[:]
            bucket.clear()

    def __len__(self) -> int:
        raise TypeError("GroupedBatchSampler has no length: batch count depends on the order")

    def _config(self) -> dict[str, Any]:
        if self._ids_digest is None:
            self._ids_digest = array_digest(self.group_ids, "<i8")
        return {"global_batch_size": self.batch_size * self._world_size,
                "drop_last": self.drop_last, "size": len(self.group_ids),
                "num_groups": self.num_groups, "group_ids": self._ids_digest}

    def state_dict(self) -> dict[str, Any]:
        self._require_stateful("state_dict")
        return make_state(
            "GroupedBatchSampler", sampler=self.sampler.state_dict(),
            buckets=[[index for index, _ in b] for b in self._buckets],
            bucket_positions=[[position for _, position in b] for b in self._buckets],
            position=self._cursor, rank=getattr(self.sampler, "rank", None),
            world_size=getattr(self.sampler, "world_size", None), config=self._config())

    def _prepare_load(self, state_dict: Any, *, strict: bool, notes: Notes) -> Callable[[], None]:
        name = "GroupedBatchSampler"
        state = check_state(state_dict, name, ["sampler", "buckets", "bucket_positions", "position",
                                               "rank", "world_size", "config"])
        buckets = state["buckets"]
        if isinstance(buckets, (list, tuple)) and len(buckets) <= MAX_LIST:  # say this first
            count = sum(len(b) for b in buckets if isinstance(b, (list, tuple, np.ndarray)))
            if count:
                self._check_same_rank(state, count)
        check_config(state["config"], self._config(), name, strict=strict, notes=notes)
        self._require_stateful("load_state_dict")
        cursor = check_int(state["position"], "position", name, 0, MAX_POSITION)
        pending = self._checked_pending(state, cursor, strict)
        load_sampler = prepare_nested_load(self.sampler, state["sampler"], strict=strict, notes=notes)
        regrouped: list[list[tuple[int, int]]] = [[] for _ in range(self.num_groups)]
        for index, position in sorted(pending, key=lambda pair: pair[1]):
            regrouped[self.group_ids[index]].append((index, position))

        def commit() -> None:
            load_sampler()
            self._buckets, self._cursor, self._origin = regrouped, cursor, None

        return commit

    def _check_same_rank(self, state: Mapping[str, Any], pending: int) -> None:
        mine = (getattr(self.sampler, "rank", None), getattr(self.sampler, "world_size", None))
        saved = (state.get("rank"), state.get("world_size"))
        for key, value in zip(("rank", "world_size"), saved):
            if value is not None and not is_int(value):
                raise SamplerStateError(f"GroupedBatchSampler.load_state_dict: {key!r} must be an "
                                        f"int or None, got {type(value).__name__} {repr(value)[:80]}")
        if saved != mine:
            raise ReshardError(
                f"GroupedBatchSampler.load_state_dict: the state was saved by rank "
                f"{repr(saved[0])[:20]} of {repr(saved[1])[:20]} and holds {pending} indices drawn "
                f"from that rank's shard but not yet batched; load it on that rank (this is rank "
                f"{mine[0]} of {mine[1]}). Save each rank's state, or save where none is pending.")

    def _checked_pending(self, state: Mapping[str, Any], drawn: int, strict: bool) -> list[tuple[int, int]]:
        name = "GroupedBatchSampler"
        buckets, bucket_positions = state["buckets"], state["bucket_positions"]
        groups = self.num_groups if strict else MAX_LIST  # non-strict: regrouped by these ids
        for key, value in (("buckets", buckets), ("bucket_positions", bucket_positions)):
            if not isinstance(value, (list, tuple)) or len(value) > groups:
                raise SamplerStateError(f"{name}.load_state_dict: {key!r} must be a list of at most "
                                        f"{groups} lists (one per group), got {repr(value)[:80]}")
        if len(bucket_positions) != len(buckets):
            raise SamplerStateError(f"{name}.load_state_dict: 'bucket_positions' must hold one "
                                    "global stream position per pending index of 'buckets'")
        longest = self.batch_size - 1 if strict else MAX_LIST  # a full bucket was yielded
        pending: list[tuple[int, int]] = []
        for group, (indices, positions) in enumerate(zip(buckets, bucket_positions)):
            indices = check_int_list(indices, f"buckets[{group}]", name, 0, len(self.group_ids), longest)
            foreign = [i for i in indices if strict and self.group_ids[i] != group]
            if foreign:
                raise SamplerStateError(f"{name}.load_state_dict: pending index {foreign[0]} does "
                                        f"not belong to group {group} of these group_ids")
            positions = check_int_list(positions, f"bucket_positions[{group}]", name, 0, MAX_POSITION, longest)
            if len(positions) != len(indices):
                raise SamplerStateError(f"{name}.load_state_dict: 'bucket_positions' must hold one "
                                        f"global stream position per pending index (group {group})")
            if any(position >= drawn for position in positions):
                raise SamplerStateError(f"{name}.load_state_dict: a pending position of group "
                                        f"{group} is not a drawn position (0 <= position < {drawn})")
            pending.extend(zip(indices, positions))
        if len({position for _, position in pending}) != len(pending):
            raise SamplerStateError(f"{name}.load_state_dict: two pending indices share a global "
                                    "stream position")
        return pending


class AspectRatioGroupedDataset(IterableDataset):
    """Batches of ``batch_size`` items of one orientation from an iterable of dicts (as in
    detectron2); ImageSizeKeyError for an item without numeric width / height.

    Example:
        >>> items = [{"width": 4, "height": 3, "i": 0}, {"width": 3, "height": 4, "i": 1},
        ...          {"width": 5, "height": 2, "i": 2}, {"width": 2, "height": 2, "i": 3}]
        >>> [[d["i"] for d in b] for b in AspectRatioGroupedDataset(items, 2)]
        [[0, 2], [1, 3]]
    """

    def __init__(self, dataset: Iterable[Any], batch_size: int, drop_last: bool = True) -> None:
        if not isinstance(dataset, Iterable):
            raise TypeError(f"AspectRatioGroupedDataset: dataset must be iterable, got "
                            f"{type(dataset).__name__}")
        self.dataset = dataset
        self.batch_size = check_positive_size(batch_size, "batch_size", error=SamplerConfigError,
                                              where="AspectRatioGroupedDataset")
        self.drop_last = bool(drop_last)
        self._buckets: list[list[Any]] = [[], []]  # pending items of the current iteration

    @staticmethod
    def _size(item: Any, key: str, position: int) -> Any:
        where = f"AspectRatioGroupedDataset: item {position} of the stream"
        if not isinstance(item, dict):
            raise ImageSizeKeyError(f"{where} is a {type(item).__name__}, not a dict with 'width' "
                                    "and 'height'", position=position, key=key)
        if key not in item:
            raise ImageSizeKeyError(f"{where} has no {key!r} (keys: {sorted(map(str, item))[:10]})",
                                    position=position, key=key)
        if not is_number(item[key]):
            raise ImageSizeKeyError(f"{where} has {key}={repr(item[key])[:40]}, not a number",
                                    position=position, key=key)
        return item[key]

    def __iter__(self) -> Iterator[list[Any]]:
        # a restarted iteration starts with empty buckets: leftovers of an abandoned one are dropped
        self._buckets: list[list[Any]] = [[], []]
        buckets = self._buckets
        for position, item in enumerate(self.dataset):
            landscape = self._size(item, "width", position) > self._size(item, "height", position)
            bucket = buckets[0 if landscape else 1]
            bucket.append(item)
            if len(bucket) == self.batch_size:
                batch = bucket[:]
                bucket.clear()  # before the yield: the consumer may never come back
                yield batch
        for bucket in buckets:
            if bucket and not self.drop_last:
                yield bucket[:]
            bucket.clear()

    def __repr__(self) -> str:
        return (f"AspectRatioGroupedDataset({self.dataset!r}, batch_size={self.batch_size}, "
                f"drop_last={self.drop_last})")
