"""COCO RLE dicts and polygons to HxW uint8 masks with pycocotools (``catmap[coco]``).

Example:
    >>> int(polygons_to_bitmask([[0, 0, 4, 0, 4, 4, 0, 4]], 6, 6).sum())
    16
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from catalog.errors import MissingDependencyError, RecordFormatError, missing_dependency

from .geometry_checks import check_rle, coordinate_bound
from .geometry_checks import polygons_as_arrays as _polygons_as_arrays
from .geometry_checks import where as _where

__all__ = ["MissingDependencyError", "polygons_to_bitmask", "rle_to_bitmask"]


def _mask_utils(purpose: str) -> Any:
    try:
        from pycocotools import mask as mask_utils
    except ImportError:
        raise missing_dependency("pycocotools", "coco", purpose) from None
    return mask_utils


def rle_to_bitmask(
    rle: Mapping[str, Any],
    *,
    context: str | None = None,
    image_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Decode a COCO RLE dict to an HxW uint8 mask, checked first (size against
    ``image_size`` and the pixel limit, runs adding up).
    """
    mask_utils = _mask_utils("decoding an RLE segmentation")
    where = _where(context, rle)
    height, width, counts = check_rle(rle, where, image_size)
    try:
        if isinstance(counts, list):
            encoded = mask_utils.frPyObjects(
                {"size": [height, width], "counts": counts}, height, width
            )
        else:
            encoded = {"size": [height, width], "counts": counts}
        mask = mask_utils.decode(encoded)
    except (TypeError, ValueError) as exc:
        raise RecordFormatError(f"{where}: cannot decode RLE segmentation ({exc})") from exc
    return np.ascontiguousarray(mask, dtype=np.uint8)


def polygons_to_bitmask(
    polygons: Sequence[Any], height: int, width: int, *, context: str | None = None
) -> np.ndarray:
    """Rasterize flat polygons into one HxW uint8 mask (COCO's rasterizer), coordinates
    checked first: pycocotools crashes the process on huge values.
    """
    height, width = int(height), int(width)
    if height <= 0 or width <= 0:
        raise ValueError(
            f"polygons_to_bitmask: the mask size must be positive, got {height}x{width}"
        )
    if len(polygons) == 0:
        return np.zeros((height, width), dtype=np.uint8)
    mask_utils = _mask_utils("rasterizing polygons into a bitmask")
    arrays = _polygons_as_arrays(
        polygons, context or "polygons_to_bitmask", bound=coordinate_bound(height, width)
    )
    rles = mask_utils.frPyObjects([p.tolist() for p in arrays], height, width)
    return np.ascontiguousarray(mask_utils.decode(mask_utils.merge(rles)), dtype=np.uint8)
