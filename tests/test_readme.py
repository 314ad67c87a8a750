"""Every Python block of the README runs as written.

Blocks are tagged ``<!-- readme-example: NAME -->``. The blocks of the integrations are executed
by the integration's own test module, which holds the very same text (checked here); the others
run here, in README order, on a generated shapes dataset.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest
import torch

from tools.shapes_dataset import generate_shapes_dataset

README = Path(__file__).resolve().parents[1] / "README.md"
TAGGED = re.compile(r"<!-- readme-example: ([\w-]+) -->\s*```python\n(.*?)```", re.S)

#: README block -> (test module, constant holding the same text) that executes it.
RUN_ELSEWHERE = {
    "detectron2": ("tests.test_detectron2_compat", "README_EXAMPLE"),
    "torchvision": ("tests.test_torchvision_targets", "README_TORCHVISION_SNIPPET"),
    "lightning": ("tests.test_lightning", "README_LIGHTNING_SNIPPET"),
    "torchdata-stateful": ("tests.test_torchdata_resume", "README_STATEFUL_SNIPPET"),
    "hydra": ("tests.test_configs_omegaconf", "README_HYDRA_SNIPPET"),
}
#: Blocks run here, in this order, sharing one namespace (later blocks use earlier names).
RUN_HERE = ["catalog", "builtin", "mappers", "coco-eval"]


def _blocks() -> dict[str, str]:
    return dict(TAGGED.findall(README.read_text(encoding="utf-8")))


def test_every_python_block_is_tagged_and_run():
    text = README.read_text(encoding="utf-8")
    assert text.count("```python") == len(TAGGED.findall(text))
    assert set(_blocks()) == set(RUN_ELSEWHERE) | set(RUN_HERE) | {"training-script"}


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 450


@pytest.mark.parametrize("tag", sorted(RUN_ELSEWHERE))
def test_integration_blocks_are_the_tested_snippets(tag):
    import importlib

    module_name, constant = RUN_ELSEWHERE[tag]
    try:
        module = importlib.import_module(module_name)
    except pytest.skip.Exception:  # the module skips itself (its library is not usable here)
        module = None
    if module is None:
        source = (Path(__file__).parent / (module_name.split(".")[-1] + ".py")).read_text()
        assert _blocks()[tag].strip() in source
        return
    assert _blocks()[tag].strip() == getattr(module, constant).strip()


def _openmmlab_copy(coco_file: Path, out: Path) -> None:
    """Write the shapes COCO file as an OpenMMLab 2.0 (mmdet-style) file."""
    coco = json.loads(coco_file.read_text())
    classes = [c["name"] for c in sorted(coco["categories"], key=lambda c: c["id"])]
    label = {c["id"]: classes.index(c["name"]) for c in coco["categories"]}
    entries = {im["id"]: {"img_path": im["file_name"], "img_id": im["id"],
                          "height": im["height"], "width": im["width"], "instances": []}
               for im in coco["images"]}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        entries[ann["image_id"]]["instances"].append({
            "bbox": [x, y, x + w, y + h], "bbox_label": label[ann["category_id"]],
            "ignore_flag": ann["iscrowd"], "mask": ann["segmentation"]})
    out.write_text(json.dumps({"metainfo": {"classes": classes},
                               "data_list": list(entries.values())}))


def _coco_classes_copy(coco_file: Path, out: Path) -> None:
    """Write the shapes COCO file with COCO's own 80 categories (as a builtin COCO split has)."""
    from catalog.formats.builtin import get_builtin_metadata

    meta = get_builtin_metadata("coco")
    id_map = meta["thing_dataset_id_to_contiguous_id"]
    coco = json.loads(coco_file.read_text())
    coco["categories"] = [{"id": dataset_id, "name": meta["thing_classes"][contiguous]}
                          for dataset_id, contiguous in id_map.items()]
    ids = sorted(id_map)
    for ann in coco["annotations"]:
        ann["category_id"] = ids[ann["category_id"] % len(ids)]
    out.write_text(json.dumps(coco))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed  # starts DataLoader worker processes
def test_training_script_example_runs_and_resumes(tmp_path):
    shapes = generate_shapes_dataset(tmp_path / "shapes", num_images=24, seed=3)
    namespace = {
        "json_file": str(shapes.json_file),
        "image_root": str(shapes.image_root),
        "checkpoint": str(tmp_path / "ckpt.pth"),
        "__name__": "readme_example",
    }
    exec(compile(_blocks()["training-script"], "README.md", "exec"), namespace)

    assert namespace["step"] == 9
    assert len(namespace["classes"]) == len(shapes.class_names)
    expected = next(iter(namespace["loader"]))  # what the first loader produces next
    resumed = namespace["next_batch"]
    assert [s["image_id"] for s in resumed] == [s["image_id"] for s in expected]
    for got, want in zip(resumed, expected, strict=True):
        assert torch.equal(got["image"], want["image"])
        assert torch.equal(got["instances"].gt_boxes.tensor, want["instances"].gt_boxes.tensor)


@pytest.mark.distributed  # a one-process gloo group
def test_catalog_mapper_sampler_and_evaluation_blocks_run(tmp_path, monkeypatch):
    shapes = generate_shapes_dataset(tmp_path / "shapes", num_images=12, seed=4)
    mm_root = tmp_path / "mm"
    (mm_root).mkdir()
    os.symlink(shapes.image_root, mm_root / "images")
    _openmmlab_copy(shapes.json_file, mm_root / "train.json")
    datasets_root = tmp_path / "datasets"
    (datasets_root / "coco" / "annotations").mkdir(parents=True)
    _coco_classes_copy(shapes.json_file,
                       datasets_root / "coco" / "annotations" / "instances_val2017.json")
    os.symlink(shapes.image_root, datasets_root / "coco" / "val2017")
    monkeypatch.setenv("CATMAP_DATASETS", str(datasets_root))
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
                       "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    namespace = {
        "json_file": str(shapes.json_file),
        "image_root": str(shapes.image_root),
        "mm_file": "train.json",
        "mm_root": str(mm_root),
        "datasets_root": str(datasets_root),
        "__name__": "readme_example",
    }
    blocks = _blocks()
    for tag in RUN_HERE:
        exec(compile(blocks[tag], f"README.md[{tag}]", "exec"), namespace)

    assert len(namespace["flip_map"]) == 8 and len(namespace["train"]) > 12
    assert namespace["boxes"].tensor.shape[1] == 4
    assert namespace["lsj_sample"]["image"].shape[1:] == (256, 256)
    assert namespace["metrics"]["bbox"]["AP"] == 100.0
