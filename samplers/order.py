"""Pass orders: a training pass as a function ``position -> dataset index``, never materialized.

* :class:`KeyedPermutation`: ``perm[i]`` from ``(key, i)`` alone (six Feistel rounds over an
  ``A x B`` rectangle with cycle walking; keys from blake2b). Not cryptographic.
* :class:`SystematicRounding`: repeat-factor passes; one keyed offset per pass decides every
  record's extra copy, so a pass's length is O(1) and a position O(log n).
* :class:`ConcatOrder`: a weighted mixture of part streams, the part counts split down a
  keyed binary tree of 4096-draw leaves (position ``t`` costs ``log2(T / 4096)`` splits).
"""

from __future__ import annotations

import hashlib
import math
import operator
from typing import Any

import numpy as np

from catalog._common import check_int

ROUNDS = 6
_PERSON = b"catmap.perm.v1"
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31, _S11, _S29, _S32 = (np.uint64(s) for s in (30, 27, 31, 11, 29, 32))
_CHUNK = 1 << 15


def round_keys(purpose: str, *parts: int, count: int = ROUNDS) -> np.ndarray:
    """``count`` 64-bit keys from blake2b over ``purpose`` and the integer ``parts``."""
    if not isinstance(purpose, str) or len(purpose) > 64:
        raise TypeError(f"keyed permutation: purpose must be a short str, got {purpose!r}")
    out = [purpose.encode("utf-8"), len(parts).to_bytes(2, "little")]
    for part in parts:
        value = check_int(part, "key part", minimum=0, maximum=2**64 - 1, where="keyed permutation")
        out.append(value.to_bytes(8, "little"))
    digest = hashlib.blake2b(b"\x00".join(out), digest_size=8 * count, person=_PERSON).digest()
    return np.frombuffer(digest, dtype="<u8").astype(np.uint64)


def keyed_bits53(values: Any, purpose: str, *parts: int) -> np.ndarray:
    """53 random bits per integer of ``values``: splitmix64's output ``i`` keyed by ``parts``."""
    (seed,) = round_keys(purpose, *parts, count=1)
    x = np.asarray(values, dtype=np.int64).astype(np.uint64)
    x += np.uint64(1)
    x *= _GAMMA
    x += seed
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    x >>= _S11
    return x


class PassOrder:
    """The order of one pass: ``len(order)`` indices; ``at(positions)`` computes some."""

    def __len__(self) -> int:
        raise NotImplementedError

    def at(self, positions: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def slice(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        return self.at(np.arange(start, min(stop, len(self)), step, dtype=np.int64))

    def item(self, position: int) -> int:
        return int(self.at(np.array([position], dtype=np.int64))[0])

    def to_array(self) -> np.ndarray:
        """The whole pass (O(len): tests, benchmarks, small passes)."""
        out = np.empty(len(self), dtype=np.int64)
        for low in range(0, len(self), _CHUNK):
            out[low : low + _CHUNK] = self.slice(low, low + _CHUNK)
        return out


class KeyedPermutation(PassOrder):
    """A keyed permutation of ``range(size)``, any position in O(1).

    Example:
        >>> p = KeyedPermutation(10, "shuffle", 42, 0)
        >>> sorted(p.to_array().tolist()) == list(range(10))
        True
    """

    __slots__ = ("_size", "_a", "_b", "_keys")

    def __init__(self, size: int, purpose: str, *parts: int) -> None:
        size = check_int(size, "size", minimum=1, maximum=2**62 - 1, where="KeyedPermutation")
        self._size = size
        a = math.isqrt(size - 1) + 1
        self._a, self._b = np.uint64(a), np.uint64(-(-size // a))
        self._keys = list(round_keys(purpose, size, *parts))  # np.uint64 scalars

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"KeyedPermutation(size={self._size})"

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        a, b = self._a, self._b
        left = x // b
        right = x - left * b
        for i, key in enumerate(self._keys):
            m = a if i % 2 == 0 else b
            f = right + key  # round function: multiply, xorshift, multiply, high bits into [0, m)
            f *= _M1
            f ^= f >> _S29
            f *= _M2
            f >>= _S32
            f *= m
            f >>= _S32
            f += left  # (left + F) mod m as min(s, s - m): s - m wraps when s < m
            np.minimum(f, f - m, out=f)
            left, right = right, f
        return left * b + right

    def at(self, positions: Any) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self._size):
            raise IndexError(f"KeyedPermutation: positions must lie in [0, {self._size}), got "
                             f"[{int(pos.min())}, {int(pos.max())}]")
        x = self._encrypt(pos.astype(np.uint64).ravel())
        limit = np.uint64(self._size)
        outside = np.flatnonzero(x >= limit)
        while outside.size:  # cycle walking: fewer than one value in sqrt(n) lands outside
            walked = self._encrypt(x[outside])
            x[outside] = walked
            outside = outside[walked >= limit]
        return x.astype(np.int64).reshape(pos.shape)

    def to_array(self) -> np.ndarray:
        return self.at(np.arange(self._size, dtype=np.int64))

    def __getitem__(self, position: int) -> int:
        index = operator.index(position)
        return self.item(index + self._size if index < 0 else index)


class RangeOrder(PassOrder):
    """``0 .. size - 1`` (a pass without shuffling)."""

    __slots__ = ("_size",)

    def __init__(self, size: int) -> None:
        self._size = int(size)

    def __len__(self) -> int:
        return self._size

    def at(self, positions: np.ndarray) -> np.ndarray:
        return np.array(positions, dtype=np.int64)


class ComposedOrder(PassOrder):
    """``outer.at(inner.at(positions))``: e.g. a shuffled pass over a subset."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, inner: PassOrder, outer: PassOrder) -> None:
        self._inner, self._outer = inner, outer

    def __len__(self) -> int:
        return len(self._inner)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._outer.at(self._inner.at(positions))


# ---------------------------------------------------------------- repeat-factor rounding
ROUNDING = "systematic-53"
FRACTION_BITS = 53
MAX_FACTOR_SUM = 2.0**52
_K = np.int64(FRACTION_BITS)
_HALF = 26  # g = high * 2**26 + low: both running sums fit int64 for N < 2**36
_MASK_HALF = np.int64((1 << _HALF) - 1)
_MASK_REST = np.int64((1 << (FRACTION_BITS - _HALF)) - 1)
_BUILD_CHUNK = 1 << 18


class SystematicRounding:
    """Running sums of repeat factors over the records in a keyed slot order (``permute``):
    per slot ``base = I + (G >> 53)`` and ``low = G mod 2**53``; ~22 bytes/record.
    """

    __slots__ = ("_size", "_records", "_sums", "_table", "_shift", "fractional")

    def __init__(self, factors: np.ndarray, *, permute: bool) -> None:
        n = self._size = len(factors)
        self.fractional = bool((factors != np.floor(factors)).any())
        self._records: np.ndarray | None = None
        if permute and self.fractional:
            order = KeyedPermutation(n, "repeat-slots")
            records = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
            for start in range(0, n, _BUILD_CHUNK):
                records[start : start + _BUILD_CHUNK] = order.slice(start, start + _BUILD_CHUNK)
            self._records = records
        self._sums = np.empty((n, 2), dtype=np.int64)  # (base, low) side by side: one row a probe
        int_carry = high_carry = low_carry = 0
        for start in range(0, n, _BUILD_CHUNK):
            stop = min(n, start + _BUILD_CHUNK)
            part = factors[start:stop] if self._records is None else factors[self._records[start:stop]]
            whole = np.floor(part)
            g = np.ceil((part - whole) * 2.0**FRACTION_BITS).astype(np.int64)
            ints = np.cumsum(whole.astype(np.int64)) + int_carry
            high = np.cumsum(g >> _HALF) + high_carry
            low = np.cumsum(g & _MASK_HALF) + low_carry
            high += low >> _HALF
            low &= _MASK_HALF
            self._sums[start:stop, 0] = ints + (high >> (_K - _HALF))
            self._sums[start:stop, 1] = ((high & _MASK_REST) << _HALF) | low
            int_carry, high_carry, low_carry = int(ints[-1]), int(high[-1]), int(low[-1])
        base = self._sums[:, 0]
        most = int(base[-1]) + 1
        self._shift = (4 * most // n).bit_length()  # ~4 slots per coarse-table entry
        starts = np.arange((most >> self._shift) + 2, dtype=np.int64) << self._shift
        self._table = np.searchsorted(base, starts, side="left").astype(np.int64)

    @staticmethod
    def offset(seed: int, pass_index: int) -> int:
        """The keyed offset ``u`` in ``[0, 2**53)`` of a pass."""
        return int(keyed_bits53(np.zeros(1, dtype=np.int64), "rounding-offset", seed, pass_index)[0])

    def length(self, offset: int) -> int:
        base, low = self._sums[-1].tolist()
        return base + ((low + offset) >> FRACTION_BITS)

    def counts(self, offset: int) -> np.ndarray:
        """Copies of each record in the pass with ``offset`` (O(records))."""
        cumulative = ((self._sums[:, 1] + np.int64(offset)) >> _K) + self._sums[:, 0]
        per_slot = np.diff(cumulative, prepend=np.int64(0))
        if self._records is None:
            return per_slot
        out = np.empty_like(per_slot)
        out[self._records] = per_slot
        return out

    def records_at(self, expanded: np.ndarray, offset: int) -> np.ndarray:
        """The record at each expanded position: a branchless search in a coarse window."""
        q = np.asarray(expanded, dtype=np.int64)
        block = q >> np.int64(self._shift)
        slot = np.take(self._table, block)
        width = int((np.take(self._table, block + 1) - slot).max()) if len(q) else 0
        u, last = np.int64(offset), np.int64(self._size - 1)
        for k in reversed(range(width.bit_length())):
            probe = np.minimum(slot + np.int64((1 << k) - 1), last)
            rows = np.take(self._sums, probe, axis=0)
            count = ((rows[:, 1] + u) >> _K) + rows[:, 0]
            slot += (count <= q).astype(np.int64) << np.int64(k)
        return slot if self._records is None else np.take(self._records, slot).astype(np.int64)


class RoundedOrder(PassOrder):
    """A repeat-factor pass: ``inner`` over the expanded positions, read through the rounding."""

    __slots__ = ("_rounding", "_offset", "_inner")

    def __init__(self, rounding: SystematicRounding, offset: int, inner: PassOrder) -> None:
        self._rounding, self._offset, self._inner = rounding, int(offset), inner

    def __len__(self) -> int:
        return len(self._inner)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._rounding.records_at(self._inner.at(positions), self._offset)


# ---------------------------------------------------------------- concat mixture
#: Draws per leaf of a concat pass.
LEAF = 4096


def _generator(purpose: str, *parts: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=round_keys(purpose, *parts, count=2)))


def cursor_after(part: Any, cursor: tuple[int, int], count: int) -> tuple[int, int]:
    """The cursor ``count`` indices after ``cursor`` in a part sampler's stream."""
    pass_index, offset = cursor[0], cursor[1] + int(count)
    constant = part.constant_length
    if constant is not None:
        return pass_index + offset // constant, offset % constant
    while offset >= (length := part._pass_length(part.seed, pass_index)):
        offset -= length
        pass_index += 1
    return pass_index, offset


class ConcatOrder(PassOrder):
    """One ConcatSampler pass: ``total`` draws over ``parts`` from their cursors ``starts``."""

    def __init__(self, total: int, weights: np.ndarray, parts: list[Any],
                 starts: list[tuple[int, int]], offsets: np.ndarray, seed: int, pass_index: int) -> None:
        self._total, self._parts, self._starts, self._offsets = int(total), parts, starts, offsets
        self._key = (seed, pass_index)
        self._leaves = -(-self._total // LEAF)
        generator = _generator("concat-pass", seed, pass_index)
        self.counts = generator.multinomial(self._total, weights).astype(np.int64)
        self._leaf_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._splits: dict[tuple[int, int], np.ndarray] = {}
        self._part_orders: dict[tuple[int, int], PassOrder] = {}

    def __len__(self) -> int:
        return self._total

    def _leaf(self, leaf: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A leaf's part per draw, each draw's rank in its part, and part draws before it."""
        found = self._leaf_cache.get(leaf)
        if found is not None:
            return found
        counts, before = self.counts, np.zeros_like(self.counts)
        low, high = 0, self._leaves
        while high - low > 1:  # split the counts down the tree to the leaf
            mid = (low + high) // 2
            left = self._splits.get((low, high))
            if left is None:
                drawn = min(mid * LEAF, self._total) - low * LEAF
                left = _generator("concat-split", *self._key, low, high).multivariate_hypergeometric(
                    counts, drawn, method="marginals")
                if len(self._splits) >= 256:
                    self._splits.clear()
                self._splits[(low, high)] = left
            if leaf < mid:
                counts, high = left, mid
            else:
                before, counts, low = before + left, counts - left, mid
        size = int(counts.sum())
        arranged = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        choice = arranged[KeyedPermutation(size, "concat-leaf", *self._key, leaf).to_array()]
        order = np.argsort(choice, kind="stable")
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(size, dtype=np.int64)
        rank[order] = np.arange(size, dtype=np.int64) - firsts[choice[order]]
        if len(self._leaf_cache) >= 4:
            self._leaf_cache.pop(next(iter(self._leaf_cache)))
        self._leaf_cache[leaf] = (choice, rank, before)
        return choice, rank, before

    def _part_order(self, j: int, pass_index: int) -> PassOrder:
        key = (j, pass_index)
        if key not in self._part_orders:
            if len(self._part_orders) >= 4 * len(self._parts):
                self._part_orders.pop(next(iter(self._part_orders)))
            self._part_orders[key] = self._parts[j]._make_pass(pass_index)
        return self._part_orders[key]

    def _part_indices(self, j: int, offsets: np.ndarray) -> np.ndarray:
        """Part ``j``'s indices ``offsets`` draws after its start cursor."""
        part, (first, start) = self._parts[j], self._starts[j]
        out = np.empty(len(offsets), dtype=np.int64)
        absolute = start + offsets
        if part.constant_length is not None:
            passes, positions = np.divmod(absolute, part.constant_length)
            for step in np.unique(passes).tolist():
                where = passes == step
                out[where] = self._part_order(j, first + step).at(positions[where])
            return out
        order = np.argsort(absolute, kind="stable")
        ranked = absolute[order]
        pass_index, base, done = first, 0, 0
        while done < len(ranked):
            length = part._pass_length(part.seed, pass_index)
            stop = int(np.searchsorted(ranked, base + length, side="left"))
            if stop > done:
                out[order[done:stop]] = self._part_order(j, pass_index).at(ranked[done:stop] - base)
            done, base, pass_index = stop, base + length, pass_index + 1
        return out

    def at(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        leaves, inside = np.divmod(positions, LEAF)
        part_of = np.empty(len(positions), dtype=np.int64)
        offset = np.empty(len(positions), dtype=np.int64)
        for leaf in np.unique(leaves).tolist():
            where = leaves == leaf
            choice, rank, before = self._leaf(leaf)
            picked = choice[inside[where]]
            part_of[where] = picked
            offset[where] = before[picked] + rank[inside[where]]
        out = np.empty(len(positions), dtype=np.int64)
        for j in range(len(self._parts)):
            where = part_of == j
            if where.any():
                out[where] = self._part_indices(j, offset[where]) + self._offsets[j]
        return out
