"""Checking saved states field by field, and the configuration fingerprint saved with them.

A state comes from a checkpoint another run wrote: it is untrusted input. Every field is
checked for type and range before anything is assigned; the configuration that shaped the
stream (dataset size, shuffle flag, a digest of the repeat factors or group ids, batch size
...) is saved under ``"config"`` and compared on load.

Bounds (a state outside them is rejected with :class:`SamplerStateError`):

* seeds: ints in ``[0, 2**64)``;
* pass numbers: ints in ``[0, 2**40)``;
* world sizes: ints in ``[1, 2**20]`` (:data:`samplers.distributed.MAX_WORLD_SIZE`);
* global stream positions and batch counts: ints in ``[0, 2**62)``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from catalog.validation import is_int

from .distributed import MAX_WORLD_SIZE
from .errors import SamplerStateError, StateMismatchError

__all__ = [
    "MAX_SEED",
    "MAX_PASS",
    "MAX_POSITION",
    "MAX_LIST",
    "LEGACY_NOTE",
    "LoadNotes",
    "array_digest",
    "check_config",
    "check_int",
    "check_int_list",
    "check_world_size",
    "prepare_nested_load",
]

logger = logging.getLogger(__name__)

#: Seeds in a state lie in ``[0, MAX_SEED)``.
MAX_SEED = 2**64
#: Pass numbers in a state lie in ``[0, MAX_PASS)``.
MAX_PASS = 2**40
#: Global stream positions and batch counts lie in ``[0, MAX_POSITION)``.
MAX_POSITION = 2**62
#: The longest list a configuration fingerprint holds (e.g. concat part sizes).
MAX_LIST = 2**16

_DIGEST_PREFIX = "blake2b-128:"

#: The note a format-1 state (no configuration fingerprint) loads with.
LEGACY_NOTE = (
    "the state was saved by an older catmap (format version 1) without a configuration "
    "fingerprint; only the few settings it holds (size, shuffle) were compared"
)


def _bound_text(value: int) -> str:
    if value >= 2**16 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return str(value)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_int(
    value: Any, key: str, owner: str, low: int, high: int, *, phrase: str | None = None
) -> int:
    """``value`` as an int in ``[low, high)``, else :class:`SamplerStateError` naming the key.

    Example:
        >>> check_int(3, "offset", "TrainingSampler", 0, 10)
        3
    """
    if not is_int(value) or not low <= int(value) < high:
        if phrase is None:
            if low == 0:
                phrase = f"a non-negative int below {_bound_text(high)}"
            elif low == 1:
                phrase = f"a positive int up to {_bound_text(high - 1)}"
            else:
                phrase = f"an int in [{low}, {_bound_text(high)})"
        raise SamplerStateError(
            f"{owner}.load_state_dict: {key!r} must be {phrase}, got "
            f"{type(value).__name__} {_short(value)}"
        )
    return int(value)


def check_world_size(value: Any, key: str, owner: str) -> int:
    """A saved world size: an int in ``[1, MAX_WORLD_SIZE]``."""
    return check_int(value, key, owner, 1, MAX_WORLD_SIZE + 1)


def check_int_list(
    value: Any, key: str, owner: str, low: int, high: int, *, max_len: int
) -> list[int]:
    """A list (or tuple, or 1-D integer array) of at most ``max_len`` ints in ``[low, high)``.

    Example:
        >>> check_int_list([1, 2], "buckets[0]", "GroupedBatchSampler", 0, 5, max_len=4)
        [1, 2]
    """
    where = f"{owner}.load_state_dict: {key!r}"
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or (value.size and not np.issubdtype(value.dtype, np.integer)):
            raise SamplerStateError(
                f"{where} must be a 1-D array of ints, got dtype {value.dtype} and shape "
                f"{value.shape}"
            )
        items: list[Any] = value.tolist()
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SamplerStateError(f"{where} must be a list of ints, got {type(value).__name__}")
    if len(items) > max_len:
        raise SamplerStateError(f"{where} holds {len(items)} entries, at most {max_len} fit")
    for position, item in enumerate(items):
        if not is_int(item) or not low <= int(item) < high:
            raise SamplerStateError(
                f"{where}: entry {position} must be an int in [{low}, {_bound_text(high)}), "
                f"got {type(item).__name__} {_short(item)}"
            )
    return [int(item) for item in items]


def array_digest(array: Any, dtype: str) -> str:
    """A short digest of an array's values: blake2b (128 bits) over its contiguous bytes in the
    fixed little-endian ``dtype`` (e.g. ``"<f8"``), prefixed with the algorithm and shape.

    Example:
        >>> array_digest([1.0, 2.0], "<f8") == array_digest(np.array([1, 2]), "<f8")
        True
    """
    flat = np.asarray(array).reshape(-1)
    hasher = hashlib.blake2b(digest_size=16)
    # in chunks: no copy of a whole (per-record) array in every rank just before workers fork
    for lo in range(0, len(flat), _DIGEST_CHUNK):
        hasher.update(np.ascontiguousarray(flat[lo : lo + _DIGEST_CHUNK], dtype=np.dtype(dtype)))
    return f"{_DIGEST_PREFIX}{hasher.hexdigest()}"


_DIGEST_CHUNK = 1 << 16


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        inner = {_kind(v) for v in value} or {"any"}
        return f"list[{inner.pop()}]" if len(inner) == 1 else "list[?]"
    return type(value).__name__


def _matches_kind(saved: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(saved, (bool, np.bool_))
    if kind == "int":
        return is_int(saved)
    if kind == "float":
        return (is_int(saved) or isinstance(saved, (float, np.floating))) and math.isfinite(
            float(saved)
        )
    if kind == "str":
        return isinstance(saved, str) and len(saved) <= 256
    if kind.startswith("list["):
        if not isinstance(saved, (list, tuple)) or len(saved) > MAX_LIST:
            return False
        inner = kind[5:-1]
        return inner == "any" or all(_matches_kind(v, inner) for v in saved)
    return False


def _same(saved: Any, current: Any) -> bool:
    if isinstance(current, float):
        return math.isclose(float(saved), current, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(current, list):
        return len(saved) == len(current) and all(
            _same(s, c) for s, c in zip(saved, current, strict=True)
        )
    if isinstance(current, bool):
        return bool(saved) == current
    if isinstance(current, int):
        return int(saved) == current
    return bool(saved == current)


def _describe(key: str, value: Any) -> str:
    if key == "size":
        return f"for {value} records"
    if isinstance(value, list) and value and isinstance(value[0], float):
        value = [round(float(v), 6) for v in value]
    return f"with {key} {_short(value)}"


class LoadNotes:
    """What a load let through with a warning; :meth:`emit` logs it once, as one warning."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        """Note one thing (a legacy state, a configuration mismatch under ``strict=False``)."""
        if line not in self.lines:
            self.lines.append(line)

    def emit(self, owner: str) -> None:
        """Log the notes, if any, as one warning."""
        if self.lines:
            logger.warning("%s.load_state_dict: %s", owner, "; ".join(self.lines))


def check_config(
    saved: Any, current: Mapping[str, Any], owner: str, *, strict: bool, notes: LoadNotes
) -> None:
    """Compare a saved configuration fingerprint with this object's.

    Args:
        saved: the state's ``"config"`` entry (untrusted).
        current: this object's fingerprint (plain ints, floats, bools, strs and lists).
        owner: the class name used in messages.
        strict: raise on a differing value; False notes it in ``notes`` and goes on.
        notes: collects what was let through.

    Raises:
        SamplerStateError: ``saved`` is not a dict with the same keys and value types.
        StateMismatchError: a value differs and ``strict`` is True (``key`` names it).

    Example:
        >>> check_config({"size": 3}, {"size": 3}, "TrainingSampler", strict=True,
        ...              notes=LoadNotes())
    """
    where = f"{owner}.load_state_dict"
    if not isinstance(saved, Mapping):
        raise SamplerStateError(f"{where}: 'config' must be a dict, got {type(saved).__name__}")
    unknown = [key for key in saved if key not in current]
    missing = [key for key in current if key not in saved]
    if unknown or missing:
        raise SamplerStateError(
            f"{where}: 'config' has unknown key(s) {_short(unknown)} and lacks "
            f"{_short(missing)}; the state was not written by this catmap version"
        )
    for key, mine in current.items():
        kind = _kind(mine)
        value = saved[key]
        if not _matches_kind(value, kind):
            raise SamplerStateError(
                f"{where}: config[{key!r}] must be a {kind}, got {type(value).__name__} "
                f"{_short(value)}"
            )
        if _same(value, mine):
            continue
        saved_text, current_text = _describe(key, value), _describe(key, mine)
        this = "this sampler has" if owner.endswith("Sampler") else "this loader has"
        current_bare = current_text.removeprefix("with ").removeprefix("for ")
        if strict:
            raise StateMismatchError(
                f"{where}: the state was saved {saved_text}, {this} {current_bare} (config key "
                f"{key!r}); the resumed stream would differ. Pass strict=False to load it anyway",
                key=key,
                saved=_short(value),
                current=_short(mine),
            )
        notes.add(
            f"loaded with strict=False although the state was saved {saved_text} and "
            f"{this} {current_bare}"
        )


def prepare_nested_load(
    obj: Any, state: Any, *, strict: bool, notes: LoadNotes
) -> Callable[[], None]:
    """Check ``state`` for ``obj`` without changing it; return the function that loads it.

    catmap samplers check the whole state now; any other ``Stateful`` object's own
    ``load_state_dict`` runs only when the returned function is called.
    """
    prepare = getattr(obj, "_prepare_load", None)
    if callable(prepare):
        return prepare(state, strict=strict, notes=notes)
    return lambda: obj.load_state_dict(state)
