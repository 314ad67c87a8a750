"""The sampler state format: a plain dict tagged ``{"type", "version"}``, untrusted on load:
every field is checked and ``"config"`` (the stream's fingerprint) compared before any change.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from catalog._common import is_int

from .errors import SamplerStateError, StateMismatchError

logger = logging.getLogger(__name__)

#: The state format written and read by this package.
STATE_VERSION = 2
MAX_SEED = 2**64
MAX_PASS = 2**40
MAX_POSITION = 2**62
#: The largest world size accepted (constructor or state).
MAX_WORLD_SIZE = 2**20
#: The longest list a fingerprint or pending bucket holds.
MAX_LIST = 2**16


@runtime_checkable
class Stateful(Protocol):
    """Has ``state_dict`` and ``load_state_dict`` (torchdata's protocol); ``isinstance`` checks it."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def make_state(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "version": STATE_VERSION, **fields}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_state(state: Any, kind: str, keys: list[str]) -> Mapping[str, Any]:
    """``state`` if it is a ``kind`` state of this version with exactly ``keys``."""
    if not isinstance(state, Mapping):
        raise SamplerStateError(f"{kind}.load_state_dict: expected a dict, got {type(state).__name__}")
    found = state.get("type")
    if not isinstance(found, str) or found != kind:
        raise SamplerStateError(
            f"{kind}.load_state_dict: the state was written by {_short(found)}, not {kind!r}"
        )
    version = state.get("version")
    if not is_int(version) or version != STATE_VERSION:
        raise SamplerStateError(
            f"{kind}.load_state_dict: unsupported state version {_short(version)} (this catmap "
            f"reads version {STATE_VERSION} only)"
        )
    missing = [key for key in keys if key not in state]
    if missing:
        raise SamplerStateError(f"{kind}.load_state_dict: the state lacks key(s) {missing!r}")
    unknown = [key for key in state if key not in {"type", "version", *keys}]
    if unknown:
        listed = ", ".join(_short(key, 40) for key in unknown[:5])
        raise SamplerStateError(f"{kind}.load_state_dict: the state has unknown key(s) {listed}")
    return state


def check_int(value: Any, key: str, owner: str, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high)``, else :class:`SamplerStateError` naming ``key``."""
    if not is_int(value) or not low <= int(value) < high:
        bound = f"2**{high.bit_length() - 1}" if high >= 2**16 and high & (high - 1) == 0 else high
        phrase = {0: f"a non-negative int below {bound}", 1: f"a positive int below {bound}"}
        raise SamplerStateError(
            f"{owner}.load_state_dict: {key!r} must be {phrase.get(low, f'an int in [{low}, {bound})')}, got "
            f"{type(value).__name__} {_short(value)}"
        )
    return int(value)


def check_int_list(value: Any, key: str, owner: str, low: int, high: int, max_len: int) -> list[int]:
    """A list (tuple, 1-D int array) of at most ``max_len`` ints in ``[low, high)``."""
    where = f"{owner}.load_state_dict: {key!r}"
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or (value.size and not np.issubdtype(value.dtype, np.integer)):
            raise SamplerStateError(f"{where} must be a 1-D array of ints, got {value.dtype} {value.shape}")
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise SamplerStateError(f"{where} must be a list of ints, got {type(value).__name__}")
    if len(value) > max_len:
        raise SamplerStateError(f"{where} holds {len(value)} entries, at most {max_len} fit")
    for position, item in enumerate(value):
        check_int(item, f"{key}[{position}]", owner, low, high)
    return [int(item) for item in value]


def array_digest(array: Any, dtype: str) -> str:
    """blake2b-128 of an array's values as little-endian ``dtype`` (a fingerprint entry)."""
    flat = np.asarray(array).reshape(-1)
    hasher = hashlib.blake2b(digest_size=16)
    for low in range(0, len(flat), 1 << 16):  # no full copy of a per-record array
        hasher.update(np.ascontiguousarray(flat[low : low + (1 << 16)], dtype=np.dtype(dtype)))
    return f"blake2b-128:{hasher.hexdigest()}"


def _same_kind(saved: Any, mine: Any) -> bool:
    if isinstance(mine, bool):
        return isinstance(saved, (bool, np.bool_))
    if isinstance(mine, int):
        return is_int(saved)
    if isinstance(mine, float):
        number = is_int(saved) or isinstance(saved, (float, np.floating))
        return number and math.isfinite(float(saved))
    if isinstance(mine, str):
        return isinstance(saved, str) and len(saved) <= 256
    if isinstance(mine, list):
        return isinstance(saved, (list, tuple)) and len(saved) <= MAX_LIST and all(
            _same_kind(s, mine[0]) for s in saved
        ) if mine else isinstance(saved, (list, tuple)) and len(saved) <= MAX_LIST
    return False


def _same(saved: Any, mine: Any) -> bool:
    if isinstance(mine, float):
        return math.isclose(float(saved), mine, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(mine, list):
        return len(saved) == len(mine) and all(_same(s, m) for s, m in zip(saved, mine))
    if isinstance(mine, (bool, int)):
        return type(mine)(saved) == mine
    return bool(saved == mine)


class Notes:
    """What a ``strict=False`` load let through; logged once as one warning."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)

    def emit(self, owner: str) -> None:
        if self.lines:
            logger.warning("%s.load_state_dict: %s", owner, "; ".join(self.lines))


def check_config(saved: Any, mine: Mapping[str, Any], owner: str, *, strict: bool, notes: Notes) -> None:
    """Compare a saved fingerprint with ``mine``: StateMismatchError on a differing value
    (noted instead when not ``strict``), SamplerStateError on other keys or kinds."""
    where = f"{owner}.load_state_dict"
    if not isinstance(saved, Mapping):
        raise SamplerStateError(f"{where}: 'config' must be a dict, got {type(saved).__name__}")
    unknown, missing = [k for k in saved if k not in mine], [k for k in mine if k not in saved]
    if unknown or missing:
        raise SamplerStateError(f"{where}: 'config' has unknown key(s) {_short(unknown)} and lacks "
                                f"{_short(missing)}; it was not written by this catmap version")
    for key, value in mine.items():
        got = saved[key]
        if not _same_kind(got, value):
            raise SamplerStateError(
                f"{where}: config[{key!r}] must be a {type(value).__name__}, got "
                f"{type(got).__name__} {_short(got)}"
            )
        if _same(got, value):
            continue
        saved_text, mine_text = (f"for {got} records", f"{value} records") if key == "size" else (
            f"with {key} {_short(got)}", f"{key} {_short(value)}")
        this = "this sampler has" if owner.endswith("Sampler") else "this loader has"
        if strict:
            raise StateMismatchError(
                f"{where}: the state was saved {saved_text}, {this} {mine_text} (config key "
                f"{key!r}); the resumed stream would differ. Pass strict=False to load it anyway",
                key=key, saved=_short(got), current=_short(value))
        notes.add(f"loaded with strict=False although the state was saved {saved_text} and {this} {mine_text}")


def prepare_nested_load(obj: Any, state: Any, *, strict: bool, notes: Notes) -> Callable[[], None]:
    """Check ``state`` for a nested ``obj`` without changing it; return what applies it."""
    prepare = getattr(obj, "_prepare_load", None)
    if callable(prepare):
        return prepare(state, strict=strict, notes=notes)
    return lambda: obj.load_state_dict(state)
