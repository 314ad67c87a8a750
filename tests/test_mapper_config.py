"""DatasetMapper(cfg, is_train) and DatasetMapper.from_config with detectron2-style configs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from catalog import DatasetCatalog, MetadataCatalog
from catalog.box_mode import BoxMode
from catalog._common import CatmapError
from catalog.testing import isolated_catalogs
from mappers import DatasetMapper, MapperArgumentError
from mappers import transforms as T
from mappers.random_state import seed_generator
from mappers.structures import Boxes, Keypoints

H, W = 40, 60

D2_STYLE = {
    "INPUT": {
        "MIN_SIZE_TRAIN": (80, 96),
        "MAX_SIZE_TRAIN": 200,
        "MIN_SIZE_TRAIN_SAMPLING": "choice",
        "MIN_SIZE_TEST": 80,
        "MAX_SIZE_TEST": 150,
        "RANDOM_FLIP": "horizontal",
        "FORMAT": "RGB",
        "MASK_FORMAT": "bitmask",
        "CROP": {"ENABLED": False, "TYPE": "absolute", "SIZE": [20, 30]},
    },
    "MODEL": {"MASK_ON": True, "KEYPOINT_ON": False, "LOAD_PROPOSALS": False},
    "DATASETS": {"TRAIN": ("kp_train",), "TEST": ()},
}


def _config(kind: str, **sections):
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in D2_STYLE.items()}
    for section, values in sections.items():
        cfg[section] = {**cfg[section], **values}
    if kind == "omegaconf":
        omegaconf = pytest.importorskip("omegaconf")
        return omegaconf.OmegaConf.create(cfg)
    return cfg


@pytest.fixture()
def record(tmp_path):
    y, x = np.mgrid[0:H, 0:W]
    path = tmp_path / "img.png"
    Image.fromarray(np.stack([x * 4, y * 6, x + y], -1).astype(np.uint8)).save(path)
    return {
        "file_name": str(path),
        "height": H,
        "width": W,
        "image_id": 3,
        "annotations": [
            {
                "bbox": [5, 5, 20, 10],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": 1,
                "segmentation": [[5, 5, 25, 5, 25, 15, 5, 15]],
                "keypoints": [6, 6, 2, 24, 6, 2],
            }
        ],
    }


@pytest.mark.parametrize("kind", ["dict", "omegaconf"])
def test_from_config_reads_detectron2_keys(kind):
    cfg = _config(kind)
    train = DatasetMapper.from_config(cfg, is_train=True)
    resize, flip = train["augmentations"]
    assert isinstance(resize, T.ResizeShortestEdge) and resize.short_edge_length == (80, 96)
    assert resize.max_size == 200 and resize.sample_style == "choice"
    assert isinstance(flip, T.RandomFlip) and flip.horizontal
    assert train["image_format"] == "RGB" and train["instance_mask_format"] == "bitmask"
    assert train["use_instance_mask"] and not train["use_keypoint"]
    assert not train["recompute_boxes"] and train["precomputed_proposal_topk"] is None
    test = DatasetMapper.from_config(cfg, is_train=False)
    (only,) = test["augmentations"]
    assert only.short_edge_length == (80, 80) and only.max_size == 150


@pytest.mark.parametrize("kind", ["dict", "omegaconf"])
def test_config_call_matches_keyword_call(kind, record):
    cfg = _config(kind)
    from_cfg = DatasetMapper(cfg, is_train=True)
    by_hand = DatasetMapper(
        True,
        augmentations=[T.ResizeShortestEdge((80, 96), 200, "choice"), T.RandomFlip()],
        image_format="RGB",
        use_instance_mask=True,
        instance_mask_format="bitmask",
    )
    assert repr(from_cfg) == repr(by_hand)
    for seed in range(4):
        seed_generator(seed)
        a = from_cfg(record)
        seed_generator(seed)
        b = by_hand(record)
        assert torch.equal(a["image"], b["image"])
        assert torch.equal(a["instances"].gt_boxes.tensor, b["instances"].gt_boxes.tensor)
    positional = DatasetMapper(cfg, False)
    assert not positional.is_train and len(positional.augmentations) == 1
    assert DatasetMapper(cfg=cfg, is_train=False).is_train is False
    # keywords beside a config override what it says
    assert DatasetMapper(cfg, True, image_format="BGR").image_format == "BGR"


def test_defaults_for_absent_keys_and_crop_and_vertical_flip():
    kwargs = DatasetMapper.from_config({"MODEL": {}}, True)
    assert kwargs["image_format"] == "BGR"  # detectron2's default INPUT.FORMAT
    assert kwargs["augmentations"][0].short_edge_length == (800,)
    cfg = _config(
        "dict",
        INPUT={
            "CROP": {"ENABLED": True, "TYPE": "absolute", "SIZE": [20, 30]},
            "RANDOM_FLIP": "vertical",
        },
    )
    kwargs = DatasetMapper.from_config(cfg, True)
    crop, _, flip = kwargs["augmentations"]
    assert isinstance(crop, T.RandomCrop) and crop.crop_size == (20, 30)
    assert flip.vertical and kwargs["recompute_boxes"]  # MASK_ON with a crop
    assert len(DatasetMapper.from_config(cfg, False)["augmentations"]) == 1  # no crop/flip
    none = _config("dict", INPUT={"RANDOM_FLIP": "none"})
    assert len(DatasetMapper.from_config(none, True)["augmentations"]) == 1
    with pytest.raises(ValueError, match="RANDOM_FLIP"):
        DatasetMapper.from_config(_config("dict", INPUT={"RANDOM_FLIP": "diagonal"}), True)


def test_keypoint_flip_indices_from_training_metadata(record):
    with isolated_catalogs():
        DatasetCatalog.register("kp_train", list)
        MetadataCatalog.get("kp_train").set(
            keypoint_names=["left", "right"], keypoint_flip_map=[("left", "right")]
        )
        cfg = _config("dict", MODEL={"KEYPOINT_ON": True, "MASK_ON": False})
        mapper = DatasetMapper(cfg, is_train=True)
        assert mapper.use_keypoint and mapper.keypoint_hflip_indices.tolist() == [1, 0]
        out = mapper(record)
        assert isinstance(out["instances"].gt_keypoints, Keypoints)


def test_load_proposals(record):
    cfg = _config(
        "dict",
        MODEL={"LOAD_PROPOSALS": True, "MASK_ON": False, "RPN": {"POST_NMS_TOPK_TRAIN": 1}},
    )
    mapper = DatasetMapper(cfg, is_train=True)
    assert mapper.precomputed_proposal_topk == 1
    assert DatasetMapper.from_config(cfg, False)["precomputed_proposal_topk"] == 1000
    rec = dict(
        record,
        proposal_boxes=np.array([[0, 0, 30, 20], [10, 10, 10, 10], [1, 1, 5, 5]], np.float32),
        proposal_objectness_logits=np.array([0.9, 0.8, 0.1], np.float32),
        proposal_bbox_mode=BoxMode.XYXY_ABS,
    )
    out = mapper(rec)
    proposals = out["proposals"]
    assert isinstance(proposals.proposal_boxes, Boxes) and len(proposals) == 1
    assert proposals.objectness_logits.tolist() == pytest.approx([0.9])
    assert "proposal_boxes" not in out
    assert proposals.image_size == tuple(out["image"].shape[-2:])
    box = proposals.proposal_boxes.tensor[0]
    assert 0 <= float(box[0]) < float(box[2]) <= out["image"].shape[-1]


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: DatasetMapper(True), "augmentations"),
        (lambda: DatasetMapper(), "augmentations"),
        (lambda: DatasetMapper(True, augmentations=[], colour="RGB"), "colour"),
        (lambda: DatasetMapper(True, [T.RandomFlip()]), "augmentations"),
        (lambda: DatasetMapper("yes", augmentations=[]), "is_train"),
        (lambda: DatasetMapper(True, augmentations=[], is_train=False), "is_train"),
        (lambda: DatasetMapper(True, augmentations=[], use_keypoint="no"), "use_keypoint"),
        (lambda: DatasetMapper(True, augmentations="RandomFlip"), "augmentations"),
        (lambda: DatasetMapper(cfg=[1, 2], is_train=True), "cfg"),
        (lambda: DatasetMapper(D2_STYLE, True, False), "augmentations"),
        (lambda: DatasetMapper(D2_STYLE, True, is_train=True), "is_train"),
    ],
)
def test_wrong_calls_are_typed_and_name_the_argument(call, argument):
    with pytest.raises(MapperArgumentError) as info:
        call()
    error = info.value
    assert isinstance(error, CatmapError) and isinstance(error, TypeError)
    assert type(error) is not TypeError
    assert error.argument == argument and argument in str(error)
    back = pickle.loads(pickle.dumps(error))  # crosses from DataLoader workers whole
    assert type(back) is MapperArgumentError and back.argument == argument
    assert type(MapperArgumentError("only a message")).__name__ == "MapperArgumentError"


def test_bad_values_are_value_errors():
    with pytest.raises(ValueError, match="instance_mask_format"):
        DatasetMapper(_config("dict", INPUT={"MASK_FORMAT": "rle"}), True)
    with pytest.raises(ValueError, match="image_format"):
        DatasetMapper(_config("dict", INPUT={"FORMAT": "CMYK"}), True)
