"""Local check: Megatron Energon prepares and reads catmap's shards (issue 24; not run in CI).

Writes a small generated shapes dataset as catmap shards (``catalog.write_shards``), runs
Energon's own dataset preparation on the directory without prompts (``energon prepare
--non-interactive``, as a subprocess: the CLI a user types), then reads every sample back with
Energon's loader (``get_val_dataset`` + ``get_loader``, a ``CrudeWebdataset`` with a cooker) and
checks, per sample key, against catmap:

* the raw image bytes Energon hands out have the SHA-256 of the sidecar index and of the
  source JPEG;
* the image Energon decodes (its default ``torchrgb`` decoder) equals, pixel for pixel,
  ``mappers.read_image`` of the registered shard sample;
* the JSON part Energon decodes equals catmap's record (the source record, and the record that
  ``register_shards`` serves apart from its rewritten ``file_name``).

Energon lives in its own virtual environment so the project's environment is not touched;
catmap itself needs only ``msgspec`` there besides what Energon brings (numpy, pyyaml, pillow,
filelock)::

    python -m venv /tmp/venergon
    /tmp/venergon/bin/pip install torch==2.13.0
    /tmp/venergon/bin/pip install megatron-energon msgspec attrs
    PYTHONPATH=$PWD /tmp/venergon/bin/python -m tools.check_energon --out /tmp/energon-check

It prints one line per check and exits 1 on the first mismatch. The prepare command it runs is
``energon prepare OUT/shards --non-interactive --force-overwrite --split-ratio 1,0,0
--sample-type CrudeWebdataset --num-workers 1 --no-progress``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from catalog import DatasetCatalog, register_coco_instances, register_shards, verify_shards
from catalog import write_shards
from catalog.shards import load_shard_index
from mappers import read_image
from tools.shapes_dataset import generate_shapes_dataset


def _fail(message: str) -> None:
    print(f"MISMATCH: {message}")
    sys.exit(1)


def _energon_samples(shards: Path, raw: bool) -> dict[str, dict[str, Any]]:
    """Every sample of split ``train`` read through Energon's loader, by catmap key."""
    from megatron.energon import (Cooker, DefaultTaskEncoder, Sample, WorkerConfig,
                                  basic_sample_keys, get_loader, get_val_dataset, stateless)

    @dataclasses.dataclass
    class CatmapSample(Sample):
        parts: dict

    @stateless
    def cook(crude: dict) -> CatmapSample:
        parts = {k: v for k, v in crude.items() if not k.startswith("__")}
        return CatmapSample(**basic_sample_keys(crude), parts=parts)

    class Encoder(DefaultTaskEncoder):
        cookers = [Cooker(cook)]

        def batch(self, samples: list) -> list:  # keep samples as they are: no collation
            return samples

    encoder = Encoder()
    if raw:
        encoder.decoder = None  # the bytes exactly as stored in the tar
    dataset = get_val_dataset(str(shards), split_part="train", batch_size=1, task_encoder=encoder,
                              worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))
    out: dict[str, dict[str, Any]] = {}
    for batch in get_loader(dataset):
        for sample in batch:
            key = sample.__key__.rsplit("/", 1)[-1]
            if key in out:
                _fail(f"Energon returned key {key} twice")
            out[key] = sample.parts
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/energon-check"),
                        help="work directory (dataset, shards, Energon's .nv-meta)")
    parser.add_argument("--num-images", type=int, default=20, help="generated images")
    parser.add_argument("--shard-size", type=int, default=8, help="samples per shard")
    args = parser.parse_args(argv)
    shapes = generate_shapes_dataset(args.out / "shapes", num_images=args.num_images)
    register_coco_instances("energon_src", {}, shapes.json_file, shapes.image_root)
    source = DatasetCatalog.get("energon_src")
    shards = args.out / "shards"
    shutil.rmtree(shards, ignore_errors=True)
    write_shards("energon_src", shards, shard_size=args.shard_size, workers=1)
    energon = Path(sys.executable).with_name("energon")
    command = [str(energon), "prepare", str(shards), "--non-interactive", "--force-overwrite",
               "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset",
               "--num-workers", "1", "--no-progress"]
    print("$", " ".join(command))
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode:
        _fail(f"energon prepare exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    print("energon prepare: ok; wrote .nv-meta/", sorted(os.listdir(shards / ".nv-meta")),
          "and", sorted(p.name for p in shards.glob("*.tar.idx")))
    verify_shards(shards)  # Energon's .nv-meta/ beside the shards does not disturb catmap
    print("catmap verify_shards after energon prepare: ok")

    index = load_shard_index(shards)
    register_shards("energon_shards", shards)
    served = DatasetCatalog.get("energon_shards")
    raw, decoded = _energon_samples(shards, raw=True), _energon_samples(shards, raw=False)
    keys = [f"{i:09d}" for i in range(len(source))]
    if list(raw) != keys:
        _fail(f"Energon's order {list(raw)[:4]}... is not catmap's sample order")
    if sorted(raw) != keys or sorted(decoded) != keys:
        _fail(f"Energon keys {sorted(raw)[:3]}... ({len(raw)}) != catmap's {keys[:3]}... "
              f"({len(keys)})")
    print(f"keys: Energon read {len(raw)} samples from {len(index.shards)} shards, catmap's keys "
          "in catmap's order")
    for i, key in enumerate(keys):
        ext = index.ext(i)
        if set(raw[key]) != {ext, "json"}:
            _fail(f"{key}: Energon parts {sorted(raw[key])}, catmap wrote {ext} + json")
        data = raw[key][ext]
        sha = hashlib.sha256(data).digest()
        if sha != bytes(index.columns["sha256"][i]):
            _fail(f"{key}: image SHA-256 differs from the sidecar index")
        if sha != hashlib.sha256(Path(source[i]["file_name"]).read_bytes()).digest():
            _fail(f"{key}: image bytes differ from the source file")
        image = decoded[key][ext]  # CHW float in [0, 1] (Energon's default "torchrgb")
        ours = read_image(served[i]["file_name"], format="RGB")
        theirs = (image.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        if theirs.shape != ours.shape or not np.array_equal(theirs, ours):
            _fail(f"{key}: decoded image {tuple(theirs.shape)} differs from catmap's "
                  f"{ours.shape}")
        record = decoded[key]["json"]
        if record != source[i]:
            _fail(f"{key}: JSON record differs from catmap's source record")
        if {k: v for k, v in record.items() if k != "file_name"} != {
                k: v for k, v in served[i].items() if k != "file_name"}:
            _fail(f"{key}: JSON record differs from the record register_shards serves")
    print(f"images: {len(keys)} raw SHA-256 match index and source; decoded pixels equal "
          "mappers.read_image")
    print(f"records: {len(keys)} JSON parts equal catmap's records")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
