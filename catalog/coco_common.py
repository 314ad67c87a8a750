"""What the two COCO decoding paths (json/orjson dicts and msgspec structs) share: the counts of
skipped items and the construction of an image's record."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["SkipCounts", "image_record"]

#: How many example ids each warning lists.
MAX_EXAMPLES = 5


class SkipCounts:
    """Counts of skipped or repaired items, reported in one warning per kind.

    Example:
        >>> counts = SkipCounts()
        >>> counts.drop_invalid_polygons([[0, 0, 1, 0, 1, 1], [0, 0]], ann_id=7)
        [[0, 0, 1, 0, 1, 1]]
        >>> counts.bad_polygons
        1
    """

    __slots__ = (
        "orphans",
        "orphan_examples",
        "degenerate",
        "degenerate_examples",
        "bad_polygons",
        "no_valid_polygon",
        "no_valid_polygon_examples",
        "ignored",
        "missing_size",
    )

    def __init__(self) -> None:
        self.orphans = 0
        self.orphan_examples: list[Any] = []
        self.degenerate = 0
        self.degenerate_examples: list[Any] = []
        self.bad_polygons = 0
        self.no_valid_polygon = 0
        self.no_valid_polygon_examples: list[Any] = []
        self.ignored = 0
        self.missing_size = 0

    def skip_orphan(self, ann_id: Any, image_id: Any) -> None:
        """Count an annotation whose image_id is not among the images."""
        self.orphans += 1
        if len(self.orphan_examples) < MAX_EXAMPLES:
            self.orphan_examples.append((ann_id, image_id))

    def skip_degenerate(self, ann_id: Any, bbox: Any) -> None:
        """Count an annotation with an empty or negative bbox."""
        self.degenerate += 1
        if len(self.degenerate_examples) < MAX_EXAMPLES:
            self.degenerate_examples.append((ann_id, bbox))

    def drop_invalid_polygons(self, segm: list[Any], ann_id: Any) -> list[Any] | None:
        """The polygons of ``segm`` with at least 6 coordinates and an even count, counting the
        others; None (the instance is skipped, and counted) when none is valid. Called only
        once a caller has seen an invalid polygon, so the common case costs nothing."""
        valid = [p for p in segm if len(p) >= 6 and not len(p) & 1]
        self.bad_polygons += len(segm) - len(valid)
        if valid:
            return valid
        self.no_valid_polygon += 1
        if len(self.no_valid_polygon_examples) < MAX_EXAMPLES:
            self.no_valid_polygon_examples.append(ann_id)
        return None


def image_record(
    file_name: str,
    image_root: str,
    height: Any,
    width: Any,
    image_id: Any,
    annos: list[dict],
    counts: SkipCounts,
) -> dict[str, Any]:
    """The record of one COCO image, keys in the record format's order; an image without
    height or width is kept without those keys (and counted).

    Example:
        >>> image_record("a.jpg", "imgs", 4, 6, 1, [], SkipCounts())["file_name"]
        'imgs/a.jpg'
    """
    path = os.path.join(image_root, file_name) if image_root else file_name
    if height is None or width is None:
        counts.missing_size += 1
        record: dict[str, Any] = {"file_name": path}
        if height is not None:
            record["height"] = height
        if width is not None:
            record["width"] = width
        record["image_id"] = image_id
        record["annotations"] = annos
        return record
    return {
        "file_name": path,
        "height": height,
        "width": width,
        "image_id": image_id,
        "annotations": annos,
    }
