"""A locality-aware training order over shards: shuffle the shards, then the samples within a
window of ``window`` consecutive (shuffled) shards, so a node has about ``window`` shards open
at a time instead of all of them.

Pass ``p`` is a :class:`~samplers.order.PassOrder` computed from ``(seed, p)`` alone: a keyed
permutation of the shards, cut into windows of ``window`` shards, and a keyed permutation of
each window's samples keyed by ``(seed, p, window number)``. Position ``t`` of a pass costs two
binary searches and one permutation lookup, so :class:`ShardOrderSampler` inherits the stream
samplers' exact resume (O(1) ``load_state_dict``, any ``num_workers``, another world size):
its state is the seed, the cursor ``(pass, offset)`` and a fingerprint of the shard sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from catalog._common import check_int, short_repr

from .errors import SamplerConfigError
from .order import KeyedPermutation, PassOrder, keyed_bits53
from .state import array_digest
from .stream import StreamSampler

__all__ = ["ShardWindowOrder", "ShardOrderSampler", "shard_sizes_of_records"]

SHARD_ORDER = "shard-window-1"
#: Windows shorter than this are shuffled by sorting keyed bits, all touched ones at once (a
#: keyed permutation each would cost a blake2b key schedule per window); longer ones by a
#: keyed permutation, any position in O(1).
SORTED_WINDOW = 4096


class ShardWindowOrder(PassOrder):
    """One pass: shards in keyed order, samples shuffled within windows of ``window`` shards.

    ``firsts[s]``/``sizes[s]`` are shard ``s``'s first dataset index and sample count.

    Example:
        >>> order = ShardWindowOrder(np.array([0, 3, 6]), np.array([3, 3, 2]), 2, 7, 0)
        >>> sorted(order.to_array().tolist()) == list(range(8))
        True
    """

    __slots__ = ("_firsts", "_ends", "_starts", "_window_starts", "_window_perms", "_size",
                 "_key")

    def __init__(self, firsts: np.ndarray, sizes: np.ndarray, window: int, seed: int,
                 pass_index: int, shuffle: bool = True) -> None:
        count = len(sizes)
        shards = (KeyedPermutation(count, "shards", seed, pass_index).to_array() if shuffle
                  else np.arange(count, dtype=np.int64))
        ordered = sizes[shards]
        self._ends = np.cumsum(ordered)  # virtual position where each ordered shard ends
        self._starts = self._ends - ordered
        self._firsts = firsts[shards]
        self._size = int(self._ends[-1])
        bounds = np.concatenate([[0], self._ends])[::window]
        self._window_starts = bounds if bounds[-1] == self._size else np.append(bounds,
                                                                                self._size)
        self._key = (seed, pass_index) if shuffle else None
        self._window_perms: dict[int, KeyedPermutation] = {}  # made on first use

    def __len__(self) -> int:
        return self._size

    def _window(self, k: int) -> KeyedPermutation:
        if k not in self._window_perms:
            length = int(self._window_starts[k + 1] - self._window_starts[k])
            self._window_perms[k] = KeyedPermutation(length, "window", *self._key, k)
        return self._window_perms[k]

    def at(self, positions: Any) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self._size):
            raise IndexError(f"ShardWindowOrder: positions must lie in [0, {self._size})")
        starts = self._window_starts
        windows = np.searchsorted(starts, pos, side="right") - 1
        virtual = pos.copy()
        if self._key is None:
            return self._index(virtual)
        touched = np.unique(windows)
        small = touched[starts[touched + 1] - starts[touched] < SORTED_WINDOW]
        for k in touched[starts[touched + 1] - starts[touched] >= SORTED_WINDOW].tolist():
            chosen = windows == k
            virtual[chosen] = starts[k] + self._window(k).at(pos[chosen] - starts[k])
        if small.size:
            chosen = np.isin(windows, small)
            virtual[chosen] = self._sorted_windows(small, pos[chosen], windows[chosen])
        return self._index(virtual)

    def _sorted_windows(self, small: np.ndarray, pos: np.ndarray,
                        windows: np.ndarray) -> np.ndarray:
        """Small windows shuffled together: each window's positions sorted by keyed bits."""
        starts = self._window_starts[small]
        lengths = self._window_starts[small + 1] - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        members = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - offsets,
                                                                             lengths)
        bits = keyed_bits53(members, "window", *self._key)
        shuffled = members[np.lexsort((bits, np.repeat(np.arange(len(small)), lengths)))]
        which = np.searchsorted(small, windows)
        return shuffled[offsets[which] + pos - self._window_starts[windows]]

    def _index(self, virtual: np.ndarray) -> np.ndarray:
        shard = np.searchsorted(self._ends, virtual, side="right")
        return self._firsts[shard] + virtual - self._starts[shard]


def shard_sizes_of_records(records: Sequence[dict[str, Any]]) -> list[int]:
    """Sample counts of consecutive shards, from records registered by ``register_shards``
    (``file_name`` ``<url>/<shard>#<key>.<ext>``).

    Example:
        >>> shard_sizes_of_records([{"file_name": "d/a.tar#0.jpg"}, {"file_name": "d/b.tar#1.jpg"}])
        [1, 1]
    """
    sizes: list[int] = []
    previous = None
    for i, record in enumerate(records):
        name = str(record.get("file_name", ""))
        shard = name.partition("#")[0]
        if "#" not in name:
            raise SamplerConfigError(f"shard_sizes_of_records: record {i} ({name!r}) does not "
                                     "come from register_shards")
        if shard != previous:
            sizes.append(0)
            previous = shard
        sizes[-1] += 1
    return sizes


class ShardOrderSampler(StreamSampler):
    """Endless passes over a dataset stored in shards of ``shard_sizes`` consecutive samples:
    shards shuffled per pass, samples shuffled within ``window`` shards. Resumes exactly after
    any change of ``num_workers`` or world size (the state is (seed, pass, position)).

    Example:
        >>> import itertools
        >>> s = ShardOrderSampler([4, 4, 4, 4], window=2, seed=0, rank=0, world_size=1)
        >>> first = list(itertools.islice(iter(s), 8))
        >>> len({i // 4 for i in first})  # the first 8 samples come from 2 shards
        2
    """

    def __init__(self, shard_sizes: Sequence[int], *, window: int = 4, shuffle: bool = True,
                 seed: int | None = None, rank: int | None = None,
                 world_size: int | None = None) -> None:
        sizes = np.asarray(shard_sizes)
        if sizes.ndim != 1 or not len(sizes) or sizes.dtype.kind not in "iu" or sizes.min() < 1:
            raise SamplerConfigError("ShardOrderSampler: shard_sizes must be a non-empty "
                                     f"sequence of positive ints, got {short_repr(shard_sizes)}")
        self._window = check_int(window, "window", minimum=1, error=SamplerConfigError,
                                 where="ShardOrderSampler")
        self._sizes = sizes.astype(np.int64)
        self._firsts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self._shuffle = bool(shuffle)
        self.constant_length = self.dataset_size = int(self._sizes.sum())
        super().__init__(seed=seed, rank=rank, world_size=world_size, config={
            "shard_order": SHARD_ORDER, "size": self.constant_length,
            "shards": array_digest(self._sizes, "<i8"), "window": self._window,
            "shuffle": self._shuffle})

    def _make_pass(self, pass_index: int) -> PassOrder:
        return ShardWindowOrder(self._firsts, self._sizes, self._window, self.seed, pass_index,
                                self._shuffle)

    def __repr__(self) -> str:
        return (f"ShardOrderSampler(shards={len(self._sizes)}, size={self.constant_length}, "
                f"window={self._window}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size})")
