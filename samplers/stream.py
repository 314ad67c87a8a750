"""The base of every training sampler: an endless global stream of passes, sharded by rank.

A training sampler defines pass ``p`` as a :class:`~samplers.pass_order.PassOrder`: a function
from a position inside the pass to a dataset index (a keyed permutation, a repeat-factor
expansion, a weighted mixture...), computed from ``(seed, p)`` alone or, for samplers built on
other samplers, from the state they had when the pass began. The global
stream is pass 0, then pass 1, and so on; rank ``r`` of ``world_size`` ranks takes the global
positions ``r, r + world_size, r + 2 * world_size, ...``.

The position is a *cursor*: the global position of rank 0's next index, written as
``(pass, offset)``. After each rank has yielded ``k`` indices the cursor is ``k * world_size``
on every rank, so the state is the same on every rank and can be loaded with another world size:
the new ranks continue the same global order from the cursor. Loading a state sets the cursor;
the indices of the next chunk of positions are computed from the pass's keys (O(chunk), not
O(pass), for the permutation-based samplers); no skipped index is replayed and no pass is
materialized.

The pass order algorithm is part of the configuration fingerprint (``config["order"]`` =
:data:`ORDER`): a state saved by a catmap whose passes were ``torch.randperm`` permutations
(state format 1, or format 2 without ``"order"``) describes another stream and is rejected with
:class:`StateMismatchError` (``key="order"``) rather than continued in a different order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from .distributed import resolve_rank_and_world_size, shared_random_seed
from .errors import SamplerStateError, StateMismatchError
from .pass_order import ArrayOrder, PassOrder
from .state import check_state, is_legacy_state, make_state
from .state_fields import (
    LEGACY_NOTE,
    MAX_PASS,
    MAX_POSITION,
    MAX_SEED,
    LoadNotes,
    check_config,
    check_int,
    check_world_size,
)
from .stream_parts import ChunkBeingYielded, SupersededIteratorError, check_seed, restore_nothing

__all__ = ["ORDER", "EndlessPassStream", "SupersededIteratorError", "check_seed"]

logger = logging.getLogger(__name__)

#: Indices converted to Python ints at a time while iterating.
CHUNK = 8192

#: The pass order algorithm, saved in every training sampler's configuration fingerprint.
ORDER = "keyed-feistel-1"

_OLD_ORDER = "torch.randperm passes (catmap before the keyed pass order)"


class EndlessPassStream(Sampler[int]):
    """Base class: an endless, resumable, rank-sharded stream of passes.

    Subclasses implement :meth:`_make_pass`, :meth:`_pass_length` and :meth:`_config` (and,
    when a pass depends on more than ``(seed, pass)``, :meth:`_capture_pass_start` /
    :meth:`_prepare_pass_start`), and :meth:`_extra_state` / :meth:`_prepare_extra` /
    :meth:`_apply_extra` for their own state keys. Loading a state checks everything first
    and changes the sampler only when the whole state is valid.

    ``iter()`` starts from the sampler's *origin*, as detectron2's samplers do: the seed's
    first index after construction, or the position of the last :meth:`load_state_dict`.
    So a second ``iter()`` yields the same stream again, and ``load_state_dict(state)``
    followed by ``iter()`` resumes at the saved position. The position advances as indices
    are yielded and is what :meth:`state_dict` saves. A sampler yields one stream at a time:
    a new ``iter()`` supersedes the previous iterator, whose next ``next()`` raises
    :class:`SupersededIteratorError` instead of mixing two streams.
    """

    def __init__(self, *, seed: int | None, rank: int | None, world_size: int | None) -> None:
        owner = type(self).__name__
        self._rank, self._world_size = resolve_rank_and_world_size(rank, world_size, owner)
        seed = check_seed(seed, "seed", owner)
        self._seed = shared_random_seed() if seed is None else seed
        self._cursor_pass = 0
        self._cursor_offset = 0
        self._orders: dict[int, PassOrder] = {}
        self._pass_starts: dict[int, Any] = {}
        self._chunk_being_yielded: ChunkBeingYielded | None = None
        self._side_orders: dict[Any, PassOrder] = {}  # passes read by a ConcatSampler
        # where iter() starts: None = the current position (nothing iterated since
        # construction or the last load); else the state saved when the first iterator began
        self._origin: dict[str, Any] | None = None
        self._generation = 0  # incremented by each iter(); older iterators stop

    # ------------------------------------------------------------------ to override
    def _make_pass(self, pass_index: int) -> PassOrder | np.ndarray:
        """The global order of pass ``pass_index`` (called once per pass, in order): a
        :class:`PassOrder`, or an int64 array for a pass that is built rather than computed."""
        raise NotImplementedError

    def _constant_pass_length(self) -> int | None:
        """The length every pass has, when it does not depend on the pass (else None)."""
        return None

    def _capture_pass_start(self) -> Any:
        """Whatever, besides (seed, pass), is needed to regenerate the next pass."""
        return None

    def _extra_state(self) -> dict[str, Any]:
        """Keys of the state besides the cursor and the configuration (e.g. a subset seed)."""
        return {}

    def _config(self) -> dict[str, Any]:
        """The fingerprint of the configuration that shapes the stream (plain values)."""
        raise NotImplementedError

    def _legacy_config(self) -> dict[str, Any]:
        """The configuration keys format version 1 wrote at the top level of the state."""
        return {}

    def _pass_length(self, seed: int, pass_index: int, extra: Any) -> int:
        """The length of pass ``pass_index`` with ``seed`` (and prepared ``extra``), computed
        without changing the sampler."""
        raise NotImplementedError

    def _prepare_extra(self, state: Mapping[str, Any], *, strict: bool, notes: LoadNotes) -> Any:
        """Check the keys of :meth:`_extra_state` in a state; return what :meth:`_apply_extra`
        needs. Changes nothing."""
        return None

    def _apply_extra(self, extra: Any) -> None:
        """Apply what :meth:`_prepare_extra` returned."""

    def _prepare_pass_start(
        self, saved: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """Check a state's ``pass_start``; return the function that restores it."""
        if saved is not None:
            raise SamplerStateError(
                f"{type(self).__name__}.load_state_dict: 'pass_start' must be None for this "
                f"sampler, got {type(saved).__name__}"
            )
        return restore_nothing

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
        self._sync_cursor_from_chunk()
        return self._cursor_pass, self._cursor_offset

    def __repr__(self) -> str:
        size = getattr(self, "dataset_size", None)
        return (
            f"{type(self).__name__}(dataset_size={size}, seed={self._seed}, rank={self._rank}, "
            f"world_size={self._world_size})"
        )

    # ------------------------------------------------------------------ pass cache
    def _order(self, pass_index: int) -> PassOrder:
        orders = self._orders
        if pass_index not in orders:
            nxt = max(orders) + 1 if orders else self._cursor_pass
            if pass_index < nxt:
                raise RuntimeError(f"pass {pass_index} was dropped from the cache")
            while nxt <= pass_index:
                self._pass_starts[nxt] = self._capture_pass_start()
                order = self._make_pass(nxt)
                orders[nxt] = order if isinstance(order, PassOrder) else ArrayOrder(order)
                nxt += 1
        return orders[pass_index]

    def _reset_cache(self) -> None:
        self._orders.clear()
        self._pass_starts.clear()
        self._chunk_being_yielded = None

    def _sync_cursor_from_chunk(self) -> None:
        chunk = self._chunk_being_yielded
        if chunk is not None:
            self._cursor_pass = chunk.pass_index
            self._cursor_offset = chunk.offset + chunk.consumed() * self._world_size

    def _normalize_cursor(self) -> None:
        """Move the cursor forward so that its offset lies inside its pass."""
        self._sync_cursor_from_chunk()
        self._chunk_being_yielded = None
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
        self._sync_cursor_from_chunk()
        origin = self._origin
        if origin is None:
            self._origin = self.state_dict()
        else:  # restart: the saved origin is this sampler's own state
            self._prepare_load(origin, strict=True, notes=LoadNotes())()
            self._origin = origin
        self._generation += 1
        return self._generate(self._generation)

    def _generate(self, generation: int) -> Iterator[int]:
        rank, world = self._rank, self._world_size
        while True:
            if generation != self._generation:
                self._superseded()
            self._normalize_cursor()
            pass_index, offset = self._cursor_pass, self._cursor_offset
            order = self._order(pass_index)
            start = offset + rank
            if start < len(order):
                stop = min(len(order), start + world * CHUNK)
                chunk = order.slice(start, stop, world).tolist()
                iterator = iter(chunk)
                current = ChunkBeingYielded(iterator, len(chunk), pass_index, offset)
                self._chunk_being_yielded = current
                for value in iterator:
                    yield value
                    if current is not self._chunk_being_yielded:  # a new iter() or a load
                        if generation != self._generation:
                            self._superseded()
                        break
            else:
                # This rank's next index lies in a later pass (a round crosses a pass boundary).
                q, t = pass_index, start
                while t >= len(self._order(q)):
                    t -= len(self._order(q))
                    q += 1
                value = self._order(q).item(t)
                self._cursor_offset = offset + world
                yield value

    def _superseded(self) -> None:
        raise SupersededIteratorError(
            f"{type(self).__name__}: this iterator was superseded by a newer iter() of the "
            f"same sampler (each iter() restarts from the origin; a sampler yields one stream "
            f"at a time)"
        )

    def _stream_config(self) -> dict[str, Any]:
        """The saved fingerprint: the pass order algorithm and :meth:`_config`."""
        return {"order": ORDER, **self._config()}

    def _move_to(self, cursor: tuple[int, int]) -> None:
        """Set the cursor (used by a :class:`ConcatSampler` that drives this sampler)."""
        self._reset_cache()
        self._cursor_pass, self._cursor_offset = cursor

    # ------------------------------------------------------------------ state
    def _normalized_cursor(self) -> tuple[int, int]:
        """The cursor moved forward so that its offset lies inside its pass (the passes it
        crosses are generated and cached, as iterating would; the cursor itself stays)."""
        self._sync_cursor_from_chunk()
        pass_index, offset = self._cursor_pass, self._cursor_offset
        while offset >= len(self._order(pass_index)):
            offset -= len(self._order(pass_index))
            pass_index += 1
        return pass_index, offset

    def state_dict(self) -> dict[str, Any]:
        """The seed, the cursor (pass number and offset inside it), the world size and the
        fingerprint of the configuration (``"config"``); the same on every rank that yielded
        as many indices.

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(10, seed=0, rank=0, world_size=1)
            >>> it = iter(s); _ = [next(it) for _ in range(3)]
            >>> s.state_dict()["offset"], s.state_dict()["config"]
            (3, {'order': 'keyed-feistel-1', 'size': 10, 'shuffle': True})
        """
        pass_index, offset = self._normalized_cursor()
        return make_state(
            type(self).__name__,
            seed=self._seed,
            pass_index=pass_index,
            offset=offset,
            world_size=self._world_size,
            pass_start=self._pass_starts[pass_index],
            **self._extra_state(),
            config=self._stream_config(),
        )

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Continue from a saved state: the next index is the one the saved sampler would have
        yielded next (re-sharded when the world size differs). The state's seed wins.

        Every field is checked before anything changes: a rejected state leaves the sampler
        where it was. Loading computes nothing of the skipped passes: it checks the fields and
        sets the cursor (O(1) for the permutation-based samplers).

        A state saved by a catmap whose passes were ``torch.randperm`` permutations (format
        version 1, or version 2 without ``config["order"]``) describes another stream: it
        raises :class:`StateMismatchError` with ``key="order"``; ``strict=False`` keeps its
        cursor (pass and offset) in this version's order, with a warning.

        Args:
            state_dict: a state from :meth:`state_dict` (untrusted input).
            strict: raise :class:`StateMismatchError` when the state was saved by a sampler
                configured differently (dataset size, shuffle, repeat factors, ...); False
                loads it anyway, logging one warning (the saved cursor must still lie inside
                this sampler's pass).

        Raises:
            StateMismatchError: the configuration or the pass order differs (``key`` names the
                field).
            SamplerStateError: the state belongs to another sampler type, has a missing,
                unknown or malformed key, or a value out of range (the message names it).

        Example:
            >>> from samplers import TrainingSampler
            >>> state = TrainingSampler(10, seed=4, rank=0, world_size=1).state_dict()
            >>> s = TrainingSampler(10, seed=0, rank=0, world_size=1)
            >>> s.load_state_dict(state); s.seed
            4
        """
        notes = LoadNotes()
        commit = self._prepare_load(state_dict, strict=bool(strict), notes=notes)
        notes.emit(type(self).__name__)
        commit()

    def _check_old_order(self, *, strict: bool, notes: LoadNotes) -> None:
        """Refuse (or, with ``strict=False``, note) a state of the ``torch.randperm`` passes."""
        name = type(self).__name__
        if strict:
            raise StateMismatchError(
                f"{name}.load_state_dict: the state was saved by an older catmap whose passes "
                f"were torch.randperm permutations; this version computes each pass with a "
                f"keyed permutation (order {ORDER!r}), so the resumed stream would differ from "
                f"the saved run (config key 'order'). The state cannot be converted: start the "
                f"sampler afresh, or pass strict=False to keep its cursor in the new order",
                key="order",
                saved=_OLD_ORDER,
                current=ORDER,
            )
        notes.add(
            f"loaded with strict=False although the state was saved with {_OLD_ORDER}: its "
            f"cursor continues in the keyed order {ORDER!r}, not the saved run's order"
        )

    def _prepare_load(
        self, state_dict: Any, *, strict: bool, notes: LoadNotes
    ) -> Callable[[], None]:
        """Check a whole state without changing anything; returns the function that applies it."""
        name = type(self).__name__
        extra_keys = tuple(self._extra_state())
        legacy = is_legacy_state(state_dict)
        if legacy:
            legacy_keys = tuple(self._legacy_config())
            state = check_state(
                state_dict,
                name,
                ["seed", "pass_index", "offset"],
                ("world_size", "pass_start", *extra_keys, *legacy_keys),
            )
            saved = {key: state[key] for key in legacy_keys if key in state}
            current = self._legacy_config()
            check_config(
                saved, {key: current[key] for key in saved}, name, strict=strict, notes=notes
            )
            notes.add(LEGACY_NOTE)
            self._check_old_order(strict=strict, notes=notes)
        else:
            state = check_state(
                state_dict,
                name,
                ["seed", "pass_index", "offset", "world_size", "pass_start", "config", *extra_keys],
                (),
            )
            config = state["config"]
            old_order = isinstance(config, Mapping) and "order" not in config
            if old_order:  # check every other field first, then refuse the old stream
                config = {**config, "order": ORDER}
            check_config(config, self._stream_config(), name, strict=strict, notes=notes)
            if old_order:
                self._check_old_order(strict=strict, notes=notes)
        seed = check_int(state["seed"], "seed", name, 0, MAX_SEED)
        pass_index = check_int(state["pass_index"], "pass_index", name, 0, MAX_PASS)
        saved_world = check_world_size(
            state.get("world_size", self._world_size), "world_size", name
        )
        extra = self._prepare_extra(state, strict=strict, notes=notes)
        restore_parts = self._prepare_pass_start(
            state.get("pass_start"), strict=strict, notes=notes
        )
        offset = check_int(state["offset"], "offset", name, 0, MAX_POSITION)
        length = self._pass_length(seed, pass_index, extra)
        # A version-2 cursor lies inside its pass. A version-1 cursor may overshoot its pass by
        # less than one round of ranks; the overshoot is capped at 4096 passes' worth so that
        # walking to the cursor stays cheap.
        limit = length + min(saved_world, 4096 * length) if legacy else length
        if offset >= limit:
            raise SamplerStateError(
                f"{name}.load_state_dict: offset {offset} lies beyond pass {pass_index} "
                f"({length} indices) of this sampler; the state does not belong to it"
            )

        def commit() -> None:
            self._origin = None  # the next iter() starts here
            self._apply_extra(extra)
            restore_parts()
            self._seed = seed
            self._reset_cache()
            self._side_orders.clear()
            self._cursor_pass = pass_index
            self._cursor_offset = offset
            if saved_world != self._world_size:
                logger.info(
                    "%s: state saved with world size %d continues re-sharded over %d ranks",
                    name,
                    saved_world,
                    self._world_size,
                )

        return commit
