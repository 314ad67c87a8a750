"""A Lightning ``LightningDataModule`` over catmap datasets, resumable through checkpoints.

Example::

    datamodule = CatmapDataModule("shapes_train", mapper=DatasetMapper(True, augmentations=[]),
                                  total_batch_size=8, seed=0, num_workers=2)
    trainer = lightning.Trainer(max_steps=1000, strategy="ddp", devices=2)
    trainer.fit(model, datamodule=datamodule)                       # checkpoints hold the position
    trainer.fit(model, datamodule=datamodule, ckpt_path="last.ckpt")  # resumes exactly
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch.distributed as dist

from catalog import DatasetCatalog
from catalog._common import is_config_container, missing_dependency, plain_container, plain_names
from catalog.dataset_catalog import get_detection_dataset_dicts
from catalog.storage.sharing import this_rank_only

from .build import build_detection_test_loader, build_detection_train_loader
from .stream import get_rank, get_world_size
from .errors import NotResumableError, SamplerStateError
from .registry import build_train_sampler
from .state import check_int

try:
    from lightning.pytorch import LightningDataModule
except ImportError:  # the optional extra
    raise missing_dependency("lightning", "lightning", "samplers.lightning_datamodule") from None

__all__ = ["CatmapDataModule"]

logger = logging.getLogger(__name__)

_FORMAT = "catmap.CatmapDataModule/1"
_MAX_WORLD = 1 << 20


class _TrainBatches:
    """The loader's batches, each one's loader state queued until Lightning trains on it."""

    def __init__(self, owner: CatmapDataModule, loader: Any) -> None:
        self.owner = owner
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        owner, loader = self.owner, self.loader
        if not owner._resumable:
            yield from loader
            return
        if owner._pending and owner._trained_state is not None:
            # an earlier iterator fetched batches that were never trained on: go back
            loader.load_state_dict(owner._trained_state)
        owner._pending.clear()
        owner._trained_state = loader.state_dict()
        for batch in loader:
            owner._pending.append(loader.state_dict())
            yield batch

    def __len__(self) -> int:
        return len(self.loader)  # TypeError for the endless loader: Lightning reads "infinite"


class CatmapDataModule(LightningDataModule):
    """Training (and validation) batches of catmap datasets, resumable through checkpoints.

    Example:
        >>> records = [{"file_name": f"{i}.jpg", "height": 4, "width": 6} for i in range(8)]
        >>> dm = CatmapDataModule(records, mapper=None, total_batch_size=2, seed=0)
        >>> batches = iter(dm.train_dataloader())
        >>> len(next(batches))
        2
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("prepare_data")
        if own is not None and not getattr(own, "_catmap_this_rank_only", False):
            cls.prepare_data = _on_this_rank_only(own)  # type: ignore[method-assign]

    def __init__(
        self, train_dataset: Any, *, mapper: Callable[[Any], Any] | None, total_batch_size: int,
        seed: int | None = 0, sampler: Any = None, num_workers: int = 0,
        aspect_ratio_grouping: bool = True, loader_options: Mapping[str, Any] | None = None,
        val_dataset: Any = None, val_mapper: Callable[[Any], Any] | None = None,
        val_batch_size: int = 1,
    ) -> None:
        super().__init__()
        names = plain_names(train_dataset)
        if names is not None:
            train_dataset = names
        elif is_config_container(train_dataset):
            train_dataset = plain_container(train_dataset)
        self.train_dataset = train_dataset
        self.mapper = mapper
        self.total_batch_size = total_batch_size
        self.seed = seed
        self.sampler = plain_container(sampler) if is_config_container(sampler) else sampler
        self.num_workers = num_workers
        self.aspect_ratio_grouping = aspect_ratio_grouping
        self.loader_options = dict(plain_container(loader_options or {}))
        self.val_dataset = val_dataset
        self.val_mapper = val_mapper
        self.val_batch_size = val_batch_size
        self._loader: Any = None
        self._pending: collections.deque[dict[str, Any]] = collections.deque()
        self._trained_state: dict[str, Any] | None = None
        self._state_to_load: dict[str, Any] | None = None
        self._resumable = True

    # ------------------------------------------------------------------ data
    def _names(self) -> list[str]:
        if isinstance(self.train_dataset, str):
            return [self.train_dataset]
        return list(self.train_dataset) if plain_names(self.train_dataset) else []

    def prepare_data(self) -> None:
        """Load the file-backed datasets once on this rank, filling the cache (no collective)."""
        for name in self._names():
            if name in DatasetCatalog and DatasetCatalog.entry(name).source_files:
                DatasetCatalog.get(name)  # inside this_rank_only (see __init_subclass__)

    def _build_train_loader(self) -> Any:
        dataset = self.train_dataset
        sampler = self.sampler
        if sampler is not None:
            if isinstance(dataset, str) or self._names():
                dataset = get_detection_dataset_dicts(self._names())
            if isinstance(sampler, (str, Mapping)):
                sampler = build_train_sampler(sampler, dataset)
            elif callable(sampler):
                sampler = sampler(dataset)
        return build_detection_train_loader(
            dataset, mapper=self.mapper, sampler=sampler, total_batch_size=self.total_batch_size,
            aspect_ratio_grouping=self.aspect_ratio_grouping, num_workers=self.num_workers,
            seed=self.seed, **self.loader_options,
        )

    def train_dataloader(self) -> Any:
        """The endless training batches (lists of mapped samples); train with ``max_steps``."""
        if self._loader is None:
            self._loader = self._build_train_loader()
            self._pending.clear()
            self._trained_state = None
            try:
                self._loader.state_dict()
                self._resumable = True
            except NotResumableError as exc:
                self._resumable = False
                logger.warning("CatmapDataModule: checkpoints will not hold the position: %s", exc)
        if self._state_to_load is not None:
            self._loader.load_state_dict(self._state_to_load)
            self._state_to_load = None
            self._pending.clear()
            self._trained_state = self._loader.state_dict()
        return _TrainBatches(self, self._loader)

    def val_dataloader(self) -> Any:
        """Each validation record once over all ranks; [] without ``val_dataset``."""
        if self.val_dataset is None:
            return []
        return build_detection_test_loader(
            self.val_dataset, mapper=self.val_mapper, batch_size=self.val_batch_size
        )

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count a training batch as trained on (Lightning calls this just before the step)."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None and trainer.training and self._pending:
            self._trained_state = self._pending.popleft()
        return batch

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Every rank's loader position after the batches its training steps consumed."""
        # restored and not trained since: the state to load
        mine = self._trained_state if self._trained_state is not None else self._state_to_load
        world = get_world_size()
        gathered: list[Any] = [mine]
        if world > 1:
            gathered = [None] * world
            dist.all_gather_object(gathered, mine)
        if all(state is None for state in gathered):
            return {}
        return {"format": _FORMAT, "world_size": world, "per_rank": gathered}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a state saved by :meth:`state_dict` (untrusted input: checked)."""
        if not state_dict:
            return
        if not isinstance(state_dict, dict) or state_dict.get("format") != _FORMAT:
            found = state_dict.get("format") if isinstance(state_dict, dict) else None
            raise SamplerStateError(
                f"CatmapDataModule: not a CatmapDataModule state (format {found!r}, expected "
                f"{_FORMAT!r})"
            )
        name = "CatmapDataModule"
        saved_world = check_int(state_dict.get("world_size"), "world_size", name, 1, _MAX_WORLD)
        per_rank = state_dict.get("per_rank")
        if not isinstance(per_rank, list) or len(per_rank) != saved_world:
            raise SamplerStateError(
                f"{name}: 'per_rank' must be a list of {saved_world} loader states, got "
                f"{type(per_rank).__name__}"
            )
        rank, world = get_rank(), get_world_size()
        chosen = per_rank[rank] if world == saved_world else per_rank[0]
        if world != saved_world:
            logger.info(
                "CatmapDataModule: state saved on %d ranks, resuming on %d: re-sharding rank 0's",
                saved_world, world,
            )
        if chosen is None:
            return
        if not isinstance(chosen, dict):
            raise SamplerStateError(
                f"{name}: the loader state of rank {rank} is a {type(chosen).__name__}, not a dict"
            )
        self._state_to_load = chosen
        if self._loader is not None:  # built already: apply at the next train_dataloader()
            self._pending.clear()


def _on_this_rank_only(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def prepare_data(self: Any, *args: Any, **kwargs: Any) -> Any:
        with this_rank_only():
            return function(self, *args, **kwargs)

    prepare_data._catmap_this_rank_only = True  # type: ignore[attr-defined]
    return prepare_data


CatmapDataModule.prepare_data = _on_this_rank_only(  # type: ignore[method-assign]
    CatmapDataModule.__dict__["prepare_data"]
)
