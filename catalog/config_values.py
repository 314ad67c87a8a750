"""Config values as plain Python containers: OmegaConf, any ``Mapping`` / ``Sequence``.

Hydra and OmegaConf hand builders ``DictConfig`` / ``ListConfig`` objects, and other config
systems hand their own ``Mapping`` / ``Sequence`` types. catmap's builders take lists and dicts;
:func:`plain_container` turns any of these into ``list`` / ``dict`` at the boundary, so that a
``ListConfig`` of dataset names is several datasets (not one "dataset" of two items) and a
``DictConfig`` of metadata is stored as plain values.

omegaconf is never imported here: a value is an OmegaConf container only if the ``omegaconf``
module was imported by whoever made it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["is_config_container", "plain_container", "plain_names", "plain_value"]

#: Sequences that are values, not lists of values.
_SCALAR_SEQUENCES = (str, bytes, bytearray, memoryview)


def is_config_container(value: Any) -> bool:
    """Whether ``value`` is an OmegaConf ``DictConfig`` / ``ListConfig``.

    Example:
        >>> is_config_container([1, 2])
        False
    """
    omegaconf = sys.modules.get("omegaconf")
    return omegaconf is not None and isinstance(value, omegaconf.Container)


def plain_value(value: Any) -> Any:
    """``value`` with every OmegaConf container in it (also inside plain dicts, lists and
    tuples) converted; everything else, tuples and other ``Sequence`` types included, kept
    (a value without OmegaConf containers is returned as the same object).

    Example:
        >>> from omegaconf import OmegaConf
        >>> plain_value({"classes": OmegaConf.create(["cat"]), "size": (2, 3)})
        {'classes': ['cat'], 'size': (2, 3)}
    """
    if is_config_container(value):
        return _to_container(value)
    if isinstance(value, dict):
        items = {key: plain_value(item) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):  # keep namedtuples
        converted = [plain_value(item) for item in value]
        if all(new is old for new, old in zip(converted, value, strict=True)):
            return value  # nothing to convert: the very same object
        return converted if isinstance(value, list) else tuple(converted)
    return value


def _to_container(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True)


def plain_container(value: Any) -> Any:
    """``value`` with its outer container made a ``dict`` or ``list``.

    * an OmegaConf ``DictConfig`` / ``ListConfig``: converted whole, interpolations resolved
      (``OmegaConf.to_container(value, resolve=True)``);
    * any other ``Mapping``: a ``dict``; any ``Sequence`` other than ``str`` / ``bytes``: a
      ``list``; OmegaConf containers nested in them are converted too (tuples inside stay
      tuples);
    * anything else (a str, a number, None, a numpy array, a torch Dataset that is no
      ``Sequence``): returned unchanged.

    Args:
        value: a config value.

    Returns:
        A ``dict`` or ``list`` for containers, else ``value`` itself.

    Example:
        >>> from omegaconf import OmegaConf
        >>> plain_container(OmegaConf.create({"names": ["a", "b"], "n": "${x}", "x": 2}))
        {'names': ['a', 'b'], 'n': 2, 'x': 2}
        >>> plain_container(("a", "b")), plain_container("a")
        (['a', 'b'], 'a')
    """
    if is_config_container(value):
        return _to_container(value)
    if isinstance(value, Mapping):
        return {key: plain_value(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, _SCALAR_SEQUENCES):
        return [plain_value(item) for item in value]
    return value


def plain_names(value: Any) -> list[str] | None:
    """The list of names when ``value`` is a non-empty sequence of strs (a list, a tuple, a
    ``ListConfig`` or any ``Sequence``), else None.

    Example:
        >>> plain_names(("a", "b")), plain_names("a"), plain_names([{"file_name": "x"}])
        (['a', 'b'], None, None)
    """
    if isinstance(value, _SCALAR_SEQUENCES) or isinstance(value, Mapping):
        return None
    if not (is_config_container(value) or isinstance(value, Sequence)):
        return None
    if len(value) == 0 or not isinstance(value[0], str):
        return None  # checked first: a record list is never converted
    names = plain_container(value)
    if all(isinstance(name, str) for name in names):
        return names
    return None
