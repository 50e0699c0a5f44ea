"""TensorFlow-side training: strategies, the multi-worker loop, schedules,
callbacks (see `keras_hsum.training.trainer`, which runs the steps that
`data_sources`, `vocabularies`, `model_setup` and `run_folder` name)."""

from keras_hsum.training.callbacks import NonFiniteLossError
from keras_hsum.training.callbacks import NonFiniteLossGuard
from keras_hsum.training.callbacks import TimeBudget
from keras_hsum.training.callbacks import TrainingBackup
from keras_hsum.training.schedules import NoamSchedule
from keras_hsum.training.data_sources import resolve_data
from keras_hsum.training.model_setup import make_strategy
from keras_hsum.training.model_setup import replica_placement
from keras_hsum.training.run_folder import TrainResult
from keras_hsum.training.trainer import train

__all__ = [
    "NoamSchedule",
    "NonFiniteLossError",
    "NonFiniteLossGuard",
    "TimeBudget",
    "TrainResult",
    "TrainingBackup",
    "make_strategy",
    "replica_placement",
    "resolve_data",
    "train",
]
