"""Helpers for sampler state dicts (the torchdata ``Stateful`` protocol).

A state dict is a plain dict of ints, floats, lists and nested dicts (it pickles and
``torch.save``-s anywhere), tagged with the class that wrote it and a format version.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from .errors import SamplerStateError

__all__ = ["STATE_VERSION", "Stateful", "make_state", "check_state", "is_stateful"]

logger = logging.getLogger(__name__)

#: Version of the state-dict format written by this package.
STATE_VERSION = 1


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


def check_state(state: Any, kind: str, required: Iterable[str]) -> Mapping[str, Any]:
    """Validate a state dict written by :func:`make_state` for ``kind``.

    Args:
        state: the loaded object.
        kind: the class name expected in ``state["type"]``.
        required: keys that must be present.

    Returns:
        ``state`` itself.

    Raises:
        SamplerStateError: ``state`` is not a mapping, was written by another class or a newer
            format version, or lacks a required key (the message names it).

    Example:
        >>> check_state(make_state("X", pos=3), "X", ["pos"])["pos"]
        3
    """
    if not isinstance(state, Mapping):
        raise SamplerStateError(
            f"{kind}.load_state_dict: expected a dict, got {type(state).__name__}"
        )
    found = state.get("type")
    if found != kind:
        raise SamplerStateError(
            f"{kind}.load_state_dict: the state was written by {found!r}, not {kind!r}"
        )
    version = state.get("version")
    if not isinstance(version, int) or version > STATE_VERSION:
        raise SamplerStateError(
            f"{kind}.load_state_dict: unsupported state version {version!r} "
            f"(this catmap reads versions up to {STATE_VERSION})"
        )
    missing = [key for key in required if key not in state]
    if missing:
        raise SamplerStateError(
            f"{kind}.load_state_dict: the state lacks key(s) {', '.join(map(repr, missing))}"
        )
    return state
