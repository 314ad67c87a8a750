"""The per-sample work budget (``ImageLimits``): dense mask memory, polygon vertices and total
polygon edge length are refused with a typed error before any allocation or rasterization,
and the defaults never trip on real datasets (the shared samples, COCO-, LVIS-, Cityscapes-
and Objects365-sized images)."""

from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import asdict

import numpy as np
import pytest
import torch

from catalog import BoxMode, load_annotation_file, load_coco_json
from catalog._common import RecordFormatError
from mappers import DatasetMapper, Instances, annotations_to_instances
from mappers import image_io
from mappers.errors import ImageLimitsError, ImageTooLargeError, SampleBudgetError
from mappers.geometry_checks import check_mask_budget, polygons_to_bitmask
from mappers.image_io import ImageLimits, get_image_limits, read_image, set_image_limits
from mappers.torchvision_targets import to_torchvision_detection
from tests.image_bytes import png_bytes
from tests.memory_cap import run_capped

EXTERNAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "external")
if not os.path.isdir(EXTERNAL):
    EXTERNAL = "/work/shared/external"


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch):
    monkeypatch.setattr(image_io, "_configured", None)
    monkeypatch.setenv(image_io._LIMITS_ENV, "")  # restored after the test's set_image_limits


def _zigzag(height: int, width: int, vertices: int) -> list[float]:
    """One polygon inside the image whose edges run corner to corner: a huge edge length."""
    xy = np.zeros((vertices, 2))
    xy[1::2] = (width - 1, height - 1)
    xy[2::4, 0] = 0.5  # not all vertices identical
    return xy.reshape(-1).tolist()


def _anno(segmentation, **extra) -> dict:
    return {"bbox": [1.0, 1.0, 5.0, 5.0], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0,
            "segmentation": segmentation, **extra}


def _child(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child with 3 GiB of address space to spare (a crash fails, not kills)."""
    return run_capped(code)


def test_edge_length_bomb_is_refused_before_pycocotools():
    """One polygon inside a 2048^2 image with 30,000 corner-to-corner edges (a 263 KB file's
    worth): pycocotools would allocate ~6.5 GB and crash; here a typed error comes first,
    on every path that rasterizes, in a process capped at 3 GiB."""
    result = _child("""
        from catalog import BoxMode
        from mappers import annotations_to_instances
        from mappers.errors import SampleBudgetError
        from mappers.geometry_checks import polygons_to_bitmask
        from tests.test_sample_budget import _zigzag
        poly = _zigzag(2048, 2048, 30000)
        anno = {"bbox": [0, 0, 9, 9], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0,
                "segmentation": [poly], "id": 77}
        for run in (lambda: annotations_to_instances([anno], (2048, 2048), "bitmask",
                                                     context="file 'bomb.jpg'"),
                    lambda: polygons_to_bitmask([poly], 2048, 2048, context="bomb")):
            try:
                run()
            except SampleBudgetError as exc:
                print(exc.budget, exc.cost > exc.limit, str(exc))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(" True " in line for line in lines), lines
    assert lines[0].startswith("max_polygon_edge_length True file 'bomb.jpg'")
    assert lines[1].startswith("max_polygon_edge_length True bomb")


def _tiny_instances(count: int) -> list[dict]:
    return [_anno([[x, 1.0, x + 2.0, 1.0, x + 2.0, 3.0]], id=i)
            for i, x in enumerate(np.linspace(0, 2000, count).tolist())]


def test_many_tiny_instances_are_refused_before_allocating_masks():
    """4,000 valid 4-pixel instances on one 2048^2 image would take 16 GiB of bitmasks: in a
    child capped at 3 GiB, a typed error comes before any allocation."""
    result = _child("""
        import pickle
        from mappers import annotations_to_instances
        from mappers.errors import SampleBudgetError
        from tests.test_sample_budget import _tiny_instances
        try:
            annotations_to_instances(_tiny_instances(4000), (2048, 2048), "bitmask",
                                     context="file 'a.jpg'")
        except SampleBudgetError as exc:
            back = pickle.loads(pickle.dumps(exc))
            print(type(back).__name__, back.budget, back.cost, back.limit, str(back))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    name, budget, cost, limit, message = result.stdout.split(" ", 4)
    assert (name, budget, int(cost), int(limit)) == (
        "SampleBudgetError", "max_mask_bytes", 4000 * 2048 * 2048, 1 << 30)
    assert message.startswith("file 'a.jpg', image: 4000 masks x 2048 x 2048 bytes")
    assert issubclass(SampleBudgetError, RecordFormatError)  # skip_bad_annotations skips it
    # polygons are not dense: the same sample is fine as PolygonMasks
    annos = _tiny_instances(4000)
    assert len(annotations_to_instances(annos, (2048, 2048), "polygon").gt_masks) == 4000


def test_budget_is_configurable_and_one_value():
    annos = [_anno([[0.0, 0.0, 9.0, 0.0, 9.0, 9.0]]) for _ in range(3)]
    assert annotations_to_instances(annos, (10, 10), "bitmask").gt_masks.tensor.shape[0] == 3
    set_image_limits(max_mask_bytes=299)
    with pytest.raises(SampleBudgetError, match="max_mask_bytes=299"):
        annotations_to_instances(annos, (10, 10), "bitmask")
    set_image_limits(max_mask_bytes=None, max_polygon_vertices=8)
    with pytest.raises(SampleBudgetError, match="polygon vertices = 9"):
        annotations_to_instances(annos, (10, 10), "bitmask")
    set_image_limits(max_polygon_vertices=None, max_polygon_edge_length=26)
    with pytest.raises(SampleBudgetError, match="edge length = 27"):
        check_mask_budget(annos, 10, 10, "image")
    with pytest.raises(ValueError):
        ImageLimits(max_mask_bytes=0)
    assert get_image_limits().max_pixels == ImageLimits().max_pixels  # one value holds all


def test_skip_bad_annotations_skips_an_over_budget_sample(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes(np.zeros((64, 64, 3), np.uint8)))
    record = {"file_name": str(tmp_path / "a.png"), "height": 64, "width": 64, "image_id": 1,
              "annotations": [_anno([[2.0, 2.0, 30.0, 2.0, 30.0, 30.0]])] * 2}
    mapper = DatasetMapper(True, augmentations=[], use_instance_mask=True,
                           instance_mask_format="bitmask", skip_bad_annotations=True)
    assert mapper(dict(record))["instances"].gt_masks.tensor.shape == (2, 64, 64)
    set_image_limits(max_mask_bytes=64 * 64)
    assert mapper(dict(record, annotations=[dict(a) for a in record["annotations"]])) is None
    strict = DatasetMapper(True, augmentations=[], use_instance_mask=True,
                           instance_mask_format="bitmask")
    with pytest.raises(SampleBudgetError, match="a.png"):
        strict(dict(record, annotations=[dict(a) for a in record["annotations"]]))


def _real_files() -> list[str]:
    names = glob.glob(os.path.join(EXTERNAL, "coco", "**", "*.json"), recursive=True)
    names += glob.glob(os.path.join(EXTERNAL, "lvis", "*.json"))
    return sorted(names + [os.path.join(EXTERNAL, "mmengine", "annotations",
                                        "dummy_annotation.json")])


def test_defaults_never_trip_on_the_shared_real_samples():
    """Every loadable COCO / LVIS / OpenMMLab file of the shared samples: each record's masks
    as bitmasks under the default budget (the largest: 306 instances on 1360 x 1530)."""
    files = _real_files()
    if not files:
        pytest.skip("the shared samples are not here")
    checked = 0
    for name in files:
        try:
            if "mmengine" in name:
                records = load_annotation_file(name)[1]
            else:
                records = load_coco_json(name, os.path.dirname(name))
        except Exception:  # results files, deliberately broken ones: not datasets
            continue
        for record in records:
            annos = [a for a in record["annotations"] if not a.get("iscrowd")]
            with_masks = [a for a in annos if "segmentation" in a]
            # the budget of the dense masks this sample would need, polygons as polygons
            check_mask_budget(annos, record["height"], record["width"], name)
            if with_masks and len(with_masks) == len(annos):
                annotations_to_instances(annos, (record["height"], record["width"]), "bitmask")
            checked += 1
    assert checked > 150


@pytest.mark.parametrize("size, instances", [
    ((480, 640), 93),  # COCO: the most instances of one image
    ((800, 1333), 700),  # LVIS after the usual resize, several hundred instances
    ((1024, 2048), 100),  # Cityscapes, full resolution
    ((1365, 2048), 300),  # Objects365-sized, many objects
])
def test_defaults_never_trip_on_dataset_sized_samples(size, instances):
    """Traced outlines (a vertex every ~2 px of a lobed blob's boundary, 1 px jitter), up to a
    quarter of the shorter side in radius."""
    height, width = size
    rng = np.random.default_rng(0)
    annos = []
    for i in range(instances):
        radius = rng.uniform(10, min(height, width) / 4)
        cx, cy = rng.uniform(radius, width - radius), rng.uniform(radius, height - radius)
        angles = np.linspace(0, 2 * np.pi, int(np.pi * radius), endpoint=False)
        wobble = radius * (1 + 0.1 * np.sin(5 * angles)) + rng.uniform(-1, 1, angles.size)
        poly = np.stack([cx + wobble * np.cos(angles), cy + wobble * np.sin(angles)], 1)
        annos.append(_anno([np.clip(poly, 0, [width, height]).reshape(-1).tolist()]))
    check_mask_budget(annos, height, width, "image")
    if instances * height * width <= 300 << 20:  # rasterize the smaller ones for real
        masks = annotations_to_instances(annos, size, "bitmask").gt_masks.tensor
        assert masks.shape == (instances, height, width) and bool(masks.any(dim=(1, 2)).all())


def test_polygons_to_bitmask_still_rasterizes_valid_polygons():
    mask = polygons_to_bitmask([[0.0, 0.0, 9.0, 0.0, 9.0, 9.0, 0.0, 9.0]], 10, 10)
    assert mask.sum() >= 64


def test_list_and_array_polygons_cost_the_same():
    """A polygon as read from a file (list) and as transformed (flat array) cost the same."""
    poly = [1.0, 1.0, 8.0, 1.0, 8.0, 8.0]
    flat = np.asarray(poly)
    for segm in ([poly], [flat]):
        check_mask_budget([_anno(segm)], 10, 10, "image")
    set_image_limits(max_polygon_edge_length=20)
    for segm in ([poly], [flat]):
        with pytest.raises(SampleBudgetError, match="= 21"):
            check_mask_budget([_anno(segm)], 10, 10, "image")


def test_torchvision_polygon_masks_are_budgeted_before_allocation():
    square = [np.array([1.0, 1.0, 5.0, 1.0, 5.0, 6.0, 1.0, 6.0])]
    sample = {"file_name": "tv.jpg", "image": torch.zeros(3, 8, 10, dtype=torch.uint8),
              "instances": Instances((8, 10), gt_boxes=torch.tensor([[1.0, 1.0, 5.0, 6.0]] * 3),
                                     gt_classes=torch.tensor([0, 0, 0]),
                                     gt_masks=[square] * 3)}
    set_image_limits(max_mask_bytes=3 * 8 * 10)
    assert to_torchvision_detection(sample, label_offset=1)[1]["masks"].shape == (3, 8, 10)
    set_image_limits(max_mask_bytes=3 * 8 * 10 - 1)
    with pytest.raises(SampleBudgetError, match="image 'tv.jpg': 3 masks x 8 x 10") as info:
        to_torchvision_detection(sample, label_offset=1)
    assert (info.value.budget, info.value.cost) == ("max_mask_bytes", 240)
    set_image_limits(max_mask_bytes=None, max_polygon_vertices=11)  # 3 x 4 vertices
    with pytest.raises(SampleBudgetError, match="polygon vertices = 12"):
        to_torchvision_detection(sample, label_offset=1)


class _LimitsInWorker(torch.utils.data.Dataset):
    """Reports the worker's limits and what reading ``path`` gives there."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> tuple[dict, str]:
        try:
            outcome = str(read_image(self.path).shape)
        except ImageTooLargeError as exc:
            outcome = f"ImageTooLargeError: {exc}"
        return asdict(get_image_limits()), outcome


def test_limits_reach_spawned_dataloader_workers(tmp_path):
    """A spawned worker imports catmap afresh: the limits set in the parent still hold there."""
    (tmp_path / "big.png").write_bytes(png_bytes(np.zeros((40, 50, 3), np.uint8)))
    dataset = _LimitsInWorker(str(tmp_path / "big.png"))
    limits = set_image_limits(max_pixels=40 * 50 - 1, remote_roots=("s3://bucket/",),
                              max_mask_bytes=None)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn")
    seen, outcome = next(iter(loader))
    assert seen == {**asdict(limits), "remote_roots": ["s3://bucket/"]}  # (a list: default_convert)
    assert outcome.startswith("ImageTooLargeError") and "big.png" in outcome
    assert dataset[0][1] == outcome  # as in this process


@pytest.mark.parametrize("text, match", [
    ("{", "not JSON"), ("[" * 100_000, "not JSON"), ("[1]", "expected an object"),
    ('{"max_pixelz": 5}', "max_pixelz"), ('{"max_pixels": 0}', "max_pixels must be >= 1"),
    ('{"max_bytes": 1.5}', "max_bytes must be"), ('{"max_bytes": true}', "max_bytes must be"),
    ('{"remote_roots": "s3://b/"}', "remote_roots"), ('{"remote_roots": 5}', "remote_roots"), ('{"remote_timeout_s": Infinity}', "timeout"),
    ('{"remote_timeout_s": NaN}', "timeout"),
])
def test_bad_limits_environment_is_a_typed_error(text, match):
    with pytest.raises(ImageLimitsError, match=match) as info:
        image_io._limits_from_env(text)
    assert "$CATMAP_IMAGE_LIMITS" in str(info.value)


def test_limits_environment_round_trips():
    assert image_io._limits_from_env("") is None
    limits = set_image_limits(max_decode_work=None, remote_roots=("s3://a/",))
    assert image_io._limits_from_env(os.environ[image_io._LIMITS_ENV]) == limits


def test_rle_masks_are_refused_before_decoding():
    """The mask budget holds where transforms decode RLE masks (before pycocotools runs),
    not only later when the masks are stacked."""
    from pycocotools import mask as mask_util

    from mappers.annotations import transform_annotations

    rle = mask_util.encode(np.asfortranarray(np.ones((10, 10), np.uint8)))
    annos = [_anno(dict(rle), id=i) for i in range(3)]
    assert len(transform_annotations([dict(a) for a in annos], [], (10, 10))) == 3
    set_image_limits(max_mask_bytes=299)
    with pytest.raises(SampleBudgetError, match="file 'a.jpg': 3 masks x 10 x 10 bytes"):
        transform_annotations([dict(a) for a in annos], [], (10, 10), context="file 'a.jpg'")
