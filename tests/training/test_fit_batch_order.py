"""`fit` trains on the first iterator of the shuffled training data under
every backend once `jax_training.build_loss_and_metrics` has built the
compiled loss and metrics (Keras' JAX `fit` otherwise opens an iterator of
its own to build them, and a reshuffling dataset gives the next iterator
another order: issue 60's resume gap and TensorFlow/JAX divergence)."""

import keras
import numpy as np
import tensorflow as tf

from keras_hsum.training.jax_training import build_loss_and_metrics


def shuffled_batches(read=None):
    """32 numbers shuffled (reshuffled for every iterator) in batches of 4 as
    `(x, y, sample_weight)`; `read` collects the first number of every batch
    the pipeline produces, in order."""

    def record(x):
        if read is not None:
            read.append(float(x[0, 0]))
        return x

    def element(x):
        x = tf.py_function(record, [x], tf.float32)
        x = tf.ensure_shape(x, [4, 1])
        return x, 2.0 * x, tf.ones([4])

    numbers = tf.data.Dataset.range(32).map(lambda i: tf.cast([i], tf.float32))
    return numbers.shuffle(32, seed=7, reshuffle_each_iteration=True).batch(4).map(element)


def test_fit_reads_the_first_order_of_a_reshuffling_dataset():
    keras.utils.set_random_seed(0)
    first_order = [float(x[0, 0]) for x, _, _ in shuffled_batches()]
    second_order = [float(x[0, 0]) for x, _, _ in shuffled_batches().repeat(2)][8:]
    assert first_order != second_order  # the dataset does reshuffle

    keras.utils.set_random_seed(0)
    read = []
    data = shuffled_batches(read)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse",
                  weighted_metrics=[keras.metrics.MeanAbsoluteError()])
    assert build_loss_and_metrics(model, next(iter(shuffled_batches()))) == []
    assert read == []
    model.fit(data, epochs=1, steps_per_epoch=3, shuffle=False, verbose=0)
    # Every batch the pipeline produced (those trained and a few prefetched)
    # comes from its first iterator, in order.
    assert len(read) >= 3
    np.testing.assert_array_equal(read, first_order[:len(read)])
