"""Typed errors of the dataset-format loaders and converters (semantic segmentation, COCO
panoptic, Cityscapes, COCO export and the COCO evaluation bridge).

Every class takes a single positional message (torch re-raises worker errors as ``cls(msg)``)
and extra fields as keyword arguments with defaults; all pickle whole (see
:class:`~catalog.errors.CatmapError`).
"""

from __future__ import annotations

from typing import Any

from .errors import AnnotationFormatError, CatmapErrorWithFields

__all__ = [
    "SemSegPairingError",
    "PanopticFormatError",
    "CityscapesFormatError",
    "CocoExportError",
    "CocoEvaluationError",
]


class SemSegPairingError(CatmapErrorWithFields, ValueError):
    """Images and label maps of a semantic-segmentation dataset cannot be paired.

    Attributes:
        gt_root: the label-map directory.
        image_root: the image directory.
        unpaired: up to a few of the files that have no partner (paths).

    Example:
        >>> SemSegPairingError("no pairs", gt_root="gt", unpaired=["gt/a.png"]).unpaired
        ['gt/a.png']
    """

    field_names = ("gt_root", "image_root", "unpaired")

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.unpaired = list(self.unpaired or [])


class PanopticFormatError(AnnotationFormatError, CatmapErrorWithFields):
    """A COCO panoptic file (or the metadata it is read with) is malformed.

    Attributes:
        path: the panoptic json file.
        image_id: the image id of the annotation involved, when known.
        segment_id: the segment id involved, when known.
        key: the key whose value is wrong.

    Example:
        >>> err = PanopticFormatError("bad", path="p.json", image_id=3, segment_id=7, key="id")
        >>> (err.image_id, err.segment_id, err.key)
        (3, 7, 'id')
    """

    field_names = ("path", "image_id", "segment_id", "key")


class CityscapesFormatError(AnnotationFormatError, CatmapErrorWithFields):
    """A Cityscapes file is missing or malformed.

    Attributes:
        path: the file involved.
        index: the index in the file's ``objects`` list, when known.
        key: the key whose value is wrong.

    Example:
        >>> CityscapesFormatError("bad label", path="a.json", index=2, key="label").index
        2
    """

    field_names = ("path", "index", "key")


class CocoExportError(CatmapErrorWithFields, ValueError):
    """A dataset's records cannot be written as a COCO file.

    Attributes:
        dataset: the dataset name.
        index: the record index, when known.
        key: the key whose value is wrong.

    Example:
        >>> CocoExportError("no width", dataset="toy", index=0, key="width").key
        'width'
    """

    field_names = ("dataset", "index", "key")


class CocoEvaluationError(CatmapErrorWithFields, ValueError):
    """Predictions or results cannot be evaluated against a dataset (wrong shape, unknown
    class or image, keypoint count that differs from the ground truth's).

    Attributes:
        dataset: the dataset name, when known.
        image_id: the image id involved, when known.
        key: the field involved.

    Example:
        >>> CocoEvaluationError("bad", image_id=4, key="scores").image_id
        4
    """

    field_names = ("dataset", "image_id", "key")
