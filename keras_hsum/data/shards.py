"""Shard folders: a recipe's structured examples as TFRecord files.

A shard folder is what `keras-hsum preprocess` writes and
`keras-hsum train --data DIR` reads:

    DIR/shards.json                      the spec (below)
    DIR/vocabulary.model                 the SentencePiece model used
    DIR/shard-00000-of-00004.tfrecord    tf.train.Example records
    ...

Each record is one structured example: every feature of the recipe's
`make_dataset` output before batching (`ExampleFeatures`), plus its
`example_id`. A feature `name` is stored flattened (`int64_list` for int32
and bool, `float_list` for float32, `bytes_list` for strings) with its shape
in `name/shape`.

The spec (`shards.json`) names the recipe, config, split and family, the
structure (`ExampleStructure.describe()`: sizes, family options, extras and
each feature's dtype and axes, axes in the symbols P/T/S/C/N of
`declare_features`), the padding id, the vocabulary file and its sha256,
and per shard its file name, example count and byte size. Within a shard
examples keep corpus order.

`read_shards` reads a folder into the same padded batches `make_dataset`
gives, in graph ops only (no Python), so it also runs on tf.data service
workers.
"""

import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from keras_hsum import run_folder
from keras_hsum.checks import check_int
from keras_hsum.features import EXAMPLE_ID
from keras_hsum.features import EXAMPLE_ID_FEATURE
from keras_hsum.features import Feature
from keras_hsum.features import axis_sizes
from keras_hsum.features import padded_shape
from keras_hsum.features import padding_value

SPEC_FILE = "shards.json"
VOCABULARY_FILE = run_folder.VOCABULARY  # as in a run folder
FORMAT = "keras_hsum.shards/1"


class ShardError(ValueError):
    """A shard folder that cannot be read: missing, corrupt or mismatched."""


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """A shard folder and how to read it, given to a recipe's
    `make_dataset` as its source (`recipes.base.batches` reads it with
    `read_shards`).

    Attributes:
        folder: the shard folder.
        data_service: `(address, job_name)` of a tf.data service, or None.
        input_context: a `tf.distribute.InputContext` (each worker reads
            its own shards), or None.
        recipe: the recipe name the folder must have been written for
            (None: any).
    """

    folder: str
    data_service: object = None
    input_context: object = None
    recipe: object = None


def shard_name(index, count):
    """The file name of shard `index` of `count`."""
    return f"shard-{index:05d}-of-{count:05d}.tfrecord"


def is_shard_folder(path):
    """Whether `path` is a folder holding a shard spec (`shards.json`)."""
    return isinstance(path, (str, os.PathLike)) and tf.io.gfile.exists(
        os.path.join(os.fspath(path), SPEC_FILE)
    )


def file_sha256(path):
    """The sha256 hex digest of a file (read with tf.io.gfile)."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tf_dtype(name):
    return tf.string if name == "string" else tf.as_dtype(name)


def serialize_example(example_id, features, specs):
    """One example as a serialized `tf.train.Example`.

    Args:
        example_id: the example's id (str).
        features: `{name: numpy array}` for every name of `specs`.
        specs: `{name: Feature}`.

    Returns:
        bytes.
    """
    out = {EXAMPLE_ID: tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[example_id.encode("utf-8")])
    )}
    for name, spec in specs.items():
        value = np.asarray(features[name])
        if value.ndim != len(spec.axes):
            raise ShardError(
                f"Feature {name!r} of example {example_id!r} has shape {value.shape}; "
                f"the spec expects rank {len(spec.axes)} (axes {spec.axes})."
            )
        flat = value.reshape(-1)
        if spec.dtype == "float32":
            feature = tf.train.Feature(float_list=tf.train.FloatList(value=flat))
        elif spec.dtype == "string":
            feature = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat]
            ))
        elif spec.dtype in ("int32", "int64", "bool"):
            feature = tf.train.Feature(
                int64_list=tf.train.Int64List(value=flat.astype(np.int64))
            )
        else:
            raise ShardError(
                f"Feature {name!r} has dtype {spec.dtype}; shards store int32, "
                "int64, bool, float32 and string features."
            )
        out[name] = feature
        out[f"{name}/shape"] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=list(value.shape))
        )
    return tf.train.Example(features=tf.train.Features(feature=out)).SerializeToString()


def parse_function(specs):
    """A graph function: a serialized record -> `{name: tensor}` with
    `example_id` (tf.string scalar) and every feature of `specs` in its
    dtype and shape (one example, no batch axis)."""
    description = {EXAMPLE_ID: tf.io.FixedLenFeature([], tf.string)}
    for name, spec in specs.items():
        stored = {"float32": tf.float32, "string": tf.string}.get(spec.dtype, tf.int64)
        description[name] = tf.io.VarLenFeature(stored)
        description[f"{name}/shape"] = tf.io.VarLenFeature(tf.int64)

    def parse(record):
        values = tf.io.parse_single_example(record, description)
        out = {EXAMPLE_ID: values[EXAMPLE_ID]}
        for name, spec in specs.items():
            shape = tf.sparse.to_dense(values[f"{name}/shape"])
            flat = tf.sparse.to_dense(values[name])
            value = tf.reshape(flat, shape)
            if spec.dtype == "bool":
                value = tf.not_equal(value, 0)
            elif spec.dtype not in ("float32", "string", "int64"):
                value = tf.cast(value, _tf_dtype(spec.dtype))
            value.set_shape([a if isinstance(a, int) else None for a in spec.axes])
            out[name] = value
        return out

    return parse


class ShardWriter:
    """Writes one shard file through a temporary name (a reader never sees
    half a shard; a retried writer starts it again).

    Args:
        path: the shard's final path.
        specs: `{name: Feature}`.

    Example (`keras-hsum preprocess` writes `ExampleFeatures(structure,
    vocabulary)(examples)` with `structure.specs`; here one hand-made
    feature):
    >>> import tensorflow as tf
    >>> from keras_hsum.features import Feature
    >>> specs = {"tokens": Feature("int32", ("P", "T"))}
    >>> path = shard_name(0, 1)  # in the working directory
    >>> with ShardWriter(path, specs) as writer:
    ...     writer.write("doc-1", {"tokens": np.array([[5, 6, 7], [8, 0, 0]])})
    >>> path, writer.examples
    ('shard-00000-of-00001.tfrecord', 1)
    >>> record = next(iter(tf.data.TFRecordDataset(path)))
    >>> parsed = parse_function(specs)(record)  # one example, no batch axis
    >>> parsed["example_id"].numpy(), parsed["tokens"].numpy().tolist()
    (b'doc-1', [[5, 6, 7], [8, 0, 0]])
    """

    def __init__(self, path, specs):
        self.path = os.fspath(path)
        self.specs = specs
        self.examples = 0
        self._temporary = f"{self.path}.tmp-{os.getpid()}"
        self._writer = None

    def __enter__(self):
        self._writer = tf.io.TFRecordWriter(self._temporary)
        return self

    def write(self, example_id, features):
        self._writer.write(serialize_example(example_id, features, self.specs))
        self.examples += 1

    def __exit__(self, kind, error, trace):
        self._writer.close()
        if kind is None:
            tf.io.gfile.rename(self._temporary, self.path, overwrite=True)
        else:
            tf.io.gfile.remove(self._temporary)
        return False

    @property
    def bytes(self):
        """The finished shard's size."""
        return tf.io.gfile.stat(self.path).length


def write_spec(folder, spec):
    """Writes `spec` (a dict) as `folder/shards.json`, atomically."""
    path = os.path.join(os.fspath(folder), SPEC_FILE)
    temporary = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(temporary, "w") as file:
        json.dump(spec, file, indent=2, sort_keys=True)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def read_spec(folder):
    """The spec of a shard folder (a dict), checked for the keys readers use.

    Raises:
        ShardError: when the folder has no spec or the spec is unreadable.
    """
    folder = os.fspath(folder)
    path = os.path.join(folder, SPEC_FILE)
    if not tf.io.gfile.exists(path):
        raise ShardError(
            f"{folder!r} is not a shard folder: it has no {SPEC_FILE} (expected a "
            "folder written by keras-hsum preprocess)."
        )
    try:
        with tf.io.gfile.GFile(path, "r") as file:
            spec = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ShardError(f"{path!r} is not valid JSON: {error}.") from None
    missing = [
        key for key in ("format", "structure", "shards", "pad_id", "vocabulary", "examples")
        if key not in spec
    ]
    if missing or spec.get("format") != FORMAT:
        raise ShardError(
            f"{path!r} is not a keras_hsum shard spec (format {FORMAT!r} with "
            f"structure, shards, pad_id, vocabulary, examples): format "
            f"{spec.get('format')!r}, missing {missing}. Write it again with "
            "keras-hsum preprocess."
        )
    return spec


def feature_specs(spec):
    """`{name: Feature}` of a shard spec's features."""
    return {
        name: Feature.from_dict(values)
        for name, values in spec["structure"]["features"].items()
    }


def check_matches(spec, folder, *, structure=None, recipe=None, vocabulary_sha256=None):
    """Refuses a shard folder written for another recipe, structure or
    vocabulary.

    Args:
        spec: the folder's spec (`read_spec`).
        folder: the folder (for messages).
        structure: an `ExampleStructure` the reader expects (None: any).
        recipe: the recipe name the reader trains (None: any).
        vocabulary_sha256: the sha256 of the vocabulary the reader uses
            (None: any).

    Raises:
        ShardError: naming what differs and what to do.
    """
    folder = os.fspath(folder)
    if recipe is not None and spec.get("recipe") not in (None, recipe):
        raise ShardError(
            f"Shard folder {folder!r} was written for recipe {spec.get('recipe')!r} "
            f"(config {spec.get('config')!r}); this run trains recipe {recipe!r}. "
            f"Run keras-hsum preprocess --recipe {recipe} for it."
        )
    if structure is not None:
        expected = structure.describe()
        found = spec["structure"]
        differences = [
            f"{key}: shards {found.get(key)!r}, expected {expected[key]!r}"
            for key in expected
            if found.get(key) != expected[key]
        ]
        if differences:
            raise ShardError(
                f"Shard folder {folder!r} (recipe {spec.get('recipe')!r}, config "
                f"{spec.get('config')!r}, split {spec.get('split')!r}) was structured "
                "differently from what this recipe and config ask for: "
                + "; ".join(differences)
                + ". Preprocess the corpus again with the same recipe, config, "
                "--set overrides and --split."
            )
    recorded = spec["vocabulary"].get("sha256")
    if vocabulary_sha256 is not None and recorded != vocabulary_sha256:
        raise ShardError(
            f"Shard folder {folder!r} was tokenized with a vocabulary of sha256 "
            f"{recorded}, this run uses one of sha256 {vocabulary_sha256}. Train "
            f"with the folder's own {VOCABULARY_FILE}, or preprocess again with "
            "--vocab set to this run's vocabulary."
        )


def _shard_files(folder, spec):
    """The shard paths, checked to exist with the recorded byte sizes."""
    folder = os.fspath(folder)
    files = []
    for shard in spec["shards"]:
        path = os.path.join(folder, shard["file"])
        if not tf.io.gfile.exists(path):
            raise ShardError(
                f"Shard {path!r} listed in {SPEC_FILE} is missing; the folder is "
                "incomplete. Write it again with keras-hsum preprocess."
            )
        size = tf.io.gfile.stat(path).length
        if "bytes" in shard and size != shard["bytes"]:
            raise ShardError(
                f"Shard {path!r} has {size:,} bytes, {SPEC_FILE} records "
                f"{shard['bytes']:,}: the file was truncated or changed after it was "
                "written. Write the folder again with keras-hsum preprocess."
            )
        files.append(path)
    return files


def verify_shards(folder):
    """Reads every record of every shard and checks it against the spec.

    Returns:
        The number of examples (equal to the spec's count).

    Raises:
        ShardError: naming the shard file and the record index of the first
            corrupt or unparsable record, or a shard whose example count
            differs from the spec's.
    """
    spec = read_spec(folder)
    parse = parse_function(feature_specs(spec))
    total = 0
    for shard, path in zip(spec["shards"], _shard_files(folder, spec)):
        count = 0
        iterator = iter(tf.data.TFRecordDataset(path))
        while True:
            try:
                record = next(iterator)
            except StopIteration:
                break
            except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
                raise ShardError(
                    f"Shard {path!r} is corrupt at record {count} "
                    f"({error.message.strip().splitlines()[-1]}). Write the folder "
                    "again with keras-hsum preprocess."
                ) from None
            try:
                parse(record)
            except tf.errors.InvalidArgumentError as error:
                raise ShardError(
                    f"Shard {path!r}: record {count} is not a keras_hsum example "
                    f"({error.message.strip().splitlines()[0]})."
                ) from None
            count += 1
        if count != shard["examples"]:
            raise ShardError(
                f"Shard {path!r} holds {count} examples, {SPEC_FILE} records "
                f"{shard['examples']}."
            )
        total += count
    return total


def read_shards(
    folder,
    *,
    batch_size,
    shuffle_buffer=0,
    seed=0,
    pad_to_max=False,
    repeat=False,
    drop_remainder=False,
    max_examples=None,
    include_ids=False,
    cycle_length=None,
    input_context=None,
    data_service=None,
    expect=None,
):
    """Padded batches from a shard folder, as `make_dataset` batches.

    Pipeline: the shard files (`from_tensor_slices`; under `input_context`
    each input pipeline keeps its own shards) → `interleave` of their
    TFRecords (deterministic) → parse → take (optional) → repeat (optional)
    → tf.data service (optional) → shuffle (optional) → padded batches →
    prefetch. Everything is a graph op.

    Args:
        folder: a shard folder.
        batch_size: B (the global batch; with `input_context`, each input
            pipeline batches its per-replica share).
        shuffle_buffer: examples in the shuffle buffer (0: no shuffling).
        seed: the shuffle seed.
        pad_to_max: pad P, S, C and N to the spec's maxima (static shapes).
        repeat: repeat forever (reshuffled each time).
        drop_remainder: drop a last batch smaller than B.
        max_examples: use only the first this many examples.
        include_ids: keep `example_id` (tf.string [B]).
        cycle_length: shards read at once (None: up to 8). With 1, shards
            are read one after the other: for one corpus file split into
            contiguous shards, corpus order.
        input_context: a `tf.distribute.InputContext`: shard
            `input_pipeline_id` of `num_input_pipelines` of the file list,
            batches of `get_per_replica_batch_size(batch_size)`.
        data_service: `(address, job_name)`: the examples are produced by
            tf.data service workers (`processing_mode="distributed_epoch"`:
            each example of an epoch once, in no fixed order) and batched
            here.
        expect: a dict of `check_matches` keyword arguments (`structure`,
            `recipe`, `vocabulary_sha256`) the folder must match.

    Returns:
        A dataset of feature dicts with a batch axis, as `make_dataset`
        returns for the spec's family and extras.

    Raises:
        ShardError: for a missing, incomplete, changed or mismatched
            folder. A corrupt record raises `tf.errors.DataLossError` while
            reading; `verify_shards` names its file.
    """
    batch_size = check_int("batch_size", batch_size)
    shuffle_buffer = check_int("shuffle_buffer", shuffle_buffer, 0, hint=" (0: no shuffling)")
    max_examples = check_int("max_examples", max_examples, allow_none=True)
    spec = read_spec(folder)
    check_matches(spec, folder, **(expect or {}))
    specs = feature_specs(spec)
    files = _shard_files(folder, spec)
    if not files:
        raise ShardError(f"Shard folder {os.fspath(folder)!r} lists no shard.")
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if input_context is not None:
        if len(files) < input_context.num_input_pipelines:
            raise ShardError(
                f"Shard folder {os.fspath(folder)!r} has {len(files)} shard(s) for "
                f"{input_context.num_input_pipelines} input pipelines; each needs "
                "at least one: preprocess with --num-shards >= the number of workers."
            )
        dataset = dataset.shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id
        )
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    cycle = cycle_length or min(len(files), 8)
    parallel = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": True}
    dataset = dataset.interleave(
        tf.data.TFRecordDataset, cycle_length=cycle, block_length=1,
        **(parallel if cycle > 1 else {}),
    )
    dataset = dataset.map(
        parse_function(specs), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    if not include_ids:
        dataset = dataset.map(
            lambda example: {name: example[name] for name in specs}
        )
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    if repeat:
        dataset = dataset.repeat()
    if data_service is not None:
        address, job_name = data_service
        dataset = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch",
                service=address,
                job_name=job_name,
            )
        )
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    structure = spec["structure"]
    sizes = axis_sizes(
        structure["max_units"], structure["max_tokens"], structure["max_target_length"],
        structure["family_options"].get("context_length"),
    )
    batched = dict(specs, example_id=EXAMPLE_ID_FEATURE) if include_ids else specs
    padded_shapes, padding_values = {}, {}
    for name, feature in batched.items():
        padded_shapes[name] = tf.TensorShape(
            padded_shape(name, feature, sizes, pad_to_max, _missing_size)
        )
        padding_values[name] = tf.constant(
            padding_value(name, feature, spec["pad_id"]), dtype=_tf_dtype(feature.dtype)
        )
    dataset = dataset.padded_batch(
        batch_size,
        padded_shapes=padded_shapes,
        padding_values=padding_values,
        drop_remainder=drop_remainder,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _missing_size(name, axis):
    return ShardError(
        f"pad_to_max=True needs the size of axis {axis!r} of feature "
        f"{name!r}, and the shard spec records none."
    )
