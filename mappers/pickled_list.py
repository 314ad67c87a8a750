"""PickledList: a read-only list of arbitrary picklable items in one numpy buffer.

``DatasetFromList(serialize=True)`` stores a list of record dicts in a catalog
``SerializedList`` (columns, one shared copy per machine). A list whose items are not all
dicts (tuples, strings, custom objects: detectron2 accepts any item) goes here instead: every
item is pickled once into one byte buffer with an offset array, so DataLoader workers share the
pages instead of copying one Python object per item (reference counts would touch them).

The buffer is built in this process from the caller's own objects and is never read from a
file, so unpickling it runs nothing that was not already in memory.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["PickledList"]


class PickledList(Sequence[Any]):
    """An immutable sequence of picklable items, stored pickled in one uint8 buffer.

    Each access unpickles a fresh copy of the item, so editing what it returns never changes
    the list.

    Args:
        items: a sequence (or any iterable) of picklable objects.

    Raises:
        TypeError: an item cannot be pickled (the message names its index).

    Example:
        >>> items = PickledList([("a.jpg", 1), "b.jpg", {"file_name": "c.jpg"}])
        >>> len(items), items[0], items[-1]["file_name"]
        (3, ('a.jpg', 1), 'c.jpg')
    """

    def __init__(self, items: Any) -> None:
        blobs = []
        for index, item in enumerate(items):
            try:
                blobs.append(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise TypeError(
                    f"PickledList: item {index} ({type(item).__name__}) cannot be pickled: {exc}"
                ) from exc
        ends = np.cumsum([len(b) for b in blobs], dtype=np.int64)
        self._ends = ends
        self._buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8) if blobs else np.empty(
            0, dtype=np.uint8
        )

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: Any) -> Any:  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self._ends)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"PickledList: index {i} out of range for {n} items")
        if i < 0:
            i += n
        start = int(self._ends[i - 1]) if i else 0
        return pickle.loads(self._buffer[start : int(self._ends[i])].tobytes())

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer and the offsets."""
        return int(self._buffer.nbytes + self._ends.nbytes)

    def __repr__(self) -> str:
        return f"PickledList({len(self)} items, {self.nbytes} bytes)"
