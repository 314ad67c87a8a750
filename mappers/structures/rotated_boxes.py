"""RotatedBoxes: N rotated boxes as an Nx5 float32 tensor of (cx, cy, w, h, angle).

The angle is in degrees, counter-clockwise as seen on the image. A box's corners are its
centre plus ``(dx cos a + dy sin a, -dx sin a + dy cos a)`` for ``dx = ±w/2, dy = ±h/2``
(``y`` points down in image coordinates), which is detectron2's convention. Like
detectron2's, the class is a subclass of :class:`Boxes`.

Example:
    >>> r = RotatedBoxes([[5, 5, 4, 2, 90]])
    >>> r.area().tolist(), r.get_centers().tolist()
    ([8.0], [[5.0, 5.0]])
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .boxes import Boxes, _as_float_boxes
from .errors import StructureShapeError

__all__ = ["RotatedBoxes", "rotated_corners"]


def rotated_corners(tensor: torch.Tensor) -> torch.Tensor:
    """The 4 corners of each rotated box, as an Nx4x2 tensor in the input's dtype.

    Corners go around the box in a consistent order (the order of
    ``(-w/2, -h/2), (w/2, -h/2), (w/2, h/2), (-w/2, h/2)`` before the rotation).

    Example:
        >>> rotated_corners(torch.tensor([[0.0, 0.0, 2.0, 4.0, 0.0]]))[0].tolist()
        [[-1.0, -2.0], [1.0, -2.0], [1.0, 2.0], [-1.0, 2.0]]
    """
    cx, cy, w, h, angle = tensor.unbind(-1)
    theta = angle * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    signs = torch.tensor(
        [[-0.5, -0.5], [0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]],
        dtype=tensor.dtype,
        device=tensor.device,
    )
    dx = signs[:, 0] * w[:, None]
    dy = signs[:, 1] * h[:, None]
    x = cx[:, None] + dx * cos[:, None] + dy * sin[:, None]
    y = cy[:, None] - dx * sin[:, None] + dy * cos[:, None]
    return torch.stack((x, y), dim=-1)


class RotatedBoxes(Boxes):
    """N rotated boxes stored in ``tensor``, an Nx5 float32 tensor of (cx, cy, w, h, angle).

    Args:
        tensor: an Nx5 tensor, array or nested list (angle in degrees, counter-clockwise).
            Tensors keep their device; anything with no elements becomes a (0, 5) tensor.

    Raises:
        StructureShapeError: the input is not Nx5.

    Example:
        >>> RotatedBoxes([]).tensor.shape
        torch.Size([0, 5])
    """

    def __init__(self, tensor: Any) -> None:
        self.tensor = _as_float_boxes(tensor, 5, "RotatedBoxes")

    def area(self) -> torch.Tensor:
        """Area of every box, w * h.

        Example:
            >>> RotatedBoxes([[0, 0, 2, 3, 45]]).area().tolist()
            [6.0]
        """
        return self.tensor[:, 2] * self.tensor[:, 3]

    def normalize_angles(self) -> None:
        """Bring every angle into [-180, 180), in place.

        Example:
            >>> r = RotatedBoxes([[0, 0, 1, 1, 270], [0, 0, 1, 1, -190]]); r.normalize_angles()
            >>> r.tensor[:, 4].tolist()
            [-90.0, 170.0]
        """
        self.tensor[:, 4] = (self.tensor[:, 4] + 180.0) % 360.0 - 180.0

    def clip(self, box_size: tuple[int, int], clip_angle_threshold: float = 1.0) -> None:
        """Clip the nearly horizontal boxes, in place, to an image of (height, width).

        Angles are normalized first (:meth:`normalize_angles`). Only boxes whose angle is
        within ``clip_angle_threshold`` degrees of 0 are clipped, as axis-aligned boxes
        (their angle is kept); the others are left unchanged, since clipping a rotated box
        to the image does not give a rotated box.

        Raises:
            StructureShapeError: a value is infinite or NaN.

        Example:
            >>> r = RotatedBoxes([[5, 5, 20, 4, 0], [5, 5, 20, 4, 30]]); r.clip((10, 10))
            >>> r.tensor.tolist()
            [[5.0, 5.0, 10.0, 4.0, 0.0], [5.0, 5.0, 20.0, 4.0, 30.0]]
        """
        if not bool(torch.isfinite(self.tensor).all()):
            raise StructureShapeError(
                "RotatedBoxes.clip: the box tensor contains infinite or NaN values"
            )
        h, w = box_size
        self.normalize_angles()
        idx = torch.where(self.tensor[:, 4].abs() <= clip_angle_threshold)[0]
        if idx.numel() == 0:
            return
        rows = self.tensor[idx]
        x0 = (rows[:, 0] - rows[:, 2] / 2.0).clamp(min=0, max=w)
        y0 = (rows[:, 1] - rows[:, 3] / 2.0).clamp(min=0, max=h)
        x1 = (rows[:, 0] + rows[:, 2] / 2.0).clamp(min=0, max=w)
        y1 = (rows[:, 1] + rows[:, 3] / 2.0).clamp(min=0, max=h)
        rows[:, 0] = (x0 + x1) / 2.0
        rows[:, 1] = (y0 + y1) / 2.0
        rows[:, 2] = x1 - x0
        rows[:, 3] = y1 - y0
        self.tensor[idx] = rows

    def nonempty(self, threshold: float = 0.0) -> torch.Tensor:
        """Bool mask of the boxes whose w and h are both greater than ``threshold``.

        Example:
            >>> RotatedBoxes([[0, 0, 1, 1, 10], [0, 0, 0, 1, 0]]).nonempty().tolist()
            [True, False]
        """
        return (self.tensor[:, 2] > threshold) & (self.tensor[:, 3] > threshold)

    def inside_box(self, box_size: tuple[int, int], boundary_threshold: int = 0) -> torch.Tensor:
        """Bool mask of the boxes whose axis-aligned enclosing box lies inside the image.

        With (height, width) = ``box_size`` and t = ``boundary_threshold``, the enclosing box
        must have x0, y0 >= -t, x1 < width + t, y1 < height + t.

        Example:
            >>> RotatedBoxes([[5, 5, 8, 2, 0], [5, 5, 8, 2, 90]]).inside_box((8, 10)).tolist()
            [True, False]
        """
        height, width = box_size
        t = boundary_threshold
        cx, cy = self.tensor[..., 0], self.tensor[..., 1]
        half_w, half_h = self.tensor[..., 2] / 2.0, self.tensor[..., 3] / 2.0
        theta = self.tensor[..., 4] * (math.pi / 180.0)
        c, s = torch.abs(torch.cos(theta)), torch.abs(torch.sin(theta))
        dx = c * half_w + s * half_h
        dy = c * half_h + s * half_w
        return (cx - dx >= -t) & (cy - dy >= -t) & (cx + dx < width + t) & (cy + dy < height + t)

    def get_centers(self) -> torch.Tensor:
        """Centres of the boxes as an Nx2 tensor of (cx, cy)."""
        return self.tensor[:, :2]

    def scale(self, scale_x: float, scale_y: float) -> None:
        """Scale the boxes, in place, as the image is scaled by (``scale_x``, ``scale_y``).

        The centre scales like any point. A rotated rectangle scaled unevenly becomes a
        parallelogram; as in detectron2 the result keeps the lengths of the scaled width and
        height vectors, ``w' = w * sqrt((sx cos a)^2 + (sy sin a)^2)``,
        ``h' = h * sqrt((sx sin a)^2 + (sy cos a)^2)``, and takes its angle from the scaled
        height vector, ``a' = atan2(sx sin a, sy cos a)``. With ``sx == sy`` it is exact.

        Example:
            >>> r = RotatedBoxes([[1, 1, 2, 4, 90]]); r.scale(2, 1)
            >>> [round(v, 4) for v in r.tensor[0].tolist()]
            [2.0, 1.0, 2.0, 8.0, 90.0]
        """
        self.tensor[:, 0] *= scale_x
        self.tensor[:, 1] *= scale_y
        theta = self.tensor[:, 4] * (math.pi / 180.0)
        c, s = torch.cos(theta), torch.sin(theta)
        self.tensor[:, 2] *= torch.sqrt((scale_x * c) ** 2 + (scale_y * s) ** 2)
        self.tensor[:, 3] *= torch.sqrt((scale_x * s) ** 2 + (scale_y * c) ** 2)
        self.tensor[:, 4] = torch.atan2(scale_x * s, scale_y * c) * (180.0 / math.pi)
