"""The helpers the mappers now share instead of repeating (issue 15): structure indexing and
``cat`` checks, polygon clipping, interpolation names, the instance options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mappers import transforms as T
from mappers.compose import AnnotationsToInstances
from mappers.instances import Instances
from mappers.structure_common import (
    check_cat_parts,
    clip_points,
    clip_polygon,
    polygon_area,
    select_rows,
)
from mappers.structures import (
    BitMasks,
    Boxes,
    Keypoints,
    PolygonMasks,
    ROIMasks,
    RotatedBoxes,
    StructureIndexError,
    StructureShapeError,
)
from mappers.annotations import annotations_to_training_instances
from mappers.transforms.resample import normalize_interp


@pytest.mark.parametrize(
    "make",
    [
        lambda: Boxes(torch.arange(12.0).view(3, 4)),
        lambda: RotatedBoxes(torch.arange(15.0).view(3, 5)),
        lambda: BitMasks(torch.rand(3, 4, 5) > 0.5),
        lambda: Keypoints(torch.rand(3, 2, 3)),
        lambda: ROIMasks(torch.rand(3, 6, 6)),
    ],
    ids=["Boxes", "RotatedBoxes", "BitMasks", "Keypoints", "ROIMasks"],
)
def test_tensor_structures_select_rows_alike(make):
    structure = make()
    one = structure[1]
    assert type(one) is type(structure) and len(one) == 1
    assert torch.equal(one.tensor[0], structure.tensor[1])
    assert torch.equal(structure[np.array([2, 0])].tensor, structure.tensor[[2, 0]])
    assert len(structure[torch.tensor([True, False, True])]) == 2
    with pytest.raises(StructureIndexError):
        structure[3]
    with pytest.raises(StructureIndexError):
        structure[[0.5]]


def test_select_rows_keeps_the_leading_dim_and_device():
    rows = select_rows(torch.zeros(4, 2, 2), -1, "X")
    assert rows.shape == (1, 2, 2)


@pytest.mark.parametrize("cls", [Boxes, BitMasks, Keypoints, PolygonMasks])
def test_cat_refuses_the_same_things_for_every_structure(cls):
    with pytest.raises(StructureShapeError, match=rf"{cls.__name__}\.cat needs a list"):
        cls.cat("not a list")
    with pytest.raises(StructureShapeError, match=r"element 1 is a int"):
        cls.cat([_one(cls), 3])


def _one(cls):
    return {
        Boxes: Boxes([[0, 0, 1, 1]]),
        BitMasks: BitMasks(torch.zeros(1, 2, 2)),
        Keypoints: Keypoints(torch.zeros(1, 2, 3)),
        PolygonMasks: PolygonMasks([[[0, 0, 1, 0, 1, 1]]]),
    }[cls]


def test_check_cat_parts_empty_lists():
    assert check_cat_parts([], Boxes) == []
    with pytest.raises(StructureShapeError, match="non-empty"):
        check_cat_parts([], Boxes, allow_empty=False)
    assert len(Boxes.cat([])) == 0
    with pytest.raises(StructureShapeError, match="non-empty"):
        Keypoints.cat([])


def test_instances_index_errors_come_from_the_shared_normalization():
    inst = Instances((4, 4), score=torch.arange(3.0))
    assert len(inst[np.int64(1)]) == 1
    with pytest.raises(IndexError, match="Instances index 5 out of range"):
        inst[5]
    with pytest.raises(TypeError, match="single bool"):
        inst[np.bool_(True)]


def test_clip_points_matches_clip_polygon_and_crop():
    rng = np.random.default_rng(15)
    for _ in range(50):
        polygon = rng.uniform(-5, 15, size=10)
        flat = clip_polygon(polygon, 0, 0, 10, 8)
        points = clip_points(polygon.reshape(-1, 2), 0, 0, 10, 8)
        assert np.array_equal(flat, points.reshape(-1))
        cropped = T.CropTransform(0, 0, 10, 8).apply_polygons([polygon.reshape(-1, 2)])
        if cropped:
            assert np.allclose(polygon_area(cropped[0].reshape(-1)), polygon_area(flat))
    square = np.array([[1.0, 1], [2, 1], [2, 2], [1, 2]])
    assert clip_points(square, 0, 0, 5, 5) is square


def test_interpolation_names_pillow_and_opencv():
    assert normalize_interp(1) == "lanczos" and normalize_interp(1, opencv=True) == "bilinear"
    assert normalize_interp("cubic", opencv=True) == normalize_interp("cubic")
    with pytest.raises(ValueError, match="OpenCV flag"):
        normalize_interp(9, opencv=True)
    with pytest.raises(ValueError, match="unknown interpolation"):
        T.RotationTransform(4, 4, 30, interp=9)


def test_instance_options_are_checked_in_one_place():
    annos = [{"bbox": [0, 0, 4, 4], "bbox_mode": 0, "category_id": 1}]
    with pytest.raises(ValueError, match="AnnotationsToInstances: instance_mask_format"):
        AnnotationsToInstances(instance_mask_format="rle")
    with pytest.raises(ValueError, match="annotations_to_training_instances: recompute_boxes"):
        annotations_to_training_instances(annos, T.NoOpTransform(), (8, 8), recompute_boxes=True)
    with pytest.raises(TypeError):
        AnnotationsToInstances(use_masks=True)
    inst = annotations_to_training_instances(
        annos, T.HFlipTransform(8), (8, 8), use_instance_mask=False
    )
    assert inst.gt_boxes.tensor.tolist() == [[4.0, 0.0, 8.0, 4.0]]
