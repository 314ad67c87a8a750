"""A rank function for tests/test_lightning.py (kept apart so spawned ranks import no Lightning).

Lightning's ``prepare_data`` pattern: rank 0 loads a dataset alone inside
``catalog.storage.sharing.this_rank_only()`` while rank 1 waits in a barrier; then every rank gets
the dataset, shared across the local ranks.
"""

from __future__ import annotations


def toy_records() -> list[dict]:
    return [
        {"file_name": f"{i}.jpg", "image_id": i, "height": 4, "width": 6,
         "annotations": [{"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": 0}]}
        for i in range(9)
    ]


def prepare_then_share(rank: int, world_size: int) -> tuple[int, int, bool]:
    import torch.distributed as dist

    from catalog import DatasetCatalog
    from catalog.storage.sharing import this_rank_only

    DatasetCatalog.register("prepare_toy", toy_records)
    prepared = -1
    if rank == 0:
        with this_rank_only():
            prepared = len(DatasetCatalog.get("prepare_toy"))
        if DatasetCatalog.is_loaded("prepare_toy"):
            raise RuntimeError("this_rank_only() kept the records in the catalog")
    dist.barrier()
    shared = DatasetCatalog.get("prepare_toy")
    return prepared, len(shared), DatasetCatalog.is_loaded("prepare_toy")
