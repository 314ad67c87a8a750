"""Read detectron2-style configs without depending on detectron2 or yacs.

A detectron2 config is a nested mapping with upper-case keys (``DATASETS.TRAIN``,
``DATALOADER.SAMPLER_TRAIN``, ``INPUT.MIN_SIZE_TRAIN`` ...). It may be a yacs ``CfgNode`` (a
``dict`` subclass), an OmegaConf ``DictConfig`` (a ``MutableMapping``), a plain ``dict``, or any
object exposing the sections as attributes. The functions here read such a config by dotted key
and tell a config apart from the first positional argument of a plain call.

Example:
    >>> cfg = {"INPUT": {"MIN_SIZE_TRAIN": (640, 800)}, "DATASETS": {"TRAIN": ("a",)}}
    >>> is_detectron2_config(cfg)
    True
    >>> config_value(cfg, "INPUT.MIN_SIZE_TRAIN")
    (640, 800)
    >>> config_value(cfg, "INPUT.FORMAT", "BGR")
    'BGR'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import CatmapError

__all__ = ["ConfigKeyError", "config_value", "is_detectron2_config"]

# Top-level sections of a detectron2 config; any one of them marks an object as a config.
_SECTIONS = ("DATASETS", "DATALOADER", "INPUT", "MODEL", "SOLVER", "TEST")
_MISSING = object()


class ConfigKeyError(CatmapError, KeyError):
    """A detectron2-style config lacks a key that the call needs and has no default for.

    Attributes:
        key: the dotted key, e.g. ``"DATASETS.TRAIN"``.
    """

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _child(node: Any, name: str) -> Any:
    if isinstance(node, Mapping):
        return node[name] if name in node else _MISSING
    return getattr(node, name, _MISSING)


def is_detectron2_config(obj: Any) -> bool:
    """True if ``obj`` looks like a detectron2 config (has an upper-case top-level section).

    Args:
        obj: any object, typically the first positional argument of a builder.

    Example:
        >>> is_detectron2_config({"DATALOADER": {}}), is_detectron2_config([{"file_name": "a"}])
        (True, False)
    """
    if isinstance(obj, (str, bytes, list, tuple)) or obj is None:
        return False
    try:
        return any(_child(obj, section) is not _MISSING for section in _SECTIONS)
    except Exception:  # an object whose attribute access raises is not a config
        return False


def config_value(cfg: Any, key: str, default: Any = _MISSING) -> Any:
    """Return the value at dotted ``key`` of a detectron2-style config.

    OmegaConf containers are converted to plain ``list``/``dict`` values.

    Args:
        cfg: the config (mapping, yacs ``CfgNode``, OmegaConf ``DictConfig`` or attribute object).
        key: dotted key such as ``"DATALOADER.REPEAT_THRESHOLD"``.
        default: returned when the key is absent; without it a missing key raises.

    Raises:
        ConfigKeyError: the key is absent and no default was given.

    Example:
        >>> config_value({"DATALOADER": {"NUM_WORKERS": 4}}, "DATALOADER.NUM_WORKERS")
        4
    """
    node = cfg
    for name in key.split("."):
        node = _child(node, name)
        if node is _MISSING:
            if default is _MISSING:
                raise ConfigKeyError(f"config has no key {key!r}", key=key)
            return default
    return _plain(node)


def _plain(value: Any) -> Any:
    """Turn OmegaConf containers into plain Python lists/dicts; leave everything else."""
    module = type(value).__module__
    if module.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value
