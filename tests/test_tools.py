"""Tests of the tools: the shapes dataset generator, drawing, and each tool end to end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from catalog import BoxMode
from tools.dataset_source import add_dataset_arguments
from tools.draw import (
    class_colors,
    draw_instances,
    draw_record,
    draw_sample,
    make_grid,
    sample_to_arrays,
)
from tools.shapes_dataset import (
    SHAPE_CATEGORY_IDS,
    SHAPE_CLASSES,
    default_demo_dir,
    generate_shapes_dataset,
    shape_polygon,
)

REPO = Path(__file__).resolve().parents[1]
SIZES = ((96, 64), (64, 96), (80, 80))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return generate_shapes_dataset(root, num_images=40, seed=3, image_sizes=SIZES, max_shapes=4)


def _tool_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CATMAP_CACHE_DIR=str(tmp_path / "cache"),
        CATMAP_DEMO_DIR=str(tmp_path / "demo"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
    )
    return env


def run_tool(
    script: str, *args: str, tmp_path: Path, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"tools.{Path(script).stem}", *args],
        capture_output=True,
        text=True,
        env=_tool_env(tmp_path),
        cwd=tmp_path,
        timeout=timeout,
    )


# -- shapes dataset ----------------------------------------------------------------------------


def test_generated_coco_file_is_complete_and_exact(shapes):
    coco = json.loads(shapes.json_file.read_text())
    assert [c["id"] for c in coco["categories"]] == list(SHAPE_CATEGORY_IDS)
    assert [c["name"] for c in coco["categories"]] == list(SHAPE_CLASSES)
    assert len(coco["images"]) == shapes.num_images == 40
    assert len(coco["annotations"]) == shapes.num_annotations
    sizes = {im["id"]: (im["width"], im["height"]) for im in coco["images"]}
    for im in coco["images"]:
        assert (im["width"], im["height"]) in SIZES
        with Image.open(shapes.image_root / im["file_name"]) as handle:
            assert handle.format == "JPEG"
            assert handle.size == (im["width"], im["height"])
    assert len({a["id"] for a in coco["annotations"]}) == len(coco["annotations"])
    for ann in coco["annotations"]:
        polygon = np.asarray(ann["segmentation"][0]).reshape(-1, 2)
        x, y, w, h = ann["bbox"]
        # the box is exactly the extent of the drawn polygon
        assert x == pytest.approx(polygon[:, 0].min(), abs=0.011)
        assert y == pytest.approx(polygon[:, 1].min(), abs=0.011)
        assert x + w == pytest.approx(polygon[:, 0].max(), abs=0.021)
        assert y + h == pytest.approx(polygon[:, 1].max(), abs=0.021)
        width, height = sizes[ann["image_id"]]
        assert 0 <= polygon[:, 0].min() and polygon[:, 0].max() <= width
        assert 0 <= polygon[:, 1].min() and polygon[:, 1].max() <= height
        assert 0 < ann["area"] <= w * h
        assert ann["iscrowd"] == 0 and ann["category_id"] in SHAPE_CATEGORY_IDS


def test_shapes_in_one_image_do_not_overlap(shapes):
    coco = json.loads(shapes.json_file.read_text())
    by_image: dict[int, list[list[float]]] = {}
    for ann in coco["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann["bbox"])
    for boxes in by_image.values():
        for i, (x0, y0, w0, h0) in enumerate(boxes):
            cx0, cy0 = x0 + w0 / 2, y0 + h0 / 2
            for x1, y1, w1, h1 in boxes[i + 1 :]:
                cx1, cy1 = x1 + w1 / 2, y1 + h1 / 2
                # centres are further apart than the larger half-extent: no shape hides another
                assert np.hypot(cx0 - cx1, cy0 - cy1) > max(w0, h0, w1, h1) / 2


def test_class_frequencies_are_unbalanced(tmp_path):
    ds = generate_shapes_dataset(tmp_path, num_images=150, seed=0, image_sizes=SIZES)
    coco = json.loads(ds.json_file.read_text())
    counts = np.bincount(
        [SHAPE_CATEGORY_IDS.index(a["category_id"]) for a in coco["annotations"]],
        minlength=len(SHAPE_CLASSES),
    )
    assert counts[0] > 5 * counts[-1] > 0
    assert counts[0] == counts.max()


def test_generation_is_deterministic_and_reused(tmp_path):
    a = generate_shapes_dataset(tmp_path / "a", num_images=6, seed=5, image_sizes=SIZES)
    b = generate_shapes_dataset(tmp_path / "b", num_images=6, seed=5, image_sizes=SIZES)
    assert a.generated and b.generated
    assert a.json_file.read_bytes() == b.json_file.read_bytes()
    for name in sorted(os.listdir(a.image_root)):
        assert (a.image_root / name).read_bytes() == (b.image_root / name).read_bytes()
    mtime = a.json_file.stat().st_mtime_ns
    again = generate_shapes_dataset(tmp_path / "a", num_images=6, seed=5, image_sizes=SIZES)
    assert not again.generated
    assert again == a
    assert a.json_file.stat().st_mtime_ns == mtime
    other = generate_shapes_dataset(tmp_path / "c", num_images=6, seed=6, image_sizes=SIZES)
    assert other.json_file.read_bytes() != a.json_file.read_bytes()


def test_changed_settings_or_missing_files_regenerate(tmp_path):
    generate_shapes_dataset(tmp_path, num_images=4, seed=1, image_sizes=SIZES)
    changed = generate_shapes_dataset(tmp_path, num_images=5, seed=1, image_sizes=SIZES)
    assert changed.generated and changed.num_images == 5
    (changed.image_root / "000002.jpg").unlink()
    repaired = generate_shapes_dataset(tmp_path, num_images=5, seed=1, image_sizes=SIZES)
    assert repaired.generated
    assert (repaired.image_root / "000002.jpg").is_file()
    (tmp_path / "manifest.json").write_text("{ truncated")
    assert generate_shapes_dataset(tmp_path, num_images=5, seed=1, image_sizes=SIZES).generated


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_images": 0}, "num_images"),
        ({"max_shapes": 0}, "max_shapes"),
        ({"image_sizes": [(16, 16)]}, "image_sizes"),
        ({"class_weights": [1, 2]}, "class_weights"),
        ({"class_weights": [0] * 6}, "class_weights"),
        ({"jpeg_quality": 0}, "jpeg_quality"),
    ],
)
def test_bad_generator_settings_raise(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_shapes_dataset(tmp_path, **kwargs)


def test_shape_polygon_geometry():
    square = shape_polygon("square", (50, 50), 10, 0.0)
    assert square.shape == (4, 2)
    np.testing.assert_allclose(np.hypot(*(square - 50).T), 10)
    assert shape_polygon("star", (0, 0), 10, 0.3).shape == (10, 2)
    assert shape_polygon("cross", (0, 0), 10, 0.3).shape == (12, 2)
    with pytest.raises(ValueError, match="unknown shape"):
        shape_polygon("blob", (0, 0), 1, 0)
    with pytest.raises(ValueError, match="radius"):
        shape_polygon("circle", (0, 0), 0, 0)


def test_default_demo_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CATMAP_DEMO_DIR", str(tmp_path / "x"))
    assert default_demo_dir() == tmp_path / "x"
    monkeypatch.delenv("CATMAP_DEMO_DIR")
    assert default_demo_dir() == Path.home() / ".cache" / "catmap-demo"


# -- drawing -----------------------------------------------------------------------------------


def test_draw_instances_draws_box_outline_and_fill():
    image = np.zeros((60, 80, 3), np.uint8)
    out = np.asarray(
        draw_instances(
            image,
            boxes=[[10, 10, 50, 40]],
            classes=[1],
            polygons=[[[20, 20, 40, 20, 40, 35, 20, 35]]],
            class_names=["a", "b"],
        )
    )
    color = class_colors(2)[1]
    assert tuple(out[25, 10]) == color  # left edge of the box
    assert out[28, 30].sum() > 0  # polygon interior tinted
    assert out[55, 75].sum() == 0  # far from any instance: untouched
    assert image.sum() == 0  # input not modified


def test_draw_instances_fit_scales_image_and_annotations_together():
    out = np.asarray(draw_instances(np.zeros((10, 20, 3), np.uint8), boxes=[[2, 2, 10, 8]],
                                    line_width=1, fit=(40, 40)))  # fmt: skip
    assert out.shape == (20, 40, 3)  # scaled 2x to fit 40x40, aspect kept
    color = class_colors(1)[0]
    assert tuple(out[12, 20]) == color  # right edge of the box, at 2 * 10
    assert tuple(out[4, 12]) == color  # top edge, at 2 * 2
    assert tuple(out[12, 10]) == (0, 0, 0)  # inside the box: untouched
    assert tuple(out[12, 30]) == (0, 0, 0)  # outside: untouched


def test_draw_instances_rejects_inconsistent_fields():
    image = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ValueError, match="disagree"):
        draw_instances(image, boxes=[[0, 0, 5, 5]], classes=[0, 1])
    with pytest.raises(ValueError, match="shape"):
        draw_instances(image, boxes=[[0, 0, 5]])


def test_draw_record_matches_across_box_modes(tmp_path):
    path = tmp_path / "img.png"
    Image.fromarray(np.full((40, 50, 3), 128, np.uint8)).save(path)
    xywh = {
        "file_name": str(path),
        "annotations": [{"bbox": [5, 6, 20, 10], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0}],
    }
    xyxy = {
        "file_name": str(path),
        "annotations": [{"bbox": [5, 6, 25, 16], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}],
    }
    a, b = (
        np.asarray(draw_record(xywh, class_names=["x"])),
        np.asarray(draw_record(xyxy, class_names=["x"])),
    )
    np.testing.assert_array_equal(a, b)
    assert (a != 128).any()
    with pytest.raises(FileNotFoundError):
        draw_record({"file_name": str(tmp_path / "missing.jpg"), "annotations": []})
    with pytest.raises(ValueError, match="annotation 0 of"):
        draw_record({"file_name": str(path), "annotations": [{"bbox": [1, 2], "category_id": 0}]})


def test_draw_sample_reads_chw_tensor_and_instances():
    import torch

    sample = {
        "image": torch.zeros(3, 20, 30, dtype=torch.uint8),
        "instances": {
            "gt_boxes": torch.tensor([[2.0, 2.0, 12.0, 12.0]]),
            "gt_classes": torch.tensor([0]),
            "gt_masks": [[np.array([3, 3, 10, 3, 10, 10], dtype=np.float32)]],
        },
    }
    image, boxes, classes, polygons = sample_to_arrays(sample)
    assert image.shape == (20, 30, 3)
    assert boxes.shape == (1, 4) and classes.tolist() == [0] and len(polygons) == 1
    out = draw_sample(sample, class_names=["circle"])
    assert out.size == (30, 20)
    assert np.asarray(out).sum() > 0
    with pytest.raises(KeyError, match="image"):
        sample_to_arrays({"instances": None})


def test_make_grid_layout_and_errors():
    tiles = [np.zeros((10, 20, 3), np.uint8)] * 5
    grid = make_grid(tiles, columns=2, tile_size=(40, 30), padding=2)
    assert grid.size == (2 * 40 + 3 * 2, 3 * 30 + 4 * 2)
    captioned = make_grid(tiles, columns=3, tile_size=(40, 30), captions=list("abcde"), title="t")
    assert captioned.size[1] > 2 * 30
    with pytest.raises(ValueError, match="at least one"):
        make_grid([])
    with pytest.raises(ValueError, match="captions"):
        make_grid(tiles, captions=["a"])
    with pytest.raises(ValueError, match="columns"):
        make_grid(tiles, columns=0)


# -- tools end to end --------------------------------------------------------------------------


def test_shapes_dataset_cli(tmp_path):
    proc = run_tool(
        "shapes_dataset.py", "--out", str(tmp_path / "s"), "--num-images", "5", tmp_path=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "generated 5 images" in proc.stdout
    assert (tmp_path / "s" / "annotations.json").is_file()
    again = run_tool(
        "shapes_dataset.py", "--out", str(tmp_path / "s"), "--num-images", "5", tmp_path=tmp_path
    )
    assert "reused 5 images" in again.stdout
    bad = run_tool(
        "shapes_dataset.py", "--out", str(tmp_path / "s"), "--num-images", "0", tmp_path=tmp_path
    )
    assert bad.returncode == 2 and "num_images" in bad.stderr


@pytest.fixture(scope="module")
def coco_args(shapes):
    return ["--coco-json", str(shapes.json_file), "--image-root", str(shapes.image_root)]


def test_analyze_dataset_end_to_end(tmp_path, shapes, coco_args):
    out = tmp_path / "analysis"
    proc = run_tool(
        "analyze_dataset.py", *coco_args, "--dataset", "toy", "--repeat-thresh", "0.5",
        "--out", str(out), "--json", str(out / "stats.json"), tmp_path=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    coco = json.loads(shapes.json_file.read_text())
    assert f"dataset 'toy': 40 images, {len(coco['annotations'])} instances" in proc.stdout
    for name in SHAPE_CLASSES:
        assert name in proc.stdout
    stats = json.loads((out / "stats.json").read_text())
    expected = np.bincount(
        [SHAPE_CATEGORY_IDS.index(a["category_id"]) for a in coco["annotations"]], minlength=6
    )
    assert [c["instances"] for c in stats["classes"]] == expected.tolist()
    for c in stats["classes"]:
        f = c["image_fraction"]
        assert c["repeat_factor"] == pytest.approx(max(1.0, np.sqrt(0.5 / f)) if f else 1.0)
    assert stats["image_repeat_factors"]["max"] == pytest.approx(
        max(c["repeat_factor"] for c in stats["classes"] if c["images"])
    )
    assert sum(s["count"] for s in stats["image_sizes"]["common"]) == 40
    with Image.open(out / "toy_stats.png") as png:
        assert png.size[0] > 400
    assert f"wrote {out / 'toy_stats.png'}" in proc.stdout


def test_analyze_dataset_class_factors_match_the_sampler_with_crowd():
    # a class seen only in crowd annotations still raises its images' factors in the sampler
    from catalog import DatasetCatalog, MetadataCatalog
    from tools.analyze_dataset import compute_stats

    anno = [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": 0, "iscrowd": 0}]
    crowd = [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": 1, "iscrowd": 1}]
    records = [{"file_name": f"{i}.jpg", "height": 4, "width": 4, "image_id": i,
                "annotations": anno + (crowd if i == 0 else [])} for i in range(4)]  # fmt: skip
    DatasetCatalog.register("crowd_toy", lambda: records)
    MetadataCatalog.get("crowd_toy").set(thing_classes=["a", "b"])
    try:
        stats = compute_stats("crowd_toy", 0.5)
    finally:
        DatasetCatalog.remove("crowd_toy")
        MetadataCatalog.remove("crowd_toy")
    assert stats.image_repeat_factors.max() == pytest.approx(np.sqrt(2.0), rel=1e-6)
    assert stats.class_repeat_factors.max() == pytest.approx(stats.image_repeat_factors.max())
    summary = stats.to_json()["classes"][1]
    assert summary["image_fraction"] == 0.25 and summary["instances"] == 0


@pytest.fixture
def isolated_catalog(monkeypatch, tmp_path):
    """Run a tool's main() in this process with its own demo dir (conftest.py isolates the
    on-disk cache and restores the catalogs after each test)."""
    monkeypatch.setenv("CATMAP_DEMO_DIR", str(tmp_path / "demo"))


def _exit_message(capsys, main, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err


def test_analyze_dataset_reports_bad_options(isolated_catalog, capsys, coco_args):
    from tools.analyze_dataset import main

    assert "--repeat-thresh" in _exit_message(capsys, main, *coco_args, "--repeat-thresh", "0")
    assert "'nope' is not registered" in _exit_message(capsys, main, "--dataset", "nope")
    assert "--image-root" in _exit_message(capsys, main, "--coco-json", coco_args[1])
    assert "no such file" in _exit_message(
        capsys, main, "--coco-json", "/nonexistent.json", "--image-root", "."
    )
    assert "only used together" in _exit_message(capsys, main, "--image-root", coco_args[3])
    assert "no_such_module_xyz" in _exit_message(capsys, main, "--import", "no_such_module_xyz")


def test_browse_dataset_raw_records(tmp_path, coco_args):
    out = tmp_path / "browse"
    proc = run_tool("browse_dataset.py", *coco_args, "--max", "3", "--start", "2", "--grid",
                    "--out", str(out), tmp_path=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["000002_000002.png", "000003_000003.png", "000004_000004.png", "grid.png"]
    assert "4 PNG file(s) written" in proc.stdout
    with Image.open(out / "000002_000002.png") as png:
        assert png.size in SIZES


def test_browse_dataset_reports_bad_options(isolated_catalog, capsys, coco_args, tmp_path):
    from tools.browse_dataset import main

    assert "out of range" in _exit_message(
        capsys, main, *coco_args, "--start", "99", "--out", str(tmp_path)
    )
    assert "--max must be at least 1" in _exit_message(
        capsys, main, *coco_args, "--max", "0", "--out", str(tmp_path)
    )
    assert "MODULE:FUNC" in _exit_message(capsys, main, *coco_args, "--mapper-factory", "nocolon")
    assert "no_such_mod" in _exit_message(
        capsys, main, *coco_args, "--mapper-factory", "no_such_mod:f"
    )


def test_benchmark_loader_end_to_end(tmp_path, coco_args):
    out = tmp_path / "bench.json"
    proc = run_tool(
        "benchmark_loader.py", *coco_args, "--dataset", "toy", "--max-workers", "0",
        "--batches", "2", "--warmup", "1", "--batch-size", "2", "--replicate", "3",
        "--json", str(out), tmp_path=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [(r["workers"], r["impl"]) for r in results] == [(0, "baseline"), (0, "catmap")]
    for r in results:
        assert r["records"] == 40 * 3 and r["repeats"] == 1
        assert r["samples"] == 2 * 2
        assert r["samples_per_s"] > 0 and r["cpu_ms_per_sample"] >= 0  # 10 ms clock ticks
        assert r["processes"] == 1 and r["pss_workers"] == 0
        assert r["pss_total"] == pytest.approx(r["pss_main"]) and r["pss_main"] > 0
    table = proc.stdout[proc.stdout.index("workers    loader") :].splitlines()
    assert "x baseline" in table[0]
    catmap_row = next(line for line in table if "catmap" in line).split()
    ratio = results[1]["samples_per_s"] / results[0]["samples_per_s"]
    assert float(catmap_row[3]) == pytest.approx(ratio, abs=0.006)


@pytest.mark.distributed  # forks DataLoader worker processes
@pytest.mark.parametrize("impl", ["baseline", "catmap"])
def test_benchmark_config_with_a_worker(isolated_catalog, coco_args, impl):
    from tools.benchmark_loader import run_config
    from tools.dataset_source import resolve_dataset

    parser = argparse.ArgumentParser()
    add_dataset_arguments(parser)
    name = resolve_dataset(parser.parse_args([*coco_args, "--dataset", f"bench_{impl}"]))
    result = run_config(impl, name, workers=1, batches=2, warmup=1, batch_size=2, replicate=2,
                        seed=0, short_edge=64, max_size=128)  # fmt: skip
    assert result["records"] == 80 and result["samples"] == 4
    assert result["processes"] == 2  # main + 1 worker, measured while the worker is alive
    assert len(result["pss_each"]) == 2 and sum(result["pss_each"]) == pytest.approx(result["pss_total"], abs=0.2)
    assert result["pss_workers"] > 0 and result["pss_total"] > result["pss_main"]
    assert result["cpu_ms_per_sample"] >= 0


def test_benchmark_loader_rejects_bad_options(isolated_catalog, capsys, coco_args):
    from tools.benchmark_loader import main

    assert "--batches must be at least 1" in _exit_message(
        capsys, main, *coco_args, "--batches", "0"
    )
    assert "--max-workers" in _exit_message(capsys, main, *coco_args, "--max-workers", "-1")


def test_benchmark_helpers():
    from tools.benchmark_loader import CollectOnceMapper, ListDataset, measure_memory

    records = [{"x": [1, 2]}]
    dataset = ListDataset(records, lambda r: r["x"].append(3) or r)
    assert dataset[0] == {"x": [1, 2, 3]}
    assert records == [{"x": [1, 2]}]  # the baseline deep-copies before mapping
    calls = []
    mapper = CollectOnceMapper(lambda r: calls.append(r) or r)
    assert mapper(1) == 1 and mapper(2) == 2 and calls == [1, 2]
    import time

    from tools.benchmark_loader import cpu_seconds

    before = cpu_seconds()[os.getpid()]
    deadline = time.process_time() + 0.15
    while time.process_time() < deadline:
        sum(range(1000))  # burn CPU
    assert cpu_seconds()[os.getpid()] >= before + 0.1
    memory = measure_memory()
    assert memory["processes"] >= 1 and memory["pss_main"] > 0 and memory["uss_total"] > 0
    assert memory["pss_each"][0] == pytest.approx(memory["pss_main"], abs=0.1)


def test_tools_use_datasets_registered_by_an_imported_module(isolated_catalog, capsys, tmp_path, monkeypatch, shapes):
    module = tmp_path / "my_datasets_for_tools.py"
    module.write_text(
        "from catalog import register_coco_instances\n"
        f"register_coco_instances('my_shapes', {{}}, {str(shapes.json_file)!r}, {str(shapes.image_root)!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from tools.analyze_dataset import main

    assert main(["--import", "my_datasets_for_tools", "--dataset", "my_shapes", "--no-plot"]) == 0
    assert "dataset 'my_shapes': 40 images" in capsys.readouterr().out


def test_register_shapes_dataset_is_idempotent_for_the_same_files(shapes, tmp_path):
    from catalog import DatasetAlreadyRegisteredError, DatasetCatalog, MetadataCatalog
    from tools.shapes_dataset import register_shapes_dataset

    assert register_shapes_dataset("shapes_reg", shapes) == "shapes_reg"
    assert register_shapes_dataset("shapes_reg", shapes) == "shapes_reg"
    records = DatasetCatalog.get("shapes_reg")
    assert len(records) == 40
    assert MetadataCatalog.get("shapes_reg").thing_classes == list(SHAPE_CLASSES)
    first = records[0]["annotations"][0]
    assert first["bbox_mode"] == BoxMode.XYWH_ABS and 0 <= first["category_id"] < len(SHAPE_CLASSES)
    other = generate_shapes_dataset(tmp_path / "other", num_images=2, image_sizes=SIZES)
    with pytest.raises(DatasetAlreadyRegisteredError, match="shapes_reg"):
        register_shapes_dataset("shapes_reg", other)
