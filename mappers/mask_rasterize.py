"""Rasterize segmentations: COCO RLE dicts and polygons to HxW uint8 masks (pycocotools).

RLE masks and polygon rasterization need pycocotools (``pip install 'catmap[coco]'``);
without it a :class:`MissingDependencyError` says so.

Example:
    >>> int(polygons_to_bitmask([[0, 0, 4, 0, 4, 4, 0, 4]], 6, 6).sum())
    16
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from catalog.errors import MissingDependencyError, RecordFormatError, missing_dependency

from ._annotation_fields import polygons_as_arrays as _polygons_as_arrays
from ._annotation_fields import where as _where
from .geometry_checks import check_rle, coordinate_bound

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
    """Decode a COCO RLE dict (compressed or uncompressed counts) to an HxW uint8 mask.

    The dict is checked before pycocotools sees it (see :mod:`mappers.geometry_checks`):
    ``size`` against ``image_size`` (when given) and the pixel limit, the runs adding up to
    height * width.

    Example:
        >>> rle_to_bitmask({"size": [2, 2], "counts": [1, 2, 1]}).tolist()
        [[0, 1], [1, 0]]
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
    """Rasterize polygons (flat ``[x0, y0, ...]`` lists/arrays) into one HxW uint8 mask.

    Uses pycocotools, so masks match COCO's. An empty list gives an all-zero mask. The
    coordinates are checked first: finite and within
    :func:`~mappers.geometry_checks.coordinate_bound` of the image (pycocotools' rasterizer
    crashes the process on huge values).

    Example:
        >>> int(polygons_to_bitmask([[0, 0, 4, 0, 4, 4, 0, 4]], 6, 6).sum())
        16
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
