"""Shared parsing of annotation fields: error locations, boxes and polygons as arrays.

Internal helpers of :mod:`mappers.annotations`, :mod:`mappers.mask_rasterize` and
:mod:`mappers.instances_from_annotations`; each validates input read from a record and names
the annotation in its errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from catalog.box_mode import BoxMode
from catalog.errors import RecordFormatError

from .geometry_checks import check_polygons
from .structure_common import is_flat_polygon

__all__ = ["boxes_xyxy", "polygons_as_arrays", "where"]


def where(context: str | None, annotation: Mapping[str, Any] | None = None) -> str:
    parts = [context] if context else []
    if annotation is not None and isinstance(annotation, Mapping) and "id" in annotation:
        parts.append(f"annotation id {annotation['id']}")
    return ", ".join(parts) if parts else "annotation"


def polygons_as_arrays(
    segm: Sequence[Any], where: str | Callable[[], str], bound: float | None = None
) -> list[np.ndarray]:
    """Validate polygons and return them as flat float64 arrays (``where`` names the source).

    Every coordinate must be finite, and at most ``bound`` in absolute value when given.
    """
    arrays = []
    for j, polygon in enumerate(segm):
        if is_flat_polygon(polygon):
            arrays.append(polygon)  # already transformed / validated
            continue
        try:
            arr = np.asarray(polygon, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} is not a flat list of numbers"
            ) from None
        if arr.size % 2 != 0 or arr.size < 6:
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} has {arr.size} numbers; a polygon "
                "needs an even count of at least 6 (x, y pairs)"
            )
        arrays.append(arr)
    try:
        check_polygons(arrays, "", bound)
    except RecordFormatError as exc:
        label = where() if callable(where) else where
        raise RecordFormatError(f"{label}{exc}") from None
    return arrays


def boxes_xyxy(annotations: Sequence[Mapping[str, Any]], where: Callable[[int], str]) -> np.ndarray:
    """Stack the annotations' boxes as an Nx4 float64 XYXY_ABS array."""
    n = len(annotations)
    try:  # fast path: every box is 4 numbers in XYXY_ABS or XYWH_ABS
        modes = np.fromiter((obj["bbox_mode"] for obj in annotations), dtype=np.int64, count=n)
        if np.all((modes == BoxMode.XYXY_ABS) | (modes == BoxMode.XYWH_ABS)):
            boxes = np.array([obj["bbox"] for obj in annotations], dtype=np.float64)
            if boxes.shape == (n, 4):
                xywh = modes == BoxMode.XYWH_ABS
                boxes[xywh, 2:] += boxes[xywh, :2]
                return boxes
    except (KeyError, TypeError, ValueError):
        pass  # the loop below finds the culprit and names it
    boxes = np.empty((n, 4), dtype=np.float64)
    for i, obj in enumerate(annotations):
        try:
            bbox, mode = obj["bbox"], obj["bbox_mode"]
        except KeyError as exc:
            raise RecordFormatError(f"{where(i)}: missing key {exc.args[0]!r}") from None
        except TypeError:
            raise RecordFormatError(
                f"{where(i)}: an annotation must be a dict, got {type(obj).__name__}"
            ) from None
        try:
            boxes[i] = BoxMode.convert(np.asarray(bbox, dtype=np.float64), mode, BoxMode.XYXY_ABS)
        except (TypeError, ValueError) as exc:
            raise RecordFormatError(
                f"{where(i)}: key 'bbox' {bbox!r} with bbox_mode {mode!r} is not a box of 4 "
                f"numbers ({exc})"
            ) from None
    return boxes
