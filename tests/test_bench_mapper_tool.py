"""tools/bench_mapper.py and tools/bench_photos.py: the images and the size matching."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tools.bench_mapper import (
    _time_pass,
    bare_pipeline,
    mapper_pipeline,
    pillow_pipeline,
    planned_sizes,
)
from tools.bench_photos import HEIGHT, WIDTH, make_records


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("bench_synthetic"), 3, source="synthetic")


def test_photo_mosaics_are_photo_sized_jpegs(tmp_path):
    pytest.importorskip("skimage")
    records = make_records(tmp_path, 3, seed=5, source="photos")
    for record in records:
        size = os.path.getsize(record["file_name"])
        assert 50 * 1024 < size < 200 * 1024, size
        assert (record["height"], record["width"]) == (HEIGHT, WIDTH)
        assert len(record["annotations"]) == 7
    with pytest.raises(ValueError, match="source"):
        make_records(tmp_path, 1, source="flat")


def test_bare_and_pillow_resize_to_the_sizes_the_mapper_draws(synthetic):
    mapper = mapper_pipeline(short_edges=(64, 96, 128))
    sizes = planned_sizes(mapper, synthetic)
    assert planned_sizes(mapper, synthetic) == sizes  # every seeded pass draws the same
    bare = bare_pipeline("pillow", sizes)
    pillow = pillow_pipeline(sizes)
    for index, record in enumerate(synthetic):
        assert bare(index, record).shape == (*sizes[index], 3)
        assert tuple(pillow(index, record).shape) == (3, *sizes[index])
        assert min(sizes[index]) in (64, 96, 128)
    assert _time_pass(bare, synthetic) > 0


def test_records_are_deterministic(tmp_path, synthetic):
    again = make_records(tmp_path, 3, source="synthetic")
    for a, b in zip(again, synthetic, strict=True):
        assert a["annotations"] == b["annotations"]
        with open(a["file_name"], "rb") as fa, open(b["file_name"], "rb") as fb:
            assert fa.read() == fb.read()
    assert np.isfinite([a["bbox"] for a in again[0]["annotations"]]).all()


def test_stage_table_puts_each_mapper_stage_beside_the_bare_operation(synthetic):
    from tools.bench_mapper import stage_table

    table = stage_table(synthetic, rounds=1, image_format="BGR", backend="opencv",
                        edges=(64, 96))
    assert list(table)[:2] == ["read file", "decode"]
    assert table["whole mapper call"][0] > 0 and table["whole mapper call"][1] > 0
    assert table["decode"][1] > 0 and table["resize"][1] > 0  # bare figures measured
