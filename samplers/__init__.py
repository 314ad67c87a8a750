"""catmap.samplers: which indices, in what order, on which rank; resumable; loader builders."""

from .aspect_ratio_grouped import AspectRatioGroupedDataset, ImageSizeKeyError
from .batch import ResumableBatchSampler
from .concat import ConcatSampler
from .device import to_device
from .distributed import get_rank, get_world_size, shared_random_seed
from .errors import (
    LoaderTimeoutError,
    NotResumableError,
    ReshardError,
    SamplerConfigError,
    SamplerError,
    SamplerStateError,
    StateMismatchError,
)
from .grouped_batch import GroupedBatchSampler, aspect_ratio_group_ids
from .inference import InferenceSampler
from .loader import (
    build_batch_data_loader,
    build_detection_test_loader,
    build_detection_train_loader,
    trivial_batch_collator,
)
from .loader_config import LoaderCallError
from .random_subset import RandomSubsetTrainingSampler
from .registry import SAMPLERS, build_train_sampler
from .repeat_factor import RepeatFactorTrainingSampler, repeat_factors_from_category_frequency
from .resumable_loader import ResumableLoader
from .sample_seed import SampleSeededDataset, StreamPositions, sample_seed
from .slab_pool import TransportError
from .stream import EndlessPassStream, SupersededIteratorError
from .training import TrainingSampler
from .worker_errors import LoaderWorkerError, WorkerExitedError
from .worker_seed import WorkerSeeder, worker_init_reset_seed

__all__ = [
    "AspectRatioGroupedDataset",
    "ImageSizeKeyError",
    "LoaderCallError",
    "SupersededIteratorError",
    "SAMPLERS",
    "ResumableLoader",
    "SampleSeededDataset",
    "StreamPositions",
    "WorkerSeeder",
    "build_batch_data_loader",
    "build_detection_test_loader",
    "build_detection_train_loader",
    "build_train_sampler",
    "trivial_batch_collator",
    "worker_init_reset_seed",
    "ConcatSampler",
    "GroupedBatchSampler",
    "InferenceSampler",
    "NotResumableError",
    "EndlessPassStream",
    "RandomSubsetTrainingSampler",
    "RepeatFactorTrainingSampler",
    "ReshardError",
    "ResumableBatchSampler",
    "SamplerConfigError",
    "SamplerError",
    "SamplerStateError",
    "StateMismatchError",
    "LoaderTimeoutError",
    "TrainingSampler",
    "aspect_ratio_group_ids",
    "get_rank",
    "get_world_size",
    "repeat_factors_from_category_frequency",
    "sample_seed",
    "shared_random_seed",
    "to_device",
    "LoaderWorkerError",
    "TransportError",
    "WorkerExitedError",
]
