"""The one policy for records the mappers cannot use: skip them (count, warn once) or raise.

An unreadable image (:class:`~mappers.errors.ImageReadError`) and a malformed annotation
(:class:`~catalog.errors.RecordFormatError`) are the two kinds of bad input a mapping step
may be told to skip. Skipping returns None from the step, so that
:class:`~mappers.datasets.MapDataset` uses another record; every skip is counted, and each
file is warned about once per process (a dataset with many bad files does not flood the
log). Used by the pipeline steps and so by :class:`~mappers.dataset_mapper.DatasetMapper`.

Example:
    >>> log = SkipLog("LoadImage")
    >>> log.record(ValueError("bad"), "a.jpg", "image"); log.num_skipped
    1
"""

from __future__ import annotations

import logging

from catalog.log_limits import warn_limited

__all__ = ["SkipLog", "SkippingStep"]

logger = logging.getLogger(__name__)

#: Files remembered for "warn once"; past this many, every skip is still counted but
#: warned about only when the count is a power of two.
_MAX_REMEMBERED = 4096


class SkipLog:
    """Counts skipped records and warns once per file.

    Args:
        owner: the step or mapper named in the warnings.

    Attributes:
        num_skipped: records skipped so far in this process (by this object).
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.num_skipped = 0
        self._warned: set[str] = set()

    def record(self, exc: BaseException, file_name: object, what: str) -> None:
        """Count one skipped record; warn if ``file_name`` was not warned about yet.

        Args:
            exc: the error that made the record unusable (its message is logged).
            file_name: the record's file (or another name for it).
            what: "image" or "annotations", for the message.
        """
        self.num_skipped += 1
        key = str(file_name)
        if key in self._warned:
            return
        if len(self._warned) >= _MAX_REMEMBERED:
            if self.num_skipped & (self.num_skipped - 1):
                return
        else:
            self._warned.add(key)
        warn_limited(
            logger,
            f"{self.owner}.skip_{what}",
            "%s: skipping a record with unusable %s, %s (%s); %d skipped so far in this process",
            self.owner,
            what,
            key,
            exc,
            self.num_skipped,
        )


class SkippingStep:
    """Base of a mapping step that may skip records: it keeps a :class:`SkipLog` in
    ``skips`` (set by the subclass) and shows its count as ``num_skipped``.

    Example:
        >>> from mappers.pipeline_steps import LoadImage
        >>> LoadImage(skip_bad_images=True).num_skipped
        0
    """

    skips: SkipLog

    @property
    def num_skipped(self) -> int:
        """Records this step skipped so far in this process."""
        return self.skips.num_skipped
