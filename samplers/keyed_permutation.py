"""Keyed pseudorandom permutations of ``range(n)``: any position's item in O(1), no array.

A training pass used to be ``randperm(n)``: resuming deep in a pass regenerated the whole
permutation (O(n) time and memory). :class:`KeyedPermutation` computes ``perm[i]`` from
``(key, i)`` alone, vectorized over a chunk of positions with numpy, so a sampler holds a few
round keys instead of an index array and resumes at any depth in constant time.

Construction (a format-preserving cipher over ``range(n)``):

* the domain is a rectangle ``A x B`` with ``A = ceil(sqrt(n))`` and ``B = ceil(n / A)``, so
  ``n <= A * B < n + A``; a position ``x`` is the pair ``(x // B, x % B)``;
* six rounds of an alternating Feistel network with modular addition,
  ``(L, R) -> (R, (L + F_k(R)) mod |L|)``, where the round function ``F_k`` mixes ``R + k``
  with two 64-bit multiplications and a xorshift (splitmix64's constants) and brings its high
  32 bits into ``[0, |L|)`` by a multiply-shift (no division), and the six 64-bit round keys
  ``k`` come from blake2b over ``(purpose, n, seed, tweak...)``; every round is a bijection,
  so the whole network is one;
* cycle walking: a value in ``[n, A * B)`` is encrypted again until it lands in ``range(n)``
  (fewer than one value in ``sqrt(n)`` needs it), which keeps a bijection of ``range(n)``.

The permutation is not cryptographically strong; it is keyed, cheap, and statistically close
to a uniformly random permutation for training (no fixed-point excess, no position/value or
neighbour correlation: see ``tests/test_keyed_permutation.py``).

:func:`keyed_uniform` gives independent uniforms in ``[0, 1)`` per integer (e.g. one draw per
record and pass) from the same kind of key.
"""

from __future__ import annotations

import hashlib
import math
import operator
from typing import Any

import numpy as np

from catalog.validation import check_int

__all__ = ["KeyedPermutation", "ROUNDS", "keyed_bits53", "keyed_uniform", "round_keys"]

#: Feistel rounds (an even number, so the output has the input's ``A x B`` shape).
ROUNDS = 6

_PERSON = b"catmap.perm.v1"
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11, _S29, _S32 = (np.uint64(s) for s in (30, 27, 31, 11, 29, 32))
_MAX_KEY_PART = 2**64


def _key_bytes(purpose: str, parts: tuple[int, ...]) -> bytes:
    if not isinstance(purpose, str) or len(purpose) > 64:
        raise TypeError(f"keyed permutation: purpose must be a short str, got {purpose!r}")
    out = [purpose.encode("utf-8"), len(parts).to_bytes(2, "little")]
    for part in parts:
        value = check_int(part, "key part", minimum=0, maximum=_MAX_KEY_PART - 1,
                          where="keyed permutation")
        out.append(value.to_bytes(8, "little"))
    return b"\x00".join(out)


def round_keys(purpose: str, *parts: int, count: int = ROUNDS) -> np.ndarray:
    """``count`` 64-bit keys derived with blake2b from ``purpose`` and integer ``parts``.

    Example:
        >>> k = round_keys("shuffle", 10, 0, 3)
        >>> k.dtype, len(k), bool((k == round_keys("shuffle", 10, 0, 3)).all())
        (dtype('uint64'), 6, True)
    """
    digest = hashlib.blake2b(
        _key_bytes(purpose, parts), digest_size=8 * count, person=_PERSON
    ).digest()
    return np.frombuffer(digest, dtype="<u8").astype(np.uint64)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on a uint64 array (a new array)."""
    z = values ^ (values >> _S30)
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def keyed_bits53(values: Any, purpose: str, *parts: int) -> np.ndarray:
    """53 random bits (uint64 below ``2**53``) for each integer of ``values``: output ``i``
    of the splitmix64 generator seeded from ``(purpose, parts)``, so draws for different
    integers are those of a good sequential generator, computable at any index.

    Example:
        >>> bits = keyed_bits53(np.arange(3), "rounding", 7, 0)
        >>> again = keyed_bits53([0, 1, 2], "rounding", 7, 0)
        >>> bool((bits < 2**53).all()), bool((bits == again).all())
        (True, True)
    """
    (seed,) = round_keys(purpose, *parts, count=1)
    x = np.asarray(values, dtype=np.int64).astype(np.uint64)
    x += np.uint64(1)
    x *= _GAMMA
    x += seed
    z = _mix(x)
    z >>= _S11
    return z


def keyed_uniform(values: Any, purpose: str, *parts: int) -> np.ndarray:
    """A uniform float64 in ``[0, 1)`` for each integer of ``values``, keyed by
    ``(purpose, parts)``: the same inputs give the same draws, other keys independent ones
    (``keyed_bits53(...) / 2**53``).

    Example:
        >>> u = keyed_uniform(np.arange(4), "rounding", 7, 0)
        >>> again = keyed_uniform(range(4), "rounding", 7, 0)
        >>> bool(((0 <= u) & (u < 1)).all()), bool((u == again).all())
        (True, True)
    """
    return keyed_bits53(values, purpose, *parts).astype(np.float64) * (1.0 / 2**53)


class KeyedPermutation:
    """A keyed pseudorandom permutation of ``range(size)``, evaluated at any position in O(1).

    Args:
        size: the length ``n`` (an int >= 1, below 2**62).
        purpose: what the permutation is for (``"shuffle"``, ``"subset"``, ...): other purposes
            give unrelated permutations from the same seed.
        *parts: the key, as ints in ``[0, 2**64)`` (e.g. the seed and the pass number).

    Raises:
        TypeError / ValueError: a malformed size or key part.

    Example:
        >>> p = KeyedPermutation(10, "shuffle", 42, 0)
        >>> sorted(p.at(np.arange(10)).tolist()) == list(range(10))
        True
        >>> p[3] == int(p.at(np.array([3]))[0])
        True
    """

    __slots__ = ("_size", "_a", "_b", "_keys")

    def __init__(self, size: int, purpose: str, *parts: int) -> None:
        size = check_int(size, "size", minimum=1, maximum=2**62 - 1, where="KeyedPermutation")
        self._size = size
        a = math.isqrt(size - 1) + 1  # ceil(sqrt(size))
        b = -(-size // a)
        self._a = np.uint64(a)
        self._b = np.uint64(b)
        self._keys = [np.uint64(k) for k in round_keys(purpose, size, *parts)]

    @property
    def size(self) -> int:
        """The length ``n`` of the permuted range."""
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
            f = right + key  # the round function: multiply, xorshift, multiply ...
            f *= _M1
            f ^= f >> _S29
            f *= _M2
            f >>= _S32  # ... and its high 32 bits brought into [0, m) by a multiply-shift
            f *= m
            f >>= _S32
            f += left  # (left + F) mod m, as min(s, s - m): s - m wraps around when s < m
            np.minimum(f, f - m, out=f)
            left, right = right, f
        return left * b + right

    def at(self, positions: Any) -> np.ndarray:
        """The items at ``positions`` (ints in ``[0, size)``), as an int64 array.

        Raises:
            IndexError: a position outside ``[0, size)``.
        """
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self._size):
            raise IndexError(
                f"KeyedPermutation: positions must lie in [0, {self._size}), got "
                f"[{int(pos.min())}, {int(pos.max())}]"
            )
        x = self._encrypt(pos.astype(np.uint64).ravel())
        limit = np.uint64(self._size)
        outside = np.flatnonzero(x >= limit)
        while outside.size:  # cycle walking: fewer than one value in sqrt(n) lands outside
            walked = self._encrypt(x[outside])
            x[outside] = walked
            outside = outside[walked >= limit]
        return x.astype(np.int64).reshape(pos.shape)

    def slice(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        """The items at positions ``range(start, stop, step)`` (clipped to the size)."""
        return self.at(np.arange(start, min(stop, self._size), step, dtype=np.int64))

    def __getitem__(self, position: int) -> int:
        index = operator.index(position)
        if index < 0:
            index += self._size
        return int(self.at(np.array([index], dtype=np.int64))[0])

    def to_array(self) -> np.ndarray:
        """The whole permutation, materialized (O(n): for tests and small sizes)."""
        return self.at(np.arange(self._size, dtype=np.int64))
