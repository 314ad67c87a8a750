"""Command-line options shared by the tools to name the dataset they work on.

A tool accepts one of:

* ``--dataset NAME``: a name registered in ``catalog.DatasetCatalog``. Registration happens in
  Python, so ``--import MODULE`` (repeatable) imports modules that register datasets first.
  The name ``shapes_demo`` is built in: the demo's synthetic shapes dataset, generated on first
  use under ``--data-dir`` (default ``$CATMAP_DEMO_DIR/shapes`` or ``~/.cache/catmap-demo/shapes``).
* ``--coco-json FILE --image-root DIR``: a COCO instances file, registered on the fly.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_dataset_arguments(parser)
    >>> parser.parse_args(["--dataset", "shapes_demo"]).dataset
    'shapes_demo'
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .shapes_dataset import (
    default_demo_dir,
    generate_shapes_dataset,
    register_shapes_dataset,
)

__all__ = ["DEMO_DATASET_NAME", "DatasetSourceError", "add_dataset_arguments", "resolve_dataset"]

#: The built-in dataset name: the demo's generated shapes dataset.
DEMO_DATASET_NAME = "shapes_demo"


class DatasetSourceError(ValueError):
    """The command line does not name a usable dataset (the message says what is wrong)."""


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--dataset``, ``--import``, ``--coco-json``, ``--image-root``, ``--data-dir``,
    ``--num-images`` to ``parser``."""
    group = parser.add_argument_group("dataset")
    group.add_argument(
        "--dataset",
        default=None,
        help=f"registered dataset name (default {DEMO_DATASET_NAME!r}: the generated demo dataset)",
    )
    group.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers datasets); repeatable",
    )
    group.add_argument("--coco-json", type=Path, default=None, help="a COCO instances json file")
    group.add_argument("--image-root", type=Path, default=None, help="image directory for --coco-json")
    group.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the demo dataset is generated / reused (default: the demo cache dir)",
    )
    group.add_argument("--num-images", type=int, default=300, help="images in the demo dataset")


def resolve_dataset(args: argparse.Namespace) -> str:
    """Register what the options name (when needed) and return the dataset name to use.

    Raises:
        DatasetSourceError: conflicting or incomplete options, a missing file, or a module
            that cannot be imported.
    """
    from catalog import DatasetCatalog

    if args.imports and os.getcwd() not in sys.path and "" not in sys.path:
        # As `python -m` does: modules of the directory the tool is run from are importable
        # without PYTHONPATH (a script run by path only has its own directory on sys.path).
        sys.path.insert(0, os.getcwd())
    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise DatasetSourceError(f"--import {module}: cannot import it ({exc})") from exc
    if args.coco_json is not None:
        if args.image_root is None:
            raise DatasetSourceError("--coco-json needs --image-root (the directory of its images)")
        if not args.coco_json.is_file():
            raise DatasetSourceError(f"--coco-json {args.coco_json}: no such file")
        if not args.image_root.is_dir():
            raise DatasetSourceError(f"--image-root {args.image_root}: no such directory")
        from catalog import MetadataCatalog, register_coco_instances

        name = args.dataset or f"coco:{args.coco_json.stem}"
        if name in DatasetCatalog:  # registered by an earlier call in this process
            known = MetadataCatalog.get(name).get("json_file")
            if known is not None and Path(known).resolve() == args.coco_json.resolve():
                return name
            raise DatasetSourceError(
                f"dataset name {name!r} is already registered for {known}; pass --dataset NEW_NAME"
            )
        register_coco_instances(name, {}, str(args.coco_json), str(args.image_root))
        return name
    if args.image_root is not None:
        raise DatasetSourceError("--image-root is only used together with --coco-json")
    name = args.dataset or DEMO_DATASET_NAME
    if name == DEMO_DATASET_NAME and name not in DatasetCatalog:
        root = args.data_dir or default_demo_dir() / "shapes"
        try:
            shapes = generate_shapes_dataset(root, num_images=args.num_images, progress=True)
        except ValueError as exc:
            raise DatasetSourceError(f"demo dataset: {exc}") from exc
        register_shapes_dataset(name, shapes)
        return name
    if name not in DatasetCatalog:
        registered = ", ".join(DatasetCatalog.list()) or "none"
        raise DatasetSourceError(
            f"dataset {name!r} is not registered (registered: {registered}); use --import MODULE "
            f"to run the module that registers it, or --coco-json/--image-root"
        )
    return name
