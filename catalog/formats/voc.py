"""Pascal VOC detection annotations (``VOCdevkit/VOC20xx``): a loader and registration.
"""

from __future__ import annotations

import logging
import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from ..box_mode import BoxMode
from ..dataset_catalog import DatasetCatalog
from .._common import AnnotationFormatError, DatasetFileNotFoundError
from .files import read_text_lines, read_xml_file, set_metadata
from .validate import MAX_IMAGE_SIDE, short_repr

logger = logging.getLogger(__name__)

#: The 20 Pascal VOC classes, in the order of their contiguous ids.
VOC_CLASSES: tuple[str, ...] = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip
_BOX_KEYS = ("xmin", "ymin", "xmax", "ymax")
#: A plain ASCII decimal number (``float()`` alone would also take ``1_0``, ``nan`` or
#: non-ASCII digits such as ``"\u0661\u0662"``).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def load_voc_instances(dirname: str | os.PathLike, split: str,
                       class_names: Sequence[str] = VOC_CLASSES) -> list[dict]:
    """Load the Pascal VOC detection annotations of one split as detectron2-format records.
    Ids must be plain names, so ``dirname/JPEGImages/<id>.jpg`` cannot leave ``dirname``:
    unlike COCO there is no ``allow_outside_root`` to give."""
    dirname = os.fspath(dirname)
    if not isinstance(split, str) or not split or os.sep in split or "/" in split:
        raise ValueError(f"split must be a plain name such as 'train', got {split!r}")
    classes = {name: index for index, name in reversed(list(enumerate(class_names)))}
    split_file = os.path.join(dirname, "ImageSets", "Main", split + ".txt")
    file_ids = read_text_lines(split_file, what="VOC split file")  # stripped, non-empty
    records = []
    skipped: list[tuple[str, int]] = []
    no_size = 0
    for line_number, file_id in enumerate(file_ids, 1):
        _check_id(file_id, split_file, line_number)
        xml_file = os.path.join(dirname, "Annotations", file_id + ".xml")
        try:
            root = read_xml_file(xml_file)
        except FileNotFoundError:
            raise DatasetFileNotFoundError(
                f"{split_file}: entry {line_number}: image id {file_id!r} has no annotation "
                f"file {xml_file!r}", path=xml_file) from None
        record: dict[str, Any] = {
            "file_name": os.path.join(dirname, "JPEGImages", file_id + ".jpg"), "image_id": file_id}
        for key in ("height", "width"):
            side = _side(root, key, xml_file)
            if side is not None:
                record[key] = side
        if len(record) < 4:
            no_size += 1
        record["annotations"] = _objects(root, classes, xml_file, skipped)
        records.append(record)
    if skipped:
        logger.warning(
            "%s: skipped %d objects with an empty box (xmax <= xmin - 1 or ymax <= ymin - 1) "
            "(xml file, object index): %s", split_file, len(skipped), skipped[:5])
    if no_size:
        logger.warning(
            "%s: %d images have no 'size/height' or 'size/width'; their records lack those keys",
            split_file, no_size)
    logger.info("loaded %d images of Pascal VOC split %r from %s", len(records), split, dirname)
    return records


def _check_id(file_id: str, split_file: str, line_number: int) -> None:
    if file_id in (".", "..") or any(c in file_id for c in ("/", "\\", "\x00")) or any(
        c.isspace() for c in file_id
    ):
        raise AnnotationFormatError(
            f"{split_file}: entry {line_number}: image id {short_repr(file_id)} is not a plain "
            "file name (one id per line, no spaces or path separators)")


def _text(element: ET.Element | None) -> str | None:
    if element is None or element.text is None:
        return None
    return element.text.strip()


def _decimal(text: str | None) -> float:
    """``text`` as a float when it is a plain ASCII decimal number (see _DECIMAL), else NaN."""
    return float(text) if text and _DECIMAL.match(text) else math.nan


def _side(root: ET.Element, key: str, xml_file: str) -> int | None:
    element = root.find("size/" + key)
    if element is None:
        return None
    text = _text(element)
    number = _decimal(text)
    value = int(number) if number.is_integer() else None
    if value is None or not 1 <= value <= MAX_IMAGE_SIDE:
        raise AnnotationFormatError(
            f"{xml_file}: 'size/{key}' is {short_repr(text)}, not an integer in "
            f"[1, {MAX_IMAGE_SIDE}]")
    return value


def _objects(root: ET.Element, classes: dict[str, int], xml_file: str,
             skipped: list[tuple[str, int]]) -> list[dict]:
    instances = []
    for index, obj in enumerate(root.findall("object")):
        name = _text(obj.find("name"))
        if not name:
            raise AnnotationFormatError(f"{xml_file}: object {index} has no 'name'")
        category = classes.get(name)
        if category is None:
            raise AnnotationFormatError(
                f"{xml_file}: object {index} has class {short_repr(name)}, which is not among "
                f"the class names {short_repr(list(classes))}")
        box = obj.find("bndbox")
        if box is None:
            raise AnnotationFormatError(f"{xml_file}: object {index} ({name}) has no 'bndbox'")
        bbox = [_coordinate(box, key, index, xml_file) for key in _BOX_KEYS]
        # VOC boxes are 1-based inclusive pixel indices: (1, W) spans the whole image, i.e.
        # the coordinates (0, W).
        bbox[0] -= 1.0
        bbox[1] -= 1.0
        if not (bbox[2] > bbox[0] and bbox[3] > bbox[1]):
            skipped.append((xml_file, index))
            continue
        instances.append({"category_id": category, "bbox": bbox, "bbox_mode": BoxMode.XYXY_ABS})
    return instances


def _coordinate(box: ET.Element, key: str, index: int, xml_file: str) -> float:
    text = _text(box.find(key))
    value = _decimal(text)
    if not math.isfinite(value):
        raise AnnotationFormatError(
            f"{xml_file}: object {index}: 'bndbox/{key}' is {short_repr(text)}, not a finite "
            "number")
    return value


def register_pascal_voc(name: str, dirname: str | os.PathLike, split: str, year: int,
                        class_names: Sequence[str] = VOC_CLASSES) -> None:
    """Register a Pascal VOC split as dataset ``name``; the XML files are read at the first get.

    Example:
        >>> register_pascal_voc("my_voc", "VOCdevkit/VOC2007", "test", 2007)  # doctest: +SKIP
        >>> DatasetCatalog.get("my_voc")  # reads the XML files now  # doctest: +SKIP
    """
    dirname = os.fspath(dirname)
    class_names = tuple(class_names)

    def load() -> list[dict]:
        return load_voc_instances(dirname, split, class_names)

    DatasetCatalog.register(name, load)
    set_metadata(name, {"thing_classes": list(class_names), "dirname": dirname, "year": year,
                        "split": split})
