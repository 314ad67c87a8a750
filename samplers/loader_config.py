"""detectron2-style config calls of the loader builders (``build_detection_train_loader(cfg)``).

detectron2's builders accept either explicit arguments or a config as their first argument;
with a config, the arguments are read from it (and explicit keyword arguments override them).
:func:`configurable` gives catmap's builders the same two forms, without depending on
detectron2: the config may be a yacs ``CfgNode``, an OmegaConf ``DictConfig`` or a plain nested
mapping with detectron2's keys (read through :mod:`catalog.config_access`). A missing key takes
detectron2's default value, except those that have none (``DATASETS.TRAIN``,
``DATALOADER.RANDOM_SUBSET_RATIO`` for the subset sampler): :class:`ConfigKeyError`.

Keys read (detectron2 defaults in brackets): ``DATASETS.TRAIN``, ``DATASETS.TEST`` [()],
``DATALOADER.SAMPLER_TRAIN`` ["TrainingSampler"], ``DATALOADER.REPEAT_THRESHOLD`` [0.0],
``DATALOADER.REPEAT_SQRT`` [True], ``DATALOADER.RANDOM_SUBSET_RATIO``,
``DATALOADER.NUM_WORKERS`` [4], ``DATALOADER.ASPECT_RATIO_GROUPING`` [True],
``DATALOADER.FILTER_EMPTY_ANNOTATIONS`` [True], ``SOLVER.IMS_PER_BATCH`` [16] (over all ranks),
``MODEL.KEYPOINT_ON`` [False] with ``MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE`` [1],
``MODEL.LOAD_PROPOSALS`` [False] with ``DATASETS.PROPOSAL_FILES_TRAIN`` / ``_TEST`` [()],
``SEED`` [-1: a shared random seed]; ``INPUT.*`` through ``mappers.DatasetMapper(cfg,
is_train)``. Proposal files are refused (detectron2 unpickles them): records carry their
proposals themselves.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from torch.utils.data import IterableDataset

from catalog.config_access import ConfigKeyError, config_value, is_detectron2_config
from catalog.errors import CatmapError
from catalog.validation import check_bool, check_float, check_int, check_str

from .errors import SamplerConfigError
from .inference import InferenceSampler
from .random_subset import RandomSubsetTrainingSampler
from .registry import build_train_sampler
from .repeat_factor import RepeatFactorTrainingSampler, repeat_factors_from_category_frequency
from .training import TrainingSampler

__all__ = [
    "ConfigKeyError",
    "LoaderCallError",
    "configurable",
    "inference_loader_from_config",
    "train_loader_from_config",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class LoaderCallError(SamplerConfigError):
    """A loader builder was called with a missing, unknown or malformed argument.

    A ``TypeError`` and a ``ValueError`` (through :class:`SamplerConfigError`).

    Attributes:
        argument: the argument's name (or the config key) involved, when known.
    """

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


def _bind(signature: inspect.Signature, owner: str, args: tuple, kwargs: dict) -> None:
    """Check a call against a signature; a mismatch raises LoaderCallError naming the argument."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        found = re.search(r"'([^']+)'", str(exc))
        argument = found.group(1) if found else ""
        accepted = ", ".join(signature.parameters)
        raise LoaderCallError(
            f"{owner}: {exc} (arguments: {accepted}; or a detectron2 config as the first "
            f"argument)",
            argument=argument,
        ) from None


def configurable(from_config: Callable[..., dict[str, Any]]) -> Callable[[F], F]:
    """Let a builder take a detectron2 config as its first argument, as detectron2's do.

    ``fn(cfg, *args, **kwargs)`` calls ``from_config(cfg, *args, **its_kwargs)`` with the
    keyword arguments ``from_config`` accepts and calls ``fn`` with what it returns, updated
    by the other keyword arguments (explicit arguments win). Any other call goes to ``fn`` as
    it is. A call that fits neither signature raises :class:`LoaderCallError` naming the
    argument instead of a bare ``TypeError``.

    Example:
        >>> def _from_config(cfg, scale=1):
        ...     return {"size": config_value(cfg, "INPUT.SIZE") * scale}
        >>> @configurable(_from_config)
        ... def build(size, *, name="x"):
        ...     return name, size
        >>> build({"INPUT": {"SIZE": 3}}, scale=2, name="y"), build(5)
        (('y', 6), ('x', 5))
    """
    config_signature = inspect.signature(from_config)
    config_names = set(config_signature.parameters)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        owner = fn.__name__

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            config = args[0] if args else kwargs.get("cfg")
            if is_detectron2_config(config):
                if not args:
                    args = (kwargs.pop("cfg"),)
                mine = {k: v for k, v in kwargs.items() if k in config_names}
                _bind(config_signature, f"{owner}(cfg, ...)", args, mine)
                explicit = from_config(*args, **mine)
                explicit.update({k: v for k, v in kwargs.items() if k not in config_names})
                _bind(signature, owner, (), explicit)
                return fn(**explicit)
            _bind(signature, owner, args, kwargs)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------- reading the config
def _names(cfg: Any, key: str) -> list[str]:
    return _check_names(config_value(cfg, key), f"config key {key}", key)


def _check_names(value: Any, what: str, argument: str) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if (
        not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(name, str) for name in names)
    ):
        raise LoaderCallError(
            f"{what} must be a dataset name or a non-empty list of names, got "
            f"{repr(value)[:80]}",
            argument=argument,
        )
    return list(names)


def _typed(cfg: Any, key: str, default: Any, check: Callable[..., Any], **options: Any) -> Any:
    """The config value at ``key`` (or ``default``), passed through a ``catalog.validation``
    check; a bad value raises LoaderCallError naming the key."""
    value = config_value(cfg, key, default)
    error = functools.partial(LoaderCallError, argument=key)
    return check(value, f"config key {key}", error=error, **options)


def _seed(cfg: Any) -> int | None:
    seed = _typed(cfg, "SEED", -1, check_int)  # negative: a random shared seed
    return seed if seed >= 0 else None


def _refuse_proposal_files(cfg: Any, key: str) -> None:
    """With ``MODEL.LOAD_PROPOSALS``, proposals must already be in the records: the files
    detectron2 reads for them are pickles, which catmap never loads because a config says so."""
    if not _typed(cfg, "MODEL.LOAD_PROPOSALS", False, check_bool):
        return
    files = config_value(cfg, key, ())
    if files:
        raise LoaderCallError(
            f"{key} with MODEL.LOAD_PROPOSALS=True: catmap does not load proposal files "
            f"(detectron2 reads them with pickle, which can run code from the file); attach "
            f"'proposal_boxes', 'proposal_objectness_logits' and 'proposal_bbox_mode' to the "
            f"records in the dataset's loader function and leave {key} empty",
            argument=key,
        )


def _dataset_mapper(cfg: Any, is_train: bool) -> Any:
    from mappers.dataset_mapper import DatasetMapper

    try:
        return DatasetMapper(cfg, is_train=is_train)
    except TypeError as exc:
        if isinstance(exc, CatmapError):  # a typed error about the config: as it is
            raise
        from_config = getattr(DatasetMapper, "from_config", None)
        if callable(from_config):  # a DatasetMapper without the config call form
            return DatasetMapper(**from_config(cfg, is_train))
        raise LoaderCallError(
            f"the default mapper DatasetMapper(cfg, is_train={is_train}) cannot be built from "
            f"this config ({exc}); pass mapper=...",
            argument="mapper",
        ) from exc


def _train_sampler(cfg: Any, dataset: Any) -> Any:
    name = _typed(cfg, "DATALOADER.SAMPLER_TRAIN", "TrainingSampler", check_str)
    seed = _seed(cfg)
    logger.info("building the training sampler %s from the config", name)
    if name == "TrainingSampler":
        return TrainingSampler(len(dataset), seed=seed)
    if name == "RepeatFactorTrainingSampler":
        threshold = _typed(cfg, "DATALOADER.REPEAT_THRESHOLD", 0.0, check_float)
        sqrt = _typed(cfg, "DATALOADER.REPEAT_SQRT", True, check_bool)
        factors = repeat_factors_from_category_frequency(dataset, float(threshold), sqrt=sqrt)
        return RepeatFactorTrainingSampler(factors, seed=seed)
    if name == "RandomSubsetTrainingSampler":
        key = "DATALOADER.RANDOM_SUBSET_RATIO"  # no default: a missing key is a ConfigKeyError
        ratio = check_float(
            config_value(cfg, key),
            f"config key {key}",
            above=0,
            maximum=1,
            error=functools.partial(LoaderCallError, argument=key),
        )
        return RandomSubsetTrainingSampler(len(dataset), ratio, seed_shuffle=seed)
    return build_train_sampler(name, dataset)  # any other registered name


def train_loader_from_config(
    cfg: Any, mapper: Any = None, *, dataset: Any = None, sampler: Any = None
) -> dict[str, Any]:
    """The arguments of ``build_detection_train_loader`` that a detectron2 config gives.

    Args:
        cfg: the config (yacs ``CfgNode``, OmegaConf, or a nested mapping).
        mapper: default ``mappers.DatasetMapper(cfg, is_train=True)``.
        dataset: default the records of ``DATASETS.TRAIN`` (filtered as the config says).
        sampler: default the sampler ``DATALOADER.SAMPLER_TRAIN`` names (none for an
            IterableDataset).

    Returns:
        The keyword arguments (dataset, sampler, mapper, total_batch_size,
        aspect_ratio_grouping, num_workers, seed).

    Raises:
        ConfigKeyError: (a KeyError) a key without default is missing.
        LoaderCallError: a key has a wrong type or value, or ``MODEL.LOAD_PROPOSALS`` asks
            for ``DATASETS.PROPOSAL_FILES_TRAIN`` (pickle files, never loaded).

    Example:
        >>> from catalog import DatasetCatalog
        >>> DatasetCatalog.register("doc_cfg", lambda: [{"file_name": "a.jpg", "height": 2,
        ...     "width": 3, "image_id": 0, "annotations": [{"bbox": [0, 0, 1, 1],
        ...     "bbox_mode": 1, "category_id": 0}]}])
        >>> cfg = {"DATASETS": {"TRAIN": ("doc_cfg",)}, "SOLVER": {"IMS_PER_BATCH": 2}}
        >>> kw = train_loader_from_config(cfg, mapper=dict)
        >>> type(kw["sampler"]).__name__, kw["total_batch_size"], kw["num_workers"]
        ('TrainingSampler', 2, 4)
        >>> DatasetCatalog.remove("doc_cfg")
    """
    if dataset is None:
        _refuse_proposal_files(cfg, "DATASETS.PROPOSAL_FILES_TRAIN")
        from catalog.detection_dicts import get_detection_dataset_dicts

        keypoints = _typed(cfg, "MODEL.KEYPOINT_ON", False, check_bool)
        min_keypoints = (
            _typed(cfg, "MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE", 1, check_int)
            if keypoints
            else 0
        )
        dataset = get_detection_dataset_dicts(
            _names(cfg, "DATASETS.TRAIN"),
            filter_empty=_typed(cfg, "DATALOADER.FILTER_EMPTY_ANNOTATIONS", True, check_bool),
            min_keypoints=min_keypoints,
        )
    if mapper is None:
        mapper = _dataset_mapper(cfg, True)
    if sampler is None and not isinstance(dataset, IterableDataset):
        sampler = _train_sampler(cfg, dataset)
    return {
        "dataset": dataset,
        "sampler": sampler,
        "mapper": mapper,
        "total_batch_size": _typed(cfg, "SOLVER.IMS_PER_BATCH", 16, check_int),
        "aspect_ratio_grouping": _typed(cfg, "DATALOADER.ASPECT_RATIO_GROUPING", True, check_bool),
        "num_workers": _typed(cfg, "DATALOADER.NUM_WORKERS", 4, check_int),
        "seed": getattr(sampler, "seed", None) if sampler is not None else _seed(cfg),
    }


def inference_loader_from_config(cfg: Any, dataset_name: Any, mapper: Any = None) -> dict[str, Any]:
    """The arguments of ``build_detection_test_loader`` that a detectron2 config gives.

    As in detectron2 the dataset is ``dataset_name`` (a name or list of names), not
    ``DATASETS.TEST``: each test set is evaluated on its own. Records are not filtered.

    Args:
        cfg: the config.
        dataset_name: a registered name or a list of names.
        mapper: default ``mappers.DatasetMapper(cfg, is_train=False)``.

    Returns:
        The keyword arguments (dataset, mapper, num_workers, sampler).

    Raises:
        LoaderCallError: ``dataset_name`` is not a name or list of names, or a key is
            malformed.
    """
    from catalog.detection_dicts import get_detection_dataset_dicts

    _refuse_proposal_files(cfg, "DATASETS.PROPOSAL_FILES_TEST")
    names = _check_names(dataset_name, "dataset_name", "dataset_name")
    dataset = get_detection_dataset_dicts(names, filter_empty=False)
    if mapper is None:
        mapper = _dataset_mapper(cfg, False)
    return {
        "dataset": dataset,
        "mapper": mapper,
        "num_workers": _typed(cfg, "DATALOADER.NUM_WORKERS", 4, check_int),
        "sampler": InferenceSampler(len(dataset)),
    }
