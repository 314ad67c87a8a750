"""The base of every training sampler: an endless global stream of passes, sharded by rank.

A training sampler defines pass ``p`` as an int64 array of dataset indices (a permutation, a
repeat-factor expansion, a weighted mixture...), computed from ``(seed, p)`` alone or, for
samplers built on other samplers, from the state they had when the pass began. The global
stream is pass 0, then pass 1, and so on; rank ``r`` of ``world_size`` ranks takes the global
positions ``r, r + world_size, r + 2 * world_size, ...``.

The position is a *cursor*: the global position of rank 0's next index, written as
``(pass, offset)``. After each rank has yielded ``k`` indices the cursor is ``k * world_size``
on every rank, so the state is the same on every rank and can be loaded with another world size:
the new ranks continue the same global order from the cursor. Loading a state regenerates one
pass (one permutation) and slices into it; no skipped index is replayed.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from .distributed import resolve_rank_and_world_size, shared_random_seed
from .errors import SamplerStateError
from .state import check_state, make_state

__all__ = ["PassSampler", "check_seed"]

logger = logging.getLogger(__name__)

#: Indices converted to Python ints at a time while iterating.
CHUNK = 8192


def check_seed(seed: Any, what: str, owner: str) -> int | None:
    """Validate an optional seed (None or a non-negative int)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{owner}: {what} must be an int or None, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"{owner}: {what} must be non-negative, got {seed}")
    return int(seed)


class _LiveChunk:
    """The chunk an iterator is yielding from, to read the exact position at any time."""

    __slots__ = ("iterator", "length", "pass_index", "offset")

    def __init__(self, iterator: Iterator[int], length: int, pass_index: int, offset: int) -> None:
        self.iterator = iterator
        self.length = length
        self.pass_index = pass_index
        self.offset = offset

    def consumed(self) -> int:
        return self.length - operator.length_hint(self.iterator)


class PassSampler(Sampler[int]):
    """Base class: an endless, resumable, rank-sharded stream of passes.

    Subclasses implement :meth:`_make_pass` (and, when a pass depends on more than
    ``(seed, pass)``, :meth:`_capture_pass_start` / :meth:`_restore_pass_start`), and
    :meth:`_extra_state` / :meth:`_load_extra_state` for their own state keys.

    ``iter()`` continues from the current position; the position advances as indices are
    yielded. Use one iterator at a time: a new ``iter()`` takes over from the old one.
    """

    def __init__(self, *, seed: int | None, rank: int | None, world_size: int | None) -> None:
        owner = type(self).__name__
        self._rank, self._world_size = resolve_rank_and_world_size(rank, world_size, owner)
        seed = check_seed(seed, "seed", owner)
        self._seed = shared_random_seed() if seed is None else seed
        self._cursor_pass = 0
        self._cursor_offset = 0
        self._orders: dict[int, np.ndarray] = {}
        self._pass_starts: dict[int, Any] = {}
        self._live: _LiveChunk | None = None

    # ------------------------------------------------------------------ to override
    def _make_pass(self, pass_index: int) -> np.ndarray:
        """The int64 global order of pass ``pass_index`` (called once per pass, in order)."""
        raise NotImplementedError

    def _capture_pass_start(self) -> Any:
        """Whatever, besides (seed, pass), is needed to regenerate the next pass."""
        return None

    def _restore_pass_start(self, saved: Any) -> None:
        """Undo to the situation :meth:`_capture_pass_start` described."""

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        """Validate and apply the subclass's keys of a state (before the position is set)."""

    # ------------------------------------------------------------------ properties
    @property
    def seed(self) -> int:
        """The seed all ranks share (a loaded state's seed replaces the constructor's)."""
        return self._seed

    @property
    def rank(self) -> int:
        """This sampler's rank."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks the global stream is sharded over."""
        return self._world_size

    @property
    def position(self) -> tuple[int, int]:
        """The cursor ``(pass, offset)``: where rank 0's next index lies in the global stream."""
        self._sync_live()
        return self._cursor_pass, self._cursor_offset

    def __repr__(self) -> str:
        size = getattr(self, "dataset_size", None)
        return (
            f"{type(self).__name__}(dataset_size={size}, seed={self._seed}, rank={self._rank}, "
            f"world_size={self._world_size})"
        )

    # ------------------------------------------------------------------ pass cache
    def _order(self, pass_index: int) -> np.ndarray:
        orders = self._orders
        if pass_index not in orders:
            nxt = max(orders) + 1 if orders else self._cursor_pass
            if pass_index < nxt:
                raise RuntimeError(f"pass {pass_index} was dropped from the cache")
            while nxt <= pass_index:
                self._pass_starts[nxt] = self._capture_pass_start()
                order = np.asarray(self._make_pass(nxt), dtype=np.int64)
                order.flags.writeable = False
                orders[nxt] = order
                nxt += 1
        return orders[pass_index]

    def _reset_cache(self) -> None:
        self._orders.clear()
        self._pass_starts.clear()
        self._live = None

    def _sync_live(self) -> None:
        live = self._live
        if live is not None:
            self._cursor_pass = live.pass_index
            self._cursor_offset = live.offset + live.consumed() * self._world_size

    def _normalize_cursor(self) -> None:
        """Move the cursor forward so that its offset lies inside its pass."""
        self._sync_live()
        self._live = None
        while True:
            length = len(self._order(self._cursor_pass))
            if self._cursor_offset < length:
                return
            self._cursor_offset -= length
            self._orders.pop(self._cursor_pass, None)
            self._pass_starts.pop(self._cursor_pass, None)
            self._cursor_pass += 1

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[int]:
        self._sync_live()
        return self._generate()

    def _generate(self) -> Iterator[int]:
        rank, world = self._rank, self._world_size
        while True:
            self._normalize_cursor()
            pass_index, offset = self._cursor_pass, self._cursor_offset
            order = self._order(pass_index)
            start = offset + rank
            if start < len(order):
                stop = min(len(order), start + world * CHUNK)
                chunk = order[start:stop:world].tolist()
                iterator = iter(chunk)
                self._live = _LiveChunk(iterator, len(chunk), pass_index, offset)
                yield from iterator
            else:
                # This rank's next index lies in a later pass (a round crosses a pass boundary).
                q, t = pass_index, start
                while t >= len(self._order(q)):
                    t -= len(self._order(q))
                    q += 1
                value = int(self._order(q)[t])
                self._cursor_offset = offset + world
                yield value

    def _take(self, count: int) -> np.ndarray:
        """The next ``count`` indices of the global stream, ignoring rank (used by samplers
        that drive other samplers, such as :class:`ConcatSampler`)."""
        parts = []
        remaining = int(count)
        while remaining > 0:
            self._normalize_cursor()
            order = self._order(self._cursor_pass)
            k = min(remaining, len(order) - self._cursor_offset)
            parts.append(order[self._cursor_offset : self._cursor_offset + k])
            self._cursor_offset += k
            remaining -= k
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(parts)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The seed, pass number and position (same on every rank that yielded as many indices).

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(10, seed=0, rank=0, world_size=1)
            >>> it = iter(s); _ = [next(it) for _ in range(3)]
            >>> s.state_dict()["offset"]
            3
        """
        self._sync_live()
        if self._cursor_pass in self._pass_starts:
            pass_start = self._pass_starts[self._cursor_pass]
        else:  # the cursor's pass is not generated yet: it would start from the present state
            pass_start = self._capture_pass_start()
        return make_state(
            type(self).__name__,
            seed=self._seed,
            pass_index=self._cursor_pass,
            offset=self._cursor_offset,
            world_size=self._world_size,
            pass_start=pass_start,
            **self._extra_state(),
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved state: the next index is the one the saved sampler would have
        yielded next (re-sharded when the world size differs). The state's seed wins.

        Raises:
            SamplerStateError: the state belongs to another sampler type or dataset, or a key
                is missing or malformed.
        """
        name = type(self).__name__
        state = check_state(state_dict, name, ["seed", "pass_index", "offset"])
        values = {}
        for key in ("seed", "pass_index", "offset"):
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise SamplerStateError(
                    f"{name}.load_state_dict: {key!r} must be a non-negative int, got {value!r}"
                )
            values[key] = int(value)
        saved_world = state.get("world_size", self._world_size)
        if (
            isinstance(saved_world, bool)
            or not isinstance(saved_world, (int, np.integer))
            or saved_world < 1
        ):
            raise SamplerStateError(
                f"{name}.load_state_dict: 'world_size' must be a positive int, got {saved_world!r}"
            )
        previous = self.state_dict()  # restored when the state turns out not to fit
        self._load_extra_state(dict(state))
        self._seed = values["seed"]
        self._reset_cache()
        self._cursor_pass = values["pass_index"]
        self._cursor_offset = values["offset"]
        try:
            self._restore_pass_start(state.get("pass_start"))
            # A saved cursor overshoots its pass by less than one round of ranks; anything
            # further is a corrupt state (and would make the cursor walk through countless
            # passes).
            length = len(self._order(self._cursor_pass))
            if self._cursor_offset >= length + int(saved_world):
                raise SamplerStateError(
                    f"{name}.load_state_dict: offset {self._cursor_offset} lies beyond pass "
                    f"{self._cursor_pass} ({length} indices) by more than one round of "
                    f"{saved_world} ranks; the state does not belong to this sampler"
                )
        except SamplerStateError:
            self.load_state_dict(previous)  # the position before the call, unchanged
            raise
        if saved_world != self._world_size:
            logger.info(
                "%s: state saved with world size %s continues re-sharded over %d ranks",
                name,
                saved_world,
                self._world_size,
            )
