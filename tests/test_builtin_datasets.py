"""Builtin dataset names: registered on first use under the dataset root, with metadata."""

from __future__ import annotations

import json
import os
import pickle
import threading
from pathlib import Path

import pytest

from catalog import (
    CatmapError,
    DatasetCatalog,
    DatasetFileNotFoundError,
    DatasetNotRegisteredError,
    MetadataCatalog,
    builtin_dataset_names,
    builtin_dataset_root,
)
from catalog.formats.builtin import (
    ADE20K_SEM_SEG_CATEGORIES,
    BUILTIN_METADATA_KINDS,
    class_colors,
    get_builtin_metadata,
)
from catalog.formats.builtin import LVIS_V1_CLASSES, LVIS_V1_FREQUENCY, LVIS_V1_IMAGE_COUNT

EXPECTED_NAMES = [
    "coco_2014_train", "coco_2014_val", "coco_2014_minival", "coco_2014_valminusminival",
    "coco_2017_train", "coco_2017_val", "coco_2017_test", "coco_2017_test-dev",
    "coco_2017_val_100", "keypoints_coco_2014_train", "keypoints_coco_2014_val",
    "keypoints_coco_2014_minival", "keypoints_coco_2014_valminusminival",
    "keypoints_coco_2017_train", "keypoints_coco_2017_val", "keypoints_coco_2017_val_100",
    "coco_2017_train_panoptic", "coco_2017_train_panoptic_separated",
    "coco_2017_train_panoptic_stuffonly", "coco_2017_val_panoptic",
    "coco_2017_val_panoptic_separated", "coco_2017_val_100_panoptic", "lvis_v1_train",
    "lvis_v1_val", "lvis_v1_test_dev", "lvis_v1_test_challenge", "lvis_v0.5_train",
    "lvis_v0.5_val", "lvis_v0.5_val_rand_100", "lvis_v0.5_test", "lvis_v0.5_train_cocofied",
    "lvis_v0.5_val_cocofied", "voc_2007_train", "voc_2007_val", "voc_2007_trainval",
    "voc_2007_test", "voc_2012_train", "voc_2012_val", "voc_2012_trainval",
    "cityscapes_fine_instance_seg_train", "cityscapes_fine_instance_seg_val",
    "cityscapes_fine_instance_seg_test", "cityscapes_fine_sem_seg_train",
    "cityscapes_fine_sem_seg_val", "cityscapes_fine_sem_seg_test", "ade20k_sem_seg_train",
    "ade20k_sem_seg_val",
]  # fmt: skip


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty dataset root named by CATMAP_DATASETS."""
    monkeypatch.setenv("CATMAP_DATASETS", str(tmp_path))
    monkeypatch.delenv("DETECTRON2_DATASETS", raising=False)
    return tmp_path


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def coco_categories() -> list[dict]:
    meta = get_builtin_metadata("coco")
    return [{"id": cat_id, "name": meta["thing_classes"][i], "supercategory": "x"}
            for cat_id, i in meta["thing_dataset_id_to_contiguous_id"].items()]


def tiny_coco(keypoints: bool = False) -> dict:
    ann = {"id": 1, "image_id": 7, "category_id": 90 if not keypoints else 1,
           "bbox": [1, 2, 3, 4], "iscrowd": 0, "area": 12}
    categories = coco_categories()
    if keypoints:
        names = list(get_builtin_metadata("coco_person")["keypoint_names"])
        categories = [{"id": 1, "name": "person", "keypoints": names, "skeleton": []}]
        ann["keypoints"] = [1, 1, 2] * 17
        ann["num_keypoints"] = 17
    return {"images": [{"id": 7, "file_name": "000000000007.jpg", "height": 10, "width": 12}],
            "annotations": [ann], "categories": categories}


def test_every_builtin_name_is_listed_before_use() -> None:
    names = DatasetCatalog.list()
    assert set(EXPECTED_NAMES) <= set(names)
    assert set(EXPECTED_NAMES) <= set(builtin_dataset_names())
    assert all(name in DatasetCatalog for name in EXPECTED_NAMES)
    assert "coco_2017_vall" not in DatasetCatalog


def test_dataset_root_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CATMAP_DATASETS", raising=False)
    monkeypatch.delenv("DETECTRON2_DATASETS", raising=False)
    assert builtin_dataset_root() == "datasets"
    monkeypatch.setenv("DETECTRON2_DATASETS", "/d2")
    assert builtin_dataset_root() == "/d2"
    monkeypatch.setenv("CATMAP_DATASETS", "~/cm")
    assert builtin_dataset_root() == os.path.expanduser("~/cm")


def test_coco_metadata_without_any_file(root: Path) -> None:
    meta = MetadataCatalog.get("coco_2017_train")
    assert meta.evaluator_type == "coco"
    assert meta.json_file == str(root / "coco" / "annotations" / "instances_train2017.json")
    assert meta.image_root == str(root / "coco" / "train2017")
    assert len(meta.thing_classes) == 80 and meta.thing_classes[0] == "person"
    id_map = meta.thing_dataset_id_to_contiguous_id
    assert sorted(id_map.values()) == list(range(80)) and id_map[1] == 0 and id_map[90] == 79
    colors = meta.thing_colors
    assert len(colors) == 80 and len({tuple(c) for c in colors}) == 80
    assert all(len(c) == 3 and all(0 <= v <= 255 for v in c) for c in colors)
    assert colors == class_colors(80)  # our deterministic rule, the same on every call


def test_keypoint_metadata_is_consistent() -> None:
    meta = MetadataCatalog.get("keypoints_coco_2017_val")
    names = list(meta.keypoint_names)
    assert len(names) == 17 and len(set(names)) == 17 and meta.thing_classes == ["person"]
    flip = dict(meta.keypoint_flip_map)
    flip.update({b: a for a, b in meta.keypoint_flip_map})
    assert len(flip) == 16 and set(flip) <= set(names)
    assert all(flip[flip[k]] == k and flip[k] != k for k in flip)  # an involution
    assert all(k.replace("left_", "right_") == flip[k] for k in flip if k.startswith("left_"))
    assert {n for n in names if n not in flip} == {"nose"}
    for a, b, color in meta.keypoint_connection_rules:
        assert a in names and b in names and len(color) == 3


def test_other_families_metadata() -> None:
    pan = MetadataCatalog.get("coco_2017_val_panoptic")
    assert len(pan.thing_classes) == 133 and len(pan.stuff_classes) == 133
    assert pan.evaluator_type == "coco_panoptic_seg" and pan.label_divisor == 1000
    contiguous = {**pan.thing_dataset_id_to_contiguous_id, **pan.stuff_dataset_id_to_contiguous_id}
    assert sorted(contiguous.values()) == list(range(133))
    sep = MetadataCatalog.get("coco_2017_val_panoptic_separated")
    assert sep.stuff_classes[0] == "things" and len(sep.stuff_classes) == 54
    assert sep.stuff_dataset_id_to_contiguous_id[0] == 0 and len(sep.thing_classes) == 80
    assert MetadataCatalog.get("coco_2017_val_panoptic_stuffonly").evaluator_type == "sem_seg"
    lvis = MetadataCatalog.get("lvis_v1_train")
    assert lvis.evaluator_type == "lvis" and len(lvis.thing_classes) == 1203
    assert len(lvis.class_image_count) == 1203 and set(lvis.class_frequency) == {"r", "c", "f"}
    assert len(MetadataCatalog.get("lvis_v0.5_val").thing_classes) == 1230
    assert len(MetadataCatalog.get("lvis_v0.5_val_cocofied").thing_classes) == 80
    voc = MetadataCatalog.get("voc_2012_val")
    assert (voc.evaluator_type, voc.year, voc.split, len(voc.thing_classes)) == (
        "pascal_voc", 2012, "val", 20)
    city = MetadataCatalog.get("cityscapes_fine_sem_seg_val")
    assert city.evaluator_type == "cityscapes_sem_seg" and city.ignore_label == 255
    assert len(city.stuff_classes) == 19 and len(city.thing_classes) == 8
    assert MetadataCatalog.get("cityscapes_fine_instance_seg_train").evaluator_type == (
        "cityscapes_instance")
    ade = MetadataCatalog.get("ade20k_sem_seg_train")
    assert ade.stuff_classes == list(ADE20K_SEM_SEG_CATEGORIES) and len(ade.stuff_classes) == 150
    for kind in BUILTIN_METADATA_KINDS:
        assert get_builtin_metadata(kind) == get_builtin_metadata(kind)
    with pytest.raises(KeyError, match="known"):
        get_builtin_metadata("imagenet")


def test_coco_loads_from_the_dataset_root(root: Path) -> None:
    write_json(root / "coco" / "annotations" / "instances_val2017.json", tiny_coco())
    records = DatasetCatalog.get("coco_2017_val")
    assert records[0]["file_name"] == str(root / "coco" / "val2017" / "000000000007.jpg")
    assert records[0]["annotations"][0]["category_id"] == 79
    write_json(root / "coco" / "annotations" / "person_keypoints_val2017.json", tiny_coco(True))
    kp = DatasetCatalog.get("keypoints_coco_2017_val")
    assert len(kp[0]["annotations"][0]["keypoints"]) == 51


def test_detectron2_variable_is_honoured(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CATMAP_DATASETS", raising=False)
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path))
    write_json(tmp_path / "coco" / "annotations" / "instances_val2017_100.json", tiny_coco())
    assert len(DatasetCatalog.get("coco_2017_val_100")) == 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("coco_2017_val", "coco/annotations/instances_val2017.json"),
        ("lvis_v1_val", "lvis/lvis_v1_val.json"),
        ("voc_2007_test", "VOC2007/ImageSets/Main/test.txt"),
        ("coco_2017_val_panoptic", "coco/annotations/panoptic_val2017.json"),
        ("coco_2017_val_panoptic_separated", "coco/annotations/instances_val2017.json"),
        ("cityscapes_fine_instance_seg_val", "cityscapes/leftImg8bit/val"),
        ("ade20k_sem_seg_train", "ADEChallengeData2016/images/training"),
    ],
)
def test_missing_files_raise_a_typed_error_naming_the_path(root: Path, name, expected) -> None:
    with pytest.raises(DatasetFileNotFoundError) as info:
        DatasetCatalog.get(name)
    error = info.value
    assert isinstance(error, FileNotFoundError) and isinstance(error, CatmapError)
    assert error.path.rstrip(os.sep) == str(root / expected)
    assert error.dataset == name and error.env_var == "CATMAP_DATASETS"
    message = str(error)
    assert str(root / expected) in message and "CATMAP_DATASETS" in message and name in message
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is DatasetFileNotFoundError and copy.path == error.path


def lvis_v1_tiny() -> dict:
    categories = [
        {"id": i + 1, "name": name, "synonyms": [name], "frequency": LVIS_V1_FREQUENCY[i],
         "image_count": LVIS_V1_IMAGE_COUNT[i], "instance_count": 0, "synset": "x", "def": ""}
        for i, name in enumerate(LVIS_V1_CLASSES)
    ]
    return {
        "images": [{"id": 3, "coco_url": "http://images.cocodataset.org/val2017/3.jpg",
                    "height": 5, "width": 6, "neg_category_ids": [1203],
                    "not_exhaustive_category_ids": []}],
        "annotations": [{"id": 1, "image_id": 3, "category_id": 1203, "bbox": [0, 0, 2, 2],
                         "area": 4, "segmentation": [[0, 0, 2, 0, 2, 2]]}],
        "categories": categories,
    }


def test_lvis_v1_loads_from_the_dataset_root(root: Path) -> None:
    write_json(root / "lvis" / "lvis_v1_val.json", lvis_v1_tiny())
    records = DatasetCatalog.get("lvis_v1_val")
    assert records[0]["file_name"] == str(root / "coco" / "val2017" / "3.jpg")
    assert records[0]["annotations"][0]["category_id"] == 1202
    assert records[0]["neg_category_ids"] == [1203]
    assert MetadataCatalog.get("lvis_v1_val").thing_dataset_id_to_contiguous_id[1203] == 1202


def test_voc_loads_from_the_dataset_root(root: Path) -> None:
    voc = root / "VOC2007"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    (voc / "ImageSets" / "Main" / "test.txt").write_text("000001\n")
    (voc / "Annotations" / "000001.xml").write_text(
        "<annotation><size><width>8</width><height>6</height></size><object><name>dog</name>"
        "<difficult>1</difficult><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>5</xmax>"
        "<ymax>6</ymax></bndbox></object></annotation>"
    )
    records = DatasetCatalog.get("voc_2007_test")
    assert records[0]["annotations"][0]["bbox"] == [1.0, 1.0, 5.0, 6.0]
    assert records[0]["file_name"] == str(voc / "JPEGImages" / "000001.jpg")


def test_ade20k_loads_from_the_dataset_root(root: Path) -> None:
    pytest.importorskip("catalog.formats.panoptic")
    base = root / "ADEChallengeData2016"
    (base / "images" / "validation").mkdir(parents=True)
    (base / "annotations_detectron2" / "validation").mkdir(parents=True)
    (base / "images" / "validation" / "a.jpg").write_bytes(b"x")
    (base / "annotations_detectron2" / "validation" / "a.png").write_bytes(b"x")
    records = DatasetCatalog.get("ade20k_sem_seg_val")
    assert len(records) == 1
    assert records[0]["sem_seg_file_name"].endswith(os.path.join("validation", "a.png"))


def test_a_user_registration_wins_over_the_builtin_name() -> None:
    DatasetCatalog.register("coco_2017_train", lambda: [{"file_name": "mine.jpg"}])
    assert DatasetCatalog.get("coco_2017_train")[0]["file_name"] == "mine.jpg"
    assert "thing_classes" not in MetadataCatalog.get("coco_2017_train")
    assert DatasetCatalog.list().count("coco_2017_train") == 1


def test_remove_pop_and_clear_cover_builtin_names() -> None:
    DatasetCatalog.remove("coco_2014_val")
    assert "coco_2014_val" not in DatasetCatalog and "coco_2014_val" not in DatasetCatalog.list()
    with pytest.raises(DatasetNotRegisteredError):
        DatasetCatalog.get("coco_2014_val")
    loader = DatasetCatalog.pop("voc_2012_train")
    assert callable(loader) and "voc_2012_train" not in DatasetCatalog
    assert DatasetCatalog.pop("voc_2012_train", None) is None
    with pytest.raises(KeyError):
        DatasetCatalog.pop("voc_2012_train")
    DatasetCatalog.clear()
    assert DatasetCatalog.list() == [] and len(DatasetCatalog) == 0
    assert "thing_classes" not in MetadataCatalog.get("coco_2017_val")  # not re-registered


def test_pop_returns_the_registered_function() -> None:
    def load() -> list[dict]:
        return [{"a": 1}]

    DatasetCatalog.register("pop_me", load)
    assert DatasetCatalog.pop("pop_me") is load
    meta = MetadataCatalog.get("pop_meta")
    assert MetadataCatalog.pop("pop_meta") is meta and "pop_meta" not in MetadataCatalog
    assert MetadataCatalog.pop("pop_meta", "default") == "default"
    with pytest.raises(KeyError):
        MetadataCatalog.pop("pop_meta")


def test_concurrent_first_use_registers_once(root: Path) -> None:
    write_json(root / "coco" / "annotations" / "instances_val2017.json", tiny_coco())
    results, errors = [], []

    def worker() -> None:
        try:
            results.append(DatasetCatalog.get("coco_2017_val")[0]["image_id"])
        except Exception as exc:  # collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == [7] * 8


def test_coco_panoptic_families_load_from_the_dataset_root(root: Path) -> None:
    pytest.importorskip("catalog.formats.panoptic")
    pytest.importorskip("catalog.formats.panoptic")
    coco = root / "coco"
    for sub in ("val2017", "panoptic_val2017", "panoptic_stuff_val2017"):
        (coco / sub).mkdir(parents=True)
    (coco / "val2017" / "000000000007.jpg").write_bytes(b"x")
    (coco / "panoptic_val2017" / "000000000007.png").write_bytes(b"x")
    (coco / "panoptic_stuff_val2017" / "000000000007.png").write_bytes(b"x")
    segments = [{"id": 3, "category_id": 90, "iscrowd": 0, "bbox": [0, 0, 1, 1], "area": 1},
                {"id": 5, "category_id": 200, "iscrowd": 0, "bbox": [0, 0, 1, 1], "area": 1}]
    write_json(coco / "annotations" / "panoptic_val2017.json", {
        "images": [{"id": 7, "file_name": "000000000007.jpg", "height": 10, "width": 12}],
        "annotations": [{"image_id": 7, "file_name": "000000000007.png",
                         "segments_info": segments}],
        "categories": coco_categories(),
    })
    write_json(coco / "annotations" / "instances_val2017.json", tiny_coco())
    pan = DatasetCatalog.get("coco_2017_val_panoptic")[0]
    assert [s["category_id"] for s in pan["segments_info"]] == [79, 132]  # things, then stuff
    assert pan["pan_seg_file_name"] == str(coco / "panoptic_val2017" / "000000000007.png")
    separated = DatasetCatalog.get("coco_2017_val_panoptic_separated")[0]
    assert separated["annotations"][0]["category_id"] == 79
    assert separated["sem_seg_file_name"] == str(coco / "panoptic_stuff_val2017" /
                                                 "000000000007.png")
    stuff = DatasetCatalog.get("coco_2017_val_panoptic_stuffonly")
    assert [r["file_name"] for r in stuff] == [str(coco / "val2017" / "000000000007.jpg")]


def test_cityscapes_loads_from_the_dataset_root(root: Path) -> None:
    pytest.importorskip("catalog.formats.cityscapes")
    images = root / "cityscapes" / "leftImg8bit" / "val" / "aachen"
    labels = root / "cityscapes" / "gtFine" / "val" / "aachen"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    base = "aachen_000000_000019"
    (images / f"{base}_leftImg8bit.png").write_bytes(b"x")
    for suffix in ("labelTrainIds", "instanceIds", "labelIds"):
        (labels / f"{base}_gtFine_{suffix}.png").write_bytes(b"x")
    write_json(labels / f"{base}_gtFine_polygons.json", {
        "imgHeight": 8, "imgWidth": 10,
        "objects": [{"label": "car", "polygon": [[1, 1], [5, 1], [5, 5], [1, 5]]}],
    })
    semantic = DatasetCatalog.get("cityscapes_fine_sem_seg_val")[0]
    assert semantic["sem_seg_file_name"].endswith(f"{base}_gtFine_labelTrainIds.png")
    instances = DatasetCatalog.get("cityscapes_fine_instance_seg_val")[0]
    classes = MetadataCatalog.get("cityscapes_fine_instance_seg_val").thing_classes
    assert [classes[a["category_id"]] for a in instances["annotations"]] == ["car"]
