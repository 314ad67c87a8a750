"""Cache entries are data-only (decoding never runs code); entries and directories others
could write are not read; nothing blocks or follows a link; descriptors have one owner."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import pickle
import signal
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import numpy as np

import catalog.storage.cache as cache_config
from catalog import RecordColumns, RecordFormatError, SerializedList
from catalog.storage.cache import (
    CacheCorruptError,
    CacheCorruptWarning,
    CacheKey,
    CacheSkippedWarning,
    DiskCache,
    UnsafeEntryError,
    load_with_cache,
)
from catalog.storage.records_file import MappedFile, open_entry, remap
from catalog.storage.records_file import write_records as write_serialized


def map_serialized(path):
    mapped = MappedFile(open_entry(path), str(path), verify=True, path=str(path))
    return mapped.records(mapped.header["name"]), mapped.header

RECORDS = [{"file_name": f"{i}.jpg", "image_id": i, "height": 4, "width": 5} for i in range(4)]


class Counting:
    """A loader reading a JSON list that counts its runs."""

    def __init__(self, source: Path) -> None:
        self.source, self.calls = source, 0

    def __call__(self) -> tuple[SerializedList, dict]:
        self.calls += 1
        return SerializedList(json.loads(self.source.read_text())), {"meta": 1}


class Payload:
    """Unpickling it creates ``marker``: the proof that a planted entry was unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.fixture
def env(tmp_path, monkeypatch) -> tuple[Path, Path]:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(directory))
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    monkeypatch.setattr(cache_config, "_WARNED", set())
    source = tmp_path / "ann.json"
    source.write_text(json.dumps(RECORDS))
    return directory, source


def _load(source: Path, builder, **kwargs):
    return load_with_cache("toy", [source], builder, loader="json-list", **kwargs)


def _key(source: Path) -> CacheKey:
    return CacheKey.build("toy", [source], loader="json-list", options=None)


def _evil(marker: Path, name: str = "toy") -> SerializedList:
    """One record whose bytes are a pickle that creates ``marker`` when unpickled."""
    payload = np.frombuffer(pickle.dumps({"evil": Payload(marker)}), np.uint8)
    columns = RecordColumns([-1], [-1], [], [], [0, 0])
    return SerializedList.from_arrays(payload, np.array([len(payload)]), columns, name=name)


def _plant(path: Path, key: CacheKey, marker: Path) -> None:
    """An entry for ``key`` (header, name and CRC right) whose record is a pickle."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        write_serialized(out, _evil(marker), key=key.fields(), extra={"x": 1})


def _touch_all(records: SerializedList) -> None:
    with pytest.raises(RecordFormatError, match="damaged"):
        records.to_list()  # decodes every record: data only


def test_a_planted_entry_is_decoded_as_data_and_never_runs_code(env, tmp_path):
    directory, source = env
    marker = tmp_path / "pwned"
    key = _key(source)
    directory.mkdir(mode=0o700)
    _plant(directory / key.file_name(), key, marker)
    records, extra = _load(source, Counting(source))
    _touch_all(records)
    assert not marker.exists() and extra == {"x": 1}


def test_entry_of_another_key_copied_to_this_name_is_refused_and_rebuilt(env, tmp_path):
    directory, source = env
    other = tmp_path / "other.json"
    other.write_text(json.dumps(RECORDS[:1]))
    _load(other, Counting(other))
    (entry_a,) = directory.glob("*.catmap")
    key_b = _key(source)
    os.replace(entry_a, directory / key_b.file_name())  # validly signed, for key A
    builder = Counting(source)
    with pytest.warns(CacheCorruptWarning, match="another key"):
        records, _ = _load(source, builder)
    assert builder.calls == 1 and records.to_list() == RECORDS


def test_store_maps_the_descriptor_it_wrote_not_the_path(env, tmp_path, monkeypatch):
    # Whoever renames a file over the fresh entry right after os.replace changes nothing.
    directory, source = env
    marker = tmp_path / "pwned"
    key = _key(source)
    evil = tmp_path / "evil.catmap"
    _plant(evil, key, marker)
    real_replace = os.replace

    def replace_then_swap(src, dst, **kwargs):
        real_replace(src, dst, **kwargs)
        real_replace(evil, directory / key.file_name())

    monkeypatch.setattr(os, "replace", replace_then_swap)
    records, extra = _load(source, Counting(source))
    assert records.to_list() == RECORDS and extra == {"meta": 1}
    assert not marker.exists()


def _set_mode(path: Path, mode: int) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, mode)


def test_group_writable_directory_is_skipped_with_one_warning(env, tmp_path):
    directory, source = env
    _set_mode(directory, 0o775)
    marker = tmp_path / "pwned"
    _plant(directory / _key(source).file_name(), _key(source), marker)
    builder = Counting(source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            records, _ = _load(source, builder)
    assert builder.calls == 3 and records.to_list() == RECORDS and not marker.exists()
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheSkippedWarning)]
    assert len(messages) == 1 and "group or others can write it" in messages[0]
    assert sorted(p.name for p in directory.iterdir()) == [_key(source).file_name()]


def test_directory_of_another_user_is_skipped(env, monkeypatch):
    directory, source = env
    _set_mode(directory, 0o700)
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 4242)  # every file looks foreign
    builder = Counting(source)
    with pytest.warns(CacheSkippedWarning, match="belongs to uid"):
        _load(source, builder)
    _load(source, builder)
    assert builder.calls == 2 and list(directory.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid")
def test_entry_owned_by_another_user(env, monkeypatch):
    directory, source = env
    builder = Counting(source)
    _load(source, builder)
    (entry,) = directory.glob("*.catmap")
    os.chown(entry, 4242, 4242)
    with pytest.warns(CacheSkippedWarning, match="belongs to uid 4242"):
        _load(source, builder)
    assert builder.calls == 2


class Blocked(Exception):  # noqa: N818 - not an OSError, so no code path swallows it
    """Raised by the alarm: the test blocked."""


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail (instead of hanging) when the test blocks for more than 10 seconds."""

    def timeout(signum, frame):
        raise Blocked("blocked on the cache entry")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    target = path.with_name("target.catmap")
    target.write_bytes(b"x")
    path.symlink_to(target)


def _directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize("make", [_fifo, _symlink, _directory])
def test_non_regular_entry_is_skipped_without_blocking(env, alarm, make):
    directory, source = env
    directory.mkdir(mode=0o700)
    make(directory / _key(source).file_name())
    builder = Counting(source)
    with pytest.warns(CacheSkippedWarning, match="symbolic link|not a regular file"):
        records, _ = _load(source, builder)
    assert builder.calls == 1 and records.to_list() == RECORDS


def test_symlink_to_a_valid_entry_is_not_followed(env, tmp_path, alarm):
    directory, source = env
    builder = Counting(source)
    _load(source, builder)
    (entry,) = directory.glob("*.catmap")
    moved = tmp_path / "elsewhere.catmap"
    os.replace(entry, moved)
    entry.symlink_to(moved)
    with pytest.raises(UnsafeEntryError, match="symbolic link"):
        open_entry(entry)
    with pytest.warns(CacheSkippedWarning, match="symbolic link"):
        _load(source, builder)
    assert builder.calls == 2


@pytest.fixture
def close_tracker(monkeypatch) -> list[int]:
    """Record every os.close of a descriptor that was not open (a double close)."""
    bad: list[int] = []
    real_close = os.close

    def tracking_close(fd: int) -> None:
        try:
            real_close(fd)
        except OSError as exc:
            if exc.errno == errno.EBADF:
                bad.append(fd)
            raise

    monkeypatch.setattr(os, "close", tracking_close)
    return bad


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_entry_closes_each_descriptor_once(env, tmp_path, close_tracker):
    import gc

    directory, source = env
    builder = Counting(source)
    _load(source, builder)
    (entry,) = directory.glob("*.catmap")
    _corrupt(entry)
    with pytest.warns(CacheCorruptWarning):
        _load(source, builder)
    # a file opened now may get a number the failed mapping held; nothing may close it
    with open(tmp_path / "mine.txt", "w") as mine:
        gc.collect()
        os.fstat(mine.fileno())
        mine.write("still open")
    _corrupt(next(directory.glob("*.catmap")))
    with pytest.raises(CacheCorruptError):
        map_serialized(next(directory.glob("*.catmap")))
    gc.collect()
    assert close_tracker == []


def test_mapped_file_leaves_a_given_fd_to_the_caller_when_it_fails(tmp_path, close_tracker):
    path = tmp_path / "x.catmap"
    path.write_bytes(b"CATMAPR1" + bytes(200))
    fd = os.open(path, os.O_RDONLY)
    with pytest.raises(CacheCorruptError):
        MappedFile(fd, str(path), verify=True)
    os.fstat(fd)  # still open: the caller owns it and closes it once
    os.close(fd)
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(RECORDS))
    fd = os.open(path, os.O_RDONLY)
    records = MappedFile(fd, str(path), verify=True).records("x")  # now the records own it
    owner = records.owner
    assert owner.fd == fd
    del records, owner
    import gc

    gc.collect()
    assert close_tracker == []


def test_mapped_file_does_not_close_a_descriptor_it_never_owned(tmp_path, close_tracker):
    path = tmp_path / "short.catmap"
    path.write_bytes(b"short")
    fd = os.open(path, os.O_RDONLY)
    with pytest.raises(CacheCorruptError):
        MappedFile(fd, str(path), verify=True)
    import gc

    gc.collect()
    os.fstat(fd)
    os.close(fd)
    assert close_tracker == []


def test_cache_directory_and_entries_are_private(tmp_path):
    old_umask = os.umask(0o002)
    try:
        source = tmp_path / "a.json"
        source.write_text(json.dumps(RECORDS))
        cache = DiskCache(tmp_path / "c1" / "c2")
        cache.get_or_build(_key(source), lambda: (SerializedList(RECORDS), {}))
    finally:
        os.umask(old_umask)
    for path in (tmp_path / "c1", tmp_path / "c1" / "c2"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    (entry,) = (tmp_path / "c1" / "c2").glob("*.catmap")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_remap_by_path_verifies_the_checksum_of_a_cache_entry(env, tmp_path):
    # The path fallback of a spawn worker (when /proc/<pid>/fd is unusable).
    directory, source = env
    _load(source, Counting(source))
    records, _ = _load(source, Counting(source))
    owner = records.owner
    args = (-1, -1, owner.device, owner.inode, owner.path, owner.size, owner.crc)
    assert remap(*args, name="toy").to_list() == RECORDS
    data = bytearray(Path(owner.path).read_bytes())
    data[-3] ^= 1  # same size, damaged payload
    forged = tmp_path / "forged"
    forged.write_bytes(bytes(data))
    os.replace(forged, owner.path)
    with pytest.raises(CacheCorruptError, match="checksum mismatch"):
        remap(*args, name="toy")


def test_dataset_catalog_get_never_unpickles_a_planted_entry(env, tmp_path):
    # The reproduction: an entry replaced by a pickle payload.
    from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances

    directory, _ = env
    json_file = tmp_path / "instances.json"
    json_file.write_text(
        json.dumps(
            {
                "images": [{"id": 5, "file_name": "a.jpg", "height": 10, "width": 20}],
                "annotations": [{"id": 1, "image_id": 5, "category_id": 9, "bbox": [1, 2, 3, 4]}],
                "categories": [{"id": 9, "name": "dog"}],
            }
        )
    )
    register_coco_instances("planted_coco", {}, json_file, "/img")
    first = DatasetCatalog.get("planted_coco").to_list()
    (entry,) = directory.glob("*.catmap")
    header = map_serialized(entry)[1]
    marker = tmp_path / "pwned"
    with open(entry, "wb") as out:  # same key in the header, valid CRC
        write_serialized(out, _evil(marker, "planted_coco"), key=header["key"], extra={})
    DatasetCatalog.remove("planted_coco")
    MetadataCatalog.remove("planted_coco")
    register_coco_instances("planted_coco", {}, json_file, "/img")
    _touch_all(DatasetCatalog.get("planted_coco"))
    assert first and not marker.exists()
