"""The demo's resume check: whether two batches hold identical mapped samples.

A restored loader must continue with the records the original would have produced next, with
identical augmented image tensors, boxes, classes and masks (see :mod:`tools.demo`, step 4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .demo_stats import to_numpy

__all__ = ["batch_signature", "samples_equal"]


def batch_signature(batch: list[dict]) -> list[tuple]:
    """The (image id, file name) of each sample: which records a batch holds, in order.

    Example:
        >>> batch_signature([{"image_id": 3, "file_name": "a.jpg", "image": None}])
        [(3, 'a.jpg')]
    """
    return [(s.get("image_id"), s.get("file_name")) for s in batch]


def _same_masks(a: Any, b: Any) -> bool:
    """Per-instance polygon lists (or bitmask arrays) equal."""
    a = getattr(a, "polygons", getattr(a, "tensor", a))  # PolygonMasks / BitMasks
    b = getattr(b, "polygons", getattr(b, "tensor", b))
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return np.array_equal(to_numpy(a), to_numpy(b))
    a, b = list(a), list(b)
    if len(a) != len(b):
        return False
    for polys_a, polys_b in zip(a, b, strict=True):
        if len(polys_a) != len(polys_b):
            return False
        for p, q in zip(polys_a, polys_b, strict=True):
            if not np.array_equal(to_numpy(p), to_numpy(q)):
                return False
    return True


def samples_equal(a: list[dict], b: list[dict]) -> bool:
    """The mapped samples are identical: image tensors, boxes, classes and masks.

    Example:
        >>> import torch
        >>> a = [{"image": torch.zeros(3, 2, 2)}]
        >>> samples_equal(a, [{"image": torch.zeros(3, 2, 2)}]), samples_equal(a, [])
        (True, False)
    """
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x["image"].shape != y["image"].shape or not torch.equal(x["image"], y["image"]):
            return False
        ix, iy = x.get("instances"), y.get("instances")
        if (ix is None) != (iy is None):
            return False
        if ix is None:
            continue
        if not np.array_equal(to_numpy(_box_tensor(ix)), to_numpy(_box_tensor(iy))):
            return False
        if not np.array_equal(to_numpy(ix.gt_classes), to_numpy(iy.gt_classes)):
            return False
        if ix.has("gt_masks") != iy.has("gt_masks"):
            return False
        if ix.has("gt_masks") and not _same_masks(ix.gt_masks, iy.gt_masks):
            return False
    return True


def _box_tensor(instances: Any) -> Any:
    boxes = instances.gt_boxes
    return getattr(boxes, "tensor", boxes)
