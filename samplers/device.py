"""Move a batch (lists / tuples / dicts of tensors and ``Instances``) to a device."""

from __future__ import annotations

from typing import Any

import torch

from mappers.instances import Instances

__all__ = ["to_device"]

_MAX_DEPTH = 32


def _move(value: Any, device: torch.device, non_blocking: bool, depth: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Instances):
        return value.to(device, non_blocking=non_blocking)
    if type(value) is list:
        return [_move(v, device, non_blocking, depth + 1) for v in value]
    if type(value) is tuple:
        return tuple(_move(v, device, non_blocking, depth + 1) for v in value)
    if type(value) is dict:
        return {k: _move(v, device, non_blocking, depth + 1) for k, v in value.items()}
    return value


def to_device(batch: Any, device: str | torch.device, non_blocking: bool = True) -> Any:
    """Return ``batch`` with every tensor (also inside ``Instances``) moved to ``device``.

    Example:
        >>> batch = [{"image": torch.zeros(3, 2, 2), "image_id": 7}]
        >>> moved = to_device(batch, "cpu")
        >>> moved[0]["image"].device.type, moved[0]["image_id"]
        ('cpu', 7)
    """
    return _move(batch, torch.device(device), bool(non_blocking), 0)
