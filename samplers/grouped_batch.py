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
from .sample_seed import StreamPositions
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
    partial batches left are yielded (or dropped with ``drop_last=True``). The global stream
    position of every index is kept with it while it waits (:meth:`iter_with_positions`), so
    the loaders can seed each sample's augmentations from it.

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
        # pending (index, global stream position) pairs per group
        self._buckets: list[list[tuple[int, int]]] = [[] for _ in range(self.num_groups)]
        self._positions = StreamPositions(sampler)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.iter_with_positions():
            yield [index for index, _ in batch]

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        """Batches of ``(index, global stream position)`` pairs; ``iter()`` without positions.

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(4, shuffle=False, rank=0, world_size=1)
            >>> next(GroupedBatchSampler(s, [0, 1, 0, 1], 2).iter_with_positions())
            [(0, 0), (2, 2)]
        """
        group_ids = self.group_ids
        buckets = self._buckets
        size = self.batch_size
        total = len(group_ids)
        for index, position in self._positions.draw(self.sampler):
            if not 0 <= index < total:
                raise IndexError(
                    f"GroupedBatchSampler: the sampler yielded index {index}, but group_ids "
                    f"covers {total} records"
                )
            bucket = buckets[group_ids[index]]
            bucket.append((index, position))
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
        """The sampler's state, the indices waiting in each group with their global stream
        positions (per rank), and the global position of the next draw."""
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"GroupedBatchSampler: {type(self.sampler).__name__} has no state_dict(); use a "
                "catmap training sampler for exact resume"
            )
        rank, world = self._rank_and_world()
        return make_state(
            "GroupedBatchSampler",
            sampler=self.sampler.state_dict(),
            buckets=[[index for index, _ in b] for b in self._buckets],
            bucket_positions=[[position for _, position in b] for b in self._buckets],
            position=self._positions.next,
            batch_size=self.batch_size,
            rank=rank,
            world_size=world,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler, the pending indices and the position count.

        Raises:
            ReshardError: the state holds pending indices of another rank or world size (they
                were drawn from that rank's shard and cannot be re-sharded).
            SamplerStateError: malformed state.
        """
        state = check_state(
            state_dict,
            "GroupedBatchSampler",
            ["sampler", "buckets", "bucket_positions", "position"],
        )
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
        positions, bucket_positions = self._checked_positions(state, buckets)
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"GroupedBatchSampler: {type(self.sampler).__name__} has no load_state_dict()"
            )
        self.sampler.load_state_dict(state["sampler"])
        self._buckets = [
            list(zip(b, p, strict=True))
            for b, p in zip(buckets[: self.num_groups], bucket_positions, strict=False)
        ]
        self._buckets += [[] for _ in range(self.num_groups - len(self._buckets))]
        self._positions = positions

    def _checked_positions(
        self, state: Any, buckets: list[list[int]]
    ) -> tuple[StreamPositions, list[list[int]]]:
        """The position count and the pending positions of a state, validated."""
        bucket_positions = state["bucket_positions"]
        if not isinstance(bucket_positions, list) or [
            len(b) if isinstance(b, list) else -1 for b in bucket_positions
        ] != [len(b) for b in buckets]:
            raise SamplerStateError(
                "GroupedBatchSampler.load_state_dict: 'bucket_positions' must hold one global "
                "stream position per pending index of 'buckets'"
            )
        positions = StreamPositions(self.sampler)
        positions.load(state["position"], "GroupedBatchSampler")
        for bucket in bucket_positions:
            for position in bucket:
                if (
                    isinstance(position, bool)
                    or not isinstance(position, int)
                    or not 0 <= position < positions.next
                ):
                    raise SamplerStateError(
                        f"GroupedBatchSampler.load_state_dict: pending position {position!r} is "
                        f"not a drawn position (0 <= position < {positions.next})"
                    )
        return positions, bucket_positions
