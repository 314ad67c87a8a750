"""COCO instances files: a fast loader into detectron2-format records, and registration.

The loader decodes the file with msgspec into typed structs holding only the keys records
need (:mod:`catalog.coco_typed`) when msgspec is installed; otherwise, or when the file needs
an exact error message, it parses with orjson (the standard json module without it) and
converts the dicts (:mod:`catalog.coco_generic`). Every path checks the same types and ranges
and gives the same records, skip counts and error class on any bytes (held by the fuzz tests).
It pauses the garbage collector while it builds the records and builds no pycocotools index:
one pass over the images, one over the annotations.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from . import coco_typed
from .coco_common import SkipCounts
from .coco_generic import convert_generic
from .coco_json import PARSERS, parse_json_bytes, read_json_file
from .gc_pause import gc_paused
from .json_instances import finish_load, register_json_instances
from .metadata import MetadataCatalog

__all__ = [
    "load_coco_json",
    "register_coco_instances",
    "read_json_file",
    "parse_json_bytes",
    "load_coco_records",
    "COCO_PARSERS",
]

logger = logging.getLogger(__name__)

#: The values of ``load_coco_records(parser=...)``: "auto" (msgspec when installed, else the
#: best Python parser), "msgspec" (typed, falling back to the best Python parser for errors),
#: and the Python parsers themselves.
COCO_PARSERS = ("auto", "msgspec", *PARSERS)


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
    category id), ``iscrowd``, and when present ``segmentation`` (polygons, or an RLE dict
    ``{"size", "counts"}``, compressed or not), ``keypoints`` (with 0.5 added to every x and
    y, as detectron2 does) and the ``extra_annotation_keys``. Images without annotations are
    kept.

    The file is untrusted input: every value read is checked by type and range, with the same
    verdict whichever parser runs (msgspec, orjson or json). Policy (errors are
    :class:`AnnotationFormatError` naming the file, the image or annotation id and index, and
    the key; "counted" means one summary warning per file and kind):

    ==========================================================  =================================
    case                                                        outcome
    ==========================================================  =================================
    not UTF-8, byte order mark, NaN/Infinity, lone surrogate     AnnotationFormatError
    escape, trailing data, any other invalid JSON
    arrays/objects nested deeper than MAX_JSON_DEPTH (1024)      AnnotationFormatError
    top level is a JSON list (a COCO *results* file)            AnnotationFormatError
    top level not a dict, no ``images`` list; ``annotations``   AnnotationFormatError
    or ``categories`` neither a list nor null/absent
    image: not a dict, ``id`` not an int (bool is not), id      AnnotationFormatError
    outside 64 bits, duplicate id; ``file_name`` not a str,
    empty or holding NUL; ``height``/``width`` not an int in
    [1, MAX_IMAGE_SIDE = 2**20]
    image ``height`` / ``width`` absent or null                 kept without them, counted
    category: no ``id``, id not a 64-bit int, duplicate id,     AnnotationFormatError
    ``name`` not a str, ``keypoints`` not a list of str
    category ``name`` absent or null                            the class name is the id
    annotation not a dict; ``id`` (optional) / ``image_id`` /   AnnotationFormatError
    ``category_id`` not a 64-bit int; duplicate ``id``
    ``bbox`` not 4 numbers (bool is not; ints within 64 bits,   AnnotationFormatError
    floats finite)
    ``area`` not such a number; ``iscrowd`` not 0/1;            AnnotationFormatError
    ``ignore`` not 0/1/true/false; ``num_keypoints`` not an
    int in [0, 2**31)
    ``segmentation`` not a list, an RLE dict or null; a        AnnotationFormatError
    polygon not a list of such numbers
    RLE: ``size`` not [h, w] ints in [1, 2**20]; ``counts``      AnnotationFormatError
    neither a str of RLE characters (``0``..``o``) nor a list
    of ints >= 0 summing to h * w (an empty dict included)
    ``keypoints`` not such numbers, length not a                AnnotationFormatError
    multiple of 3, a visibility not 0/1/2, or not 3 * K when
    the category names K keypoints (an empty name list
    names none)
    a copied extra key's value (other than id, image_id,        AnnotationFormatError
    area, num_keypoints, ignore: checked as above) with an int
    outside 64 bits, a float too large for a double, or
    nesting deeper than MAX_EXTRA_DEPTH (32)
    annotation with an unknown ``category_id``                  AnnotationFormatError (class
                                                                names would be ambiguous)
    annotation whose ``image_id`` is not among the images       skipped, counted
    bbox with width or height <= 0 (empty or negative)          skipped, counted
    ``area`` < 0                                                skipped, counted
    polygon with fewer than 6 coordinates or an odd count       dropped, counted
    instance whose polygons are all invalid                     skipped (same warning)
    annotation with ``ignore`` set                              skipped, counted
    segmentation absent, null or an empty list                  kept as a box-only instance
    keypoints absent, null or an empty list                     no ``keypoints`` key
    ==========================================================  =================================

    Every annotation is checked, including those then skipped; then, in this order: image_id
    not among the images (skip), unknown category (error), keypoint count against the
    category (error), empty bbox (skip), negative area (skip), ``ignore`` (skip), invalid
    polygons (drop, or skip when none is left). Numbers too large for a double
    are refused where read and ignored elsewhere (``info``, unread keys). Extra keys named
    ``bbox``, ``bbox_mode``, ``category_id``, ``iscrowd``, ``segmentation`` or ``keypoints``
    change nothing (the record holds the checked value); ``id``, ``area``, ... are copied when
    present and not null. Pixel-level consistency (an RLE's size against the image's,
    polygons inside the image) is checked by the mappers.

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
        >>> records = load_coco_json("val2017.json", "val2017", "coco_val")  # doctest: +SKIP
        >>> records[0]["annotations"][0]["bbox_mode"]  # doctest: +SKIP
        <BoxMode.XYWH_ABS: 1>
    """
    json_file = os.fspath(json_file)
    records, categories, counts = load_coco_records(
        json_file, image_root, tuple(extra_annotation_keys or ())
    )
    if dataset_name is not None:
        # A missing or null name becomes the id as a string.
        thing_classes = [c["name"] if c["name"] is not None else str(c["id"]) for c in categories]
        id_map = {c["id"]: i for i, c in enumerate(categories)}
        MetadataCatalog.get(dataset_name, warn_unregistered=False).set(
            thing_classes=thing_classes, thing_dataset_id_to_contiguous_id=id_map
        )
    return finish_load(records, counts, json_file, "COCO")


def load_coco_records(
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    extra_annotation_keys: Sequence[str] = (),
    *,
    parser: str = "auto",
) -> tuple[list[dict], list[dict], SkipCounts]:
    """The work of :func:`load_coco_json` without metadata or warnings, with a chosen parser.

    ``parser`` (one of :data:`COCO_PARSERS`) forces a decoding path; every path returns the
    same result or raises the same error class on the same bytes (what the fuzz tests check).

    Returns:
        ``(records, categories sorted by id as {"id", "name"} dicts, skip counts)``.

    Raises:
        AnnotationFormatError: see :func:`load_coco_json`.
        ValueError: an unknown ``parser``, or "msgspec" when msgspec is not installed.

    Example:
        >>> out = load_coco_records("val.json", "", parser="json")  # doctest: +SKIP
        >>> records, categories, counts = out  # doctest: +SKIP
    """
    if parser not in COCO_PARSERS:
        raise ValueError(f"parser must be one of {COCO_PARSERS}, got {parser!r}")
    if parser == "msgspec" and not coco_typed.AVAILABLE:
        raise ValueError("parser='msgspec' needs msgspec installed")
    json_file = os.fspath(json_file)
    image_root = os.fspath(image_root)
    extra = tuple(extra_annotation_keys)
    with gc_paused(promote=True):
        if parser in ("auto", "msgspec") and coco_typed.AVAILABLE:
            try:
                counts = SkipCounts()
                records, categories = coco_typed.convert_typed(json_file, image_root, extra, counts)
                return records, categories, counts
            except coco_typed.FallBack as reason:
                logger.debug("%s: typed COCO decoding not used (%s)", json_file, reason)
        with open(json_file, "rb") as f:
            data = parse_json_bytes(f.read(), json_file, None if parser in ("auto", "msgspec")
                                    else parser)
        counts = SkipCounts()
        records, categories = convert_generic(data, json_file, image_root, extra, counts)
        del data
        return records, categories, counts


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
    register_json_instances(
        name, metadata, json_file, image_root, load_coco_json,
        loader_name="catalog.coco.load_coco_json", evaluator_type="coco",
        keys_set_by_loader=("thing_classes", "thing_dataset_id_to_contiguous_id"),
        extra_annotation_keys=extra_annotation_keys, cache=cache,
    )
