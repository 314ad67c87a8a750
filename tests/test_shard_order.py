"""The locality-aware shard order (issue 24, item 4): shards shuffled, samples shuffled within a
window of open shards; state (seed, pass, position); exact resume under another number of
workers and another world size, with 2 gloo ranks over shards read through register_shards."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from catalog import DatasetCatalog, register_shards, write_shards
from catalog.shards import load_shard_index
from catalog.formats import register_coco_instances
from mappers import DatasetMapper
from mappers import transforms as T
from samplers import build_detection_train_loader
from samplers.shard_order import ShardOrderSampler, ShardWindowOrder, shard_sizes_of_records
from tests.dist_helpers import run_distributed
from tests.image_bytes import jpeg_bytes, photo_like

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SIZES = [5, 3, 7, 4, 6, 2, 5]


def _shard_of(index: int) -> int:
    return int(np.searchsorted(np.cumsum(SIZES), index, side="right"))


def test_each_pass_is_a_permutation_that_keeps_a_window_of_shards_open():
    firsts = np.concatenate([[0], np.cumsum(SIZES)[:-1]])
    passes = [ShardWindowOrder(firsts, np.array(SIZES), 2, 7, p).to_array() for p in range(4)]
    for order in passes:
        assert sorted(order.tolist()) == list(range(sum(SIZES)))
        shards = [_shard_of(i) for i in order]
        seen = list(dict.fromkeys(shards))  # shards in order of first use
        # the pass reads windows of 2 shards, one after the other: never more open at once
        blocks = [seen[k:k + 2] for k in range(0, len(seen), 2)]
        position = 0
        for block in blocks:
            count = sum(SIZES[s] for s in block)
            assert {_shard_of(i) for i in order[position:position + count]} == set(block)
            position += count
    assert len({tuple(p) for p in passes}) == 4  # every pass differs
    again = ShardWindowOrder(firsts, np.array(SIZES), 2, 7, 3)
    assert again.at(np.arange(10, 20)).tolist() == passes[3][10:20].tolist()  # O(1) positions
    big = np.array(SIZES) * 1000  # windows over SORTED_WINDOW samples: keyed permutations
    big_order = ShardWindowOrder(np.concatenate([[0], np.cumsum(big)[:-1]]), big, 2, 7, 0)
    whole = big_order.to_array()
    assert np.array_equal(np.sort(whole), np.arange(big.sum()))
    assert big_order.at(np.arange(6000, 6100)).tolist() == whole[6000:6100].tolist()
    assert set(np.searchsorted(np.cumsum(big), whole[:big[:2].sum()], side="right")) != set(
        range(len(big)))
    plain = ShardWindowOrder(firsts, np.array(SIZES), 2, 7, 0, shuffle=False)
    assert plain.to_array().tolist() == list(range(sum(SIZES)))


def test_resume_is_exact_after_a_change_of_world_size():
    total = sum(SIZES)
    single = list(itertools.islice(iter(ShardOrderSampler(SIZES, window=3, seed=4, rank=0,
                                                          world_size=1)), 3 * total))
    ranks = [ShardOrderSampler(SIZES, window=3, seed=4, rank=r, world_size=2) for r in range(2)]
    iterators = [iter(s) for s in ranks]
    taken = [list(itertools.islice(it, 20)) for it in iterators]
    assert taken[0] == single[0:40:2] and taken[1] == single[1:40:2]
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict() and state["offset"] == 40 - total
    resumed = [ShardOrderSampler(SIZES, window=3, seed=0, rank=r, world_size=3) for r in range(3)]
    for sampler in resumed:
        sampler.load_state_dict(state)
    rest = [list(itertools.islice(iter(s), 10)) for s in resumed]
    assert [rest[t % 3][t // 3] for t in range(30)] == single[40:70]
    other = ShardOrderSampler(SIZES[:-1] + [6], window=3, seed=4, rank=0, world_size=1)
    with pytest.raises(Exception, match="config|shards"):
        other.load_state_dict(state)


def test_same_batches_for_any_number_of_workers_and_after_resume():
    records = [{"file_name": f"d/s{_shard_of(i)}.tar#{i:09d}.jpg", "image_id": i}
               for i in range(sum(SIZES))]
    assert shard_sizes_of_records(records) == SIZES

    def loader(workers):
        return build_detection_train_loader(
            records, mapper=lambda r: r["image_id"], total_batch_size=4, num_workers=workers,
            sampler=ShardOrderSampler(SIZES, window=2, seed=9), aspect_ratio_grouping=False,
            seed=9)

    reference = list(itertools.islice(loader(0), 12))
    first = loader(2)
    assert list(itertools.islice(first, 5)) == reference[:5]
    resumed = loader(1)
    resumed.load_state_dict(first.state_dict())
    assert list(itertools.islice(resumed, 7)) == reference[5:]


# ------------------------------------------------------------------------------ 2 gloo ranks
def _make_shards(root: Path) -> Path:
    images = []
    annotations = []
    for i in range(16):
        height, width = (40, 56) if i % 3 else (56, 40)
        (root / f"{i}.jpg").write_bytes(jpeg_bytes(photo_like(height, width, seed=i)))
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "height": height, "width": width})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 1, "iscrowd": 0,
                            "bbox": [1.0, 2.0, 20.0, 18.0], "area": 360.0})
    (root / "ann.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                               "categories": [{"id": 1, "name": "x"}]}))
    register_coco_instances("order_coco", {}, str(root / "ann.json"), str(root))
    write_shards("order_coco", root / "shards", shard_size=3)
    index = load_shard_index(root / "shards")  # image_id 6 (sample 5) is corrupt
    path = root / "shards" / index.shards[1].name
    data = bytearray(path.read_bytes())
    data[int(index.columns["offset"][5]) + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    return root / "shards"


def _shard_loader(shards: str, total_batch_size: int):
    if "gloo_shards" not in DatasetCatalog:
        register_shards("gloo_shards", shards)
    records = DatasetCatalog.get("gloo_shards")
    mapper = DatasetMapper(True, augmentations=[T.RandomFlip(prob=0.5),
                                                T.ResizeShortestEdge((24, 32), max_size=64)],
                           image_format="RGB", skip_bad_images=True)
    return build_detection_train_loader(
        records, mapper=mapper, total_batch_size=total_batch_size, aspect_ratio_grouping=False,
        sampler=ShardOrderSampler(shard_sizes_of_records(records), window=2, seed=3), seed=3)


def _key(sample: dict) -> tuple:
    return sample["image_id"], hashlib.sha256(sample["image"].numpy().tobytes()).hexdigest()


def _gloo_rank(rank: int, world_size: int, shards: str) -> tuple[list, dict, list]:
    loader = _shard_loader(shards, 2 * world_size)
    it = iter(loader)
    before = [[_key(s) for s in next(it)] for _ in range(3)]
    state = loader.state_dict()
    after = [[_key(s) for s in next(it)] for _ in range(3)]
    return before, state, after


@pytest.mark.distributed
def test_two_gloo_ranks_resume_on_one_rank_with_the_same_mapped_samples_and_replacements(tmp_path):
    shards = _make_shards(tmp_path)
    results = run_distributed(_gloo_rank, 2, str(shards), deadline=240)
    (before0, state0, after0), (before1, state1, after1) = results
    assert state0 == state1
    resumed = _shard_loader(str(shards), 4)
    resumed.load_state_dict(state0)
    got = [[_key(s) for s in batch] for batch in itertools.islice(resumed, 3)]
    for b in range(3):
        assert sorted(got[b]) == sorted(after0[b] + after1[b])
    # the corrupt sample is replaced on every rank, the same way in the resumed run
    seen = {key[0] for batches in (before0, before1, after0, after1, got)
            for batch in batches for key in batch}
    assert 6 not in seen and len(seen) > 8
