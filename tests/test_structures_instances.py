"""Instances holding the structures; annotations_to_instances output; the batch transport."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from catalog import BoxMode
from mappers import Instances, annotations_to_instances, filter_empty_instances
from mappers.structures import BitMasks, Boxes, Keypoints, PolygonMasks
from mappers import structures as S
from samplers.slabs import plan_batch, unpack_batch, write_batch


def _instances(n: int = 3) -> Instances:
    inst = Instances((20, 30))
    inst.gt_boxes = Boxes(torch.arange(n * 4, dtype=torch.float32).view(n, 4))
    inst.gt_classes = torch.arange(n)
    inst.gt_masks = PolygonMasks([[[i, 0, i + 1, 0, i, 1]] for i in range(n)])
    inst.gt_keypoints = Keypoints(torch.full((n, 2, 3), 1.0))
    inst.gt_bitmasks = BitMasks(torch.zeros(n, 20, 30))
    return inst


def test_public_names():
    for name in (
        "Boxes",
        "RotatedBoxes",
        "BitMasks",
        "PolygonMasks",
        "ROIMasks",
        "Keypoints",
        "ImageList",
        "pairwise_iou",
        "pairwise_ioa",
        "BoxMode",
        "Instances",
    ):
        assert name in S.__all__ and hasattr(S, name)
    assert S.BoxMode is BoxMode and S.Instances is Instances


def test_instances_index_cat_to_with_structures():
    inst = _instances()
    one = inst[1]
    assert len(one) == 1 and isinstance(one.gt_boxes, Boxes)
    assert one.gt_boxes.tensor.tolist() == [[4, 5, 6, 7]]
    assert one.gt_masks.polygons[0][0][0] == 1
    picked = inst[torch.tensor([True, False, True])]
    assert picked.gt_boxes.tensor[:, 0].tolist() == [0, 8]
    assert [p[0][0] for p in picked.gt_masks] == [0, 2]
    assert picked.gt_bitmasks.tensor.shape == (2, 20, 30)
    assert len(inst[[2, 1]].gt_keypoints) == 2
    both = Instances.cat([inst, inst[:1]])
    assert len(both) == 4 and isinstance(both.gt_boxes, Boxes)
    assert both.gt_boxes.tensor[3].tolist() == [0, 1, 2, 3]
    assert len(both.gt_masks) == 4 and len(both.gt_keypoints) == 4
    moved = inst.to("cpu")
    assert isinstance(moved.gt_boxes, Boxes) and moved.gt_masks is inst.gt_masks
    assert "gt_boxes: Boxes(len=3)" in repr(inst)


def test_annotations_to_instances_fills_detectron2_structures():
    annos = [
        {
            "bbox": [1, 2, 10, 20],
            "bbox_mode": BoxMode.XYWH_ABS,
            "category_id": 3,
            "segmentation": [[1, 2, 11, 2, 11, 22]],
            "keypoints": [1, 2, 2, 5, 6, 1],
        },
        {
            "bbox": [0, 0, 5, 5],
            "bbox_mode": BoxMode.XYXY_ABS,
            "category_id": 0,
            "segmentation": [[0, 0, 5, 0, 5, 5, 0, 5]],
            "keypoints": [0, 0, 0, 4, 4, 2],
        },
    ]
    inst = annotations_to_instances(annos, (30, 40))
    assert isinstance(inst.gt_boxes, Boxes)
    assert inst.gt_boxes.tensor.tolist() == [[1, 2, 11, 22], [0, 0, 5, 5]]
    assert inst.gt_classes.dtype == torch.int64 and inst.gt_classes.tolist() == [3, 0]
    assert isinstance(inst.gt_masks, PolygonMasks)
    assert inst.gt_masks.polygons[1][0].tolist() == [0, 0, 5, 0, 5, 5, 0, 5]
    assert isinstance(inst.gt_keypoints, Keypoints) and inst.gt_keypoints.tensor.shape == (2, 2, 3)
    pytest.importorskip("pycocotools.mask")
    bits = annotations_to_instances(annos, (30, 40), mask_format="bitmask")
    assert isinstance(bits.gt_masks, BitMasks) and bits.gt_masks.image_size == (30, 40)
    assert int(bits.gt_masks.tensor[1].sum()) == 25
    empty = annotations_to_instances([], (30, 40), mask_format="bitmask")
    assert isinstance(empty.gt_boxes, Boxes) and len(empty.gt_masks) == 0


def test_filter_empty_instances_with_structures():
    inst = Instances((10, 10))
    inst.gt_boxes = Boxes([[0, 0, 5, 5], [3, 3, 3, 8], [0, 0, 4, 4]])
    inst.gt_masks = PolygonMasks([[[0, 0, 1, 0, 1, 1]], [[0, 0, 1, 0, 1, 1]], []])
    kept, keep = filter_empty_instances(inst, return_mask=True)
    assert keep.tolist() == [True, False, False] and len(kept) == 1
    assert isinstance(kept.gt_boxes, Boxes) and isinstance(kept.gt_masks, PolygonMasks)
    bits = Instances((4, 4), gt_boxes=Boxes([[0, 0, 2, 2], [0, 0, 2, 2]]))
    data = torch.zeros(2, 4, 4, dtype=torch.bool)
    data[1, 0, 0] = True
    bits.gt_masks = BitMasks(data)
    assert filter_empty_instances(bits, return_mask=True)[1].tolist() == [False, True]
    rotated = Instances((9, 9), gt_boxes=S.RotatedBoxes([[4, 4, 2, 2, 30], [4, 4, 0, 2, 0]]))
    assert len(filter_empty_instances(rotated)) == 1


def test_structures_cross_the_batch_transport():
    batch = [{"instances": _instances(3)}, {"instances": _instances(2)}]
    batch[1]["images"] = S.ImageList.from_tensors([torch.ones(3, 4, 5)])
    batch[1]["roi"] = S.ROIMasks(torch.rand(2, 7, 7))
    batch[1]["rotated"] = S.RotatedBoxes(torch.rand(2, 5))
    plan = plan_batch(batch)
    arena = torch.zeros(plan.nbytes, dtype=torch.uint8)
    write_batch(plan, arena, arena.numpy())
    out = unpack_batch(plan.skeleton, arena.numpy())
    base = arena.numpy().ctypes.data
    for got, want in zip(out, batch, strict=True):
        gi, wi = got["instances"], want["instances"]
        assert isinstance(gi.gt_boxes, Boxes) and torch.equal(
            gi.gt_boxes.tensor, wi.gt_boxes.tensor
        )
        assert isinstance(gi.gt_masks, PolygonMasks)
        assert all(
            np.array_equal(p, q)
            for a, b in zip(gi.gt_masks, wi.gt_masks, strict=True)
            for p, q in zip(a, b, strict=True)
        )
        assert isinstance(gi.gt_keypoints, Keypoints)
        assert torch.equal(gi.gt_keypoints.tensor, wi.gt_keypoints.tensor)
        assert torch.equal(gi.gt_bitmasks.tensor, wi.gt_bitmasks.tensor)
        # the rebuilt objects wrap views of the arena: no copy
        start = gi.gt_boxes.tensor.data_ptr()
        assert base <= start < base + plan.nbytes
    assert out[1]["images"].image_sizes == [(4, 5)] and torch.equal(
        out[1]["images"].tensor, batch[1]["images"].tensor
    )
    assert torch.equal(out[1]["roi"].tensor, batch[1]["roi"].tensor)
    assert isinstance(out[1]["rotated"], S.RotatedBoxes)
    # boxes of the whole batch share one region (one block of rows)
    regions = {r.offset for r in plan.regions}
    assert len(regions) == len(plan.regions)
    assert any(r.rows == (3, 2) and r.shape == (5, 4) for r in plan.regions)


def test_annotations_to_instances_rotated():
    from catalog._common import RecordFormatError
    from mappers.annotations import annotations_to_instances_rotated

    annos = [
        {"bbox": [5, 5, 20, 4, 0], "bbox_mode": BoxMode.XYWHA_ABS, "category_id": 1},
        {"bbox": [5, 5, 20, 4, 45], "bbox_mode": BoxMode.XYWHA_ABS, "category_id": 0},
    ]
    inst = annotations_to_instances_rotated(annos, (10, 12))
    assert isinstance(inst.gt_boxes, S.RotatedBoxes)
    # the horizontal box is clipped to x 0..12 (cx 6, w 12); the 45° one is left alone
    assert inst.gt_boxes.tensor.tolist() == [[6, 5, 12, 4, 0], [5, 5, 20, 4, 45]]
    assert inst.gt_classes.tolist() == [1, 0]
    with pytest.raises(RecordFormatError, match="instance 0.*5 finite numbers"):
        annotations_to_instances_rotated([{"bbox": [1, 2, 3, 4], "category_id": 0}], (5, 5))
    with pytest.raises(RecordFormatError, match="missing key 'category_id'"):
        annotations_to_instances_rotated([{"bbox": [1, 2, 3, 4, 0]}], (5, 5))
