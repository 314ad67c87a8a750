"""Tests for mappers.annotations: transforming annotations and building Instances."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest
import torch

from catalog import BoxMode, RecordFormatError
from catalog.metadata import Metadata
from mappers import (
    KeypointFlipError,
    MissingDependencyError,
    annotations_to_instances,
    filter_empty_instances,
    transform_instance_annotations,
)
from mappers.annotations import transform_annotations
from mappers.keypoint_annotations import create_keypoint_hflip_indices, transform_keypoint_annotations
from mappers.geometry_checks import polygons_to_bitmask, rle_to_bitmask
from mappers.instances import Instances
from mappers.structures import BitMasks, Boxes, Keypoints, PolygonMasks
from mappers.transforms import (
    AugInput,
    AugmentationList,
    CropTransform,
    HFlipTransform,
    RandomCrop,
    RandomFlip,
    ResizeShortestEdge,
    ResizeTransform,
    TransformList,
    VFlipTransform,
)

pycocotools = pytest.importorskip("pycocotools.mask")

KEYPOINT_NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]
FLIP_MAP = [("left_eye", "right_eye"), ("left_ear", "right_ear")]


def _anno(**extra):
    anno = {
        "bbox": [10, 10, 190, 290],
        "bbox_mode": BoxMode.XYWH_ABS,
        "category_id": 1,
        "iscrowd": 0,
    }
    anno.update(extra)
    return anno


# ---------------------------------------------------------------- issue examples
def test_hflip_exactness_box_and_polygon():
    anno = _anno(segmentation=[[10, 10, 100, 100, 100, 10]])
    out = transform_instance_annotations(anno, [HFlipTransform(400)], (300, 400))
    assert out is anno  # transformed in place
    assert out["bbox"].tolist() == [200.0, 10.0, 390.0, 300.0]
    assert out["bbox_mode"] == BoxMode.XYXY_ABS
    assert out["segmentation"][0].tolist() == [390.0, 10.0, 300.0, 100.0, 300.0, 10.0]


def test_box_clipped_to_image_and_transform_variants():
    anno = {"bbox": [-5, -5, 50, 500], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
    out = transform_instance_annotations(anno, HFlipTransform(40), (100, 40))
    assert out["bbox"].tolist() == [0.0, 0.0, 40.0, 100.0]
    anno = {"bbox": [0, 0, 10, 10], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
    out = transform_instance_annotations(
        anno, TransformList([ResizeTransform(10, 10, 20, 20)]), (20, 20)
    )
    assert out["bbox"].tolist() == [0.0, 0.0, 20.0, 20.0]


# ---------------------------------------------------------------- consistency
def _scene(h=60, w=80):
    img = np.zeros((h, w, 3), np.uint8)
    x0, y0, x1, y1 = 20, 15, 50, 40
    img[y0:y1, x0:x1] = 255
    anno = {
        "bbox": [x0, y0, x1 - x0, y1 - y0],
        "bbox_mode": BoxMode.XYWH_ABS,
        "category_id": 2,
        "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]],
        # nose at top-left corner, left_eye at top-right, right_eye at bottom-left, others hidden
        "keypoints": [x0, y0, 2, x1, y0, 2, x0, y1, 1, 0, 0, 0, 0, 0, 0],
    }
    return img, anno


@pytest.mark.parametrize("seed", range(6))
def test_boxes_polygons_keypoints_follow_the_image(seed):
    img, anno = _scene()
    augs = AugmentationList(
        [
            RandomFlip(prob=0.5),
            ResizeShortestEdge((50, 120), 1000),
            RandomCrop("relative_range", (0.7, 0.7)),
        ]
    )
    aug_input = AugInput(img)
    tfms = augs(aug_input, rng=np.random.default_rng(seed))
    out_img = aug_input.image
    h, w = out_img.shape[:2]
    flip_idx = create_keypoint_hflip_indices(
        {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": FLIP_MAP}
    )
    out = transform_instance_annotations(
        copy.deepcopy(anno), tfms, (h, w), keypoint_hflip_indices=flip_idx
    )

    ys, xs = np.nonzero(out_img[:, :, 0] > 127)
    pixel_box = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float64)
    np.testing.assert_allclose(out["bbox"], pixel_box, atol=1.5)
    poly = out["segmentation"][0].reshape(-1, 2)
    np.testing.assert_allclose(
        [poly[:, 0].min(), poly[:, 1].min(), poly[:, 0].max(), poly[:, 1].max()],
        out["bbox"],
        atol=1e-6,
    )
    mask = polygons_to_bitmask(out["segmentation"], h, w)
    assert abs(int(mask.sum()) - len(xs)) <= 2 * (h + w)  # same region up to the border pixels

    # keypoints: each visible point is a corner of the box
    corners = {
        (x, y) for x in (out["bbox"][0], out["bbox"][2]) for y in (out["bbox"][1], out["bbox"][3])
    }
    for x, y, v in out["keypoints"]:
        if v > 0:
            assert min(abs(x - cx) + abs(y - cy) for cx, cy in corners) < 1e-6
    assert np.all(out["keypoints"][3:] == 0)


def test_keypoints_swap_left_right_after_flip():
    img, anno = _scene()
    flip_idx = create_keypoint_hflip_indices(
        {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": FLIP_MAP}
    )
    out = transform_instance_annotations(
        copy.deepcopy(anno), [HFlipTransform(80)], (60, 80), keypoint_hflip_indices=flip_idx
    )
    kps = out["keypoints"]
    assert kps[0].tolist() == [60.0, 15.0, 2.0]  # nose: no partner, just mirrored
    assert kps[1].tolist() == [60.0, 40.0, 1.0]  # left_eye slot holds the mirrored right_eye
    assert kps[2].tolist() == [30.0, 15.0, 2.0]
    # two flips cancel: no swap, no indices needed
    out2 = transform_instance_annotations(
        copy.deepcopy(anno), [HFlipTransform(80), HFlipTransform(80)], (60, 80)
    )
    np.testing.assert_allclose(out2["keypoints"][:3], np.reshape(anno["keypoints"], (-1, 3))[:3])
    # a vertical flip does not swap left and right
    out3 = transform_instance_annotations(copy.deepcopy(anno), [VFlipTransform(60)], (60, 80))
    assert out3["keypoints"][1].tolist() == [50.0, 45.0, 2.0]


def test_keypoints_outside_become_invisible():
    kps = transform_keypoint_annotations(
        [5, 5, 2, 35, 5, 2], [CropTransform(10, 0, 20, 20)], (20, 20)
    )
    assert kps[0].tolist() == [0.0, 0.0, 0.0]
    assert kps[1].tolist() == [0.0, 0.0, 0.0]  # x = 25 > 20: outside too
    kps = transform_keypoint_annotations([15, 5, 2], [CropTransform(10, 0, 20, 20)], (20, 20))
    assert kps.tolist() == [[5.0, 5.0, 2.0]]


def test_keypoint_flip_index_errors():
    _, anno = _scene()
    with pytest.raises(KeypointFlipError, match="keypoint_hflip_indices is needed"):
        transform_instance_annotations(copy.deepcopy(anno), [HFlipTransform(80)], (60, 80))
    with pytest.raises(KeypointFlipError, match="3 entries.*5 keypoints"):
        transform_instance_annotations(
            copy.deepcopy(anno),
            [HFlipTransform(80)],
            (60, 80),
            keypoint_hflip_indices=np.array([0, 2, 1]),
        )
    with pytest.raises(RecordFormatError, match="multiple of 3"):
        transform_keypoint_annotations([1, 2, 3, 4], [HFlipTransform(8)], (8, 8))


def test_create_keypoint_hflip_indices_sources(monkeypatch):
    from catalog.metadata import MetadataCatalog

    expected = [0, 2, 1, 4, 3]
    meta = Metadata(name="kp_toy", keypoint_names=KEYPOINT_NAMES, keypoint_flip_map=FLIP_MAP)
    assert create_keypoint_hflip_indices(meta).tolist() == expected
    assert (
        create_keypoint_hflip_indices(
            {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": dict(FLIP_MAP)}
        ).tolist()
        == expected
    )
    MetadataCatalog.get("test_annotations_kp_a").set(
        keypoint_names=KEYPOINT_NAMES, keypoint_flip_map=FLIP_MAP
    )
    MetadataCatalog.get("test_annotations_kp_b").set(
        keypoint_names=KEYPOINT_NAMES, keypoint_flip_map=FLIP_MAP
    )
    try:
        assert (
            create_keypoint_hflip_indices(
                ["test_annotations_kp_a", "test_annotations_kp_b"]
            ).tolist()
            == expected
        )
        assert create_keypoint_hflip_indices("test_annotations_kp_a").tolist() == expected
        MetadataCatalog.get("test_annotations_kp_c").set(
            keypoint_names=KEYPOINT_NAMES[:3], keypoint_flip_map=FLIP_MAP[:1]
        )
        with pytest.raises(KeypointFlipError, match="different keypoint_names"):
            create_keypoint_hflip_indices(["test_annotations_kp_a", "test_annotations_kp_c"])
        with pytest.raises(KeypointFlipError, match="'test_annotations_kp_d'.*'keypoint_names'"):
            create_keypoint_hflip_indices("test_annotations_kp_d")
    finally:
        for name in "abcd":
            if f"test_annotations_kp_{name}" in MetadataCatalog.list():
                MetadataCatalog.remove(f"test_annotations_kp_{name}")


def test_create_keypoint_hflip_indices_errors():
    with pytest.raises(KeypointFlipError, match="'keypoint_flip_map'"):
        create_keypoint_hflip_indices({"name": "toy", "keypoint_names": KEYPOINT_NAMES})
    with pytest.raises(KeypointFlipError, match="'left_foot'"):
        create_keypoint_hflip_indices(
            {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": [("left_foot", "nose")]}
        )
    with pytest.raises(KeypointFlipError, match="not a pair"):
        create_keypoint_hflip_indices(
            {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": [("nose",)]}
        )
    with pytest.raises(KeypointFlipError, match="no dataset"):
        create_keypoint_hflip_indices([])


# ---------------------------------------------------------------- RLE and masks
def _rle_of(mask: np.ndarray) -> dict:
    rle = pycocotools.encode(np.asfortranarray(mask))
    rle["counts"] = rle["counts"].decode()
    return rle


def test_rle_is_decoded_and_transformed():
    mask = np.zeros((20, 30), np.uint8)
    mask[2:6, 3:10] = 1
    for segm in (
        _rle_of(mask),
        {"size": [20, 30], "counts": pycocotools.encode(np.asfortranarray(mask))["counts"]},
    ):
        anno = {
            "bbox": [3, 2, 7, 4],
            "bbox_mode": BoxMode.XYWH_ABS,
            "category_id": 0,
            "segmentation": segm,
        }
        out = transform_instance_annotations(anno, [HFlipTransform(30)], (20, 30))
        np.testing.assert_array_equal(out["segmentation"], mask[:, ::-1])
    uncompressed = {"size": [2, 2], "counts": [1, 2, 1]}
    assert rle_to_bitmask(uncompressed).tolist() == [[0, 1], [1, 0]]
    resized = transform_instance_annotations(
        {"bbox": [0, 0, 1, 1], "bbox_mode": 0, "category_id": 0, "segmentation": _rle_of(mask)},
        [ResizeTransform(20, 30, 40, 60)],
        (40, 60),
    )
    assert (
        resized["segmentation"].shape == (40, 60)
        and resized["segmentation"].sum() == 4 * mask.sum()
    )


def test_rle_without_pycocotools_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycocotools", None)
    monkeypatch.setitem(sys.modules, "pycocotools.mask", None)
    anno = _anno(segmentation={"size": [2, 2], "counts": [1, 2, 1]})
    with pytest.raises(MissingDependencyError, match=r"catmap\[coco\]"):
        transform_instance_annotations(anno, [HFlipTransform(400)], (300, 400))
    with pytest.raises(ImportError):
        polygons_to_bitmask([[0, 0, 1, 0, 1, 1]], 2, 2)
    # polygons need no pycocotools in the default polygon format
    inst = annotations_to_instances([_anno(segmentation=[[0, 0, 5, 0, 5, 5]])], (300, 400))
    assert len(inst.gt_masks) == 1


def test_bad_annotations_are_record_format_errors():
    with pytest.raises(RecordFormatError, match="file a.jpg.*'bbox_mode'"):
        transform_instance_annotations({"bbox": [0, 0, 1, 1]}, [], (2, 2), context="file a.jpg")
    with pytest.raises(RecordFormatError, match="annotation id 7.*4 numbers"):
        transform_instance_annotations({"id": 7, "bbox": [0, 0, 1], "bbox_mode": 0}, [], (2, 2))
    with pytest.raises(RecordFormatError, match="polygon 0 has 4 numbers"):
        transform_instance_annotations(_anno(segmentation=[[0, 0, 1, 1]]), [], (300, 400))
    with pytest.raises(RecordFormatError, match="'segmentation' must be"):
        transform_instance_annotations(_anno(segmentation="mask.png"), [], (300, 400))
    with pytest.raises(RecordFormatError, match="'size' and 'counts'"):
        transform_instance_annotations(_anno(segmentation={"counts": "abc"}), [], (300, 400))
    with pytest.raises(RecordFormatError, match="relative"):
        transform_instance_annotations(
            {"bbox": [0, 0, 1, 1], "bbox_mode": BoxMode.XYXY_REL}, [], (2, 2)
        )


# ---------------------------------------------------------------- annotations_to_instances
def test_annotations_to_instances_fields_and_dtypes():
    annos = [
        _anno(segmentation=[[10, 10, 50, 10, 50, 50]], keypoints=[1, 2, 2] * 5),
        {
            "bbox": [0, 0, 5, 6],
            "bbox_mode": BoxMode.XYXY_ABS,
            "category_id": 4,
            "segmentation": [[0, 0, 5, 0, 5, 6], [1, 1, 2, 1, 2, 2]],
            "keypoints": np.ones((5, 3)),
        },
    ]
    inst = annotations_to_instances(annos, (300, 400))
    assert inst.image_size == (300, 400)
    assert isinstance(inst.gt_boxes, Boxes)  # detectron2's structures
    assert inst.gt_boxes.tensor.dtype == torch.float32 and inst.gt_boxes.tensor.tolist() == [
        [10, 10, 200, 300],
        [0, 0, 5, 6],
    ]
    assert inst.gt_classes.dtype == torch.int64 and inst.gt_classes.tolist() == [1, 4]
    assert isinstance(inst.gt_masks, PolygonMasks) and len(inst.gt_masks.polygons[1]) == 2
    assert inst.gt_masks.polygons[0][0].tolist() == [10, 10, 50, 10, 50, 50]
    assert isinstance(inst.gt_keypoints, Keypoints)
    kps = inst.gt_keypoints.tensor
    assert kps.shape == (2, 5, 3) and kps.dtype == torch.float32


def test_annotations_to_instances_bitmask():
    mask = np.zeros((30, 40), np.uint8)
    mask[5:10, 5:10] = 1
    annos = [
        {
            "bbox": [0, 0, 10, 10],
            "bbox_mode": 0,
            "category_id": 0,
            "segmentation": [[0, 0, 10, 0, 10, 10, 0, 10]],
        },
        {"bbox": [0, 0, 10, 10], "bbox_mode": 0, "category_id": 1, "segmentation": _rle_of(mask)},
        {"bbox": [0, 0, 10, 10], "bbox_mode": 0, "category_id": 2, "segmentation": mask * 7},
    ]
    inst = annotations_to_instances(annos, (30, 40), mask_format="bitmask")
    assert isinstance(inst.gt_masks, BitMasks)
    masks = inst.gt_masks.tensor
    assert masks.dtype == torch.bool and masks.shape == (3, 30, 40)
    assert int(masks[0].sum()) == 100
    assert torch.equal(masks[1], torch.from_numpy(mask != 0))
    assert torch.equal(masks[2], torch.from_numpy(mask != 0))
    with pytest.raises(RecordFormatError, match="instance 1.*mask_format='bitmask'"):
        annotations_to_instances(annos, (30, 40), mask_format="polygon")
    with pytest.raises(RecordFormatError, match=r"shape \(30, 40\)"):
        annotations_to_instances(annos[2:], (31, 40), mask_format="bitmask")


def test_annotations_to_instances_empty():
    inst = annotations_to_instances([], (30, 40))
    assert inst.gt_boxes.tensor.shape == (0, 4) and inst.gt_classes.shape == (0,)
    assert len(inst) == 0
    inst = annotations_to_instances([], (30, 40), mask_format="bitmask")
    assert inst.gt_masks.tensor.shape == (0, 30, 40)
    assert len(filter_empty_instances(inst)) == 0


def test_annotations_to_instances_errors():
    with pytest.raises(ValueError, match="mask_format"):
        annotations_to_instances([], (3, 3), mask_format="rle")
    with pytest.raises(RecordFormatError, match="img.jpg, instance 0.*'category_id'"):
        annotations_to_instances(
            [{"bbox": [0, 0, 1, 1], "bbox_mode": 0}], (3, 3), context="img.jpg"
        )
    with pytest.raises(RecordFormatError, match="instance 1.*'bbox'"):
        annotations_to_instances([_anno(), {"bbox_mode": 0, "category_id": 0}], (3, 3))
    for bad in ("person", None):
        with pytest.raises(RecordFormatError, match="instance 0.*'category_id'.*integer"):
            annotations_to_instances(
                [{"bbox": [0, 0, 1, 1], "bbox_mode": 0, "category_id": bad}], (3, 3)
            )
    with pytest.raises(RecordFormatError, match="instance 1: missing key 'segmentation'"):
        annotations_to_instances([_anno(segmentation=[[0, 0, 1, 0, 1, 1]]), _anno()], (3, 3))
    with pytest.raises(RecordFormatError, match="instance 0: missing key 'keypoints'"):
        annotations_to_instances([_anno(), _anno(keypoints=[1, 1, 1])], (3, 3))
    with pytest.raises(RecordFormatError, match="same multiple of 3"):
        annotations_to_instances(
            [_anno(keypoints=[1, 1, 1]), _anno(keypoints=[1, 1, 1] * 2)], (3, 3)
        )


# ---------------------------------------------------------------- filter_empty_instances
def test_filter_empty_instances_by_box_and_mask():
    anno_cut = {
        "bbox": [0, 0, 10, 10],
        "bbox_mode": 0,
        "category_id": 0,
        "segmentation": [[0, 0, 10, 0, 10, 10]],
    }
    anno_kept = {
        "bbox": [20, 20, 30, 30],
        "bbox_mode": 0,
        "category_id": 1,
        "segmentation": [[20, 20, 30, 20, 30, 30]],
    }
    crop = [CropTransform(15, 15, 20, 20)]
    annos = [
        transform_instance_annotations(copy.deepcopy(a), crop, (20, 20))
        for a in (anno_cut, anno_kept)
    ]
    assert annos[0]["segmentation"] == []  # the polygon lies outside the crop
    inst = annotations_to_instances(annos, (20, 20))
    kept, keep = filter_empty_instances(inst, return_mask=True)
    assert keep.tolist() == [False, True]
    assert kept.gt_classes.tolist() == [1]
    # by_box=False, by_mask=False keeps everything
    assert len(filter_empty_instances(inst, by_box=False, by_mask=False)) == 2
    # threshold applies to width and height
    inst = Instances((10, 10), gt_boxes=torch.tensor([[0.0, 0.0, 0.5, 5.0], [0.0, 0.0, 5.0, 5.0]]))
    assert len(filter_empty_instances(inst, box_threshold=1.0)) == 1
    assert len(filter_empty_instances(inst, box_threshold=0.1)) == 2
    masks = torch.zeros((2, 4, 4), dtype=torch.uint8)
    masks[1, 0, 0] = 1
    inst = Instances((4, 4), gt_masks=masks)
    assert filter_empty_instances(inst, return_mask=True)[1].tolist() == [False, True]


# ---------------------------------------------------------------- batched transform_annotations
def _many_annotations():
    mask = np.zeros((60, 80), np.uint8)
    mask[10:30, 40:70] = 1
    annos = []
    for i in range(6):
        annos.append(
            {
                "bbox": [5 + 7 * i, 3 + 5 * i, 20, 15],
                "bbox_mode": BoxMode.XYWH_ABS if i % 2 else BoxMode.XYXY_ABS,
                "category_id": i,
                "segmentation": [
                    [5 + 7 * i, 3 + 5 * i, 25 + 7 * i, 3 + 5 * i, 25 + 7 * i, 18 + 5 * i],
                    [1, 1, 8, 1, 8, 8, 1, 8],
                ],
                "keypoints": [10 + i, 10, 2, 70, 50 - i, 1, 0, 0, 0, 30, 30, 2, 79, 1, 2],
            }
        )
    annos.append({"bbox": [40, 10, 70, 30], "bbox_mode": 0, "category_id": 9, "segmentation": mask})
    annos.append({"bbox": [10, 10, 4, 2, 90], "bbox_mode": BoxMode.XYWHA_ABS, "category_id": 3})
    return annos


@pytest.mark.parametrize("seed", range(4))
def test_transform_annotations_matches_per_annotation(seed):
    augs = AugmentationList(
        [
            RandomFlip(prob=0.5),
            ResizeShortestEdge((40, 100), 1000),
            RandomCrop("relative_range", (0.5, 0.5)),
        ]
    )
    aug_input = AugInput(np.zeros((60, 80, 3), np.uint8))
    tfms = augs(aug_input, rng=np.random.default_rng(seed))
    size = aug_input.image.shape[:2]
    flip_idx = create_keypoint_hflip_indices(
        {"keypoint_names": KEYPOINT_NAMES, "keypoint_flip_map": FLIP_MAP}
    )
    one_by_one = [
        transform_instance_annotations(a, tfms, size, keypoint_hflip_indices=flip_idx)
        for a in _many_annotations()
    ]
    batched = transform_annotations(
        _many_annotations(), tfms, size, keypoint_hflip_indices=flip_idx
    )
    assert len(batched) == len(one_by_one)
    for a, b in zip(one_by_one, batched, strict=True):
        assert a.keys() == b.keys()
        np.testing.assert_allclose(a["bbox"], b["bbox"])
        assert a["bbox_mode"] == b["bbox_mode"] == BoxMode.XYXY_ABS
        if isinstance(a.get("segmentation"), list):
            assert len(a["segmentation"]) == len(b["segmentation"])
            for pa, pb in zip(a["segmentation"], b["segmentation"], strict=True):
                np.testing.assert_allclose(pa, pb)
        elif "segmentation" in a:
            np.testing.assert_array_equal(a["segmentation"], b["segmentation"])
        if "keypoints" in a:
            np.testing.assert_allclose(a["keypoints"], b["keypoints"])


def test_transform_annotations_errors_name_position_and_context():
    assert transform_annotations([], [HFlipTransform(4)], (4, 4)) == []
    annos = [_anno(), {"bbox_mode": 0, "category_id": 0}]
    with pytest.raises(RecordFormatError, match="x.jpg, annotation 1: missing key 'bbox'"):
        transform_annotations(annos, [HFlipTransform(400)], (300, 400), context="x.jpg")
    with pytest.raises(RecordFormatError, match="annotation 0: .*must be a dict"):
        transform_annotations(["bbox"], [], (3, 3))
    with pytest.raises(KeypointFlipError, match="annotation 0"):
        transform_annotations([_anno(keypoints=[1, 1, 2])], [HFlipTransform(400)], (300, 400))
