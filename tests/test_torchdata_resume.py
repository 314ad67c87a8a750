"""catmap inside torchdata: StatefulDataLoader and torchdata.nodes resume with identical pixels.

Random augmentations and a mapper that rejects some records (MapDataset draws replacements):
after a restore mid-epoch the batches (records, pixels, boxes) equal the uninterrupted run's,
for 0 and 2 workers; the uninterrupted run equals catmap's own loader.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from catalog import register_coco_instances
from mappers import DatasetMapper
from mappers.transforms import RandomBrightness, RandomFlip, ResizeShortestEdge
from samplers import build_detection_train_loader

pytest.importorskip("torchdata.stateful_dataloader")
tn = pytest.importorskip("torchdata.nodes")

from samplers.torchdata_support import (  # noqa: E402 - needs torchdata
    MapKeys,
    SampleKeysNode,
    SeededBatchSampler,
    to_stateful_dataloader,
)

SEED = 11
BATCHES = 7
SAVE_AFTER = 3


class RejectSome:
    """An augmenting DatasetMapper that rejects every record whose image id is 2 mod 5."""

    def __init__(self) -> None:
        self.inner = DatasetMapper(
            True,
            augmentations=[
                ResizeShortestEdge((24, 32, 40), max_size=64, sample_style="choice"),
                RandomFlip(prob=0.5),
                RandomBrightness(0.6, 1.4),
            ],
        )

    def __call__(self, record):
        return None if record["image_id"] % 5 == 2 else self.inner(record)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tools.shapes_dataset import generate_shapes_dataset

    return generate_shapes_dataset(
        tmp_path_factory.mktemp("td") / "shapes", num_images=10, seed=4,
        image_sizes=[(48, 40), (40, 48)],
    )


@pytest.fixture
def dataset_name(shapes):
    register_coco_instances("td_shapes", {}, shapes.json_file, shapes.image_root)
    return "td_shapes"


def catmap_loader(name, num_workers=0):
    return build_detection_train_loader(
        name, mapper=RejectSome(), total_batch_size=2, seed=SEED, num_workers=num_workers,
        transport="dataloader",
    )


def _boxes(sample):
    boxes = sample["instances"].gt_boxes
    return getattr(boxes, "tensor", boxes)  # a Boxes structure or a tensor


def assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for batch_got, batch_expected in zip(got, expected, strict=True):
        assert [s["image_id"] for s in batch_got] == [s["image_id"] for s in batch_expected]
        for a, b in zip(batch_got, batch_expected, strict=True):
            assert a["image"].shape == b["image"].shape and torch.equal(a["image"], b["image"])
            assert torch.equal(_boxes(a), _boxes(b))
            assert torch.equal(a["instances"].gt_classes, b["instances"].gt_classes)


@pytest.fixture
def reference(dataset_name):
    """The uninterrupted run, from catmap's own loader."""
    batches = list(itertools.islice(catmap_loader(dataset_name), BATCHES))
    assert all(s["image_id"] % 5 != 2 for b in batches for s in b)  # rejections replaced
    flips = {s["image"].shape[1:] for b in batches for s in b}
    assert len(flips) > 1  # the sizes are augmented
    return batches


README_STATEFUL_SNIPPET = """
from samplers import build_detection_train_loader
from samplers.torchdata_support import to_stateful_dataloader

def make_loader():
    loader = build_detection_train_loader(dataset_name, mapper=mapper, total_batch_size=2,
                                          seed=11)
    return to_stateful_dataloader(loader, num_workers=num_workers)

loader = make_loader()
seen = [batch for _, batch in zip(range(3), loader)]
state = loader.state_dict()            # save it with the model checkpoint

resumed = make_loader()                # a new process, after a crash
resumed.load_state_dict(state)
after = [batch for _, batch in zip(range(4), resumed)]  # what `loader` would yield next
"""


@pytest.mark.parametrize("num_workers", [0, 2])
def test_readme_stateful_dataloader_resume_gives_identical_pixels(
    dataset_name, reference, num_workers
):
    scope = {"dataset_name": dataset_name, "mapper": RejectSome(), "num_workers": num_workers}
    exec(README_STATEFUL_SNIPPET, scope)  # noqa: S102 - the README text, verbatim
    assert_same_batches(scope["seen"], reference[:SAVE_AFTER])
    assert_same_batches(scope["after"], reference[SAVE_AFTER:BATCHES])


def test_stateful_dataloader_with_deeper_prefetch_resumes_mid_stream(dataset_name, reference):
    loader = to_stateful_dataloader(catmap_loader(dataset_name), num_workers=2,
                                    prefetch_factor=3)
    it = iter(loader)
    first = [next(it) for _ in range(SAVE_AFTER)]
    state = loader.state_dict()
    later = [next(it) for _ in range(2)]  # the original goes on: its batches are the reference
    assert_same_batches(first + later, reference[: SAVE_AFTER + 2])
    same_workers = to_stateful_dataloader(catmap_loader(dataset_name), num_workers=2)
    same_workers.load_state_dict(state)
    assert_same_batches(list(itertools.islice(same_workers, 4)), reference[SAVE_AFTER:])


def test_the_plain_stateful_dataloader_would_not_resume_pixels(dataset_name):
    """Why the glue exists: without sample seeds the augmentations after a restore differ."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def plain():
        catmap = catmap_loader(dataset_name)
        return StatefulDataLoader(catmap.dataset, batch_sampler=catmap.batch_sampler,
                                  collate_fn=list)

    torch.manual_seed(0)
    loader = plain()
    it = iter(loader)
    _ = [next(it) for _ in range(SAVE_AFTER)]
    state = loader.state_dict()
    expected = [next(it) for _ in range(4)]
    torch.manual_seed(1)  # another process: another global seed
    resumed = plain()
    resumed.load_state_dict(state)
    got = list(itertools.islice(resumed, 4))
    ids = [[s["image_id"] for s in b] for b in got]
    # the order is resumed (the sampler is Stateful), but not the replacements or pixels
    same = ids == [[s["image_id"] for s in b] for b in expected] and all(
        torch.equal(a["image"], b["image"])
        for x, y in zip(got, expected, strict=True)
        for a, b in zip(x, y, strict=True)
    )
    assert not same


def test_seeded_batch_sampler_state_checks(dataset_name):
    from samplers import SamplerStateError

    keys = SeededBatchSampler(catmap_loader(dataset_name).batch_sampler, seed=3)
    for bad in ([], {"seed": 1}, {"seed": -1, "batch_sampler": keys.batch_sampler.state_dict()}):
        with pytest.raises(SamplerStateError):
            keys.load_state_dict(bad)
    assert keys.seed == 3
    with pytest.raises(TypeError, match="iter_with_positions"):
        SeededBatchSampler(torch.utils.data.BatchSampler(range(4), 2, False), seed=0)
    with pytest.raises(TypeError, match="sample seeds"):
        to_stateful_dataloader(object())


def _nodes_loader(name, *, method, num_workers=2):
    catmap = catmap_loader(name)
    node = SampleKeysNode(catmap.batch_sampler, seed=catmap.seed)
    node = tn.ParallelMapper(
        node, map_fn=MapKeys(catmap.dataset, seed_globals=method != "thread"),
        num_workers=num_workers, method=method, in_order=True,
    )
    node = tn.Prefetcher(node, prefetch_factor=2)
    return tn.Loader(node)


README_NODES_SNIPPET = """
import torchdata.nodes as tn
from samplers import build_detection_train_loader
from samplers.torchdata_support import MapKeys, SampleKeysNode

catmap = build_detection_train_loader(dataset_name, mapper=mapper, total_batch_size=2, seed=11)
node = SampleKeysNode(catmap.batch_sampler, seed=catmap.seed)    # batches of (index, seed)
node = tn.ParallelMapper(node, map_fn=MapKeys(catmap.dataset, seed_globals=False),
                         num_workers=2, method="thread")          # or method="process"
loader = tn.Loader(tn.Prefetcher(node, prefetch_factor=2))
batches = [batch for _, batch in zip(range(3), loader)]
state = loader.state_dict()                                       # resume with load_state_dict
"""


def test_readme_nodes_snippet_with_thread_workers_resumes(dataset_name, reference):
    scope = {"dataset_name": dataset_name, "mapper": RejectSome()}
    exec(README_NODES_SNIPPET, scope)  # noqa: S102 - the README text, verbatim
    assert_same_batches(scope["batches"], reference[:SAVE_AFTER])
    resumed = _nodes_loader(dataset_name, method="thread")
    resumed.load_state_dict(scope["state"])
    assert_same_batches(list(itertools.islice(resumed, 4)), reference[SAVE_AFTER:])


def test_nodes_reset_to_the_start_replays_the_same_batches(dataset_name, reference):
    loader = _nodes_loader(dataset_name, method="thread", num_workers=1)
    assert_same_batches(list(itertools.islice(loader, 2)), reference[:2])
    # a new epoch of the Loader resets the graph: from where the sampler was when built
    assert_same_batches(list(itertools.islice(loader, 2)), reference[:2])
