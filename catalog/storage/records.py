"""SerializedList: records msgpack-encoded into one shared ``uint8`` buffer with ``int64`` end
offsets (memory stays shared after ``fork``); decoding never runs code.

Stored: dicts, lists, str, int, float, bool, None, bytes and numpy arrays of numeric/bool
dtype. Tuples come back as lists, ``IntEnum`` as ints, numpy scalars as Python numbers, paths
as str; anything else raises RecordFormatError naming the dataset, record index and key.
Subsets, slices and joins are :class:`SerializedListView`: base lists plus an index, no copy.
"""

from __future__ import annotations

import bisect
import logging
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat
from multiprocessing.reduction import ForkingPickler
from typing import Any

import msgspec
import numpy as np

from .._common import CatmapError, RecordFormatError, gc_paused

__all__ = ["ImmutableRecordsError", "RecordColumns", "SerializedList", "SerializedListView",
           "concat_records", "decode", "encode"]

logger = logging.getLogger(__name__)

#: Serializations of at least this many records show a progress bar (when tqdm is installed).
PROGRESS_MIN_RECORDS = 100_000
_NDARRAY_EXT = 1
_DTYPES = frozenset(
    np.dtype(t).str for t in (bool, "u1", "i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8",
                              "<f2", "<f4", "<f8")  # fmt: skip
)
_CHUNK = 2048


# ---------------------------------------------------------------------- the encoding
def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        array = obj.astype(obj.dtype.newbyteorder("<"), copy=False)
        if array.dtype.str not in _DTYPES:
            raise TypeError(f"numpy arrays of dtype {obj.dtype} are not stored")
        raw = np.ascontiguousarray(array).tobytes()
        header = (array.dtype.str, array.shape, raw)
        return msgspec.msgpack.Ext(_NDARRAY_EXT, _ENCODER.encode(header))
    if isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"objects of type {type(obj).__qualname__} are not stored")


def _ext_hook(code: int, data: memoryview) -> np.ndarray:
    if code != _NDARRAY_EXT:
        raise ValueError(f"unknown msgpack extension type {code}")
    dtype, shape, raw = msgspec.msgpack.decode(data)
    if dtype not in _DTYPES or not isinstance(shape, list) or not isinstance(raw, bytes):
        raise ValueError(f"malformed numpy array (dtype {dtype!r})")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"malformed numpy array shape {shape!r}")
    array = np.frombuffer(raw, dtype=np.dtype(dtype))  # checks len(raw) % itemsize
    return array.reshape(shape).copy()  # a writable array of its own


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
#: Data-only encoding of one value (records, messages between ranks, cache headers).
encode: Callable[[Any], bytes] = _ENCODER.encode
#: Decoding of :func:`encode`'s bytes; raises ``msgspec.DecodeError`` / ``ValueError``.
decode: Callable[[Any], Any] = _DECODER.decode


def _bad_key(value: Any, path: str = "") -> str:
    """The key path of the first value of ``value`` that :func:`encode` refuses."""
    try:
        encode(value)
        return ""
    except (TypeError, ValueError, OverflowError):
        pass
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, (list, tuple)) else ())  # fmt: skip
    for key, item in items:
        found = _bad_key(item, f"{path}[{key!r}]")
        if found:
            return found
    return path or "(the record itself)"


def _not_data(record: Any, index: int, name: str | None, exc: Exception) -> RecordFormatError:
    return RecordFormatError(
        f"dataset {name or '(unnamed)'!r}, record {index}, key {_bad_key(record)}: {exc}. "
        "Records hold data only: dict, list, tuple, str, int, float, bool, None, bytes and "
        "numpy arrays of numeric or bool dtype"
    )


# ---------------------------------------------------------------------- columns
class RecordColumns:
    """Numpy columns of each record (heights, widths, per-annotation category ids and crowd
    flags), extracted while serializing so samplers and filters need not decode records.

    ``category_ids[category_offsets[i]:category_offsets[i + 1]]`` are record i's; a missing
    or non-int value is -1 (crowd: 0).

    Example:
        >>> cols = SerializedList([{"height": 2, "width": 3, "annotations": []}]).columns
        >>> cols.heights.tolist(), cols.num_annotations().tolist()
        ([2], [0])
    """

    __slots__ = ("heights", "widths", "category_ids", "iscrowd", "category_offsets")

    def __init__(self, heights: Any, widths: Any, category_ids: Any, iscrowd: Any,
                 category_offsets: Any) -> None:  # fmt: skip
        self.heights = np.asarray(heights, dtype=np.int32)
        self.widths = np.asarray(widths, dtype=np.int32)
        self.category_ids = np.asarray(category_ids, dtype=np.int32)
        self.iscrowd = np.asarray(iscrowd, dtype=np.uint8)
        self.category_offsets = np.asarray(category_offsets, dtype=np.int64)
        n = len(self.heights)
        if len(self.widths) != n or len(self.category_offsets) != n + 1 or len(
            self.iscrowd) != len(self.category_ids):  # fmt: skip
            raise ValueError(
                f"record columns disagree: {n} heights, {len(self.widths)} widths, "
                f"{len(self.category_offsets)} category offsets, {len(self.category_ids)} "
                f"category ids, {len(self.iscrowd)} crowd flags")
        for arr in (self.heights, self.widths, self.category_ids, self.iscrowd,
                    self.category_offsets):
            arr.flags.writeable = False

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The five arrays, in constructor order."""
        return (self.heights, self.widths, self.category_ids, self.iscrowd, self.category_offsets)

    def __len__(self) -> int:
        return len(self.heights)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordColumns, self.arrays())

    nbytes = property(lambda self: int(sum(a.nbytes for a in self.arrays())))

    def num_annotations(self) -> np.ndarray:
        """int64 (N,): the number of annotations of each record."""
        return np.diff(self.category_offsets)

    def categories_of(self, index: int) -> np.ndarray:
        """The category ids of record ``index``'s annotations."""
        return self.category_ids[self.category_offsets[index] : self.category_offsets[index + 1]]

    def aspect_ratios(self) -> np.ndarray:
        """float64 (N,): width / height (NaN where either is missing)."""
        h, w = self.heights.astype(np.float64), self.widths.astype(np.float64)
        return np.divide(w, h, out=np.full(len(h), np.nan), where=(h > 0) & (w > 0))

    def take(self, indices: np.ndarray) -> RecordColumns:
        """The columns of the records at ``indices`` (any order, repeats allowed)."""
        indices = np.asarray(indices, dtype=np.int64)
        starts = self.category_offsets[indices]
        counts = self.category_offsets[indices + 1] - starts
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # position of each kept annotation: its record's start + its rank within the record
        flat = np.repeat(starts - offsets[:-1], counts) + np.arange(int(offsets[-1]))
        return RecordColumns(
            self.heights[indices], self.widths[indices], self.category_ids[flat],
            self.iscrowd[flat], offsets,
        )  # fmt: skip


def concat_columns(parts: Sequence[RecordColumns]) -> RecordColumns:
    """The columns of several record lists joined in order."""
    if len(parts) == 1:
        return parts[0]
    shifts = np.cumsum([0] + [int(p.category_offsets[-1]) for p in parts[:-1]])
    return RecordColumns(
        np.concatenate([np.zeros(0, np.int32)] + [p.heights for p in parts]),
        np.concatenate([np.zeros(0, np.int32)] + [p.widths for p in parts]),
        np.concatenate([np.zeros(0, np.int32)] + [p.category_ids for p in parts]),
        np.concatenate([np.zeros(0, np.uint8)] + [p.iscrowd for p in parts]),
        np.concatenate([[0]] + [p.category_offsets[1:] + s for p, s in zip(parts, shifts)]))


_INT32 = np.iinfo(np.int32)


def _int_column(values: list[Any]) -> np.ndarray:
    """int32 column; anything that is not an int32-sized integer becomes -1."""
    try:
        arr = np.asarray(values) if values else np.zeros(0, np.int32)
        if arr.dtype.kind in "iu" and arr.ndim == 1 and (
            not len(arr) or (_INT32.min <= arr.min() and arr.max() <= _INT32.max)
        ):
            return arr.astype(np.int32)
    except (ValueError, TypeError, OverflowError):  # ragged or exotic values
        pass
    return np.asarray(
        [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
         and _INT32.min <= v <= _INT32.max else -1 for v in values],
        dtype=np.int32,
    )  # fmt: skip


_get = dict.get
_ANNOS, _HEIGHT, _WIDTH = repeat("annotations"), repeat("height"), repeat("width")
_CATEGORY, _CROWD = repeat("category_id"), repeat("iscrowd")
_MINUS_ONE, _ZERO = repeat(-1), repeat(0)


def _add_columns(columns: tuple[list[Any], ...], chunk: list[Any]) -> None:
    """Collect the column values of a chunk of records into ``columns`` (heights, widths,
    category ids, crowd flags, annotation counts); C-level maps when every record is a dict
    with a list of dict annotations, the common case."""
    heights, widths, cats, crowd, counts = columns
    if set(map(type, chunk)) == {dict}:
        alists = list(map(_get, chunk, _ANNOS))
        if set(map(type, alists)) == {list}:
            annos = list(chain.from_iterable(alists))
            if not annos or set(map(type, annos)) == {dict}:
                heights.extend(map(_get, chunk, _HEIGHT, _MINUS_ONE))
                widths.extend(map(_get, chunk, _WIDTH, _MINUS_ONE))
                cats.extend(map(_get, annos, _CATEGORY, _MINUS_ONE))
                crowd.extend(map(_get, annos, _CROWD, _ZERO))
                counts.extend(map(len, alists))
                return
    for record in chunk:
        record = record if isinstance(record, dict) else {}
        annos = record.get("annotations")
        if not isinstance(annos, (list, tuple)):
            annos = ()
        annos = [a for a in annos if isinstance(a, dict)]
        heights.append(record.get("height", -1))
        widths.append(record.get("width", -1))
        cats.extend(a.get("category_id", -1) for a in annos)
        crowd.extend(a.get("iscrowd", 0) for a in annos)
        counts.append(len(annos))


def build_arrays(records: Iterable[Any], name: str | None = None, progress: bool | None = None
                 ) -> tuple[np.ndarray, np.ndarray, RecordColumns]:  # fmt: skip
    """Encode ``records``: ``(buffer, ends, columns)``; RecordFormatError for non-data."""
    out = bytearray()
    ends: list[int] = []
    columns: tuple[list[Any], ...] = ([], [], [], [], [])
    encode_into = _ENCODER.encode_into
    chunk: list[Any] = []
    total = len(records) if hasattr(records, "__len__") else None  # type: ignore[arg-type]
    if progress or (progress is None and total is not None and total >= PROGRESS_MIN_RECORDS):
        try:
            from tqdm import tqdm

            records = tqdm(records, total=total, desc=f"serializing {name or 'records'}",
                           mininterval=1.0)  # fmt: skip
        except ImportError:
            pass
    with gc_paused():  # nothing here makes cycles: collections would only rescan every record
        for record in chain(records, [_END]):
            if record is not _END:
                chunk.append(record)
                if len(chunk) < _CHUNK:
                    continue
            _add_columns(columns, chunk)
            for record in chunk:
                try:
                    encode_into(record, out, -1)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise _not_data(record, len(ends), name, exc) from None
                ends.append(len(out))
            chunk.clear()
    buffer = np.frombuffer(out, dtype=np.uint8) if out else np.zeros(0, np.uint8)
    heights, widths, cats, crowd, counts = columns
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=offsets[1:])
    crowd_flags = np.fromiter(map(bool, crowd), dtype=bool, count=len(crowd))  # truthiness
    return buffer, np.asarray(ends, dtype=np.int64), RecordColumns(
        _int_column(heights), _int_column(widths), _int_column(cats), crowd_flags, offsets)


_END = object()


# ---------------------------------------------------------------------- the list
class ImmutableRecordsError(CatmapError, TypeError):
    """A SerializedList (or view) was assigned to: its records cannot be changed in place."""


def _read_only(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


class SerializedList(Sequence):
    """An immutable list of records in one shared buffer; every access decodes a fresh
    object. ``name`` is used in messages; ``progress``: a tqdm bar (default: from
    ``PROGRESS_MIN_RECORDS`` records). Assigning raises :class:`ImmutableRecordsError`.

    Example:
        >>> records = SerializedList([{"file_name": "a.jpg", "height": 4, "width": 6}])
        >>> len(records), records[0]["file_name"], records.columns.widths.tolist()
        (1, 'a.jpg', [6])
    """

    def __init__(self, records: Iterable[Any], *, name: str | None = None,
                 progress: bool | None = None) -> None:  # fmt: skip
        if isinstance(records, SerializedList):
            name = records.name if name is None else name
            records = records.compact()
            self._set(records.buffer, records.ends, records.columns, name, None, None)
            return
        self._set(*build_arrays(records, name, progress), name, None, None)
        level = logging.INFO if len(self) >= PROGRESS_MIN_RECORDS else logging.DEBUG
        if logger.isEnabledFor(level):
            logger.log(level, "serialized %d records of %s: %.2f MiB", len(self),
                       name or "a dataset", self.nbytes / 2**20)

    def _set(self, buffer: np.ndarray, ends: np.ndarray, columns: RecordColumns, name: str | None,
             reopen: Callable[[], SerializedList] | None, owner: Any,
             check: Callable[[int, int], None] | None = None) -> None:  # fmt: skip
        buffer, ends = np.asarray(buffer, np.uint8).view(), np.asarray(ends, np.int64).view()
        if len(ends) != len(columns.heights):
            raise ValueError(f"{len(ends)} record offsets but {len(columns.heights)} column rows")
        if len(ends) and int(ends[-1]) != len(buffer):
            raise ValueError(
                f"record offsets end at {int(ends[-1])} but the buffer holds {len(buffer)} bytes")
        self.name = name
        buffer.flags.writeable = ends.flags.writeable = False  # views: the caller keeps its own
        self._buffer, self._ends, self._columns = buffer, ends, columns
        self._reopen, self._owner, self._check = reopen, owner, check

    @classmethod
    def from_arrays(
        cls, buffer: np.ndarray, ends: np.ndarray, columns: RecordColumns, *,
        name: str | None = None, reopen: Callable[[], SerializedList] | None = None,
        owner: Any = None, check: Callable[[int, int], None] | None = None,
    ) -> SerializedList:  # fmt: skip
        """A list over existing arrays (shared memory, a mapped file), without copying.

        ``reopen``: a picklable callable giving the same list in another process (sent to
        spawn workers instead of the arrays); ``owner``: kept alive with the list;
        ``check(start, stop)``: called before buffer bytes ``[start, stop)`` are read (a
        mapped file's lazy checksums; it raises for damaged bytes).
        """
        self = cls.__new__(cls)
        self._set(buffer, ends, columns, name, reopen, owner, check)
        return self

    @property
    def buffer(self) -> np.ndarray:
        """The read-only uint8 buffer of the encoded records (all of it checked first)."""
        if self._check is not None:
            self._check(0, len(self._buffer))
        return self._buffer

    #: each record's int64 end offset
    ends = property(lambda self: self._ends)
    columns = property(lambda self: self._columns)
    #: what keeps the arrays alive (a mapped file, shared memory), or None
    owner = property(lambda self: self._owner)
    nbytes = property(lambda self: int(self._buffer.nbytes + self._ends.nbytes
                                       + self._columns.nbytes))

    def __len__(self) -> int:
        return len(self._ends)

    def _load(self, i: int) -> Any:
        start, stop = int(self._ends[i - 1]) if i else 0, int(self._ends[i])
        if self._check is not None:
            self._check(start, stop)
        try:
            return _DECODER.decode(self._buffer[start:stop])
        except (msgspec.DecodeError, ValueError) as exc:
            raise RecordFormatError(f"dataset {self.name!r}, record {i}: damaged ({exc})") from exc

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.subset(range(len(self))[index])
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"SerializedList indices must be integers or slices, not {type(index).__name__}")
        i, n = operator.index(index), len(self)
        if not -n <= i < n:
            where = f" of dataset {self.name!r}" if self.name else ""
            raise IndexError(f"record index {index} out of range for {n} records{where}")
        return self._load(i + n if i < 0 else i)

    def __setitem__(self, index: Any, value: Any) -> None:
        raise ImmutableRecordsError(
            f"SerializedList records are read-only (dataset {self.name!r}, index {index!r}): "
            "build a new list (SerializedList([fix(r) for r in records])) or change records "
            "in the loader or the mapper")

    def __delitem__(self, index: Any) -> None:
        self.__setitem__(index, None)

    def __iter__(self) -> Iterator[Any]:
        return map(self._load, range(len(self)))

    def __repr__(self) -> str:
        name = f"{self.name!r}, " if self.name else ""
        return f"{type(self).__name__}({name}{len(self)} records, {self.nbytes / 2**20:.2f} MiB)"

    def to_list(self) -> list[Any]:
        """Every record, decoded, in a plain list."""
        return list(self)

    def subset(self, indices: int | Iterable[int]) -> SerializedList:
        """A view (no copy) of the first ``n`` records (``n < 0``: the last ``-n``), or of
        those at a sequence of indices, in that order (negative ones count from the end).

        Example:
            >>> sl = SerializedList([{"i": i} for i in range(5)])
            >>> [r["i"] for r in sl.subset(2)], [r["i"] for r in sl.subset([4, -5])]
            ([0, 1], [4, 0])
        """
        n = len(self)
        if isinstance(indices, (int, np.integer)) and not isinstance(indices, (bool, np.bool_)):
            k = int(indices)
            idx = np.arange(min(k, n)) if k >= 0 else np.arange(max(n + k, 0), n)
        elif isinstance(indices, range):
            idx = np.arange(indices.start, indices.stop, indices.step)
        else:
            given = indices if isinstance(indices, np.ndarray) else list(indices)
            idx = np.array(given).reshape(-1)
            if idx.size == 0:
                idx = np.zeros(0, dtype=np.int64)
            if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
                raise TypeError(f"subset indices must be ints, got an array of {idx.dtype}")
            idx = idx.astype(np.int64)
            bad = (idx < -n) | (idx >= n)
            if bad.any():
                where = f" of dataset {self.name!r}" if self.name else ""
                first = int(idx[np.flatnonzero(bad)[0]])
                raise IndexError(f"subset index {first} out of range for {n} records{where}")
            idx[idx < 0] += n
        return self._take(idx.astype(np.int64))

    def _take(self, idx: np.ndarray) -> SerializedList:
        return SerializedListView._over((self,), idx, self.name)

    def compact(self) -> SerializedList:
        """A plain list with a buffer holding exactly these records (``self`` here)."""
        return self

    # ------------------------------------------------------------------ pickling
    def __reduce__(self) -> tuple[Any, ...]:
        # plain pickling (saving, another machine): a copy of the data
        return (_from_bytes, (self.buffer.tobytes(), self._ends, self._columns, self.name))

    def _reduce_for_multiprocessing(self) -> tuple[Any, ...]:
        # to spawn / forkserver workers: re-map the same file, or attach to shared memory
        if self._reopen is not None:
            return (self._reopen, ())
        return (_from_shared, (self._shared_tensors(), self.name))

    def _shared_tensors(self) -> tuple[Any, ...]:
        import torch

        if isinstance(self._owner, _SharedTensors):
            return self._owner.tensors
        tensors = []
        for arr in (self.buffer, self._ends, *self._columns.arrays()):
            # at least one element, so that an empty array is in shared memory too
            t = torch.from_numpy(np.resize(arr, max(arr.size, 1))).share_memory_()[: arr.size]
            tensors.append(t)
        shared = _SharedTensors(tuple(tensors))
        views = [t.numpy() for t in tensors]
        self._set(views[0], views[1], RecordColumns(*views[2:]), self.name, None, shared)
        return shared.tensors

    def share_memory(self) -> SerializedList:
        """Move the arrays into shared memory now (else when first sent to spawn workers)."""
        if self._reopen is None:
            self._shared_tensors()
        return self


class _SharedTensors:
    __slots__ = ("tensors",)

    def __init__(self, tensors: tuple[Any, ...]) -> None:
        self.tensors = tensors


def _from_bytes(buffer: bytes, ends: np.ndarray, columns: RecordColumns,
                name: str | None) -> SerializedList:
    return SerializedList.from_arrays(np.frombuffer(buffer, np.uint8), ends, columns, name=name)


def _from_shared(tensors: tuple[Any, ...], name: str | None) -> SerializedList:
    views = [t.numpy() for t in tensors]
    return SerializedList.from_arrays(views[0], views[1], RecordColumns(*views[2:]), name=name,
                                      owner=_SharedTensors(tensors))


ForkingPickler.register(SerializedList, SerializedList._reduce_for_multiprocessing)


# ---------------------------------------------------------------------- views
class SerializedListView(SerializedList):
    """Records of one or several base lists picked by an index array (no copy).

    Made by :meth:`SerializedList.subset`, slicing and :func:`concat_records`. ``index``
    holds positions in the concatenation of ``bases`` (None: all of them, in order).

    Example:
        >>> base = SerializedList([{"i": i, "height": 2, "width": 2 + i} for i in range(4)])
        >>> view = base.subset([3, 1])
        >>> len(view), view[0]["i"], view.bases[0] is base, view.columns.widths.tolist()
        (2, 3, True, [5, 3])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107
        raise TypeError(
            "make views with SerializedList.subset(), slicing or concat_records(), "
            "not SerializedListView(...)")

    @classmethod
    def _over(cls, bases: Sequence[SerializedList], index: np.ndarray | None,
              name: str | None) -> SerializedListView:  # fmt: skip
        self = cls.__new__(cls)
        self.name = name
        self._bases = tuple(bases)
        self._starts = [0, *np.cumsum([len(b) for b in self._bases]).tolist()]
        if index is not None:
            total = self._starts[-1]
            index = np.asarray(index).reshape(-1)
            if index.size and (int(index.min()) < 0 or int(index.max()) >= total):
                raise IndexError(f"view index out of range for {total} records of {name!r}")
            dtype = np.int32 if total <= _INT32.max else np.int64
            index = _read_only(index.astype(dtype))
        self._index = index
        return self

    #: the plain lists holding the records
    bases = property(lambda self: self._bases)
    #: positions in the concatenation of the bases, one per record of the view
    index = property(lambda self: np.arange(self._starts[-1]) if self._index is None
                     else self._index)
    owner = property(lambda self: None)

    def __len__(self) -> int:
        return self._starts[-1] if self._index is None else len(self._index)

    def _locate(self, i: int) -> tuple[SerializedList, int]:
        g = i if self._index is None else int(self._index[i])
        if len(self._bases) == 1:
            return self._bases[0], g
        k = bisect.bisect_right(self._starts, g) - 1
        return self._bases[k], g - self._starts[k]

    def _load(self, i: int) -> Any:
        base, local = self._locate(i)
        return base._load(local)

    @property
    def columns(self) -> RecordColumns:  # type: ignore[override]
        joined = concat_columns([base.columns for base in self._bases])
        return joined if self._index is None else joined.take(self._index)

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        own = 0 if self._index is None else self._index.nbytes
        return int(own + sum(base.nbytes for base in self._bases))

    buffer = property(lambda self: self.compact().buffer)  # a view has none of its own
    ends = property(lambda self: self.compact().ends)

    def compact(self) -> SerializedList:
        """A plain list holding a copy of exactly these records."""
        return SerializedList(iter(self), name=self.name, progress=False)

    def _take(self, idx: np.ndarray) -> SerializedList:
        index = idx if self._index is None else self._index[idx]
        return SerializedListView._over(self._bases, index, self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.compact().__reduce__()

    def _reduce_for_multiprocessing(self) -> tuple[Any, ...]:
        # the bases by reference (each re-maps its file or attaches to shared memory)
        return (SerializedListView._over, (self._bases, self._index, self.name))

    def share_memory(self) -> SerializedListView:
        for base in self._bases:
            base.share_memory()
        return self


ForkingPickler.register(SerializedListView, SerializedListView._reduce_for_multiprocessing)


def concat_records(parts: Sequence[SerializedList], name: str | None = None) -> SerializedList:
    """Join SerializedLists (plain lists or views) into one view, copying no record.

    Example:
        >>> a = SerializedList([{"i": 0}]); b = SerializedList([{"i": 1}, {"i": 2}])
        >>> joined = concat_records([a, b.subset([1])], name="ab")
        >>> [r["i"] for r in joined], joined.bases == (a, b)
        ([0, 2], True)
    """
    for part in parts:
        if not isinstance(part, SerializedList):
            raise TypeError(f"concat_records joins SerializedLists, got {type(part).__name__}")
    parts = [part for part in parts if len(part)]
    if not parts:
        return SerializedList([], name=name)
    if len(parts) == 1 and not isinstance(parts[0], SerializedListView):
        return parts[0]
    bases: list[SerializedList] = []
    for part in parts:
        for base in part.bases if isinstance(part, SerializedListView) else (part,):
            if not any(base is b for b in bases):
                bases.append(base)
    if all(not isinstance(p, SerializedListView) for p in parts) and len(bases) == len(parts):
        return SerializedListView._over(bases, None, name)  # distinct plain lists: no index
    starts = np.cumsum([0] + [len(b) for b in bases])
    slot = {id(b): int(s) for b, s in zip(bases, starts)}
    pieces = []
    for part in parts:
        if not isinstance(part, SerializedListView):
            pieces.append(np.arange(len(part)) + slot[id(part)])
            continue
        own = np.asarray(part._starts[:-1], dtype=np.int64)
        shift = np.asarray([slot[id(b)] for b in part.bases], dtype=np.int64) - own
        g = part.index.astype(np.int64)
        pieces.append(g + shift[np.searchsorted(own, g, side="right") - 1])
    return SerializedListView._over(bases, np.concatenate(pieces), name)

