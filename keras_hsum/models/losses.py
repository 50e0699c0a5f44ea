"""Summarization losses (backend-agnostic)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_hsum")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Token-level cross-entropy with label smoothing, from logits.

    For one position with logits z over V classes and label y, log p =
    z − logsumexp(z) and the loss is the cross-entropy against the smoothed
    target (1 − ε)·onehot(y) + ε/V (Szegedy et al., 2016):

        (1 − ε)·(−log p_y) + ε·mean_v(−log p_v)
            = logsumexp(z) − (1 − ε)·z_y − ε·mean_v(z_v).

    The right-hand side is what is computed, in float32 from logits of any
    float dtype: the logsumexp, the target logit and the mean logit are
    three reductions over V, so neither the [B,S,V] log-probabilities nor a
    one-hot or smoothed target is materialised, and the target logit is
    read through an equality mask (its gradient is elementwise, not a
    scatter into a [B,S,V] zero tensor). Log-probabilities as `y_pred`
    (the pointer-generator models') give the same loss, since their
    logsumexp is 0.

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

    Returns:
        The reduced loss (float32 [B,S] per position with `reduction=None`).

    Example:

    >>> loss = LabelSmoothedCrossEntropy(0.1)
    >>> logits = keras.ops.zeros((2, 3, 5))
    >>> float(loss(keras.ops.zeros((2, 3), "int32"), logits))  # log 5
    1.6094...
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
        logits = ops.cast(y_pred, "float32")
        labels = ops.cast(y_true, "int32")
        classes = ops.arange(ops.shape(logits)[-1], dtype="int32")
        target = ops.sum(
            ops.where(ops.equal(labels[..., None], classes), logits, 0.0), axis=-1
        )
        nll = ops.logsumexp(logits, axis=-1) - target
        if not self.label_smoothing:
            return nll
        return nll - self.label_smoothing * (ops.mean(logits, axis=-1) - target)

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
