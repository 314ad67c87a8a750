"""SerializedList: records stored once in one contiguous buffer shared by every process.

A list of dicts costs one Python object per key and value; every DataLoader worker that
touches them (reference counts) ends up with a private copy of every page. A SerializedList
keeps each record as bytes in a single numpy ``uint8`` buffer with ``int64`` end offsets, so
reading a record only reads pages and memory stays shared after ``fork``. When the list is
sent to ``spawn`` / ``forkserver`` workers through multiprocessing, the arrays are moved once
into shared memory and the workers attach to them instead of receiving a copy.

Records are pickled whole by default. With ``columnar=True`` (or ``CATMAP_COLUMNAR_RECORDS=1``
for every list catmap builds) detection records are stored *columnar*
(:mod:`catalog.annotation_columns`): the numbers of their annotations (boxes, polygons,
keypoints) in flat integer columns, the rest of the record pickled — about half the bytes, at
about 3x the build time and 1.5-2x the time per access (``tools/bench_serialize.py``); every
access rebuilds exactly the record that was given. Alongside, a few numpy
columns (image height and width, per-annotation category ids and crowd flags,
:class:`~catalog.record_columns.RecordColumns`) let samplers compute aspect-ratio groups and
repeat factors without rebuilding a record.
"""

from __future__ import annotations

import logging
import operator
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from .annotation_columns import AnnotationColumns
from .env_flags import env_flag
from .errors import CatmapError
from .record_build import PROGRESS_MIN_RECORDS, build_arrays
from .record_columns import RecordColumns
from .shared_tensors import _TORCH_DTYPES, _rebuild_from_shared, _SharedTensors

__all__ = ["PROGRESS_MIN_RECORDS", "ImmutableRecordsError", "RecordColumns", "SerializedList"]

logger = logging.getLogger(__name__)


class ImmutableRecordsError(CatmapError, TypeError):
    """A SerializedList (or view) was assigned to: its records cannot be changed in place.

    Example:
        >>> SerializedList([{"a": 1}])[0] = {"a": 2}
        Traceback (most recent call last):
        catalog.serialized_list.ImmutableRecordsError: SerializedList records are read-only ...
    """


class SerializedList(Sequence):
    """An immutable list of records (detection dicts, or any picklable items) in one
    shared buffer.

    **Records are read-only.** Every access rebuilds a fresh object, so what you get is yours
    to use as scratch (a mapper may mutate or ``copy.deepcopy`` it), but an edit of it never
    reaches the list: ``records[i]["height"] = 5`` changes a copy that is then dropped, and
    the next ``records[i]`` is the stored record again. Assigning to the list
    (``records[i] = ...``, ``del records[i]``) raises :class:`ImmutableRecordsError`. To
    change records, build a new list: ``SerializedList([fix(r) for r in records])``, or change
    them in the loader (or in the mapper, per sample).

    Slicing and :meth:`subset` return views (:class:`catalog.record_views.SerializedListView`,
    a SerializedList subclass): this list's buffer plus an index array, never a copy.

    Args:
        records: an iterable of records (a list, a generator, another SerializedList). Dicts
            fill :attr:`columns`; other items (detectron2 accepts any picklable item) are
            stored pickled with empty columns.
        name: the dataset name, used in messages.
        progress: show a tqdm progress bar; by default only when there are at least
            ``PROGRESS_MIN_RECORDS`` records and tqdm is installed.
        columnar: store the annotations' numbers as columns (:mod:`catalog.annotation_columns`;
            about half the bytes of pickles, about 3x the build time); ``False`` pickles every
            record whole. ``None`` (the default): ``CATMAP_COLUMNAR_RECORDS`` (off unless set).
            Either way every record comes back exactly as given.

    Example:
        >>> records = SerializedList([{"file_name": "a.jpg", "height": 4, "width": 6}])
        >>> len(records), records[0]["file_name"], records[-1]["width"]
        (1, 'a.jpg', 6)
        >>> records.columns.widths.tolist()
        [6]
        >>> records[0]["width"] = 8; records[0]["width"]  # edits a copy, not the list
        6
    """

    def __init__(
        self,
        records: Iterable[Any],
        *,
        name: str | None = None,
        progress: bool | None = None,
        columnar: bool | None = None,
    ) -> None:
        self.name = name
        self._reopen: Callable[[], SerializedList] | None = None
        self._shared_owner: Any = None  # keeps shared-memory tensors alive
        if isinstance(records, SerializedList):
            # A view's records are gathered into one buffer of their own (a compact copy).
            source = records.compact()
            self._set_arrays(*source.storage())
            if name is None:
                self.name = records.name
            return
        if columnar is None:
            columnar = env_flag("CATMAP_COLUMNAR_RECORDS", default=False)
        self._set_arrays(*build_arrays(records, name, progress, columnar))
        mib = self.nbytes / 2**20
        log = logger.info if len(self) >= PROGRESS_MIN_RECORDS else logger.debug
        log("serialized %d records of %s: %.2f MiB", len(self), self.name or "a dataset", mib)

    def _set_arrays(
        self,
        buffer: np.ndarray,
        ends: np.ndarray,
        columns: RecordColumns,
        annotations: AnnotationColumns | None = None,
    ) -> None:
        buffer = np.asarray(buffer, dtype=np.uint8)
        ends = np.asarray(ends, dtype=np.int64)
        if buffer.flags.writeable:
            buffer = buffer.view()
            buffer.flags.writeable = False
        if ends.flags.writeable:
            ends = ends.view()
            ends.flags.writeable = False
        if annotations is None:
            annotations = AnnotationColumns.empty(len(ends))
        if len(ends) != len(columns) or len(ends) != len(annotations):
            raise ValueError(
                f"{len(ends)} record offsets but {len(columns)} column rows and "
                f"{len(annotations)} annotation column rows"
            )
        if len(ends) and int(ends[-1]) != len(buffer):
            raise ValueError(
                f"record offsets end at {int(ends[-1])} but the buffer holds {len(buffer)} bytes"
            )
        self._buffer = buffer
        self._ends = ends
        self.columns = columns
        self._annotations = annotations

    @classmethod
    def from_arrays(
        cls,
        buffer: np.ndarray,
        ends: np.ndarray,
        columns: RecordColumns,
        *,
        annotations: AnnotationColumns | None = None,
        name: str | None = None,
        reopen: Callable[[], SerializedList] | None = None,
        owner: Any = None,
    ) -> SerializedList:
        """Build a SerializedList over existing arrays without copying them.

        Used to attach to arrays that live in shared memory or a memory-mapped file.

        Args:
            buffer: uint8 array of the concatenated stored records.
            ends: int64 array, the end offset of each record in ``buffer``.
            columns: the records' columns.
            annotations: the records' annotation columns (None: every record is pickled
                whole in ``buffer``).
            name: the dataset name.
            reopen: a picklable zero-argument callable that returns an equivalent
                SerializedList in another process (e.g. by mapping the same file again).
                When given, sending the list to multiprocessing workers sends this callable
                instead of moving the arrays into shared memory.
            owner: any object to keep alive as long as the list (e.g. an mmap).

        Example:
            >>> a = SerializedList([{"x": 1}, {"x": 2}])
            >>> b = SerializedList.from_arrays(*a.storage()[:3], annotations=a.storage()[3])
            >>> b[1]
            {'x': 2}
        """
        self = cls.__new__(cls)
        self.name = name
        self._reopen = reopen
        self._shared_owner = owner
        self._set_arrays(buffer, ends, columns, annotations)
        return self

    # ------------------------------------------------------------------ access
    def storage(self) -> tuple[np.ndarray, np.ndarray, RecordColumns, AnnotationColumns]:
        """``(buffer, ends, columns, annotation columns)``: everything the records are made of
        (a view gathers a compact copy)."""
        return self._buffer, self._ends, self.columns, self._annotations

    @property
    def annotation_columns(self) -> AnnotationColumns:
        """The columns holding the annotations of columnar records."""
        return self._annotations

    @property
    def buffer(self) -> np.ndarray:
        """The read-only uint8 buffer of the stored records (pickled records and skeletons)."""
        return self._buffer

    @property
    def ends(self) -> np.ndarray:
        """The read-only int64 end offset of each record in :attr:`buffer`."""
        return self._ends

    @property
    def nbytes(self) -> int:
        """Bytes held: the record buffer, the offsets and both sets of columns."""
        return int(
            self._buffer.nbytes + self._ends.nbytes + self.columns.nbytes
            + self._annotations.nbytes
        )

    def __len__(self) -> int:
        return len(self._ends)

    def _normalize_index(self, index: Any) -> int:
        try:
            i = operator.index(index)  # int() would accept "1" and 1.5
        except TypeError:
            raise TypeError(
                f"SerializedList indices must be integers or slices, not {type(index).__name__}"
            ) from None
        if isinstance(index, (bool, float)) or (
            isinstance(index, np.generic) and not np.issubdtype(type(index), np.integer)
        ):
            raise TypeError(
                f"SerializedList indices must be integers or slices, not {type(index).__name__}"
            )
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            where = f" of dataset {self.name!r}" if self.name else ""
            raise IndexError(f"record index {index} out of range for {n} records{where}")
        return i

    def _record_bytes(self, i: int) -> memoryview:
        start = int(self._ends[i - 1]) if i > 0 else 0
        end = int(self._ends[i])
        return memoryview(self._buffer[start:end])

    def _load(self, i: int) -> Any:
        """Record ``i`` (an in-range int), rebuilt."""
        ends = self._ends
        record = pickle.loads(self._buffer[int(ends[i - 1]) if i else 0 : int(ends[i])])
        annotations = self._annotations
        kind = int(annotations.kinds[i])
        if kind:
            columns = self.columns
            lo, hi = columns.category_offsets[i : i + 2].tolist()
            record = annotations.rebuild(
                record, i, kind, columns.category_ids, columns.iscrowd, lo, hi
            )
        return record

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.subset(range(len(self))[index])
        return self._load(self._normalize_index(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        raise ImmutableRecordsError(
            f"SerializedList records are read-only (dataset {self.name!r}, index {index!r}): "
            "a record cannot be replaced in place, and edits of a record you got are not "
            "stored either. Build a new list (SerializedList([fix(r) for r in records])) or "
            "change records in the loader or the mapper"
        )

    def __delitem__(self, index: Any) -> None:
        self.__setitem__(index, None)

    def __iter__(self) -> Iterator[Any]:
        load = self._load
        for i in range(len(self)):
            yield load(i)

    def __repr__(self) -> str:
        name = f"{self.name!r}, " if self.name else ""
        return f"SerializedList({name}{len(self)} records, {self.nbytes / 2**20:.2f} MiB)"

    def to_list(self) -> list[Any]:
        """Every record, rebuilt, in a plain list (a fresh copy)."""
        return list(self)

    # ------------------------------------------------------------------ subsets
    def subset(self, indices: int | Iterable[int]) -> SerializedList:
        """A view of some of the records: this list's buffer plus an index array.

        Args:
            indices: ``n >= 0`` takes the first n records, ``n < 0`` the last ``-n`` (both
                clamped to the length, as list slicing does); a sequence of ints takes those
                records in the given order (negative indices count from the end, out-of-range
                ones raise IndexError).

        Returns:
            A :class:`~catalog.record_views.SerializedListView` over this list's buffer
            (4 bytes per record taken, 8 above 2**31 records; no copy of the records' bytes); it pickles to
            DataLoader workers by reference to the same shared buffer. ``SerializedList(view)``
            makes a compact copy with a buffer of its own.

        Example:
            >>> sl = SerializedList([{"i": i} for i in range(5)])
            >>> [r["i"] for r in sl.subset(2)], [r["i"] for r in sl.subset(-2)]
            ([0, 1], [3, 4])
            >>> [r["i"] for r in sl.subset([4, -5])]
            [4, 0]
        """
        n = len(self)
        if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
            k = int(indices)
            if k >= 0:
                idx = np.arange(min(k, n), dtype=np.int64)
            else:
                idx = np.arange(max(n + k, 0), n, dtype=np.int64)
        else:
            if isinstance(indices, range):
                idx = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
            else:
                given_array = isinstance(indices, np.ndarray)
                idx = np.asarray(indices if given_array else list(indices))
                if idx.size == 0:
                    idx = np.zeros(0, dtype=np.int64)
                if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
                    raise TypeError(f"subset indices must be ints, got an array of {idx.dtype}")
                # one copy of a caller's array (the view's index must not change under it)
                idx = np.array(idx, dtype=np.int64, copy=given_array or None).reshape(-1)
            if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= n):
                given = idx.copy()
                idx[idx < 0] += n
                bad = (idx < 0) | (idx >= n)
                if bad.any():
                    first = int(np.flatnonzero(bad)[0])
                    where = f" of dataset {self.name!r}" if self.name else ""
                    raise IndexError(
                        f"subset index {int(given[first])} out of range for {n} records{where}"
                    )
        return self._take(idx)

    def _take(self, idx: np.ndarray) -> SerializedList:
        """A view of the records at ``idx`` (int64, already checked to be in range)."""
        from .record_views import SerializedListView

        return SerializedListView.over((self,), idx, name=self.name)

    def compact(self) -> SerializedList:
        """This list with a buffer of its own holding exactly its records (``self`` for a
        plain SerializedList, whose buffer holds exactly its records already).

        Example:
            >>> sl = SerializedList([{"i": 0}, {"i": 1}])
            >>> sl.compact() is sl, sl.subset([1]).compact()[0]
            (True, {'i': 1})
        """
        return self

    # ------------------------------------------------------------------ pickling
    def __reduce__(self) -> tuple[Any, ...]:
        # Plain pickling (saving to disk, sending to another machine) copies the data.
        return (
            _rebuild_from_arrays,
            (self._buffer.tobytes(), self._ends, self.columns, self.name, self._annotations),
        )

    def _reduce_for_multiprocessing(self) -> tuple[Any, ...]:
        """Reduction used by multiprocessing (spawn / forkserver workers): no per-worker copy.

        A list with a ``reopen`` callable sends it; otherwise the arrays are moved once into
        shared memory (torch shared-memory tensors) and workers attach to them.
        """
        if self._reopen is not None:
            return (_call_reopen, (self._reopen,))
        tensors = self._share_memory()
        return (_rebuild_from_shared, (tensors, self.name))

    def _share_memory(self) -> tuple[Any, ...]:
        import torch

        owner = self._shared_owner
        if isinstance(owner, _SharedTensors):
            return owner.tensors
        arrays = (self._buffer, self._ends, *self.columns.arrays(), *self._annotations.arrays())
        tensors = []
        for arr in arrays:
            # at least one element, so that even an empty array is in shared memory
            storage = torch.empty(max(arr.size, 1), dtype=_TORCH_DTYPES[arr.dtype.str])
            t = storage.share_memory_()[: arr.size]
            if arr.size:
                t.numpy()[...] = arr
            tensors.append(t)
        shared = _SharedTensors(tuple(tensors))
        views = [t.numpy() for t in tensors]
        self._shared_owner = shared
        self._set_arrays(
            views[0], views[1], RecordColumns(*views[2:7]), AnnotationColumns(*views[7:])
        )
        logger.debug("moved %s into shared memory (%d bytes)", self.name or "records", self.nbytes)
        return shared.tensors

    def share_memory(self) -> SerializedList:
        """Move the arrays into shared memory now (done automatically when the list is first
        sent to spawn / forkserver workers). Returns self."""
        if self._reopen is None:
            self._share_memory()
        return self


def _rebuild_from_arrays(
    buffer: bytes,
    ends: np.ndarray,
    columns: RecordColumns,
    name: str | None,
    annotations: AnnotationColumns | None = None,
) -> SerializedList:
    return SerializedList.from_arrays(
        np.frombuffer(buffer, dtype=np.uint8), ends, columns, annotations=annotations, name=name
    )


def _call_reopen(reopen: Callable[[], SerializedList]) -> SerializedList:
    return reopen()


ForkingPickler.register(SerializedList, SerializedList._reduce_for_multiprocessing)
