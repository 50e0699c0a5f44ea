"""Training under the JAX backend: `keras.distribution` instead of
tf.distribute.

`keras-hsum train --backend jax` (or `KERAS_BACKEND=jax`) runs the same
`keras_hsum.training.train`: the same run folder, vocabulary, tf.data
pipeline (Keras 3's `fit` iterates a `tf.data.Dataset` on the host as
numpy and hands the batches to JAX), callbacks, backups and resumption.
Only the placement differs: tf.distribute strategies do not apply, and
the model is built and fitted under a `keras.distribution.Distribution`:

- "data_parallel" (the default): `keras.distribution.DataParallel` over
  every device of every process; the weights are replicated and each
  global batch is split along its first axis over the devices (B must be a
  multiple of the device count). XLA sums the devices' gradients, so a
  step is the one-device step up to the order of the reduction.
- "model_parallel": `SummarizerModelParallel` on a device mesh of shape
  (devices / M, M) with the axes ("batch", "model"), M = `model_parallel`:
  the batch is split over the "batch" axis and the weights in
  `SUMMARIZER_LAYOUT` are split over the "model" axis (every other weight
  is replicated):

  | weights (path pattern)                     | shape       | layout             |
  |--------------------------------------------|-------------|--------------------|
  | `.*embeddings`                             | (V, D)      | (None, "model")    |
  | `.*(query|key|value)/kernel`               | (D, H, Dh)  | (None, "model", None) |
  | `.*(query|key|value)/bias`                 | (H, Dh)     | ("model", None)    |
  | `.*output/kernel` (attention outputs)      | (H, Dh, D)  | ("model", None, None) |
  | `.*intermediate_dense/kernel`, `.*ffn_intermediate_kernel` | (D, F) | (None, "model") |
  | `.*intermediate_dense/bias`, `.*ffn_intermediate_bias`     | (F,)   | ("model",)      |
  | `.*output_dense/kernel`, `.*ffn_output_kernel`             | (F, D) | ("model", None) |

  i.e. the embedding width, the attention heads and the feed-forward width
  are split (Megatron's layout for a Transformer layer). A weight whose
  rank differs from its rule's, or whose split axis does not divide by M,
  stays replicated.

Several processes (hosts): `initialize_processes` (`keras-hsum train
--coordinator HOST:PORT --num-processes N --process-id I`, or Keras'
`KERAS_DISTRIBUTION_JOB_ADDRESSES` / `_NUM_PROCESSES` / `_PROCESS_ID`
variables) calls `keras.distribution.initialize` before anything runs on
JAX; the distribution then spans every process's devices, and Keras gives
each process its own slice of every global batch (`rebatch` + `shard` of
the tf.data pipeline, which every process runs whole). Process 0 writes
the run folder; the others write theirs into a temporary folder that is
removed at the end (see `chief_folder`).
"""

import contextlib
import os
import shutil
import tempfile
import warnings

import keras

# `keras-hsum train --distribution` under the JAX backend.
JAX_DISTRIBUTIONS = ("data_parallel", "model_parallel")

# Path pattern (`re.fullmatch` on a variable's path) -> axes of its layout.
SUMMARIZER_LAYOUT = {
    r".*embeddings": (None, "model"),
    r".*(query|key|value)/kernel": (None, "model", None),
    r".*(query|key|value)/bias": ("model", None),
    r".*output/kernel": ("model", None, None),
    r".*(intermediate_dense/kernel|ffn_intermediate_kernel)": (None, "model"),
    r".*(intermediate_dense/bias|ffn_intermediate_bias)": ("model",),
    r".*(output_dense/kernel|ffn_output_kernel)": ("model", None),
}


def is_jax_backend():
    """Whether Keras runs on JAX (`KERAS_BACKEND=jax` before keras was imported)."""
    return keras.backend.backend() == "jax"


def check_jax_backend(what):
    """Raises ValueError naming `what` unless Keras runs on JAX."""
    if not is_jax_backend():
        raise ValueError(
            f"{what} needs the JAX backend; Keras runs on {keras.backend.backend()!r}. "
            "Run `keras-hsum train --backend jax ...` (or set KERAS_BACKEND=jax before "
            "Python imports keras)."
        )


def initialize_processes(coordinator=None, num_processes=None, process_id=None):
    """Joins this process to a multi-process (multi-host) JAX run.

    Calls `keras.distribution.initialize`, which calls
    `jax.distributed.initialize`: it must run before JAX computes anything.
    Arguments left None are read by Keras from
    `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`
    and `KERAS_DISTRIBUTION_PROCESS_ID`. Nothing happens when no argument
    and none of those variables is given (one process).

    Args:
        coordinator: "HOST:PORT" of process 0 (every process gives the
            same), or Keras' comma-separated list of every process's
            address (the first is the coordinator).
        num_processes: N, the processes of the run.
        process_id: this process's index in [0, N).

    Returns:
        The number of processes (1 when nothing was initialised).

    Raises:
        ValueError: for a partial or inconsistent setting.
    """
    names = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
             "KERAS_DISTRIBUTION_PROCESS_ID")
    given = (coordinator, num_processes, process_id)
    if all(v is None for v in given) and not any(name in os.environ for name in names):
        return 1
    check_jax_backend("Several training processes (--coordinator, --num-processes)")
    coordinator = coordinator or os.environ.get(names[0])
    if num_processes is None and names[1] in os.environ:
        num_processes = int(os.environ[names[1]])
    if process_id is None and names[2] in os.environ:
        process_id = int(os.environ[names[2]])
    if coordinator is None or num_processes is None or process_id is None:
        raise ValueError(
            "A multi-process JAX run needs the coordinator address, the number of "
            "processes and this process's id (--coordinator HOST:PORT --num-processes N "
            f"--process-id I, or {', '.join(names)}); received coordinator="
            f"{coordinator!r}, num_processes={num_processes!r}, process_id={process_id!r}."
        )
    if not 0 <= process_id < num_processes:
        raise ValueError(
            f"--process-id must lie in [0, {num_processes}) for {num_processes} processes; "
            f"received {process_id}."
        )
    keras.distribution.initialize(
        job_addresses=coordinator, num_processes=num_processes, process_id=process_id
    )
    return num_processes


def process_count():
    """The JAX processes of this run (1 without `initialize_processes`)."""
    import jax

    return jax.process_count()


def is_chief():
    """True in the process that writes the run folder (JAX process 0)."""
    import jax

    return jax.process_index() == 0


class SummarizerModelParallel(keras.distribution.ModelParallel):
    """`keras.distribution.ModelParallel` whose layout map only applies where
    it fits: a weight whose rank differs from its layout's, or whose split
    axis does not divide by the mesh axis it is split over, is replicated
    (e.g. a 2-D `output/kernel` that is not an attention output, or 6 heads
    over a "model" axis of 4).

    Args:
        layout_map: a `keras.distribution.LayoutMap` (see
            `summarizer_layout_map`).
        batch_dim_name: the mesh axis the batch is split over.
    """

    def get_variable_layout(self, variable):
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        layout = self._layout_map[variable.path]
        shape = tuple(variable.shape)
        if layout is not None and _fits(layout.axes, shape, self.device_mesh):
            return layout
        return keras.distribution.TensorLayout([None] * len(shape), self.device_mesh)


def _fits(axes, shape, mesh):
    if len(axes) != len(shape):
        return False
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    return all(axis is None or dim % sizes[axis] == 0 for axis, dim in zip(axes, shape))


def summarizer_layout_map(device_mesh):
    """The `keras.distribution.LayoutMap` of `SUMMARIZER_LAYOUT` on
    `device_mesh` (which has a "model" axis)."""
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in SUMMARIZER_LAYOUT.items():
        layout_map[pattern] = axes
    return layout_map


def make_distribution(kind="data_parallel", model_parallel=None):
    """The `keras.distribution.Distribution` of a JAX training run.

    Args:
        kind: "data_parallel" or "model_parallel" (see the module docstring).
        model_parallel: with "model_parallel", M, the size of the "model"
            mesh axis (a divisor of the device count; None: every device,
            so the batch is not split).

    Returns:
        A `DataParallel` over `keras.distribution.list_devices()` (every
        process's devices), or a `SummarizerModelParallel` on a
        (devices / M, M) mesh.

    Raises:
        ValueError: off the JAX backend, for an unknown kind, or an M that
            does not divide the device count.
    """
    check_jax_backend(f"The {kind!r} distribution")
    if kind not in JAX_DISTRIBUTIONS:
        raise ValueError(
            f"Unknown distribution {kind!r}; expected one of {list(JAX_DISTRIBUTIONS)}."
        )
    devices = keras.distribution.list_devices()
    if kind == "data_parallel":
        if model_parallel not in (None, 1):
            raise ValueError(
                f"--model-parallel {model_parallel} splits the weights, which "
                "data_parallel replicates; use --distribution model_parallel."
            )
        return keras.distribution.DataParallel(devices=devices)
    size = len(devices) if model_parallel is None else int(model_parallel)
    if size < 1 or len(devices) % size:
        raise ValueError(
            f"--model-parallel must divide the {len(devices)} devices "
            f"({', '.join(map(str, devices[:4]))}{', ...' if len(devices) > 4 else ''}); "
            f"received {model_parallel}."
        )
    mesh = keras.distribution.DeviceMesh(
        shape=(len(devices) // size, size), axis_names=("batch", "model"), devices=devices
    )
    return SummarizerModelParallel(
        layout_map=summarizer_layout_map(mesh), batch_dim_name="batch"
    )


def data_replicas(distribution):
    """How many slices each global batch is split into (the devices of a
    DataParallel, the "batch" axis of a ModelParallel mesh)."""
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]


def check_batch_split(distribution, batch_size):
    """Raises ValueError unless the global `batch_size` splits evenly over
    the distribution's data replicas."""
    replicas = data_replicas(distribution)
    if batch_size % replicas:
        raise ValueError(
            f"The global batch_size {batch_size} does not split evenly over the "
            f"{replicas} data-parallel devices of the JAX distribution; choose a "
            f"multiple of {replicas} (--set batch_size=...), or "
            "--distribution model_parallel."
        )


def whole_batches(dataset, distribution, batch_size):
    """`dataset` (of batches) without its partial batches (fewer than
    `batch_size` examples, e.g. a validation set's last one) when the
    distribution splits batches: JAX splits every batch evenly over the
    devices, and with several processes every process must read the same
    number of batches (Keras gives each a slice of every global batch).
    Unchanged on one data replica."""
    import tensorflow as tf

    if data_replicas(distribution) == 1:
        return dataset

    def whole(*element):
        return tf.equal(tf.shape(tf.nest.flatten(element)[0])[0], batch_size)

    def known_batch(*element):
        # Keras' multi-process DataParallel reads the batch size from the
        # static shape to give each process its slice; the filter left it
        # unknown.
        element = tf.nest.map_structure(
            lambda t: tf.ensure_shape(
                t, tf.TensorShape([batch_size]).concatenate(t.shape[1:])),
            element,
        )
        return element if len(element) > 1 else element[0]

    return dataset.filter(whole).map(known_batch)


def build_loss_and_metrics(model, batch):
    """Builds the compiled loss and metrics of a built, compiled `model` on
    `batch`, so that Keras' JAX `fit` reads nothing to build them.

    Keras 3.15's JAX `fit` builds whatever is still unbuilt (here the
    compiled loss and metrics, which the other backends build in their first
    step) on the first batch of an iterator it opens over the training data,
    then opens a second iterator to train. The training pipeline shuffles
    with `reshuffle_each_iteration`, so every iterator over the same dataset
    draws another order: the JAX run trained on the pipeline's second order
    while TensorFlow trains on its first (in the tests, the same weights
    then diverged by 1.2% of the loss in 6 steps), and a resumed run, whose
    second `fit` call found everything built, read the first order after the
    interruption where an uninterrupted run reads the second. Built here,
    every `fit` call trains on the first iterator of its dataset, as under
    TensorFlow. Nothing is computed: the loss and metrics are traced on the
    batch's shapes (`backend.compute_output_spec`), as `fit` would.

    A layer that the forward pass never calls would stay unbuilt (no
    recipe's model has one: tests/training/test_jax_training.py checks
    every recipe): JAX's `fit` then still reads an iterator of its own in
    every call. Such a run is warned about; it trains on the pipeline's
    second order in every `fit` call, so it still resumes exactly, but not
    on TensorFlow's batches.

    Args:
        model: the model of `keras_hsum.training.model_setup.build_compiled_model`.
        batch: `(inputs, labels, sample_weights)` of the training data's
            structure, e.g. a validation batch (an iterator over the
            training data here would shift its shuffle order too).

    Returns:
        The names of what is still unbuilt ([] when `fit` reads nothing).
    """
    model._symbolic_build(data_batch=tuple(batch))
    unbuilt = [name for name, part in (("loss", model._compile_loss),
                                       ("metrics", model._compile_metrics))
               if part is not None and not part.built]
    unbuilt += [layer.path or layer.name for layer in model._flatten_layers()
                if not layer.built]
    if unbuilt:
        warnings.warn(
            f"{unbuilt} of the model stay unbuilt after building it on a batch, so Keras "
            f"{keras.version()}'s JAX fit reads a batch of the training data in an iterator "
            "of its own before training on a second one: this run trains on the pipeline's "
            "second shuffle order (the same in every fit call, so a resumed run still "
            "matches an uninterrupted one), not on the batches TensorFlow trains on.",
            stacklevel=2,
        )
    return unbuilt


@contextlib.contextmanager
def chief_folder(out):
    """Yields the folder this process writes its callbacks' files to: `out`
    in process 0 (or with one process), a temporary folder elsewhere, removed
    on exit (every process runs the same callbacks; only one may write the
    run folder)."""
    if is_chief():
        yield out
        return
    folder = tempfile.mkdtemp(prefix="keras_hsum_process_")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
