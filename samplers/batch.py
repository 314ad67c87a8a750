"""ResumableBatchSampler: fixed-size batches of a sampler's indices, with the sampler's state."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import Sampler

from catalog.validation import check_positive_size

from .errors import NotResumableError, SamplerConfigError
from .sample_seed import StreamPositions
from .state import check_state, is_legacy_state, is_stateful, make_state
from .state_fields import LEGACY_NOTE, LoadNotes, check_config, prepare_nested_load

__all__ = ["PositionedBatchSampler", "ResumableBatchSampler", "check_batch_size"]

logger = logging.getLogger(__name__)


def check_batch_size(batch_size: Any, owner: str) -> int:
    """Validate a batch size (a positive int).

    Raises:
        SamplerConfigError: (a TypeError and ValueError) not an int, or below 1.
    """
    return check_positive_size(batch_size, "batch_size", error=SamplerConfigError, where=owner)


class PositionedBatchSampler(Sampler[list[int]]):
    """What the catmap batch samplers share.

    A subclass yields batches of ``(index, global stream position)`` pairs from
    :meth:`iter_with_positions` and checks a whole saved state in ``_prepare_load(state,
    strict=, notes=)``, which returns the function that applies it; this class gives
    ``iter()`` (the indices without positions) and :meth:`load_state_dict` (check everything,
    log one warning for what ``strict=False`` let through, then apply).
    """

    sampler: Any

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.iter_with_positions():
            yield [index for index, _ in batch]

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        """Batches of ``(index, global stream position)`` pairs (defined by each subclass)."""
        raise NotImplementedError

    def _prepare_load(
        self, state_dict: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """Check a whole state without changing anything; return the function that applies it
        (defined by each subclass)."""
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restore a state from ``state_dict()``; a rejected state changes nothing."""
        notes = LoadNotes()
        commit = self._prepare_load(state_dict, strict=bool(strict), notes=notes)
        notes.emit(type(self).__name__)
        commit()

    def _require_stateful(self, method: str) -> None:
        """Raise NotResumableError when the wrapped sampler cannot save / load its state."""
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"{type(self).__name__}: {type(self.sampler).__name__} has no {method}(); use a "
                "catmap training sampler for exact resume"
            )


class ResumableBatchSampler(PositionedBatchSampler):
    """Groups a sampler's indices into lists of ``batch_size``; resumable when the sampler is.

    Unlike ``torch.utils.data.BatchSampler`` it never pulls an index it does not deliver in an
    infinite stream, so its state is the sampler's state after the last delivered batch. It
    also counts the global stream position of every index (:meth:`iter_with_positions`), from
    which the loaders seed each sample's augmentations.

    Args:
        sampler: yields indices (a catmap training sampler for exact resume).
        batch_size: indices per batch.
        drop_last: drop the final incomplete batch of a finite sampler.

    Example:
        >>> from samplers import TrainingSampler
        >>> b = ResumableBatchSampler(TrainingSampler(5, shuffle=False, rank=0, world_size=1), 2)
        >>> it = iter(b); next(it), next(it), next(it)
        ([0, 1], [2, 3], [4, 0])
    """

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool = False) -> None:
        self.sampler = sampler
        self.batch_size = check_batch_size(batch_size, "ResumableBatchSampler")
        self.drop_last = bool(drop_last)
        self._positions = StreamPositions(sampler)
        self._origin: int | None = None  # the position iter() restarts from (see iter_with_...)

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        """Batches of ``(index, global stream position)`` pairs; ``iter()`` without positions.

        Each iteration starts from the origin, as the catmap samplers do: where the batch
        sampler was constructed or last loaded (:meth:`load_state_dict`).

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(5, shuffle=False, rank=1, world_size=2)
            >>> next(ResumableBatchSampler(s, 2).iter_with_positions())
            [(1, 1), (3, 3)]
        """
        if self._origin is None:
            self._origin = self._positions.cursor
        else:
            self._positions.cursor = self._origin
        batch: list[tuple[int, int]] = []
        size = self.batch_size
        for pair in self._positions.draw(self.sampler):
            batch.append(pair)
            if len(batch) == size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch
        elif batch:
            logger.debug("dropped a last batch of %d indices (drop_last=True)", len(batch))

    def __len__(self) -> int:
        n = len(self.sampler)  # TypeError for endless samplers, as for any unsized sampler
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _config(self) -> dict[str, Any]:
        """The fingerprint: batch size over all ranks (re-sharding keeps it) and drop_last."""
        return {
            "global_batch_size": self.batch_size * self._positions.world_size,
            "drop_last": self.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        """The wrapped sampler's state, the global position of the next draw and the
        configuration fingerprint; valid between batches.

        Raises:
            NotResumableError: the wrapped sampler has no ``state_dict``.

        Example:
            >>> from samplers import TrainingSampler
            >>> b = ResumableBatchSampler(TrainingSampler(5, seed=0, rank=0, world_size=1), 2)
            >>> _ = next(iter(b)); b.state_dict()["position"], b.state_dict()["config"]
            (2, {'global_batch_size': 2, 'drop_last': False})
        """
        self._require_stateful("state_dict")
        return make_state(
            "ResumableBatchSampler",
            position=self._positions.cursor,
            sampler=self.sampler.state_dict(),
            config=self._config(),
        )

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restore the wrapped sampler and the position count. The per-rank batch size may
        differ (another world size) as long as the batch size over all ranks is the same.

        Args:
            state_dict: a state from :meth:`state_dict` (untrusted input).
            strict: raise :class:`StateMismatchError` when the state was saved with another
                global batch size, ``drop_last`` or sampler configuration; False loads it
                anyway, logging one warning.

        Raises:
            StateMismatchError: the configuration differs (``key`` names the field).
            SamplerStateError: malformed state (e.g. a missing or negative ``position``); a
                rejected state leaves the batch sampler and its sampler unchanged.
            NotResumableError: the wrapped sampler has no ``load_state_dict``.
        """
        super().load_state_dict(state_dict, strict=strict)

    def _prepare_load(
        self, state_dict: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """Check a whole state without changing anything; returns the function that applies it."""
        name = "ResumableBatchSampler"
        if is_legacy_state(state_dict):
            state = check_state(state_dict, name, ["sampler", "position"], ["batch_size"])
            notes.add(LEGACY_NOTE)
        else:
            state = check_state(state_dict, name, ["sampler", "position", "config"], ())
            check_config(state["config"], self._config(), name, strict=strict, notes=notes)
        self._require_stateful("load_state_dict")
        positions = StreamPositions(self.sampler)
        positions.load(state["position"], name)
        load_sampler = prepare_nested_load(self.sampler, state["sampler"], strict=strict, notes=notes)

        def commit() -> None:
            load_sampler()
            self._positions = positions
            self._origin = None  # the next iteration starts here

        return commit
