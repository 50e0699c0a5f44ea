"""TensorFlow-side training: strategies, the multi-worker loop, schedules,
callbacks (see `keras_hsum.training.trainer`, which runs the steps that
`data_sources`, `vocabularies`, `model_setup` and `run_folder` name).

The names below load on first use, so that importing one TensorFlow-free
module of this package (`schedules`, `model_setup`'s loss and optimizer
set-up, `learning_rate_groups`) does not import TensorFlow: a machine with
JAX alone builds a recipe's optimizer from here (tests/test_no_tensorflow.py).
"""

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


def __getattr__(name):
    # One branch per defining module, each an explicit `from ... import`
    # (tests/test_imports.py reads these as the package's re-exports).
    if name in ("NonFiniteLossError", "NonFiniteLossGuard", "TimeBudget", "TrainingBackup"):
        from keras_hsum.training.callbacks import NonFiniteLossError
        from keras_hsum.training.callbacks import NonFiniteLossGuard
        from keras_hsum.training.callbacks import TimeBudget
        from keras_hsum.training.callbacks import TrainingBackup

        return locals()[name]
    if name == "NoamSchedule":
        from keras_hsum.training.schedules import NoamSchedule

        return NoamSchedule
    if name == "resolve_data":
        from keras_hsum.training.data_sources import resolve_data

        return resolve_data
    if name in ("make_strategy", "replica_placement"):
        from keras_hsum.training.model_setup import make_strategy
        from keras_hsum.training.model_setup import replica_placement

        return locals()[name]
    if name == "TrainResult":
        from keras_hsum.training.run_folder import TrainResult

        return TrainResult
    if name == "train":
        from keras_hsum.training.trainer import train

        return train
    raise AttributeError(f"module 'keras_hsum.training' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
