"""Packing batches into one arena (samplers.slabs) and the slab pool's bookkeeping."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mappers.instances import Instances
from samplers import build_detection_test_loader
from samplers.slabs import ALIGNMENT, plan_batch, unpack_batch, write_batch
from samplers.slabs import SlabPool, SlabSpace, Ticket, TransportError


def _roundtrip(batch):
    plan = plan_batch(batch)
    assert plan.nbytes % ALIGNMENT == 0
    arena = torch.zeros(plan.nbytes, dtype=torch.uint8)
    write_batch(plan, arena, arena.numpy())
    return unpack_batch(plan.skeleton, arena.numpy()), plan


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return (type(b) is type(a) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, Instances):
        return (a.image_size == b.image_size and a.get_fields().keys() == b.get_fields().keys()
                and all(_same(a.get(k), b.get(k)) for k in a.get_fields()))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(b) is type(a) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_and_odd_shapes_round_trip(dtype):
    base = torch.arange(60).reshape(3, 4, 5).to(dtype)
    batch = [{"full": base, "scalar": base[0, 0, 0].clone(), "empty": base[:0],
              "transposed": base.transpose(0, 2), "stepped": base[:, ::2],
              "expanded": base[:1].expand(4, 4, 5), "channels_last": base.permute(1, 2, 0)}]
    out, _ = _roundtrip(batch)
    assert _same(batch, out)
    assert out[0]["transposed"].stride() == base.transpose(0, 2).stride()
    assert out[0]["channels_last"].stride() == base.permute(1, 2, 0).stride()
    assert out[0]["scalar"].shape == ()


def test_fields_of_a_batch_share_one_block_and_other_values_pass_through():
    class Custom:
        pass

    custom = Custom()
    param = torch.nn.Parameter(torch.ones(2))
    samples = [
        {"boxes": torch.rand(n, 4), "classes": torch.arange(n), "name": f"{n}.jpg",
         "big_endian": np.arange(3, dtype=">f8"), "objects": np.array([1, "a"], dtype=object),
         "custom": custom, "param": param, "instances": Instances(
             (4, 5), gt_boxes=torch.rand(n, 4), polygons=[[np.ones(6)] for _ in range(n)])}
        for n in (2, 0, 3)
    ]
    out, plan = _roundtrip(samples)
    assert _same(samples[0]["boxes"], out[0]["boxes"]) and out[1]["boxes"].shape == (0, 4)
    first, third = out[0]["boxes"], out[2]["boxes"]
    assert third.data_ptr() == first.data_ptr() + (2 + 0) * 4 * 4  # rows of one N x 4 block
    assert out[0]["custom"] is custom and out[0]["param"] is param
    assert out[0]["big_endian"] is samples[0]["big_endian"]
    assert out[0]["objects"] is samples[0]["objects"]
    assert _same(samples[2]["instances"], out[2]["instances"])
    assert len(plan.regions) == 4  # boxes, classes, gt_boxes, polygons: nothing else packed


arrays = st.one_of(
    st.builds(lambda shape, seed: torch.randn(tuple(shape),
                                              generator=torch.Generator().manual_seed(seed)),
              st.lists(st.integers(0, 4), max_size=3), st.integers(0, 100)),
    st.builds(lambda shape, seed: np.random.default_rng(seed).integers(0, 9, tuple(shape))
              .astype(np.int16),
              st.lists(st.integers(0, 4), max_size=3), st.integers(0, 100)),
    st.integers(), st.text(max_size=3), st.none(),
)
trees = st.recursive(
    arrays,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(trees)
def test_any_nesting_round_trips(tree):
    out, _ = _roundtrip(tree)
    assert _same(tree, out)


def test_views_keep_the_arena_alive_until_the_last_one_dies():
    pool = SlabPool(1, slab_bytes=os.sysconf("SC_PAGE_SIZE"))
    ticket = pool.assign(generation=1)
    handle = pool.writer.write(ticket, [{"a": torch.ones(3, 1000)}])  # grows the slab
    batch = pool.receive(handle).unpack()
    row = batch[0]["a"][1]
    del batch
    gc.collect()
    assert pool.free_count() == 0 and pool.assign(1) is None and pool.fallbacks == 1
    assert torch.equal(row, torch.ones(1000))
    del row
    gc.collect()
    assert pool.free_count() == 1
    pool.close()


def test_pool_bookkeeping_ignores_stale_serials_and_reclaims_unreceived_slabs():
    pool = SlabPool(2, slab_bytes=1 << 16)
    first, second = pool.assign(1), pool.assign(2)
    assert pool.free_count() == 0
    pool.release(first.slab, first.serial + 100)  # not its batch: ignored
    assert pool.free_count() == 0
    assert pool.reclaim(1) == 1 and pool.free_count() == 1
    with pytest.raises(TransportError, match="no longer assigned"):
        pool.receive(pool.writer.write(first, [1]))
    handle = pool.writer.write(second, [torch.zeros(2)])
    received = pool.receive(handle)
    del received  # dropped without unpacking (a prefetched batch nobody asked for)
    assert pool.free_count() == 2
    pool.close()
    assert pool.assign(3) is None
    assert repr(Ticket(1, 2)) == "Ticket(slab=1, serial=2)"


class TaggedInstances(Instances):
    """A subclass of our Instances: rebuilt as itself."""


class Foreign:
    class Instances:
        """Another library's Instances (as detectron2's): same name, same small API."""

        def __init__(self, image_size, **fields):
            self._image_size, self._fields = image_size, dict(fields)

        @property
        def image_size(self):
            return self._image_size

        def get_fields(self):
            return self._fields


def foreign_mapper(record):
    i = record["image_id"]
    return {"instances": Foreign.Instances((4, 5), boxes=torch.full((i, 4), float(i)),
                                           ids=np.arange(i)),
            "tagged": TaggedInstances((2, 3), gt_classes=torch.arange(i))}


@pytest.mark.parametrize("cls", [TaggedInstances, Foreign.Instances])
def test_instances_like_classes_travel_in_the_arena_and_come_back_as_their_class(cls):
    boxes = torch.arange(8.0).reshape(2, 4)
    out, plan = _roundtrip([{"instances": cls((4, 5), boxes=boxes)}])
    node = plan.skeleton[0]["instances"]
    assert node.cls is cls and not isinstance(node.fields["boxes"], torch.Tensor)  # in the arena
    inst = out[0]["instances"]
    assert type(inst) is cls and inst.image_size == (4, 5)
    assert torch.equal(inst.get_fields()["boxes"], boxes)


def test_an_instances_class_pickle_cannot_find_by_name_is_left_to_pickling():
    class Instances(Foreign.Instances):  # a local class: not importable by the main process
        pass

    value = Instances((1, 1), boxes=torch.zeros(1, 4))
    assert plan_batch([value]).skeleton[0] is value


def test_foreign_instances_arrive_through_slab_loader_workers():
    loader = build_detection_test_loader(
        [{"image_id": i} for i in range(4)], mapper=foreign_mapper, num_workers=1,
        batch_size=2, transport="slab", timeout=60,
    )
    batches = list(loader)
    assert loader.transport.pool.fallbacks == 0
    for i, sample in enumerate(s for b in batches for s in b):
        inst, tagged = sample["instances"], sample["tagged"]
        assert type(inst) is Foreign.Instances and type(tagged) is TaggedInstances
        assert torch.equal(inst.get_fields()["boxes"], torch.full((i, 4), float(i)))
        assert np.array_equal(inst.get_fields()["ids"], np.arange(i))
        assert torch.equal(tagged.gt_classes, torch.arange(i)) and tagged.image_size == (2, 3)


def test_arrays_placed_in_slab_space_stay_where_they_are_and_the_rest_follows():
    pool = SlabPool(1, slab_bytes=1 << 16)
    ticket = pool.assign(generation=1)
    space = pool.writer.space(ticket)
    image = space((5, 7, 3), np.uint8)  # where a mapper would resize its output image
    image[...] = np.arange(105, dtype=np.uint8).reshape(5, 7, 3)
    batch = [{"image": torch.from_numpy(image).permute(2, 0, 1), "boxes": torch.ones(2, 4)}]
    plan = plan_batch(batch, space)
    assert len(plan.regions) == 1 and plan.regions[0].offset >= space.top  # boxes only
    received = pool.receive(pool.writer.write(ticket, batch, space)).unpack()
    assert _same(batch, received)
    del received, batch
    gc.collect()
    pool.close()


def test_slab_space_refuses_more_than_a_slab_holds():
    space = SlabSpace(lambda need: np.zeros(need, np.uint8))
    assert space((1 << 40,), np.uint8) is None and space.top == 0
