"""Apply transforms to an image the caller owns (a freshly decoded one), as fast as possible.

The mappers decode a new image for every record, so they may change it in place and pick
the cheapest order of operations. Two ways to apply transforms here, both giving the pixels
``TransformList.apply_image`` gives (exactly, or up to rounding where noted):

* :func:`apply_planned_image`: transforms drawn before decoding
  (:meth:`~mappers.transforms.AugmentationList.plan`). Flips, resizes and no-ops run flips
  first, on the smaller decoded image, then each resize as one OpenCV call; a JPEG decoded at
  reduced scale (:func:`reduced_decode_size`) is resized from its decoded size. Any other
  plan runs transform by transform, flipping in place.
* :class:`OwnedImageAugInput`: an AugInput whose flips happen in place, for augmentations
  drawn from the decoded image.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import HFlipTransform, ResizeTransform, TransformList
    >>> plan = TransformList([ResizeTransform(4, 6, 2, 3), HFlipTransform(3)])
    >>> apply_planned_image(np.zeros((4, 6, 3), np.uint8), plan).shape
    (2, 3, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._backend import get_cv2, normalize_interp
from .augmentation import AugInput
from .transform import (
    HFlipTransform,
    NoOpTransform,
    ResizeTransform,
    Transform,
    TransformList,
    VFlipTransform,
)


_FLIPS = (HFlipTransform, VFlipTransform)
_FUSABLE = (HFlipTransform, VFlipTransform, ResizeTransform, NoOpTransform)


def flip_in_place(image: np.ndarray, horizontal: bool) -> bool:
    """Flip a C-contiguous image in place with OpenCV; False when that is not possible.

    Example:
        >>> image = np.arange(6, dtype=np.uint8).reshape(1, 6, 1)
        >>> flip_in_place(image, horizontal=True), image.ravel().tolist()
        (True, [5, 4, 3, 2, 1, 0])
    """
    if not (
        image.flags.c_contiguous
        and image.flags.writeable
        and image.size > 0
        and image.dtype in (np.uint8, np.float32)
        and (image.ndim == 2 or (image.ndim == 3 and image.shape[2] <= 4))
    ):
        return False
    cv2 = get_cv2()
    if cv2 is None:
        return False
    result = cv2.flip(image, 1 if horizontal else 0, dst=image)
    return result is image or np.shares_memory(result, image)


class OwnedImageAugInput(AugInput):
    """An AugInput whose image belongs to the caller alone, so flips may happen in place.

    Flipping a fresh image (or the fresh output of a resize) in place avoids allocating and
    page-faulting another full-size buffer, which costs more than the flip itself. The
    pixels are those ``HFlipTransform.apply_image`` / ``VFlipTransform.apply_image`` give.

    Example:
        >>> aug_input = OwnedImageAugInput(np.arange(6, dtype=np.uint8).reshape(1, 6))
        >>> aug_input.transform(HFlipTransform(6)); aug_input.image.tolist()
        [[5, 4, 3, 2, 1, 0]]
    """

    def transform(self, tfm: Transform) -> None:
        """Apply ``tfm`` like AugInput.transform, flipping the image in place when possible."""
        if isinstance(tfm, TransformList):
            for inner in tfm.transforms:
                self.transform(inner)
            return
        if isinstance(tfm, _FLIPS) and flip_in_place(
            self.image, horizontal=isinstance(tfm, HFlipTransform)
        ):
            if self.boxes is not None:
                self.boxes = tfm.apply_box(self.boxes)
            if self.sem_seg is not None:
                self.sem_seg = tfm.apply_segmentation(self.sem_seg)
            return
        super().transform(tfm)


def _flat(transforms: Transform | Sequence[Transform]) -> list[Transform]:
    if isinstance(transforms, TransformList):
        return list(transforms.transforms)
    if isinstance(transforms, Transform):
        return [transforms]
    return list(TransformList(list(transforms)).transforms)


def reduced_decode_size(transforms: Transform | Sequence[Transform]) -> tuple[int, int] | None:
    """The output size when a plan of flips and one resize shrinks 2x or more on both sides.

    A JPEG can then be decoded at 1/2, 1/4 or 1/8 scale (never below this size) and resized
    from there by :func:`apply_planned_image`. None for any other plan.

    Example:
        >>> reduced_decode_size([ResizeTransform(400, 600, 100, 150), HFlipTransform(150)])
        (100, 150)
    """
    flat = _flat(transforms)
    if any(type(t) not in _FUSABLE for t in flat):
        return None
    resizes = [t for t in flat if type(t) is ResizeTransform]
    if len(resizes) != 1:
        return None
    only = resizes[0]
    if 2 * only.new_h <= only.h and 2 * only.new_w <= only.w:
        return only.new_h, only.new_w
    return None


_BILINEAR_CACHE: dict[tuple[type, Any], bool] = {}


def _is_bilinear(interp: Any) -> bool:
    """``normalize_interp(interp) == "bilinear"``, memoized for hashable values."""
    try:
        key = (type(interp), interp)
        cached = _BILINEAR_CACHE.get(key)
    except TypeError:  # unhashable: not memoized
        return normalize_interp(interp) == "bilinear"
    if cached is None:
        cached = normalize_interp(interp) == "bilinear"
        if len(_BILINEAR_CACHE) < 64:
            _BILINEAR_CACHE[key] = cached
    return cached


def _cv2_ready(image: np.ndarray) -> bool:
    """A C-contiguous uint8 HxWxC image (C <= 4) that cv2.flip / cv2.resize take as is."""
    return (
        image.dtype == np.uint8
        and image.ndim == 3
        and 1 <= image.shape[2] <= 4
        and image.size > 0
        and image.flags.c_contiguous
    )


def apply_planned_image(
    image: np.ndarray, transforms: Transform | Sequence[Transform], *, owned: bool = True
) -> np.ndarray:
    """Apply planned transforms to a decoded image the caller owns.

    For flips, resizes and no-ops: flips first (on the smaller decoded image), then the
    resizes in order. A flip commutes with a bilinear resize (the sampling grid is
    symmetric), so the result equals resize-then-flip up to rounding (at most 1 level on
    about 0.1% of pixels), while the flip moves 2-3x fewer bytes. ``image`` may be smaller
    than the only resize expects (a reduced JPEG decode): it is then resized from its
    decoded size to the planned output size. For a C-contiguous uint8 image with OpenCV
    installed each step is one ``cv2.flip`` / ``cv2.resize`` call (the calls the generic
    ``apply_image`` ends in, so the pixels are identical to it).

    Any other plan runs transform by transform (``apply_image``), flipping in place when
    ``owned``."""
    flat = _flat(transforms)
    if any(type(t) not in _FUSABLE for t in flat):
        if not owned:
            return TransformList(flat).apply_image(image)
        aug_input = OwnedImageAugInput(image)
        aug_input.transform(TransformList(flat))
        return aug_input.image
    horizontal = vertical = False
    resizes: list[ResizeTransform] = []
    for tfm in flat:
        if type(tfm) is HFlipTransform:
            horizontal = not horizontal
        elif type(tfm) is VFlipTransform:
            vertical = not vertical
        elif type(tfm) is ResizeTransform:
            resizes.append(tfm)
    cv2 = get_cv2()
    fast = cv2 is not None and _cv2_ready(image)
    if horizontal or vertical:
        if fast:
            image = cv2.flip(image, -1 if horizontal and vertical else 1 if horizontal else 0)
            if image.ndim == 2:  # cv2 drops a channel axis of size 1
                image = image[:, :, None]
        else:
            # Out of place: views here; the resize (or the tensor) makes them dense.
            if horizontal:
                image = HFlipTransform(image.shape[1]).apply_image(image)
            if vertical:
                image = VFlipTransform(image.shape[0]).apply_image(image)
    if len(resizes) == 1 and image.shape[:2] != (resizes[0].h, resizes[0].w):
        only = resizes[0]  # decoded at reduced scale: one resize to the planned output size
        resizes = [
            ResizeTransform(image.shape[0], image.shape[1], only.new_h, only.new_w, only.interp)
        ]
    for tfm in resizes:
        if not (fast and _is_bilinear(tfm.interp) and image.shape[:2] == (tfm.h, tfm.w)):
            image = tfm.apply_image(image)  # the generic path (and its size check)
            fast = cv2 is not None and _cv2_ready(image)
            continue
        if (tfm.new_h, tfm.new_w) == (tfm.h, tfm.w):
            continue  # resize_array returns the image itself for an unchanged size
        image = cv2.resize(image, (tfm.new_w, tfm.new_h), interpolation=cv2.INTER_LINEAR)
        if image.ndim == 2:
            image = image[:, :, None]
    return image
