"""Write a registered dataset as WebDataset tar shards, or verify shards (``catmap-shards``).

Usage:
    catmap-shards write NAME OUT_DIR [--shard-size 1000] [--workers 8]
    catmap-shards write coco_val /data/coco-val-shards --coco-json ann.json --image-root images/
    catmap-shards write my_set OUT_DIR --import my_project.datasets   # module registers my_set
    catmap-shards verify DIR_OR_URL                                   # a directory or s3://...

``write`` is resumable: run it again after an interrupt and finished shards are kept.
``verify`` checks every shard's SHA-256, every member against the index, every image's SHA-256
and JSON record, and decodes every image; the exit status is 1 with the first problem (shard
and key) on stderr. ``s3://`` URLs use ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and ``AWS_DEFAULT_REGION``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from catalog import verify_shards, write_shards
from catalog._common import CatmapError
from mappers.image_io import decode_image
from ._bench_common import HelpFormatter
from .dataset_source import DatasetSourceError, resolve_dataset

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catmap-shards", description=__doc__,
                                     formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write a registered dataset as shards",
                                formatter_class=HelpFormatter)
    write.add_argument("name", help="registered dataset name")
    write.add_argument("out_dir", type=Path, help="directory for the shards and the index")
    write.add_argument("--shard-size", type=int, default=1000, help="samples per shard")
    write.add_argument("--workers", type=int, default=None,
                       help="shards written at once (default: min(8, CPUs))")
    write.add_argument("--prefix", default="shard", help="shard file name prefix")
    write.add_argument("--import", dest="imports", action="append", default=[],
                       metavar="MODULE", help="import MODULE first (it registers NAME)")
    write.add_argument("--coco-json", type=Path, default=None,
                       help="register NAME from this COCO instances file first")
    write.add_argument("--image-root", type=Path, default=None, help="images of --coco-json")
    write.add_argument("--no-progress", action="store_true", help="no progress bar")
    verify = commands.add_parser("verify", help="check every shard, sample and hash",
                                 formatter_class=HelpFormatter)
    verify.add_argument("url", help="shard directory or s3://bucket/prefix")
    verify.add_argument("--no-decode", action="store_true", help="check hashes only")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit status (0 ok, 1 a problem, 2 bad options)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "write":
            args.dataset, args.data_dir, args.num_images = args.name, None, 300
            name = resolve_dataset(args)
            index = write_shards(name, args.out_dir, shard_size=args.shard_size,
                                 prefix=args.prefix, workers=args.workers,
                                 progress=not args.no_progress)
            print(f"wrote {index}")
        else:
            decode = None if args.no_decode else (
                lambda data, source: decode_image(data, "RGB", source=source))
            print(json.dumps(verify_shards(args.url, decode)))
    except (CatmapError, DatasetSourceError, OSError, ValueError) as exc:
        print(f"catmap-shards {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
