"""The fast path of the COCO loader: typed decoding with msgspec (when installed).

msgspec decodes the file straight into small structs holding only the keys the records need
(``area``, ``coco_url``, ``license`` ... are skipped while parsing), which is several times
faster than building every dict and needs less memory. This path handles well-formed files
and the counted-warning cases; anything it would have to report as an error (unknown
category, malformed annotation, duplicate ids, ...) raises :class:`FallBack`, and the caller
re-runs the generic path, which produces the precise error message. Both paths give the same
records.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from .box_mode import BoxMode
from .coco_common import SkipCounts, image_record

__all__ = ["AVAILABLE", "FallBack", "convert_typed"]

logger = logging.getLogger(__name__)

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised only without msgspec
    msgspec = None

#: Whether the typed fast path can be used (msgspec is installed).
AVAILABLE = msgspec is not None

Number = int | float


class FallBack(Exception):
    """The typed path met data it does not handle; the generic path must be used."""


_BASE_ANNOTATION_FIELDS = (
    "image_id",
    "category_id",
    "bbox",
    "id",
    "segmentation",
    "iscrowd",
    "keypoints",
    "ignore",
)

if AVAILABLE:

    class _Image(msgspec.Struct, gc=False):
        id: Any
        file_name: str
        height: Any = None
        width: Any = None

    class _Category(msgspec.Struct, gc=False):
        id: Any
        name: Any = None

    @functools.lru_cache(maxsize=16)
    def _decoder(extra_keys: tuple[str, ...]) -> Any:
        fields: list[tuple[Any, ...]] = [
            ("image_id", Any),
            ("category_id", Any),
            ("bbox", list[Number]),
            ("id", Any, None),
            ("segmentation", list[list[Number]] | dict[str, Any] | None, None),
            ("iscrowd", Any, 0),
            ("keypoints", list[Number] | None, None),
            ("ignore", Any, 0),
        ]
        fields += [(key, Any, msgspec.UNSET) for key in extra_keys]
        annotation = msgspec.defstruct("_Annotation", fields, gc=False)
        coco = msgspec.defstruct(
            "_CocoFile",
            [
                ("images", list[_Image]),
                ("annotations", list[annotation] | None, None),
                ("categories", list[_Category] | None, None),
            ],
        )
        return msgspec.json.Decoder(type=coco)


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
        FallBack: msgspec is missing, the file does not match the expected schema, or it holds
            a case that must be reported as an error.

    Example:
        >>> from catalog.coco import _Counts
        >>> records, cats = convert_typed("instances.json", "images", (), _Counts())  # doctest: +SKIP
    """
    extra = tuple(extra_annotation_keys)
    if not AVAILABLE or any(k in _BASE_ANNOTATION_FIELDS for k in extra):
        raise FallBack("typed path unavailable")
    with open(json_file, "rb") as f:
        raw = f.read()
    try:
        data = _decoder(extra).decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise FallBack(str(exc)) from None
    finally:
        del raw
    try:
        categories = _categories(data.categories or [])
        id_map = {c["id"]: i for i, c in enumerate(categories)}
        records, annos_of_image = _records(data.images, image_root, counts)
        annotations = data.annotations or []
        ids = [a.id for a in annotations if a.id is not None]
        if len(set(ids)) != len(ids):
            raise FallBack("duplicate annotation ids")
        _attach(annotations, annos_of_image, id_map, extra, counts)
    except TypeError as exc:  # unhashable or unorderable ids, odd types
        raise FallBack(str(exc)) from None
    return records, categories


def _categories(categories: list[Any]) -> list[dict]:
    if len({c.id for c in categories}) != len(categories):
        raise FallBack("duplicate category ids")
    out = []
    for cat in sorted(categories, key=lambda c: c.id):
        out.append({"id": cat.id} if cat.name is None else {"id": cat.id, "name": cat.name})
    return out


def _records(images: list[Any], image_root: str, counts: SkipCounts) -> tuple[list[dict], dict]:
    records: list[dict] = []
    annos_of_image: dict[Any, list[dict]] = {}
    for img in images:
        image_id = img.id
        if image_id in annos_of_image:
            raise FallBack("duplicate image id")
        annos: list[dict] = []
        annos_of_image[image_id] = annos
        records.append(
            image_record(img.file_name, image_root, img.height, img.width, image_id, annos, counts)
        )
    return records, annos_of_image


def _attach(
    annotations: list[Any],
    annos_of_image: dict[Any, list[dict]],
    id_map: dict[Any, int],
    extra_keys: tuple[str, ...],
    counts: SkipCounts,
) -> None:
    xywh = BoxMode.XYWH_ABS
    find_image = annos_of_image.get
    find_category = id_map.get
    unset = msgspec.UNSET
    for ann in annotations:
        target = find_image(ann.image_id)
        if target is None:
            counts.skip_orphan(ann.id, ann.image_id)
            continue
        category = find_category(ann.category_id)
        bbox = ann.bbox
        if category is None or len(bbox) != 4:
            raise FallBack("unknown category or malformed bbox")
        if not (bbox[2] > 0 and bbox[3] > 0):
            counts.skip_degenerate(ann.id, bbox)
            continue
        if ann.ignore:
            counts.ignored += 1
            continue
        obj = {"iscrowd": ann.iscrowd, "bbox": bbox, "category_id": category, "bbox_mode": xywh}
        segm = ann.segmentation
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
        keypoints = ann.keypoints
        if keypoints:
            obj["keypoints"] = [v if i % 3 == 2 else v + 0.5 for i, v in enumerate(keypoints)]
        for key in extra_keys:
            value = getattr(ann, key)
            if value is not unset:
                obj[key] = value
        target.append(obj)
