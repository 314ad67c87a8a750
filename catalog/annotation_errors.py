"""Errors and skip counts of the OpenMMLab annotation-file loader.

:class:`AnnotationFieldError` (an :class:`~catalog.errors.AnnotationFormatError`) names the
file, ``data_list`` index, ``img_id``, instance index and key of a malformed value;
:class:`AnnotationSkips` counts what the policy skips and reports it in one warning per file.
"""

from __future__ import annotations

import logging

from .errors import AnnotationFormatError, CatmapErrorWithFields

__all__ = [
    "AnnotationFieldError",
    "AnnotationFieldTypeError",
    "ParseDataInfoError",
    "AnnotationSkips",
    "MAX_EXAMPLES",
]

#: How many examples the summary warning lists.
MAX_EXAMPLES = 5


class AnnotationFieldError(AnnotationFormatError, CatmapErrorWithFields):
    """A value in an annotation file has the wrong type or is out of range.

    Attributes:
        path: the annotation file.
        index: the ``data_list`` index (None for ``metainfo``).
        img_id: the record's ``img_id`` when it has a valid one.
        instance: the index in ``instances`` (None outside instances).
        key: the key whose value is wrong.

    Example:
        >>> err = AnnotationFieldError("bad", path="a.json", index=3, key="bbox")
        >>> err.index, err.key
        (3, 'bbox')
    """

    field_names = ("path", "index", "img_id", "instance", "key")


class AnnotationFieldTypeError(AnnotationFieldError, TypeError):
    """A value in an annotation file has the wrong type (also a ``TypeError``)."""


class ParseDataInfoError(CatmapErrorWithFields, TypeError):
    """A caller's ``parse_data_info`` returned something other than a dict or list of dicts.

    Example:
        >>> ParseDataInfoError("entry 0: got None", index=0).index
        0
    """

    field_names = ("index",)


class AnnotationSkips:
    """Counts of instances skipped and polygons dropped while validating one file.

    Example:
        >>> skips = AnnotationSkips()
        >>> skips.count("degenerate_boxes", "data_list[0].instances[1]")
        >>> skips.as_dict()["degenerate_boxes"], skips.total()
        (1, 1)
    """

    KINDS = ("degenerate_boxes", "dropped_polygons", "no_valid_polygon")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.examples: dict[str, list[str]] = {kind: [] for kind in self.KINDS}

    def count(self, kind: str, where: str, n: int = 1) -> None:
        """Add ``n`` to ``kind``, remembering ``where`` among the first examples."""
        self.counts[kind] += n
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(where)

    def total(self) -> int:
        """All counts added up."""
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        """The counts by kind."""
        return dict(self.counts)

    def report(self, path: str, logger: logging.Logger) -> None:
        """Log one warning summarizing every count (nothing when all are zero)."""
        if not self.total():
            return
        parts = []
        c, e = self.counts, self.examples
        if c["degenerate_boxes"]:
            parts.append(
                f"skipped {c['degenerate_boxes']} instances whose bbox has x2 <= x1 or y2 <= y1 "
                f"(e.g. {', '.join(e['degenerate_boxes'])})"
            )
        if c["dropped_polygons"]:
            parts.append(
                f"dropped {c['dropped_polygons']} mask polygons with fewer than 6 coordinates "
                f"or an odd count (e.g. {', '.join(e['dropped_polygons'])})"
            )
        if c["no_valid_polygon"]:
            parts.append(
                f"skipped {c['no_valid_polygon']} instances left without a valid polygon "
                f"(e.g. {', '.join(e['no_valid_polygon'])})"
            )
        logger.warning("%s: %s", path, "; ".join(parts), extra={"annotation_skips": c.copy()})
