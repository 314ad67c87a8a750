"""COCO panoptic segmentation: the loader and detectron2's two registrations.

:func:`load_coco_panoptic_json` reads a COCO panoptic file (``annotations``: one entry per
image with ``file_name`` of its PNG and ``segments_info``) into records with
``file_name``, ``image_id``, ``pan_seg_file_name`` and ``segments_info`` whose
``category_id`` is contiguous and whose ``isthing`` says which id map it came from.
:func:`register_coco_panoptic` registers that form ("standard");
:func:`register_coco_panoptic_separated` registers detectron2's PanopticFPN form (instances
from the COCO instances file merged with stuff label maps) and its ``_stuffonly`` companion.

The file is untrusted: it is read as a regular file of at most
:data:`MAX_PANOPTIC_JSON_BYTES`, parsed with the bounded COCO JSON parser, and every value the
records hold is checked; errors are :class:`PanopticFormatError` naming the file, the image id,
the segment id and the key.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

from .coco import load_coco_json
from .coco_common import INT64_MAX, INT64_MIN, short_repr
from .coco_json import parse_json_bytes
from .dataset_catalog import DatasetCatalog
from .errors import DatasetFileNotFoundError
from .format_errors import PanopticFormatError, SemSegPairingError
from .metadata import MetadataCatalog
from .panoptic_validate import (
    MAX_SEGMENT_ID,
    as_dict,
    check_segment,
    fail,
    id_map,
    image_index,
    relative_name,
)
from .safe_parse import read_bytes
from .sem_seg import load_sem_seg
from .version import __version__

__all__ = [
    "MAX_PANOPTIC_JSON_BYTES",
    "MAX_SEGMENT_ID",
    "load_coco_panoptic_json",
    "merge_to_panoptic",
    "register_coco_panoptic",
    "register_coco_panoptic_separated",
]

logger = logging.getLogger(__name__)

#: Largest panoptic json file read (COCO's train file is about 0.4 GiB).
MAX_PANOPTIC_JSON_BYTES = 4 * 1024**3

def load_coco_panoptic_json(
    json_file: str | os.PathLike,
    image_dir: str | os.PathLike,
    gt_dir: str | os.PathLike,
    meta: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Load a COCO panoptic file as detectron2-format records.

    One record per entry of ``annotations``, in file order: ``file_name`` (the image: the
    ``images`` entry's ``file_name`` when the file lists the image, else the PNG's name with
    ``.jpg``, as detectron2 assumes, joined to ``image_dir``), ``height`` / ``width`` when the
    ``images`` entry has them, ``image_id``, ``pan_seg_file_name`` (the PNG under ``gt_dir``)
    and ``segments_info``: dicts with ``id``, ``category_id`` (contiguous, through the thing
    map first, then the stuff map), ``iscrowd``, ``bbox`` / ``area`` when present, any other
    key of the file (bounded JSON values) and ``isthing``.

    Args:
        json_file: the panoptic json file (e.g. ``panoptic_val2017.json``).
        image_dir: directory of the images.
        gt_dir: directory of the panoptic PNGs.
        meta: a mapping (or :class:`Metadata`) with ``thing_dataset_id_to_contiguous_id`` and
            ``stuff_dataset_id_to_contiguous_id`` (an absent map counts as empty).

    Raises:
        PanopticFormatError: the file or ``meta`` is malformed: not a dict; ``annotations``
            not a non-empty list; an ``image_id`` not a 64-bit int or repeated; a
            ``file_name`` not a relative path without ``..``; a segment ``id`` not an int in
            ``[0, 256**3)`` or repeated in an image; a ``category_id`` in neither map;
            ``iscrowd`` not 0/1; ``bbox`` not 4 finite numbers; ``area`` negative; or the file
            is larger than :data:`MAX_PANOPTIC_JSON_BYTES`, not UTF-8 or not valid JSON.
        FileNotFoundError: the file does not exist; :class:`DatasetFileNotFoundError` (a
            ``FileNotFoundError``) when the first record's image or PNG does not exist.

    Example:
        >>> meta = {"thing_dataset_id_to_contiguous_id": {1: 0},
        ...         "stuff_dataset_id_to_contiguous_id": {92: 1}}
        >>> records = load_coco_panoptic_json("pan.json", "val2017", "pan_val", meta)  # doctest: +SKIP
        >>> records[0]["segments_info"][0]["isthing"]  # doctest: +SKIP
        True
    """
    path, image_dir, gt_dir = os.fspath(json_file), os.fspath(image_dir), os.fspath(gt_dir)
    meta = as_dict(
        meta,
        lambda got: PanopticFormatError(
            f"{path}: meta must be a mapping (or Metadata) holding "
            f"thing_dataset_id_to_contiguous_id, got {got}",
            path=path,
        ),
    )
    things = id_map(meta, "thing_dataset_id_to_contiguous_id", path)
    stuff = id_map(meta, "stuff_dataset_id_to_contiguous_id", path)
    data = parse_json_bytes(
        read_bytes(path, limit=MAX_PANOPTIC_JSON_BYTES, what="COCO panoptic file"), path
    )
    if type(data) is not dict:
        raise fail(path, "the top level must be a dict", data, key=None)
    images = image_index(data.get("images"), path)
    annotations = data.get("annotations")
    if type(annotations) is not list or not annotations:
        raise PanopticFormatError(
            f"{path}: 'annotations' must be a non-empty list, got {short_repr(annotations)}",
            path=path,
            key="annotations",
        )
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
        name, height, width = images.get(image_id, (os.path.splitext(png)[0] + ".jpg", None,
                                                    None))
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
                f"{records[0][key]!r} (check image_dir / gt_dir)",
                path=records[0][key],
            )
    logger.info("loaded %d panoptic images from %s", len(records), path)
    return records


def _metadata_dict(name: str, metadata: Any) -> dict[str, Any]:
    values = as_dict(
        metadata,
        lambda got: TypeError(f"metadata of dataset {name!r} must be a mapping, got {got}"),
    )
    values.pop("name", None)
    return values


def _set_metadata(name: str, values: dict[str, Any]) -> None:
    try:
        MetadataCatalog.get(name).set(**values)
    except Exception:
        DatasetCatalog.remove(name)
        raise


def register_coco_panoptic(
    name: str,
    metadata: Mapping[str, Any],
    image_root: str | os.PathLike,
    panoptic_root: str | os.PathLike,
    panoptic_json: str | os.PathLike,
    instances_json: str | os.PathLike | None = None,
) -> None:
    """Register the "standard" COCO panoptic dataset ``name`` (records of
    :func:`load_coco_panoptic_json`, read at the first get).

    Sets ``panoptic_root``, ``image_root``, ``panoptic_json``, ``json_file`` (the instances
    file, or None), ``evaluator_type="coco_panoptic_seg"``, ``ignore_label=255``,
    ``label_divisor=1000`` and ``metadata`` (which must hold the id maps) in MetadataCatalog.

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        MetadataConflictError: the metadata already holds different values.

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
        name,
        load,
        source_files=(panoptic_json,),
        cache_key={
            "loader": "catalog.coco_panoptic.load_coco_panoptic_json",
            "catmap_version": __version__,
            "json_file": os.path.abspath(panoptic_json),
            "image_root": image_root,
            "panoptic_root": panoptic_root,
            **maps,
        },
    )
    _set_metadata(
        name,
        {
            "panoptic_root": panoptic_root,
            "image_root": image_root,
            "panoptic_json": panoptic_json,
            "json_file": json_file,
            "evaluator_type": "coco_panoptic_seg",
            "ignore_label": 255,
            "label_divisor": 1000,
            **values,
        },
    )


def merge_to_panoptic(
    detection_dicts: list[dict[str, Any]], sem_seg_dicts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One record per detection record, updated with the keys of the semantic-segmentation
    record of the same ``file_name``.

    Raises:
        SemSegPairingError: ``sem_seg_dicts`` is empty, or a detection record's image has no
            label map (names the image).

    Example:
        >>> merge_to_panoptic([{"file_name": "a.jpg", "annotations": []}],
        ...                   [{"file_name": "a.jpg", "sem_seg_file_name": "a.png"}])
        [{'file_name': 'a.jpg', 'annotations': [], 'sem_seg_file_name': 'a.png'}]
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
                "semantic-segmentation label map",
                unpaired=[record["file_name"]],
            )
        out = copy.copy(record)
        out.update(sem)
        merged.append(out)
    return merged


def register_coco_panoptic_separated(
    name: str,
    metadata: Mapping[str, Any],
    image_root: str | os.PathLike,
    panoptic_root: str | os.PathLike,
    panoptic_json: str | os.PathLike,
    sem_seg_root: str | os.PathLike,
    instances_json: str | os.PathLike,
) -> None:
    """Register detectron2's "separated" COCO panoptic dataset as ``name + "_separated"``:
    instance annotations from ``instances_json`` (:func:`load_coco_json`) merged with the stuff
    label maps under ``sem_seg_root`` (:func:`load_sem_seg`, things labelled 0); and the stuff
    maps alone as ``name + "_stuffonly"`` (``evaluator_type="sem_seg"``).

    Raises:
        DatasetAlreadyRegisteredError: one of the two names is taken.
        MetadataConflictError: the metadata already holds different values.

    Example:
        >>> register_coco_panoptic_separated("pan_val", meta, "val2017", "panoptic_val2017",
        ...     "panoptic_val2017.json", "panoptic_stuff_val2017",
        ...     "instances_val2017.json")  # doctest: +SKIP
        >>> "pan_val_separated" in DatasetCatalog  # doctest: +SKIP
        True
    """
    values = _metadata_dict(name, metadata)
    image_root, panoptic_root = os.fspath(image_root), os.fspath(panoptic_root)
    panoptic_json, sem_seg_root = os.fspath(panoptic_json), os.fspath(sem_seg_root)
    instances_json = os.fspath(instances_json)
    panoptic_name, semantic_name = name + "_separated", name + "_stuffonly"

    def load_separated() -> list[dict[str, Any]]:
        return merge_to_panoptic(
            load_coco_json(instances_json, image_root, panoptic_name),
            load_sem_seg(sem_seg_root, image_root),
        )

    DatasetCatalog.register(panoptic_name, load_separated)
    _set_metadata(
        panoptic_name,
        {
            "panoptic_root": panoptic_root,
            "image_root": image_root,
            "panoptic_json": panoptic_json,
            "sem_seg_root": sem_seg_root,
            "json_file": instances_json,
            "evaluator_type": "coco_panoptic_seg",
            "ignore_label": 255,
            **values,
        },
    )

    def load_stuff() -> list[dict[str, Any]]:
        return load_sem_seg(sem_seg_root, image_root)

    try:
        DatasetCatalog.register(semantic_name, load_stuff)
    except Exception:
        DatasetCatalog.remove(panoptic_name)
        raise
    _set_metadata(
        semantic_name,
        {
            "sem_seg_root": sem_seg_root,
            "image_root": image_root,
            "evaluator_type": "sem_seg",
            "ignore_label": 255,
            **values,
        },
    )
