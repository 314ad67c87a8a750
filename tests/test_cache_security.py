"""Issue 10: cache entries others could write are never unpickled, never block, never follow
a link; descriptors have one owner."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import catalog.cache_config as cache_config
import catalog.records_map as records_map
from catalog import SerializedList
from catalog.disk_cache import (
    CacheCorruptError,
    CacheCorruptWarning,
    CacheKey,
    CacheSkippedWarning,
    DiskCache,
    MappedFile,
    UnsafeEntryError,
    load_with_cache,
    map_serialized,
    remap_file,
    write_serialized,
)

RECORDS = [{"file_name": f"{i}.jpg", "image_id": i, "height": 4, "width": 5} for i in range(4)]


class Counting:
    """A loader reading a JSON list that counts its runs."""

    def __init__(self, source: Path) -> None:
        self.source, self.calls = source, 0

    def __call__(self) -> tuple[list[dict], dict]:
        self.calls += 1
        return json.loads(self.source.read_text()), {"meta": 1}


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
    monkeypatch.setenv("CATMAP_CACHE_KEY_FILE", str(tmp_path / "cfg" / "cache.key"))
    monkeypatch.delenv("CATMAP_CACHE_SHARED", raising=False)
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    monkeypatch.setattr(cache_config, "_WARNED", set())
    source = tmp_path / "ann.json"
    source.write_text(json.dumps(RECORDS))
    return directory, source


def _load(source: Path, builder, **kwargs):
    return load_with_cache("toy", [source], builder, loader="json-list", **kwargs)


def _key(source: Path) -> CacheKey:
    return CacheKey.build("toy", [source], loader="json-list", options=None)


def _plant(path: Path, key: CacheKey, marker: Path, **write_kwargs) -> None:
    """An entry for ``key`` (header, name and CRC right) whose pickles create ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = SerializedList([{"evil": Payload(marker)}], name="toy")
    with open(path, "wb") as out:
        write_serialized(out, records, key=key.fields(), extra={"x": Payload(marker)}, **write_kwargs)


def _touch_all(records: SerializedList) -> None:
    records.to_list()  # unpickles every record


@pytest.mark.parametrize("signed_with", [None, "other-secret"])
def test_planted_entry_is_never_unpickled(env, tmp_path, signed_with):
    directory, source = env
    marker = tmp_path / "pwned"
    key = _key(source)
    kwargs = {}
    if signed_with:  # signed, but with somebody else's secret
        kwargs = {"secret": os.urandom(32), "key_digest": key.key_digest()}
    directory.mkdir(mode=0o700)
    _plant(directory / key.file_name(), key, marker, **kwargs)
    builder = Counting(source)
    with pytest.warns(CacheCorruptWarning, match="toy"):
        records, extra = _load(source, builder)
    _touch_all(records)
    assert not marker.exists()
    assert builder.calls == 1 and records.to_list() == RECORDS and extra == {"meta": 1}
    records, _ = _load(source, builder)  # the rebuilt entry is served
    assert builder.calls == 1 and isinstance(records.owner, MappedFile)


def test_entry_of_another_key_copied_to_this_name_is_refused_and_rebuilt(env, tmp_path):
    directory, source = env
    other = tmp_path / "other.json"
    other.write_text(json.dumps(RECORDS[:1]))
    _load(other, Counting(other))
    (entry_a,) = directory.glob("*.catmap")
    key_b = _key(source)
    os.replace(entry_a, directory / key_b.file_name())  # validly signed, for key A
    builder = Counting(source)
    with pytest.warns(CacheCorruptWarning, match="another cache key"):
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
    _touch_all(records)
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


def test_shared_cache_is_used_only_when_opted_in_and_entries_still_need_the_mac(
    env, tmp_path, monkeypatch
):
    directory, source = env
    _set_mode(directory, 0o775)
    monkeypatch.setenv("CATMAP_CACHE_SHARED", "1")
    builder = Counting(source)
    _load(source, builder)
    records, _ = _load(source, builder)
    assert builder.calls == 1 and records.to_list() == RECORDS
    (entry,) = directory.glob("*.catmap")
    assert stat.S_IMODE(entry.stat().st_mode) & 0o040  # the team can read it
    marker = tmp_path / "pwned"
    _plant(entry, _key(source), marker)  # a teammate without the key file
    with pytest.warns(CacheCorruptWarning):
        records, _ = _load(source, builder)
    _touch_all(records)
    assert builder.calls == 2 and not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid")
@pytest.mark.parametrize("shared", [False, True])
def test_entry_owned_by_another_user(env, monkeypatch, shared):
    directory, source = env
    builder = Counting(source)
    _load(source, builder)
    (entry,) = directory.glob("*.catmap")
    os.chown(entry, 4242, 4242)
    if not shared:
        with pytest.warns(CacheSkippedWarning, match="belongs to uid 4242"):
            _load(source, builder)
        assert builder.calls == 2
        return
    monkeypatch.setenv("CATMAP_CACHE_SHARED", "1")
    records, _ = _load(source, builder)  # read through a private copy, MAC verified
    assert builder.calls == 1 and records.to_list() == RECORDS
    assert records.owner.path == str(entry)


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
    with pytest.raises(UnsafeEntryError, match="symbolic link"):  # map_serialized too
        map_serialized(entry)
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


def test_map_serialized_leaves_a_given_fd_to_the_caller_when_it_fails(tmp_path, close_tracker):
    path = tmp_path / "x.catmap"
    path.write_bytes(b"CATMAPC2" + bytes(200))
    fd = os.open(path, os.O_RDONLY)
    with pytest.raises(CacheCorruptError):
        map_serialized(fd=fd)
    os.fstat(fd)  # still open: the caller owns it and closes it once
    os.close(fd)
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(RECORDS))
    fd = os.open(path, os.O_RDONLY)
    records, _ = map_serialized(fd=fd)  # now the records own it
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
        records_map.MappedFile(fd, str(path), str(path), verify=True)
    import gc

    gc.collect()
    os.fstat(fd)
    os.close(fd)
    assert close_tracker == []


def test_cache_directory_and_key_file_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv("CATMAP_CACHE_KEY_FILE", str(tmp_path / "cfg" / "sub" / "cache.key"))
    old_umask = os.umask(0o002)
    try:
        source = tmp_path / "a.json"
        source.write_text(json.dumps(RECORDS))
        cache = DiskCache(tmp_path / "c1" / "c2")
        cache.get_or_build(_key(source), lambda: (SerializedList(RECORDS), {}))
    finally:
        os.umask(old_umask)
    for path in (tmp_path / "c1", tmp_path / "c1" / "c2", tmp_path / "cfg", tmp_path / "cfg/sub"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert stat.S_IMODE((tmp_path / "cfg" / "sub" / "cache.key").stat().st_mode) == 0o600
    (entry,) = (tmp_path / "c1" / "c2").glob("*.catmap")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_remap_by_path_verifies_the_mac_of_a_cache_entry(env, tmp_path):
    # The path fallback of a spawn worker / local rank (when /proc/<pid>/fd is unusable).
    directory, source = env
    _load(source, Counting(source))
    records, _ = _load(source, Counting(source))
    owner = records.owner
    crc = owner.header["payload_crc32"]
    args = (-1, -1, owner.device, owner.inode, owner.path, crc, owner.size, "toy")
    assert remap_file(*args).to_list() == RECORDS
    assert remap_file(*args, owner.mac).to_list() == RECORDS
    data = bytearray(Path(owner.path).read_bytes())
    data[60] ^= 1  # a MAC byte: same size, same checksum, not signed by this user any more
    forged = tmp_path / "forged"
    forged.write_bytes(bytes(data))
    os.replace(forged, owner.path)
    with pytest.raises(CacheCorruptError, match="MAC mismatch"):
        remap_file(*args)


def test_dataset_catalog_get_never_unpickles_a_planted_entry(env, tmp_path):
    # The reproduction: an entry replaced by another user's pickle payload.
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
    records = SerializedList([{"evil": Payload(marker)}], name="planted_coco")
    with open(entry, "wb") as out:  # same key in the header, valid CRCs, no valid MAC
        write_serialized(out, records, key=header["key"], extra={"metadata": Payload(marker)})
    DatasetCatalog.remove("planted_coco")
    MetadataCatalog.remove("planted_coco")
    register_coco_instances("planted_coco", {}, json_file, "/img")
    with pytest.warns(CacheCorruptWarning, match="planted_coco"):
        again = DatasetCatalog.get("planted_coco").to_list()
    assert again == first and not marker.exists()
