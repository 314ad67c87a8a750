"""detectron2's builtin dataset names (COCO, LVIS, Pascal VOC, Cityscapes, ADE20K), registered
on first use under a dataset root.

Every builtin name is listed by ``DatasetCatalog.list()`` and answers ``name in
DatasetCatalog`` from import on; the first ``DatasetCatalog.get(name)``,
``MetadataCatalog.get(name)`` or ``DatasetCatalog.pop(name)`` registers it (nothing is read
then; the files are read at the first ``get`` of the records, as for any registration). A name
registered by the user before its first use is the user's: the builtin one is never
registered over it. ``DatasetCatalog.remove(name)`` and ``DatasetCatalog.clear()`` remove
builtin names as well, as in detectron2.

The dataset root is ``$CATMAP_DATASETS``, else ``$DETECTRON2_DATASETS``, else ``./datasets``,
read when a name is first used. The layout under it is detectron2's (``coco/``, ``lvis/``,
``VOC2007/``, ``VOC2012/``, ``cityscapes/``, ``ADEChallengeData2016/``). A missing file raises
:class:`~catalog.errors.DatasetFileNotFoundError` naming the expected path and the variable
to set.

Example:
    >>> import catalog
    >>> "coco_2017_val" in catalog.DatasetCatalog
    True
    >>> len(catalog.MetadataCatalog.get("coco_2017_val").thing_classes)
    80
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from .builtin_metadata import get_builtin_metadata
from .coco import register_coco_instances
from .dataset_catalog import DatasetCatalog
from .errors import DatasetAlreadyRegisteredError, DatasetFileNotFoundError
from .lvis import register_lvis_instances
from .metadata import MetadataCatalog
from .pascal_voc import register_pascal_voc

__all__ = [
    "DATASET_ROOT_ENV_VARS",
    "builtin_dataset_names",
    "builtin_dataset_root",
]

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
        ("2014_train", "train2014", "train2014"),
        ("2014_val", "val2014", "val2014"),
        ("2014_minival", "val2014", "minival2014"),
        ("2014_valminusminival", "val2014", "valminusminival2014"),
        ("2017_train", "train2017", "train2017"),
        ("2017_val", "val2017", "val2017"),
        ("2017_val_100", "val2017", "val2017_100"),
    )
}
# prefix -> (panoptic PNG dir, panoptic json, semantic (stuff) label dir); the images and the
# instances file are those of the COCO split named by the prefix.
_COCO_PANOPTIC = {
    "coco_2017_train": ("train2017", "train2017"),
    "coco_2017_val": ("val2017", "val2017"),
    "coco_2017_val_100": ("val2017_100", "val2017_100"),
}
_LVIS = {
    "lvis_v1": {
        "lvis_v1_train": "lvis/lvis_v1_train.json",
        "lvis_v1_val": "lvis/lvis_v1_val.json",
        "lvis_v1_test_dev": "lvis/lvis_v1_image_info_test_dev.json",
        "lvis_v1_test_challenge": "lvis/lvis_v1_image_info_test_challenge.json",
    },
    "lvis_v0.5": {
        "lvis_v0.5_train": "lvis/lvis_v0.5_train.json",
        "lvis_v0.5_val": "lvis/lvis_v0.5_val.json",
        "lvis_v0.5_val_rand_100": "lvis/lvis_v0.5_val_rand_100.json",
        "lvis_v0.5_test": "lvis/lvis_v0.5_image_info_test.json",
    },
    "lvis_v0.5_cocofied": {
        "lvis_v0.5_train_cocofied": "lvis/lvis_v0.5_train_cocofied.json",
        "lvis_v0.5_val_cocofied": "lvis/lvis_v0.5_val_cocofied.json",
    },
}
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

    Example:
        >>> import os
        >>> os.environ["CATMAP_DATASETS"] = "/data/sets"
        >>> builtin_dataset_root()
        '/data/sets'
        >>> del os.environ["CATMAP_DATASETS"]
    """
    for var in DATASET_ROOT_ENV_VARS:
        value = os.environ.get(var)
        if value:
            return os.path.expanduser(value)
    return _DEFAULT_ROOT


def _root_source() -> str:
    for var in DATASET_ROOT_ENV_VARS:
        if os.environ.get(var):
            return f"${var}"
    return f"the default, as neither ${' nor $'.join(DATASET_ROOT_ENV_VARS)} is set"


def _missing(name: str, root: str, path: str, what: str) -> DatasetFileNotFoundError:
    relative = os.path.relpath(path, root) if path.startswith(root) else path
    return DatasetFileNotFoundError(
        f"builtin dataset {name!r}: the {what} {path!r} does not exist. Builtin datasets are "
        f"read under the dataset root {root!r} ({os.path.abspath(root)!r}; {_root_source()}); "
        "set CATMAP_DATASETS "
        f"(or DETECTRON2_DATASETS) to the directory that holds {relative!r}, or register the "
        "dataset yourself under another name.",
        path=path,
        dataset=name,
        env_var=DATASET_ROOT_ENV_VARS[0],
    )


def _checked(
    name: str, root: str, needs: list[tuple[str, str, bool]], load: Callable[[], Any]
) -> Callable[[], Any]:
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


def _register_checked(
    name: str, root: str, needs: list[tuple[str, str, bool]], load: Callable[[], Any],
    metadata: dict[str, Any],
) -> None:
    DatasetCatalog.register(name, _checked(name, root, needs, load))
    try:
        MetadataCatalog.get(name).set(**metadata)
    except Exception:
        DatasetCatalog.remove(name)
        raise


def _coco(kind: str, image_dir: str, json_rel: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        json_file = os.path.join(root, json_rel)
        register_coco_instances(name, get_builtin_metadata(kind), json_file,
                                os.path.join(root, image_dir))
        _guard_entry(name, root, [(json_file, "annotation file", False)])

    return register


def _lvis(kind: str, json_rel: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        json_file = os.path.join(root, json_rel)
        register_lvis_instances(name, get_builtin_metadata(kind), json_file,
                                os.path.join(root, "coco", ""))
        _guard_entry(name, root, [(json_file, "LVIS annotation file", False)])

    return register


def _voc(dirname: str, split: str, year: int) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        path = os.path.join(root, dirname)
        register_pascal_voc(name, path, split, year)
        MetadataCatalog.get(name).set(evaluator_type="pascal_voc")
        split_file = os.path.join(path, "ImageSets", "Main", split + ".txt")
        _guard_entry(name, root, [(split_file, "Pascal VOC split file", False)])

    return register


def _panoptic_paths(prefix: str, root: str) -> dict[str, str]:
    image_dir, instances_rel = _COCO_INSTANCES[prefix]
    pan, stuff = _COCO_PANOPTIC[prefix]
    return {
        "image_root": os.path.join(root, image_dir),
        "json_file": os.path.join(root, instances_rel),
        "panoptic_root": os.path.join(root, "coco", f"panoptic_{pan}"),
        "panoptic_json": os.path.join(root, "coco", "annotations", f"panoptic_{pan}.json"),
        "sem_seg_root": os.path.join(root, "coco", f"panoptic_stuff_{stuff}"),
    }


def _panoptic_standard(prefix: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        from .coco_panoptic import register_coco_panoptic

        p = _panoptic_paths(prefix, root)
        register_coco_panoptic(name, get_builtin_metadata("coco_panoptic_standard"),
                               p["image_root"], p["panoptic_root"], p["panoptic_json"],
                               p["json_file"])
        _guard_entry(name, root, [(p["panoptic_json"], "panoptic annotation file", False),
                                  (p["panoptic_root"], "panoptic PNG directory", True)])

    return register


def _panoptic_separated(prefix: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        p = _panoptic_paths(prefix, root)

        def load() -> list[dict]:
            from .coco import load_coco_json
            from .coco_panoptic import merge_to_panoptic
            from .sem_seg import load_sem_seg

            return merge_to_panoptic(load_coco_json(p["json_file"], p["image_root"], name),
                                     load_sem_seg(p["sem_seg_root"], p["image_root"]))

        needs = [(p["json_file"], "instances annotation file", False),
                 (p["sem_seg_root"], "semantic label directory", True)]
        _register_checked(name, root, needs, load, {
            **p, "evaluator_type": "coco_panoptic_seg", "ignore_label": 255,
            **get_builtin_metadata("coco_panoptic_separated")})

    return register


def _panoptic_stuffonly(prefix: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        p = _panoptic_paths(prefix, root)

        def load() -> list[dict]:
            from .sem_seg import load_sem_seg

            return load_sem_seg(p["sem_seg_root"], p["image_root"])

        needs = [(p["sem_seg_root"], "semantic label directory", True),
                 (p["image_root"], "image directory", True)]
        _register_checked(name, root, needs, load, {
            "sem_seg_root": p["sem_seg_root"], "image_root": p["image_root"],
            "evaluator_type": "sem_seg", "ignore_label": 255,
            **get_builtin_metadata("coco_panoptic_separated")})

    return register


def _cityscapes(split: str, task: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        image_dir = os.path.join(root, "cityscapes", "leftImg8bit", split, "")
        gt_dir = os.path.join(root, "cityscapes", "gtFine", split, "")

        def load() -> list[dict]:
            from . import cityscapes

            if task == "instance_seg":
                return cityscapes.load_cityscapes_instances(
                    image_dir, gt_dir, from_json=True, to_polygons=True)
            return cityscapes.load_cityscapes_semantic(image_dir, gt_dir)

        metadata: dict[str, Any] = {"image_dir": image_dir, "gt_dir": gt_dir}
        if task == "instance_seg":
            metadata["evaluator_type"] = "cityscapes_instance"
        else:
            metadata.update(evaluator_type="cityscapes_sem_seg", ignore_label=255)
        needs = [(image_dir, "image directory", True), (gt_dir, "ground-truth directory", True)]
        _register_checked(name, root, needs, load,
                          {**metadata, **get_builtin_metadata("cityscapes")})

    return register


def _ade20k(split_dir: str) -> Callable[[str, str], None]:
    def register(name: str, root: str) -> None:
        base = os.path.join(root, "ADEChallengeData2016")
        image_dir = os.path.join(base, "images", split_dir)
        gt_dir = os.path.join(base, "annotations_detectron2", split_dir)

        def load() -> list[dict]:
            from .sem_seg import load_sem_seg

            return load_sem_seg(gt_dir, image_dir, gt_ext="png", image_ext="jpg")

        needs = [(image_dir, "image directory", True), (gt_dir, "label directory", True)]
        _register_checked(name, root, needs, load, {
            "image_root": image_dir, "sem_seg_root": gt_dir, "evaluator_type": "sem_seg",
            "ignore_label": 255, **get_builtin_metadata("ade20k")})

    return register


def _registrars() -> dict[str, Callable[[str, str], None]]:
    out: dict[str, Callable[[str, str], None]] = {}
    for name, (image_dir, json_rel) in _COCO_INSTANCES.items():
        out[name] = _coco("coco", image_dir, json_rel)
    for name, (image_dir, json_rel) in _COCO_PERSON.items():
        out[name] = _coco("coco_person", image_dir, json_rel)
    for prefix in _COCO_PANOPTIC:
        out[prefix + "_panoptic_separated"] = _panoptic_separated(prefix)
        out[prefix + "_panoptic_stuffonly"] = _panoptic_stuffonly(prefix)
        out[prefix + "_panoptic"] = _panoptic_standard(prefix)
    for kind, splits in _LVIS.items():
        for name, json_rel in splits.items():
            out[name] = _lvis(kind, json_rel)
    for split in _CITYSCAPES_SPLITS:
        for task in ("instance_seg", "sem_seg"):
            out[f"cityscapes_fine_{task}_{split}"] = _cityscapes(split, task)
    for name, (dirname, split, year) in _VOC.items():
        out[name] = _voc(dirname, split, year)
    for split, split_dir in (("train", "training"), ("val", "validation")):
        out[f"ade20k_sem_seg_{split}"] = _ade20k(split_dir)
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
    """Every builtin dataset name, registered yet or not, in detectron2's order of families.

    Example:
        >>> names = builtin_dataset_names()
        >>> "coco_2017_train" in names and "lvis_v1_val" in names and "voc_2012_val" in names
        True
    """
    return list(_PROVIDER.names())


def _on_missing_metadata(name: str) -> bool:
    return DatasetCatalog._materialize(name)


DatasetCatalog._set_lazy_provider(_PROVIDER)
MetadataCatalog._on_missing = _on_missing_metadata
