"""An instance mask from RLE is never part of the padding that FixedSizeCrop (or any pad with a
semantic "ignore" value) adds around the image."""

from __future__ import annotations

import numpy as np
import pytest

from catalog.box_mode import BoxMode
from mappers import Compose
from mappers import transforms as T

mask_utils = pytest.importorskip("pycocotools.mask")


def _record(mask: np.ndarray) -> dict:
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode()
    return {"image": np.zeros((*mask.shape, 3), np.uint8), "height": mask.shape[0],
            "width": mask.shape[1], "image_id": 1,
            "annotations": [{"bbox": [5, 5, 5, 5], "bbox_mode": BoxMode.XYWH_ABS,
                             "category_id": 0, "segmentation": rle}]}


def test_fixed_size_crop_pads_instance_masks_with_background():
    mask = np.zeros((20, 30), bool)
    mask[5:10, 5:10] = True
    pipeline = Compose([
        {"type": "ApplyAugmentations",
         "augmentations": [{"type": "FixedSizeCrop", "crop_size": (32, 32), "seg_pad_value": 255}]},
        {"type": "AnnotationsToInstances", "use_instance_mask": True,
         "instance_mask_format": "bitmask"},
    ])
    out = pipeline(_record(mask))
    masks = out["instances"].gt_masks.tensor
    assert masks.shape[-2:] == (32, 32) and int(masks.sum()) == 25


def test_pad_fills_a_bool_mask_with_false_and_a_label_map_with_the_pad_value():
    pad = T.PadTransform(0, 0, 4, 4, seg_pad_value=255)
    assert not pad.apply_segmentation(np.zeros((2, 2), bool)).any()
    labels = pad.apply_segmentation(np.zeros((2, 2), np.uint8))
    assert labels.dtype == np.uint8 and int(labels.max()) == 255
