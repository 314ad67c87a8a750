"""ResumableLoader: a DataLoader whose state counts the batches the caller received, and the
seeding of samples and workers.

Workers prefetch, so the batch sampler's state after each index batch waits in a queue until
that batch is delivered; without workers nothing is prefetched and the batch sampler's own
state is the delivered position. Each sample is mapped in ``sample_scope(sample_seed(seed, position))``:
batches are the same for any ``num_workers``, after a restore and on any world size.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import operator
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from catalog import _common
from catalog._common import derive_seed, torch_generator
from mappers.image_io import limit_opencv_threads
from mappers.random_state import (
    SampleRandomness, sample_scope, sample_seed, seed_generator, seed_global_rngs,
)

from .errors import NotResumableError
from .slabs import DEFAULT_SLAB_BYTES
from .state import (
    MAX_POSITION, MAX_SEED, Notes, Stateful, check_config, check_int, check_state, make_state,
    prepare_nested_load,
)
from .transport import ChainedWorkerInit, LoaderTransport, trivial_batch_collator

logger = logging.getLogger(__name__)

__all__ = ["ResumableLoader", "SampleSeededDataset", "WorkerSeeder", "sample_seed",
           "seed_this_process", "trivial_batch_collator", "worker_init_reset_seed"]


def seed_this_process(seed: int) -> None:
    """Seed ``random``, numpy, torch (all devices) and the augmentation generator from one seed."""
    seed_global_rngs(derive_seed(seed, 0), all_torch_devices=True)
    seed_generator(derive_seed(seed, 3))


def worker_init_reset_seed(worker_id: int) -> None:
    """A ``worker_init_fn`` spreading torch's worker seed to numpy, ``random`` and augmentations."""
    seed_this_process(derive_seed(torch.initial_seed(), worker_id))


@dataclasses.dataclass
class WorkerSeeder:
    """A picklable ``worker_init_fn`` seeding worker ``w`` from ``(seed, rank, w, pass_index)``.

    Example:
        >>> WorkerSeeder(1, 0).worker_seed(0) != WorkerSeeder(1, 0).worker_seed(1)
        True
    """

    seed: int
    rank: int
    pass_index: int = 0

    def worker_seed(self, worker_id: int) -> int:
        return derive_seed(self.seed, self.rank, worker_id, self.pass_index)

    def __call__(self, worker_id: int) -> None:
        seed_this_process(self.worker_seed(worker_id))


@dataclasses.dataclass(eq=False)
class SampleSeededDataset:
    """``ds[(i, s)]`` is ``dataset[i]`` computed inside ``sample_scope(s)``, ``ds[(i, p, seed)]``
    the same with ``s = sample_seed(seed, p)`` (the loader's keys); an int key passes.

    Example:
        >>> from mappers.random_state import get_generator
        >>> class Noisy:
        ...     def __len__(self): return 3
        ...     def __getitem__(self, index): return float(get_generator().random())
        >>> ds = SampleSeededDataset(Noisy())
        >>> ds[(0, 7)] == ds[(2, 7)] != ds[(0, 8)]
        True
    """

    dataset: Any
    seed_globals: bool = dataclasses.field(default=True, kw_only=True)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        with sample_scope(self._seed(key), seed_globals=self.seed_globals):
            if len(key) == 3 and type(key[1]) is SampleRandomness and key[2] is not None:
                return self.dataset.finish(operator.index(key[0]), key[2])
            return self.dataset[operator.index(key[0])]

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        return list(map(self.__getitem__, self.prepare_keys(keys)))

    def prepare_keys(self, keys: list[Any],
                     progress: Callable[[int], None] | None = None) -> list[Any]:
        """A batch's keys with their randomness (``(index, SampleRandomness, prepared)``), and,
        for a ``MapDataset`` of a mapper using no global RNG, the pixel-free part of each
        sample (``MapDataset.prepare``), then the images of all (``MapDataset.read``); each
        calls ``progress(index)`` first (both may read files): between two images' decode and
        resize, Python costs a worker several times as much, so the rest is left to run warm.

        Example:
            >>> (key,) = SampleSeededDataset([5, 6]).prepare_keys([(1, 0, 3)])
            >>> key[0], type(key[1]).__name__, key[2]
            (1, 'SampleRandomness', None)
        """
        ahead = getattr(self.dataset, "prepare", None) if not self.seed_globals else None
        prepared = []
        for key in keys:
            if not isinstance(key, tuple):
                prepared.append(key)
                continue
            seed = self._seed(key)
            sample = SampleRandomness(seed, seed_globals=False) if type(seed) is int else seed
            part = None
            if ahead is not None and sample.attempt == 0:
                if progress is not None:  # it reads the image file
                    progress(key[0])
                with sample_scope(sample, seed_globals=False):
                    part = ahead(operator.index(key[0]))
                if part is None:  # it drew nothing that counts: the sample starts again
                    sample = SampleRandomness(sample.seed, seed_globals=False)
            prepared.append((key[0], sample, part))
        read = getattr(self.dataset, "read", None) if ahead is not None else None
        for number, key in enumerate(prepared if read is not None else ()):
            if type(key) is tuple and key[2] is not None:
                if progress is not None:
                    progress(key[0])
                prepared[number] = (key[0], key[1], read(key[2]))
        return prepared

    @staticmethod
    def _seed(key: tuple[Any, ...]) -> int | SampleRandomness:
        if len(key) in (2, 3) and type(key[1]) is SampleRandomness:  # from prepare_keys
            return key[1]
        if len(key) == 3:  # (index, global position, loader seed)
            return sample_seed(operator.index(key[2]), operator.index(key[1]))
        if len(key) == 2:
            return operator.index(key[1])
        raise TypeError(f"SampleSeededDataset: a key is an index, an (index, seed) pair or an "
                        f"(index, position, seed) triple, got {key!r}")


@dataclasses.dataclass(eq=False)
class _TrackingBatchSampler(Sampler[list[Any]]):
    """Passes batches through as ``(index, position, seed)`` keys (plain indices when ``seed``
    is None), queueing the inner state after each when ``track`` (workers prefetch)."""

    inner: Any
    track: bool
    seed: int | None
    pending: collections.deque[dict[str, Any]] = dataclasses.field(default_factory=collections.deque)

    def __iter__(self) -> Iterator[list[Any]]:
        seed, inner = self.seed, self.inner
        for batch in inner if seed is None else inner.iter_with_positions():
            if self.track:
                self.pending.append(inner.state_dict())
            if seed is not None:  # (index, position, seed) keys, built without a comprehension
                batch = list(zip(*zip(*batch), itertools.repeat(seed, len(batch))))
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


class ResumableLoader:
    """Iterate batches of a map-style dataset; save and restore the position exactly.
    ``loader.loader`` is the torch DataLoader; ``seed`` seeds workers and samples.

    Example:
        >>> from samplers import TrainingSampler, ResumableBatchSampler
        >>> batches = ResumableBatchSampler(TrainingSampler(8, seed=0, rank=0, world_size=1), 2)
        >>> loader = ResumableLoader(list(range(8)), batches, collate_fn=list, seed=0)
        >>> it = iter(loader); _ = next(it); loader.state_dict()["batches"]
        1
    """

    def __init__(self, dataset: Any, batch_sampler: Any, *, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, pin_memory: bool = False,
                 persistent_workers: bool = False, prefetch_factor: int | None = None,
                 multiprocessing_context: Any = None, seed: int = 0, rank: int = 0,
                 sample_seeds: bool | None = None, timeout: float | None = None,
                 worker_init_fn: Callable[[int], Any] | None = None, transport: str = "auto",
                 slabs: int | None = None, slab_bytes: int = DEFAULT_SLAB_BYTES,
                 reseed_each_pass: bool = True) -> None:
        _common.check_int(num_workers, "num_workers", minimum=0, error=ValueError,
                          where="ResumableLoader")
        positioned = callable(getattr(batch_sampler, "iter_with_positions", None))
        if sample_seeds and not positioned:
            raise TypeError(f"ResumableLoader: sample_seeds=True needs a batch sampler with "
                            f"iter_with_positions(); {type(batch_sampler).__name__} has none")
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"ResumableLoader: worker_init_fn must be callable, got {worker_init_fn!r}")
        self.sample_seeds = positioned if sample_seeds is None else bool(sample_seeds)
        self.dataset, self.batch_sampler, self.seed = dataset, batch_sampler, int(seed)
        inner = getattr(batch_sampler, "sampler", None)
        self._resumable = isinstance(batch_sampler, Stateful) and (inner is None or isinstance(inner, Stateful))
        # without workers nothing is prefetched: the batch sampler stands after the delivered batch
        self._tracker = _TrackingBatchSampler(batch_sampler, self._resumable and num_workers > 0,
                                              self.seed if self.sample_seeds else None)
        self._seeder = WorkerSeeder(int(seed), int(rank))
        self._reseed_each_pass = bool(reseed_each_pass)
        self.transport = LoaderTransport(
            transport=transport, num_workers=num_workers, prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers, pin_memory=pin_memory, timeout=timeout,
            slabs=slabs, slab_bytes=slab_bytes)
        # a MapDataset of catmap's own DatasetMapper draws only from the sample's generator
        seed_globals = getattr(dataset, "uses_global_rngs", True) is not False
        mapped = (SampleSeededDataset(dataset, seed_globals=seed_globals) if self.sample_seeds
                  else dataset)
        collate_fn = collate_fn or trivial_batch_collator
        if num_workers == 0:
            kwargs = {"dataset": mapped, "batch_sampler": self._tracker, "collate_fn": collate_fn,
                      "pin_memory": pin_memory}
        else:
            weakref.finalize(self, LoaderTransport.close, self.transport)
            kwargs = self.transport.dataloader_kwargs(mapped, self._tracker, collate_fn)
        kwargs.update(num_workers=num_workers, generator=torch_generator(seed, rank),
                      worker_init_fn=self._seeder if worker_init_fn is None
                      else ChainedWorkerInit(self._seeder, worker_init_fn))
        if num_workers > 0:
            kwargs.update(persistent_workers=persistent_workers,
                          multiprocessing_context=multiprocessing_context)
            if prefetch_factor is not None:
                kwargs["prefetch_factor"] = prefetch_factor
        self.loader = DataLoader(**kwargs)
        self._batches = self._iteration = 0
        self._delivered: dict[str, Any] | None = None

    @property
    def batches_delivered(self) -> int:
        return self._batches

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        # continue after the last delivered batch (prefetched ones were not)
        if self._tracker.track:
            if self._delivered is None:
                self._delivered = self.batch_sampler.state_dict()
            else:
                self.batch_sampler.load_state_dict(self._delivered)
            self._tracker.pending.clear()
        elif self._resumable and self._iteration:  # no workers: the current state is delivered
            self.batch_sampler.load_state_dict(self.batch_sampler.state_dict())
        self._iteration += 1
        self._seeder.pass_index = self._iteration if self._reseed_each_pass else 0
        if self.loader.num_workers == 0:
            return self._deliver(iter(self.loader))
        limit_opencv_threads()  # before workers fork: OpenCV's pool deadlocks forked workers
        return self._deliver(self.transport.iterate(self.loader))

    def _deliver(self, iterator: Iterator[Any]) -> Iterator[Any]:
        pending, track = self._tracker.pending, self._tracker.track
        for batch in iterator:
            if track:
                self._delivered = pending.popleft()
            self._batches += 1
            yield batch
            del batch  # the slab is reused once nothing references the batch

    def _not_resumable(self, method: str) -> NotResumableError:
        inner = getattr(self.batch_sampler, "sampler", None)
        name = type(self.batch_sampler).__name__ + (f" over {type(inner).__name__}" if inner is not None else "")
        return NotResumableError(f"ResumableLoader: {name} has no {method}(); build the loader with "
                                 "a catmap training sampler for exact resume")

    def state_dict(self) -> dict[str, Any]:
        """The position after the last delivered batch, with the fingerprint."""
        if not self._resumable:
            raise self._not_resumable("state_dict")
        sampler_state = self._delivered if self._delivered is not None else self.batch_sampler.state_dict()
        return make_state("ResumableLoader", batches=self._batches, iteration=self._iteration,
                          seed=self.seed, batch_sampler=sampler_state,
                          config={"sample_seeds": bool(self.sample_seeds)})

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Continue after the last batch delivered when the state was saved (checked first).

        Example:
            >>> from samplers import TrainingSampler, ResumableBatchSampler
            >>> def make():
            ...     s = TrainingSampler(8, seed=0, rank=0, world_size=1)
            ...     return ResumableLoader(list(range(8)), ResumableBatchSampler(s, 2),
            ...                            collate_fn=list, seed=0)
            >>> a = make(); it = iter(a); _ = next(it)
            >>> b = make(); b.load_state_dict(a.state_dict()); next(iter(b)) == next(it)
            True
        """
        notes, name = Notes(), "ResumableLoader"
        state = check_state(state_dict, name, ["batch_sampler", "batches", "iteration", "seed", "config"])
        if not self._resumable:
            raise self._not_resumable("load_state_dict")
        check_config(state["config"], {"sample_seeds": bool(self.sample_seeds)}, name,
                     strict=strict, notes=notes)
        batches = check_int(state["batches"], "batches", name, 0, MAX_POSITION)
        iteration = check_int(state["iteration"], "iteration", name, 0, MAX_POSITION)
        seed = check_int(state["seed"], "seed", name, 0, MAX_SEED)
        load_batches = prepare_nested_load(self.batch_sampler, state["batch_sampler"],
                                           strict=bool(strict), notes=notes)
        notes.emit(name)
        load_batches()
        self._tracker.pending.clear()
        if self._tracker.track:
            self._delivered = self.batch_sampler.state_dict()  # re-saved: trusted from now on
        self._batches, self._iteration = batches, iteration
        self.seed = self._seeder.seed = seed
        if self.sample_seeds:
            self._tracker.seed = seed
        logger.info("ResumableLoader: resumed after %d delivered batches", batches)

    def __repr__(self) -> str:
        return (f"ResumableLoader(batch_sampler={type(self.batch_sampler).__name__}, num_workers="
                f"{self.loader.num_workers}, transport={self.transport.kind!r}, "
                f"batches_delivered={self._batches})")
