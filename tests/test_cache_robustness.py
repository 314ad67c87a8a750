"""Issue 10: stale keys, one builder per key, no home directory, entries replaced while mapped,
the key file."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pwd
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import catalog.storage.cache as cache_config
from catalog import SerializedList
from catalog.storage.cache import (
    CacheKey,
    CacheSkippedWarning,
    DiskCache,
    load_with_cache,
    source_stamp,
)
from catalog.storage.records_file import MappedFile

OLD_FINGERPRINT_LIMIT = 64 * 2**20  # the old code hashed only the ends of larger files


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(directory))
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    monkeypatch.setattr(cache_config, "_WARNED", set())
    return directory


def _big_file(path: Path) -> int:
    """A sparse file just over the old 64 MiB limit with one byte in the middle."""
    size = OLD_FINGERPRINT_LIMIT + 2**20 + 17
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(size // 2)
        f.write(b"A")
    return size


class MiddleByteLoader:
    """Records made from the middle byte of the file; counts its runs."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.size, self.calls = path, size, 0

    def __call__(self) -> tuple[list[dict], dict]:
        self.calls += 1
        with open(self.path, "rb") as f:
            f.seek(self.size // 2)
            return [{"middle": f.read(1).decode()}], {}


def test_large_file_edited_in_the_middle_with_size_and_mtime_kept_is_not_served_stale(
    env, tmp_path
):
    source = tmp_path / "big.json"
    size = _big_file(source)
    loader = MiddleByteLoader(source, size)
    first, _ = load_with_cache("big", [source], loader, loader="middle")
    before = source.stat()
    with open(source, "r+b") as f:
        f.seek(size // 2)
        f.write(b"B")
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert source.stat().st_size == before.st_size
    second, _ = load_with_cache("big", [source], loader, loader="middle")
    assert first[0] == {"middle": "A"} and second[0] == {"middle": "B"} and loader.calls == 2


def test_content_digest_covers_the_whole_file_whatever_its_size(tmp_path):
    source = tmp_path / "big.bin"
    size = _big_file(source)
    stamp = source_stamp(source)
    with open(source, "r+b") as f:
        f.seek(size // 2)
        f.write(b"B")
    assert source_stamp(source)[4] != stamp[4]  # the digest alone tells the edit
    assert stamp[1] == source_stamp(source)[1] == size


def test_ctime_is_part_of_the_key(env, tmp_path):
    source = tmp_path / "a.json"
    source.write_text("[]")
    key = CacheKey.build("a", [source], loader="x")
    os.chmod(source, 0o600)  # changes only the ctime
    assert CacheKey.build("a", [source], loader="x") != key


class Blocked(Exception):  # noqa: N818 - not an OSError, so no code path swallows it
    """Raised by the alarm: the test blocked."""


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail (instead of hanging) when the test blocks for more than 10 seconds."""

    def timeout(signum, frame):
        raise Blocked("blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_fifo_source_is_not_read_and_not_cached(env, tmp_path, alarm):
    fifo = tmp_path / "ann.json"
    os.mkfifo(fifo)
    records, _ = load_with_cache("f", [fifo], lambda: ([{"a": 1}], {}), loader="x")
    assert records.to_list() == [{"a": 1}] and not list(env.glob("*.catmap"))


def _builder_process(args: tuple[str, str, str]) -> list[dict]:
    cache_dir, source, runs = args
    os.environ["CATMAP_CACHE_DIR"] = cache_dir

    def build():
        with open(runs, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough for every process to reach the lock
        return json.loads(Path(source).read_text()), {}

    records, _ = load_with_cache("locked", [source], build, loader="json-list")
    return [records.to_list(), type(records.owner).__name__]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_one_process_builds_while_the_others_wait(env, tmp_path, method):
    source = tmp_path / "ann.json"
    source.write_text(json.dumps([{"i": i} for i in range(7)]))
    runs = tmp_path / "runs.txt"
    args = (str(env), str(source), str(runs))
    n = 3 if method == "fork" else 2
    with mp.get_context(method).Pool(n) as pool:
        results = pool.map(_builder_process, [args] * n)
    assert len(runs.read_text().splitlines()) == 1  # the loader ran once
    assert results == [[[{"i": i} for i in range(7)], "MappedFile"]] * n


def _no_password_entry(uid: int):
    raise KeyError(f"getpwuid(): uid not found: {uid}")


@pytest.mark.parametrize("how", ["unset", "file", "readonly", "procfs"])
def test_no_usable_home_loads_without_the_cache_with_one_warning(tmp_path, monkeypatch, how):
    monkeypatch.setattr(cache_config, "_WARNED", set())
    for name in ("CATMAP_CACHE_DIR", "XDG_CONFIG_HOME", "CATMAP_CACHE"):
        monkeypatch.delenv(name, raising=False)
    if how == "unset":
        monkeypatch.delenv("HOME", raising=False)
        monkeypatch.setattr(pwd, "getpwuid", _no_password_entry)
    elif how == "file":  # HOME is not a directory
        home = tmp_path / "home"
        home.write_text("")
        monkeypatch.setenv("HOME", str(home))
    elif how == "procfs":  # nobody, root included, can create directories in /proc
        monkeypatch.setenv("HOME", "/proc")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories (the procfs case covers it)")
        home = tmp_path / "home"
        home.mkdir(mode=0o500)
        monkeypatch.setenv("HOME", str(home))
    source = tmp_path / "a.json"
    source.write_text(json.dumps([{"a": 1}]))
    calls = []

    def build():
        calls.append(1)
        return json.loads(source.read_text()), {}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            records, _ = load_with_cache("nohome", [source], build, loader="json-list")
    assert records.to_list() == [{"a": 1}] and len(calls) == 3
    skipped = [w for w in caught if issubclass(w.category, CacheSkippedWarning)]
    assert len(skipped) == 1, [str(w.message) for w in caught]


def _read_all_after_the_entry_is_gone(records: SerializedList, directory: str) -> None:
    cache = DiskCache(directory)
    key = CacheKey.build("toy", [os.environ["SOURCE"]], loader="json-list")
    cache.store(key, SerializedList([{"other": 1}] * 3))  # a writer renames a new file over it
    assert [r["i"] for r in records] == list(range(1000))
    cache.clear()  # unlink, as `tools/cache.py clear` and stale removal do
    assert not cache.path_of(key).exists()
    assert [r["i"] for r in records] == list(range(1000))


def test_entry_replaced_or_removed_while_mapped_stays_readable(env, tmp_path, monkeypatch):
    source = tmp_path / "ann.json"
    source.write_text(json.dumps([{"i": i, "pad": "x" * 100} for i in range(1000)]))
    monkeypatch.setenv("SOURCE", str(source))
    build = lambda: (json.loads(source.read_text()), {})  # noqa: E731
    load_with_cache("toy", [source], build, loader="json-list")
    records, _ = load_with_cache("toy", [source], build, loader="json-list")
    assert isinstance(records.owner, MappedFile)
    # in a child, so that a SIGBUS would show as its exit status instead of killing pytest
    child = mp.get_context("fork").Process(
        target=_read_all_after_the_entry_is_gone, args=(records, str(env))
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    load_with_cache("toy", [source], build, loader="json-list")  # the entry exists again
    _read_all_after_the_entry_is_gone(records, str(env))
