"""detectron2's builtin datasets (COCO, LVIS, Pascal VOC, Cityscapes, ADE20K): their
metadata (class names, ids, keypoints, colors; LVIS categories from ``catalog/data``) and
their names, registered on first use under the dataset root.
"""

from __future__ import annotations

import colorsys
import functools
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..dataset_catalog import DatasetCatalog
from .._common import CatmapErrorWithFields, DatasetAlreadyRegisteredError, DatasetFileNotFoundError
from ..metadata import MetadataCatalog
from . import cityscapes
from .coco import load_coco_json, register_coco_instances, register_lvis_instances
from .files import set_metadata
from .panoptic import load_sem_seg, merge_to_panoptic, register_coco_panoptic
from .voc import VOC_CLASSES, register_pascal_voc

#: The LVIS versions with a bundled category file, and the file of each (in ``catalog/data``).
LVIS_VERSIONS: dict[str, str] = {"v0.5": "lvis_v0_5_categories.json",
                                 "v1": "lvis_v1_categories.json"}

_FORMAT = "catmap-lvis-categories"
_MAX_FILE_BYTES = 1 << 20  # the bundled files are ~100 KiB; refuse anything far larger
_FREQUENCY_GROUPS = frozenset("rcf")

# Declared here, read from the data files on first access (module __getattr__ below).
#: The class name of LVIS v0.5 category id ``i + 1`` (the first synonym).
LVIS_V0_5_CLASSES: tuple[str, ...]
#: The class name of LVIS v1 category id ``i + 1`` (the first synonym).
LVIS_V1_CLASSES: tuple[str, ...]
#: The frequency group of LVIS v1 category id ``i + 1``: one character "r", "c" or "f" each.
LVIS_V1_FREQUENCY: str
#: How many LVIS v1 train images contain category id ``i + 1``.
LVIS_V1_IMAGE_COUNT: tuple[int, ...]

# Module attribute -> (LVIS version, LvisCategories field); read lazily by __getattr__.
_LAZY_ATTRIBUTES: dict[str, tuple[str, str]] = {"LVIS_V0_5_CLASSES": ("v0.5", "classes"),
                                                "LVIS_V1_CLASSES": ("v1", "classes"),
                                                "LVIS_V1_FREQUENCY": ("v1", "frequency"),
                                                "LVIS_V1_IMAGE_COUNT": ("v1", "image_count")}


class LvisCategoriesError(CatmapErrorWithFields, ValueError):
    """An unknown LVIS version was asked for, or its bundled category file is missing or
    malformed (a broken install).
    """

    field_names = ("version", "path", "index", "key")


@dataclass(frozen=True)
class LvisCategories:
    """The categories of one LVIS version; item ``i`` of each field is category id ``i + 1``."""

    version: str
    classes: tuple[str, ...]
    frequency: str | None = None
    image_count: tuple[int, ...] | None = None


@functools.cache
def lvis_categories(version: str) -> LvisCategories:
    """The bundled categories of LVIS ``version``, read and checked once per process."""
    if version not in LVIS_VERSIONS:
        raise LvisCategoriesError(
            f"unknown LVIS version {version!r}; bundled category files: {sorted(LVIS_VERSIONS)}",
            version=version)
    path = resources.files("catalog").joinpath("data", LVIS_VERSIONS[version])
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LvisCategoriesError(
            f"cannot read the LVIS {version} category file {path}: {exc} (reinstall catmap; "
            "the file is package data)", version=version, path=str(path)) from exc
    if len(raw) > _MAX_FILE_BYTES:
        raise LvisCategoriesError(
            f"the LVIS {version} category file {path} is larger than {_MAX_FILE_BYTES} bytes",
            version=version, path=str(path))
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise LvisCategoriesError(
            f"the LVIS {version} category file {path} is not valid JSON: {exc}",
            version=version, path=str(path)) from exc
    return _parse(document, version, str(path))


def _parse(document: Any, version: str, path: str) -> LvisCategories:
    """Check a decoded category file and build its :class:`LvisCategories`."""

    def fail(what: str, index: int | None = None, key: str | None = None) -> LvisCategoriesError:
        where = "" if index is None else f", category record {index}"
        return LvisCategoriesError(f"the LVIS {version} category file {path}{where}: {what}",
                                   version=version, path=path, index=index, key=key)

    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise fail(f"is not a {_FORMAT!r} document", key="format")
    if document.get("version") != version:
        raise fail(f"holds version {document.get('version')!r}, not {version!r}", key="version")
    records = document.get("categories")
    if not isinstance(records, list) or not records:
        raise fail("'categories' is not a non-empty list", key="categories")
    keys = frozenset(records[0]) if isinstance(records[0], dict) else frozenset()
    if not {"id", "name"} <= keys <= {"id", "name", "frequency", "image_count"}:
        raise fail(f"unexpected keys {sorted(keys)}", index=0)
    for index, record in enumerate(records):
        if not isinstance(record, dict) or frozenset(record) != keys:
            raise fail(f"is not an object with the keys {sorted(keys)}", index=index)
        if type(record["id"]) is not int or record["id"] != index + 1:
            raise fail(f"id {record['id']!r} is not {index + 1} (ids run 1..N)", index, "id")
        if not isinstance(record["name"], str) or not record["name"]:
            raise fail(f"name {record['name']!r} is not a non-empty string", index, "name")
        if "frequency" in keys and record["frequency"] not in _FREQUENCY_GROUPS:
            raise fail(f"frequency {record['frequency']!r} is not 'r', 'c' or 'f'", index,
                       "frequency")
        count = record.get("image_count", 0)
        if "image_count" in keys and (type(count) is not int or count < 0):
            raise fail(f"image_count {count!r} is not an int >= 0", index, "image_count")
    return LvisCategories(
        version=version, classes=tuple(record["name"] for record in records),
        frequency=("".join(r["frequency"] for r in records) if "frequency" in keys else None),
        image_count=(tuple(r["image_count"] for r in records) if "image_count" in keys else None))


def __getattr__(name: str) -> Any:
    """Read ``LVIS_V0_5_CLASSES``, ``LVIS_V1_CLASSES``, ... from the data files on first use."""
    if name not in _LAZY_ATTRIBUTES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    version, field = _LAZY_ATTRIBUTES[name]
    return getattr(lvis_categories(version), field)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))

#: The 80 COCO thing categories as (COCO id, name), by id.
COCO_THING_CATEGORIES: tuple[tuple[int, str], ...] = (
    (1, 'person'), (2, 'bicycle'), (3, 'car'), (4, 'motorcycle'), (5, 'airplane'), (6, 'bus'),
    (7, 'train'), (8, 'truck'), (9, 'boat'), (10, 'traffic light'), (11, 'fire hydrant'),
    (13, 'stop sign'), (14, 'parking meter'), (15, 'bench'), (16, 'bird'), (17, 'cat'),
    (18, 'dog'), (19, 'horse'), (20, 'sheep'), (21, 'cow'), (22, 'elephant'), (23, 'bear'),
    (24, 'zebra'), (25, 'giraffe'), (27, 'backpack'), (28, 'umbrella'), (31, 'handbag'),
    (32, 'tie'), (33, 'suitcase'), (34, 'frisbee'), (35, 'skis'), (36, 'snowboard'),
    (37, 'sports ball'), (38, 'kite'), (39, 'baseball bat'), (40, 'baseball glove'),
    (41, 'skateboard'), (42, 'surfboard'), (43, 'tennis racket'), (44, 'bottle'),
    (46, 'wine glass'), (47, 'cup'), (48, 'fork'), (49, 'knife'), (50, 'spoon'), (51, 'bowl'),
    (52, 'banana'), (53, 'apple'), (54, 'sandwich'), (55, 'orange'), (56, 'broccoli'),
    (57, 'carrot'), (58, 'hot dog'), (59, 'pizza'), (60, 'donut'), (61, 'cake'), (62, 'chair'),
    (63, 'couch'), (64, 'potted plant'), (65, 'bed'), (67, 'dining table'), (70, 'toilet'),
    (72, 'tv'), (73, 'laptop'), (74, 'mouse'), (75, 'remote'), (76, 'keyboard'),
    (77, 'cell phone'), (78, 'microwave'), (79, 'oven'), (80, 'toaster'), (81, 'sink'),
    (82, 'refrigerator'), (84, 'book'), (85, 'clock'), (86, 'vase'), (87, 'scissors'),
    (88, 'teddy bear'), (89, 'hair drier'), (90, 'toothbrush'))
#: The 53 COCO panoptic stuff categories as (COCO id, name), by id.
COCO_STUFF_CATEGORIES: tuple[tuple[int, str], ...] = (
    (92, 'banner'), (93, 'blanket'), (95, 'bridge'), (100, 'cardboard'), (107, 'counter'),
    (109, 'curtain'), (112, 'door-stuff'), (118, 'floor-wood'), (119, 'flower'), (122, 'fruit'),
    (125, 'gravel'), (128, 'house'), (130, 'light'), (133, 'mirror-stuff'), (138, 'net'),
    (141, 'pillow'), (144, 'platform'), (145, 'playingfield'), (147, 'railroad'), (148, 'river'),
    (149, 'road'), (151, 'roof'), (154, 'sand'), (155, 'sea'), (156, 'shelf'), (159, 'snow'),
    (161, 'stairs'), (166, 'tent'), (168, 'towel'), (171, 'wall-brick'), (175, 'wall-stone'),
    (176, 'wall-tile'), (177, 'wall-wood'), (178, 'water-other'), (180, 'window-blind'),
    (181, 'window-other'), (184, 'tree-merged'), (185, 'fence-merged'), (186, 'ceiling-merged'),
    (187, 'sky-other-merged'), (188, 'cabinet-merged'), (189, 'table-merged'),
    (190, 'floor-other-merged'), (191, 'pavement-merged'), (192, 'mountain-merged'),
    (193, 'grass-merged'), (194, 'dirt-merged'), (195, 'paper-merged'), (196, 'food-other-merged'),
    (197, 'building-other-merged'), (198, 'rock-merged'), (199, 'wall-other-merged'),
    (200, 'rug-merged'))
_COCO_CATEGORIES = COCO_THING_CATEGORIES + COCO_STUFF_CATEGORIES

#: The 17 COCO person keypoints, in the order of the annotation files.
COCO_PERSON_KEYPOINT_NAMES: tuple[str, ...] = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
    "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
    "left_knee", "right_knee", "left_ankle", "right_ankle",
)  # fmt: skip
#: The keypoints exchanged by a horizontal flip (every left_* with its right_*).
COCO_PERSON_KEYPOINT_FLIP_MAP: tuple[tuple[str, str], ...] = tuple(
    (name, "right_" + name[len("left_"):]) for name in COCO_PERSON_KEYPOINT_NAMES
    if name.startswith("left_"))
_SKELETON = (
    ("left_ear", "left_eye"), ("right_ear", "right_eye"), ("left_eye", "nose"),
    ("nose", "right_eye"), ("left_shoulder", "right_shoulder"), ("left_shoulder", "left_elbow"),
    ("right_shoulder", "right_elbow"), ("left_elbow", "left_wrist"),
    ("right_elbow", "right_wrist"), ("left_hip", "right_hip"), ("left_hip", "left_knee"),
    ("right_hip", "right_knee"), ("left_knee", "left_ankle"), ("right_knee", "right_ankle"),
)  # fmt: skip

#: The 150 ADE20K (SceneParsing) classes, label 0..149 (255 is ignored). Spelled as detectron2
#: spells them (``"window "`` included), so metadata compares equal across the two.
ADE20K_SEM_SEG_CATEGORIES: tuple[str, ...] = (
    'wall', 'building', 'sky', 'floor', 'tree', 'ceiling', 'road, route', 'bed', 'window ',
    'grass', 'cabinet', 'sidewalk, pavement', 'person', 'earth, ground', 'door', 'table',
    'mountain, mount', 'plant', 'curtain', 'chair', 'car', 'water', 'painting, picture', 'sofa',
    'shelf', 'house', 'sea', 'mirror', 'rug', 'field', 'armchair', 'seat', 'fence', 'desk',
    'rock, stone', 'wardrobe, closet, press', 'lamp', 'tub', 'rail', 'cushion',
    'base, pedestal, stand', 'box', 'column, pillar', 'signboard, sign',
    'chest of drawers, chest, bureau, dresser', 'counter', 'sand', 'sink', 'skyscraper',
    'fireplace', 'refrigerator, icebox', 'grandstand, covered stand', 'path', 'stairs', 'runway',
    'case, display case, showcase, vitrine', 'pool table, billiard table, snooker table', 'pillow',
    'screen door, screen', 'stairway, staircase', 'river', 'bridge, span', 'bookcase',
    'blind, screen', 'coffee table', 'toilet, can, commode, crapper, pot, potty, stool, throne',
    'flower', 'book', 'hill', 'bench', 'countertop', 'stove', 'palm, palm tree', 'kitchen island',
    'computer', 'swivel chair', 'boat', 'bar', 'arcade machine',
    'hovel, hut, hutch, shack, shanty', 'bus', 'towel', 'light', 'truck', 'tower', 'chandelier',
    'awning, sunshade, sunblind', 'street lamp', 'booth', 'tv', 'plane', 'dirt track', 'clothes',
    'pole', 'land, ground, soil', 'bannister, banister, balustrade, balusters, handrail',
    'escalator, moving staircase, moving stairway', 'ottoman, pouf, pouffe, puff, hassock',
    'bottle', 'buffet, counter, sideboard', 'poster, posting, placard, notice, bill, card',
    'stage', 'van', 'ship', 'fountain',
    'conveyer belt, conveyor belt, conveyer, conveyor, transporter', 'canopy',
    'washer, automatic washer, washing machine', 'plaything, toy', 'pool', 'stool', 'barrel, cask',
    'basket, handbasket', 'falls', 'tent', 'bag', 'minibike, motorbike', 'cradle', 'oven', 'ball',
    'food, solid food', 'step, stair', 'tank, storage tank', 'trade name', 'microwave', 'pot',
    'animal', 'bicycle', 'lake', 'dishwasher', 'screen', 'blanket, cover', 'sculpture',
    'hood, exhaust hood', 'sconce', 'vase', 'traffic light', 'tray', 'trash can', 'fan', 'pier',
    'crt screen', 'plate', 'monitor', 'bulletin board', 'shower', 'radiator',
    'glass, drinking glass', 'clock', 'flag')


def class_colors(count: int, start: int = 0) -> list[list[int]]:
    """``count`` distinct RGB colors (lists of 3 ints in 0..255), the ``start``-th onwards."""
    colors = []
    for index in range(start, start + count):
        hue = (index * 0.6180339887498949) % 1.0
        saturation = 0.6 + 0.3 * ((index * 0.3819660112501051) % 1.0)
        value = 0.9 - 0.25 * ((index * 0.7548776662466927) % 1.0)
        rgb = colorsys.hsv_to_rgb(hue, saturation, value)
        colors.append([int(round(c * 255)) for c in rgb])
    return colors


#: Lines drawn between keypoints by visualizers: (keypoint, keypoint, RGB color) for each bone
#: of the COCO person skeleton (face, arms, legs).
KEYPOINT_CONNECTION_RULES: tuple[tuple[str, str, tuple[int, ...]], ...] = tuple(
    (a, b, tuple(color)) for (a, b), color in zip(
        _SKELETON, class_colors(len(_SKELETON), start=len(_COCO_CATEGORIES) + 1), strict=True))


def _coco_instances() -> dict[str, Any]:
    return {
        "thing_classes": [name for _, name in COCO_THING_CATEGORIES],
        "thing_dataset_id_to_contiguous_id": {
            cat_id: i for i, (cat_id, _) in enumerate(COCO_THING_CATEGORIES)
        }, "thing_colors": class_colors(len(COCO_THING_CATEGORIES))}


def _coco_person() -> dict[str, Any]:
    return {"thing_classes": ["person"], "keypoint_names": COCO_PERSON_KEYPOINT_NAMES,
            "keypoint_flip_map": COCO_PERSON_KEYPOINT_FLIP_MAP,
            "keypoint_connection_rules": list(KEYPOINT_CONNECTION_RULES)}


def _coco_panoptic_separated() -> dict[str, Any]:
    # Semantic label 0 is "things" (every thing pixel); stuff categories follow from 1.
    meta = {
        "stuff_classes": ["things"]
        + [name.replace("-other", "").replace("-merged", "") for _, name in COCO_STUFF_CATEGORIES],
        "stuff_colors": class_colors(1, start=len(_COCO_CATEGORIES))
        + class_colors(len(COCO_STUFF_CATEGORIES), start=len(COCO_THING_CATEGORIES)),
        "stuff_dataset_id_to_contiguous_id": {
            0: 0, **{cat_id: i + 1 for i, (cat_id, _) in enumerate(COCO_STUFF_CATEGORIES)}
        }}
    meta.update(_coco_instances())
    return meta


def _coco_panoptic_standard() -> dict[str, Any]:
    # One contiguous id per category, things first; names and colors under both prefixes.
    names = [name for _, name in _COCO_CATEGORIES]
    colors = class_colors(len(_COCO_CATEGORIES))
    return {
        "thing_classes": names, "thing_colors": colors, "stuff_classes": list(names),
        "stuff_colors": [list(c) for c in colors], "thing_dataset_id_to_contiguous_id": {
            cat_id: i for i, (cat_id, _) in enumerate(COCO_THING_CATEGORIES)
        }, "stuff_dataset_id_to_contiguous_id": {
            cat_id: i + len(COCO_THING_CATEGORIES)
            for i, (cat_id, _) in enumerate(COCO_STUFF_CATEGORIES)
        }}


def _lvis_v1() -> dict[str, Any]:
    cats = lvis_categories("v1")
    return {
        "thing_classes": list(cats.classes), "class_image_count": [
            {"id": i + 1, "image_count": n} for i, n in enumerate(cats.image_count or ())
        ], "class_frequency": list(cats.frequency or "")}


_BUILDERS = {
    "coco": _coco_instances, "coco_person": _coco_person,
    "coco_panoptic_separated": _coco_panoptic_separated,
    "coco_panoptic_standard": _coco_panoptic_standard, "lvis_v1": _lvis_v1,
    "lvis_v0.5": lambda: {"thing_classes": list(lvis_categories("v0.5").classes)},
    "lvis_v0.5_cocofied": _coco_instances,
    "cityscapes": lambda: {"thing_classes": list(cityscapes.THING_CLASSES),
                           "stuff_classes": list(cityscapes.STUFF_CLASSES)},
    "ade20k": lambda: {"stuff_classes": list(ADE20K_SEM_SEG_CATEGORIES)},
    "pascal_voc": lambda: {"thing_classes": list(VOC_CLASSES)},
}  # fmt: skip
#: The kinds :func:`get_builtin_metadata` knows.
BUILTIN_METADATA_KINDS = tuple(_BUILDERS)


def get_builtin_metadata(kind: str) -> dict[str, Any]:
    """The builtin metadata of a dataset family, as a fresh dict."""
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise KeyError(f"no builtin metadata for {kind!r}; known: {', '.join(_BUILDERS)}")
    return builder()

#: The environment variables naming the dataset root, first set one wins.
DATASET_ROOT_ENV_VARS = ("CATMAP_DATASETS", "DETECTRON2_DATASETS")
_DEFAULT_ROOT = "datasets"

_COCO_INSTANCES = {
    "coco_2014_train": ("coco/train2014", "coco/annotations/instances_train2014.json"),
    "coco_2014_val": ("coco/val2014", "coco/annotations/instances_val2014.json"),
    "coco_2014_minival": ("coco/val2014", "coco/annotations/instances_minival2014.json"),
    "coco_2014_valminusminival": (
        "coco/val2014", "coco/annotations/instances_valminusminival2014.json"),
    "coco_2017_train": ("coco/train2017", "coco/annotations/instances_train2017.json"),
    "coco_2017_val": ("coco/val2017", "coco/annotations/instances_val2017.json"),
    "coco_2017_test": ("coco/test2017", "coco/annotations/image_info_test2017.json"),
    "coco_2017_test-dev": ("coco/test2017", "coco/annotations/image_info_test-dev2017.json"),
    "coco_2017_val_100": ("coco/val2017", "coco/annotations/instances_val2017_100.json"),
}  # fmt: skip
_COCO_PERSON = {
    f"keypoints_coco_{split}": (f"coco/{images}", f"coco/annotations/person_keypoints_{ann}.json")
    for split, images, ann in (
        ("2014_train", "train2014", "train2014"), ("2014_val", "val2014", "val2014"),
        ("2014_minival", "val2014", "minival2014"),
        ("2014_valminusminival", "val2014", "valminusminival2014"),
        ("2017_train", "train2017", "train2017"), ("2017_val", "val2017", "val2017"),
        ("2017_val_100", "val2017", "val2017_100"))
}
# COCO split -> (name part of the panoptic files, of the stuff label dir); images as the split's.
_COCO_PANOPTIC = {"coco_2017_train": ("train2017", "train2017"),
                  "coco_2017_val": ("val2017", "val2017"),
                  "coco_2017_val_100": ("val2017_100", "val2017_100")}
_LVIS = {
    "lvis_v1": {"lvis_v1_train": "lvis/lvis_v1_train.json", "lvis_v1_val": "lvis/lvis_v1_val.json",
                "lvis_v1_test_dev": "lvis/lvis_v1_image_info_test_dev.json",
                "lvis_v1_test_challenge": "lvis/lvis_v1_image_info_test_challenge.json"},
    "lvis_v0.5": {"lvis_v0.5_train": "lvis/lvis_v0.5_train.json",
                  "lvis_v0.5_val": "lvis/lvis_v0.5_val.json",
                  "lvis_v0.5_val_rand_100": "lvis/lvis_v0.5_val_rand_100.json",
                  "lvis_v0.5_test": "lvis/lvis_v0.5_image_info_test.json"},
    "lvis_v0.5_cocofied": {"lvis_v0.5_train_cocofied": "lvis/lvis_v0.5_train_cocofied.json",
                           "lvis_v0.5_val_cocofied": "lvis/lvis_v0.5_val_cocofied.json"},
}  # fmt: skip
_VOC = {
    f"voc_{year}_{split}": (f"VOC{year}", split, year)
    for year, splits in ((2007, ("trainval", "train", "val", "test")),
                         (2012, ("trainval", "train", "val")))
    for split in splits
}  # fmt: skip
_CITYSCAPES_SPLITS = ("train", "val", "test")


def builtin_dataset_root() -> str:
    """The dataset root: ``$CATMAP_DATASETS``, else ``$DETECTRON2_DATASETS``, else
    ``datasets`` (relative to the working directory); ``~`` is expanded.
    """
    for var in DATASET_ROOT_ENV_VARS:
        value = os.environ.get(var)
        if value:
            return os.path.expanduser(value)
    return _DEFAULT_ROOT


def _root_source() -> str:
    var = next((var for var in DATASET_ROOT_ENV_VARS if os.environ.get(var)), None)
    names = " nor $".join(DATASET_ROOT_ENV_VARS)
    return f"${var}" if var else f"the default, as neither ${names} is set"


def _missing(name: str, root: str, path: str, what: str) -> DatasetFileNotFoundError:
    relative = os.path.relpath(path, root) if path.startswith(root) else path
    return DatasetFileNotFoundError(
        f"builtin dataset {name!r}: the {what} {path!r} does not exist. Builtin datasets are "
        f"read under the dataset root {root!r} ({os.path.abspath(root)!r}; {_root_source()}); "
        "set CATMAP_DATASETS "
        f"(or DETECTRON2_DATASETS) to the directory that holds {relative!r}, or register the "
        "dataset yourself under another name.",
        path=path, dataset=name, env_var=DATASET_ROOT_ENV_VARS[0])


def _checked(name: str, root: str, needs: list[tuple[str, str, bool]],
             load: Callable[[], Any]) -> Callable[[], Any]:
    """``load`` preceded by a check that every ``(path, what, is_dir)`` in ``needs`` exists."""

    def checked_load() -> Any:
        for path, what, is_dir in needs:
            if not (os.path.isdir(path) if is_dir else os.path.isfile(path)):
                raise _missing(name, root, path, what)
        return load()

    checked_load.__qualname__ = f"builtin_loader[{name}]"
    return checked_load


def _guard_entry(name: str, root: str, needs: list[tuple[str, str, bool]]) -> None:
    """Wrap the loader just registered under ``name`` with the file checks of :func:`_checked`."""
    entry = DatasetCatalog.entry(name)
    entry.func = _checked(name, root, needs, entry.func)


def _register_checked(name: str, root: str, needs: list[tuple[str, str, bool]],
                      load: Callable[[], Any], metadata: dict[str, Any]) -> None:
    DatasetCatalog.register(name, _checked(name, root, needs, load))
    set_metadata(name, metadata)


def _coco(kind: str, image_dir: str, json_rel: str, name: str, root: str, *,
          register: Callable[..., None] = register_coco_instances,
          what: str = "annotation file") -> None:
    json_file = os.path.join(root, json_rel)
    register(name, get_builtin_metadata(kind), json_file, os.path.join(root, image_dir))
    _guard_entry(name, root, [(json_file, what, False)])


def _voc(dirname: str, split: str, year: int, name: str, root: str) -> None:
    path = os.path.join(root, dirname)
    register_pascal_voc(name, path, split, year)
    MetadataCatalog.get(name).set(evaluator_type="pascal_voc")
    split_file = os.path.join(path, "ImageSets", "Main", split + ".txt")
    _guard_entry(name, root, [(split_file, "Pascal VOC split file", False)])


def _panoptic_paths(prefix: str, root: str) -> dict[str, str]:
    image_dir, instances_rel = _COCO_INSTANCES[prefix]
    pan, stuff = _COCO_PANOPTIC[prefix]
    return {"image_root": os.path.join(root, image_dir),
            "json_file": os.path.join(root, instances_rel),
            "panoptic_root": os.path.join(root, "coco", f"panoptic_{pan}"),
            "panoptic_json": os.path.join(root, "coco", "annotations", f"panoptic_{pan}.json"),
            "sem_seg_root": os.path.join(root, "coco", f"panoptic_stuff_{stuff}")}


def _panoptic_standard(prefix: str, name: str, root: str) -> None:
    p = _panoptic_paths(prefix, root)
    register_coco_panoptic(name, get_builtin_metadata("coco_panoptic_standard"), p["image_root"],
                           p["panoptic_root"], p["panoptic_json"], p["json_file"])
    _guard_entry(name, root, [(p["panoptic_json"], "panoptic annotation file", False),
                              (p["panoptic_root"], "panoptic PNG directory", True)])


def _panoptic_separated(prefix: str, name: str, root: str) -> None:
    p = _panoptic_paths(prefix, root)
    _register_checked(
        name, root, [(p["json_file"], "instances annotation file", False),
         (p["sem_seg_root"], "semantic label directory", True)],
        lambda: merge_to_panoptic(load_coco_json(p["json_file"], p["image_root"], name),
                                  load_sem_seg(p["sem_seg_root"], p["image_root"])),
        {**p, "evaluator_type": "coco_panoptic_seg", "ignore_label": 255,
         **get_builtin_metadata("coco_panoptic_separated")})


def _panoptic_stuffonly(prefix: str, name: str, root: str) -> None:
    p = _panoptic_paths(prefix, root)
    _register_checked(
        name, root, [(p["sem_seg_root"], "semantic label directory", True),
         (p["image_root"], "image directory", True)],
        lambda: load_sem_seg(p["sem_seg_root"], p["image_root"]),
        {"sem_seg_root": p["sem_seg_root"], "image_root": p["image_root"],
         "evaluator_type": "sem_seg", "ignore_label": 255,
         **get_builtin_metadata("coco_panoptic_separated")})


def _cityscapes(split: str, task: str, name: str, root: str) -> None:
    image_dir = os.path.join(root, "cityscapes", "leftImg8bit", split, "")
    gt_dir = os.path.join(root, "cityscapes", "gtFine", split, "")
    metadata: dict[str, Any] = {"image_dir": image_dir, "gt_dir": gt_dir}
    if task == "instance_seg":
        metadata["evaluator_type"] = "cityscapes_instance"
        def load() -> list[dict]:
            return cityscapes.load_cityscapes_instances(
                image_dir, gt_dir, from_json=True, to_polygons=True)
    else:
        metadata.update(evaluator_type="cityscapes_sem_seg", ignore_label=255)
        def load() -> list[dict]:
            return cityscapes.load_cityscapes_semantic(image_dir, gt_dir)
    needs = [(image_dir, "image directory", True), (gt_dir, "ground-truth directory", True)]
    _register_checked(name, root, needs, load, {**metadata, **get_builtin_metadata("cityscapes")})


def _ade20k(split_dir: str, name: str, root: str) -> None:
    base = os.path.join(root, "ADEChallengeData2016")
    image_dir = os.path.join(base, "images", split_dir)
    gt_dir = os.path.join(base, "annotations_detectron2", split_dir)
    needs = [(image_dir, "image directory", True), (gt_dir, "label directory", True)]
    _register_checked(
        name, root, needs, lambda: load_sem_seg(gt_dir, image_dir, gt_ext="png", image_ext="jpg"),
        {"image_root": image_dir, "sem_seg_root": gt_dir, "evaluator_type": "sem_seg",
         "ignore_label": 255, **get_builtin_metadata("ade20k")})


def _registrars() -> dict[str, Callable[[str, str], None]]:
    """Each builtin name -> its ``register(name, root)``, in detectron2's order of families."""
    partial = functools.partial
    out: dict[str, Callable[[str, str], None]] = {}
    for name, (image_dir, json_rel) in _COCO_INSTANCES.items():
        out[name] = partial(_coco, "coco", image_dir, json_rel)
    for name, (image_dir, json_rel) in _COCO_PERSON.items():
        out[name] = partial(_coco, "coco_person", image_dir, json_rel)
    for prefix in _COCO_PANOPTIC:
        out[prefix + "_panoptic_separated"] = partial(_panoptic_separated, prefix)
        out[prefix + "_panoptic_stuffonly"] = partial(_panoptic_stuffonly, prefix)
        out[prefix + "_panoptic"] = partial(_panoptic_standard, prefix)
    for kind, splits in _LVIS.items():
        for name, json_rel in splits.items():
            out[name] = partial(_coco, kind, os.path.join("coco", ""), json_rel,
                                register=register_lvis_instances, what="LVIS annotation file")
    for split in _CITYSCAPES_SPLITS:
        for task in ("instance_seg", "sem_seg"):
            out[f"cityscapes_fine_{task}_{split}"] = partial(_cityscapes, split, task)
    for name, (dirname, split, year) in _VOC.items():
        out[name] = partial(_voc, dirname, split, year)
    for split, split_dir in (("train", "training"), ("val", "validation")):
        out[f"ade20k_sem_seg_{split}"] = partial(_ade20k, split_dir)
    return out


class _BuiltinProvider:
    """The lazy provider installed in DatasetCatalog: registers a builtin name on first use."""

    def __init__(self, registrars: dict[str, Callable[[str, str], None]]) -> None:
        self._registrars = registrars
        self._names = list(registrars)
        self._lock = threading.RLock()
        self._busy: set[str] = set()

    def names(self) -> list[str]:
        return self._names

    def materialize(self, name: str) -> bool:
        register = self._registrars.get(name)
        if register is None:
            return False
        with self._lock:
            if name in self._busy:  # MetadataCatalog.get(name) while registering name
                return False
            self._busy.add(name)
            try:
                register(name, builtin_dataset_root())
            except DatasetAlreadyRegisteredError:
                return False  # registered meanwhile (by the user or another thread): theirs
            finally:
                self._busy.discard(name)
        return True


_PROVIDER = _BuiltinProvider(_registrars())


def builtin_dataset_names() -> list[str]:
    """Every builtin dataset name, registered yet or not, in detectron2's order of families."""
    return list(_PROVIDER.names())


DatasetCatalog._set_lazy_provider(_PROVIDER)
MetadataCatalog._on_missing = DatasetCatalog._materialize
