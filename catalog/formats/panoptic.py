"""Semantic segmentation (images paired with label maps by relative path) and COCO panoptic
segmentation (the loader and detectron2's two registrations).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

from ..dataset_catalog import DatasetCatalog
from .._common import DatasetFileNotFoundError
from ..version import __version__
from .coco import load_coco_json
from .files import parse_json, read_bytes, set_metadata
from .validate import (
    INT64_MAX,
    INT64_MIN,
    PanopticFormatError,
    SemSegPairingError,
    as_dict,
    check_segment,
    fail,
    id_map,
    image_index,
    relative_name,
    short_repr,
)

logger = logging.getLogger(__name__)

#: Most files listed under one root (a guard against pointing at a whole file system).
MAX_FILES = 10_000_000
#: How many unpaired files a message names.
_EXAMPLES = 5


def _suffix(ext: str, what: str) -> str:
    """The file-name suffix for ``ext``: ``"png"`` means ``".png"``; a value holding a dot
    (``".png"``, ``"_gtFine_labelTrainIds.png"``) is used as it is.
    """
    if not isinstance(ext, str) or not ext or "/" in ext or "\x00" in ext:
        raise ValueError(f"{what} must be a non-empty file extension, got {ext!r}")
    return ext if "." in ext else "." + ext


def _list_files(root: str, suffix: str, what: str) -> dict[str, str]:
    """``{relative path without suffix: path}`` of the files under ``root`` ending with
    ``suffix``; symbolic links to directories are not followed (no cycles).
    """
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{what} {root!r} is not a directory")
    found: dict[str, str] = {}
    seen = 0
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                raise SemSegPairingError(
                    f"{what} {root!r} holds more than {MAX_FILES} files; point it at the "
                    "dataset's own directory",
                    **({"gt_root": root} if what == "gt_root" else {"image_root": root}))
            if not name.endswith(suffix) or len(name) == len(suffix) or name.startswith("."):
                continue
            path = os.path.join(directory, name)
            key = os.path.normpath(os.path.relpath(path, root))[: -len(suffix)]
            found[key] = path
    return found


def load_sem_seg(gt_root: str | os.PathLike, image_root: str | os.PathLike, gt_ext: str = "png",
                 image_ext: str = "jpg", *, strict: bool = False) -> list[dict[str, Any]]:
    """Pair the images under ``image_root`` with the label maps under ``gt_root``.

    Example:
        >>> records = load_sem_seg("ade/annotations/val", "ade/images/val")  # doctest: +SKIP
        >>> sorted(records[0])  # doctest: +SKIP
        ['file_name', 'sem_seg_file_name']
    """
    gt_root, image_root = os.fspath(gt_root), os.fspath(image_root)
    gt_files = _list_files(gt_root, _suffix(gt_ext, "gt_ext"), "gt_root")
    image_files = _list_files(image_root, _suffix(image_ext, "image_ext"), "image_root")
    where = {"gt_root": gt_root, "image_root": image_root}
    if not gt_files:
        raise SemSegPairingError(
            f"no label maps ending with {_suffix(gt_ext, 'gt_ext')!r} under {gt_root!r}", **where)
    keys = sorted(gt_files.keys() & image_files.keys())
    unpaired = sorted(
        [gt_files[k] for k in gt_files.keys() - image_files.keys()]
        + [image_files[k] for k in image_files.keys() - gt_files.keys()]
    )
    if unpaired:
        message = (
            f"{len(gt_files) - len(keys)} of {len(gt_files)} label maps under {gt_root!r} have "
            f"no image and {len(image_files) - len(keys)} of {len(image_files)} images under "
            f"{image_root!r} have no label map (files are paired by relative path without the "
            f"extension), e.g. {unpaired[:_EXAMPLES]}"
        )
        if strict or not keys:
            raise SemSegPairingError(message, unpaired=unpaired[:_EXAMPLES], **where)
        logger.warning("%s; using the %d pairs", message, len(keys))
    logger.info("paired %d images with label maps from %s", len(keys), image_root)
    return [{"file_name": image_files[k], "sem_seg_file_name": gt_files[k]} for k in keys]


def register_sem_seg(name: str, metadata: Mapping[str, Any] | None, gt_root: str | os.PathLike,
                     image_root: str | os.PathLike, gt_ext: str = "png", image_ext: str = "jpg", *,
                     strict: bool = False) -> None:
    """Register a semantic-segmentation dataset read by :func:`load_sem_seg` at the first get."""
    gt_root, image_root = os.fspath(gt_root), os.fspath(image_root)
    _suffix(gt_ext, "gt_ext"), _suffix(image_ext, "image_ext")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(
            f"metadata of dataset {name!r} must be a mapping, got {type(metadata).__name__}")
    values = {"ignore_label": 255, **dict(metadata or {})}

    def load() -> list[dict[str, Any]]:
        return load_sem_seg(gt_root, image_root, gt_ext, image_ext, strict=strict)

    DatasetCatalog.register(name, load)
    set_metadata(name, {"sem_seg_root": gt_root, "image_root": image_root,
                        "evaluator_type": "sem_seg", **values})


#: Largest panoptic json file read (COCO's train file is about 0.4 GiB).
MAX_PANOPTIC_JSON_BYTES = 4 * 1024**3

def load_coco_panoptic_json(json_file: str | os.PathLike, image_dir: str | os.PathLike,
                            gt_dir: str | os.PathLike,
                            meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Load a COCO panoptic file as detectron2-format records."""
    path, image_dir, gt_dir = os.fspath(json_file), os.fspath(image_dir), os.fspath(gt_dir)
    meta = as_dict(
        meta, lambda got: PanopticFormatError(
            f"{path}: meta must be a mapping (or Metadata) holding "
            f"thing_dataset_id_to_contiguous_id, got {got}", path=path))
    things = id_map(meta, "thing_dataset_id_to_contiguous_id", path)
    stuff = id_map(meta, "stuff_dataset_id_to_contiguous_id", path)
    data = parse_json(read_bytes(path, limit=MAX_PANOPTIC_JSON_BYTES, what="COCO panoptic file"),
                      path)
    if type(data) is not dict:
        raise fail(path, "the top level must be a dict", data, key=None)
    images = image_index(data.get("images"), path)
    annotations = data.get("annotations")
    if type(annotations) is not list or not annotations:
        raise PanopticFormatError(
            f"{path}: 'annotations' must be a non-empty list, got {short_repr(annotations)}",
            path=path, key="annotations")
    records: list[dict[str, Any]] = []
    seen: set[int] = set()
    for index, ann in enumerate(annotations):
        if type(ann) is not dict:
            raise fail(path, "an annotation must be a dict", ann, key=None, index=index)
        image_id = ann.get("image_id")
        if type(image_id) is not int or not INT64_MIN <= image_id <= INT64_MAX:
            raise fail(path, "must be a 64-bit int", image_id, key="image_id", index=index)
        where: dict[str, Any] = {"index": index, "image_id": image_id}
        if image_id in seen:
            raise fail(path, "a second annotation for this image", image_id, key="image_id",
                        **where)
        seen.add(image_id)
        png = relative_name(ann.get("file_name"), path, where, "file_name")
        infos = ann.get("segments_info")
        if type(infos) is not list:
            raise fail(path, "must be a list", infos, key="segments_info", **where)
        segments = [check_segment(s, where, path, things, stuff) for s in infos]
        ids: set[int] = set()  # (a set: list.count made a long list take minutes)
        for segment in segments:
            if segment["id"] in ids:
                raise fail(path, "duplicate segment id in one image", segment["id"], key="id",
                           segment_id=segment["id"], **where)
            ids.add(segment["id"])
        name, height, width = images.get(image_id, (os.path.splitext(png)[0] + ".jpg", None, None))
        record: dict[str, Any] = {"file_name": os.path.join(image_dir, name)}
        if height is not None and width is not None:
            record["height"], record["width"] = height, width
        record["image_id"] = image_id
        record["pan_seg_file_name"] = os.path.join(gt_dir, png)
        record["segments_info"] = segments
        records.append(record)
    for key in ("file_name", "pan_seg_file_name"):
        if not os.path.isfile(records[0][key]):
            raise DatasetFileNotFoundError(
                f"{path}: the {key} of image_id {records[0]['image_id']} does not exist: "
                f"{records[0][key]!r} (check image_dir / gt_dir)", path=records[0][key])
    logger.info("loaded %d panoptic images from %s", len(records), path)
    return records


def _metadata_dict(name: str, metadata: Any) -> dict[str, Any]:
    values = as_dict(
        metadata,
        lambda got: TypeError(f"metadata of dataset {name!r} must be a mapping, got {got}"))
    values.pop("name", None)
    return values


def register_coco_panoptic(name: str, metadata: Mapping[str, Any], image_root: str | os.PathLike,
                           panoptic_root: str | os.PathLike, panoptic_json: str | os.PathLike,
                           instances_json: str | os.PathLike | None = None) -> None:
    """Register the "standard" COCO panoptic dataset ``name`` (records of
    :func:`load_coco_panoptic_json`, read at the first get).

    Example:
        >>> register_coco_panoptic("pan_val", meta, "val2017", "panoptic_val2017",
        ...                        "panoptic_val2017.json")  # doctest: +SKIP
    """
    values = _metadata_dict(name, metadata)
    image_root, panoptic_root = os.fspath(image_root), os.fspath(panoptic_root)
    panoptic_json = os.fspath(panoptic_json)
    json_file = os.fspath(instances_json) if instances_json is not None else None
    maps = {
        key: sorted((int(k), int(v)) for k, v in id_map(values, key, panoptic_json).items())
        for key in ("thing_dataset_id_to_contiguous_id", "stuff_dataset_id_to_contiguous_id")
    }

    def load() -> list[dict[str, Any]]:
        return load_coco_panoptic_json(panoptic_json, image_root, panoptic_root, values)

    DatasetCatalog.register(
        name, load, source_files=(panoptic_json,), cache_key={
            "loader": "catalog.coco_panoptic.load_coco_panoptic_json",
            "catmap_version": __version__, "json_file": os.path.abspath(panoptic_json),
            "image_root": image_root, "panoptic_root": panoptic_root, **maps})
    set_metadata(
        name, {
            "panoptic_root": panoptic_root,
            "image_root": image_root, "panoptic_json": panoptic_json,
            "json_file": json_file, "evaluator_type": "coco_panoptic_seg",
            "ignore_label": 255, "label_divisor": 1000, **values})


def merge_to_panoptic(detection_dicts: list[dict[str, Any]],
                      sem_seg_dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per detection record, updated with the keys of the semantic-segmentation
    record of the same ``file_name``.
    """
    by_file = {r["file_name"]: r for r in sem_seg_dicts}
    if not by_file:
        raise SemSegPairingError("no semantic-segmentation records to merge with")
    merged = []
    for index, record in enumerate(detection_dicts):
        sem = by_file.get(record["file_name"])
        if sem is None:
            raise SemSegPairingError(
                f"detection record {index} (image {record['file_name']!r}) has no "
                "semantic-segmentation label map", unpaired=[record["file_name"]])
        out = copy.copy(record)
        out.update(sem)
        merged.append(out)
    return merged


def register_coco_panoptic_separated(name: str, metadata: Mapping[str, Any],
                                     image_root: str | os.PathLike,
                                     panoptic_root: str | os.PathLike,
                                     panoptic_json: str | os.PathLike,
                                     sem_seg_root: str | os.PathLike,
                                     instances_json: str | os.PathLike) -> None:
    """Register detectron2's "separated" COCO panoptic dataset as ``name + "_separated"``:
    instance annotations from ``instances_json`` (:func:`load_coco_json`) merged with the stuff
    label maps under ``sem_seg_root`` (:func:`load_sem_seg`, things labelled 0); and the stuff
    maps alone as ``name + "_stuffonly"`` (``evaluator_type="sem_seg"``).
    """
    values = _metadata_dict(name, metadata)
    image_root, panoptic_root = os.fspath(image_root), os.fspath(panoptic_root)
    panoptic_json, sem_seg_root = os.fspath(panoptic_json), os.fspath(sem_seg_root)
    instances_json = os.fspath(instances_json)
    panoptic_name, semantic_name = name + "_separated", name + "_stuffonly"

    def load_separated() -> list[dict[str, Any]]:
        return merge_to_panoptic(load_coco_json(instances_json, image_root, panoptic_name),
                                 load_sem_seg(sem_seg_root, image_root))

    DatasetCatalog.register(panoptic_name, load_separated)
    set_metadata(
        panoptic_name, {
            "panoptic_root": panoptic_root,
            "image_root": image_root, "panoptic_json": panoptic_json,
            "sem_seg_root": sem_seg_root, "json_file": instances_json,
            "evaluator_type": "coco_panoptic_seg", "ignore_label": 255, **values})

    def load_stuff() -> list[dict[str, Any]]:
        return load_sem_seg(sem_seg_root, image_root)

    try:
        DatasetCatalog.register(semantic_name, load_stuff)
    except Exception:
        DatasetCatalog.remove(panoptic_name)
        raise
    set_metadata(
        semantic_name, {
            "sem_seg_root": sem_seg_root,
            "image_root": image_root, "evaluator_type": "sem_seg", "ignore_label": 255, **values})
