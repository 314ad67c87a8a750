"""What the COCO-style instances formats (COCO, LVIS) share: registering a file through the
on-disk cache (:func:`register_json_instances`) and reporting what a load skipped and loaded
(:func:`finish_load`, :func:`report_skips`).

``catalog.coco`` and ``catalog.lvis`` keep their public ``load_<kind>_json`` and
``register_<kind>_instances`` (detectron2's signatures), each a few lines calling these.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from .coco_common import SkipCounts
from .config_values import plain_container
from .dataset_catalog import DatasetCatalog
from .metadata import MetadataCatalog
from .version import __version__

__all__ = ["finish_load", "register_json_instances", "report_skips"]

# The COCO loaders' logger (skip warnings and load lines of COCO and LVIS files alike).
logger = logging.getLogger("catalog.coco")


def register_json_instances(
    name: str,
    metadata: Any,
    json_file: str | os.PathLike,
    image_root: str | os.PathLike,
    load: Callable[..., list[dict]],
    *,
    loader_name: str,
    evaluator_type: str,
    keys_set_by_loader: tuple[str, ...],
    extra_annotation_keys: Iterable[str] | None,
    cache: bool,
) -> None:
    """Register a COCO-style instances file (COCO, LVIS) read by ``load(json_file, image_root,
    name, extra_annotation_keys=...)`` at the first get, through the on-disk cache.

    ``metadata`` (a dict, a ``DictConfig`` or any mapping) is set now with ``json_file``,
    ``image_root`` and ``evaluator_type`` (which it may override, as in detectron2).
    """
    json_file = os.fspath(json_file)
    image_root = os.fspath(image_root)
    if not isinstance(name, str):
        raise TypeError(f"a dataset name must be a str, got {type(name).__name__}: {name!r}")
    metadata = plain_container(metadata)  # a DictConfig or any Mapping: a dict
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(
            f"metadata of dataset {name!r} must be a dict, got {type(metadata).__name__}"
        )
    extra = tuple(extra_annotation_keys or ())

    def load_records() -> list[dict]:
        return load(json_file, image_root, name, extra_annotation_keys=extra)

    DatasetCatalog.register(
        name,
        load_records,
        source_files=(json_file,),
        options={"cache": cache},
        cache_key={
            "loader": loader_name,
            "catmap_version": __version__,
            "json_file": os.path.abspath(json_file),
            "image_root": image_root,
            "extra_annotation_keys": list(extra),
            "metadata_keys_set_by_loader": list(keys_set_by_loader),
        },
    )
    try:
        values = {"evaluator_type": evaluator_type, **(metadata or {})}
        values.update(json_file=json_file, image_root=image_root)
        MetadataCatalog.get(name, warn_unregistered=False).set(**values)
    except Exception:
        DatasetCatalog.remove(name)
        raise


def finish_load(records: list[dict], counts: SkipCounts, json_file: str, kind: str) -> list[dict]:
    """Report what loading ``json_file`` skipped (one warning) and what it loaded; return the
    records."""
    report_skips(counts, json_file)
    logger.info(
        "loaded %d images and %d instances from %s (%s)",
        len(records),
        sum(len(r["annotations"]) for r in records),
        json_file,
        kind,
    )
    return records


def report_skips(counts: SkipCounts, json_file: str) -> None:
    """Log the one summary warning of what loading ``json_file`` skipped (nothing if none)."""
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
    if counts.negative_area:
        logger.warning(
            "%s: skipped %d annotations with a negative area (annotation id, area): %s",
            json_file,
            counts.negative_area,
            counts.negative_area_examples,
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
