"""ConcatSampler: mix the parts of a concatenated dataset by weight (replaces ConcatDataset).

A pass is a :class:`~samplers.concat_order.ConcatOrder`: the part of each draw and the part's
index are computed at any position from keyed draws (a tree of part counts over leaves of 4096
draws), so a pass is never materialized and resuming costs a few milliseconds at any depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from catalog.seeding import derive_seed
from catalog.validation import check_float, check_list, check_positive_size

from .concat_order import ConcatOrder, cursor_after
from .errors import SamplerStateError, StateMismatchError
from .pass_order import PassOrder
from .state_fields import LoadNotes
from .stream import EndlessPassStream
from .training import TrainingSampler

__all__ = ["ConcatSampler"]


def _check_sizes(sizes: Any) -> list[int]:
    values = check_list(
        sizes, "sizes", check_positive_size, what="ints", element="of part", where="ConcatSampler"
    )
    if not values:
        raise TypeError("ConcatSampler: sizes must be a non-empty list of ints, got []")
    return values


def _check_weights(weights: Any, count: int) -> np.ndarray:
    values = check_list(
        weights, "weights", check_float, what="numbers", element="of part", above=0,
        where="ConcatSampler",
    )
    if len(values) != count:
        raise ValueError(f"ConcatSampler: {len(values)} weights for {count} parts")
    array = np.asarray(values, dtype=np.float64)
    return array / array.sum()


class ConcatSampler(EndlessPassStream):
    """Global indices into datasets concatenated into one list, mixing the parts by weight.

    Part ``j`` covers indices ``[start_j, start_j + sizes[j])`` of the concatenated list (e.g.
    ``get_detection_dataset_dicts(["a", "b"])``). Every draw picks a part with probability
    ``weights[j] / sum(weights)`` and takes that part's next index, from its own shuffled order
    (reshuffled each pass of the part) or from its own sampler. One pass of the ConcatSampler is
    ``sum(sizes)`` draws, seeded from ``(seed, pass)``.

    Args:
        sizes: the number of records of each part (positive ints).
        weights: relative weight of each part (positive; normalized). Default: proportional to
            ``sizes``, so every record is equally likely, as when shuffling a ConcatDataset.
            ``[1, 1]`` balances two datasets 1:1 whatever their sizes.
        samplers: optional per-part training samplers (None entries use the default), e.g. a
            :class:`RepeatFactorTrainingSampler` on part 0 only. Each yields local indices of
            its part; its own rank / world size are ignored (this sampler shards the mixture).
            A part sampler's passes must depend on its seed alone (TrainingSampler,
            RandomSubsetTrainingSampler, RepeatFactorTrainingSampler; not a ConcatSampler).
        shuffle: shuffle the default part orders.
        seed: the shared seed (None: drawn on rank 0 and broadcast).
        rank: this process's rank (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Raises:
        TypeError: malformed sizes, weights or samplers.
        ValueError: a weight <= 0, or a count of weights / samplers that differs from the parts.

    Example:
        >>> import itertools
        >>> s = ConcatSampler([3, 100], weights=[1, 1], seed=0, rank=0, world_size=1)
        >>> draws = list(itertools.islice(s, 1000))
        >>> 0.4 < sum(i < 3 for i in draws) / 1000 < 0.6
        True
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        weights: Sequence[float] | None = None,
        samplers: Sequence[EndlessPassStream | None] | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._sizes = _check_sizes(sizes)
        self._weights = _check_weights(
            self._sizes if weights is None else weights, len(self._sizes)
        )
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self._shuffle = bool(shuffle)
        if samplers is not None and (
            isinstance(samplers, (str, bytes)) or not isinstance(samplers, Sequence)
        ):
            raise TypeError(f"ConcatSampler: samplers must be a list, got {samplers!r}")
        if samplers is not None and len(samplers) != len(self._sizes):
            raise ValueError(
                f"ConcatSampler: {len(samplers)} samplers for {len(self._sizes)} parts"
            )
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        self._parts: list[EndlessPassStream] = []
        for j, size in enumerate(self._sizes):
            part = samplers[j] if samplers is not None else None
            if part is None:
                part = TrainingSampler(
                    size,
                    shuffle=self._shuffle,
                    seed=derive_seed(self._seed, j),
                    rank=0,
                    world_size=1,
                )
            elif not isinstance(part, EndlessPassStream):
                raise TypeError(
                    f"ConcatSampler: sampler of part {j} must be a catmap training sampler "
                    f"(TrainingSampler, RepeatFactorTrainingSampler, ...), got "
                    f"{type(part).__name__}"
                )
            elif type(part)._capture_pass_start is not EndlessPassStream._capture_pass_start:
                raise TypeError(
                    f"ConcatSampler: sampler of part {j} ({type(part).__name__}) builds its "
                    f"passes from other samplers; concatenate its parts into this sampler instead"
                )
            elif getattr(part, "dataset_size", size) != size:
                raise ValueError(
                    f"ConcatSampler: sampler of part {j} draws from {part.dataset_size} records, "
                    f"the part has {size}"
                )
            self._parts.append(part)

    @property
    def dataset_size(self) -> int:
        """The number of records of the concatenated list."""
        return int(sum(self._sizes))

    @property
    def weights(self) -> np.ndarray:
        """The normalized part weights."""
        return self._weights.copy()

    @property
    def part_samplers(self) -> list[EndlessPassStream]:
        """The sampler of each part (local indices)."""
        return list(self._parts)

    def _make_pass(self, pass_index: int) -> PassOrder:
        starts = [cursor_after(part, part.position, 0) for part in self._parts]
        order = ConcatOrder(
            self.dataset_size,
            self._weights,
            self._parts,
            starts,
            self._starts,
            self._seed,
            pass_index,
        )
        # each part continues, in the next pass, after the draws it gets in this one
        for part, start, count in zip(self._parts, starts, order.counts.tolist(), strict=True):
            part._move_to(cursor_after(part, start, count))
        return order

    def _capture_pass_start(self) -> Any:
        return [part.state_dict() for part in self._parts]

    def _prepare_pass_start(
        self, saved: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        if saved is None and not strict:
            notes.add("the state holds no part positions: the parts continue where they are")
            return lambda: None
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self._parts):
            raise SamplerStateError(
                f"ConcatSampler.load_state_dict: 'pass_start' must hold {len(self._parts)} part "
                f"states, got {type(saved).__name__} {repr(saved)[:80]}"
            )
        restores = []
        for j, (part, state) in enumerate(zip(self._parts, saved, strict=True)):
            try:
                restores.append(part._prepare_load(state, strict=strict, notes=notes))
            except StateMismatchError as exc:
                raise StateMismatchError(
                    f"ConcatSampler.load_state_dict: part {j}: {exc}",
                    key=f"part {j}: {exc.key}",
                    saved=exc.saved,
                    current=exc.current,
                ) from exc
            except SamplerStateError as exc:
                raise SamplerStateError(f"ConcatSampler.load_state_dict: part {j}: {exc}") from exc

        def restore() -> None:
            for apply in restores:
                apply()

        return restore

    def _pass_length(self, seed: int, pass_index: int, extra: Any) -> int:
        return self.dataset_size

    def _config(self) -> dict[str, Any]:
        return {
            "sizes": list(self._sizes),
            "weights": self._weights.tolist(),
            "parts": [type(part).__name__ for part in self._parts],
        }

    def _legacy_config(self) -> dict[str, Any]:
        return {"sizes": list(self._sizes), "weights": self._weights.tolist()}

    def __repr__(self) -> str:
        return (
            f"ConcatSampler(sizes={self._sizes}, weights={np.round(self._weights, 4).tolist()}, "
            f"seed={self._seed}, rank={self._rank}, world_size={self._world_size})"
        )
