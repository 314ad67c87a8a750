"""Precomputed proposals of a record as ``Instances`` (detectron2's ``LOAD_PROPOSALS``).

A record may carry ``proposal_boxes`` (Nx4), ``proposal_objectness_logits`` (N) and
``proposal_bbox_mode`` (a :class:`~catalog.box_mode.BoxMode`), as detectron2's
``load_proposals_into_dataset`` leaves them. They are moved with the image's transforms,
clipped, filtered and cut to the top k.

Example:
    >>> from mappers import transforms as T
    >>> rec = {"proposal_boxes": [[0, 0, 4, 4], [1, 1, 1, 1]],
    ...        "proposal_objectness_logits": [0.9, 0.5], "proposal_bbox_mode": 0}
    >>> p = proposals_to_instances(rec, T.HFlipTransform(10), (10, 10), topk=5)
    >>> p.proposal_boxes.tensor.tolist(), len(p)
    ([[6.0, 0.0, 10.0, 4.0]], 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from catalog.box_mode import BoxMode
from catalog.errors import RecordFormatError

from . import transforms as T
from .instances import Instances
from .image_io import record_name
from .structures import Boxes

__all__ = ["proposals_to_instances"]


def proposals_to_instances(
    record: dict[str, Any],
    transforms: T.Transform,
    image_size: tuple[int, int],
    topk: int,
    min_box_size: float = 0.0,
) -> Instances:
    """Pop the record's proposal keys and return them as Instances of the output image.

    Fields: ``proposal_boxes`` (:class:`~mappers.structures.Boxes`, XYXY_ABS, clipped) and
    ``objectness_logits`` (float32), empty boxes (a side at most ``min_box_size``) dropped,
    the first ``topk`` kept.

    Raises:
        RecordFormatError: the keys are malformed (names the record and the key).
    """
    name = record_name(record)
    try:
        boxes = np.asarray(record.pop("proposal_boxes"), dtype=np.float64).reshape(-1, 4)
        logits = np.asarray(record.pop("proposal_objectness_logits"), dtype=np.float32)
        mode = BoxMode(record.pop("proposal_bbox_mode", BoxMode.XYXY_ABS))
    except KeyError as exc:
        raise RecordFormatError(f"record ({name}): missing proposal key {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RecordFormatError(f"record ({name}): malformed proposals ({exc})") from None
    logits = logits.reshape(-1)
    if len(logits) != len(boxes):
        raise RecordFormatError(
            f"record ({name}): {len(boxes)} 'proposal_boxes' but "
            f"{len(logits)} 'proposal_objectness_logits'"
        )
    if mode != BoxMode.XYXY_ABS:
        boxes = np.asarray(BoxMode.convert(boxes, mode, BoxMode.XYXY_ABS), dtype=np.float64)
    height, width = int(image_size[0]), int(image_size[1])
    if len(boxes):
        boxes = np.asarray(transforms.apply_box(boxes), dtype=np.float64)
        boxes = np.minimum(np.maximum(boxes, 0.0), (width, height, width, height))
    boxes32 = boxes.astype(np.float32)
    keep = ((boxes32[:, 2] - boxes32[:, 0]) > min_box_size) & (
        (boxes32[:, 3] - boxes32[:, 1]) > min_box_size
    )
    proposals = Instances((height, width))
    proposals.proposal_boxes = Boxes(torch.from_numpy(boxes32[keep][:topk].copy()))
    proposals.objectness_logits = torch.from_numpy(logits[keep][:topk].copy())
    return proposals
