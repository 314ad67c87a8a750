"""The fast path of the COCO loader: typed decoding with msgspec (when installed).

msgspec decodes the file straight into small structs holding only the keys the records need
(``coco_url``, ``license`` ... are skipped while parsing), which is several times faster than
building every dict and needs less memory. The structs carry the loader's type and range rules
(:mod:`catalog.coco_common` limits, as ``msgspec.Meta`` constraints), so checking them costs
nothing beyond the decoding. Anything this path would have to report as an error (a value out
of range, an unknown category, duplicate ids, bytes that are not UTF-8, ...) raises
:class:`FallBack`, and the caller re-runs the generic path (:mod:`catalog.coco_generic`),
which produces the precise error message. Both paths give the same records and skip counts.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Any, Literal

from . import coco_common as common
from .box_mode import BoxMode
from .coco_common import MAX_JSON_DEPTH, SkipCounts
from .coco_generic import RECORD_KEYS, VALIDATED_KEYS, rle_sum_problem
from .coco_json import check_utf8, json_depth
from .errors import AnnotationFormatError

__all__ = ["AVAILABLE", "FallBack", "convert_typed"]


try:
    import msgspec
except ImportError:  # pragma: no cover - exercised only without msgspec
    msgspec = None

#: Whether the typed fast path can be used (msgspec is installed).
AVAILABLE = msgspec is not None


_get_id = attrgetter("id")


class FallBack(Exception):
    """The typed path met data it does not handle; the generic path must be used."""


if AVAILABLE:
    Meta = msgspec.Meta
    _Id = Annotated[int, Meta(ge=common.INT64_MIN, le=common.INT64_MAX)]
    _Side = Annotated[int, Meta(ge=1, le=common.MAX_IMAGE_SIDE)]
    # msgspec refuses floats too large for a double by itself; a range constraint on floats
    # would cost about 15% of the decoding time.
    _Coord = _Id | float
    _RleCounts = Annotated[str, Meta(pattern=common.RLE_CHARS)] | list[
        Annotated[int, Meta(ge=0, le=common.MAX_RLE_RUN)]
    ]
    _Unset = msgspec.UnsetType

    # Fields in the order COCO files write them: msgspec matches keys fastest that way.
    class _Image(msgspec.Struct, gc=False, kw_only=True):
        file_name: Annotated[str, Meta(min_length=1)]  # NUL is refused in _records
        height: _Side | None = None
        width: _Side | None = None
        id: _Id

    class _Category(msgspec.Struct, gc=False):
        id: _Id
        name: str | None = None
        keypoints: list[str] | None = None

    class _Rle(msgspec.Struct, gc=False):
        size: Annotated[list[_Side], Meta(min_length=2, max_length=2)]
        counts: _RleCounts

    _BASE_FIELDS: list[tuple[Any, ...]] = [
        ("segmentation", list[list[_Coord]] | _Rle | None, None),
        ("area", _Coord | _Unset, msgspec.UNSET),
        ("iscrowd", Literal[0, 1], 0),
        ("image_id", _Id),
        ("bbox", Annotated[list[_Coord], Meta(min_length=4, max_length=4)]),
        ("category_id", _Id),
        ("id", _Id | None, None),
        ("keypoints", list[_Coord] | None, None),
        ("ignore", Literal[0, 1] | bool | _Unset, msgspec.UNSET),
        (
            "num_keypoints",
            Annotated[int, Meta(ge=0, le=common.MAX_NUM_KEYPOINTS)] | _Unset,
            msgspec.UNSET,
        ),
    ]
    _FIELD_NAMES = frozenset(f[0] for f in _BASE_FIELDS)

    @functools.lru_cache(maxsize=16)
    def _decoder(extra_keys: tuple[str, ...]) -> Any:
        fields = _BASE_FIELDS + [(key, Any, msgspec.UNSET) for key in extra_keys]
        annotation = msgspec.defstruct("_Annotation", fields, gc=False, kw_only=True)
        coco = msgspec.defstruct(
            "_CocoFile",
            [
                ("images", list[_Image]),
                ("annotations", list[annotation] | None, None),
                ("categories", list[_Category] | None, None),
            ],
        )
        return msgspec.json.Decoder(type=coco)

    _DEPTH_PROBE = b'{"images": [], "_": ' + b"[" * (MAX_JSON_DEPTH - 8) + b"]" * (
        MAX_JSON_DEPTH - 8
    ) + b"}"


def _may_nest_deeper_than_allowed(decoder: Any) -> bool:
    """Whether msgspec, called from here, could decode nesting deeper than MAX_JSON_DEPTH.

    msgspec stops deep input with RecursionError at Python's recursion limit; with the default
    limit it never reaches MAX_JSON_DEPTH (checked on a probe 8 levels shallower, which covers
    the nesting of any field of the schema), and the bytes need no depth scan.
    """
    try:
        decoder.decode(_DEPTH_PROBE)
    except RecursionError:
        return False
    return True


def convert_typed(
    json_file: str,
    image_root: str,
    extra_annotation_keys: Sequence[str],
    counts: SkipCounts,
) -> tuple[list[dict], list[dict]]:
    """Read, decode and convert a COCO file; ``(records, sorted categories)``.

    The file's bytes are dropped as soon as they are decoded, before the records are built,
    which keeps the peak memory down.

    Raises:
        FallBack: msgspec is missing, or the file holds anything the generic path must report
            (then it raises the precise error) or decide.

    Example:
        >>> out = convert_typed("instances.json", "images", (), SkipCounts())  # doctest: +SKIP
    """
    if not AVAILABLE:
        raise FallBack("typed path unavailable")
    extra = tuple(
        k for k in extra_annotation_keys if k not in RECORD_KEYS and k not in _FIELD_NAMES
    )
    validated = tuple(k for k in extra_annotation_keys if k in VALIDATED_KEYS)
    try:
        decoder = _decoder(extra)
    except (TypeError, ValueError) as exc:  # a key msgspec cannot take as a field name
        raise FallBack(f"extra keys: {exc}") from None
    with open(json_file, "rb") as f:
        raw = f.read()
    try:
        check_utf8(raw, json_file)  # msgspec does not check the strings it skips
        if _may_nest_deeper_than_allowed(decoder) and json_depth(raw) > MAX_JSON_DEPTH:
            raise FallBack("nested too deep")
        data = decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError,
            AnnotationFormatError) as exc:
        raise FallBack(f"{type(exc).__name__}: {exc}") from None
    finally:
        del raw
    categories, keypoint_counts = _categories(data.categories or [])
    id_map = {c["id"]: i for i, c in enumerate(categories)}
    records, annos_of_image = _records(data.images, image_root, counts)
    annotations = data.annotations or []
    ids = list(map(_get_id, annotations))
    unique = set(ids)
    if len(unique) - (None in unique) != len(ids) - ids.count(None):
        raise FallBack("duplicate annotation ids")
    del ids, unique
    _attach(annotations, annos_of_image, id_map, keypoint_counts, extra, validated, counts)
    return records, categories


def _categories(categories: list[Any]) -> tuple[list[dict], list[int | None]]:
    if len({c.id for c in categories}) != len(categories):
        raise FallBack("duplicate category ids")
    ordered = sorted(categories, key=lambda c: c.id)
    return (
        [{"id": c.id, "name": c.name} for c in ordered],
        [len(c.keypoints) if c.keypoints else None for c in ordered],
    )


def _records(images: list[Any], image_root: str, counts: SkipCounts) -> tuple[list[dict], dict]:
    records: list[dict] = []
    annos_of_image: dict[int, list[dict]] = {}
    for img in images:
        image_id = img.id
        if image_id in annos_of_image or "\x00" in img.file_name:
            raise FallBack("duplicate image id or NUL in a file name")
        annos: list[dict] = []
        annos_of_image[image_id] = annos
        records.append(
            common.image_record(
                img.file_name, image_root, img.height, img.width, image_id, annos, counts
            )
        )
    return records, annos_of_image


def _attach(
    annotations: list[Any],
    annos_of_image: dict[int, list[dict]],
    id_map: dict[int, int],
    keypoint_counts: list[int | None],
    extra_keys: tuple[str, ...],
    validated_keys: tuple[str, ...],
    counts: SkipCounts,
) -> None:
    xywh = BoxMode.XYWH_ABS
    find_image = annos_of_image.get
    find_category = id_map.get
    rle = _Rle
    unset = msgspec.UNSET
    has_extra = bool(extra_keys or validated_keys)
    extra: dict[str, Any] = {}
    for ann in annotations:
        segm = ann.segmentation
        keypoints = ann.keypoints
        if keypoints and common.keypoints_problem(keypoints, None):
            raise FallBack("malformed keypoints")
        if type(segm) is rle and rle_sum_problem(segm.size, segm.counts):
            raise FallBack("RLE counts do not match its size")
        if has_extra:
            extra = _extra_values(ann, extra_keys, validated_keys)
        target = find_image(ann.image_id)
        if target is None:
            counts.skip_orphan(ann.id, ann.image_id)
            continue
        category = find_category(ann.category_id)
        if category is None:
            raise FallBack("unknown category")
        if keypoints and keypoint_counts[category] is not None:
            if common.keypoints_problem(keypoints, keypoint_counts[category]):
                raise FallBack("keypoints do not match the category")
        bbox = ann.bbox
        if not (bbox[2] > 0 and bbox[3] > 0):
            counts.skip_degenerate(ann.id, bbox)
            continue
        area = ann.area
        if area is not unset and area < 0:
            counts.skip_negative_area(ann.id, area)
            continue
        if ann.ignore:
            counts.ignored += 1
            continue
        obj = {"iscrowd": ann.iscrowd, "bbox": bbox, "category_id": category, "bbox_mode": xywh}
        if segm:
            if type(segm) is list:
                for polygon in segm:  # the common case: every polygon valid, no copy
                    if len(polygon) < 6 or len(polygon) & 1:
                        break
                else:
                    polygon = None
                if polygon is not None:
                    segm = counts.drop_invalid_polygons(segm, ann.id)
                    if segm is None:
                        continue
                obj["segmentation"] = segm
            else:
                obj["segmentation"] = common.rle_dict(segm.size, segm.counts)
        if keypoints:
            obj["keypoints"] = common.shift_keypoints(keypoints)
        if extra:
            obj.update(extra)
        target.append(obj)


def _extra_values(ann: Any, extra_keys: tuple[str, ...], validated_keys: tuple[str, ...]) -> dict:
    unset = msgspec.UNSET
    extra: dict[str, Any] = {}
    for key in extra_keys:
        value = getattr(ann, key)
        if value is not unset:
            if common.extra_value_problem(value):
                raise FallBack(f"extra key {key!r}")
            extra[key] = value
    for key in validated_keys:
        value = getattr(ann, key)
        if value is not unset and value is not None:
            extra[key] = value
    return extra

