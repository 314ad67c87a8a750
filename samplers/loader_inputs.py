"""What the loader builders accept as a dataset: names, lists, torch datasets, iterables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from catalog.config_values import is_config_container, plain_container, plain_names
from catalog.storage.records import SerializedList
from mappers.datasets import records_of

from .loader_config import LoaderCallError

__all__ = ["resolve_dataset"]

def resolve_dataset(
    dataset: Any, mapper: Callable[[Any], Any] | None, *, seed: int, for_training: bool
) -> tuple[Any, Sequence[dict] | None]:
    """(mapped dataset, records or None) from a name, names, a list or a torch Dataset.

    A list of items that are not all dicts is a dataset of those items (as in detectron2);
    an IterableDataset is mapped as it is (``MapDataset`` skips its None results).
    """
    from mappers.datasets import DatasetFromList, MapDataset

    names = plain_names(dataset)  # a ListConfig / any Sequence of names: several datasets
    if names is not None:
        dataset = names
    elif is_config_container(dataset):
        dataset = plain_container(dataset)
    records: Sequence[dict] | None
    if isinstance(dataset, str) or (
        isinstance(dataset, (list, tuple))
        and dataset
        and all(isinstance(name, str) for name in dataset)
    ):
        from catalog.detection_dicts import get_detection_dataset_dicts

        records = get_detection_dataset_dicts(dataset, filter_empty=for_training)
    elif isinstance(dataset, SerializedList):
        records = dataset
    elif isinstance(dataset, (list, tuple)):
        if not dataset:
            raise ValueError("the dataset is an empty list: nothing to load")
        records = list(dataset)
    elif isinstance(dataset, (Dataset, IterableDataset)) or (
        hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    ):
        records = None
    else:
        raise LoaderCallError(
            "dataset must be a name, a list of names, a list of records or a torch "
            f"Dataset, got {type(dataset).__name__}",
            argument="dataset",
        )
    if records is not None:
        base = DatasetFromList(records, copy=False)
        # a list is serialized by DatasetFromList: read group ids from its columns instead
        records = base.records if isinstance(base.records, SerializedList) else records
    else:
        base = dataset
        records = records_of(dataset)  # the dataset's own `records`, see that module
    mapped = MapDataset(base, mapper, seed=seed) if mapper is not None else base
    return mapped, records
