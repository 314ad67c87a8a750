"""BoxMode: the box layouts of the record format, with conversion between them."""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any

import numpy as np

__all__ = ["BoxMode"]


class BoxMode(IntEnum):
    """How a box's 4 (or 5) numbers are to be read. Values match detectron2's.

    Example:
        >>> BoxMode.convert([10, 20, 30, 40], BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
        [10.0, 20.0, 40.0, 60.0]
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

        The result has the input's kind: a list (or tuple) gives a list of floats, a numpy
        array a numpy array, a tensor a tensor.

        Args:
            box: a sequence of 4 (5 for XYWHA_ABS) numbers, or an (N, 4) / (N, 5) array or tensor.
            from_mode: the mode ``box`` is in.
            to_mode: the mode wanted.

        Raises:
            ValueError: a relative mode (XYXY_REL, XYWH_REL) is involved: converting it needs
                the image size, which a box alone does not carry; or the shape is wrong.

        Example:
            >>> import numpy as np
            >>> BoxMode.convert(np.array([[0, 0, 10, 10]]), BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
            array([[ 0.,  0., 10., 10.]])
        """
        from_mode = BoxMode(from_mode)
        to_mode = BoxMode(to_mode)
        if from_mode == to_mode:
            return box
        relative = {BoxMode.XYXY_REL, BoxMode.XYWH_REL}
        if from_mode in relative or to_mode in relative:
            raise ValueError(
                f"cannot convert a box from {from_mode.name} to {to_mode.name}: relative modes "
                "need the image size; scale by (width, height) first"
            )

        kind = "list"
        if isinstance(box, np.ndarray):
            kind = "numpy"
            arr = box
        else:
            try:
                import torch

                if isinstance(box, torch.Tensor):
                    kind = "torch"
                    arr = box.detach().cpu().numpy()
                else:
                    arr = np.asarray(box)
            except ImportError:  # pragma: no cover - torch is a dependency
                arr = np.asarray(box)
        single = arr.ndim == 1
        arr2 = np.atleast_2d(arr).astype(np.float64, copy=True)
        expected = 5 if from_mode == BoxMode.XYWHA_ABS else 4
        if arr2.shape[-1] != expected:
            raise ValueError(
                f"a {from_mode.name} box has {expected} numbers, got shape {tuple(np.shape(box))}"
            )

        if from_mode == BoxMode.XYWHA_ABS and to_mode == BoxMode.XYXY_ABS:
            out = _xywha_to_xyxy(arr2)
        elif from_mode == BoxMode.XYWHA_ABS and to_mode == BoxMode.XYWH_ABS:
            xyxy = _xywha_to_xyxy(arr2)
            out = xyxy.copy()
            out[:, 2:] = xyxy[:, 2:] - xyxy[:, :2]
        elif to_mode == BoxMode.XYWHA_ABS:
            if from_mode == BoxMode.XYXY_ABS:
                w = arr2[:, 2] - arr2[:, 0]
                h = arr2[:, 3] - arr2[:, 1]
                x0, y0 = arr2[:, 0], arr2[:, 1]
            else:  # XYWH_ABS
                x0, y0, w, h = arr2[:, 0], arr2[:, 1], arr2[:, 2], arr2[:, 3]
            out = np.stack([x0 + w / 2, y0 + h / 2, w, h, np.zeros_like(w)], axis=1)
        elif from_mode == BoxMode.XYWH_ABS and to_mode == BoxMode.XYXY_ABS:
            out = arr2.copy()
            out[:, 2:] = arr2[:, :2] + arr2[:, 2:]
        else:  # XYXY_ABS -> XYWH_ABS, the last pair of distinct absolute modes
            out = arr2.copy()
            out[:, 2:] = arr2[:, 2:] - arr2[:, :2]

        if single:
            out = out[0]
        if kind == "numpy":
            return out.astype(box.dtype) if np.issubdtype(box.dtype, np.floating) else out
        if kind == "torch":
            import torch

            dtype = box.dtype if box.is_floating_point() else torch.float32
            return torch.as_tensor(out, dtype=dtype, device=box.device)
        return out.tolist()


def _xywha_to_xyxy(arr: np.ndarray) -> np.ndarray:
    """Axis-aligned bounding box of rotated boxes (xc, yc, w, h, angle in degrees)."""
    theta = arr[:, 4] * math.pi / 180.0
    c = np.abs(np.cos(theta))
    s = np.abs(np.sin(theta))
    new_w = c * arr[:, 2] + s * arr[:, 3]
    new_h = c * arr[:, 3] + s * arr[:, 2]
    xc, yc = arr[:, 0], arr[:, 1]
    return np.stack([xc - new_w / 2, yc - new_h / 2, xc + new_w / 2, yc + new_h / 2], axis=1)
