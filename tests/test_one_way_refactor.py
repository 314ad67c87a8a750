"""Issue 15 refactors keep what users see: builder signatures, transport records, structures."""

from __future__ import annotations

import inspect
import pickle

import pytest
import torch

from mappers.structures import BitMasks, Boxes, Keypoints, ROIMasks, RotatedBoxes
from samplers.slabs import _Ref
from samplers.build import (
    build_batch_data_loader,
    build_detection_test_loader,
    build_detection_train_loader,
)
from samplers.build import LoaderCallError
from samplers.slabs import SlabBatch, Ticket
from samplers.transport import WorkerFailure

#: The DataLoader keywords every builder takes, with detectron2-compatible defaults.
WORKER_KEYWORDS = {
    "num_workers": 0,
    "collate_fn": None,
    "pin_memory": False,
    "persistent_workers": False,
    "prefetch_factor": None,
    "multiprocessing_context": None,
    "timeout": None,
    "worker_init_fn": None,
    "transport": "auto",
}


@pytest.mark.parametrize(
    "builder, own",
    [
        (build_batch_data_loader, {"aspect_ratio_grouping": False, "drop_last": True,
                                   "group_ids": None}),
        (build_detection_train_loader, {"sampler": None, "aspect_ratio_grouping": True,
                                        "seed": None}),
        (build_detection_test_loader, {"sampler": None, "batch_size": 1}),
    ],
)
def test_builders_show_every_keyword_with_its_default(builder, own):
    params = inspect.signature(builder).parameters
    assert "options" not in params
    for name, default in {**WORKER_KEYWORDS, **own}.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == default, name


def test_worker_keywords_reach_the_loader_and_unknown_ones_are_refused():
    records = [{"i": i} for i in range(4)]
    loader = build_detection_test_loader(records, mapper=None, batch_size=2, collate_fn=len)
    assert list(loader) == [2, 2]
    with pytest.raises(LoaderCallError, match="num_worker"):
        build_detection_test_loader(records, mapper=None, num_worker=2)
    with pytest.raises(TypeError, match="bogus"):
        build_batch_data_loader(records, None, 2, bogus=1)


@pytest.mark.parametrize(
    "record",
    [
        _Ref("t", "torch.float32", (2, 3), (3, 1), 8),
        Ticket(3, 9),
        SlabBatch("token", 1, 2, 64, {"a": [1]}),
        WorkerFailure(None, "ValueError", "bad", "trace", 1, 5),
    ],
)
def test_transport_records_pickle_compactly_and_compare_by_identity(record):
    cls, args = record.__reduce__()
    assert cls is type(record) or cls.__name__ == "_receive"
    copy = pickle.loads(pickle.dumps(record))
    assert type(copy) is type(record) and copy is not record and copy != record
    assert [getattr(copy, name) for name in type(record).__slots__] == [
        getattr(record, name) for name in type(record).__slots__
    ]
    assert len(args) == len(type(record).__slots__)


@pytest.mark.parametrize(
    "structure",
    [
        Boxes(torch.rand(3, 4)),
        RotatedBoxes(torch.rand(3, 5)),
        BitMasks(torch.rand(3, 4, 5) > 0.5),
        Keypoints(torch.rand(3, 2, 3)),
        ROIMasks(torch.rand(3, 7, 7)),
    ],
)
def test_tensor_structures_index_move_and_measure_the_same_way(structure):
    cls = type(structure)
    one, some = structure[1], structure[torch.tensor([True, False, True])]
    assert type(one) is cls and len(one) == 1 and torch.equal(one.tensor[0], structure.tensor[1])
    assert type(some) is cls and len(some) == 2
    moved = structure.to("cpu")
    assert type(moved) is cls and moved.device.type == "cpu" and len(structure) == 3
    assert repr(structure).startswith(f"{cls.__name__}(")
