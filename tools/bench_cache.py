"""What a cache hit costs: the entry's checksum and the source file's content digest.

Usage:
    python -m tools.bench_cache                 # a ~300 MB entry and a 300 MB source file
    python -m tools.bench_cache --mb 100 --repeat 5 --json cache.json

Prints, best of ``--repeat`` runs (files in the page cache):

- ``store``: writing the entry (data-only records, CRC-32 computed while writing);
- ``hit``: ``DiskCache.load``: open, header, CRC-32 of the whole entry, map;
- ``crc32_entry`` / ``blake2b_entry``: the CRC-32 alone, and a blake2b digest for
  comparison, each on a fresh mapping of the entry;
- ``digest_*``: a streaming hash of the source file in 4 MiB chunks (zlib.crc32, which the
  key uses, blake2b, sha256), and ``key_build``: ``CacheKey.build`` on it.
"""

from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from catalog import SerializedList
from catalog.storage.cache import CacheKey, DiskCache
from tools._bench_common import HelpFormatter, add_json_argument, write_json_results

__all__ = ["main"]

_CHUNK = 4 * 2**20


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _stream(path: Path, update: Callable[[memoryview], object]) -> None:
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            update(view[:n])


def _on_fresh_map(path: Path, fn: Callable[[memoryview], object]) -> None:
    """``fn`` over a new read-only mapping of ``path`` (page faults included, as on a hit)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            fn(view)
        finally:
            view.release()


def _crc_file(path: Path) -> int:
    crc = 0

    def update(chunk: memoryview) -> None:
        nonlocal crc
        crc = zlib.crc32(chunk, crc)

    _stream(path, update)
    return crc


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="entry and source size in MB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.mb < 1 or args.repeat < 1:
        parser.error("--mb and --repeat must be at least 1")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="catmap-bench-cache-") as tmp:
        root = Path(tmp)
        source = root / "source.bin"
        block = os.urandom(2**20)
        with open(source, "wb") as f:
            for _ in range(args.mb):
                f.write(block)
        record_bytes = 10_000
        records = SerializedList(
            [{"i": i, "blob": block[:record_bytes]} for i in range(args.mb * 100)], name="bench"
        )
        key = CacheKey.build("bench", [source], loader="bench")
        cache = DiskCache(root / "cache")
        start = time.perf_counter()
        cache.store(key, records)
        results["store"] = time.perf_counter() - start
        del records
        entry = cache.path_of(key)
        results["entry_mb"] = entry.stat().st_size / 1e6
        results["hit"] = _best(lambda: cache.load(key), args.repeat)
        results["crc32_entry"] = _best(
            lambda: _on_fresh_map(entry, lambda v: zlib.crc32(v[28:])), args.repeat
        )
        results["blake2b_entry"] = _best(
            lambda: _on_fresh_map(entry, lambda v: hashlib.blake2b(v[28:]).digest()), args.repeat
        )
        results["source_mb"] = source.stat().st_size / 1e6
        results["digest_crc32"] = _best(lambda: _crc_file(source), args.repeat)
        for name in ("blake2b", "sha256"):
            results[f"digest_{name}"] = _best(
                lambda n=name: _stream(source, hashlib.new(n).update), args.repeat
            )
        results["key_build"] = _best(
            lambda: CacheKey.build("bench", [source], loader="bench"), args.repeat
        )
    for name, value in results.items():
        unit = "MB" if name.endswith("_mb") else "s"
        print(f"{name:<16} {value:8.3f} {unit}")
    write_json_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
