"""catmap samplers and datasets inside torchdata: ``StatefulDataLoader`` and ``torchdata.nodes``.

torchdata already saves *which* indices come next (catmap batch samplers are ``Stateful``);
the glue here also sends each index with its sample seed, as :class:`samplers.ResumableLoader`
does, so augmentations after a restore match the uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from catalog._common import missing_dependency

from .build import trivial_batch_collator
from .loader import ResumableLoader, SampleSeededDataset, WorkerSeeder, sample_seed
from .state import MAX_SEED, check_int, check_state, make_state

__all__ = ["MapKeys", "SampleKeysNode", "SeededBatchSampler", "to_stateful_dataloader"]

try:
    from torchdata.nodes import BaseNode
except ImportError:  # the optional extra
    raise missing_dependency("torchdata", "torchdata", "samplers.torchdata_support") from None

class SeededBatchSampler:
    """Batches of ``(index, sample seed)`` keys from a catmap batch sampler (for a
    :class:`samplers.SampleSeededDataset`).

    Example:
        >>> from samplers import TrainingSampler, ResumableBatchSampler
        >>> keys = SeededBatchSampler(ResumableBatchSampler(
        ...     TrainingSampler(6, seed=1, rank=0, world_size=1), 3), seed=1)
        >>> it = iter(keys); _ = next(it); state = keys.state_dict()
        >>> again = SeededBatchSampler(ResumableBatchSampler(
        ...     TrainingSampler(6, seed=1, rank=0, world_size=1), 3), seed=1)
        >>> again.load_state_dict(state); next(iter(again)) == next(it)
        True
    """

    def __init__(self, batch_sampler: Any, *, seed: int) -> None:
        if not callable(getattr(batch_sampler, "iter_with_positions", None)):
            raise TypeError(f"SeededBatchSampler needs a batch sampler with iter_with_positions() "
                            f"(ResumableBatchSampler, GroupedBatchSampler); "
                            f"{type(batch_sampler).__name__} has none")
        self.batch_sampler = batch_sampler
        self.seed = check_int(seed, "seed", "SeededBatchSampler", 0, MAX_SEED)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        seed = self.seed
        for batch in self.batch_sampler.iter_with_positions():
            yield [(index, sample_seed(seed, position)) for index, position in batch]

    def __len__(self) -> int:
        return len(self.batch_sampler)  # TypeError for an endless sampler, as torch expects

    def state_dict(self) -> dict[str, Any]:
        return make_state("SeededBatchSampler", batch_sampler=self.batch_sampler.state_dict(),
                          seed=self.seed)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = check_state(state_dict, "SeededBatchSampler", ["batch_sampler", "seed"])
        seed = check_int(state["seed"], "seed", "SeededBatchSampler", 0, MAX_SEED)
        self.batch_sampler.load_state_dict(state["batch_sampler"])
        self.seed = seed

    def __repr__(self) -> str:
        return f"SeededBatchSampler({self.batch_sampler!r}, seed={self.seed})"


def to_stateful_dataloader(loader: Any, *, num_workers: int | None = None,
                           prefetch_factor: int | None = None, persistent_workers: bool = False,
                           multiprocessing_context: Any = None, snapshot_every_n_steps: int = 1,
                           collate_fn: Callable[[list[Any]], Any] | None = None) -> Any:
    """A torchdata ``StatefulDataLoader`` yielding the batches of a catmap training loader.

    Example::

        loader = build_detection_train_loader("shapes", mapper=mapper, total_batch_size=4, seed=0)
        stateful = to_stateful_dataloader(loader, num_workers=2)
        state = stateful.state_dict()          # save with the checkpoint
        stateful.load_state_dict(state)        # in the resumed run, before iter()
    """
    from torchdata.stateful_dataloader import StatefulDataLoader

    if not isinstance(loader, ResumableLoader) or not loader.sample_seeds:
        raise TypeError("to_stateful_dataloader needs a catmap training loader with sample seeds "
                        "(build_detection_train_loader / build_batch_data_loader over a catmap "
                        f"sampler), got {type(loader).__name__}")
    workers = loader.loader.num_workers if num_workers is None else num_workers
    rank = getattr(getattr(loader.batch_sampler, "sampler", None), "rank", 0)
    kwargs: dict[str, Any] = {
        "batch_sampler": SeededBatchSampler(loader.batch_sampler, seed=loader.seed),
        "num_workers": workers, "collate_fn": collate_fn or trivial_batch_collator,
        "worker_init_fn": WorkerSeeder(loader.seed, rank if isinstance(rank, int) else 0),
        "snapshot_every_n_steps": snapshot_every_n_steps,
    }
    if workers > 0:
        kwargs.update(persistent_workers=persistent_workers,
                      multiprocessing_context=multiprocessing_context)
        if prefetch_factor is not None:
            kwargs["prefetch_factor"] = prefetch_factor
    return StatefulDataLoader(SampleSeededDataset(loader.dataset), **kwargs)


class MapKeys:
    """Map a batch of ``(index, sample seed)`` keys (a picklable ``ParallelMapper`` map_fn).

    Example:
        >>> MapKeys(list(range(10)))([(3, 0), (4, 1)])
        [3, 4]
    """

    def __init__(self, dataset: Any, *, seed_globals: bool = True) -> None:
        if isinstance(dataset, SampleSeededDataset):
            dataset = dataset.dataset
        self.dataset = SampleSeededDataset(dataset, seed_globals=seed_globals)

    def __call__(self, keys: list[tuple[int, int]]) -> list[Any]:
        return [self.dataset[key] for key in keys]

    def __repr__(self) -> str:
        return f"MapKeys({self.dataset.dataset!r})"


class SampleKeysNode(BaseNode):  # type: ignore[misc]
    """A ``torchdata.nodes`` source: one item per batch of ``(index, sample seed)`` keys.

    Example::

        node = SampleKeysNode(ResumableBatchSampler(TrainingSampler(n, seed=0), 4), seed=0)
        node = tn.ParallelMapper(node, map_fn=MapKeys(mapped_dataset), num_workers=2,
                                 method="thread")
        loader = tn.Loader(tn.Prefetcher(node, prefetch_factor=2))
    """

    def __init__(self, batch_sampler: Any, *, seed: int) -> None:
        super().__init__()
        self.keys = SeededBatchSampler(batch_sampler, seed=seed)
        self._start = self.keys.state_dict()
        self._iterator: Iterator[list[tuple[int, int]]] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.keys.load_state_dict(initial_state if initial_state is not None else self._start)
        self._iterator = iter(self.keys)

    def next(self) -> list[tuple[int, int]]:
        if self._iterator is None:  # BaseNode calls reset() first; this is a fallback
            self.reset(None)
        return next(self._iterator)  # type: ignore[arg-type]

    def get_state(self) -> dict[str, Any]:
        return self.keys.state_dict()

