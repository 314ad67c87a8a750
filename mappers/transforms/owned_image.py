"""Apply transforms to an image the caller owns (freshly decoded), as fast as possible:
:func:`apply_planned_image` for transforms planned before decoding, :class:`OwnedImageAugInput`
to flip in place. Pixels equal ``TransformList.apply_image`` (up to rounding where noted).
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
    """Flip a C-contiguous image in place with OpenCV; False when that is not possible."""
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
    """An AugInput whose image belongs to the caller, so flips happen in place (no second
    full-size buffer to allocate and page-fault).
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
    """The output size when a plan of flips and one resize shrinks 2x or more on both sides
    (a JPEG can then be decoded at reduced scale); None for any other plan."""
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

    Flips run before the resizes (equal up to rounding, 2-3x fewer bytes moved); an image
    smaller than the resize expects (reduced JPEG decode) is resized from its own size.
    """
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
