"""GroupedBatchSampler: batches whose indices all share a group (e.g. landscape vs portrait).

Grouping happens in index space, from the records' width and height, before any record is
read or mapped, so it is cheap and its state (pending indices per group) is resumable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from catalog.storage.records import RecordColumns

from .batch import PositionedBatchSampler, check_batch_size
from .errors import ReshardError, SamplerStateError
from .sample_seed import StreamPositions
from .state import check_state, is_legacy_state, make_state
from .state_fields import (
    LEGACY_NOTE,
    MAX_LIST,
    MAX_POSITION,
    LoadNotes,
    array_digest,
    check_config,
    check_int_list,
    is_int,
    prepare_nested_load,
)

__all__ = ["GroupedBatchSampler", "aspect_ratio_group_ids", "UNKNOWN_SIZE_GROUP"]

logger = logging.getLogger(__name__)

#: Group of records whose width or height is unknown.
UNKNOWN_SIZE_GROUP = 2

#: Group ids lie in ``[0, MAX_GROUPS)`` (one bucket is kept per group).
MAX_GROUPS = 2**16


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
            widths[i] = w if is_int(w) else -1
            heights[i] = h if is_int(h) else -1
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


class GroupedBatchSampler(PositionedBatchSampler):
    """Batches of ``batch_size`` indices from ``sampler`` where every index has the same group.

    Indices are buffered per group until a group holds a full batch, which is yielded at once;
    batches therefore come in roughly the sampler's order. As in detectron2, only full batches
    are yielded: the partial groups left when a finite sampler ends are dropped
    (``drop_last=True``, the default); ``drop_last=False`` yields them too, group by group
    (e.g. so that grouped evaluation sees every record). The global stream position of every
    index is kept with it while it waits (:meth:`iter_with_positions`), so the loaders can
    seed each sample's augmentations from it.

    Each ``iter()`` starts from the origin: where the sampler was constructed (empty groups)
    or last loaded (:meth:`load_state_dict`: the saved pending indices), and the wrapped
    catmap sampler restarts likewise. (detectron2 restarts the sampler but keeps the indices
    a previous iteration left pending; here a second ``iter()`` repeats the first exactly.)

    Args:
        sampler: yields dataset indices (a catmap training sampler for exact resume).
        group_ids: the group of every dataset index (ints >= 0).
        batch_size: indices per batch.
        drop_last: drop the partial batches left when a finite sampler ends (detectron2's
            behaviour, the default); False yields them at the end.

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
        self, sampler: Any, group_ids: Any, batch_size: int, drop_last: bool = True
    ) -> None:
        self.sampler = sampler
        self.batch_size = check_batch_size(batch_size, "GroupedBatchSampler")
        ids = np.asarray(group_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(
                f"GroupedBatchSampler: group_ids must be a 1-D sequence of ints, got dtype "
                f"{ids.dtype} and shape {ids.shape}"
            )
        ids = ids.astype(np.int64)  # a copy we own
        if ids.size and int(ids.min()) < 0:
            raise ValueError(
                f"GroupedBatchSampler: group id of index {int(np.argmin(ids))} is negative"
            )
        if ids.size and int(ids.max()) >= MAX_GROUPS:
            raise ValueError(
                f"GroupedBatchSampler: group id of index {int(np.argmax(ids))} is "
                f"{int(ids.max())}; group ids must be below {MAX_GROUPS}"
            )
        # kept by every rank for the whole run: 1 byte per record (2 above 256 groups), not 8
        ids = ids.astype(np.uint8 if not ids.size or int(ids.max()) < 256 else np.uint16)
        ids.flags.writeable = False
        self.group_ids = ids
        self._ids_digest: tuple[np.ndarray, str] | None = None
        self.num_groups = int(ids.max()) + 1 if ids.size else 0
        self.drop_last = bool(drop_last)
        # pending (index, global stream position) pairs per group
        self._buckets: list[list[tuple[int, int]]] = [[] for _ in range(self.num_groups)]
        self._positions = StreamPositions(sampler)
        # what iter() restarts from: (next position, pending pairs per group); None = now
        self._origin: tuple[int, list[list[tuple[int, int]]]] | None = None

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        """Batches of ``(index, global stream position)`` pairs; ``iter()`` without positions.

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(4, shuffle=False, rank=0, world_size=1)
            >>> next(GroupedBatchSampler(s, [0, 1, 0, 1], 2).iter_with_positions())
            [(0, 0), (2, 2)]
        """
        if self._origin is None:
            self._origin = (self._positions.cursor, [list(b) for b in self._buckets])
        else:
            self._positions.cursor = self._origin[0]
            self._buckets = [list(b) for b in self._origin[1]]
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
            if len(bucket) >= size:  # more than size only after a non-strict load
                batch = bucket[:size]
                del bucket[:size]
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

    def _config(self) -> dict[str, Any]:
        """The fingerprint: batch size over all ranks, drop_last and the group ids (digest)."""
        ids = self.group_ids
        if self._ids_digest is None or self._ids_digest[0] is not ids:
            self._ids_digest = (ids, array_digest(ids, "<i8"))
        return {
            "global_batch_size": self.batch_size * self._positions.world_size,
            "drop_last": self.drop_last,
            "size": len(ids),
            "num_groups": self.num_groups,
            "group_ids": self._ids_digest[1],
        }

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state, the indices waiting in each group with their global stream
        positions (per rank), the global position of the next draw and the configuration
        fingerprint.

        Raises:
            NotResumableError: the wrapped sampler has no ``state_dict``.

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(4, shuffle=False, rank=0, world_size=1)
            >>> g = GroupedBatchSampler(s, [0, 1, 0, 1], 2)
            >>> _ = next(iter(g)); g.state_dict()["buckets"]
            [[], [1]]
        """
        self._require_stateful("state_dict")
        rank, world = self._rank_and_world()
        return make_state(
            "GroupedBatchSampler",
            sampler=self.sampler.state_dict(),
            buckets=[[index for index, _ in b] for b in self._buckets],
            bucket_positions=[[position for _, position in b] for b in self._buckets],
            position=self._positions.cursor,
            rank=rank,
            world_size=world,
            config=self._config(),
        )

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restore the sampler, the pending indices and the position count.

        Args:
            state_dict: a state from :meth:`state_dict` (untrusted input).
            strict: raise :class:`StateMismatchError` when the state was saved with other
                group ids, another global batch size, ``drop_last`` or sampler configuration;
                False loads it anyway (pending indices are regrouped by the current group ids),
                logging one warning.

        Raises:
            ReshardError: the state holds pending indices of another rank or world size (they
                were drawn from that rank's shard and cannot be re-sharded), even with
                ``strict=False``.
            StateMismatchError: the configuration differs (``key`` names the field).
            SamplerStateError: malformed state; a rejected state changes nothing.
        """
        super().load_state_dict(state_dict, strict=strict)

    def _prepare_load(
        self, state_dict: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """Check a whole state without changing anything; returns the function that applies it."""
        name = "GroupedBatchSampler"
        required = ["sampler", "buckets", "bucket_positions", "position"]
        if is_legacy_state(state_dict):
            state = check_state(state_dict, name, required, ["batch_size", "rank", "world_size"])
            notes.add(LEGACY_NOTE)
        else:
            state = check_state(state_dict, name, [*required, "rank", "world_size", "config"], ())
        # pending indices of another rank cannot load even with strict=False: say so first
        buckets = state["buckets"]
        if isinstance(buckets, (list, tuple)) and len(buckets) <= MAX_LIST:
            count = sum(
                b.size if isinstance(b, np.ndarray) else len(b)
                for b in buckets
                if isinstance(b, (list, tuple, np.ndarray))
            )
            if count:
                self._check_same_rank(state, count)
        if not is_legacy_state(state):
            check_config(state["config"], self._config(), name, strict=strict, notes=notes)
        self._require_stateful("load_state_dict")
        positions = StreamPositions(self.sampler)
        positions.load(state["position"], name)
        pending = self._checked_pending(state, positions.cursor, strict)
        load_sampler = prepare_nested_load(self.sampler, state["sampler"], strict=strict, notes=notes)
        regrouped: list[list[tuple[int, int]]] = [[] for _ in range(self.num_groups)]
        for index, position in sorted(pending, key=lambda pair: pair[1]):
            regrouped[self.group_ids[index]].append((index, position))

        def commit() -> None:
            load_sampler()
            self._buckets = regrouped
            self._positions = positions
            self._origin = None  # the next iteration starts here

        return commit

    def _check_same_rank(self, state: Mapping[str, Any], pending: int) -> None:
        rank, world = self._rank_and_world()
        saved = (state.get("rank"), state.get("world_size"))
        for key, value in zip(("rank", "world_size"), saved, strict=True):
            if value is not None and not is_int(value):
                raise SamplerStateError(
                    f"GroupedBatchSampler.load_state_dict: {key!r} must be an int or None, got "
                    f"{type(value).__name__} {repr(value)[:80]}"
                )
        if saved != (rank, world):
            raise ReshardError(
                f"GroupedBatchSampler.load_state_dict: the state was saved by rank "
                f"{repr(saved[0])[:20]} of {repr(saved[1])[:20]} and holds {pending} indices "
                f"drawn from that rank's shard but not yet batched; load it on that rank (this "
                f"is rank {rank} of {world}). Save each rank's state, or save where no index is "
                f"pending."
            )

    def _checked_pending(
        self, state: Mapping[str, Any], drawn: int, strict: bool
    ) -> list[tuple[int, int]]:
        """The pending ``(index, position)`` pairs of a state, validated."""
        name = "GroupedBatchSampler"
        buckets, bucket_positions = state["buckets"], state["bucket_positions"]
        # strict: the fingerprint matched, so the group count is this one's; otherwise pending
        # indices are regrouped by the current group ids
        groups = self.num_groups if strict else MAX_LIST
        for key, value in (("buckets", buckets), ("bucket_positions", bucket_positions)):
            if not isinstance(value, (list, tuple)) or len(value) > groups:
                raise SamplerStateError(
                    f"{name}.load_state_dict: {key!r} must be a list of at most {groups} lists "
                    f"(one per group), got {type(value).__name__} {repr(value)[:80]}"
                )
        if len(bucket_positions) != len(buckets):
            raise SamplerStateError(
                f"{name}.load_state_dict: 'bucket_positions' must hold one global stream "
                f"position per pending index of 'buckets'"
            )
        # A full bucket would have been yielded: with the same batch size a pending bucket
        # holds fewer than batch_size indices.
        longest = self.batch_size - 1 if strict else MAX_LIST
        total = len(self.group_ids)
        pending = []
        for group, (indices, positions) in enumerate(zip(buckets, bucket_positions, strict=True)):
            indices = check_int_list(
                indices, f"buckets[{group}]", name, 0, total, max_len=longest
            )
            for index in indices:
                if strict and self.group_ids[index] != group:
                    raise SamplerStateError(
                        f"{name}.load_state_dict: pending index {index} does not belong to "
                        f"group {group} of these group_ids"
                    )
            positions = check_int_list(
                positions, f"bucket_positions[{group}]", name, 0, MAX_POSITION, max_len=longest
            )
            if len(positions) != len(indices):
                raise SamplerStateError(
                    f"{name}.load_state_dict: 'bucket_positions' must hold one global stream "
                    f"position per pending index of 'buckets' (group {group})"
                )
            for position in positions:
                if position >= drawn:
                    raise SamplerStateError(
                        f"{name}.load_state_dict: pending position {position} is not a drawn "
                        f"position (0 <= position < {drawn})"
                    )
            pending.extend(zip(indices, positions, strict=True))
        if len({position for _, position in pending}) != len(pending):
            raise SamplerStateError(
                f"{name}.load_state_dict: two pending indices share a global stream position"
            )
        return pending
