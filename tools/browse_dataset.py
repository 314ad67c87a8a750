"""Write PNGs of dataset records with their annotations drawn, raw or after a mapper.

Examples::

    python -m tools.browse_dataset                                   # demo shapes, raw, 16 images
    python -m tools.browse_dataset --mapper train --max 8 --grid     # after ResizeShortestEdge + RandomFlip
    python -m tools.browse_dataset --coco-json ann.json --image-root images/ --out /tmp/browse
    python -m tools.browse_dataset --import my_project.datasets --dataset my_train \\
        --mapper-factory my_project.data:make_train_mapper

Mappers:

* ``raw`` (default): the record as loaded, boxes in any absolute ``BoxMode`` and polygons;
* ``resize``: ``DatasetMapper`` with ``ResizeShortestEdge`` only;
* ``train``: ``DatasetMapper`` with ``ResizeShortestEdge`` and ``RandomFlip``;
* ``--mapper-factory MODULE:FUNC``: ``FUNC()`` returns any mapper whose output has ``image``
  (CHW) and ``instances`` like ``DatasetMapper``'s.

Random augmentations draw from a generator seeded from (``--seed``, record index), so the same
command writes the same pictures.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from catalog._common import numpy_generator
from ._bench_common import HelpFormatter
from .dataset_source import DatasetSourceError, add_dataset_arguments, resolve_dataset
from .draw import draw_record, draw_sample, make_grid
from .shapes_dataset import default_demo_dir

__all__ = ["BrowseError", "browse", "build_mapper", "main"]

MAPPERS = ("raw", "resize", "train")


class BrowseError(ValueError):
    """A browse option cannot be used (bad mapper factory, empty selection)."""


def build_mapper(
    kind: str, *, short_edge: int = 256, max_size: int = 640, factory: str | None = None
) -> Callable[[dict], Any] | None:
    """Return the mapper for ``kind`` (None for ``raw``), or the one ``factory`` builds.

    Raises:
        BrowseError: an unknown kind, or a factory that is not ``MODULE:FUNC`` or fails to load.

    Example:
        >>> build_mapper("raw") is None
        True
    """
    if factory is not None:
        module_name, sep, attr = factory.partition(":")
        if not sep or not module_name or not attr:
            raise BrowseError(f"--mapper-factory must look like MODULE:FUNC, got {factory!r}")
        try:
            func = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise BrowseError(f"--mapper-factory {factory}: {exc}") from exc
        return func()
    if kind == "raw":
        return None
    if kind not in MAPPERS:
        raise BrowseError(f"unknown mapper {kind!r}; choose one of {', '.join(MAPPERS)}")
    from mappers import DatasetMapper
    from mappers.transforms import RandomFlip, ResizeShortestEdge

    augmentations = [ResizeShortestEdge(short_edge, max_size=max_size)]
    if kind == "train":
        augmentations.append(RandomFlip(prob=0.5, horizontal=True))
    return DatasetMapper(is_train=True, augmentations=augmentations, use_instance_mask=True)


def _safe_stem(record: dict, index: int) -> str:
    stem = Path(str(record.get("file_name", f"record{index}"))).stem
    return f"{index:06d}_" + re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:60]


def browse(
    name: str,
    out_dir: Path,
    *,
    mapper: Callable[[dict], Any] | None = None,
    max_images: int = 16,
    start: int = 0,
    seed: int = 0,
    grid: bool = False,
) -> list[Path]:
    """Draw records ``start .. start + max_images - 1`` of dataset ``name`` into ``out_dir``.

    Args:
        name: a registered dataset name.
        out_dir: output directory (created).
        mapper: applied to each record first (None: draw the raw record). A mapper that
            returns None for a record (a skipped sample) is reported and nothing is drawn.
        max_images: most records drawn (at least 1).
        start: first record index.
        seed: seed of the augmentation generator (per record: (seed, index)).
        grid: also write ``grid.png`` with all drawn images.

    Returns:
        The PNG paths written, grid last.

    Raises:
        BrowseError: ``max_images`` < 1 or ``start`` out of range.

    Example:
        >>> browse("shapes_demo", Path("/tmp/browse"), max_images=4)   # doctest: +SKIP
    """
    from catalog import DatasetCatalog, MetadataCatalog

    records = DatasetCatalog.get(name)
    if max_images < 1:
        raise BrowseError(f"--max must be at least 1, got {max_images}")
    if not 0 <= start < len(records):
        raise BrowseError(f"--start {start} is out of range: dataset {name!r} has {len(records)} records")
    class_names = MetadataCatalog.get(name).get("thing_classes")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    pictures = []
    for index in range(start, min(start + max_images, len(records))):
        record = records[index]
        if mapper is None:
            picture = draw_record(record, class_names=class_names)
        else:
            from mappers.random_state import use_generator

            with use_generator(numpy_generator(seed, index)):
                sample = mapper(record)
            if sample is None:
                print(f"record {index} ({record.get('file_name')}): the mapper returned None, skipped")
                continue
            picture = draw_sample(sample, class_names=class_names)
        path = out_dir / f"{_safe_stem(record, index)}.png"
        picture.save(path)
        written.append(path)
        pictures.append(picture)
        print(f"wrote {path}  ({picture.width}x{picture.height}, {len(record.get('annotations', []))} annotations)")
    if grid and pictures:
        grid_path = out_dir / "grid.png"
        make_grid(pictures, columns=4, tile_size=(320, 320),
                  captions=[p.stem for p in written], title=f"{name}: {len(pictures)} records").save(grid_path)  # fmt: skip
        written.append(grid_path)
        print(f"wrote {grid_path}")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, description="Draw dataset records with their annotations."
    )
    add_dataset_arguments(parser)
    parser.add_argument("--mapper", choices=MAPPERS, default="raw", help="raw records or after a mapper")
    parser.add_argument("--mapper-factory", default=None, metavar="MODULE:FUNC",
                        help="a function returning the mapper to apply (overrides --mapper)")  # fmt: skip
    parser.add_argument("--short-edge", type=int, default=256, help="ResizeShortestEdge length")
    parser.add_argument("--max-size", type=int, default=640, help="ResizeShortestEdge max size")
    parser.add_argument("--max", dest="max_images", type=int, default=16, help="records to draw")
    parser.add_argument("--start", type=int, default=0, help="first record index")
    parser.add_argument("--seed", type=int, default=0, help="augmentation seed")
    parser.add_argument("--grid", action="store_true", help="also write grid.png")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: <demo dir>/browse)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        name = resolve_dataset(args)
        mapper = build_mapper(args.mapper, short_edge=args.short_edge, max_size=args.max_size,
                              factory=args.mapper_factory)  # fmt: skip
        written = browse(name, args.out or default_demo_dir() / "browse", mapper=mapper,
                         max_images=args.max_images, start=args.start, seed=args.seed,
                         grid=args.grid)  # fmt: skip
    except (DatasetSourceError, BrowseError) as exc:
        parser.error(str(exc))
    print(f"{len(written)} PNG file(s) written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
