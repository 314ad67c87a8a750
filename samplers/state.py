"""Helpers for sampler state dicts (the torchdata ``Stateful`` protocol).

A state dict is a plain dict of ints, floats, lists and nested dicts (it pickles and
``torch.save``-s anywhere), tagged with the class that wrote it and a format version.

Format versions: 1 (catmap before the configuration fingerprint) and 2 (adds ``"config"``, the
fingerprint of the configuration that shaped the stream, and saves a sampler's cursor inside
its pass). Version 1 states still load, with one warning, since they carry no fingerprint to
compare. Keys a version does not define are rejected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from catalog.validation import is_int

from .errors import SamplerStateError

__all__ = [
    "STATE_VERSION",
    "OLDEST_STATE_VERSION",
    "Stateful",
    "make_state",
    "check_state",
    "is_stateful",
    "is_legacy_state",
]

#: Version of the state-dict format written by this package.
STATE_VERSION = 2
#: The oldest format version this package reads.
OLDEST_STATE_VERSION = 1


@runtime_checkable
class Stateful(Protocol):
    """Anything with ``state_dict()`` and ``load_state_dict(state)`` (torchdata's protocol)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def is_stateful(obj: object) -> bool:
    """True when ``obj`` implements ``state_dict`` and ``load_state_dict``."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def make_state(kind: str, **fields: Any) -> dict[str, Any]:
    """A state dict tagged with ``kind`` (the writing class) and :data:`STATE_VERSION`.

    Example:
        >>> make_state("TrainingSampler", seed=1)["type"]
        'TrainingSampler'
    """
    return {"type": kind, "version": STATE_VERSION, **fields}


def is_legacy_state(state: Any) -> bool:
    """True for a state dict of format version 1 (saved without a configuration fingerprint).

    Example:
        >>> is_legacy_state({"type": "X", "version": 1}), is_legacy_state(make_state("X"))
        (True, False)
    """
    return isinstance(state, Mapping) and type(state.get("version")) is int and (
        state["version"] == 1
    )


def check_state(
    state: Any, kind: str, required: Iterable[str], optional: Iterable[str] | None = None
) -> Mapping[str, Any]:
    """Validate a state dict written by :func:`make_state` for ``kind``.

    Args:
        state: the loaded object.
        kind: the class name expected in ``state["type"]``.
        required: keys that must be present.
        optional: keys that may be present; when given, any other key is rejected.

    Returns:
        ``state`` itself.

    Raises:
        SamplerStateError: ``state`` is not a mapping, was written by another class or a newer
            format version, lacks a required key or has an unknown one (the message names it).

    Example:
        >>> check_state(make_state("X", pos=3), "X", ["pos"])["pos"]
        3
    """
    if not isinstance(state, Mapping):
        raise SamplerStateError(
            f"{kind}.load_state_dict: expected a dict, got {type(state).__name__}"
        )
    found = state.get("type")
    if not isinstance(found, str) or found != kind:
        raise SamplerStateError(
            f"{kind}.load_state_dict: the state was written by {repr(found)[:80]}, not {kind!r}"
        )
    version = state.get("version")
    if not is_int(version) or not OLDEST_STATE_VERSION <= version <= STATE_VERSION:
        raise SamplerStateError(
            f"{kind}.load_state_dict: unsupported state version {repr(version)[:80]} "
            f"(this catmap reads versions {OLDEST_STATE_VERSION} to {STATE_VERSION})"
        )
    required = list(required)
    missing = [key for key in required if key not in state]
    if missing:
        raise SamplerStateError(
            f"{kind}.load_state_dict: the state lacks key(s) {', '.join(map(repr, missing))}"
        )
    if optional is not None:
        known = {"type", "version", *required, *optional}
        unknown = [key for key in state if key not in known]
        if unknown:
            listed = ", ".join(repr(key)[:40] for key in unknown[:5])
            raise SamplerStateError(
                f"{kind}.load_state_dict: the state has unknown key(s) {listed} (format "
                f"version {version} defines {', '.join(map(repr, sorted(known)))})"
            )
    return state
