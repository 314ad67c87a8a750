"""RandomLighting: AlexNet's PCA colour noise, with the ImageNet principal components.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput
    >>> aug_input = AugInput(np.full((2, 2, 3), 100.0))
    >>> _ = RandomLighting(0.0)(aug_input)
    >>> float(aug_input.image[0, 0, 0])
    100.0
"""

from __future__ import annotations

import math

import numpy as np

from .augmentation import Augmentation
from .augmentation_checks import COLOR_FORMATS, check_color_image, check_one_of
from .transform import BlendTransform, Transform

__all__ = ["RandomLighting"]

#: Principal components (columns) and eigenvalues of ImageNet RGB pixels, as published with
#: AlexNet (Krizhevsky et al., 2012) and used by detectron2.
IMAGENET_EIGEN_VECS = np.array(
    [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
)
IMAGENET_EIGEN_VALS = np.array([0.2175, 0.0188, 0.0045])


class RandomLighting(Augmentation):
    """Add ``eigen_vecs @ (alpha * eigen_vals)`` to every pixel, ``alpha ~ N(0, scale)``.

    As in detectron2 the offset is added on the image's own value scale (for a uint8 image it
    is a small shift of a fraction of a level per unit of alpha, the result clipped and
    truncated to uint8). Coordinates and masks are unchanged.

    Args:
        scale: standard deviation of the three component weights (>= 0).
        image_format: "RGB" (default, the components' channel order) or "BGR".

    Raises:
        ValueError: negative or non-finite scale, unknown image_format; (when applied) an
            image without 3 channels.

    Example:
        >>> RandomLighting(0.1)
        RandomLighting(scale=0.1)
    """

    shape_only = True  # draws weights; reads only the image's shape

    def __init__(self, scale: float, *, image_format: str = "RGB") -> None:
        value = float(scale)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"RandomLighting: scale must be a finite number >= 0, got {scale!r}")
        self.scale = scale
        self.image_format = check_one_of(
            image_format, COLOR_FORMATS, "image_format", "RandomLighting"
        )
        self.eigen_vecs = IMAGENET_EIGEN_VECS
        self.eigen_vals = IMAGENET_EIGEN_VALS

    def get_transform(self, image: np.ndarray) -> Transform:
        check_color_image(image, self.image_format, "RandomLighting")
        weights = self.rng.normal(0.0, float(self.scale), size=3)
        offset = self.eigen_vecs @ (weights * self.eigen_vals)
        if self.image_format == "BGR":
            offset = offset[::-1].copy()
        return BlendTransform(src_image=offset, src_weight=1.0, dst_weight=1.0)
