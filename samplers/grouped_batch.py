"""GroupedBatchSampler: batches whose indices all share a group (e.g. landscape vs portrait).

Grouping happens in index space, from the records' width and height, before any record is
read or mapped, so it is cheap and its state (pending indices per group) is resumable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from catalog.serialized_list import RecordColumns

from .batch import check_batch_size
from .errors import NotResumableError, ReshardError, SamplerStateError
from .state import check_state, is_stateful, make_state

__all__ = ["GroupedBatchSampler", "aspect_ratio_group_ids", "UNKNOWN_SIZE_GROUP"]

logger = logging.getLogger(__name__)

#: Group of records whose width or height is unknown.
UNKNOWN_SIZE_GROUP = 2


def aspect_ratio_group_ids(dataset_dicts: Any) -> np.ndarray:
    """Group id per record: 0 when ``width > height``, 1 otherwise, 2 when either is unknown.

    A SerializedList is read from its columns without unpickling; other sequences of dicts
    are read record by record.

    Args:
        dataset_dicts: a SerializedList or a sequence of record dicts.

    Returns:
        int64 array (N,).

    Example:
        >>> aspect_ratio_group_ids([{"width": 4, "height": 3}, {"width": 3, "height": 4}, {}])
        array([0, 1, 2])
    """
    columns = getattr(dataset_dicts, "columns", None)
    if isinstance(columns, RecordColumns):
        widths = columns.widths.astype(np.int64)
        heights = columns.heights.astype(np.int64)
    else:
        widths = np.empty(len(dataset_dicts), dtype=np.int64)
        heights = np.empty(len(dataset_dicts), dtype=np.int64)
        for i, record in enumerate(dataset_dicts):
            w = record.get("width", -1) if isinstance(record, dict) else -1
            h = record.get("height", -1) if isinstance(record, dict) else -1
            widths[i] = w if isinstance(w, (int, np.integer)) and not isinstance(w, bool) else -1
            heights[i] = h if isinstance(h, (int, np.integer)) and not isinstance(h, bool) else -1
    groups = np.where(widths > heights, 0, 1).astype(np.int64)
    unknown = (widths <= 0) | (heights <= 0)
    if unknown.any():
        groups[unknown] = UNKNOWN_SIZE_GROUP
        name = getattr(dataset_dicts, "name", None)
        logger.warning(
            "%d of %d records%s have no width/height; they are batched in a group of their own",
            int(unknown.sum()),
            len(groups),
            f" of dataset {name!r}" if name else "",
        )
    return groups


class GroupedBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices from ``sampler`` where every index has the same group.

    Indices are buffered per group until a group holds a full batch, which is yielded at once;
    batches therefore come in roughly the sampler's order. At the end of a finite sampler the
    partial batches left are yielded (or dropped with ``drop_last=True``).

    Args:
        sampler: yields dataset indices (a catmap training sampler for exact resume).
        group_ids: the group of every dataset index (ints >= 0).
        batch_size: indices per batch.
        drop_last: drop the partial batches left when a finite sampler ends.

    Raises:
        TypeError / ValueError: malformed ``group_ids`` or ``batch_size``.
        IndexError: the sampler yields an index outside ``group_ids``.

    Example:
        >>> from samplers import TrainingSampler
        >>> s = TrainingSampler(4, shuffle=False, rank=0, world_size=1)
        >>> it = iter(GroupedBatchSampler(s, [0, 1, 0, 1], 2))
        >>> next(it), next(it)
        ([0, 2], [1, 3])
    """

    def __init__(
        self, sampler: Any, group_ids: Any, batch_size: int, drop_last: bool = False
    ) -> None:
        self.sampler = sampler
        self.batch_size = check_batch_size(batch_size, "GroupedBatchSampler")
        ids = np.asarray(group_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(
                f"GroupedBatchSampler: group_ids must be a 1-D sequence of ints, got dtype "
                f"{ids.dtype} and shape {ids.shape}"
            )
        ids = ids.astype(np.int64)
        if ids.size and int(ids.min()) < 0:
            raise ValueError(
                f"GroupedBatchSampler: group id of index {int(np.argmin(ids))} is negative"
            )
        self.group_ids = ids
        self.num_groups = int(ids.max()) + 1 if ids.size else 0
        self.drop_last = bool(drop_last)
        self._buckets: list[list[int]] = [[] for _ in range(self.num_groups)]

    def __iter__(self) -> Iterator[list[int]]:
        group_ids = self.group_ids
        buckets = self._buckets
        size = self.batch_size
        total = len(group_ids)
        for index in self.sampler:
            if not 0 <= index < total:
                raise IndexError(
                    f"GroupedBatchSampler: the sampler yielded index {index}, but group_ids "
                    f"covers {total} records"
                )
            bucket = buckets[group_ids[index]]
            bucket.append(index)
            if len(bucket) == size:
                batch = bucket[:]
                bucket.clear()
                yield batch
        for group, bucket in enumerate(buckets):
            if bucket and not self.drop_last:
                batch = bucket[:]
                bucket.clear()
                yield batch
            elif bucket:
                logger.debug("dropped %d indices of group %d (drop_last=True)", len(bucket), group)
                bucket.clear()

    def __len__(self) -> int:
        raise TypeError("GroupedBatchSampler has no length: batch count depends on the order")

    def _rank_and_world(self) -> tuple[int | None, int | None]:
        return getattr(self.sampler, "rank", None), getattr(self.sampler, "world_size", None)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state and the indices waiting in each group (per rank)."""
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"GroupedBatchSampler: {type(self.sampler).__name__} has no state_dict(); use a "
                "catmap training sampler for exact resume"
            )
        rank, world = self._rank_and_world()
        return make_state(
            "GroupedBatchSampler",
            sampler=self.sampler.state_dict(),
            buckets=[list(b) for b in self._buckets],
            batch_size=self.batch_size,
            rank=rank,
            world_size=world,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler and the pending indices.

        Raises:
            ReshardError: the state holds pending indices of another rank or world size (they
                were drawn from that rank's shard and cannot be re-sharded).
            SamplerStateError: malformed state.
        """
        state = check_state(state_dict, "GroupedBatchSampler", ["sampler", "buckets"])
        buckets = state["buckets"]
        if not isinstance(buckets, list) or not all(isinstance(b, list) for b in buckets):
            raise SamplerStateError("GroupedBatchSampler.load_state_dict: 'buckets' must be lists")
        if len(buckets) > self.num_groups and any(buckets[self.num_groups :]):
            raise SamplerStateError(
                f"GroupedBatchSampler.load_state_dict: the state has {len(buckets)} groups, "
                f"these group_ids have {self.num_groups}"
            )
        rank, world = self._rank_and_world()
        pending = sum(len(b) for b in buckets)
        saved = (state.get("rank"), state.get("world_size"))
        if pending and saved != (rank, world):
            raise ReshardError(
                f"GroupedBatchSampler.load_state_dict: the state was saved by rank {saved[0]} of "
                f"{saved[1]} and holds {pending} indices drawn from that rank's shard but not yet "
                f"batched; load it on rank {saved[0]} of {saved[1]} (this is rank {rank} of "
                f"{world}). Save each rank's state, or save where no index is pending."
            )
        total = len(self.group_ids)
        for group, bucket in enumerate(buckets):
            for index in bucket:
                if (
                    not (isinstance(index, int) and 0 <= index < total)
                    or self.group_ids[index] != group
                ):
                    raise SamplerStateError(
                        f"GroupedBatchSampler.load_state_dict: pending index {index!r} does not "
                        f"belong to group {group} of these group_ids"
                    )
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"GroupedBatchSampler: {type(self.sampler).__name__} has no load_state_dict()"
            )
        self.sampler.load_state_dict(state["sampler"])
        self._buckets = [list(b) for b in buckets[: self.num_groups]]
        self._buckets += [[] for _ in range(self.num_groups - len(self._buckets))]
