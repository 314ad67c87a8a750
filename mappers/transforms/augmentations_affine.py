"""Affine augmentations: RandomRotation and RandomExtent.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput
    >>> aug_input = AugInput(np.zeros((20, 40, 3), np.uint8))
    >>> t = RandomRotation([90, 90])(aug_input)
    >>> aug_input.image.shape
    (40, 20, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._backend import normalize_interp
from .augmentation import Augmentation
from .augmentation_checks import SAMPLE_STYLES, check_one_of
from .transform import NoOpTransform, Transform
from .transform_affine import ExtentTransform, RotationTransform

__all__ = ["RandomRotation", "RandomExtent"]


def _finite_tuple(owner: str, what: str, values: Any, length: int | None = None) -> tuple:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if not out or not all(math.isfinite(v) for v in out) or (length and len(out) != length):
        size = f"{length} " if length else ""
        raise ValueError(f"{owner}: {what} must be {size}finite numbers, got {values!r}")
    return out


class RandomRotation(Augmentation):
    """Rotate by a random angle (degrees, counter-clockwise) about a random or fixed centre.

    Args:
        angle: with ``sample_style="range"`` a (min, max) pair to draw uniformly from; with
            ``"choice"`` a list of angles to draw from. A number means that angle.
        expand: enlarge the output to hold the whole rotated image (see RotationTransform).
        center: None for the image centre; with "range" ``[[min_x, min_y], [max_x, max_y]]``
            relative to the image size ([0, 0] top-left, [1, 1] bottom-right) to draw from,
            with "choice" a list of relative (x, y) centres; one (x, y) pair means that
            centre. Has no effect when ``expand`` is True.
        sample_style: "range" or "choice".
        interp: OpenCV interpolation flag or name, as RotationTransform (default bilinear).

    Angles that are multiples of 360 give a NoOpTransform.

    Raises:
        ValueError: unknown sample_style, malformed angle / center, unknown interp.

    Example:
        >>> RandomRotation([-10, 10])
        RandomRotation(angle=(-10.0, 10.0))
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self,
        angle: float | Sequence[float],
        expand: bool = True,
        center: Sequence[Any] | None = None,
        sample_style: str = "range",
        interp: int | str | None = None,
    ) -> None:
        check_one_of(sample_style, SAMPLE_STYLES, "sample_style", "RandomRotation")
        if isinstance(angle, (int, float, np.number)):
            angle = (angle, angle)
        angles = _finite_tuple("RandomRotation", "angle", angle)
        if sample_style == "range" and (len(angles) != 2 or angles[0] > angles[1]):
            raise ValueError(
                f"RandomRotation: sample_style='range' needs angle=(min, max), got {angle!r}"
            )
        centers = None
        if center is not None:
            if len(center) and isinstance(center[0], (int, float, np.number)):
                center = (center, center)
            centers = tuple(_finite_tuple("RandomRotation", "center", c, 2) for c in center)
            if sample_style == "range" and len(centers) != 2:
                raise ValueError(
                    "RandomRotation: sample_style='range' needs center=[[min_x, min_y], "
                    f"[max_x, max_y]], got {center!r}"
                )
        normalize_interp(interp, opencv=True)
        self.angle = angles
        self.expand = bool(expand)
        self.center = centers
        self.sample_style = sample_style
        self.interp = interp

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        center = None
        if self.sample_style == "range":
            angle = float(self._rand_range(self.angle[0], self.angle[1]))
            if self.center is not None:
                (x_lo, y_lo), (x_hi, y_hi) = self.center
                center = (self._rand_range(x_lo, x_hi), self._rand_range(y_lo, y_hi))
        else:
            angle = self.angle[int(self.rng.integers(len(self.angle)))]
            if self.center is not None:
                center = self.center[int(self.rng.integers(len(self.center)))]
        if angle % 360 == 0:
            return NoOpTransform()
        absolute = None if center is None else (w * float(center[0]), h * float(center[1]))
        return RotationTransform(
            h, w, angle, expand=self.expand, center=absolute, interp=self.interp
        )


class RandomExtent(Augmentation):
    """Take a random sub-rectangle of the image (it may reach outside it; filled with 0).

    The rectangle starts as the whole image around its centre, is scaled by a factor drawn
    uniformly in ``scale_range`` and shifted by ``(w * shift_x * (r1 - 0.5),
    h * shift_y * (r2 - 0.5))`` with r1, r2 uniform in [0, 1). The output keeps the
    rectangle's size in pixels (rounded down, at least 1), so scales above 1 zoom out and
    below 1 zoom in only through cropping.

    Args:
        scale_range: (low, high) of the scale factor, positive.
        shift_range: (x, y) relative shift amplitudes; 0 keeps the rectangle centred.

    Raises:
        ValueError: non-positive or inverted scales, malformed shift_range.

    Example:
        >>> RandomExtent((0.5, 1.5), (0.2, 0.2))
        RandomExtent(scale_range=(0.5, 1.5), shift_range=(0.2, 0.2))
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(self, scale_range: Sequence[float], shift_range: Sequence[float]) -> None:
        scales = _finite_tuple("RandomExtent", "scale_range", scale_range, 2)
        if not 0 < scales[0] <= scales[1]:
            raise ValueError(
                f"RandomExtent: scale_range must be (low, high) with 0 < low <= high, "
                f"got {scale_range!r}"
            )
        self.scale_range = scales
        self.shift_range = _finite_tuple("RandomExtent", "shift_range", shift_range, 2)

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        rect = np.array([-0.5 * w, -0.5 * h, 0.5 * w, 0.5 * h])
        rect *= float(self._rand_range(self.scale_range[0], self.scale_range[1]))
        rect[0::2] += self.shift_range[0] * w * (float(self._rand_range()) - 0.5)
        rect[1::2] += self.shift_range[1] * h * (float(self._rand_range()) - 0.5)
        rect[0::2] += 0.5 * w
        rect[1::2] += 0.5 * h
        out_h = max(1, int(rect[3] - rect[1]))
        out_w = max(1, int(rect[2] - rect[0]))
        return ExtentTransform(src_rect=tuple(float(v) for v in rect), output_size=(out_h, out_w))
