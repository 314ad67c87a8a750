"""detectron2-compatible structures: boxes, masks, keypoints, image batches, instances.

Names and semantics follow ``detectron2.structures``; ``BoxMode`` is re-exported from
:mod:`catalog` and ``Instances`` from :mod:`mappers.instances`.

Example:
    >>> from mappers.structures import Boxes, pairwise_iou
    >>> pairwise_iou(Boxes([[0, 0, 2, 2]]), Boxes([[1, 0, 3, 2]])).tolist()
    [[0.3333333432674408]]
"""

from catalog.box_mode import BoxMode, BoxModeError

from ..errors import StructureIndexError, StructureShapeError
from ..instances import Instances
from .boxes import (
    Boxes,
    RotatedBoxes,
    matched_pairwise_iou,
    pairwise_intersection,
    pairwise_ioa,
    pairwise_iou,
    pairwise_iou_rotated,
)
from .image_list import ImageList
from .keypoints import Keypoints, keypoints_to_heatmap
from .masks import BitMasks, PolygonMasks, ROIMasks, paste_masks_in_image

#: Structures whose state (tensors, sizes, polygon arrays) the batch transport may carry
#: field by field and rebuild without calling their constructors.
TRANSPORTABLE_STRUCTURES: tuple[type, ...] = (
    Boxes,
    RotatedBoxes,
    BitMasks,
    PolygonMasks,
    ROIMasks,
    Keypoints,
    ImageList,
)

__all__ = [
    "BitMasks",
    "BoxMode",
    "BoxModeError",
    "Boxes",
    "ImageList",
    "Instances",
    "Keypoints",
    "PolygonMasks",
    "ROIMasks",
    "RotatedBoxes",
    "StructureIndexError",
    "StructureShapeError",
    "TRANSPORTABLE_STRUCTURES",
    "keypoints_to_heatmap",
    "matched_pairwise_iou",
    "pairwise_intersection",
    "pairwise_ioa",
    "pairwise_iou",
    "pairwise_iou_rotated",
    "paste_masks_in_image",
]
