"""Tests of catalog.storage.cache: keys, invalidation, corruption, racing builders, switches."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import time
import warnings
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest

import catalog.storage.cache as cache_config
from catalog import CacheError, SerializedList
from catalog.storage.cache import (
    CACHE_SUFFIX,
    CacheCorruptError,
    CacheCorruptWarning,
    CacheKey,
    CacheSkippedWarning,
    DiskCache,
    load_with_cache,
)
from catalog.storage.records_file import MappedFile, open_entry, remap
from catalog.storage.records_file import write_records as write_serialized
from tests.work_counting import WorkBudgetExceeded


def _records(n: int, tag: str = "a") -> list[dict]:
    return [
        {
            "file_name": f"{tag}/{i}.jpg",
            "height": 10 + i,
            "width": 20 + i,
            "image_id": i,
            "annotations": [{"category_id": i % 3, "bbox": [0, 0, 1, 1], "iscrowd": i % 2}],
        }
        for i in range(n)
    ]


def map_serialized(path, verify: bool = True):
    mapped = MappedFile(open_entry(path), str(path), verify=verify, path=str(path))
    return mapped.records(mapped.header["name"]), mapped.header


class CountingBuilder:
    """A loader that reads a JSON list of records and counts how often it ran."""

    def __init__(self, source: Path, extra: dict | None = None) -> None:
        self.source = source
        self.calls = 0
        self.extra = extra if extra is not None else {"metadata": {"id_map": {1: 0, 7: 1}}}

    def __call__(self) -> tuple[SerializedList, dict]:
        self.calls += 1
        return SerializedList(json.loads(self.source.read_text())), self.extra


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(directory))
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    return directory


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(_records(5)))
    return path


def _cache_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{CACHE_SUFFIX}")) if directory.is_dir() else []


def _load(source: Path, builder, **kwargs):
    return load_with_cache("toy", [source], builder, loader="json-list", **kwargs)


def test_second_load_comes_from_the_mapped_cache(cache_env, source):
    builder = CountingBuilder(source)
    first, extra1 = _load(source, builder)
    second, extra2 = _load(source, builder)
    assert builder.calls == 1
    assert first.to_list() == second.to_list() == _records(5)
    # the extra data keeps its Python types (int dict keys survive)
    assert extra1 == extra2 == {"metadata": {"id_map": {1: 0, 7: 1}}}
    assert isinstance(second.owner, MappedFile)
    assert not second.buffer.flags.writeable
    np.testing.assert_array_equal(second.columns.heights, [10, 11, 12, 13, 14])
    np.testing.assert_array_equal(second.columns.category_ids, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(second.columns.iscrowd, [0, 1, 0, 1, 0])
    assert len(_cache_files(cache_env)) == 1


def test_changed_source_file_invalidates_and_replaces_the_entry(cache_env, source):
    builder = CountingBuilder(source)
    _load(source, builder)
    old_files = _cache_files(cache_env)
    source.write_text(json.dumps(_records(3, tag="b")))
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    records, _ = _load(source, builder)
    assert builder.calls == 2
    assert records.to_list() == _records(3, tag="b")
    new_files = _cache_files(cache_env)
    assert len(new_files) == 1 and new_files != old_files  # the stale entry was removed


def test_touching_the_file_alone_invalidates(cache_env, source):
    builder = CountingBuilder(source)
    _load(source, builder)
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    _load(source, builder)
    assert builder.calls == 2


def test_same_size_rewrite_within_the_timestamp_granularity_invalidates(cache_env, source):
    builder = CountingBuilder(source)
    _load(source, builder)
    stat = source.stat()
    source.write_text(source.read_text().replace("a/0.jpg", "z/0.jpg"))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    records, _ = _load(source, builder)
    assert builder.calls == 2 and records[0]["file_name"] == "z/0.jpg"


def test_loader_options_and_version_are_part_of_the_key(cache_env, source):
    builder = CountingBuilder(source)
    _load(source, builder, options={"root": "a"})
    _load(source, builder, options={"root": "b"})
    _load(source, builder, options={"root": "a"})
    assert builder.calls == 2
    key = CacheKey.build("toy", [source], loader="x", options={"root": "a"})
    other_version = CacheKey(key.name, key.loader, key.sources, key.options, version="0.0.0")
    assert key.file_name() != other_version.file_name()
    assert key.sources[0][0] == str(source.resolve())


def test_unserializable_option_loads_without_caching(cache_env, source):
    builder = CountingBuilder(source)
    records, _ = _load(source, builder, options={"fn": object()})
    assert records.to_list() == _records(5)
    assert _cache_files(cache_env) == []


def _corrupt_payload(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])


def _bad_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[30] ^= 0x01  # inside the JSON header
    path.write_bytes(bytes(data))


def _not_a_cache(path: Path) -> None:
    path.write_bytes(b"garbage")


@pytest.mark.parametrize("damage", [_corrupt_payload, _truncate, _bad_header, _not_a_cache])
def test_corrupt_entry_is_detected_rebuilt_with_a_warning_and_never_served(
    cache_env, source, damage
):
    builder = CountingBuilder(source)
    _load(source, builder)
    (entry,) = _cache_files(cache_env)
    damage(entry)
    with pytest.warns(CacheCorruptWarning, match="toy"):
        records, _ = _load(source, builder)
    assert builder.calls == 2
    assert records.to_list() == _records(5)
    # the rebuilt file verifies again
    (entry,) = _cache_files(cache_env)
    assert map_serialized(entry)[0].to_list() == _records(5)


def test_map_serialized_reports_the_reason(tmp_path):
    path = tmp_path / "x.catmap"
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(_records(4)))
    _corrupt_payload(path)
    with pytest.raises(CacheCorruptError, match="checksum mismatch"):
        map_serialized(path)
    _truncate(path)
    with pytest.raises(CacheCorruptError, match="truncated or overwritten"):
        map_serialized(path)
    # without payload verification a flipped byte is not noticed, which is why loads verify
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(_records(4)))
    assert len(map_serialized(path, verify=False)[0]) == 4


def test_empty_dataset_round_trips(tmp_path):
    path = tmp_path / "empty.catmap"
    with open(path, "wb") as out:
        write_serialized(out, SerializedList([], name="empty"))
    records, header = map_serialized(path)
    assert len(records) == 0 and header["num_records"] == 0 and records.name == "empty"


def test_cache_can_be_turned_off_globally_and_per_call(cache_env, source, monkeypatch):
    builder = CountingBuilder(source)
    monkeypatch.setenv("CATMAP_CACHE", "0")
    _load(source, builder)
    records, extra = _load(source, builder)
    assert builder.calls == 2 and _cache_files(cache_env) == []
    assert records.to_list() == _records(5) and extra == builder.extra


def test_unwritable_cache_directory_does_not_break_loading(tmp_path, source, monkeypatch):
    # Was a log line per load; now one CacheSkippedWarning per process (issue 10).
    monkeypatch.setattr(cache_config, "_WARNED", set())
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(blocker / "cache"))
    builder = CountingBuilder(source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records, _ = _load(source, builder)
        again, _ = _load(source, builder)
    assert records.to_list() == again.to_list() == _records(5) and builder.calls == 2
    skipped = [w for w in caught if issubclass(w.category, CacheSkippedWarning)]
    assert len(skipped) == 1 and "loading without the cache" in str(skipped[0].message)


def test_missing_source_lets_the_loader_report_it(cache_env, tmp_path):
    missing = tmp_path / "missing.json"

    def build():
        raise FileNotFoundError(f"no such annotation file: {missing}")

    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_with_cache("toy", [missing], build, loader="x")


def test_source_changed_while_loading_is_not_cached(cache_env, source):
    def build():
        records = json.loads(source.read_text())
        stat = source.stat()
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        return SerializedList(records), {}

    records, _ = _load(source, build)
    assert len(records) == 5 and _cache_files(cache_env) == []


def _race_worker(args: tuple[str, str, str]) -> list[dict]:
    cache_dir, source, runs = args
    os.environ["CATMAP_CACHE_DIR"] = cache_dir

    def build():
        with open(runs, "a") as f:  # one line per run of the loader
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # the others arrive while this one builds
        return SerializedList(json.loads(Path(source).read_text())), {"pid": os.getpid()}

    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    return records.to_list()


def test_racing_processes_build_once_and_all_get_the_entry(cache_env, source, tmp_path):
    # Was: both racing builders build and both write a valid entry. Now a lock per key makes
    # one process build while the others wait and then map its entry (issue 10).
    runs = tmp_path / "runs.txt"
    ctx = mp.get_context("fork")
    with ctx.Pool(3) as pool:
        results = pool.map(_race_worker, [(str(cache_env), str(source), str(runs))] * 3)
    assert results == [_records(5)] * 3
    assert len(runs.read_text().splitlines()) == 1
    (entry,) = _cache_files(cache_env)
    assert map_serialized(entry)[0].to_list() == _records(5)
    assert [p for p in cache_env.iterdir() if p.name.startswith(".tmp-")] == []


def _read_in_child(payload: bytes) -> list[dict]:
    records = pickle.loads(payload)
    return [records[0], records[-1], len(records), type(records.owner).__name__]


def test_spawn_workers_remap_the_file_instead_of_copying(cache_env, source):
    builder = CountingBuilder(source)
    _load(source, builder)
    records, _ = _load(source, builder)
    payload = bytes(ForkingPickler.dumps(records))
    assert len(payload) < 2000  # a reference to the file, not the buffer
    # the parent keeps the file open: removing it does not break workers started later
    for entry in _cache_files(cache_env):
        entry.unlink()
    with mp.get_context("spawn").Pool(1) as pool:
        first, last, n, owner = pool.apply(_read_in_child, (payload,))
    assert (first, last, n) == (_records(5)[0], _records(5)[-1], 5)
    assert owner == "MappedFile"


def test_remap_by_path_refuses_a_different_file(tmp_path):
    path = tmp_path / "x.catmap"
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(_records(4)))
    records, _ = map_serialized(path)
    owner = records.owner
    with open(path, "wb") as out:
        write_serialized(out, SerializedList(_records(6)))
    with pytest.raises(CacheError, match="replaced by another file"):
        remap(-1, -1, owner.device, owner.inode, str(path), owner.size, owner.crc, name="toy")


def test_disk_cache_lists_and_clears_entries(cache_env, source, tmp_path):
    builder = CountingBuilder(source)
    _load(source, builder)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_records(2)))
    load_with_cache("other", [other], CountingBuilder(other), loader="json-list")
    cache = DiskCache()
    entries = {e.name: e for e in cache.entries()}
    assert set(entries) == {"toy", "other"}
    assert entries["toy"].num_records == 5 and entries["toy"].valid and not entries["toy"].stale
    assert entries["toy"].sources == [str(source.resolve())]
    other.unlink()
    assert {e.name for e in cache.entries() if e.stale} == {"other"}
    removed = cache.clear(stale_only=True)
    assert [p.name.startswith("other-") for p in removed] == [True]
    assert [e.name for e in cache.entries()] == ["toy"]
    assert len(cache.clear()) == 1 and cache.entries() == []


def test_the_catalog_caches_file_backed_entries_with_the_metadata_the_loader_set(
    cache_env, source
):
    from catalog import DatasetCatalog, MetadataCatalog

    name = "disk_cache_test_meta"
    calls = []

    def loader():
        calls.append(1)
        MetadataCatalog.get(name).set(thing_classes=["a", "b"], id_map={3: 0, 9: 1})
        return json.loads(source.read_text())

    def fresh(**options):  # as in a new process
        DatasetCatalog.pop(name, None)
        MetadataCatalog.remove(name)
        DatasetCatalog.register(
            name, loader, source_files=[source], cache_key={"loader": "test"}, options=options
        )
        return DatasetCatalog.get(name)

    assert fresh().to_list() == _records(5)
    assert fresh().to_list() == _records(5) and len(calls) == 1
    assert MetadataCatalog.get(name).id_map == {3: 0, 9: 1}
    fresh(cache=False)  # cache=False on the registration: the loader runs again
    assert len(calls) == 2
    # plain functions (no cache key) are never cached
    DatasetCatalog.register(name + "_plain", lambda: [{"x": 1}], source_files=[source])
    DatasetCatalog.get(name + "_plain")
    assert {e.name for e in DiskCache().entries()} == {name}


# ---------------------------------------------------------------------------------------
# through the catalog's registration functions


def _coco_file(path: Path) -> None:
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 5, "file_name": "a.jpg", "height": 10, "width": 20}],
                "annotations": [{"id": 1, "image_id": 5, "category_id": 9, "bbox": [1, 2, 3, 4]}],
                "categories": [{"id": 9, "name": "dog"}, {"id": 2, "name": "cat"}],
            }
        )
    )


def test_register_coco_instances_uses_the_cache_and_restores_metadata(
    cache_env, tmp_path, monkeypatch
):
    import catalog.formats.coco as coco
    from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances

    json_file = tmp_path / "instances.json"
    _coco_file(json_file)
    calls = []
    original = coco.load_coco_json

    def counting(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(coco, "load_coco_json", counting)
    register_coco_instances("dc_coco", {}, json_file, "/img")
    first = DatasetCatalog.get("dc_coco").to_list()
    # a fresh registration (as in a new process) is served from the cache
    DatasetCatalog.remove("dc_coco")
    MetadataCatalog.remove("dc_coco")
    register_coco_instances("dc_coco", {}, json_file, "/img")
    second = DatasetCatalog.get("dc_coco")
    assert len(calls) == 1
    assert second.to_list() == first and first[0]["file_name"] == "/img/a.jpg"
    assert isinstance(second.owner, MappedFile)
    meta = MetadataCatalog.get("dc_coco")
    assert meta.thing_classes == ["cat", "dog"]
    assert meta.thing_dataset_id_to_contiguous_id == {2: 0, 9: 1}
    # a different image_root is a different key
    register_coco_instances("dc_coco_other_root", {}, json_file, "/other")
    assert DatasetCatalog.get("dc_coco_other_root")[0]["file_name"] == "/other/a.jpg"
    assert len(calls) == 2


def test_register_coco_instances_cache_false_writes_nothing(cache_env, tmp_path):
    from catalog import DatasetCatalog, register_coco_instances

    json_file = tmp_path / "instances.json"
    _coco_file(json_file)
    register_coco_instances("dc_coco_nocache", {}, json_file, "/img", cache=False)
    assert len(DatasetCatalog.get("dc_coco_nocache")) == 1
    assert _cache_files(cache_env) == []


def _mm_file(path: Path) -> None:
    path.write_text(
        json.dumps(
            {
                "metainfo": {"classes": ["cat"]},
                "data_list": [{"img_path": "a.jpg", "height": 4, "width": 5, "instances": []}],
            }
        )
    )


def _parse(raw: dict) -> dict:
    return {**raw, "parsed": True}


@pytest.mark.parametrize(
    ("kwargs", "cached"),
    [({}, True), ({"cache": False}, False), ({"parse_data_info": _parse}, False)],
)
def test_register_annotation_file_caching(cache_env, tmp_path, kwargs, cached):
    from catalog import DatasetCatalog, register_annotation_file

    ann_file = tmp_path / "train.json"
    _mm_file(ann_file)
    register_annotation_file("dc_mm", ann_file, **kwargs)
    records = DatasetCatalog.get("dc_mm")
    assert len(records) == 1
    assert [e.name for e in DiskCache().entries()] == (["dc_mm"] if cached else [])


#: A liveness bound, not a performance one: how long a process waits for a file another one
#: creates before it takes the test for hung (the steps take milliseconds; never asserted).
LIVENESS_SECONDS = 60.0


def _wait_for_file(path: Path, what: str) -> None:
    """Wait until ``path`` exists; a hang (``LIVENESS_SECONDS`` without it) fails the test."""
    for _ in range(int(LIVENESS_SECONDS / 0.02)):
        if path.exists():
            return
        time.sleep(0.02)
    pytest.fail(f"hung: {what} ({path.name} missing after {LIVENESS_SECONDS:.0f} s)")


def _stuck_builder_child(cache_dir: str, source: str, marks: str) -> None:
    os.environ["CATMAP_CACHE_DIR"] = cache_dir
    marks_dir = Path(marks)

    def build():
        (marks_dir / "started").touch()
        # holds the build lock until the test says so (or, as a liveness bound, until a
        # minute has passed: the other process then waited for the lock and the test fails)
        for _ in range(int(LIVENESS_SECONDS / 0.02)):
            if (marks_dir / "release").exists():
                break
            time.sleep(0.02)
        else:
            (marks_dir / "not_released").touch()
        (marks_dir / "built").touch()
        return SerializedList(json.loads(Path(source).read_text())), {"pid": os.getpid()}

    load_with_cache("toy", [source], build, loader="json-list")


def _record_lock_waits(monkeypatch, limit: float) -> list[tuple[str, float]]:
    """(lock file, timeout) of every filelock acquire in this process; a wait with no limit,
    or waits adding up to more than ``limit`` seconds, fail the test at once."""
    import filelock

    waits: list[tuple[str, float]] = []
    real_acquire = filelock.FileLock.acquire

    def acquire(self, timeout=None, *args, **kwargs):
        waits.append((os.path.basename(self.lock_file), timeout))
        if timeout is None or timeout < 0 or sum(t for _, t in waits) > limit:
            raise WorkBudgetExceeded(f"lock waits {waits} exceed the {limit} s lock timeout")
        return real_acquire(self, timeout, *args, **kwargs)

    monkeypatch.setattr(filelock.FileLock, "acquire", acquire)
    return waits


def test_a_stuck_builder_does_not_hang_the_others(cache_env, source, tmp_path, monkeypatch):
    # Was: a process waited for another one's build lock with no limit. Now it waits
    # CATMAP_CACHE_LOCK_TIMEOUT seconds, then builds without the cache and says so.
    marks = tmp_path / "marks"
    marks.mkdir()
    child = mp.get_context("fork").Process(
        target=_stuck_builder_child, args=(str(cache_env), str(source), str(marks))
    )
    child.start()
    try:
        _wait_for_file(marks / "started", "the child never started its build")
        monkeypatch.setenv("CATMAP_CACHE_LOCK_TIMEOUT", "0.5")
        waits = _record_lock_waits(monkeypatch, limit=0.5)
        builder = CountingBuilder(source)
        with pytest.warns(cache_config.CacheSkippedWarning, match="CATMAP_CACHE_LOCK_TIMEOUT"):
            records, extra = _load(source, builder)
        assert builder.calls == 1 and records.to_list() == _records(5)
        # the order of events: this process gave up and built while the other one still held
        # the lock (its build waits for "release", which comes only now) ...
        assert child.is_alive() and not (marks / "built").exists()
        # ... after asking to wait for the lock no longer than CATMAP_CACHE_LOCK_TIMEOUT in all
        build_lock = [t for name, t in waits if name.endswith(".lock") and name.startswith("toy")]
        assert build_lock and sum(build_lock) == 0.5, waits
        (marks / "release").touch()
    finally:
        (marks / "release").touch()
        child.join(LIVENESS_SECONDS)
    assert child.exitcode == 0 and not (marks / "not_released").exists()
    (entry,) = _cache_files(cache_env)  # written by the process that held the lock
    assert map_serialized(entry)[0].to_list() == _records(5)


@pytest.mark.parametrize("value", ["0", "-3", "soon", "nan", "inf"])
def test_a_bad_lock_timeout_is_a_typed_error(value, monkeypatch):
    monkeypatch.setenv("CATMAP_CACHE_LOCK_TIMEOUT", value)
    with pytest.raises(cache_config.CacheSettingError) as info:
        cache_config.lock_timeout()
    assert info.value.variable == "CATMAP_CACHE_LOCK_TIMEOUT" and info.value.value == value
