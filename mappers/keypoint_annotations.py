"""Keypoint annotations: flat ``[x, y, v] * K`` lists moved with the image's transforms
(hidden outside it, left and right swapped after a horizontal flip), and the flip indices
built from a dataset's ``keypoint_names`` / ``keypoint_flip_map`` metadata.

Example:
    >>> from mappers.transforms import HFlipTransform
    >>> transform_keypoint_annotations([1, 2, 2, 9, 9, 2], [HFlipTransform(8)], (8, 8),
    ...                                np.array([1, 0])).tolist()
    [[0.0, 0.0, 0.0], [7.0, 2.0, 2.0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from catalog._common import RecordFormatError
from catalog.metadata import MetadataCatalog

from .errors import KeypointFlipError
from .geometry_checks import check_keypoints
from .transforms.transform import HFlipTransform, Transform, TransformList, as_transform_list

__all__ = [
    "create_keypoint_hflip_indices", "finish_keypoints", "keypoints_as_array", "odd_hflips",
    "transform_keypoint_annotations"
]


def keypoints_as_array(keypoints: Any, where: str) -> np.ndarray:
    """Flat ``[x, y, v] * K`` keypoints as a checked float64 Kx3 array (RecordFormatError)."""
    try:
        arr = np.array(keypoints, dtype=np.float64)
    except (TypeError, ValueError):
        raise RecordFormatError(f"{where}: key 'keypoints' is not a list of numbers") from None
    if arr.size % 3 != 0:
        raise RecordFormatError(
            f"{where}: key 'keypoints' has {arr.size} numbers, not a multiple of 3 (x, y, v)"
        )
    check_keypoints(arr, where)
    return arr.reshape(-1, 3)


def odd_hflips(transforms: TransformList) -> bool:
    """Whether ``transforms`` flip horizontally an odd number of times (left/right swap)."""
    return sum(isinstance(t, HFlipTransform) for t in transforms.transforms) % 2 == 1


def finish_keypoints(
    kps: np.ndarray,
    image_size: tuple[int, int],
    flip_indices: np.ndarray | None,
    flipped: bool,
    where: str,
) -> np.ndarray:
    """Hide points outside the image, swap left/right after a flip, zero hidden points."""
    h, w = image_size
    inside = (kps[:, 0] >= 0) & (kps[:, 0] <= w) & (kps[:, 1] >= 0) & (kps[:, 1] <= h)
    kps[~inside, 2] = 0
    if flipped:
        if flip_indices is None:
            raise KeypointFlipError(
                f"{where}: the keypoints were flipped horizontally, so keypoint_hflip_indices "
                "is needed to swap left and right (build it with "
                "create_keypoint_hflip_indices(dataset_names) from metadata 'keypoint_flip_map')"
            )
        if flip_indices.ndim != 1 or len(flip_indices) != len(kps):
            raise KeypointFlipError(
                f"{where}: keypoint_hflip_indices has {flip_indices.size} entries but the "
                f"annotation has {len(kps)} keypoints"
            )
        kps = kps[flip_indices]
    kps[kps[:, 2] == 0] = 0
    return kps


def transform_keypoint_annotations(
    keypoints: Any,
    transforms: Transform | Sequence[Transform],
    image_size: tuple[int, int],
    keypoint_hflip_indices: np.ndarray | None = None,
    *,
    context: str | None = None,
) -> np.ndarray:
    """Transform flat ``[x, y, v] * K`` keypoints into a float64 Kx3 array.

    Points outside the image get ``v = 0``; an odd number of horizontal flips swaps left and
    right with ``keypoint_hflip_indices``; points with ``v == 0`` become (0, 0, 0).

    Example:
        >>> transform_keypoint_annotations([1, 2, 2, 9, 9, 2], [HFlipTransform(8)], (8, 8),
        ...                                np.array([1, 0])).tolist()
        [[0.0, 0.0, 0.0], [7.0, 2.0, 2.0]]
    """
    transforms = as_transform_list(transforms)
    where = context or "annotation"
    kps = keypoints_as_array(keypoints, where)
    kps[:, :2] = transforms.apply_coords(kps[:, :2])
    indices = None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
    return finish_keypoints(kps, image_size, indices, odd_hflips(transforms), where)


def create_keypoint_hflip_indices(dataset_names_or_metadata: Any) -> np.ndarray:
    """Indices that swap left/right keypoints (``flipped = keypoints[indices]``), from the
    ``keypoint_names`` and ``keypoint_flip_map`` of dataset names or metadata (all alike).

    Example:
        >>> meta = {"keypoint_names": ["a_left", "a_right"],
        ...         "keypoint_flip_map": [("a_left", "a_right")]}
        >>> create_keypoint_hflip_indices(meta).tolist()
        [1, 0]
    """
    items = dataset_names_or_metadata
    if isinstance(items, (str, Mapping)) or not isinstance(items, (list, tuple)):
        items = [items]
    if len(items) == 0:
        raise KeypointFlipError("create_keypoint_hflip_indices: no dataset given")
    result: np.ndarray | None = None
    first_label = ""
    for item in items:
        label, names, flip_map = _keypoint_metadata(item)
        indices = _flip_indices(label, names, flip_map)
        if result is None:
            result, first_label = indices, label
        elif not np.array_equal(result, indices):
            raise KeypointFlipError(
                f"datasets {first_label} and {label} have different keypoint_names / "
                "keypoint_flip_map; they cannot share keypoint flip indices"
            )
    return result  # type: ignore[return-value]


def _keypoint_metadata(item: Any) -> tuple[str, Any, Any]:
    if isinstance(item, str):
        meta: Any = MetadataCatalog.get(item)
        label = repr(item)
    else:
        meta = item
        name = meta.get("name", None) if hasattr(meta, "get") else None
        label = repr(name) if name else f"<{type(item).__name__}>"
    if not hasattr(meta, "get"):
        raise KeypointFlipError(
            "create_keypoint_hflip_indices: expected a dataset name or metadata, got "
            f"{type(item).__name__}"
        )
    names = meta.get("keypoint_names", None)
    flip_map = meta.get("keypoint_flip_map", None)
    for key, value in (("keypoint_names", names), ("keypoint_flip_map", flip_map)):
        if value is None:
            raise KeypointFlipError(f"metadata of dataset {label} has no key {key!r}")
    return label, names, flip_map


def _flip_indices(label: str, names: Sequence[str], flip_map: Any) -> np.ndarray:
    names = list(names)
    pairs = list(flip_map.items()) if isinstance(flip_map, Mapping) else list(flip_map)
    swap: dict[str, str] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise KeypointFlipError(
                f"metadata of dataset {label}: key 'keypoint_flip_map' entry {pair!r} is not a pair"
            )
        a, b = pair
        for n in (a, b):
            if n not in names:
                raise KeypointFlipError(
                    f"metadata of dataset {label}: key 'keypoint_flip_map' names {n!r}, which is "
                    f"not in keypoint_names {names}"
                )
        swap[a], swap[b] = b, a
    position = {n: i for i, n in enumerate(names)}
    return np.array([position[swap.get(n, n)] for n in names], dtype=np.int64)
