"""Summarization losses (backend-agnostic)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_hsum")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Token-level cross-entropy with label smoothing, from logits.

    For one position with log-probabilities log p over V classes and label y:
    loss = (1 − ε)·(−log p_y) + ε·mean_v(−log p_v), i.e. the cross-entropy
    against the smoothed target (1 − ε)·onehot(y) + ε/V (Szegedy et al.,
    2016), without materialising the one-hot [B,S,V].

    With Keras' default reduction ("sum_over_batch_size") and the target mask
    as `sample_weight`, the batch loss is Σ mask·loss / (B·S): the same
    number on one device and summed over replicas of a split batch.

    Args:
        label_smoothing: ε in [0, 1).
        reduction, name, dtype: as for every Keras loss.

    Call arguments:
        y_true: int [B,S] labels.
        y_pred: float [B,S,V] logits (or log-probabilities).
        sample_weight: float [B,S], the target mask.
    """

    def __init__(
        self,
        label_smoothing=0.1,
        reduction="sum_over_batch_size",
        name="label_smoothed_cross_entropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                "`label_smoothing` must be in [0, 1), received "
                f"{label_smoothing!r}."
            )
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        labels = ops.cast(y_true, "int32")
        nll = -ops.squeeze(
            ops.take_along_axis(log_probs, labels[..., None], axis=-1), axis=-1
        )
        if not self.label_smoothing:
            return nll
        smooth = -ops.mean(log_probs, axis=-1)
        return (1.0 - self.label_smoothing) * nll + self.label_smoothing * smooth

    def get_config(self):
        config = super().get_config()
        config["label_smoothing"] = self.label_smoothing
        return config


def reference_weights(labels, sample_weight=None, pad_id=0):
    """float32 [B]: 1 for the examples with a reference token, else 0 (from
    the label mask `sample_weight` [B,S] when given, else from `labels`)."""
    if sample_weight is None:
        real = ops.any(ops.not_equal(ops.cast(labels, "int32"), pad_id), axis=-1)
    else:
        real = ops.sum(ops.cast(sample_weight, "float32"), axis=-1) > 0
    return ops.cast(real, "float32")
