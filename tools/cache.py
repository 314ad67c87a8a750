"""List and clear catmap's on-disk cache of serialized datasets.

Usage:
    python -m tools.cache list                    # every entry: dataset, records, size, state
    python -m tools.cache clear                   # delete every entry
    python -m tools.cache clear --stale           # only entries that can no longer be used
    python -m tools.cache clear --name coco_train # only one dataset's entries
    python -m tools.cache --dir /scratch/catmap list

The directory is ``$CATMAP_CACHE_DIR`` (default ``~/.cache/catmap``) unless ``--dir`` is given.
An entry is *stale* when a source file changed or vanished, it was written by another catmap
version, or its header is unreadable; stale entries are never served.

The tool follows the cache's rules: it reads only entry headers (data-only), opens them
without following symlinks or blocking on FIFOs, lists an odd or planted file with the reason
instead of stopping, and refuses a directory that another user owns or that group or others
can write (exit status 1, with the reason). The shared team cache mode is removed.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys

from catalog._common import CacheError
from catalog.storage.cache import CacheEntry, DiskCache
from ._bench_common import HelpFormatter

__all__ = ["format_entries", "main"]


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"


def _state(entry: CacheEntry) -> str:
    if not entry.valid:
        return "invalid"
    return "stale" if entry.stale else "ok"


def format_entries(entries: list[CacheEntry]) -> str:
    """A table of cache entries, one line each, with a total.

    Example:
        >>> from pathlib import Path
        >>> print(format_entries([CacheEntry(Path("/c/x.catmap"), 2048, "x", 3, valid=True)]))
        state     records       size  created           dataset / file
        ok              3    2.0 KiB  -                 x  /c/x.catmap
        1 entries, 2.0 KiB
    """
    lines = [f"{'state':<8} {'records':>8} {'size':>10}  {'created':<16}  dataset / file"]
    for e in entries:
        created = (
            datetime.datetime.fromtimestamp(e.created).strftime("%Y-%m-%d %H:%M")
            if e.created
            else "-"
        )
        records = str(e.num_records) if e.num_records is not None else "?"
        label = e.name if e.name is not None else "?"
        line = f"{_state(e):<8} {records:>8} {_size(e.size):>10}  {created:<16}  {label}  {e.path}"
        if e.error:
            line += f"  ({e.error})"
        lines.append(line)
    total = sum(e.size for e in entries)
    lines.append(f"{len(entries)} entries, {_size(total)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--dir", help="cache directory (default: $CATMAP_CACHE_DIR or ~/.cache/catmap)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the entries")
    clear = sub.add_parser("clear", help="delete entries")
    clear.add_argument("--stale", action="store_true", help="only stale or invalid entries")
    clear.add_argument("--name", help="only the entries of this dataset")
    args = parser.parse_args(argv)

    try:
        cache = DiskCache(args.dir)
        if args.command == "list":
            entries = cache.entries()
            print(f"cache directory: {cache.directory}")
            print(format_entries(entries))
            return 0
        removed = cache.clear(name=args.name, stale_only=args.stale)
    except CacheError as exc:
        print(f"cache not used: {exc}", file=sys.stderr)
        return 1
    for path in removed:
        print(f"removed {path}")
    print(f"removed {len(removed)} files from {cache.directory}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
