"""Tests for mappers.dataset_mapper.DatasetMapper."""

from __future__ import annotations

import copy
import logging
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils import data

from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError
from mappers import transforms as T
from mappers.dataset_mapper import DatasetMapper, check_image_size, image_to_tensor
from mappers.datasets import DatasetFromList, MapDataset
from mappers.errors import ImageNotFoundError, ImageReadError, ImageSizeMismatchError

H, W = 48, 64


def _image() -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)


@pytest.fixture()
def record(tmp_path):
    path = tmp_path / "img.png"
    Image.fromarray(_image()).save(path)
    return {
        "file_name": str(path),
        "height": H,
        "width": W,
        "image_id": 7,
        "annotations": [
            {
                "bbox": [10, 20, 30, 20],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": 2,
                "segmentation": [[10, 20, 40, 20, 40, 40, 10, 40]],
                "keypoints": [12, 22, 2, 38, 22, 2],
            },
            {"bbox": [0, 0, 8, 8], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 1, "iscrowd": 1},
            {  # an empty box: filtered out
                "bbox": [5, 5, 0, 0],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": 0,
                "segmentation": [[5, 5, 6, 5, 6, 6]],
                "keypoints": [0, 0, 0, 0, 0, 0],
            },
        ],
        "extra": "kept",
    }


def _flip_double():
    """Deterministic: scale 2x then flip horizontally."""
    return [T.Resize((2 * H, 2 * W)), T.RandomFlip(prob=1.0)]


def test_training_output(record):
    original = copy.deepcopy(record)
    mapper = DatasetMapper(True, augmentations=_flip_double())
    out = mapper(record)
    assert record == original  # the caller's record is untouched
    image = out["image"]
    assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
    assert image.shape == (3, 2 * H, 2 * W)
    expected = np.asarray(Image.fromarray(_image()).resize((2 * W, 2 * H), Image.BILINEAR))[:, ::-1]
    assert np.abs(image.permute(1, 2, 0).numpy().astype(int) - expected.astype(int)).mean() < 2
    assert (out["height"], out["width"]) == (H, W)
    assert out["extra"] == "kept" and out["image_id"] == 7
    assert "annotations" not in out
    inst = out["instances"]
    assert inst.image_size == (2 * H, 2 * W)
    assert len(inst) == 1  # crowd dropped, empty box filtered
    # XYWH [10, 20, 30, 20] -> XYXY [10, 20, 40, 40] -> x2 [20, 40, 80, 80] -> flip at 128
    np.testing.assert_allclose(inst.gt_boxes.tensor.numpy(), [[48, 40, 108, 80]])
    assert inst.gt_boxes.tensor.dtype == torch.float32
    assert inst.gt_classes.tolist() == [2]
    assert not inst.has("gt_masks") and not inst.has("gt_keypoints")


def test_image_tensor_is_a_view_of_the_hwc_array():
    hwc = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    chw = image_to_tensor(hwc)
    assert torch.equal(chw, torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1))))
    assert chw.data_ptr() == hwc.ctypes.data
    flipped = hwc[:, ::-1]
    assert torch.equal(image_to_tensor(flipped).permute(1, 2, 0), torch.from_numpy(flipped.copy()))
    assert image_to_tensor(hwc[:, :, 0]).shape == (1, 2, 3)


def test_test_mode_drops_annotations(record):
    out = DatasetMapper(False, augmentations=[T.Resize((24, 32))])(record)
    assert out["image"].shape == (3, 24, 32)
    assert "annotations" not in out and "instances" not in out
    assert (out["height"], out["width"]) == (H, W)


def test_masks_polygon_bitmask_and_recompute_boxes(record):
    polys = DatasetMapper(True, augmentations=_flip_double(), use_instance_mask=True)(record)
    masks = polys["instances"].gt_masks
    assert len(masks) == 1
    np.testing.assert_allclose(
        np.asarray(masks.polygons[0][0]).reshape(-1, 2), [[108, 40], [48, 40], [48, 80], [108, 80]]
    )
    bitmask = DatasetMapper(
        True,
        augmentations=_flip_double(),
        use_instance_mask=True,
        instance_mask_format="bitmask",
        recompute_boxes=True,
    )(record)
    gt_masks = bitmask["instances"].gt_masks.tensor  # BitMasks, as in detectron2
    # recomputed from its small mask, the empty-box instance gets a box and is kept
    assert gt_masks.shape == (2, 2 * H, 2 * W) and gt_masks.dtype == torch.bool
    assert gt_masks[0, 60, 70] == 1 and gt_masks[0, 10, 10] == 0
    box = bitmask["instances"].gt_boxes.tensor[0].tolist()
    assert abs(box[0] - 48) <= 1 and abs(box[2] - 108) <= 1 and abs(box[1] - 40) <= 1
    recomputed = DatasetMapper(
        True,
        augmentations=[T.Resize((2 * H, 2 * W))],
        use_instance_mask=True,
        recompute_boxes=True,
    )(record)
    np.testing.assert_allclose(
        recomputed["instances"].gt_boxes.tensor.numpy(), [[20, 40, 80, 80], [10, 10, 12, 12]]
    )


def test_keypoints_with_flip_indices(record):
    mapper = DatasetMapper(
        True, augmentations=_flip_double(), use_keypoint=True, keypoint_hflip_indices=[1, 0]
    )
    kpts = mapper(record)["instances"].gt_keypoints.tensor  # Keypoints, as in detectron2
    assert kpts.shape == (1, 2, 3)
    # (12, 22) and (38, 22) -> x2 -> (24, 44), (76, 44) -> flip -> (104, 44), (52, 44), swapped
    np.testing.assert_allclose(kpts[0, :, :2].numpy(), [[52, 44], [104, 44]], atol=1e-4)


def test_keypoints_flip_without_indices_is_an_error(record):
    mapper = DatasetMapper(True, augmentations=_flip_double(), use_keypoint=True)
    with pytest.raises(ValueError, match="keypoint"):
        mapper(record)


def test_image_formats(record):
    bgr = DatasetMapper(False, augmentations=[], image_format="BGR")(record)["image"]
    np.testing.assert_array_equal(bgr.permute(1, 2, 0).numpy(), _image()[:, :, ::-1])
    gray = DatasetMapper(False, augmentations=[], image_format="L")(record)["image"]
    assert gray.shape == (1, H, W)


def test_size_mismatch_names_file_and_sizes(record):
    record["height"] = 50
    with pytest.raises(ImageSizeMismatchError) as info:
        DatasetMapper(True, augmentations=[])(record)
    text = str(info.value)
    assert record["file_name"] in text and "h=48, w=64" in text and "h=50, w=64" in text
    assert isinstance(info.value, ValueError)


def test_missing_height_width_are_filled(record):
    del record["height"], record["width"]
    out = DatasetMapper(True, augmentations=[])(record)
    assert (out["height"], out["width"]) == (H, W)
    rec = {"file_name": "x"}
    check_image_size(rec, np.zeros((3, 5, 3), np.uint8))
    assert (rec["height"], rec["width"]) == (3, 5)


def test_missing_file_name_key():
    with pytest.raises(RecordFormatError, match="file_name"):
        DatasetMapper(True, augmentations=[])({"image_id": 3})


def test_bad_image_raises_or_is_skipped(record, tmp_path, caplog):
    record["file_name"] = str(tmp_path / "missing.png")
    with pytest.raises(ImageNotFoundError, match="missing.png"):
        DatasetMapper(True, augmentations=[])(record)
    mapper = DatasetMapper(True, augmentations=[], skip_bad_images=True)
    with caplog.at_level(logging.WARNING, logger="mappers.dataset_mapper"):
        assert mapper(record) is None
        assert mapper(record) is None
    assert mapper.num_skipped == 2
    assert len(caplog.records) == 1 and "missing.png" in caplog.records[0].getMessage()
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0 broken")
    record["file_name"] = str(corrupt)
    assert mapper(record) is None
    with pytest.raises(ImageReadError, match="corrupt.jpg"):
        DatasetMapper(True, augmentations=[])(record)


def test_skipped_images_make_map_dataset_refetch(record, tmp_path):
    bad = dict(record, file_name=str(tmp_path / "gone.png"))
    ds = MapDataset(
        DatasetFromList([bad, record, bad]),
        DatasetMapper(True, augmentations=[], skip_bad_images=True),
        seed=0,
    )
    assert ds[0]["file_name"] == record["file_name"]
    assert ds.failure_stats()["failed_indices"] in ([0], [0, 2])


def test_semantic_segmentation(record, tmp_path):
    seg = np.zeros((H, W), dtype=np.uint8)
    seg[:, W // 2 :] = 3
    seg_path = tmp_path / "seg.png"
    Image.fromarray(seg, mode="L").save(seg_path)
    record["sem_seg_file_name"] = str(seg_path)
    out = DatasetMapper(True, augmentations=_flip_double())(record)
    sem = out["sem_seg"]
    assert sem.dtype == torch.int64 and sem.shape == (2 * H, 2 * W)
    assert sem[0, 0] == 3 and sem[0, -1] == 0  # flipped
    assert set(torch.unique(sem).tolist()) == {0, 3}  # nearest: no blended labels
    assert "sem_seg_file_name" not in out


def test_invalid_options():
    with pytest.raises(ValueError, match="instance_mask_format"):
        DatasetMapper(True, augmentations=[], instance_mask_format="rle")
    with pytest.raises(ValueError, match="recompute_boxes"):
        DatasetMapper(True, augmentations=[], recompute_boxes=True)
    with pytest.raises(ValueError, match="image_format"):
        DatasetMapper(True, augmentations=[], image_format="YUV")


def test_mapper_pickles_and_runs_in_workers(record):
    mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(96, 1000), T.RandomFlip()])
    assert "ResizeShortestEdge" in repr(mapper)
    back = pickle.loads(pickle.dumps(mapper))
    assert back(record)["image"].shape == (3, 96, 128)
    ds = MapDataset(DatasetFromList([record] * 4), mapper, seed=0)
    loader = data.DataLoader(ds, batch_size=2, num_workers=2, collate_fn=list)
    samples = [s for batch in loader for s in batch]
    assert len(samples) == 4
    assert all(s["image"].shape == (3, 96, 128) for s in samples)
    assert all(len(s["instances"]) == 1 for s in samples)


# ----------------------------------------------------------------------------- fast paths


class _OpaqueFlip(T.RandomFlip):
    """Overrides get_transform without declaring shape_only: not planned before decoding."""

    def get_transform(self, image):
        return super().get_transform(image)


class _OpaqueResize(T.ResizeShortestEdge):
    """Overrides get_transform without declaring shape_only: not planned before decoding."""

    def get_transform(self, image):
        return super().get_transform(image)


def test_planned_path_matches_general_path(tmp_path):
    from mappers.random_state import seed_generator

    rng = np.random.default_rng(3)
    path = tmp_path / "noise.png"
    Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(path)
    rec = {
        "file_name": str(path),
        "height": H,
        "width": W,
        "annotations": [
            {"bbox": [3.5, 4.25, 20, 11], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1},
            {"bbox": [30, 5, 63, 47], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 4},
            {"bbox": [1, 1, 2, 2], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 2, "iscrowd": 1},
        ],
    }
    fast = DatasetMapper(True, augmentations=[T.ResizeShortestEdge((60, 90), 1000), T.RandomFlip()])
    slow = DatasetMapper(True, augmentations=[_OpaqueResize((60, 90), 1000), _OpaqueFlip()])
    assert T.reads_shape_only(fast.augmentations) and not T.reads_shape_only(slow.augmentations)
    flipped = 0
    for seed in range(8):
        seed_generator(seed)
        a = fast(rec)
        seed_generator(seed)
        b = slow(rec)
        assert a["image"].shape == b["image"].shape
        diff = (a["image"].int() - b["image"].int()).abs()
        assert int(diff.max()) <= 1  # flip before resize: equal up to rounding
        assert torch.equal(a["instances"].gt_boxes.tensor, b["instances"].gt_boxes.tensor)
        assert torch.equal(a["instances"].gt_classes, b["instances"].gt_classes)
        flipped += int(a["instances"].gt_boxes.tensor[0, 0] > a["image"].shape[2] / 2)
    assert 0 < flipped < 8  # both flip decisions were exercised


def test_vectorized_boxes_match_per_annotation_path():
    from mappers import (
        annotations_to_instances,
        filter_empty_instances,
        transform_instance_annotations,
    )
    from mappers.dataset_mapper import annotations_to_training_instances

    annos = [
        {"bbox": [3.5, 4.25, 20, 11], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1},
        {"bbox": [30, 5, 70, 47], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 4},  # clipped
        {"bbox": [10, 10, 0, 5], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0},  # empty
        {"bbox": [1, 1, 2, 2], "bbox_mode": 0, "category_id": 2, "iscrowd": 1},
    ]
    transform_lists = [
        T.TransformList([T.ResizeTransform(H, W, 77, 101), T.HFlipTransform(101)]),
        T.TransformList([T.VFlipTransform(H), T.ResizeTransform(H, W, 20, 30)]),
        T.TransformList([T.CropTransform(5, 3, 40, 30)]),  # not vectorized: apply_box
    ]
    for tfms in transform_lists:
        size = (
            (77, 101)
            if tfms is transform_lists[0]
            else ((20, 30) if tfms is transform_lists[1] else (30, 40))
        )
        fast = annotations_to_training_instances([dict(a) for a in annos], tfms, size)
        reference = [
            transform_instance_annotations(dict(a), tfms, size)
            for a in annos
            if a.get("iscrowd", 0) == 0
        ]
        slow = filter_empty_instances(annotations_to_instances(reference, size))
        assert torch.equal(fast.gt_boxes.tensor, getattr(slow.gt_boxes, "tensor", slow.gt_boxes)), tfms
        assert torch.equal(fast.gt_classes, slow.gt_classes)
        assert fast.image_size == slow.image_size


def test_malformed_box_gets_the_precise_error():
    from mappers.dataset_mapper import annotations_to_training_instances

    bad = [{"bbox": [1, 2, 3], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}]
    with pytest.raises(RecordFormatError, match="bbox"):
        annotations_to_training_instances(bad, T.NoOpTransform(), (10, 10), file_name="f.jpg")
    missing = [{"bbox": [1, 2, 3, 4], "category_id": 0}]
    with pytest.raises(RecordFormatError, match="bbox_mode"):
        annotations_to_training_instances(missing, T.NoOpTransform(), (10, 10), file_name="f.jpg")


def test_caller_record_untouched_with_masks_and_keypoints(record):
    original = copy.deepcopy(record)
    DatasetMapper(
        True,
        augmentations=_flip_double(),
        use_instance_mask=True,
        use_keypoint=True,
        keypoint_hflip_indices=[1, 0],
    )(record)
    assert record == original


def test_planned_flip_of_an_owned_image_happens_in_place():
    from mappers.dataset_mapper import apply_planned_image

    image = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    expected = T.HFlipTransform(7).apply_image(image.copy())
    before = image.copy()
    out = apply_planned_image(image, [T.HFlipTransform(7)])  # not owned: input untouched
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(image, before)
    out = apply_planned_image(image, [T.HFlipTransform(7)], owned=True)
    assert np.shares_memory(out, image)  # flipped in place
    np.testing.assert_array_equal(out, expected)
    view = np.zeros((6, 8, 3), np.uint8)[1:5, 1:6]  # not contiguous: a view
    assert apply_planned_image(view, [T.VFlipTransform(4)], owned=True).shape == (4, 5, 3)


def test_reduced_decode_for_shrinking_augmentations(tmp_path):
    from mappers.random_state import seed_generator

    y, x = np.mgrid[0:400, 0:600]
    big = np.stack([x * 255 // 600, y * 255 // 400, (x + y) % 256], axis=-1).astype(np.uint8)
    path = tmp_path / "big.jpg"
    Image.fromarray(big).save(path, "JPEG", quality=95)
    rec = {
        "file_name": str(path),
        "height": 400,
        "width": 600,
        "annotations": [
            {"bbox": [60, 40, 300, 200], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 1}
        ],
    }
    augs = [T.ResizeShortestEdge(100, 1000), T.RandomFlip()]
    reduced = DatasetMapper(True, augmentations=augs, reduced_decode=True)
    full = DatasetMapper(True, augmentations=augs)
    import mappers.image_io as dm  # where the mapper's image reading happens

    seen = []
    real_decode = dm.decode_image

    def spy(data, fmt=None, **kwargs):
        image = real_decode(data, fmt, **kwargs)
        seen.append(image.shape)
        return image

    dm.decode_image = spy
    try:
        for seed in range(3):
            seed_generator(seed)
            a = reduced(rec)
            seed_generator(seed)
            b = full(rec)
            assert a["image"].shape == b["image"].shape == (3, 100, 150)
            assert torch.equal(a["instances"].gt_boxes.tensor, b["instances"].gt_boxes.tensor)
            assert (a["image"].float() - b["image"].float()).abs().mean() < 3
    finally:
        dm.decode_image = real_decode
    assert seen[0] == (100, 150, 3)  # decoded at 1/4 scale: exactly the output size
    assert seen[1] == (400, 600, 3)
    # an upscale, or a wrong record size, is not affected
    assert DatasetMapper(True, augmentations=[T.Resize((500, 700))], reduced_decode=True)(rec)[
        "image"
    ].shape == (3, 500, 700)
    with pytest.raises(ImageSizeMismatchError):
        reduced(dict(rec, height=380))
