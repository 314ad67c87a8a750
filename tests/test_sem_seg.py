"""load_sem_seg / register_sem_seg: pairing images with label maps by relative path."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

from catalog import DatasetCatalog, MetadataCatalog
from catalog.formats.validate import SemSegPairingError
from catalog.formats.panoptic import load_sem_seg, register_sem_seg

Image = pytest.importorskip("PIL.Image")


def _png(path, value: int, size=(4, 3)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full(size[::-1], value, np.uint8)).save(path)


def _tree(tmp_path, image_names, gt_names):
    for name in image_names:
        _png(tmp_path / "images" / name, 10)
    for name in gt_names:
        _png(tmp_path / "gt" / name, 1)
    return str(tmp_path / "gt"), str(tmp_path / "images")


def test_pairs_by_relative_path_and_stem(tmp_path):
    gt, img = _tree(tmp_path, ["b.jpg", "a.jpg", "sub/c.jpg"], ["a.png", "b.png", "sub/c.png"])
    (tmp_path / "images" / "a.txt").write_text("not an image")
    (tmp_path / "gt" / ".hidden.png").write_bytes(b"")
    records = load_sem_seg(gt, img)
    assert [(r["file_name"], r["sem_seg_file_name"]) for r in records] == [
        (f"{img}/a.jpg", f"{gt}/a.png"),
        (f"{img}/b.jpg", f"{gt}/b.png"),
        (f"{img}/sub/c.jpg", f"{gt}/sub/c.png"),
    ]


def test_same_count_but_different_names_is_not_zipped(tmp_path):
    # detectron2 zips sorted lists of equal length; pairing is by name here.
    gt, img = _tree(tmp_path, ["a.jpg", "b.jpg"], ["a.png", "c.png"])
    records = load_sem_seg(gt, img)
    assert [r["file_name"] for r in records] == [f"{img}/a.jpg"]
    with pytest.raises(SemSegPairingError) as info:
        load_sem_seg(gt, img, strict=True)
    assert f"{gt}/c.png" in str(info.value) and f"{img}/b.jpg" in str(info.value)
    assert f"{gt}/c.png" in info.value.unpaired


def test_intersection_warns_naming_unpaired(tmp_path, caplog):
    gt, img = _tree(tmp_path, ["a.jpg", "b.jpg", "c.jpg"], ["a.png"])
    with caplog.at_level(logging.WARNING, logger="catalog.formats.panoptic"):
        records = load_sem_seg(gt, img, "png", "jpg")
    assert len(records) == 1
    assert "b.jpg" in caplog.text and "1 pairs" in caplog.text


def test_suffix_extensions(tmp_path):
    gt, img = _tree(
        tmp_path,
        ["aachen/aachen_1_leftImg8bit.png"],
        ["aachen/aachen_1_gtFine_labelTrainIds.png", "aachen/aachen_1_gtFine_labelIds.png"],
    )
    records = load_sem_seg(gt, img, "_gtFine_labelTrainIds.png", "_leftImg8bit.png")
    assert records == [
        {
            "file_name": f"{img}/aachen/aachen_1_leftImg8bit.png",
            "sem_seg_file_name": f"{gt}/aachen/aachen_1_gtFine_labelTrainIds.png",
        }
    ]
    with pytest.raises(SemSegPairingError):  # plain extensions: the stems differ
        load_sem_seg(gt, img, ".png", ".png")


def test_errors(tmp_path):
    gt, img = _tree(tmp_path, ["a.jpg"], [])
    (tmp_path / "gt").mkdir()
    with pytest.raises(SemSegPairingError, match="no label maps"):
        load_sem_seg(gt, img)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_sem_seg(str(tmp_path / "missing"), img)
    _png(tmp_path / "gt" / "z.png", 1)
    with pytest.raises(SemSegPairingError, match="z.png") as info:
        load_sem_seg(gt, img)  # no pair at all: an error even when not strict
    err = pickle.loads(pickle.dumps(info.value))
    assert type(err) is SemSegPairingError and err.unpaired == info.value.unpaired
    with pytest.raises(ValueError, match="extension"):
        load_sem_seg(gt, img, gt_ext="")


def test_register_sem_seg(tmp_path):
    gt, img = _tree(tmp_path, ["a.jpg"], ["a.png"])
    name = "test_sem_seg_register"
    try:
        register_sem_seg(name, {"stuff_classes": ["bg", "fg"]}, gt, img)
        meta = MetadataCatalog.get(name)
        assert meta.evaluator_type == "sem_seg" and meta.ignore_label == 255
        assert meta.sem_seg_root == gt and meta.stuff_classes == ["bg", "fg"]
        assert list(DatasetCatalog.get(name)) == load_sem_seg(gt, img)
    finally:
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)


def test_mapper_reads_the_label_map(tmp_path):
    mappers = pytest.importorskip("mappers")
    gt, img = _tree(tmp_path, ["a.jpg"], ["a.png"])
    record = load_sem_seg(gt, img)[0]
    sample = mappers.DatasetMapper(is_train=False, augmentations=[], image_format="RGB")(record)
    assert sample["sem_seg"].shape == (3, 4) and int(sample["sem_seg"].max()) == 1
