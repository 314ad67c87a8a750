"""Where a dataset's records are: the ``records`` protocol the loader builders read.

The loader builders need the records under a dataset to group batches by aspect ratio (from
each record's ``width`` / ``height``) without mapping a sample. A dataset says where they are
with a public ``records`` attribute (:class:`HasRecords`): index ``i`` of the dataset is built
from ``records[i]``. :class:`~mappers.datasets.DatasetFromList` answers with its container,
:class:`~mappers.datasets.MapDataset` with the records of the dataset it maps; a user's own
wrapper opts in the same way. Nothing else is looked at: a dataset without ``records`` (a
torch ``Subset``, whose indices do not match its ``dataset``'s) has none, rather than the
records of some inner object that happen to be reachable.

Example:
    >>> from mappers.datasets import DatasetFromList, MapDataset
    >>> ds = MapDataset(DatasetFromList([{"width": 4, "height": 3}]), lambda r: r, seed=0)
    >>> records_of(ds)[0]["width"]
    4
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from catalog.storage.records import SerializedList

__all__ = ["HasRecords", "records_of"]

#: How many ``records`` links :func:`records_of` follows (wrappers of wrappers) at most.
MAX_DEPTH = 16


@runtime_checkable
class HasRecords(Protocol):
    """A dataset that says where its records are.

    ``records`` is the sequence its item ``i`` is built from (``records[i]``): a catalog
    ``SerializedList``, a list of record dicts, or another :class:`HasRecords` whose records
    are meant; None when there are none.

    Example:
        >>> class Wrapped:
        ...     def __init__(self, records):
        ...         self.records = records
        >>> isinstance(Wrapped([{"width": 2, "height": 1}]), HasRecords)
        True
    """

    @property
    def records(self) -> Any:
        """The record sequence the dataset's items are built from, index for index."""


def records_of(dataset: Any) -> Sequence[dict] | None:
    """The record dicts behind ``dataset``, index for index, or None when it names none.

    ``dataset`` itself counts when it is a ``SerializedList`` or a list / tuple of dicts;
    otherwise its :class:`HasRecords` ``records`` is followed (at most ``MAX_DEPTH`` links).
    A container of other items (a ``PickledList``, a list of tuples) holds no records.

    Example:
        >>> records_of([{"file_name": "a.jpg"}])[0]["file_name"]
        'a.jpg'
        >>> records_of(range(3)) is None
        True
    """
    current = dataset
    for _ in range(MAX_DEPTH + 1):
        if isinstance(current, SerializedList):
            return current
        if isinstance(current, (list, tuple)):
            return current if all(isinstance(item, dict) for item in current[:1]) else None
        if current is None or not isinstance(current, HasRecords):
            return None
        inner = current.records
        if inner is current:
            return None
        current = inner
    return None
