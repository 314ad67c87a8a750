"""LVIS instances files (v0.5 and v1): a loader into detectron2-format records, and registration.

LVIS files are COCO files with a few more keys: images name their file through ``coco_url``
(v1 has no ``file_name``) and list ``not_exhaustive_category_ids`` and ``neg_category_ids``;
categories carry ``synonyms``, ``frequency`` ("r", "c", "f") and ``image_count``. The file is
parsed and checked exactly as :func:`catalog.coco.load_coco_json` checks a COCO file (same
policy table, same :class:`~catalog.errors.AnnotationFormatError`); this module adds the LVIS
keys and their checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from .coco_common import INT64_MAX, INT64_MIN, SkipCounts, short_repr
from .coco_generic import convert_generic
from .coco_json import parse_json_bytes
from .errors import AnnotationFormatError
from .gc_pause import gc_paused
from .json_instances import finish_load, register_json_instances
from .metadata import MetadataCatalog
from .safe_parse import read_bytes

__all__ = ["load_lvis_json", "register_lvis_instances", "load_lvis_records", "LVIS_FREQUENCIES"]


#: The LVIS frequency groups: rare (1-10 training images), common (11-100), frequent (>100).
LVIS_FREQUENCIES = ("r", "c", "f")
_ID_LIST_KEYS = ("not_exhaustive_category_ids", "neg_category_ids")
_BAD_PARTS = ("", ".", "..")


def load_lvis_json(
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    dataset_name: str | None = None,
    extra_annotation_keys: Sequence[str] | None = None,
) -> list[dict]:
    """Load an LVIS (v0.5 or v1) instances file as detectron2-format records.

    Records are sorted by image id, as detectron2 does. Each has ``file_name``, ``height``,
    ``width``, ``image_id``, ``not_exhaustive_category_ids`` and ``neg_category_ids`` (LVIS
    category ids as in the file, ``[]`` when absent) and ``annotations`` (XYWH_ABS ``bbox``,
    ``bbox_mode``, ``category_id`` contiguous 0..K-1 by sorted LVIS id, ``iscrowd`` 0,
    ``segmentation`` polygons, plus the ``extra_annotation_keys``).

    ``file_name`` comes from ``coco_url`` when the image has one, as detectron2 does: the last
    two components of the URL (the COCO split folder and the file) under ``image_root``, so
    ``http://images.cocodataset.org/train2017/000000155379.jpg`` with image root ``coco``
    gives ``coco/train2017/000000155379.jpg`` (detectron2 concatenates the root and the split
    folder without a separator; here they are joined as path components). An image without
    ``coco_url`` uses its ``file_name`` under ``image_root``.

    Every value is checked with the policy of :func:`catalog.coco.load_coco_json`; in
    addition: ``coco_url`` not a str, holding a query or fragment (``?``, ``#``), or whose
    last two components are empty, ``.``, ``..`` or hold a NUL or backslash;
    ``not_exhaustive_category_ids`` / ``neg_category_ids`` not a list of ids among the file's
    categories; a category's ``synonyms`` not a non-empty list of str,
    ``frequency`` not one of ``r``, ``c``, ``f``, or ``image_count`` / ``instance_count`` not
    an int >= 0: :class:`AnnotationFormatError` naming the file, the image or category (id and
    index) and the key. Invalid polygons are dropped and counted (detectron2 asserts instead).

    Args:
        json_file: path of the LVIS json file.
        image_root: the directory holding the COCO split folders (``train2017`` ...), or the
            images themselves for files without ``coco_url``.
        dataset_name: when given, sets in ``MetadataCatalog.get(dataset_name)``:
            ``thing_classes`` (each category's first synonym, else its name),
            ``thing_dataset_id_to_contiguous_id``, and when every category carries them and the
            metadata does not hold them yet, ``class_image_count`` (``[{"id", "image_count"}]``
            as detectron2's LVIS v1 metadata) and ``class_frequency`` (``"r"``/``"c"``/``"f"``
            per contiguous class).
        extra_annotation_keys: annotation keys to copy besides the default ones.

    Returns:
        The list of record dicts.

    Raises:
        AnnotationFormatError: see above.
        MetadataConflictError: ``dataset_name``'s metadata holds different classes.

    Example:
        >>> records = load_lvis_json("lvis_v1_val.json", "coco", "my_lvis")  # doctest: +SKIP
        >>> records[0]["file_name"], records[0]["neg_category_ids"][:2]  # doctest: +SKIP
        ('coco/val2017/000000000139.jpg', [31, 42])
    """
    json_file = os.fspath(json_file)
    records, categories, counts = load_lvis_records(
        json_file, image_root, tuple(extra_annotation_keys or ())
    )
    if dataset_name is not None:
        _set_metadata(dataset_name, categories)
    return finish_load(records, counts, json_file, "LVIS")


def load_lvis_records(
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    extra_annotation_keys: Sequence[str] = (),
) -> tuple[list[dict], list[dict], SkipCounts]:
    """The work of :func:`load_lvis_json` without metadata or warnings.

    Returns:
        ``(records, categories sorted by id as the file's dicts, skip counts)``.

    Raises:
        AnnotationFormatError: see :func:`load_lvis_json`.

    Example:
        >>> records, categories, counts = load_lvis_records("v.json", "coco")  # doctest: +SKIP
    """
    json_file = os.fspath(json_file)
    image_root = os.fspath(image_root)
    data = parse_json_bytes(read_bytes(json_file, what="LVIS annotation file"), json_file)
    with gc_paused(promote=True):
        if type(data) is not dict or type(data.get("images")) is not list:
            convert_generic(data, json_file, image_root, (), SkipCounts())  # raises its error
        images, id_lists = _lvis_images(data["images"], json_file)
        counts = SkipCounts()
        records, _ = convert_generic(
            dict(data, images=images), json_file, image_root, tuple(extra_annotation_keys), counts
        )
        categories = _lvis_categories(data.get("categories") or [], json_file)
        known = {c["id"] for c in categories}
        for index, (record, lists) in enumerate(zip(records, id_lists, strict=True)):
            for key, ids in zip(_ID_LIST_KEYS, lists, strict=True):
                unknown = [i for i in ids if i not in known]
                if unknown:
                    raise AnnotationFormatError(
                        f"{json_file}: image {record['image_id']} (index {index}): {key!r} "
                        f"holds category ids not among the file's categories: "
                        f"{short_repr(unknown)}"
                    )
                record[key] = ids
        records.sort(key=lambda r: r["image_id"])
        return records, categories, counts


def _lvis_images(images: list[Any], json_file: str) -> tuple[list[Any], list[tuple[list, list]]]:
    """The images with ``file_name`` derived from ``coco_url``, and each image's id lists."""
    out: list[Any] = []
    id_lists: list[tuple[list, list]] = []
    for index, img in enumerate(images):
        if type(img) is not dict:
            raise AnnotationFormatError(
                f"{json_file}: image {index} is a {type(img).__name__}, not a dict"
            )
        where = f"{json_file}: image {short_repr(img.get('id'))} (index {index})"
        url = img.get("coco_url")
        if url is not None:
            img = dict(img, file_name=_file_name_from_url(url, where))
        lists = []
        for key in _ID_LIST_KEYS:
            ids = img.get(key)
            if ids is None:
                ids = []
            elif type(ids) is not list or not all(
                type(i) is int and INT64_MIN <= i <= INT64_MAX for i in ids
            ):
                raise AnnotationFormatError(
                    f"{where}: {key!r} must be a list of category ids (ints), got "
                    f"{short_repr(ids)}"
                )
            lists.append(ids)
        out.append(img)
        id_lists.append((lists[0], lists[1]))
    return out, id_lists


def _file_name_from_url(url: Any, where: str) -> str:
    """``split_folder/file`` from the last two components of an image's ``coco_url``."""
    if type(url) is not str:
        raise AnnotationFormatError(f"{where}: 'coco_url' is a {type(url).__name__}, not a str")
    parts = url.rsplit("/", 2)
    tail = parts[-2:] if len(parts) == 3 else []
    if (
        len(tail) != 2
        or any(p in _BAD_PARTS or "\x00" in p or "\\" in p for p in tail)
        or "?" in url
        or "#" in url  # a query or fragment: the last components would not name the file
    ):
        raise AnnotationFormatError(
            f"{where}: 'coco_url' {short_repr(url)} does not end in '<split folder>/<file>' "
            "(needed to find the image under image_root)"
        )
    return tail[0] + "/" + tail[1]


def _lvis_categories(categories: list[Any], json_file: str) -> list[dict]:
    """The categories sorted by id, their LVIS keys checked (ids were checked already)."""
    for index, cat in enumerate(categories):
        where = f"{json_file}: category {short_repr(cat.get('id'))} (index {index})"
        synonyms = cat.get("synonyms")
        if synonyms is not None and (
            type(synonyms) is not list or not synonyms or not all(type(s) is str for s in synonyms)
        ):
            raise AnnotationFormatError(f"{where}: 'synonyms' must be a non-empty list of str")
        frequency = cat.get("frequency")
        if frequency is not None and frequency not in LVIS_FREQUENCIES:
            raise AnnotationFormatError(
                f"{where}: 'frequency' is {short_repr(frequency)}, not one of {LVIS_FREQUENCIES}"
            )
        for key in ("image_count", "instance_count"):
            value = cat.get(key)
            if value is not None and (type(value) is not int or not 0 <= value <= INT64_MAX):
                raise AnnotationFormatError(
                    f"{where}: {key!r} is {short_repr(value)}, not an int >= 0"
                )
    return sorted(categories, key=lambda c: c["id"])


def _class_name(cat: dict) -> str:
    synonyms = cat.get("synonyms")
    if synonyms:
        return synonyms[0]
    return cat["name"] if cat.get("name") is not None else str(cat["id"])


def _set_metadata(dataset_name: str, categories: list[dict]) -> None:
    meta = MetadataCatalog.get(dataset_name, warn_unregistered=False)
    values: dict[str, Any] = {
        "thing_classes": [_class_name(c) for c in categories],
        "thing_dataset_id_to_contiguous_id": {c["id"]: i for i, c in enumerate(categories)},
    }
    if categories and all(c.get("image_count") is not None for c in categories):
        if meta.get("class_image_count") is None:
            values["class_image_count"] = [
                {"id": c["id"], "image_count": c["image_count"]} for c in categories
            ]
    if categories and all(c.get("frequency") is not None for c in categories):
        if meta.get("class_frequency") is None:
            values["class_frequency"] = [c["frequency"] for c in categories]
    meta.set(**values)


def register_lvis_instances(
    name: str,
    metadata: dict[str, Any] | None,
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    *,
    extra_annotation_keys: Iterable[str] | None = None,
    cache: bool = True,
) -> None:
    """Register an LVIS instances file as dataset ``name``; the file is read at the first get.

    Sets ``json_file``, ``image_root`` and ``evaluator_type="lvis"`` (plus the given
    ``metadata``) in ``MetadataCatalog.get(name)`` now; the keys :func:`load_lvis_json` sets
    are set when the file is loaded. The records go through the on-disk cache as COCO ones.

    Args:
        name: the dataset name, e.g. ``"lvis_v1_train"``.
        metadata: extra metadata keys (may be empty or None).
        json_file: path of the LVIS json file.
        image_root: the directory holding the COCO split folders.
        extra_annotation_keys: passed to :func:`load_lvis_json`.
        cache: keep the parsed records in the on-disk cache.

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        MetadataConflictError: the metadata already holds different values.

    Example:
        >>> register_lvis_instances("my_lvis", {}, "lvis_v1_val.json", "coco")  # doctest: +SKIP
    """
    register_json_instances(
        name, metadata, json_file, image_root, load_lvis_json,
        loader_name="catalog.lvis.load_lvis_json", evaluator_type="lvis",
        keys_set_by_loader=("thing_classes", "thing_dataset_id_to_contiguous_id",
                            "class_image_count", "class_frequency"),
        extra_annotation_keys=extra_annotation_keys, cache=cache,
    )
