"""get_detection_dataset_dicts: join registered datasets into one filtered record list."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .dataset_catalog import DatasetCatalog
from .errors import EmptyDatasetError, MetadataConflictError
from .metadata import MetadataCatalog, values_equal
from .serialized_list import RecordColumns, SerializedList

__all__ = ["get_detection_dataset_dicts", "concat_serialized", "format_class_histogram"]

logger = logging.getLogger(__name__)


def get_detection_dataset_dicts(
    names: str | Sequence[str],
    filter_empty: bool = True,
    min_keypoints: int = 0,
    check_consistency: bool = True,
) -> SerializedList:
    """The records of one or several registered datasets, joined in order and filtered.

    Filtering and the class histogram work on the SerializedList's numpy columns; only
    ``min_keypoints > 0`` unpickles the records (keypoints are not kept as a column).

    Args:
        names: a dataset name or a list of names.
        filter_empty: drop images whose annotations are all crowd, or that have none.
        min_keypoints: drop images with fewer visible keypoints (v > 0) than this.
        check_consistency: datasets whose ``thing_classes`` metadata differ raise.

    Returns:
        A SerializedList (the dataset's own cached list when one name is given and nothing
        is filtered out).

    Raises:
        ValueError: ``names`` is empty.
        DatasetNotRegisteredError: a name is not registered.
        EmptyDatasetError: a dataset has no records, or none is left after filtering.
        MetadataConflictError: with check_consistency, two datasets' thing_classes differ.

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
    if check_consistency:
        _check_thing_classes(names)

    label = names[0] if len(names) == 1 else "+".join(names)
    dataset = parts[0] if len(parts) == 1 else concat_serialized(parts, name=label)

    keep = np.ones(len(dataset), dtype=bool)
    if filter_empty:
        has_instance = _has_non_crowd_instance(dataset.columns)
        dropped = int((keep & ~has_instance).sum())
        keep &= has_instance
        logger.info(
            "removed %d images with no usable annotations from %s; %d left",
            dropped,
            label,
            int(keep.sum()),
        )
    if min_keypoints > 0:
        enough = _enough_keypoints(dataset, min_keypoints, keep)
        dropped = int((keep & ~enough).sum())
        keep &= enough
        logger.info(
            "removed %d images with fewer than %d visible keypoints from %s; %d left",
            dropped,
            min_keypoints,
            label,
            int(keep.sum()),
        )
    if not keep.all():
        dataset = dataset.subset(np.flatnonzero(keep))
    if len(dataset) == 0:
        raise EmptyDatasetError(
            f"no images left in {label} after filtering (filter_empty={filter_empty}, "
            f"min_keypoints={min_keypoints})"
        )

    class_names = MetadataCatalog.get(names[0]).get("thing_classes")
    histogram = format_class_histogram(dataset.columns, class_names)
    if histogram:
        logger.info("distribution of instances among all categories of %s:\n%s", label, histogram)
    return dataset


def _check_thing_classes(names: list[str]) -> None:
    first_name = None
    first_classes = None
    for name in names:
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


def _has_non_crowd_instance(columns: RecordColumns) -> np.ndarray:
    non_crowd = np.zeros(len(columns.iscrowd) + 1, dtype=np.int64)
    np.cumsum(columns.iscrowd == 0, out=non_crowd[1:])
    offsets = columns.category_offsets
    return (non_crowd[offsets[1:]] - non_crowd[offsets[:-1]]) > 0


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


def concat_serialized(parts: Sequence[SerializedList], name: str | None = None) -> SerializedList:
    """Join SerializedLists into one without unpickling a record.

    Example:
        >>> a = SerializedList([{"i": 0}]); b = SerializedList([{"i": 1}, {"i": 2}])
        >>> [r["i"] for r in concat_serialized([a, b])]
        [0, 1, 2]
    """
    if not parts:
        return SerializedList([], name=name)
    buffers = [p.buffer for p in parts]
    ends = []
    base = 0
    for part in parts:
        ends.append(part.ends + base)
        base += len(part.buffer)
    cat_offsets = []
    cat_base = 0
    for part in parts:
        offsets = part.columns.category_offsets
        cat_offsets.append(offsets[:-1] + cat_base)
        cat_base += int(offsets[-1])
    cat_offsets.append(np.asarray([cat_base], dtype=np.int64))
    columns = RecordColumns(
        np.concatenate([p.columns.heights for p in parts]),
        np.concatenate([p.columns.widths for p in parts]),
        np.concatenate([p.columns.category_ids for p in parts]),
        np.concatenate([p.columns.iscrowd for p in parts]),
        np.concatenate(cat_offsets),
    )
    return SerializedList.from_arrays(
        np.concatenate(buffers), np.concatenate(ends).astype(np.int64), columns, name=name
    )


def format_class_histogram(columns: RecordColumns, class_names: Sequence[str] | None) -> str:
    """A text table of the number of non-crowd instances per category.

    Example:
        >>> cols = SerializedList([{"annotations": [{"category_id": 1}, {"category_id": 1}]}]).columns
        >>> print(format_class_histogram(cols, ["cat", "dog"]))  # doctest: +NORMALIZE_WHITESPACE
        category | #instances
        -------- | ----------
        cat      |          0
        dog      |          2
        -------- | ----------
        total    |          2
    """
    ids = columns.category_ids[(columns.iscrowd == 0) & (columns.category_ids >= 0)]
    num_classes = len(class_names) if class_names is not None else 0
    if len(ids):
        num_classes = max(num_classes, int(ids.max()) + 1)
    if num_classes == 0:
        return ""
    counts = np.bincount(ids, minlength=num_classes)
    labels = [
        str(class_names[i]) if class_names is not None and i < len(class_names) else str(i)
        for i in range(num_classes)
    ]
    name_width = max(len("category"), max(len(label) for label in labels), len("total"))
    count_width = max(len("#instances"), len(str(int(counts.sum()))))
    lines = [f"{'category':<{name_width}} | {'#instances':>{count_width}}"]
    rule = f"{'-' * name_width} | {'-' * count_width}"
    lines.append(rule)
    for label, count in zip(labels, counts.tolist(), strict=True):
        lines.append(f"{label:<{name_width}} | {count:>{count_width}}")
    lines.append(rule)
    lines.append(f"{'total':<{name_width}} | {int(counts.sum()):>{count_width}}")
    return "\n".join(lines)
