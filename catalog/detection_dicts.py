"""get_detection_dataset_dicts: join registered datasets into one filtered record list."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .dataset_catalog import DatasetCatalog
from ._common import EmptyDatasetError, MetadataConflictError
from .metadata import MetadataCatalog, values_equal
from .storage.records import RecordColumns, SerializedList, concat_records

__all__ = ["get_detection_dataset_dicts"]

logger = logging.getLogger(__name__)


def get_detection_dataset_dicts(names: str | Sequence[str], filter_empty: bool = True,
                                min_keypoints: int = 0,
                                check_consistency: bool = True) -> SerializedList:
    """The records of one or several registered datasets, joined in order and filtered.

    ``filter_empty`` drops images with no non-crowd annotation, ``min_keypoints`` those with
    fewer visible keypoints, ``check_consistency`` refuses datasets whose ``thing_classes``
    differ (MetadataConflictError). Filters read the numpy columns; the result is a view
    over the cached lists (no record copied). EmptyDatasetError when nothing is left.

    Example:
        >>> DatasetCatalog.register("doc_a", lambda: [
        ...     {"file_name": "a.jpg", "height": 4, "width": 4, "image_id": 0,
        ...      "annotations": [{"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": 0}]},
        ...     {"file_name": "b.jpg", "height": 4, "width": 4, "image_id": 1, "annotations": []}])
        >>> len(get_detection_dataset_dicts("doc_a"))
        1
        >>> DatasetCatalog.remove("doc_a")
    """
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names:
        raise ValueError("get_detection_dataset_dicts needs at least one dataset name")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"dataset names must be strs, got {type(name).__name__}: {name!r}")

    parts = []
    for name in names:
        records = DatasetCatalog.get(name)
        if len(records) == 0:
            raise EmptyDatasetError(f"dataset {name!r} is empty (its loader returned no records)")
        parts.append(records)
    first_name, first_classes = None, None
    for name in names if check_consistency else ():
        classes = MetadataCatalog.get(name).get("thing_classes")
        if classes is None:
            continue
        if first_classes is None:
            first_name, first_classes = name, classes
        elif not values_equal(first_classes, classes):
            raise MetadataConflictError(
                f"datasets {first_name!r} and {name!r} have different thing_classes: "
                f"{list(first_classes)!r:.300} vs {list(classes)!r:.300}; pass "
                "check_consistency=False to join them anyway"
            )

    label = names[0] if len(names) == 1 else "+".join(names)
    # A view over the shared DatasetCatalog buffers (one per dataset): nothing is copied.
    dataset = concat_records(parts, name=label)

    keep = np.ones(len(dataset), dtype=bool)
    if filter_empty:
        # non-crowd annotations per record, from each base's own columns (no joined arrays)
        counts = []
        for part in parts:
            columns = part.columns
            non_crowd = np.zeros(len(columns.iscrowd) + 1, dtype=np.int64)
            np.cumsum(columns.iscrowd == 0, out=non_crowd[1:])
            offsets = columns.category_offsets
            counts.append(non_crowd[offsets[1:]] - non_crowd[offsets[:-1]])
        keep &= np.concatenate(counts) > 0
        logger.info("removed %d images with no usable annotations from %s; %d left",
                    int((~keep).sum()), label, int(keep.sum()))  # fmt: skip
    if min_keypoints > 0:
        enough = _enough_keypoints(dataset, min_keypoints, keep)
        dropped = int((keep & ~enough).sum())
        keep &= enough
        logger.info("removed %d images with fewer than %d visible keypoints from %s; %d left",
                    dropped, min_keypoints, label, int(keep.sum()))  # fmt: skip
    if not keep.all():
        dataset = dataset.subset(np.flatnonzero(keep))
    if len(dataset) == 0:
        raise EmptyDatasetError(
            f"no images left in {label} after filtering (filter_empty={filter_empty}, "
            f"min_keypoints={min_keypoints})"
        )

    class_names = MetadataCatalog.get(names[0]).get("thing_classes")
    # from each base's columns and the kept records: no gathered column arrays
    ids, start = [], 0
    for part in parts:
        ids.append(_instance_ids(part.columns, keep[start : start + len(part)]))
        start += len(part)
    histogram = _format_counts(ids, class_names)
    if histogram:
        logger.info("distribution of instances among all categories of %s:\n%s", label, histogram)
    return dataset


def _enough_keypoints(dataset: SerializedList, min_keypoints: int, keep: np.ndarray) -> np.ndarray:
    enough = np.zeros(len(dataset), dtype=bool)
    for index in np.flatnonzero(keep).tolist():
        visible = 0
        for anno in dataset[index].get("annotations") or ():
            keypoints = anno.get("keypoints") if isinstance(anno, dict) else None
            if keypoints:
                visible += int((np.asarray(keypoints[2::3]) > 0).sum())
        enough[index] = visible >= min_keypoints
    return enough


def _instance_ids(columns: RecordColumns, records: np.ndarray | None = None) -> np.ndarray:
    """Category ids of the non-crowd annotations (of the records where ``records`` is True)."""
    usable = (columns.iscrowd == 0) & (columns.category_ids >= 0)
    if records is not None:
        usable &= np.repeat(records, columns.num_annotations())
    return columns.category_ids[usable]


def _format_counts(id_parts: list[np.ndarray], class_names: Sequence[str] | None) -> str:
    ids = np.concatenate([np.zeros(0, np.int32), *id_parts])
    num_classes = len(class_names) if class_names is not None else 0
    if len(ids):
        num_classes = max(num_classes, int(ids.max()) + 1)
    if num_classes == 0:
        return ""
    counts = np.bincount(ids, minlength=num_classes)
    labels = list(map(str, range(num_classes)))
    if class_names is not None:
        labels[: len(class_names)] = map(str, class_names)
    name_width = max(len("category"), max(map(len, labels)), len("total"))
    count_width = max(len("#instances"), len(str(int(counts.sum()))))
    lines = [f"{'category':<{name_width}} | {'#instances':>{count_width}}"]
    rule = f"{'-' * name_width} | {'-' * count_width}"
    lines.append(rule)
    for label, count in zip(labels, counts.tolist(), strict=True):
        lines.append(f"{label:<{name_width}} | {count:>{count_width}}")
    lines.append(rule)
    lines.append(f"{'total':<{name_width}} | {int(counts.sum()):>{count_width}}")
    return "\n".join(lines)
