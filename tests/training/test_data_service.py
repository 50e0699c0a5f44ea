"""tf.data service: `read_shards(data_service=...)` and `train(data_service=...)`
with an in-process dispatcher and two workers on 127.0.0.1."""

import collections

import numpy as np
import pytest

# The test command installs the beam extra: a missing Beam fails here
# instead of skipping these tests silently.
import apache_beam  # noqa: E402,F401

import tensorflow as tf  # noqa: E402

from keras_hsum import recipes  # noqa: E402
from keras_hsum.data import shards  # noqa: E402
from tests.data.test_shards import write_shard_splits  # noqa: E402


@pytest.fixture(scope="module")
def service():
    """A dispatcher and two workers, all on 127.0.0.1; yields the address."""
    service_lib = tf.data.experimental.service
    dispatcher = service_lib.DispatchServer(service_lib.DispatcherConfig(port=0))
    address = dispatcher.target.split("://", 1)[1].replace("localhost", "127.0.0.1")
    workers = [
        service_lib.WorkerServer(service_lib.WorkerConfig(
            dispatcher_address=address, worker_address="127.0.0.1:%port%", port=0
        ))
        for _ in range(2)
    ]
    yield f"grpc://{address}"
    for worker in workers:
        worker.stop()
    dispatcher.stop()


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory, real_examples, vocabulary):
    return write_shard_splits(tmp_path_factory.mktemp("service"), real_examples, vocabulary)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_every_example_of_an_epoch_reaches_the_consumer_once(service, shard_folder):
    folder = f"{shard_folder}/train"
    # The reference: the shard files themselves, read directly.
    expected = [
        tf.train.Example.FromString(record.numpy())
        .features.feature["example_id"].bytes_list.value[0].decode()
        for shard in shards.read_spec(folder)["shards"]
        for record in tf.data.TFRecordDataset(f"{folder}/{shard['file']}")
    ]
    assert len(expected) == 16
    dataset = shards.read_shards(
        folder, batch_size=3, include_ids=True, data_service=(service, "epoch_once")
    )
    received = [i.decode() for batch in dataset for i in batch["example_id"].numpy()]
    assert collections.Counter(received) == collections.Counter(expected)


@pytest.mark.slow  # 12 s + 9 s teardown on CI's 2 cores: the slow set
def test_train_with_data_service(service, shard_folder, tmp_path):
    from keras_hsum.training import train

    config = recipes.config("ht", "tiny").replace(
        epochs=1, steps_per_epoch=2, validation_steps=1
    )
    result = train(
        recipes.get("ht"), config, out=str(tmp_path / "run"), data=shard_folder,
        data_service=service, verbose=0,
    )
    assert result.steps == 2
    assert np.isfinite(result.history["loss"][-1])
