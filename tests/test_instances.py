"""Tests for mappers.instances.Instances."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mappers.instances import Instances


def _make(n: int = 4) -> Instances:
    inst = Instances((30, 40))
    inst.gt_boxes = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4)
    inst.gt_classes = torch.arange(n)
    inst.gt_masks = [[np.full(6, float(i))] for i in range(n)]
    inst.scores = np.linspace(0, 1, n)
    return inst


def test_fields_set_get_has_remove():
    inst = Instances((30, 40), gt_classes=torch.tensor([1, 2]))
    assert inst.image_size == (30, 40)
    assert inst.has("gt_classes") and not inst.has("gt_boxes")
    inst.set("gt_boxes", torch.zeros(2, 4))
    assert inst.get("gt_boxes").shape == (2, 4)
    assert inst.gt_boxes is inst.get("gt_boxes")
    assert list(inst.get_fields()) == ["gt_classes", "gt_boxes"]
    inst.remove("gt_boxes")
    assert not inst.has("gt_boxes")
    del inst.gt_classes
    assert len(inst) == 0
    with pytest.raises(KeyError, match="gt_boxes"):
        inst.get("gt_boxes")
    with pytest.raises(KeyError, match="gt_boxes"):
        inst.remove("gt_boxes")
    with pytest.raises(AttributeError, match="no field 'gt_boxes'"):
        inst.gt_boxes  # noqa: B018


def test_length_mismatch_names_field():
    inst = Instances((3, 3), gt_classes=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"'gt_boxes' has length 3.*length 2"):
        inst.gt_boxes = torch.zeros(3, 4)
    with pytest.raises(TypeError, match="'score'"):
        inst.score = 1.0
    inst.gt_classes = torch.tensor([7, 8, 9])  # replacing the only field may change length
    assert len(inst) == 3
    with pytest.raises(ValueError, match="reserved"):
        inst.set("image_size", [1, 2, 3])


def test_indexing_int_slice_mask_indices():
    inst = _make()
    one = inst[1]
    assert len(one) == 1 and one.gt_classes.tolist() == [1]
    assert one.gt_masks[0][0][0] == 1.0 and one.scores.tolist() == [pytest.approx(1 / 3)]
    assert inst[-1].gt_classes.tolist() == [3]
    assert inst[torch.tensor(2)].gt_classes.tolist() == [2]
    assert inst[1:3].gt_classes.tolist() == [1, 2]
    mask = inst.gt_classes % 2 == 0
    sel = inst[mask]
    assert sel.gt_classes.tolist() == [0, 2]
    assert [m[0][0] for m in sel.gt_masks] == [0.0, 2.0]
    assert sel.scores.tolist() == [0.0, pytest.approx(2 / 3)]
    sel = inst[torch.tensor([3, 0])]
    assert sel.gt_classes.tolist() == [3, 0]
    assert [m[0][0] for m in sel.gt_masks] == [3.0, 0.0]
    assert inst[np.array([True, False, False, True])].gt_classes.tolist() == [0, 3]
    assert inst[[2, 1]].gt_classes.tolist() == [2, 1]
    empty = inst[torch.zeros(4, dtype=torch.bool)]
    assert len(empty) == 0 and empty.gt_boxes.shape == (0, 4) and empty.gt_masks == []
    assert inst.image_size == sel.image_size


def test_indexing_errors():
    inst = _make()
    with pytest.raises(IndexError, match="out of range"):
        inst[4]
    with pytest.raises(IndexError, match="out of range"):
        inst[torch.tensor([0, 9])]
    with pytest.raises(IndexError, match=r"shape \(4,\)"):
        inst[torch.tensor([True, False])]
    with pytest.raises(IndexError):
        inst[torch.tensor([0.5])]
    with pytest.raises(TypeError):
        inst[True]
    with pytest.raises(TypeError, match="not iterable"):
        iter(inst)


def test_cat():
    a, b = _make(2), _make(3)
    c = Instances.cat([a, b])
    assert len(c) == 5
    assert c.gt_classes.tolist() == [0, 1, 0, 1, 2]
    assert len(c.gt_masks) == 5 and c.scores.shape == (5,)
    assert Instances.cat([a]) is a
    with pytest.raises(ValueError, match="at least one"):
        Instances.cat([])
    other_size = Instances((1, 1), gt_classes=torch.tensor([1]))
    with pytest.raises(ValueError, match="image_size"):
        Instances.cat([Instances((30, 40), gt_classes=torch.tensor([1])), other_size])
    with pytest.raises(ValueError, match="fields"):
        Instances.cat([a, Instances((30, 40), gt_classes=torch.tensor([1]))])

    class Cattable(list):
        @classmethod
        def cat(cls, values):
            return cls(x for v in values for x in v)

    class NotCattable:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

    x = Instances((1, 1), f=Cattable([1]))
    assert isinstance(Instances.cat([x, x]).f, list)
    y = Instances((1, 1), f=NotCattable(1))
    with pytest.raises(ValueError, match="'f'"):
        Instances.cat([y, y])


def test_to_and_repr_and_pickle():
    inst = _make(2)
    moved = inst.to(torch.float64)
    assert moved.gt_boxes.dtype == torch.float64
    assert moved.gt_masks is inst.gt_masks  # lists have no .to and are kept
    assert inst.to("cpu").gt_classes.device.type == "cpu"
    text = repr(inst)
    assert (
        "num_instances=2" in text and "image_height=30" in text and "gt_boxes: Tensor(2, 4)" in text
    )
    restored = pickle.loads(pickle.dumps(inst))
    assert restored.gt_classes.tolist() == [0, 1] and restored.image_size == (30, 40)
