"""ResumableLoader: a DataLoader whose state counts the batches the caller received.

The batch sampler runs in the main process (as for any map-style DataLoader) and the index
batches go to the workers. Workers prefetch, so the sampler runs ahead of what the caller has
seen; the loader therefore records the batch sampler's state after each index batch and keeps
it until that batch is delivered. ``state_dict()`` returns the state after the last delivered
batch, whatever ``num_workers`` and ``prefetch_factor`` are.

With a catmap batch sampler (which reports each index's global stream position), every index
goes to the workers with its sample seed, ``sample_seed(seed, position)``, and the sample is
mapped with the augmentation generator seeded from it (:mod:`samplers.sample_seed`): the
augmented batches are then identical for any ``num_workers`` and after a restore.

Why not ``torchdata.stateful_dataloader.StatefulDataLoader`` as the base (issue 15)? It keeps
the same per-batch snapshots, but as observed with torchdata 0.11.0 (kept observed by
``tests/test_stateful_dataloader_limits.py``: a ``ResumableBatchSampler`` over a
``TrainingSampler`` fed to ``StatefulDataLoader``):

* its state is tied to ``num_workers``: a state saved with 2 workers loads with 2 (exact), but
  loading it with 3 fails on ``assert self._num_workers == state_dict["_num_workers"]`` and
  with 0 on "State doesn't contain key '_num_yielded'". A catmap state loads with any
  ``num_workers`` (and any world size: the position re-shards), which a changed machine or a
  debugging run with ``num_workers=0`` needs;
* resume is O(1) only with ``snapshot_every_n_steps=1``: with 50, a state taken after 40
  batches with 2 workers holds ``_steps_since_snapshot=40`` and ``load_state_dict`` re-reads
  and re-maps those 40 batches;
* a state is trusted: it is checked with ``assert`` while being applied, so a malformed or
  foreign state fails half-loaded; catmap checks the whole state (types, ranges, the
  configuration fingerprint) before changing anything and raises typed errors;
* its worker loop is its own (``torchdata.stateful_dataloader.worker``), while the slab
  transport (:mod:`samplers.transport`), the typed worker errors and timeouts
  (:mod:`samplers.worker_errors`) are built around torch's ``DataLoader``; what the base class
  would save us is the pending-state queue of :class:`_TrackingBatchSampler` (a few lines).

Users of ``StatefulDataLoader`` keep catmap's per-sample seeds through
:mod:`samplers.torchdata_support` (``to_stateful_dataloader``).

``mappers.ToIterableDataset`` is the other way to run a sampler (detectron2's API, kept for
code that moves over): the sampler runs inside every worker and each keeps its share, so the
main process never holds a position and there is nothing to save; the builders use this
module instead.
"""

from __future__ import annotations

import collections
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, Sampler

from catalog import validation
from catalog.seeding import torch_generator
from mappers.image_io import limit_opencv_threads

from .errors import NotResumableError
from .sample_seed import SampleSeededDataset, sample_seed
from .slab_pool import DEFAULT_SLAB_BYTES
from .state import check_state, is_legacy_state, is_stateful, make_state
from .state_fields import (
    LEGACY_NOTE,
    MAX_POSITION,
    MAX_SEED,
    LoadNotes,
    check_config,
    check_int,
    prepare_nested_load,
)
from .transport import ChainedWorkerInit, LoaderTransport
from .worker_seed import WorkerSeeder

__all__ = ["ResumableLoader"]

logger = logging.getLogger(__name__)


def _as_list(batch: list[Any]) -> list[Any]:
    """The default collate_fn: a batch is the list of its samples."""
    return batch


class _TrackingBatchSampler(Sampler[list[Any]]):
    """Passes batches through and queues the inner batch sampler's state after each one.

    With ``seed`` set, batches come from the inner sampler's ``iter_with_positions()`` and
    each index is sent as ``(index, sample_seed(seed, position))``; with ``defer_seeds`` as
    ``(index, position, seed)``, and the worker derives the sample seed
    (:class:`samplers.transport.WorkerDataset`), off the main process.
    """

    def __init__(self, inner: Any, track: bool, seed: int | None) -> None:
        self.inner = inner
        self.track = track
        self.seed = seed
        self.defer_seeds = False
        self.pending: collections.deque[dict[str, Any]] = collections.deque()

    def __iter__(self) -> Iterator[list[Any]]:
        seed = self.seed
        if seed is None:
            batches: Iterator[list[Any]] = iter(self.inner)
        elif self.defer_seeds:
            batches = (
                [(index, position, seed) for index, position in batch]
                for batch in self.inner.iter_with_positions()
            )
        else:
            batches = (
                [(index, sample_seed(seed, position)) for index, position in batch]
                for batch in self.inner.iter_with_positions()
            )
        for batch in batches:
            if self.track:
                self.pending.append(self.inner.state_dict())
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


class ResumableLoader:
    """Iterate batches of a map-style dataset; save and restore the position exactly.

    Built by :func:`samplers.build_batch_data_loader` and
    :func:`samplers.build_detection_train_loader`; ``loader.loader`` is the torch DataLoader.

    Args:
        dataset: a map-style dataset.
        batch_sampler: yields lists of indices (resumable for ``state_dict``).
        num_workers, collate_fn, persistent_workers, prefetch_factor,
            multiprocessing_context: passed on to ``torch.utils.data.DataLoader``.
        pin_memory: pin batches for CUDA (the slab transport registers each slab once; the
            dataloader transport copies each batch). Without CUDA a warning, nothing pinned.
        timeout: seconds to wait for one batch from the workers before
            ``samplers.errors.LoaderTimeoutError`` (naming the worker and the dataset index
            it is mapping); None: 300 s with workers; 0: wait forever.
        worker_init_fn: called in each worker after catmap's own seeding.
        transport: ``"auto"`` (default: ``"slab"`` with workers on Linux, see
            :mod:`samplers.transport`), ``"slab"`` or ``"dataloader"`` (torch's own path).
        slabs, slab_bytes: slab transport pool size (default ``num_workers *
            prefetch_factor + 4``) and initial sparse size of each slab.
        reseed_each_pass: seed workers with the pass number too (False: always pass 0).
        seed: seeds the workers (with ``rank`` and the pass number), the DataLoader's own
            generator and the per-sample augmentation generators, so global RNG state is
            never used. A loaded state's seed replaces it.
        rank: this process's rank.
        sample_seeds: map each sample with the augmentation generator seeded from
            ``(seed, global stream position)`` (see :mod:`samplers.sample_seed`). None (the
            default) does so when the batch sampler has ``iter_with_positions`` (the catmap
            batch samplers); True requires it; False leaves augmentations to the per-worker
            generator.

    Raises:
        ValueError: ``num_workers`` is not an int >= 0.
        TypeError: ``sample_seeds=True`` with a batch sampler without ``iter_with_positions``.
        SamplerConfigError: an unknown ``transport`` or a negative ``timeout``.

    Iterating raises a worker's exception with its own type and fields (``[DataLoader worker
    W, dataset index I]`` added to the message), ``LoaderTimeoutError`` after ``timeout`` and
    ``samplers.worker_errors.WorkerExitedError`` when a worker dies.

    Example:
        >>> from samplers import TrainingSampler, ResumableBatchSampler
        >>> batches = ResumableBatchSampler(TrainingSampler(8, seed=0, rank=0, world_size=1), 2)
        >>> loader = ResumableLoader(list(range(8)), batches, collate_fn=list, seed=0)
        >>> it = iter(loader); _ = next(it); state = loader.state_dict(); state["batches"]
        1
    """

    def __init__(
        self,
        dataset: Any,
        batch_sampler: Any,
        *,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        multiprocessing_context: Any = None,
        seed: int = 0,
        rank: int = 0,
        sample_seeds: bool | None = None,
        timeout: float | None = None,
        worker_init_fn: Callable[[int], Any] | None = None,
        transport: str = "auto",
        slabs: int | None = None,
        slab_bytes: int = DEFAULT_SLAB_BYTES,
        reseed_each_pass: bool = True,
    ) -> None:
        validation.check_int(
            num_workers, "num_workers", minimum=0, error=ValueError, where="ResumableLoader"
        )
        positioned = callable(getattr(batch_sampler, "iter_with_positions", None))
        if sample_seeds and not positioned:
            raise TypeError(
                f"ResumableLoader: sample_seeds=True needs a batch sampler with "
                f"iter_with_positions() (ResumableBatchSampler, GroupedBatchSampler); "
                f"{type(batch_sampler).__name__} has none"
            )
        self.sample_seeds = positioned if sample_seeds is None else bool(sample_seeds)
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.seed = int(seed)
        inner = getattr(batch_sampler, "sampler", None)
        self._resumable = is_stateful(batch_sampler) and (inner is None or is_stateful(inner))
        self._tracker = _TrackingBatchSampler(
            batch_sampler, self._resumable, self.seed if self.sample_seeds else None
        )
        self._seeder = WorkerSeeder(seed, rank, 0)
        self._reseed_each_pass = bool(reseed_each_pass)
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(
                f"ResumableLoader: worker_init_fn must be callable, got {worker_init_fn!r}"
            )
        self.transport = LoaderTransport(
            transport=transport, num_workers=num_workers, prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers, pin_memory=pin_memory, timeout=timeout,
            slabs=slabs, slab_bytes=slab_bytes,
        )
        weakref.finalize(self, LoaderTransport.close, self.transport)
        mapped = SampleSeededDataset(dataset) if self.sample_seeds else dataset
        self._tracker.defer_seeds = num_workers > 0  # workers derive the sample seeds
        kwargs = self.transport.dataloader_kwargs(
            mapped, self._tracker, collate_fn if collate_fn is not None else _as_list
        )
        kwargs["num_workers"] = num_workers
        kwargs["worker_init_fn"] = (
            self._seeder if worker_init_fn is None
            else ChainedWorkerInit(self._seeder, worker_init_fn)
        )
        kwargs["generator"] = torch_generator(seed, rank)
        if num_workers > 0:
            kwargs["persistent_workers"] = persistent_workers
            kwargs["multiprocessing_context"] = multiprocessing_context
            if prefetch_factor is not None:
                kwargs["prefetch_factor"] = prefetch_factor
        self.loader = DataLoader(**kwargs)
        self._batches = 0
        self._iteration = 0
        self._delivered: dict[str, Any] | None = None

    @property
    def batches_delivered(self) -> int:
        """Batches handed to the caller so far (including those before a loaded state)."""
        return self._batches

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        if self._resumable:
            if self._delivered is None:
                self._delivered = self.batch_sampler.state_dict()
            else:
                # Continue after the last delivered batch: a batch sampler's iter() restarts
                # from its origin, and a previous iterator may have prefetched batches nobody
                # received.
                self.batch_sampler.load_state_dict(self._delivered)
            self._tracker.pending.clear()
        self._iteration += 1
        self._seeder.pass_index = self._iteration if self._reseed_each_pass else 0
        limit_opencv_threads()  # before workers fork: OpenCV's pool deadlocks forked workers
        return self._deliver(self.transport.iterate(self.loader))

    def _deliver(self, iterator: Iterator[Any]) -> Iterator[Any]:
        pending = self._tracker.pending
        for batch in iterator:
            if self._resumable:
                self._delivered = pending.popleft()
            self._batches += 1
            yield batch
            # the caller holds the batch as long as it likes; this frame must not (its slab
            # is reused once nothing references the batch, and a traceback keeps frames)
            del batch

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch the caller received, with the configuration
        fingerprint (``"config"``) that :meth:`load_state_dict` compares.

        Raises:
            NotResumableError: the batch sampler (or its sampler) has no ``state_dict``.
        """
        if not self._resumable:
            raise NotResumableError(
                f"ResumableLoader: {self._sampler_name()} has no state_dict(); "
                "build the loader with a catmap training sampler for exact resume"
            )
        sampler_state = (
            self._delivered if self._delivered is not None else self.batch_sampler.state_dict()
        )
        return make_state(
            "ResumableLoader",
            batches=self._batches,
            iteration=self._iteration,
            seed=self.seed,
            batch_sampler=sampler_state,
            config=self._state_config(),
        )

    def _state_config(self) -> dict[str, Any]:
        """The loader's part of the configuration fingerprint."""
        return {"sample_seeds": bool(self.sample_seeds)}

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Continue after the last batch delivered when ``state_dict`` was saved; call
        ``iter()`` afterwards. The state's seed replaces the constructor's, for the sample and
        worker seeds; worker seeds continue with the next pass number.

        The whole state (the batch sampler's and sampler's included) is checked before
        anything changes: a rejected state leaves the loader where it was.

        Args:
            state_dict: a state from :meth:`state_dict` (untrusted input).
            strict: raise :class:`StateMismatchError` when the state was saved by a loader,
                batch sampler or sampler configured differently; False loads it anyway,
                logging one warning.

        Raises:
            NotResumableError: the batch sampler has no ``load_state_dict``.
            StateMismatchError: the configuration differs (``key`` names the field).
            SamplerStateError / ReshardError: the state does not fit this loader.

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
        notes = LoadNotes()
        name = "ResumableLoader"
        if is_legacy_state(state_dict):
            state = check_state(
                state_dict, name, ["batch_sampler", "batches"], ["iteration", "seed"]
            )
            notes.add(LEGACY_NOTE)
        else:
            state = check_state(
                state_dict, name, ["batch_sampler", "batches", "iteration", "seed", "config"], ()
            )
            check_config(state["config"], self._state_config(), name, strict=strict, notes=notes)
        if not self._resumable:
            raise NotResumableError(
                f"ResumableLoader: {self._sampler_name()} has no load_state_dict()"
            )
        phrase = "an int >= 0 and below 2**62"
        batches = check_int(state["batches"], "batches", name, 0, MAX_POSITION, phrase=phrase)
        iteration = check_int(
            state.get("iteration", 0), "iteration", name, 0, MAX_POSITION, phrase=phrase
        )
        seed = check_int(
            state.get("seed", self.seed), "seed", name, 0, MAX_SEED, phrase="an int in [0, 2**64)"
        )
        load_batches = prepare_nested_load(
            self.batch_sampler, state["batch_sampler"], strict=bool(strict), notes=notes
        )
        notes.emit(name)
        load_batches()
        self._tracker.pending.clear()
        self._delivered = self.batch_sampler.state_dict()  # re-saved: trusted from now on
        self._batches = batches
        self._iteration = iteration
        self.seed = seed
        self._seeder.seed = seed
        if self.sample_seeds:
            self._tracker.seed = seed
        logger.info("ResumableLoader: resumed after %d delivered batches", batches)

    def _sampler_name(self) -> str:
        inner = getattr(self.batch_sampler, "sampler", None)
        name = type(self.batch_sampler).__name__
        return f"{name} over {type(inner).__name__}" if inner is not None else name

    def __repr__(self) -> str:
        return (
            f"ResumableLoader(batch_sampler={type(self.batch_sampler).__name__}, "
            f"num_workers={self.loader.num_workers}, transport={self.transport.kind!r}, "
            f"batches_delivered={self._batches})"
        )
