"""OpenMMLab 2.0 ``data_list`` entries as detectron2-style records (catmap's record format).

``register_annotation_file`` turns every entry into the record format the rest of catmap reads,
so ``get_detection_dataset_dicts``, ``DatasetMapper``, ``Compose``, the samplers and the repeat
factors work on mmengine/mmdet files unchanged. The mapping:

=========================  ========================================================
OpenMMLab key              record key
=========================  ========================================================
``img_path``               ``file_name``
``img_id``                 ``image_id`` (the ``data_list`` index when absent)
``height`` / ``width``     ``height`` / ``width``
``seg_map_path``           ``sem_seg_file_name``
``instances``              ``annotations``, one dict per instance:
``  bbox`` [x1, y1, x2, y2]  ``bbox`` (same numbers), ``bbox_mode`` = ``BoxMode.XYXY_ABS``
``  bbox_label``            ``category_id`` (the index into ``metainfo["classes"]``)
``  ignore_flag``           ``iscrowd`` (0 when absent)
``  mask``                  ``segmentation`` (polygons or RLE, unchanged)
``  keypoints``             ``keypoints`` (flat ``[x, y, v, ...]``, unchanged)
=========================  ========================================================

Every other key, of the entry or of an instance, is kept as it is. ``record_format="openmmlab"``
keeps the entries in their own form instead.

Example:
    >>> entry = {"img_path": "a.jpg", "img_id": 7, "height": 4, "width": 6,
    ...          "instances": [{"bbox": [0, 0, 2, 3], "bbox_label": 1, "ignore_flag": 0}]}
    >>> record = to_detectron2_record(entry, index=0, path="ann.json")
    >>> record["file_name"], record["image_id"], record["annotations"][0]["category_id"]
    ('a.jpg', 7, 1)
    >>> record["annotations"][0]["bbox_mode"]
    <BoxMode.XYXY_ABS: 0>
"""

from __future__ import annotations

from typing import Any

from .annotation_errors import AnnotationFieldError
from .box_mode import BoxMode
from .coco_common import short_repr

__all__ = ["RECORD_FORMATS", "check_record_format", "to_detectron2_record"]

#: Values of the ``record_format`` option of the annotation-file loader.
RECORD_FORMATS = ("detectron2", "openmmlab")

_ENTRY_KEYS = {"img_path": "file_name", "img_id": "image_id", "seg_map_path": "sem_seg_file_name"}
_INSTANCE_KEYS = {"bbox_label": "category_id", "ignore_flag": "iscrowd", "mask": "segmentation"}
# Record keys the conversion sets, and the OpenMMLab key each comes from: an entry or instance
# may hold one only with the value the conversion gives it (else the unchecked value would
# shadow, or stand in for, the checked one).
_ENTRY_TARGETS = {**{v: k for k, v in _ENTRY_KEYS.items()}, "annotations": "instances"}
_INSTANCE_TARGETS = {**{v: k for k, v in _INSTANCE_KEYS.items()}, "bbox_mode": "bbox"}


def check_record_format(record_format: Any) -> str:
    """Return ``record_format`` if it is one of :data:`RECORD_FORMATS`, else raise ValueError."""
    if record_format not in RECORD_FORMATS:
        raise ValueError(
            f"record_format must be one of {RECORD_FORMATS}, got {record_format!r}"
        )
    return record_format


def to_detectron2_record(entry: dict, *, index: int, path: str) -> dict:
    """Turn one (checked) OpenMMLab ``data_list`` entry into a detectron2-style record.

    Args:
        entry: the entry, after validation, ``parse_data_info`` and ``data_prefix``.
        index: its position in ``data_list`` (the ``image_id`` when it has no ``img_id``).
        path: the annotation file, for error messages.

    Raises:
        AnnotationFieldError: the entry has no ``img_path``, or an instance has no ``bbox`` or
            no ``bbox_label``, or the entry (instance) holds a record key the conversion sets
            (``file_name``, ``image_id``, ``sem_seg_file_name``, ``annotations``; ``category_id``,
            ``iscrowd``, ``segmentation``, ``bbox_mode``) with another value than the converted
            one (names the file, index, instance and key).
    """
    img_id = entry.get("img_id")
    if not isinstance(entry.get("img_path"), str):
        raise AnnotationFieldError(
            f"{path}: data_list entry {index} has no 'img_path' string, so it cannot become a "
            "record with a 'file_name' (pass record_format='openmmlab' to keep entries as "
            "they are)",
            path=path, index=index, img_id=img_id, key="img_path",
        )
    record: dict[str, Any] = {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}
    for key, value in entry.items():
        if key == "instances":
            record["annotations"] = [
                _annotation(inst, j, index=index, img_id=img_id, path=path)
                for j, inst in enumerate(value)
            ]
        elif key in _ENTRY_KEYS:
            record[_ENTRY_KEYS[key]] = value
    record.setdefault("image_id", index)
    record.setdefault("annotations", [])
    _check_shadowing(entry, record, _ENTRY_TARGETS, f"{path}: data_list entry {index}",
                     path=path, index=index, img_id=img_id)
    return record


def _check_shadowing(item: dict, converted: dict, targets: dict[str, str], where: str,
                     **fields: Any) -> None:
    for target, source in targets.items():
        if target in item and (source not in item or not _same(item[target], converted[target])):
            raise AnnotationFieldError(
                f"{where} holds {target!r} (value {short_repr(item[target])}) beside {source!r}; the "
                f"record's {target!r} is made from {source!r}, so the file may not set it "
                "differently (pass record_format='openmmlab' to keep entries as they are)",
                key=target, **fields,
            )


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays from a pickle file
        return False


def _annotation(inst: dict, j: int, *, index: int, img_id: Any, path: str) -> dict:
    for required in ("bbox", "bbox_label"):
        if required not in inst:
            raise AnnotationFieldError(
                f"{path}: data_list entry {index} (img_id {img_id!r}) instance {j} has no "
                f"{required!r}; a catmap annotation needs a box and a class (pass "
                "record_format='openmmlab' to keep entries as they are)",
                path=path, index=index, img_id=img_id, instance=j, key=required,
            )
    annotation: dict[str, Any] = {k: v for k, v in inst.items() if k not in _INSTANCE_TARGETS}
    for key, value in inst.items():
        if key == "bbox":
            annotation["bbox"] = list(value)
            annotation["bbox_mode"] = BoxMode.XYXY_ABS
        elif key == "ignore_flag":
            annotation["iscrowd"] = int(value)
        elif key in _INSTANCE_KEYS:
            annotation[_INSTANCE_KEYS[key]] = value
    annotation.setdefault("iscrowd", 0)
    _check_shadowing(inst, annotation, _INSTANCE_TARGETS,
                     f"{path}: data_list entry {index} (img_id {img_id!r}) instance {j}",
                     path=path, index=index, img_id=img_id, instance=j)
    return annotation
