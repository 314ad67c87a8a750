"""Colour augmentations: brightness, contrast and saturation as blends.

Each draws a weight ``w`` uniformly in [intensity_min, intensity_max) and blends the image
with a reference: ``out = (1 - w) * reference + w * image`` (w = 1 leaves the image as is).
They do not move pixels, so boxes, polygons and keypoints are unchanged.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput
    >>> aug_input = AugInput(np.full((2, 2, 3), 100, np.uint8))
    >>> _ = RandomBrightness(0.5, 0.5)(aug_input)
    >>> int(aug_input.image[0, 0, 0])
    50
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .augmentation import Augmentation
from .augmentation_checks import COLOR_FORMATS, check_color_image, check_one_of
from .transform import BlendTransform, Transform

__all__ = ["RandomBrightness", "RandomContrast", "RandomSaturation"]


class _RandomIntensity(Augmentation):
    def __init__(self, intensity_min: float, intensity_max: float) -> None:
        if not float(intensity_min) <= float(intensity_max):
            raise ValueError(
                f"{type(self).__name__}: intensity_min ({intensity_min}) must not exceed "
                f"intensity_max ({intensity_max})"
            )
        if float(intensity_min) < 0:
            raise ValueError(
                f"{type(self).__name__}: intensities must be non-negative, got {intensity_min}"
            )
        self.intensity_min = intensity_min
        self.intensity_max = intensity_max

    def _blend_with(self, reference: Any) -> BlendTransform:
        """Draw a weight ``w`` and blend the image with ``reference``: ``(1 - w) * ref + w * img``.

        Args:
            reference: a scalar or an array broadcastable to the image.

        Returns:
            The BlendTransform for this draw.
        """
        w = float(self._rand_range(self.intensity_min, self.intensity_max))
        return BlendTransform(src_image=reference, src_weight=1 - w, dst_weight=w)


class RandomBrightness(_RandomIntensity):
    """Scale brightness by a factor drawn in [intensity_min, intensity_max) (blend with black).

    Raises:
        ValueError: intensity_min > intensity_max or negative.

    Example:
        >>> RandomBrightness(0.8, 1.2)
        RandomBrightness(intensity_min=0.8, intensity_max=1.2)
    """

    shape_only = True  # draws a factor; never reads the pixels

    def get_transform(self, image: np.ndarray) -> Transform:
        return self._blend_with(0)


class RandomContrast(_RandomIntensity):
    """Scale contrast by a factor drawn in [intensity_min, intensity_max) (blend with the mean).

    Raises:
        ValueError: intensity_min > intensity_max or negative.

    Example:
        >>> from mappers.transforms import AugInput
        >>> aug_input = AugInput(np.array([[[0], [200]]], np.uint8))  # mean 100
        >>> _ = RandomContrast(0.5, 0.5)(aug_input)
        >>> aug_input.image[..., 0].tolist()
        [[50, 150]]
    """

    def get_transform(self, image: np.ndarray) -> Transform:
        return self._blend_with(float(image.mean()))


_GRAY_WEIGHTS = {
    "RGB": np.array([0.299, 0.587, 0.114], dtype=np.float32),
    "BGR": np.array([0.114, 0.587, 0.299], dtype=np.float32),
}


class RandomSaturation(_RandomIntensity):
    """Scale saturation by a factor drawn in [intensity_min, intensity_max) (blend with gray).

    Args:
        intensity_min, intensity_max: range of the factor.
        image_format: channel order of the image, "RGB" (default) or "BGR".

    Raises:
        ValueError: bad range, unknown image_format, or (when applied) an image without 3
            channels.

    Example:
        >>> RandomSaturation(0.5, 1.5)
        RandomSaturation(intensity_min=0.5, intensity_max=1.5)
    """

    def __init__(
        self, intensity_min: float, intensity_max: float, *, image_format: str = "RGB"
    ) -> None:
        super().__init__(intensity_min, intensity_max)
        self.image_format = check_one_of(
            image_format, COLOR_FORMATS, "image_format", "RandomSaturation"
        )

    def get_transform(self, image: np.ndarray) -> Transform:
        check_color_image(image, self.image_format, "RandomSaturation")
        gray = image.astype(np.float32, copy=False) @ _GRAY_WEIGHTS[self.image_format]
        return self._blend_with(gray[:, :, None])
