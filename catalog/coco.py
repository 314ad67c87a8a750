"""COCO instances files: a fast loader into detectron2-format records, and registration.

The loader decodes the file with msgspec into typed structs holding only the keys records
need (:mod:`catalog.coco_typed`) when msgspec is installed; otherwise, or when the file needs
an exact error message, it parses with orjson (the standard json module without it). It
pauses the garbage collector while it builds the records and builds no pycocotools index:
one pass over the images, one over the annotations.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from . import coco_typed
from .box_mode import BoxMode
from .coco_common import SkipCounts, image_record
from .dataset_catalog import DatasetCatalog
from .errors import AnnotationFormatError
from .metadata import MetadataCatalog
from .version import __version__

__all__ = ["load_coco_json", "register_coco_instances", "read_json_file", "parse_json_bytes"]

logger = logging.getLogger(__name__)

try:  # orjson parses large files several times faster than json
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None


def read_json_file(path: str) -> Any:
    """Parse a JSON file with orjson when installed, else the json module.

    Raises:
        AnnotationFormatError: the file is not valid JSON (the message names the file).

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        ...     json.dump({"a": 1}, f)
        >>> read_json_file(f.name)
        {'a': 1}
    """
    with open(path, "rb") as f:
        return parse_json_bytes(f.read(), path)


def parse_json_bytes(data: bytes, path: str) -> Any:
    """Parse JSON bytes read from ``path`` (named in the error) with orjson or json."""
    try:
        if _orjson is not None:
            return _orjson.loads(data)
        import json

        return json.loads(data)
    except ValueError as exc:  # orjson.JSONDecodeError and json.JSONDecodeError are ValueErrors
        raise AnnotationFormatError(f"{path}: not valid JSON: {exc}") from None


#: Kept for code that imported the counts class from here.
_Counts = SkipCounts


def load_coco_json(
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    dataset_name: str | None = None,
    extra_annotation_keys: Sequence[str] | None = None,
) -> list[dict]:
    """Load a COCO instances (or person keypoints) file as detectron2-format records.

    Records come in the order of the file's ``images``; each has ``file_name`` (joined to
    ``image_root``), ``height``, ``width``, ``image_id`` and ``annotations``: dicts with
    ``bbox`` (XYWH_ABS), ``bbox_mode``, ``category_id`` (contiguous 0..K-1 by sorted COCO
    category id), ``iscrowd``, and when present ``segmentation`` (polygons, or an RLE dict,
    compressed or not, kept as is), ``keypoints`` (with 0.5 added to every x and y, as
    detectron2 does) and the ``extra_annotation_keys``. Images without annotations are kept.

    Bad-data policy (errors name the file and the annotation or image id and index):

    ==========================================================  =================================
    case                                                        outcome
    ==========================================================  =================================
    top level is a JSON list (a COCO *results* file)            AnnotationFormatError
    top level not a dict, or no ``images`` list                 AnnotationFormatError
    image without ``id`` / ``file_name``, duplicate image id    AnnotationFormatError
    image without ``height`` / ``width``                        kept without them, one counted
                                                                warning
    category without ``id``, duplicate category id              AnnotationFormatError
    annotation without ``image_id`` / ``category_id`` /         AnnotationFormatError
    ``bbox``, bbox not 4 numbers, malformed segmentation
    annotation with an unknown ``category_id``                  AnnotationFormatError (class
                                                                names would be ambiguous)
    duplicate annotation ids                                    AnnotationFormatError
    annotation whose ``image_id`` is not among the images       skipped, one counted warning
    bbox with width or height <= 0 (empty or negative)          skipped, one counted warning
    polygon with fewer than 6 coordinates or an odd count       dropped, one counted warning
    instance whose polygons are all invalid                     skipped (same warning)
    annotation with ``ignore`` set                              skipped, one counted warning
    segmentation absent or an empty list                        kept as a box-only instance
    ==========================================================  =================================

    Args:
        json_file: path of the COCO json file.
        image_root: directory the images' ``file_name`` are relative to ("" keeps them as is).
        dataset_name: when given, ``thing_classes`` and ``thing_dataset_id_to_contiguous_id``
            are set in ``MetadataCatalog.get(dataset_name)``.
        extra_annotation_keys: annotation keys to copy into the records besides the default
            ones (e.g. ``["area"]``).

    Returns:
        The list of record dicts.

    Raises:
        AnnotationFormatError: see the table above.
        MetadataConflictError: ``dataset_name``'s metadata already holds different classes.

    Example:
        >>> records = load_coco_json("instances_val2017.json", "val2017", "coco_val")  # doctest: +SKIP
        >>> records[0]["annotations"][0]["bbox_mode"]  # doctest: +SKIP
        <BoxMode.XYWH_ABS: 1>
    """
    json_file = os.fspath(json_file)
    image_root = os.fspath(image_root)
    extra = tuple(extra_annotation_keys or ())
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            counts = _Counts()
            records, categories = coco_typed.convert_typed(json_file, image_root, extra, counts)
        except coco_typed.FallBack as reason:
            if coco_typed.AVAILABLE:
                logger.debug("%s: typed COCO decoding not used (%s)", json_file, reason)
            data = read_json_file(json_file)
            counts = _Counts()
            records, categories = _convert(data, json_file, image_root, extra, counts)
            del data
        _report(counts, json_file)
    finally:
        if gc_was_enabled:
            _resume_gc()
    if dataset_name is not None:
        # A missing or null name becomes the id as a string (as the typed path does).
        thing_classes = [
            c["name"] if c.get("name") is not None else str(c["id"]) for c in categories
        ]
        id_map = {c["id"]: i for i, c in enumerate(categories)}
        MetadataCatalog.get(dataset_name).set(
            thing_classes=thing_classes, thing_dataset_id_to_contiguous_id=id_map
        )
    logger.info(
        "loaded %d images and %d instances from %s",
        len(records),
        sum(len(r["annotations"]) for r in records),
        json_file,
    )
    return records


def _resume_gc() -> None:
    """Re-enable the garbage collector after a bulk load.

    Everything created while it was paused sits in the youngest generation, so the first
    allocation afterwards would scan millions of objects (seconds for COCO train), and the
    middle generation would scan them again. The records hold no reference cycles, so they
    are moved straight to the oldest generation instead (``gc.freeze()`` then
    ``gc.unfreeze()``); this changes only when they are scanned, never whether garbage is
    freed. Skipped when the application froze objects itself (e.g. before forking workers):
    unfreezing would undo that.
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    gc.enable()


def _convert(
    data: Any,
    json_file: str,
    image_root: str,
    extra_annotation_keys: tuple[str, ...],
    counts: _Counts,
) -> tuple[list[dict], list[dict]]:
    if isinstance(data, list):
        raise AnnotationFormatError(
            f"{json_file} holds a JSON list: it looks like a COCO *results* file (detections), "
            "not an instances file with 'images', 'annotations' and 'categories'"
        )
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise AnnotationFormatError(
            f"{json_file} is not a COCO instances file: expected a dict with an 'images' list, "
            f"found {found}"
        )
    annotations = data.get("annotations") or []
    categories = data.get("categories") or []
    if not isinstance(annotations, list) or not isinstance(categories, list):
        raise AnnotationFormatError(
            f"{json_file}: 'annotations' and 'categories' must be lists, got "
            f"{type(annotations).__name__} and {type(categories).__name__}"
        )
    sorted_categories = _sorted_categories(categories, json_file)
    id_map = {c["id"]: i for i, c in enumerate(sorted_categories)}
    records, annos_of_image = _image_records(data["images"], json_file, image_root, counts)
    _check_unique_annotation_ids(annotations, json_file)
    _attach_annotations(
        annotations, annos_of_image, id_map, json_file, extra_annotation_keys, counts
    )
    return records, sorted_categories


def _sorted_categories(categories: list[Any], json_file: str) -> list[dict]:
    seen: set[Any] = set()
    for index, cat in enumerate(categories):
        if not isinstance(cat, dict) or "id" not in cat:
            raise AnnotationFormatError(
                f"{json_file}: category {index} has no 'id' (got {cat!r:.100})"
            )
        if cat["id"] in seen:
            raise AnnotationFormatError(
                f"{json_file}: category id {cat['id']!r} appears more than once (index {index})"
            )
        seen.add(cat["id"])
    try:
        return sorted(categories, key=lambda c: c["id"])
    except TypeError:
        raise AnnotationFormatError(
            f"{json_file}: category ids cannot be sorted (mixed types): {sorted(map(repr, seen))}"
        ) from None


def _image_records(
    images: list[Any], json_file: str, image_root: str, counts: _Counts
) -> tuple[list[dict], dict[Any, list[dict]]]:
    records: list[dict] = []
    annos_of_image: dict[Any, list[dict]] = {}
    for index, img in enumerate(images):
        try:
            image_id = img["id"]
            file_name = img["file_name"]
        except (KeyError, TypeError):
            raise AnnotationFormatError(
                f"{json_file}: image {index} has no 'id' or 'file_name' (got {img!r:.200})"
            ) from None
        if not isinstance(file_name, str):
            raise AnnotationFormatError(
                f"{json_file}: image {image_id!r} (index {index}) has a file_name of type "
                f"{type(file_name).__name__}, not a str"
            )
        try:
            duplicate = image_id in annos_of_image
        except TypeError:
            raise AnnotationFormatError(
                f"{json_file}: image {index} has id {image_id!r}; an image id must be a number "
                "or a string"
            ) from None
        if duplicate:
            raise AnnotationFormatError(
                f"{json_file}: image id {image_id!r} appears more than once (index {index})"
            )
        annos: list[dict] = []
        annos_of_image[image_id] = annos
        records.append(
            image_record(
                file_name, image_root, img.get("height"), img.get("width"), image_id, annos, counts
            )
        )
    return records, annos_of_image


def _check_unique_annotation_ids(annotations: list[Any], json_file: str) -> None:
    try:
        ids = [a.get("id") for a in annotations]
    except AttributeError:
        bad = next(i for i, a in enumerate(annotations) if not isinstance(a, dict))
        raise AnnotationFormatError(
            f"{json_file}: annotation {bad} is a {type(annotations[bad]).__name__}, not a dict"
        ) from None
    present = [i for i in ids if i is not None]
    try:
        unique = len(set(present))
    except TypeError:
        raise AnnotationFormatError(
            f"{json_file}: annotation ids must be numbers or strings"
        ) from None
    if unique != len(present):
        seen: set[Any] = set()
        for index, ann_id in enumerate(ids):
            if ann_id is None:
                continue
            if ann_id in seen:
                raise AnnotationFormatError(
                    f"{json_file}: annotation id {ann_id!r} appears more than once "
                    f"(second time at index {index}); annotation ids must be unique"
                )
            seen.add(ann_id)


def _attach_annotations(
    annotations: list[dict],
    annos_of_image: dict[Any, list[dict]],
    id_map: dict[Any, int],
    json_file: str,
    extra_keys: tuple[str, ...],
    counts: _Counts,
) -> None:
    xywh = BoxMode.XYWH_ABS
    find_image = annos_of_image.get
    find_category = id_map.get
    index = 0
    ann: dict = {}
    try:
        for index, ann in enumerate(annotations):
            target = find_image(ann["image_id"])
            category = find_category(ann["category_id"])
            bbox = ann["bbox"]
            if target is None:
                counts.skip_orphan(ann.get("id"), ann["image_id"])
                continue
            if category is None:
                raise AnnotationFormatError(
                    f"{json_file}: annotation {ann.get('id')!r} (index {index}) has category_id "
                    f"{ann['category_id']!r}, which is not among the file's categories "
                    f"{sorted(id_map, key=repr)[:20]}"
                )
            if len(bbox) != 4:
                raise AnnotationFormatError(
                    f"{json_file}: annotation {ann.get('id')!r} (index {index}) has bbox {bbox!r}; "
                    "a COCO bbox is [x, y, width, height]"
                )
            if not (bbox[2] > 0 and bbox[3] > 0):
                counts.skip_degenerate(ann.get("id"), bbox)
                continue
            if ann.get("ignore", 0):
                counts.ignored += 1
                continue
            obj = {
                "iscrowd": ann.get("iscrowd", 0),
                "bbox": bbox,
                "category_id": category,
                "bbox_mode": xywh,
            }
            segm = ann.get("segmentation")
            if segm:
                if type(segm) is list:
                    for polygon in segm:  # the common case: every polygon valid, no copy
                        if len(polygon) < 6 or len(polygon) & 1:
                            break
                    else:
                        polygon = None
                    if polygon is not None:
                        segm = counts.drop_invalid_polygons(segm, ann.get("id"))
                        if segm is None:
                            continue
                elif type(segm) is not dict:
                    raise AnnotationFormatError(
                        f"{json_file}: annotation {ann.get('id')!r} (index {index}) has a "
                        f"segmentation of type {type(segm).__name__}; expected a list of "
                        "polygons or an RLE dict"
                    )
                obj["segmentation"] = segm
            keypoints = ann.get("keypoints")
            if keypoints:
                obj["keypoints"] = [v if i % 3 == 2 else v + 0.5 for i, v in enumerate(keypoints)]
            for key in extra_keys:
                if key in ann:
                    obj[key] = ann[key]
            target.append(obj)
    except AnnotationFormatError:
        raise
    except (KeyError, TypeError, AttributeError) as exc:
        ann_id = ann.get("id") if isinstance(ann, dict) else None
        raise AnnotationFormatError(
            f"{json_file}: annotation {ann_id!r} (index {index}) is malformed "
            f"({type(exc).__name__}: {exc}); it needs image_id, category_id and bbox "
            f"[x, y, w, h], got {ann!r:.300}"
        ) from None


def _report(counts: _Counts, json_file: str) -> None:
    if counts.orphans:
        logger.warning(
            "%s: skipped %d annotations whose image_id is not among the images "
            "(annotation id, image_id): %s",
            json_file,
            counts.orphans,
            counts.orphan_examples,
        )
    if counts.degenerate:
        logger.warning(
            "%s: skipped %d annotations with an empty or negative bbox (width or height <= 0) "
            "(annotation id, bbox): %s",
            json_file,
            counts.degenerate,
            counts.degenerate_examples,
        )
    if counts.bad_polygons:
        logger.warning(
            "%s: dropped %d invalid polygons (fewer than 6 coordinates or an odd count); "
            "skipped %d instances left without a valid polygon (annotation ids: %s)",
            json_file,
            counts.bad_polygons,
            counts.no_valid_polygon,
            counts.no_valid_polygon_examples,
        )
    if counts.ignored:
        logger.warning("%s: skipped %d annotations marked 'ignore'", json_file, counts.ignored)
    if counts.missing_size:
        logger.warning(
            "%s: %d images have no 'height' or 'width'; their records lack those keys",
            json_file,
            counts.missing_size,
        )


def register_coco_instances(
    name: str,
    metadata: dict[str, Any] | None,
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    *,
    extra_annotation_keys: Iterable[str] | None = None,
    cache: bool = True,
) -> None:
    """Register a COCO instances file as dataset ``name``; the file is read at the first get.

    Sets ``json_file``, ``image_root`` and ``evaluator_type="coco"`` (plus the given
    ``metadata``) in ``MetadataCatalog.get(name)`` now; ``thing_classes`` and
    ``thing_dataset_id_to_contiguous_id`` are set when the file is loaded.

    Args:
        name: the dataset name, e.g. ``"coco_2017_val"``.
        metadata: extra metadata keys (may be empty or None).
        json_file: path of the COCO json file.
        image_root: directory of the images.
        extra_annotation_keys: passed to :func:`load_coco_json`.
        cache: keep the parsed records in the on-disk cache (``$CATMAP_CACHE_DIR``, default
            ``~/.cache/catmap``; ``CATMAP_CACHE=0`` turns it off everywhere).

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        MetadataConflictError: the metadata already holds different values.

    Example:
        >>> register_coco_instances("my_val", {}, "ann/val.json", "images/val")  # doctest: +SKIP
        >>> DatasetCatalog.get("my_val")  # reads the file now  # doctest: +SKIP
    """
    json_file = os.fspath(json_file)
    image_root = os.fspath(image_root)
    if not isinstance(name, str):
        raise TypeError(f"a dataset name must be a str, got {type(name).__name__}: {name!r}")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(
            f"metadata of dataset {name!r} must be a dict, got {type(metadata).__name__}"
        )
    extra = tuple(extra_annotation_keys or ())

    def load() -> list[dict]:
        return load_coco_json(json_file, image_root, name, extra_annotation_keys=extra)

    DatasetCatalog.register(
        name,
        load,
        source_files=(json_file,),
        options={"cache": cache},
        cache_key={
            "loader": "catalog.coco.load_coco_json",
            "catmap_version": __version__,
            "json_file": os.path.abspath(json_file),
            "image_root": image_root,
            "extra_annotation_keys": list(extra),
            "metadata_keys_set_by_loader": ["thing_classes", "thing_dataset_id_to_contiguous_id"],
        },
    )
    try:
        MetadataCatalog.get(name).set(
            json_file=json_file, image_root=image_root, evaluator_type="coco", **(metadata or {})
        )
    except Exception:
        DatasetCatalog.remove(name)
        raise
