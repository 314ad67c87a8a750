"""Crops that look at the annotations: RandomCrop_CategoryAreaConstraint (semantic maps) and
MinIoURandomCrop (boxes, the SSD recipe).

Both read their extra input from the :class:`~mappers.transforms.AugInput`: ``sem_seg`` and
``boxes`` (Nx4 XYXY_ABS) respectively.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput
    >>> seg = np.zeros((40, 40), np.int32); seg[:, 20:] = 1
    >>> aug = RandomCrop_CategoryAreaConstraint("absolute", (20, 20), 0.9)
    >>> t = aug(AugInput(np.zeros((40, 40, 3), np.uint8), sem_seg=seg), rng=np.random.default_rng(0))
    >>> type(t).__name__
    'CropTransform'
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from .augmentation import Augmentation
from .augmentations_geometry import RandomCrop
from .transform import CropTransform, NoOpTransform, Transform

__all__ = ["RandomCrop_CategoryAreaConstraint", "MinIoURandomCrop"]

logger = logging.getLogger(__name__)

#: Windows RandomCrop_CategoryAreaConstraint tries before keeping the last one.
CATEGORY_AREA_TRIES = 10


class RandomCrop_CategoryAreaConstraint(Augmentation):  # noqa: N801 (detectron2's name)
    """A RandomCrop whose window no single category dominates in ``sem_seg``.

    Up to 10 windows are drawn as RandomCrop would; the first where at least two categories
    are present (``ignored_category`` not counted) and none covers
    ``single_category_max_area`` of the counted pixels or more is used; otherwise the last
    window drawn. With ``single_category_max_area >= 1`` it is a plain RandomCrop.

    Args:
        crop_type, crop_size: as in :class:`RandomCrop`.
        single_category_max_area: largest allowed share of one category, > 0 (1 or more
            disables the constraint).
        ignored_category: a label not counted (typically the ignore label, e.g. 255).

    Raises:
        ValueError: bad crop arguments or an area <= 0; (when applied) no ``sem_seg``
            or one whose size differs from the image's.

    Example:
        >>> RandomCrop_CategoryAreaConstraint("relative", (0.5, 0.5), 0.75, ignored_category=255)
        RandomCrop_CategoryAreaConstraint(crop_type='relative', crop_size=(0.5, 0.5), single_category_max_area=0.75, ignored_category=255)
    """

    def __init__(
        self,
        crop_type: str,
        crop_size: Sequence[float],
        single_category_max_area: float = 1.0,
        ignored_category: int | None = None,
    ) -> None:
        self.crop_aug = RandomCrop(crop_type, crop_size)
        area = float(single_category_max_area)
        if not (math.isfinite(area) and area > 0.0):
            raise ValueError(
                "RandomCrop_CategoryAreaConstraint: single_category_max_area must be a number "
                f"> 0 (1 or more disables the constraint), got {single_category_max_area!r}"
            )
        self.crop_type = crop_type
        self.crop_size = self.crop_aug.crop_size
        self.single_category_max_area = single_category_max_area
        self.ignored_category = ignored_category

    def _acceptable(self, window: np.ndarray) -> bool:
        labels, counts = np.unique(window, return_counts=True)
        if self.ignored_category is not None:
            counts = counts[labels != self.ignored_category]
        return len(counts) > 1 and counts.max() < counts.sum() * self.single_category_max_area

    def get_transform(self, image: np.ndarray, sem_seg: np.ndarray | None) -> Transform:
        if self.single_category_max_area >= 1.0:
            return self.crop_aug.get_transform(image)
        if sem_seg is None:
            raise ValueError(
                "RandomCrop_CategoryAreaConstraint needs the input's sem_seg (a semantic "
                "segmentation map); this AugInput has none"
            )
        h, w = image.shape[:2]
        if tuple(sem_seg.shape[:2]) != (h, w):
            raise ValueError(
                f"RandomCrop_CategoryAreaConstraint: sem_seg size {sem_seg.shape[:2]} differs "
                f"from the image size {(h, w)}"
            )
        for _ in range(CATEGORY_AREA_TRIES):
            crop_h, crop_w = self.crop_aug.get_crop_size((h, w))
            y0 = int(self.rng.integers(h - crop_h + 1))
            x0 = int(self.rng.integers(w - crop_w + 1))
            if self._acceptable(sem_seg[y0 : y0 + crop_h, x0 : x0 + crop_w]):
                break
        return CropTransform(x0, y0, crop_w, crop_h, orig_w=w, orig_h=h)


def _iou_one_to_many(patch: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one XYXY box with each of N XYXY boxes (0 where the union is empty)."""
    iw = np.clip(np.minimum(patch[2], boxes[:, 2]) - np.maximum(patch[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(patch[3], boxes[:, 3]) - np.maximum(patch[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    area_patch = (patch[2] - patch[0]) * (patch[3] - patch[1])
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(
        boxes[:, 3] - boxes[:, 1], 0, None
    )
    union = area_patch + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


class MinIoURandomCrop(Augmentation):
    """Random crop whose IoU with every box is at least a threshold drawn from ``min_ious``.

    Each of up to ``mode_trials`` rounds draws a mode from ``(1, *min_ious, 0)``: 1 means
    "no crop"; otherwise up to ``crop_trials`` windows are drawn (sides uniform in
    [min_crop_size, 1) of the image's, aspect h/w in [0.5, 2]) and the first whose IoU with
    every box is at least the threshold and that contains at least one box centre is used.
    No boxes in the input (``AugInput.boxes`` None, as in a mapper that passes only the
    image) means no crop, as in detectron2; a warning says so once per augmentation. All
    rounds failing also means no crop.

    Args:
        min_ious: IoU thresholds, each in [0, 1].
        min_crop_size: smallest crop side as a fraction of the image's, in (0, 1].
        mode_trials, crop_trials: the bounds on the rounds and windows drawn.

    Raises:
        ValueError: thresholds outside [0, 1], min_crop_size outside (0, 1], trials < 1.

    Example:
        >>> MinIoURandomCrop(min_ious=(0.5,), min_crop_size=0.5)
        MinIoURandomCrop(min_ious=(0.5,), min_crop_size=0.5)
    """

    def __init__(
        self,
        min_ious: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
        min_crop_size: float = 0.3,
        mode_trials: int = 1000,
        crop_trials: int = 50,
    ) -> None:
        ious = tuple(float(v) for v in min_ious)
        if not all(0.0 <= v <= 1.0 for v in ious):
            raise ValueError(f"MinIoURandomCrop: min_ious must lie in [0, 1], got {min_ious!r}")
        if not 0.0 < float(min_crop_size) <= 1.0:
            raise ValueError(
                f"MinIoURandomCrop: min_crop_size must be in (0, 1], got {min_crop_size!r}"
            )
        for name, value in (("mode_trials", mode_trials), ("crop_trials", crop_trials)):
            if int(value) != value or value < 1:
                raise ValueError(f"MinIoURandomCrop: {name} must be an integer >= 1, got {value!r}")
        self.min_ious = tuple(min_ious)
        self.sample_mode = (1.0, *ious, 0.0)
        self.min_crop_size = float(min_crop_size)
        self.mode_trials = int(mode_trials)
        self.crop_trials = int(crop_trials)
        self._warned_no_boxes = False

    def _try_crop(self, h: int, w: int, boxes: np.ndarray, min_iou: float) -> Transform | None:
        rng = self.rng
        for _ in range(self.crop_trials):
            new_w = rng.uniform(self.min_crop_size * w, w)
            new_h = rng.uniform(self.min_crop_size * h, h)
            if not 0.5 <= new_h / new_w <= 2.0:
                continue
            left = rng.uniform(0.0, w - new_w)
            top = rng.uniform(0.0, h - new_h)
            patch = np.array([int(left), int(top), int(left + new_w), int(top + new_h)], float)
            if patch[2] == patch[0] or patch[3] == patch[1] or int(new_w) < 1 or int(new_h) < 1:
                continue
            if len(boxes):
                if _iou_one_to_many(patch, boxes).min() < min_iou:
                    continue
                centers = (boxes[:, :2] + boxes[:, 2:]) / 2
                inside = (
                    (centers[:, 0] > patch[0])
                    & (centers[:, 1] > patch[1])
                    & (centers[:, 0] < patch[2])
                    & (centers[:, 1] < patch[3])
                )
                if not inside.any():
                    continue
            return CropTransform(int(left), int(top), int(new_w), int(new_h), orig_w=w, orig_h=h)
        return None

    def get_transform(self, image: np.ndarray, boxes: np.ndarray | None) -> Transform:
        if boxes is None:
            if not self._warned_no_boxes:
                self._warned_no_boxes = True
                logger.warning(
                    "MinIoURandomCrop: the input has no boxes (AugInput.boxes is None), so it "
                    "never crops; pass boxes=... to AugInput to use it"
                )
            return NoOpTransform()
        arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        h, w = image.shape[:2]
        for _ in range(self.mode_trials):
            mode = self.sample_mode[int(self.rng.integers(len(self.sample_mode)))]
            if mode == 1.0:
                return NoOpTransform()
            tfm = self._try_crop(h, w, arr, mode)
            if tfm is not None:
                return tfm
        return NoOpTransform()
