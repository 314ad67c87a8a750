"""Systematic rounding of repeat factors: every pass's counts and order from one keyed draw.

A repeat-factor pass holds record ``i`` ``floor(r_i)`` times plus once more with probability
``frac(r_i)``. Drawing each extra copy independently (as detectron2 does) costs one draw per
record and a cumulative sum per pass: O(records) for every pass and for every resume inside
one. Here the extra copies of a pass come from *systematic (stratified) rounding*, so nothing
per pass is O(records):

* **Once, at construction.** The records are laid out in *slots*, a fixed keyed order
  (``KeyedPermutation(N, "repeat-slots")``; the identity when the pass is not shuffled, or no
  factor has a fraction). Each fraction becomes the integer ``g_s = ceil(frac * 2**53)``
  (exact in float64, ``0 <= g_s < 2**53``). With ``I_s`` the running sum of the integer parts
  and ``G_s`` that of the ``g_s`` through slot ``s`` (computed exactly in int64, in two 26/27-bit
  halves), two int64 per slot are kept: ``base_s = I_s + (G_s >> 53)`` and
  ``low_s = G_s mod 2**53``, plus the record of each slot (int32) and a coarse table of
  ``base`` (fewer than ``N / 4`` entries): about 22 bytes per record in all.
* **Per pass.** One keyed integer ``u`` uniform in ``[0, 2**53)``
  (``keyed_bits53(0, "rounding-offset", seed, pass)``). The running count through slot ``s`` is
  ``cum_s = base_s + ((low_s + u) >> 53) = I_s + floor((G_s + u) / 2**53)``. So slot ``s`` gets
  its extra copy exactly when ``(G_{s-1} + u) mod 2**53 >= 2**53 - g_s``: ``g_s`` of the
  ``2**53`` values of ``u``, probability ``g_s / 2**53`` (the fraction, to 53 bits, by integer
  arithmetic only). The pass length is ``cum_{N-1}`` (O(1), and at least 1 when the factors sum
  to at least 1), and the slot holding expanded position ``q`` is the first ``s`` with
  ``cum_s > q``: a binary search in the window the coarse table gives (``cum_s`` is ``base_s``
  or ``base_s + 1``), vectorized over a chunk of positions.

Each record's count has the distribution of independent rounding (``floor`` or ``ceil``, ``ceil``
with probability ``frac``); only the joint distribution differs: the pass length is
``floor`` or ``ceil`` of the sum of the factors, and the extra copies are spread out along the
slot order (records close in slot order are negatively correlated; in general two records'
extra copies are not independent, and how they relate is fixed by their slots). The keyed slot
order keeps that from following the dataset's own order (e.g. consecutive video frames). The
slot order does not depend on the seed, because a loaded state may replace the seed and loading
must stay O(1).
"""

from __future__ import annotations

import numpy as np

from .keyed_permutation import KeyedPermutation, keyed_bits53
from .pass_order import PassOrder

__all__ = ["FRACTION_BITS", "MAX_FACTOR_SUM", "ROUNDING", "RoundedOrder", "SystematicRounding"]

#: The rounding scheme, saved in the sampler's configuration fingerprint.
ROUNDING = "systematic-53"
#: Fixed-point bits of a fraction (``g = ceil(frac * 2**FRACTION_BITS)``).
FRACTION_BITS = 53
#: The largest sum of factors accepted (a pass of more indices than this is no training pass).
MAX_FACTOR_SUM = 2.0**52

_K = np.int64(FRACTION_BITS)
_HALF = 26  # g = high * 2**26 + low26: both halves' running sums fit int64 for N < 2**36
_MASK_HALF = np.int64((1 << _HALF) - 1)
_MASK_REST = np.int64((1 << (FRACTION_BITS - _HALF)) - 1)
#: Records laid out per step at construction (bounds the temporaries).
_BUILD_CHUNK = 1 << 18
#: Slots per coarse-table entry, on average.
_SLOTS_PER_ENTRY = 4


class SystematicRounding:
    """The precomputed running sums of one set of repeat factors (see the module docstring).

    Args:
        factors: positive finite float64 factors, one per record, summing to at most
            :data:`MAX_FACTOR_SUM` (checked by the sampler).
        permute: lay the records out in the keyed slot order (else slot ``s`` is record ``s``).

    Example:
        >>> r = SystematicRounding(np.array([2.0, 0.5, 0.5]), permute=False)
        >>> u = r.offset(seed=0, pass_index=0)
        >>> counts = r.counts(u)
        >>> int(counts[0]), int(counts[1:].sum()), r.length(u)
        (2, 1, 3)
    """

    __slots__ = ("_size", "_records", "_sums", "_table", "_shift", "_fractional")

    def __init__(self, factors: np.ndarray, *, permute: bool) -> None:
        n = len(factors)
        self._size = n
        fractional = bool((factors != np.floor(factors)).any())
        self._fractional = fractional
        # the record in each slot (int32 when it fits: 4 bytes per record, a gather per index)
        self._records: np.ndarray | None = None
        if permute and fractional:
            order = KeyedPermutation(n, "repeat-slots")
            records = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
            for start in range(0, n, _BUILD_CHUNK):  # bounded temporaries
                records[start : start + _BUILD_CHUNK] = order.slice(start, start + _BUILD_CHUNK)
            records.flags.writeable = False
            self._records = records
        # slot s: (base_s, low_s) side by side, so that a probe reads one 16-byte row
        self._sums = np.empty((n, 2), dtype=np.int64)
        int_carry, high_carry, low_carry = 0, 0, 0
        for start in range(0, n, _BUILD_CHUNK):
            stop = min(n, start + _BUILD_CHUNK)
            part = factors[start:stop] if self._records is None else factors[
                self._records[start:stop]]
            whole = np.floor(part)
            g = np.ceil((part - whole) * 2.0**FRACTION_BITS).astype(np.int64)
            ints = np.cumsum(whole.astype(np.int64))
            ints += int_carry
            high = np.cumsum(g >> _HALF)  # G in units of 2**26 ...
            high += high_carry
            low = np.cumsum(g & _MASK_HALF)  # ... and below
            low += low_carry
            high += low >> _HALF
            low &= _MASK_HALF  # G_s = high * 2**26 + low exactly, low < 2**26
            self._sums[start:stop, 0] = ints + (high >> (_K - _HALF))
            self._sums[start:stop, 1] = ((high & _MASK_REST) << _HALF) | low
            int_carry, high_carry, low_carry = int(ints[-1]), int(high[-1]), int(low[-1])
        self._sums.flags.writeable = False
        # coarse table: entry j is the first slot whose base reaches j * 2**shift
        base = self._sums[:, 0]
        most = int(base[-1]) + 1  # the longest pass
        self._shift = (_SLOTS_PER_ENTRY * most // n).bit_length()
        starts = np.arange((most >> self._shift) + 2, dtype=np.int64) << self._shift
        self._table = np.searchsorted(base, starts, side="left").astype(np.int64)
        self._table.flags.writeable = False

    @property
    def fractional(self) -> bool:
        """Whether some factor has a fraction (else every pass has the same counts)."""
        return self._fractional

    @property
    def nbytes(self) -> int:
        """The bytes held (the running sums, the records of the slots, the coarse table)."""
        records = 0 if self._records is None else self._records.nbytes
        return self._sums.nbytes + self._table.nbytes + records

    @staticmethod
    def offset(seed: int, pass_index: int) -> int:
        """The keyed offset ``u`` in ``[0, 2**53)`` of pass ``pass_index``."""
        return int(keyed_bits53(np.zeros(1, dtype=np.int64), "rounding-offset", seed, pass_index)[0])

    def length(self, offset: int) -> int:
        """The pass length with offset ``offset`` (O(1))."""
        base, low = self._sums[-1].tolist()
        return base + ((low + offset) >> FRACTION_BITS)

    def counts(self, offset: int) -> np.ndarray:
        """How often each record appears in the pass with offset ``offset`` (O(records))."""
        cumulative = (self._sums[:, 1] + np.int64(offset)) >> _K
        cumulative += self._sums[:, 0]
        per_slot = np.diff(cumulative, prepend=np.int64(0))
        if self._records is None:
            return per_slot
        out = np.empty_like(per_slot)
        out[self._records] = per_slot
        return out

    def records_at(self, expanded: np.ndarray, offset: int) -> np.ndarray:
        """The record at each expanded position (int64 array, positions in
        ``[0, length(offset))``): O(len(expanded) * log(window)), no per-pass array."""
        q = np.asarray(expanded, dtype=np.int64)
        block = q >> np.int64(self._shift)
        slot = np.take(self._table, block)  # the answer lies in [slot, next entry]
        width = int((np.take(self._table, block + 1) - slot).max()) if len(q) else 0
        u = np.int64(offset)
        last = np.int64(self._size - 1)
        # branchless binary search: the answer lies in [slot, slot + 2**k - 1]; a probe past
        # the window (or clamped to the last slot) counts as "after", which it is
        for k in reversed(range(width.bit_length())):
            probe = slot + np.int64((1 << k) - 1)
            np.minimum(probe, last, out=probe)
            rows = np.take(self._sums, probe, axis=0)
            count = rows[:, 1] + u
            count >>= _K
            count += rows[:, 0]  # the running count through the probed slot
            slot += (count <= q).astype(np.int64) << np.int64(k)
        return slot if self._records is None else np.take(self._records, slot).astype(np.int64)


class RoundedOrder(PassOrder):
    """One repeat-factor pass: ``inner``'s order of the expanded positions, each read as the
    record holding it under :class:`SystematicRounding` with the pass's offset.

    Example:
        >>> from samplers.pass_order import RangeOrder
        >>> r = SystematicRounding(np.array([2.0, 1.0]), permute=False)
        >>> RoundedOrder(r, 0, RangeOrder(3)).to_array().tolist()
        [0, 0, 1]
    """

    __slots__ = ("_rounding", "_offset", "_inner")

    def __init__(self, rounding: SystematicRounding, offset: int, inner: PassOrder) -> None:
        self._rounding = rounding
        self._offset = int(offset)
        self._inner = inner

    def __len__(self) -> int:
        return len(self._inner)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self._rounding.records_at(self._inner.at(positions), self._offset)
