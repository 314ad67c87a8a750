"""Mapped samples as the inputs of torchvision's detection models.

``label_offset`` has no default: pass 1 for a model with a background class (Faster / Mask /
Keypoint R-CNN, SSD), 0 otherwise (RetinaNet, FCOS); forgetting it would silently train the
first class as background.

Example:
    >>> from mappers import Instances
    >>> sample = {"image": torch.zeros(3, 4, 6, dtype=torch.uint8),
    ...           "instances": Instances((4, 6), gt_boxes=torch.tensor([[0., 0., 2., 3.]]),
    ...                                  gt_classes=torch.tensor([0]))}
    >>> image, target = to_torchvision_detection(sample, label_offset=1)
    >>> image.dtype, target["boxes"].dtype, target["labels"].tolist()
    (torch.float32, torch.float32, [1])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog._common import CatmapError, is_int

from .geometry_checks import check_mask_budget, polygons_to_bitmask

__all__ = ["TorchvisionTargetError", "to_torchvision_batch", "to_torchvision_detection"]

logger = logging.getLogger(__name__)


class TorchvisionTargetError(CatmapError, ValueError):
    """A mapped sample cannot become a torchvision target; names the ``image`` (file_name or
    image_id) and the field ``key``."""

    def __init__(self, message: str, *, image: Any = None, key: str | None = None) -> None:
        super().__init__(message)
        self.image = image
        self.key = key


def _describe(sample: Mapping[str, Any]) -> Any:
    for key in ("file_name", "image_id"):
        if key in sample:
            return sample[key]
    return None


def _fail(sample: Mapping[str, Any], key: str, problem: str) -> TorchvisionTargetError:
    image = _describe(sample)
    where = f"image {image!r}" if image is not None else "a sample without file_name/image_id"
    return TorchvisionTargetError(
        f"to_torchvision_detection: {where}, key {key!r}: {problem}", image=image, key=key
    )


def _check_offset(label_offset: Any) -> int:
    if not is_int(label_offset):
        raise TypeError(
            "to_torchvision_detection: label_offset must be an int (1 for models with a "
            f"background class at 0, 0 otherwise), got {type(label_offset).__name__}"
        )
    if label_offset < 0:
        raise ValueError(f"to_torchvision_detection: label_offset must be >= 0, got {label_offset}")
    return int(label_offset)


def _image(sample: Mapping[str, Any]) -> torch.Tensor:
    if "image" not in sample:
        raise _fail(sample, "image", "the sample has no image (map it with a DatasetMapper)")
    image = sample["image"]
    if isinstance(image, np.ndarray):
        image = torch.from_numpy(np.ascontiguousarray(image))
    if not isinstance(image, torch.Tensor) or image.dim() != 3:
        shape = tuple(image.shape) if hasattr(image, "shape") else type(image).__name__
        raise _fail(sample, "image", f"expected a CxHxW tensor, got {shape}")
    if image.dtype == torch.uint8:
        return image.to(torch.float32).div_(255.0)
    if image.is_floating_point():
        return image.to(torch.float32)
    raise _fail(sample, "image", f"expected uint8 (0..255) or a float tensor, got {image.dtype}")


def _tensor_of(value: Any) -> Any:  # the tensor under Boxes, BitMasks, Keypoints
    inner = getattr(value, "tensor", None)
    return inner if isinstance(inner, torch.Tensor) else value


def _boxes(sample: Mapping[str, Any], instances: Any) -> torch.Tensor:
    boxes = torch.as_tensor(_tensor_of(instances.gt_boxes))
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise _fail(sample, "gt_boxes", f"expected an Nx4 XYXY tensor, got {tuple(boxes.shape)}")
    boxes = boxes.to(torch.float32)
    if not bool(torch.isfinite(boxes).all()):
        raise _fail(sample, "gt_boxes", "boxes hold non-finite coordinates")
    return boxes


def _polygon_masks(sample: Mapping[str, Any], polygons: Sequence[Any], height: int,
                   width: int) -> torch.Tensor:
    name = _describe(sample)
    check_mask_budget([{"segmentation": p} for p in polygons], height, width, f"image {name!r}")
    masks = np.zeros((len(polygons), height, width), dtype=np.uint8)
    for i, polys in enumerate(polygons):
        masks[i] = polygons_to_bitmask(
            [np.asarray(p, dtype=np.float64).reshape(-1) for p in polys], height, width,
            context=f"image {name!r}, instance {i}",
        )
    return torch.from_numpy(masks)


def _masks(sample: Mapping[str, Any], instances: Any, n: int, height: int,
           width: int) -> torch.Tensor:
    masks = instances.gt_masks
    polygons = getattr(masks, "polygons", None)  # PolygonMasks
    if polygons is not None:
        masks = polygons
    masks = _tensor_of(masks)  # BitMasks
    if isinstance(masks, np.ndarray):
        masks = torch.from_numpy(masks)
    if isinstance(masks, torch.Tensor):
        if masks.dim() != 3 or tuple(masks.shape[1:]) != (height, width):
            raise _fail(
                sample, "gt_masks",
                f"expected {n}x{height}x{width} masks, got {tuple(masks.shape)}",
            )
        masks = (masks != 0).to(torch.uint8)
    elif isinstance(masks, Sequence):
        masks = _polygon_masks(sample, masks, height, width)
    else:
        raise _fail(
            sample, "gt_masks",
            f"expected a mask tensor, BitMasks, PolygonMasks or per-instance polygon lists, got "
            f"{type(masks).__name__}",
        )
    if masks.shape[0] != n:
        raise _fail(sample, "gt_masks", f"{masks.shape[0]} masks for {n} boxes")
    return masks


def _keypoints(sample: Mapping[str, Any], instances: Any, n: int) -> torch.Tensor:
    keypoints = torch.as_tensor(_tensor_of(instances.gt_keypoints)).to(torch.float32)
    if keypoints.dim() != 3 or keypoints.shape[2] != 3 or keypoints.shape[0] != n:
        raise _fail(
            sample, "gt_keypoints",
            f"expected {n}xKx3 keypoints (x, y, visibility), got {tuple(keypoints.shape)}",
        )
    return keypoints


def to_torchvision_detection(
    sample: Mapping[str, Any],
    *,
    label_offset: int,
    drop_degenerate: bool = True,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One mapped sample as ``(image, target)`` for a torchvision detection model.

    A uint8 image is scaled to [0, 1]; ``label_offset`` is added to ``gt_classes``;
    ``drop_degenerate`` drops boxes without width or height (torchvision rejects them).
    """
    offset = _check_offset(label_offset)
    if not isinstance(sample, Mapping):
        raise TypeError(
            f"to_torchvision_detection: a sample is a dict, got {type(sample).__name__}"
        )
    image = _image(sample)
    height, width = int(image.shape[1]), int(image.shape[2])
    instances = sample.get("instances")
    target: dict[str, torch.Tensor]
    if instances is None:
        target = {
            "boxes": torch.zeros((0, 4), dtype=torch.float32),
            "labels": torch.zeros((0,), dtype=torch.int64),
        }
    else:
        target = _target(sample, instances, offset, height, width, drop_degenerate)
    if device is not None:
        image = image.to(device)
        target = {key: value.to(device) for key, value in target.items()}
    return image, target


def _target(sample: Mapping[str, Any], instances: Any, offset: int, height: int, width: int,
            drop_degenerate: bool) -> dict[str, torch.Tensor]:
    for key in ("gt_boxes", "gt_classes"):
        if not instances.has(key):
            raise _fail(sample, key, "the instances have no such field")
    boxes = _boxes(sample, instances)
    n = boxes.shape[0]
    labels = torch.as_tensor(_tensor_of(instances.gt_classes))
    if labels.dim() != 1 or labels.shape[0] != n or labels.is_floating_point():
        raise _fail(
            sample, "gt_classes",
            f"expected {n} integer class ids, got {labels.dtype} {tuple(labels.shape)}",
        )
    labels = labels.to(torch.int64)
    if n and int(labels.min()) < 0:
        raise _fail(sample, "gt_classes", f"negative class id {int(labels.min())}")
    target = {"boxes": boxes, "labels": labels + offset}
    if instances.has("gt_masks"):
        target["masks"] = _masks(sample, instances, n, height, width)
    if instances.has("gt_keypoints"):
        target["keypoints"] = _keypoints(sample, instances, n)
    if drop_degenerate and n:
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        if not bool(keep.all()):
            logger.debug(
                "to_torchvision_detection: image %r: dropped %d degenerate boxes",
                _describe(sample), int((~keep).sum()),
            )
            target = {key: value[keep] for key, value in target.items()}
    return target


def to_torchvision_batch(
    batch: Sequence[Mapping[str, Any]],
    *,
    label_offset: int,
    drop_degenerate: bool = True,
    device: torch.device | str | None = None,
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """A batch of mapped samples as ``(images, targets)`` for ``model(images, targets)``;
    arguments as :func:`to_torchvision_detection`.

    Example:
        >>> images, targets = to_torchvision_batch(
        ...     [{"image": torch.zeros(3, 2, 2, dtype=torch.uint8)}], label_offset=1)
        >>> len(images), sorted(targets[0])
        (1, ['boxes', 'labels'])
    """
    offset = _check_offset(label_offset)
    pairs = [
        to_torchvision_detection(s, label_offset=offset, drop_degenerate=drop_degenerate,
                                 device=device)
        for s in batch
    ]
    return [image for image, _ in pairs], [target for _, target in pairs]
