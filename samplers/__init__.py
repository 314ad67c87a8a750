"""catmap.samplers: which indices, in what order, on which rank; resumable; the loader builders.

Read :mod:`samplers.build` first: it tells the loading story top to bottom.
"""

from .batching import (
    AspectRatioGroupedDataset, GroupedBatchSampler, ResumableBatchSampler, aspect_ratio_group_ids,
)
from .build import (
    build_batch_data_loader, build_detection_test_loader, build_detection_train_loader,
    trivial_batch_collator,
)
from .device import to_device
from .stream import get_rank, get_world_size, shared_random_seed
from .errors import (
    BatchPickleError, ImageSizeKeyError, LoaderCallError, LoaderTimeoutError, LoaderWorkerError, NotResumableError,
    ReshardError, SamplerConfigError, SamplerError, SamplerStateError, StateMismatchError,
    SupersededIteratorError, TransportError, WorkerExitedError,
)
from .loader import ResumableLoader, SampleSeededDataset, WorkerSeeder, sample_seed, worker_init_reset_seed
from .registry import SAMPLERS, build_train_sampler
from .shard_order import ShardOrderSampler
from .stream import (
    ConcatSampler, InferenceSampler, RandomSubsetTrainingSampler, RepeatFactorTrainingSampler,
    StreamSampler, TrainingSampler, repeat_factors_from_category_frequency,
)

__all__ = [
    "AspectRatioGroupedDataset", "BatchPickleError", "ConcatSampler", "GroupedBatchSampler", "ImageSizeKeyError",
    "InferenceSampler", "LoaderCallError", "LoaderTimeoutError", "LoaderWorkerError",
    "NotResumableError", "RandomSubsetTrainingSampler", "RepeatFactorTrainingSampler",
    "ReshardError", "ResumableBatchSampler", "ResumableLoader", "SAMPLERS", "SampleSeededDataset",
    "SamplerConfigError", "SamplerError", "SamplerStateError", "ShardOrderSampler", "StateMismatchError",
    "StreamSampler", "SupersededIteratorError", "TrainingSampler", "TransportError",
    "WorkerExitedError", "WorkerSeeder", "aspect_ratio_group_ids", "build_batch_data_loader",
    "build_detection_test_loader", "build_detection_train_loader", "build_train_sampler",
    "get_rank", "get_world_size", "repeat_factors_from_category_frequency", "sample_seed",
    "shared_random_seed", "to_device", "trivial_batch_collator", "worker_init_reset_seed",
]
