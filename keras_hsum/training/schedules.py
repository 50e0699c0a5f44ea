"""Learning-rate schedules."""

import keras
from keras import ops

from keras_hsum.checks import check_int


@keras.saving.register_keras_serializable(package="keras_hsum")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The Transformer's schedule (Vaswani et al., 2017, §5.3).

    lr(step) = factor · D^-0.5 · min(step^-0.5, step · warmup^-1.5), with
    step counted from 1: linear warm-up for `warmup_steps`, then decay with
    the inverse square root of the step. HT and PHT train with it.

    Args:
        hidden_dim: D, the model width.
        warmup_steps: steps of linear warm-up.
        factor: a constant multiplier (the peak is factor·(D·warmup)^-0.5).
    """

    def __init__(self, hidden_dim, warmup_steps=4000, factor=1.0):
        check_int("warmup_steps", warmup_steps, owner="NoamSchedule")
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.factor = factor

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        scale = self.factor * float(self.hidden_dim) ** -0.5
        return scale * ops.minimum(
            ops.rsqrt(step), step * float(self.warmup_steps) ** -1.5
        )

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "factor": self.factor,
        }
