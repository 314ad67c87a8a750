"""BoxMode: the box layouts of the record format, with conversion between them."""

from __future__ import annotations

import math
import sys
from enum import IntEnum
from typing import Any

import numpy as np

from ._common import CatmapError

__all__ = ["BoxMode", "BoxModeError"]


class BoxMode(IntEnum):
    """How a box's 4 (or 5) numbers are to be read. Values match detectron2's.

    Example:
        >>> BoxMode.convert([10, 20, 30, 40], BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
        [10, 20, 40, 60]
    """

    XYXY_ABS = 0
    """(x0, y0, x1, y1) in absolute pixels."""
    XYWH_ABS = 1
    """(x0, y0, w, h) in absolute pixels."""
    XYXY_REL = 2
    """(x0, y0, x1, y1) relative to the image size; needs the image size to convert."""
    XYWH_REL = 3
    """(x0, y0, w, h) relative to the image size; needs the image size to convert."""
    XYWHA_ABS = 4
    """(xc, yc, w, h, angle) in absolute pixels, angle in degrees counter-clockwise."""

    @staticmethod
    def convert(box: Any, from_mode: BoxMode | int, to_mode: BoxMode | int) -> Any:
        """Convert one box (4 or 5 numbers) or an Nx4 / Nx5 array or tensor between modes.

        The result keeps the input's container and dtype (angle conversions compute in float64
        and cast back); XYWHA_ABS -> XYXY/XYWH gives the enclosing axis-aligned box. Relative
        modes need the image size: BoxModeError, as for a wrong shape or non-real values.

        Example:
            >>> import numpy as np
            >>> BoxMode.convert(np.array([[0, 0, 10, 10]]), BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
            array([[ 0,  0, 10, 10]])
            >>> BoxMode.convert((8.0, 9.0, 4.0, 2.0), BoxMode.XYWH_ABS, BoxMode.XYWHA_ABS)
            (10.0, 10.0, 4.0, 2.0, 0.0)
        """
        from_mode, to_mode = BoxMode(from_mode), BoxMode(to_mode)
        if from_mode == to_mode:
            return box
        if {from_mode, to_mode} & {BoxMode.XYXY_REL, BoxMode.XYWH_REL}:
            raise BoxModeError(
                f"cannot convert a box from {from_mode.name} to {to_mode.name}: relative modes "
                "need the image size; scale by (width, height) first")
        expected = 5 if from_mode == BoxMode.XYWHA_ABS else 4
        torch = sys.modules.get("torch")  # a tensor means torch is imported
        if torch is not None and isinstance(box, torch.Tensor):
            if box.dtype == torch.bool or box.is_complex():
                raise BoxModeError(f"a {from_mode.name} box must hold real numbers, got {box.dtype}")
            _check_shape(tuple(box.shape), expected, from_mode)
            return _convert_absolute(box, from_mode, to_mode, torch)
        try:
            arr = box if isinstance(box, np.ndarray) else np.asarray(box)
        except (TypeError, ValueError) as exc:
            raise BoxModeError(
                f"a {from_mode.name} box must be {expected} numbers, got {box!r} ({exc})") from None
        if arr.dtype.kind not in "iuf":
            raise BoxModeError(
                f"a {from_mode.name} box must hold {expected} numbers, got dtype {arr.dtype}")
        if arr is not box and arr.ndim != 1:
            raise BoxModeError(
                f"a list or tuple is one {from_mode.name} box of {expected} numbers (as in "
                f"detectron2); got shape {arr.shape}: pass several boxes as an array or tensor")
        _check_shape(arr.shape, expected, from_mode)
        out = _convert_absolute(arr, from_mode, to_mode, np)
        if arr is box:
            return out
        return tuple(out.tolist()) if isinstance(box, tuple) else out.tolist()


class BoxModeError(CatmapError, ValueError):
    """A box cannot be converted between modes: a relative mode, a wrong shape, no numbers."""


def _check_shape(shape: tuple[int, ...], expected: int, mode: BoxMode) -> None:
    if len(shape) not in (1, 2) or shape[-1] != expected:
        raise BoxModeError(
            f"a {mode.name} box has {expected} numbers (shape ({expected},) or (N, {expected})), "
            f"got shape {shape}")


def _convert_absolute(box: Any, from_mode: BoxMode, to_mode: BoxMode, xp: Any) -> Any:
    """Convert between absolute modes with ``xp`` (numpy for arrays, torch for tensors),
    keeping the input's dtype (and device)."""
    is_numpy = xp is np
    if {from_mode, to_mode} == {BoxMode.XYXY_ABS, BoxMode.XYWH_ABS}:
        out = box.copy() if is_numpy else box.clone()
        if from_mode == BoxMode.XYXY_ABS:
            out[..., 2:] = box[..., 2:] - box[..., :2]
        else:
            out[..., 2:] = box[..., 2:] + box[..., :2]
        return out
    work = box.astype(np.float64) if is_numpy else box.to(xp.float64)
    if from_mode == BoxMode.XYWHA_ABS:  # the axis-aligned box enclosing the rotated one
        theta = work[..., 4] * (math.pi / 180.0)
        c, s = xp.abs(xp.cos(theta)), xp.abs(xp.sin(theta))
        half_w = (c * work[..., 2] + s * work[..., 3]) / 2
        half_h = (c * work[..., 3] + s * work[..., 2]) / 2
        xc, yc = work[..., 0], work[..., 1]
        result = xp.stack([xc - half_w, yc - half_h, xc + half_w, yc + half_h], -1)
        if to_mode == BoxMode.XYWH_ABS:
            result[..., 2:] = result[..., 2:] - result[..., :2]
    else:  # to (xc, yc, w, h, 0)
        x0, y0, w, h = work[..., 0], work[..., 1], work[..., 2], work[..., 3]
        if from_mode == BoxMode.XYXY_ABS:
            w, h = w - x0, h - y0
        result = xp.stack([x0 + w / 2, y0 + h / 2, w, h, xp.zeros_like(w)], -1)
    return result.astype(box.dtype) if is_numpy else result.to(box.dtype)
