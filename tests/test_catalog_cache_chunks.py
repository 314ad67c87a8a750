"""The catalog cache's records file is checked chunk by chunk: opening an entry checks its
header and columns only; a chunk of the record buffer is checked when a record in it is first
read, and a damaged one raises RecordsChunkError (never silent data)."""

from __future__ import annotations

import json
import os
import pickle
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import catalog.storage.records_file as records_file
from catalog import SerializedList
from catalog.storage.cache import CACHE_SUFFIX, CacheCorruptError, load_with_cache
from catalog.storage.records_file import MappedFile, RecordsChunkError, open_entry, remap

CHUNK = records_file._CHUNK
N = 30_000  # about 4 MiB of records: 4 chunks of buffer


def _records(n: int) -> list[dict]:
    return [{"file_name": f"images/{i:08d}.jpg", "height": 100 + i % 7, "width": 200,
             "image_id": i, "annotations": [{"category_id": i % 5, "bbox": [1.0, 2.0, 3.0, 4.0],
                                             "iscrowd": 0}]} for i in range(n)]


@pytest.fixture
def entry(tmp_path, monkeypatch):
    """(source, build counter, cache entry path, buffer end offsets) of a cached dataset."""
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    source = tmp_path / "ann.json"
    source.write_text(json.dumps(_records(N)))
    calls = []

    def build():
        calls.append(1)
        return SerializedList(json.loads(source.read_text())), {}

    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    assert len(records.buffer) > 3 * CHUNK
    (path,) = (tmp_path / "cache").glob(f"*{CACHE_SUFFIX}")
    return source, build, calls, path, np.array(records.ends)


def _damage(path: Path, payload_offset: int) -> None:
    header_len = int.from_bytes(path.read_bytes()[8:16], "little")
    start = -(-(28 + header_len) // 4096) * 4096
    with open(path, "r+b") as handle:  # in place: the same file, as a bad disk would
        handle.seek(start + payload_offset)
        byte = handle.read(1)
        handle.seek(start + payload_offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def _in_chunk(ends: np.ndarray, chunk: int) -> int:
    """A record lying wholly inside ``chunk`` of the buffer."""
    starts = np.concatenate([[0], ends[:-1]])
    return int(np.flatnonzero((starts >= chunk * CHUNK) & (ends <= (chunk + 1) * CHUNK))[0])


def test_a_damaged_chunk_raises_the_typed_error_when_a_record_in_it_is_read(entry):
    source, build, calls, path, ends = entry
    bad = _in_chunk(ends, 2)
    _damage(path, int(ends[bad - 1]) + 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the open itself does not notice: nothing is read yet
        records, _ = load_with_cache("toy", [source], build, loader="json-list")
    assert len(calls) == 1
    assert records[0] == _records(1)[0]  # chunk 0 is intact
    good = _in_chunk(ends, 1)
    assert records[good]["image_id"] == good
    with pytest.raises(RecordsChunkError, match="chunk 2") as info:
        records[bad]
    assert isinstance(info.value, CacheCorruptError)
    assert info.value.chunk == 2 and info.value.path == str(path)
    with pytest.raises(RecordsChunkError):  # every record of the chunk, every time
        records[bad + 1]
    with pytest.raises(RecordsChunkError):  # and through a view, or a copy of the whole
        records.subset([0, bad])[1]
    with pytest.raises(RecordsChunkError):
        pickle.dumps(records)
    # the damaged entry was removed: the next load rebuilds it and reads true records
    assert not path.exists()
    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    assert len(calls) == 2 and records[bad]["image_id"] == bad


def test_opening_an_entry_reads_no_untouched_chunk_of_the_records(entry, monkeypatch):
    source, build, calls, path, ends = entry
    checked = []

    class Counting:
        @staticmethod
        def crc32(data, value=0):
            checked.append(len(data))
            return zlib.crc32(data, value)

    monkeypatch.setattr(records_file, "zlib", Counting)
    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    assert len(calls) == 1
    check = records.owner.check
    buffer_chunks = -(-int(ends[-1]) // CHUNK)
    # the header and the offsets/columns (from the chunk holding the buffer's end) only
    assert not any(check.done[: buffer_chunks - 1])
    assert sum(checked) < int(ends[-1]) // 2
    checked.clear()
    i = _in_chunk(ends, 1)
    assert records[i]["image_id"] == i and records[i + 1]["image_id"] == i + 1
    assert checked == [CHUNK]  # one chunk, checked once
    assert list(check.done[: buffer_chunks - 1]) == [0, 1] + [0] * (buffer_chunks - 3)


def test_a_damaged_chunk_is_found_after_a_remap(entry):
    # spawn workers and other local ranks re-map the file: they check the chunks they read
    source, build, calls, path, ends = entry
    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    owner = records.owner
    bad = _in_chunk(ends, 0)
    _damage(path, int(ends[bad]) - 2)
    for pid, fd in ((-1, -1), (os.getpid(), owner.fd)):  # by path, then through /proc
        again = remap(pid, fd, owner.device, owner.inode, owner.path, owner.size, owner.crc,
                      name="toy")
        assert again[len(again) - 1]["image_id"] == N - 1
        with pytest.raises(RecordsChunkError, match="chunk 0"):
            again[bad]
    assert not path.exists()  # removed by the first error; /proc still reaches it


def test_a_damaged_header_or_column_is_found_at_open(entry):
    source, build, calls, path, ends = entry
    _damage(path, int(ends[-1]) + 5)  # the record offsets
    for damage in (None, 40):  # the record offsets, then a byte inside the header
        if damage is not None:
            data = bytearray(path.read_bytes())
            data[damage] ^= 1
            path.write_bytes(bytes(data))
        fd = open_entry(path)
        with pytest.raises(CacheCorruptError, match="checksum mismatch"):
            MappedFile(fd, str(path), verify=True)
        os.close(fd)
