"""Tests of catalog.storage.sharing: one loader run per machine, shared records, typed failures.

Spawning ranks costs seconds (each imports torch), so one 4-rank job runs every scenario in
turn (``_all_scenarios``) and the tests below check its per-rank results.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from catalog import SerializedList
from catalog.storage.records_file import MappedFile
from catalog.storage.sharing import local_group, publish_records, share_across_local_ranks
from tests.dist_helpers import run_distributed

WORLD = 4


def _records(n: int) -> list[dict]:
    return [
        {"file_name": f"{i}.jpg", "height": 4, "width": 6 + i, "image_id": i, "annotations": []}
        for i in range(n)
    ]


def _shm_entries() -> set[str]:
    """catmap's entries in /dev/shm (other programs' entries come and go)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {name for name in os.listdir("/dev/shm") if "catmap" in name}


def _counting_build(marker_dir: Path, name: str, n: int = 7):
    def build():
        marker_dir.mkdir(exist_ok=True)
        Path(marker_dir, f"rank{torch.distributed.get_rank()}").touch()
        return SerializedList(_records(n), name=name), {"metadata": {"classes": ["a"]}}

    return build


# ---------------------------------------------------------------------------------------
# scenarios (module level: they run in the spawned ranks)


def _share_once(rank: int, root: Path) -> dict:
    records, extra = share_across_local_ranks("toy", _counting_build(root / "once", "toy"))
    owner = records.owner
    return {
        "records": records.to_list(),
        "widths": records.columns.widths.tolist(),
        "extra": extra,
        "memfd": isinstance(owner, MappedFile) and owner.path is None,
    }


def _share_two_nodes(rank: int, root: Path) -> list[dict]:
    os.environ["CATMAP_NODE_ID"] = "node-a" if rank < 2 else "node-b"
    try:
        records, _ = share_across_local_ranks("toy", _counting_build(root / "nodes", "toy"))
    finally:
        del os.environ["CATMAP_NODE_ID"]
    return records.to_list()


def _caught(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "none", ""


def _leader_fails(rank: int, root: Path) -> tuple[str, str]:
    def build():
        raise ValueError("annotation file /data/broken.json: bad bbox at index 3")

    return _caught(lambda: share_across_local_ranks("broken", build))


def _names_differ(rank: int, root: Path) -> tuple[str, str]:
    return _caught(
        lambda: share_across_local_ranks(f"ds{rank}", lambda: (SerializedList([{}]), {}))
    )


def _attach_fails_on_rank_2(rank: int, root: Path) -> tuple[str, str]:
    import catalog.storage.sharing as sharing

    original = sharing.remap

    def refuse(*args, **kwargs):
        raise PermissionError("[Errno 13] Permission denied")

    if rank == 2:
        sharing.remap = refuse
    try:
        return _caught(
            lambda: share_across_local_ranks(
                "toy", lambda: (SerializedList(_records(3), name="toy"), {})
            )
        )
    finally:
        sharing.remap = original


def _no_memfd(rank: int, root: Path) -> list[dict]:
    """Where memfd is unavailable (not Linux), every rank builds its own records."""
    import catalog.storage.sharing as sharing

    original = sharing._memfd_usable
    sharing._memfd_usable = lambda: False
    try:
        records, _ = share_across_local_ranks("toy", _counting_build(root / "file", "toy", n=5))
    finally:
        sharing._memfd_usable = original
    return records.to_list()


def _identity(batch):
    return batch


class _OwnerProbe(torch.utils.data.Dataset):
    """Reports, from inside a DataLoader worker, how the records reached the worker."""

    def __init__(self, records: SerializedList) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[dict, str]:
        owner = self.records.owner
        return self.records[index], type(owner).__name__


def _dataloader_workers(rank: int, root: Path) -> dict:
    records, _ = share_across_local_ranks("toy", _counting_build(root / "workers", "toy", n=4))
    # a follower rank (its records were attached, not built) runs every start method
    contexts = ("fork", "spawn", "forkserver") if rank == 1 else ("fork",)
    out = {}
    for context in contexts:
        loader = torch.utils.data.DataLoader(
            _OwnerProbe(records),
            batch_size=None,
            num_workers=1,
            multiprocessing_context=context,
            collate_fn=_identity,
        )
        items = list(loader)
        out[context] = ([r for r, _ in items], sorted({owner for _, owner in items}))
    return out


def _coco_file(path: Path) -> None:
    data = {
        "images": [
            {"id": 1, "file_name": "a.jpg", "height": 10, "width": 20},
            {"id": 2, "file_name": "b.jpg", "height": 30, "width": 40},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 3, 4], "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 3, "bbox": [0, 0, 5, 5], "iscrowd": 0},
        ],
        "categories": [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}],
    }
    path.write_text(json.dumps(data))


def _catalog_get(rank: int, root: Path, cache: bool) -> dict:
    import catalog.formats.coco as coco
    from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances

    name = f"shared_coco_{cache}"
    markers = root / f"parsed_{cache}"
    markers.mkdir(exist_ok=True)
    original = coco.load_coco_json

    def counting_load(*args, **kwargs):
        Path(markers, f"rank{rank}-{len(os.listdir(markers))}").touch()
        return original(*args, **kwargs)

    coco.load_coco_json = counting_load
    try:
        register_coco_instances(name, {}, root / "instances.json", "/images", cache=cache)
        records = DatasetCatalog.get(name)
        again = DatasetCatalog.get(name)  # loaded once per process: no second collective
    finally:
        coco.load_coco_json = original
    owner = records.owner
    return {
        "records": records.to_list(),
        "same_object": again is records,
        "classes": MetadataCatalog.get(name).thing_classes,
        "id_map": MetadataCatalog.get(name).thing_dataset_id_to_contiguous_id,
        "cache_file": getattr(owner, "path", None),
    }


def _all_scenarios(rank: int, world_size: int, root: str) -> dict:
    root_path = Path(root)
    os.environ["CATMAP_CACHE_DIR"] = str(root_path / "cache")
    return {
        "once": _share_once(rank, root_path),
        "nodes": _share_two_nodes(rank, root_path),
        "leader_fails": _leader_fails(rank, root_path),
        "names_differ": _names_differ(rank, root_path),
        "attach_fails": _attach_fails_on_rank_2(rank, root_path),
        "workers": _dataloader_workers(rank, root_path),
        "no_memfd": _no_memfd(rank, root_path),
        "catalog_cached": _catalog_get(rank, root_path, True),
        "catalog_uncached": _catalog_get(rank, root_path, False),
    }


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("local_share")
    _coco_file(root / "instances.json")
    before = _shm_entries()
    results = run_distributed(_all_scenarios, WORLD, str(root))
    return {"root": root, "results": results, "shm_before": before, "shm_after": _shm_entries()}


# ---------------------------------------------------------------------------------------
# single-process tests


def test_local_group_picks_the_lowest_rank_of_each_node():
    group = local_group([("b", "x"), ("a", "x"), ("b", "x"), ("a", "x")], rank=3)
    assert group.ranks == (1, 3) and group.leader == 1 and not group.is_leader
    assert group.local_rank == 1 and group.leaders == {"b": 0, "a": 1}


def test_without_distributed_it_just_builds():
    calls = []

    def build():
        calls.append(1)
        return SerializedList([{"a": 1}]), {"k": 1}

    records, extra = share_across_local_ranks("toy", build)
    assert calls == [1] and records[0] == {"a": 1} and extra == {"k": 1}


def test_publish_records_moves_them_into_an_anonymous_memory_file():
    before = _shm_entries()
    records, descriptor = publish_records(SerializedList(_records(3), name="toy"))
    assert descriptor["path"] is None and records.owner.path is None
    assert records.to_list() == _records(3)
    assert _shm_entries() == before


# ---------------------------------------------------------------------------------------
# the 4-rank job


@pytest.mark.distributed
def test_one_rank_loads_and_every_rank_sees_identical_records(job):
    assert sorted(os.listdir(job["root"] / "once")) == ["rank0"]  # only the leader loaded
    for result in (r["once"] for r in job["results"]):
        assert result["records"] == _records(7)
        assert result["widths"] == [6 + i for i in range(7)]
        assert result["extra"] == {"metadata": {"classes": ["a"]}}  # also where not built
        assert result["memfd"]


@pytest.mark.distributed
def test_nothing_is_left_in_dev_shm(job):
    assert job["shm_after"] == job["shm_before"]


@pytest.mark.distributed
def test_without_memfd_every_rank_builds(job):
    assert sorted(os.listdir(job["root"] / "file")) == [f"rank{r}" for r in range(WORLD)]
    assert all(r["no_memfd"] == _records(5) for r in job["results"])


@pytest.mark.distributed
def test_ranks_are_grouped_by_node(job):
    assert sorted(os.listdir(job["root"] / "nodes")) == ["rank0", "rank2"]
    assert all(r["nodes"] == _records(7) for r in job["results"])


@pytest.mark.distributed
def test_a_failing_leader_is_reported_on_every_rank(job):
    outcomes = [r["leader_fails"] for r in job["results"]]
    assert outcomes[0][0] == "ValueError"  # the leader re-raises its own error
    for rank, (kind, message) in enumerate(outcomes[1:], start=1):
        assert kind == "SharedAttachError"
        assert f"rank {rank} " in message and "rank 0" in message and "broken.json" in message


@pytest.mark.distributed
def test_ranks_loading_different_datasets_fail_instead_of_hanging(job):
    for kind, message in (r["names_differ"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "'ds0'" in message and "'ds3'" in message


@pytest.mark.distributed
def test_a_rank_that_cannot_attach_is_named_with_what_it_tried(job):
    for kind, message in (r["attach_fails"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "rank 2 (local rank 2" in message
        assert "/proc/" in message and "Permission denied" in message


@pytest.mark.distributed
def test_fork_spawn_and_forkserver_workers_map_the_shared_records(job):
    assert sorted(os.listdir(job["root"] / "workers")) == ["rank0"]
    for rank, per_context in enumerate(r["workers"] for r in job["results"]):
        assert set(per_context) == ({"fork", "spawn", "forkserver"} if rank == 1 else {"fork"})
        for context, (records, owners) in per_context.items():
            assert records == _records(4), context
            # re-mapped through /proc/<rank pid>/fd (no copy into torch shared memory)
            assert owners == ["MappedFile"], context


@pytest.mark.distributed
@pytest.mark.parametrize("cache", [True, False])
def test_catalog_get_parses_once_per_machine(job, cache):
    key = "catalog_cached" if cache else "catalog_uncached"
    parsed = os.listdir(job["root"] / f"parsed_{cache}")
    assert [p.split("-")[0] for p in parsed] == ["rank0"]
    results = [r[key] for r in job["results"]]
    for result in results:
        assert [r["file_name"] for r in result["records"]] == ["/images/a.jpg", "/images/b.jpg"]
        assert result["records"] == results[0]["records"]
        assert result["same_object"]
        assert result["classes"] == ["cat", "dog"]
        assert result["id_map"] == {3: 0, 7: 1}
    cache_files = sorted(p.name for p in (job["root"] / "cache").iterdir())
    if cache:
        # every rank maps the cache file itself: one copy in the page cache, none elsewhere
        (cache_file,) = {r["cache_file"] for r in results}
        assert Path(cache_file).name in cache_files
    else:
        assert all(r["cache_file"] is None for r in results)
        assert not any(name.startswith("shared_coco_False") for name in cache_files)
