"""Argument checks several augmentations share, each written once.

* ``sample_style``: ``"range"`` (draw uniformly between two bounds) or ``"choice"`` (draw one
  of the values), as :class:`~mappers.transforms.ResizeShortestEdge` and
  :class:`~mappers.transforms.RandomRotation` take it;
* ``image_format``: the channel order of a colour image, ``"RGB"`` or ``"BGR"``, and the
  image itself, HxWx3 (:class:`~mappers.transforms.RandomSaturation`,
  :class:`~mappers.transforms.RandomLighting`).

Each raises ``ValueError`` naming the augmentation (``owner``), the argument and the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COLOR_FORMATS", "SAMPLE_STYLES", "check_color_image", "check_one_of"]

#: The ``sample_style`` values: draw between (min, max), or one of the values.
SAMPLE_STYLES = ("range", "choice")
#: The channel orders of a colour image.
COLOR_FORMATS = ("RGB", "BGR")


def check_one_of(value: Any, allowed: tuple[str, ...], name: str, owner: str) -> str:
    """``value`` if it is one of the strings ``allowed``.

    Raises:
        ValueError: any other value; the message names ``owner``, ``name`` and the choices.

    Example:
        >>> check_one_of("choice", SAMPLE_STYLES, "sample_style", "ResizeShortestEdge")
        'choice'
        >>> check_one_of("L", COLOR_FORMATS, "image_format", "RandomLighting")
        Traceback (most recent call last):
        ...
        ValueError: RandomLighting: image_format must be 'RGB' or 'BGR', got 'L'
    """
    if not isinstance(value, str) or value not in allowed:
        choices = " or ".join(repr(choice) for choice in allowed)
        raise ValueError(f"{owner}: {name} must be {choices}, got {value!r}")
    return value


def check_color_image(image: np.ndarray, image_format: str, owner: str) -> None:
    """Check that ``image`` is an HxWx3 colour image (in ``image_format`` channel order).

    Raises:
        ValueError: another shape; the message names it.

    Example:
        >>> check_color_image(np.zeros((2, 2)), "RGB", "RandomSaturation")
        Traceback (most recent call last):
        ...
        ValueError: RandomSaturation needs an HxWx3 RGB image, got shape (2, 2)
    """
    if len(image.shape) != 3 or image.shape[2] != 3:
        raise ValueError(f"{owner} needs an HxWx3 {image_format} image, got shape {image.shape}")
