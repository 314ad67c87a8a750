"""Building a SerializedList's arrays from Python records (one pass, chunk by chunk).

Each chunk of records is split into skeletons and annotation columns
(:class:`~catalog.record_split.ColumnBuilder`), its numbers encoded and checked with numpy in
one go, then every record is pickled (its skeleton, or the whole record when the
columns cannot hold it exactly) by one Pickler into one growing buffer, its memo cleared after
each record so that every record unpickles on its own.
"""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Iterable
from itertools import chain, repeat
from typing import Any

import numpy as np

from .annotation_columns import AnnotationColumns
from .gc_pause import gc_paused
from .record_columns import RecordColumns, _columns_of, _flag_column, _int_column
from .record_split import ColumnBuilder, finish_columns

__all__ = ["PROGRESS_MIN_RECORDS", "build_arrays"]

logger = logging.getLogger(__name__)

#: Serializations of at least this many records show a progress bar (when tqdm is installed).
PROGRESS_MIN_RECORDS = 100_000
_CHUNK = 2048
_get = dict.get
_CATEGORY, _ISCROWD = repeat("category_id"), repeat("iscrowd")
_ANNOTATIONS, _HEIGHT, _WIDTH = repeat("annotations"), repeat("height"), repeat("width")
_MINUS_ONE, _ZERO = repeat(-1), repeat(0)


def _progress(records: Iterable[Any], name: str | None, progress: bool | None) -> tuple[Any, Any]:
    try:
        total = len(records)  # type: ignore[arg-type]
    except TypeError:
        total = None
    if not (progress or (progress is None and total is not None and total >= PROGRESS_MIN_RECORDS)):
        return records, None
    try:
        from tqdm import tqdm
    except ImportError:
        logger.info("serializing %s records (install tqdm for a progress bar)", total)
        return records, None
    bar = tqdm(records, total=total, desc=f"serializing {name or 'records'}", unit="rec",
               mininterval=1.0)  # fmt: skip
    return bar, bar


def build_arrays(
    records: Iterable[Any],
    name: str | None = None,
    progress: bool | None = None,
    columnar: bool = True,
) -> tuple[np.ndarray, np.ndarray, RecordColumns, AnnotationColumns]:
    """Serialize ``records``: ``(buffer, ends, columns, annotation columns)``.

    Any picklable item is accepted; dicts (detection records) also fill the columns. With
    ``columnar=False`` every record is pickled whole (faster to build, about twice the bytes).

    Example:
        >>> buffer, ends, columns, annotations = build_arrays([{"height": 2, "width": 3}, 7])
        >>> len(ends), columns.heights.tolist(), annotations.kinds.tolist()
        (2, [2, -1], [0, 0])
    """
    iterator, bar = _progress(records, name, progress)
    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=pickle.HIGHEST_PROTOCOL)
    dump, clear_memo, tell = pickler.dump, pickler.clear_memo, stream.tell
    builder = ColumnBuilder()
    ends_list: list[int] = []
    append_end = ends_list.append
    heights: list[Any] = []
    widths: list[Any] = []
    cat_ids: list[Any] = []
    crowd_flags: list[Any] = []
    ann_counts: list[int] = []
    chunk: list[Any] = []

    def flush() -> None:
        if columnar:
            try:
                split = builder.add_chunk(chunk)
            except Exception:
                add_numbers(chunk, None)  # its error first, as when the numbers came first
                raise
            add_numbers(chunk, builder.chunk_numbers)
            items = [r if s is None else s for r, s in zip(chunk, split, strict=True)]
        else:
            add_numbers(chunk, None)
            builder.add_pickled(len(chunk))
            items = chunk
        for item in items:
            dump(item)
            clear_memo()
            append_end(tell())
        chunk.clear()

    def add_numbers(records: list[Any], shared: Any) -> None:
        """The per-record numbers of ``records``: whole-chunk passes when every record is a
        dict with a list of dict annotations (the common case), else record by record.
        ``shared``: the annotation counts, category ids and crowd flags the split already
        read (:attr:`ColumnBuilder.chunk_numbers`), or None."""
        if shared is not None:
            counts, cats, crowd = shared
            heights.extend(map(_get, records, _HEIGHT, _MINUS_ONE))
            widths.extend(map(_get, records, _WIDTH, _MINUS_ONE))
            cat_ids.extend(cats)
            crowd_flags.extend(crowd)
            ann_counts.extend(counts)
            return
        if set(map(type, records)) == {dict}:
            alists = list(map(_get, records, _ANNOTATIONS))
            if set(map(type, alists)) == {list}:
                annos = list(chain.from_iterable(alists))
                if not annos or set(map(type, annos)) == {dict}:
                    heights.extend(map(_get, records, _HEIGHT, _MINUS_ONE))
                    widths.extend(map(_get, records, _WIDTH, _MINUS_ONE))
                    cat_ids.extend(map(_get, annos, _CATEGORY, _MINUS_ONE))
                    crowd_flags.extend(map(_get, annos, _ISCROWD, _ZERO))
                    ann_counts.extend(map(len, alists))
                    return
        for record in records:
            if isinstance(record, dict):
                height, width, cats, crowd = _columns_of(record)
            else:
                height, width, cats, crowd = -1, -1, (), ()
            heights.append(height)
            widths.append(width)
            cat_ids.extend(cats)
            crowd_flags.extend(crowd)
            ann_counts.append(len(cats))

    try:
        # nothing here creates cycles: collections would only rescan every record
        with gc_paused():
            for record in iterator:
                chunk.append(record)
                if len(chunk) >= _CHUNK:
                    flush()
            flush()
    finally:
        if bar is not None:
            bar.close()
    ends = np.asarray(ends_list, dtype=np.int64)
    # A zero-copy view of the stream's bytes (the stream stays alive through the view).
    buffer = np.frombuffer(stream.getbuffer(), dtype=np.uint8) if len(ends) else np.zeros(0, np.uint8)
    offsets = np.zeros(len(ann_counts) + 1, dtype=np.int64)
    if ann_counts:
        np.cumsum(np.asarray(ann_counts, dtype=np.int64), out=offsets[1:])
    columns = RecordColumns(
        _int_column(heights),
        _int_column(widths),
        _int_column(cat_ids),
        _flag_column(crowd_flags),
        offsets,
    )
    return buffer, ends, columns, finish_columns(builder)
