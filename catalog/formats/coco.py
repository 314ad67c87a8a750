"""COCO and LVIS instances files: one msgspec decoder into checked records, and registration.

The structs hold only the keys records need and carry the type and range rules as
``msgspec.Meta`` constraints; what a schema cannot say (duplicate ids, unknown categories,
keypoint counts) is checked after. Errors name the file, the item (id and index) and the key.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct, UNSET, UnsetType

from ..box_mode import BoxMode
from .._common import AnnotationFormatError, gc_paused
from ..dataset_catalog import DatasetCatalog
from ..metadata import MetadataCatalog
from ..registry import check_name
from ..version import __version__
from .files import outside_root_problem, read_bytes
from .validate import (
    INT64_MAX,
    INT64_MIN,
    MAX_EXAMPLES,
    MAX_IMAGE_SIDE,
    MAX_NUM_KEYPOINTS,
    MAX_RLE_RUN,
    RLE_CHARS,
    extra_value_problem,
    keypoints_problem,
    short_repr,
)

logger = logging.getLogger(__name__)
_get_id = attrgetter("id")
_get_image_id, _get_annotations = itemgetter("image_id"), itemgetter("annotations")

#: Deepest nesting of JSON arrays and objects accepted anywhere in the file (the top level is 1).
MAX_JSON_DEPTH = 1024
#: Annotation keys the record sets itself; as ``extra_annotation_keys`` they change nothing.
RECORD_KEYS = frozenset(("bbox", "bbox_mode", "category_id", "iscrowd", "segmentation", "keypoints"))
#: Annotation keys read and checked by the loader; as extra keys their checked value is copied.
VALIDATED_KEYS = frozenset(("id", "image_id", "area", "num_keypoints", "ignore"))

# ---- the schema (fields in the order COCO files write them: msgspec matches keys fastest so)
_Id = Annotated[int, Meta(ge=INT64_MIN, le=INT64_MAX)]
_Side = Annotated[int, Meta(ge=1, le=MAX_IMAGE_SIDE)]
_Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
_Coord = _Id | float  # msgspec refuses floats too large for a double by itself


class _Image(Struct, gc=False, kw_only=True):
    file_name: Annotated[str, Meta(min_length=1)]
    height: _Side | None = None
    width: _Side | None = None
    id: _Id


class _LvisImage(Struct, gc=False, kw_only=True):
    file_name: Any = None  # read (and checked) only when the image has no coco_url
    coco_url: str | None = None
    height: _Side | None = None
    width: _Side | None = None
    id: _Id
    not_exhaustive_category_ids: list[_Id] | None = None
    neg_category_ids: list[_Id] | None = None


class _Category(Struct, gc=False, kw_only=True):
    id: _Id
    name: str | None = None
    keypoints: list[str] | None = None


class _LvisCategory(_Category, kw_only=True):
    synonyms: Annotated[list[str], Meta(min_length=1)] | None = None
    frequency: Literal["r", "c", "f"] | None = None
    image_count: _Count | None = None
    instance_count: _Count | None = None


class _Rle(Struct, gc=False):
    size: Annotated[list[_Side], Meta(min_length=2, max_length=2)]
    counts: Annotated[str, Meta(pattern=RLE_CHARS)] | list[Annotated[int, Meta(ge=0, le=MAX_RLE_RUN)]]


_ANNOTATION_FIELDS: list[tuple[Any, ...]] = [
    ("segmentation", list[list[_Coord]] | _Rle | None, None),
    ("area", _Coord | UnsetType, UNSET), ("iscrowd", Literal[0, 1], 0),
    ("image_id", _Id), ("bbox", Annotated[list[_Coord], Meta(min_length=4, max_length=4)]),
    ("category_id", _Id), ("id", _Id | None, None),
    ("keypoints", list[_Coord] | None, None), ("ignore", Literal[0, 1] | bool | UnsetType, UNSET),
    ("num_keypoints", Annotated[int, Meta(ge=0, le=MAX_NUM_KEYPOINTS)] | UnsetType, UNSET)]
_FIELD_NAMES = frozenset(f[0] for f in _ANNOTATION_FIELDS)


@dataclass(slots=True)
class SkipCounts:
    """Counts of skipped or repaired items (with the first examples), reported in one
    warning per kind."""

    orphans: int = 0
    orphan_examples: list[Any] = field(default_factory=list)
    degenerate: int = 0
    degenerate_examples: list[Any] = field(default_factory=list)
    negative_area: int = 0
    negative_area_examples: list[Any] = field(default_factory=list)
    bad_polygons: int = 0
    no_valid_polygon: int = 0
    no_valid_polygon_examples: list[Any] = field(default_factory=list)
    ignored: int = 0
    missing_size: int = 0

    def as_tuple(self) -> tuple[Any, ...]:
        """Every count and example list, in slot order (to compare two loads)."""
        return tuple(getattr(self, name) for name in self.__slots__)

    def skip(self, count: str, examples: list[Any], example: Any) -> None:
        """Add one to ``count`` (orphans, degenerate, negative_area, no_valid_polygon),
        keeping ``example`` among the first :data:`MAX_EXAMPLES` of ``examples``."""
        setattr(self, count, getattr(self, count) + 1)
        if len(examples) < MAX_EXAMPLES:
            examples.append(example)

    def drop_invalid_polygons(self, segm: list[Any], ann_id: Any) -> list[Any] | None:
        """The polygons of ``segm`` with at least 6 coordinates and an even count, counting the
        others; None (the instance is skipped, and counted) when none is valid. Called only
        once a caller has seen an invalid polygon, so the common case costs nothing.
        """
        valid = [p for p in segm if len(p) >= 6 and not len(p) & 1]
        self.bad_polygons += len(segm) - len(valid)
        if valid:
            return valid
        self.skip("no_valid_polygon", self.no_valid_polygon_examples, ann_id)
        return None


@functools.lru_cache(maxsize=16)
def _decoder(extra_keys: tuple[str, ...], lvis: bool) -> msgspec.json.Decoder:
    """The decoder of a file whose annotations also carry ``extra_keys`` (any JSON value)."""
    fields, rename = list(_ANNOTATION_FIELDS), {}
    for i, key in enumerate(extra_keys):
        fields.append((f"extra_{i}", Any, UNSET))
        rename[f"extra_{i}"] = key
    annotation = msgspec.defstruct("_Annotation", fields, gc=False, kw_only=True,
                                   rename=rename or None)
    image, category = (_LvisImage, _LvisCategory) if lvis else (_Image, _Category)
    coco_file = msgspec.defstruct("_CocoFile", [
        ("images", list[image]), ("annotations", list[annotation] | None, None),
        ("categories", list[category] | None, None)])
    return msgspec.json.Decoder(type=coco_file)


class _Items(Struct):
    images: list[msgspec.Raw] | None = None
    annotations: list[msgspec.Raw] | None = None
    categories: list[msgspec.Raw] | None = None


class _ItemId(Struct):
    id: Any = None


_PATH = re.compile(r"(.*) - at `\$(?:\.(\w+)\[(\d+)\])?(?:\.(\w+))?")


def _decode(json_file: str, extra_keys: tuple[str, ...], lvis: bool) -> Any:
    """The decoded file; every failure an :class:`AnnotationFormatError` naming the item."""
    raw = read_bytes(json_file, what="LVIS annotation file" if lvis else "COCO annotation file")
    decoder = _decoder(extra_keys, lvis)
    try:
        if not raw.isascii():
            raw.decode("utf-8")  # msgspec does not check the strings it skips
        try:
            return decoder.decode(raw)
        except RecursionError:  # msgspec stops at Python's recursion limit (about 1,000 levels)
            with _recursion_headroom():
                if _nesting(msgspec.json.decode(raw)) > MAX_JSON_DEPTH:
                    raise
                return decoder.decode(raw)
    except UnicodeDecodeError as exc:
        problem = f"not valid JSON: not UTF-8 near byte {exc.start}"
    except RecursionError:
        problem = f"not valid JSON: nested deeper than {MAX_JSON_DEPTH}"
    except msgspec.ValidationError as exc:  # a DecodeError: caught first
        problem = _validation_problem(raw, str(exc), extra_keys)
    except msgspec.DecodeError as exc:
        problem = f"not valid JSON: {exc}"
    raise AnnotationFormatError(f"{json_file}: {problem}")


@contextlib.contextmanager
def _recursion_headroom() -> Iterator[None]:
    """Room for MAX_JSON_DEPTH levels of nesting above the caller's stack."""
    old, frame, depth = sys.getrecursionlimit(), sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    sys.setrecursionlimit(max(old, depth + MAX_JSON_DEPTH + 50))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _nesting(value: Any) -> int:
    """How deep lists and dicts nest in ``value`` (the top level is 1); iterative."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if type(item) is list or type(item) is dict:
            deepest = max(deepest, level)
            stack.extend((c, level + 1) for c in (item.values() if type(item) is dict else item))
    return deepest


def _validation_problem(raw: bytes, message: str, extra_keys: tuple[str, ...]) -> str:
    """A schema error as the item (kind, id, index) and key it is about."""
    match = _PATH.match(message)
    problem, kind, index, key = match.groups() if match else (message, None, None, None)
    if kind is None:
        if "got `array`" in problem and key is None:
            return ("holds a JSON list: it looks like a COCO *results* file (detections), not an "
                    "instances file with 'images', 'annotations' and 'categories'")
        if key is None:
            return f"is not a COCO instances file with an 'images' list: {problem}"
        return f"{key!r}: {problem}"
    try:  # the item's id, read without checking anything else
        items = getattr(msgspec.json.decode(raw, type=_Items), kind)
        item_id = msgspec.json.decode(items[int(index)], type=_ItemId).id
    except (msgspec.MsgspecError, RecursionError):
        item_id = None
    if key and key.startswith("extra_"):
        key = extra_keys[int(key[6:])]
    where = f"{kind[:-1].replace('categorie', 'category')} {short_repr(item_id)} (index {index})"
    return f"{where}: {key!r} {problem}" if key else f"{where}: {problem}"


def load_coco_records(json_file: str | os.PathLike, image_root: str | os.PathLike,
                      extra_annotation_keys: Sequence[str] = (), *, lvis: bool = False,
                      keep_file_order: bool = False, allow_outside_root: bool = False,
                      dataset_name: str | None = None) -> tuple[list[dict], list[Any], SkipCounts]:
    """The work of :func:`load_coco_json` without metadata or warnings:
    ``(records, category structs sorted by id, skip counts)``."""
    json_file, image_root = os.fspath(json_file), os.fspath(image_root)
    extra: list[str] = []
    validated: list[str] = []
    for key in dict.fromkeys(extra_annotation_keys):
        if key in VALIDATED_KEYS:
            validated.append(key)
        elif key not in RECORD_KEYS and key not in _FIELD_NAMES:
            extra.append(key)
    counts = SkipCounts()
    with gc_paused(promote=True):
        data = _decode(json_file, tuple(extra), lvis)
        id_map: dict[int, int] = {}  # COCO category id -> contiguous id, by sorted COCO id
        for index, cat in enumerate(data.categories or []):
            if cat.id in id_map:
                _fail(json_file, "category", cat.id, index,
                      f"category id {cat.id} appears more than once")
            id_map[cat.id] = index
        categories = sorted(data.categories or [], key=_get_id)
        keypoint_counts: list[int | None] = []
        for contiguous, cat in enumerate(categories):
            id_map[cat.id] = contiguous
            keypoint_counts.append(len(cat.keypoints) if cat.keypoints else None)
        records, annos_of_image = _image_records(data.images, json_file, image_root, lvis, counts,
                                                 allow_outside_root, dataset_name)
        _attach(data.annotations or [], annos_of_image, id_map, keypoint_counts, extra, validated,
                json_file, counts)
        if lvis:
            _lvis_id_lists(data.images, records, id_map, json_file)
        if not keep_file_order:
            records.sort(key=_get_image_id)  # as detectron2 (sorted image ids); stable
    return records, categories, counts


def _fail(json_file: str, kind: str, item_id: Any, index: int, problem: str) -> None:
    raise AnnotationFormatError(f"{json_file}: {kind} {short_repr(item_id)} (index {index}): {problem}")


_BAD_URL_PARTS = ("", ".", "..")


def _lvis_file_name(img: Any, index: int, json_file: str) -> str:
    """``split_folder/file`` from the last two components of an LVIS image's ``coco_url``."""
    url = img.coco_url
    if url is None:
        if type(img.file_name) is not str or not img.file_name:
            _fail(json_file, "image", img.id, index, "has no 'coco_url' and no 'file_name' str")
        return img.file_name
    tail = url.rsplit("/", 2)[-2:] if url.count("/") >= 2 else []
    if (len(tail) != 2 or "?" in url or "#" in url
            or any(p in _BAD_URL_PARTS or "\x00" in p or "\\" in p for p in tail)):
        _fail(json_file, "image", img.id, index, f"'coco_url' {short_repr(url)} does not end in "
              "'<split folder>/<file>' (needed to find the image under image_root)")
    return tail[0] + "/" + tail[1]


def _image_records(images: list[Any], json_file: str, image_root: str, lvis: bool,
                   counts: SkipCounts, allow_outside_root: bool,
                   dataset_name: str | None) -> tuple[list[dict], dict[int, list[dict]]]:
    records: list[dict] = []
    annos_of_image: dict[int, list[dict]] = {}
    posix = os.sep == "/"
    for index, img in enumerate(images):
        image_id = img.id
        file_name = _lvis_file_name(img, index, json_file) if lvis else img.file_name
        if "\x00" in file_name:
            _fail(json_file, "image", image_id, index, "'file_name' holds a NUL character")
        if image_id in annos_of_image:
            _fail(json_file, "image", image_id, index, f"image id {image_id} appears more than once")
        if not allow_outside_root and (".." in file_name or file_name[0] in "/\\" or not posix):
            problem = outside_root_problem(file_name)
            if problem:
                key = "coco_url" if lvis and img.coco_url is not None else "file_name"
                raise AnnotationFormatError(
                    f"dataset {dataset_name!r}, {json_file}: image {short_repr(image_id)} (index "
                    f"{index}): {key!r} {short_repr(file_name)} {problem}; images must lie under "
                    "image_root (pass allow_outside_root=True to the loader or register call "
                    "to allow it)")
        if not image_root or (posix and file_name.startswith("/")):
            path = file_name
        elif posix:  # os.path.join without its per-call overhead
            path = image_root + file_name if image_root.endswith("/") else image_root + "/" + file_name
        else:  # pragma: no cover - Windows
            path = os.path.join(image_root, file_name)
        annos: list[dict] = []
        annos_of_image[image_id] = annos
        record = {"file_name": path, "height": img.height, "width": img.width,
                  "image_id": image_id, "annotations": annos}
        if img.height is None or img.width is None:
            counts.missing_size += 1  # kept without the missing keys
            for key in ("height", "width"):
                if record[key] is None:
                    del record[key]
        records.append(record)
    return records, annos_of_image


def _attach(annotations: list[Any], annos_of_image: dict[int, list[dict]], id_map: dict[int, int],
            keypoint_counts: list[int | None], extra_keys: list[str], validated_keys: list[str],
            json_file: str, counts: SkipCounts) -> None:
    """Check every annotation, then skip (orphan, empty box, negative area, ignore) or attach."""
    xywh = BoxMode.XYWH_ABS
    find_image, find_category = annos_of_image.get, id_map.get
    ids = list(map(_get_id, annotations))
    nones = ids.count(None)  # annotations without an id
    if len(set(ids)) - (nones > 0) != len(ids) - nones:  # a duplicate id: find it
        seen: set[int] = set()
        for index, ann_id in enumerate(ids):
            if ann_id in seen:
                _fail(json_file, "annotation", ann_id, index, f"annotation id {ann_id} appears "
                      "more than once; annotation ids must be unique")
            if ann_id is not None:
                seen.add(ann_id)
    del ids
    extra_fields = list(enumerate(extra_keys))
    extra: dict[str, Any] = {}
    rle, unset, find_problem = _Rle, UNSET, keypoints_problem
    for ann in annotations:
        ann_id, segm, keypoints = ann.id, ann.segmentation, ann.keypoints
        if keypoints:
            problem = find_problem(keypoints, None)
            if problem:
                _fail(json_file, "annotation", ann_id, annotations.index(ann), f"'keypoints' {problem}")
        if type(segm) is rle and type(segm.counts) is list:
            total, pixels = sum(segm.counts), segm.size[0] * segm.size[1]
            if total != pixels:
                _fail(json_file, "annotation", ann_id, annotations.index(ann), f"'segmentation' RLE counts sum to "
                      f"{total}, not height * width = {pixels}")
        if extra_fields or validated_keys:
            extra = {}
            for i, key in extra_fields:
                value = getattr(ann, f"extra_{i}")
                if value is not unset:
                    problem = extra_value_problem(value)
                    if problem:
                        _fail(json_file, "annotation", ann_id, annotations.index(ann), f"{key!r} (an extra key) {problem}")
                    extra[key] = value
            for key in validated_keys:
                value = getattr(ann, key)
                if value is not unset and value is not None:
                    extra[key] = value
        target = find_image(ann.image_id)
        if target is None:
            counts.skip("orphans", counts.orphan_examples, (ann_id, ann.image_id))
            continue
        category = find_category(ann.category_id)
        if category is None:
            _fail(json_file, "annotation", ann_id, annotations.index(ann), f"category_id {ann.category_id} is not "
                  f"among the file's categories {sorted(id_map)[:20]}")
        if keypoints and keypoint_counts[category] is not None:
            problem = find_problem(keypoints, keypoint_counts[category])
            if problem:
                _fail(json_file, "annotation", ann_id, annotations.index(ann), f"'keypoints' {problem}")
        bbox = ann.bbox
        if not (bbox[2] > 0 and bbox[3] > 0):
            counts.skip("degenerate", counts.degenerate_examples, (ann_id, bbox))
            continue
        area = ann.area
        if area is not unset and area < 0:
            counts.skip("negative_area", counts.negative_area_examples, (ann_id, area))
            continue
        if ann.ignore:
            counts.ignored += 1
            continue
        obj = {"iscrowd": ann.iscrowd, "bbox": bbox, "category_id": category, "bbox_mode": xywh}
        if segm:
            if type(segm) is list:
                for polygon in segm:  # the common case: every polygon valid, no copy
                    if len(polygon) < 6 or len(polygon) & 1:
                        segm = counts.drop_invalid_polygons(segm, ann_id)
                        break
                if segm is None:
                    continue
                obj["segmentation"] = segm
            else:
                obj["segmentation"] = {"size": segm.size, "counts": segm.counts}
        if keypoints:
            obj["keypoints"] = [v if i % 3 == 2 else v + 0.5 for i, v in enumerate(keypoints)]
        if extra:
            obj.update(extra)
        target.append(obj)


def _lvis_id_lists(images: list[Any], records: list[dict], known: dict[int, int], json_file: str) -> None:
    by_id = {r["image_id"]: r for r in records}
    for index, img in enumerate(images):
        record = by_id[img.id]
        for key in ("not_exhaustive_category_ids", "neg_category_ids"):
            ids = getattr(img, key) or []
            unknown = [i for i in ids if i not in known]
            if unknown:
                _fail(json_file, "image", img.id, index, f"{key!r} holds category ids not among "
                      f"the file's categories: {short_repr(unknown)}")
            record[key] = ids


def _report(records: list[dict], counts: SkipCounts, json_file: str, kind: str) -> list[dict]:
    """Log one summary warning per kind of what loading ``json_file`` skipped, and the totals."""
    if counts.orphans:
        logger.warning("%s: skipped %d annotations whose image_id is not among the images "
                       "(annotation id, image_id): %s", json_file, counts.orphans, counts.orphan_examples)
    if counts.degenerate:
        logger.warning("%s: skipped %d annotations with an empty or negative bbox (width or height "
                       "<= 0) (annotation id, bbox): %s", json_file, counts.degenerate,
                       counts.degenerate_examples)
    if counts.negative_area:
        logger.warning("%s: skipped %d annotations with a negative area (annotation id, area): %s",
                       json_file, counts.negative_area, counts.negative_area_examples)
    if counts.bad_polygons:
        logger.warning("%s: dropped %d invalid polygons (fewer than 6 coordinates or an odd count); "
                       "skipped %d instances left without a valid polygon (annotation ids: %s)",
                       json_file, counts.bad_polygons, counts.no_valid_polygon,
                       counts.no_valid_polygon_examples)
    if counts.ignored:
        logger.warning("%s: skipped %d annotations marked 'ignore'", json_file, counts.ignored)
    if counts.missing_size:
        logger.warning("%s: %d images have no 'height' or 'width'; their records lack those keys",
                       json_file, counts.missing_size)
    logger.info("loaded %d images and %d instances from %s (%s)", len(records),
                sum(map(len, map(_get_annotations, records))), json_file, kind)
    return records


def _thing_metadata(categories: list[Any], lvis: bool) -> dict[str, Any]:
    """``thing_classes`` (an LVIS category's first synonym, else its name, else its id) and
    ``thing_dataset_id_to_contiguous_id`` of categories sorted by id."""
    classes: list[str] = []
    id_map: dict[int, int] = {}
    for contiguous, cat in enumerate(categories):
        name = cat.synonyms[0] if lvis and cat.synonyms else cat.name
        classes.append(name if name is not None else str(cat.id))
        id_map[cat.id] = contiguous
    return {"thing_classes": classes, "thing_dataset_id_to_contiguous_id": id_map}


def load_coco_json(json_file: str | os.PathLike, image_root: str | os.PathLike,
                   dataset_name: str | None = None,
                   extra_annotation_keys: Sequence[str] | None = None, *,
                   keep_file_order: bool = False, allow_outside_root: bool = False) -> list[dict]:
    """Load a COCO instances (or person keypoints) file as detectron2-format records, one per
    image sorted by image id (as detectron2; ``keep_file_order=True``: the file's order);
    ``category_id`` is contiguous by sorted COCO id. Orphan annotations, empty boxes, negative
    areas, ``ignore`` and invalid polygons are skipped (one warning per kind). ``dataset_name``
    gets ``thing_classes`` and ``thing_dataset_id_to_contiguous_id``. A ``file_name`` that is
    absolute or climbs out of ``image_root`` with ``..`` raises AnnotationFormatError unless
    ``allow_outside_root=True``.

    Example:
        >>> records = load_coco_json("val2017.json", "val2017", "coco_val")  # doctest: +SKIP
        >>> records[0]["annotations"][0]["bbox_mode"]  # doctest: +SKIP
        <BoxMode.XYWH_ABS: 1>
    """
    json_file = os.fspath(json_file)
    records, categories, counts = load_coco_records(
        json_file, image_root, extra_annotation_keys or (), keep_file_order=keep_file_order,
        allow_outside_root=allow_outside_root, dataset_name=dataset_name)
    if dataset_name is not None:
        MetadataCatalog.get(dataset_name, warn_unregistered=False).set(
            **_thing_metadata(categories, lvis=False)
        )
    return _report(records, counts, json_file, "COCO")


def load_lvis_json(json_file: str | os.PathLike, image_root: str | os.PathLike,
                   dataset_name: str | None = None,
                   extra_annotation_keys: Sequence[str] | None = None, *,
                   keep_file_order: bool = False, allow_outside_root: bool = False) -> list[dict]:
    """Load an LVIS (v0.5 or v1) instances file as detectron2-format records, sorted by image id.

    As :func:`load_coco_json` (also ``keep_file_order`` and ``allow_outside_root``), plus
    ``not_exhaustive_category_ids`` and ``neg_category_ids`` per record; ``file_name`` is the
    last two components of ``coco_url`` (split folder and file) under ``image_root``.
    ``dataset_name`` also gets ``class_image_count`` and ``class_frequency`` when every category
    carries them."""
    json_file = os.fspath(json_file)
    records, categories, counts = load_coco_records(
        json_file, image_root, extra_annotation_keys or (), lvis=True,
        keep_file_order=keep_file_order, allow_outside_root=allow_outside_root,
        dataset_name=dataset_name)
    if dataset_name is not None:
        meta = MetadataCatalog.get(dataset_name, warn_unregistered=False)
        values = _thing_metadata(categories, lvis=True)
        if categories and all(c.image_count is not None for c in categories):
            if meta.get("class_image_count") is None:
                values["class_image_count"] = [{"id": c.id, "image_count": c.image_count}
                                               for c in categories]
        if categories and all(c.frequency is not None for c in categories):
            if meta.get("class_frequency") is None:
                values["class_frequency"] = [c.frequency for c in categories]
        meta.set(**values)
    return _report(records, counts, json_file, "LVIS")


def register_json_instances(name: str, metadata: Any, json_file: str | os.PathLike,
                            image_root: str | os.PathLike, load: Callable[..., list[dict]], *,
                            loader_name: str, evaluator_type: str,
                            keys_set_by_loader: tuple[str, ...],
                            extra_annotation_keys: Iterable[str] | None, cache: bool,
                            keep_file_order: bool, allow_outside_root: bool) -> None:
    """Register a COCO-style file read by ``load`` at the first get, through the disk cache."""
    json_file, image_root = os.fspath(json_file), os.fspath(image_root)
    check_name(name, "dataset")
    if metadata is not None and not isinstance(metadata, Mapping):  # a dict, a DictConfig
        raise TypeError(f"metadata of dataset {name!r} must be a dict, got {type(metadata).__name__}")
    extra = tuple(extra_annotation_keys or ())
    load_records = functools.partial(load, json_file, image_root, name, extra_annotation_keys=extra,
                                     keep_file_order=keep_file_order,
                                     allow_outside_root=allow_outside_root)
    DatasetCatalog.register(name, load_records, source_files=(json_file,), options={"cache": cache},
                            cache_key={
                                "loader": loader_name, "catmap_version": __version__,
                                "json_file": os.path.abspath(json_file),
                                "image_root": image_root, "extra_annotation_keys": list(extra),
                                "keep_file_order": keep_file_order,
                                "allow_outside_root": allow_outside_root,
                                "metadata_keys_set_by_loader": list(keys_set_by_loader)})
    try:
        values = {"evaluator_type": evaluator_type, **(metadata or {})}
        values.update(json_file=json_file, image_root=image_root)
        MetadataCatalog.get(name, warn_unregistered=False).set(**values)
    except Exception:
        DatasetCatalog.remove(name)
        raise


def register_coco_instances(name: str, metadata: dict[str, Any] | None,
                            json_file: str | os.PathLike, image_root: str | os.PathLike, *,
                            extra_annotation_keys: Iterable[str] | None = None, cache: bool = True,
                            keep_file_order: bool = False,
                            allow_outside_root: bool = False) -> None:
    """Register a COCO instances file as dataset ``name``; the file is read at the first get.

    ``json_file``, ``image_root``, ``evaluator_type="coco"`` and ``metadata`` are set in its
    metadata now, the classes when the file is loaded; records go through the disk cache.
    ``keep_file_order`` and ``allow_outside_root``: as in :func:`load_coco_json`.

    Example:
        >>> register_coco_instances("my_val", {}, "ann/val.json", "images/val")  # doctest: +SKIP
        >>> DatasetCatalog.get("my_val")  # reads the file now  # doctest: +SKIP
    """
    register_json_instances(
        name, metadata, json_file, image_root, load_coco_json,
        loader_name="catalog.coco.load_coco_json", evaluator_type="coco",
        keys_set_by_loader=("thing_classes", "thing_dataset_id_to_contiguous_id"),
        extra_annotation_keys=extra_annotation_keys, cache=cache, keep_file_order=keep_file_order,
        allow_outside_root=allow_outside_root)


def register_lvis_instances(name: str, metadata: dict[str, Any] | None,
                            json_file: str | os.PathLike, image_root: str | os.PathLike, *,
                            extra_annotation_keys: Iterable[str] | None = None, cache: bool = True,
                            keep_file_order: bool = False,
                            allow_outside_root: bool = False) -> None:
    """Register an LVIS instances file as dataset ``name`` (``evaluator_type="lvis"``);
    options as in :func:`register_coco_instances`.

    Example:
        >>> register_lvis_instances("my_lvis", {}, "lvis_v1_val.json", "coco")  # doctest: +SKIP
    """
    register_json_instances(
        name, metadata, json_file, image_root, load_lvis_json,
        loader_name="catalog.lvis.load_lvis_json", evaluator_type="lvis",
        keys_set_by_loader=("thing_classes", "thing_dataset_id_to_contiguous_id",
                            "class_image_count", "class_frequency"),
        extra_annotation_keys=extra_annotation_keys, cache=cache, keep_file_order=keep_file_order,
        allow_outside_root=allow_outside_root)

