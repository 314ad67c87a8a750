"""Keypoint horizontal-flip indices from dataset metadata (``keypoint_flip_map``).

Example:
    >>> meta = {"keypoint_names": ["a_left", "a_right"],
    ...         "keypoint_flip_map": [("a_left", "a_right")]}
    >>> create_keypoint_hflip_indices(meta).tolist()
    [1, 0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from catalog.errors import CatmapError
from catalog.metadata import MetadataCatalog

__all__ = ["KeypointFlipError", "create_keypoint_hflip_indices"]


class KeypointFlipError(CatmapError, ValueError):
    """Keypoint flip indices are missing, malformed, or cannot be built from the metadata."""


def create_keypoint_hflip_indices(dataset_names_or_metadata: Any) -> np.ndarray:
    """Indices that swap left/right keypoints (``flipped = keypoints[indices]``), from the
    ``keypoint_names`` and ``keypoint_flip_map`` of dataset names or metadata (all alike).
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
