"""Shard folders: `keras-hsum preprocess` (Apache Beam) and `read_shards`.

The reference is the in-process pipeline: a recipe's `make_dataset` on the
JSONL corpus must give, batch for batch and tensor for tensor, what the same
recipe gives on the shards that preprocess wrote from that corpus.
"""

import json
import os

import numpy as np
import pytest

# The test command installs the beam extra: a missing Beam fails here
# instead of skipping these tests silently.
import apache_beam  # noqa: E402,F401

import tensorflow as tf  # noqa: E402

from keras_hsum import cli  # noqa: E402
from keras_hsum import recipes  # noqa: E402
from keras_hsum.data import shards  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402


def _write_jsonl(path, examples, extra_lines=()):
    """Writes `examples` as canonical JSONL (plain, uncompressed)."""
    with open(path, "w", encoding="utf-8") as file:
        for example in examples:
            record = {
                "id": example.id,
                "documents": [
                    {"title": document.title, "sections": [
                        {"heading": section.heading, "paragraphs": [list(p) for p in section.paragraphs]}
                        for section in document.sections
                    ]}
                    for document in example.documents
                ],
                "summary": example.summary,
            }
            if example.title:
                record["title"] = example.title
            if example.query:
                record["query"] = example.query
            file.write(json.dumps(record) + "\n")
        for line in extra_lines:
            file.write(line + "\n")


def _preprocess(corpus, out, vocab, *extra):
    return cli.main([
        "preprocess", "--recipe", "ht", "--config", "tiny", "--data", corpus,
        "--out", out, "--vocab", vocab, "--split", "val", *extra,
    ])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, real_examples, vocabulary):
    """24 real qmsum_goldspan examples as one plain JSONL file, with two
    invalid lines and one example without a summary, and a vocabulary
    file; preprocessed once into 3 shards by the in-memory DirectRunner."""
    import dataclasses

    folder = tmp_path_factory.mktemp("shards")
    examples = list(real_examples("qmsum_goldspan", "val")[:24])
    examples.insert(5, dataclasses.replace(examples[5], id="no-summary", summary=""))
    path = str(folder / "corpus.jsonl")
    _write_jsonl(path, examples, extra_lines=["{not json", '{"id": "x"}'])
    vocab = str(folder / "vocab.model")
    vocabulary.save(vocab)
    out = str(folder / "out")
    assert _preprocess(path, out, vocab, "--num-shards", "3") == 0
    return {"path": path, "vocab": vocab, "out": out, "examples": examples}


def _batches(dataset):
    return [
        {name: value.numpy() for name, value in inputs.items()}
        | {"labels": labels.numpy(), "weights": weights.numpy()}
        for inputs, labels, weights in dataset
    ]


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_preprocess_output_equals_in_process_pipeline(corpus):
    recipe = recipes.get("ht")
    config = recipes.config("ht", "tiny").replace(graph_kind="similarity", graph_heads=(0,))
    vocabulary = Vocabulary.load(corpus["vocab"])
    # graph_kind adds an extra: the shards must hold it too. Preprocess that
    # structure into a separate folder.
    out = corpus["out"] + "-graph"
    assert _preprocess(
        corpus["path"], out, corpus["vocab"], "--num-shards", "3",
        "--set", "graph_kind=similarity", "--set", "graph_heads=0",
    ) == 0
    expected = _batches(recipe.make_dataset(config, corpus["path"], vocabulary, training=False))
    actual = _batches(recipe.make_dataset(config, out, vocabulary, training=False))
    assert len(actual) == len(expected) == 3  # 24 examples, batches of 8
    for want, got in zip(expected, actual):
        assert sorted(got) == sorted(want)
        assert "graph" in got
        for name in want:
            assert got[name].dtype == want[name].dtype, name
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_shard_counts_are_exact_and_skips_counted(corpus):
    spec = shards.read_spec(corpus["out"])
    # 25 examples in the file, one without a summary; 2 invalid lines.
    assert spec["examples"] == 24
    assert spec["skipped"]["invalid_lines"] == 2
    assert spec["skipped"]["empty_summary"] == 1
    assert spec["read"] == 27  # every line once
    assert [s["examples"] for s in spec["shards"]] == [
        sum(1 for _ in tf.data.TFRecordDataset(os.path.join(corpus["out"], s["file"])))
        for s in spec["shards"]
    ]
    assert shards.verify_shards(corpus["out"]) == 24
    assert spec["vocabulary"]["sha256"] == shards.file_sha256(corpus["vocab"])
    assert spec["structure"]["features"]["tokens"]["axes"] == ["P", "T"]
    assert spec["structure"]["max_units"] == 12  # ht tiny: max_test_paragraphs for val
    ids = [
        example["example_id"].numpy().decode()
        for example in shards.read_shards(
            corpus["out"], batch_size=1, include_ids=True, cycle_length=1
        ).unbatch()
    ]
    # Contiguous byte ranges read one after the other: corpus order.
    assert ids == [e.id for e in corpus["examples"] if e.id != "no-summary"]


def test_each_input_pipeline_reads_its_own_shards(corpus):
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        dataset = shards.read_shards(
            corpus["out"], batch_size=4, include_ids=True, input_context=context
        )
        batch_sizes = [int(b["example_id"].shape[0]) for b in dataset]
        assert max(batch_sizes) == 2  # the per-replica share of 4
        seen.append({
            i.decode() for b in dataset for i in b["example_id"].numpy()
        })
    spec = shards.read_spec(corpus["out"])
    files = [s["examples"] for s in spec["shards"]]
    assert len(seen[0]) == files[0] + files[2] and len(seen[1]) == files[1]
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 24


def test_mismatched_recipe_structure_or_vocabulary_is_refused(corpus, foreign_vocabulary):
    recipe = recipes.get("ht")
    vocabulary = Vocabulary.load(corpus["vocab"])
    wider = recipes.config("ht", "tiny").replace(max_test_paragraphs=20)
    with pytest.raises(shards.ShardError, match="max_units: shards 12, expected 20"):
        recipe.make_dataset(wider, corpus["out"], vocabulary, training=False)
    with pytest.raises(shards.ShardError, match="vocabulary of sha256"):
        recipe.make_dataset(
            recipes.config("ht", "tiny"), corpus["out"], foreign_vocabulary, training=False
        )
    with pytest.raises(shards.ShardError, match="written for recipe 'ht'"):
        shards.read_shards(corpus["out"], batch_size=2, expect={"recipe": "pht"})


def test_corrupt_or_truncated_shard_names_the_file(corpus, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(corpus["out"], folder)
    spec = shards.read_spec(folder)
    victim = folder / spec["shards"][1]["file"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        for _ in shards.read_shards(folder, batch_size=4):
            pass
    with pytest.raises(shards.ShardError, match=f"{victim.name}' is corrupt at record"):
        shards.verify_shards(folder)
    victim.write_bytes(bytes(data[:100]))
    with pytest.raises(shards.ShardError, match=f"{victim.name}' has 100 bytes"):
        shards.read_shards(folder, batch_size=4)


def test_preprocess_refuses_a_recipe_without_per_example_structure(corpus, tmp_path, capsys):
    code = cli.main([
        "preprocess", "--recipe", "shte", "--config", "tiny", "--data", corpus["path"],
        "--out", str(tmp_path / "shte"), "--vocab", corpus["vocab"],
    ])
    assert code == 1
    assert "cannot be written to shards once" in capsys.readouterr().err


@pytest.mark.slow  # 35 s on 2 cores (a Beam pipeline)
def test_preprocess_without_data_reads_the_recipes_dataset(
    real_examples, vocabulary, tmp_path, monkeypatch
):
    """As `keras-hsum train`, `preprocess` without --data reads the --split
    file of the recipe's corpus (ht tiny: qmsum_goldspan), found where
    `corpora.corpus_path` looks first ($KERAS_HSUM_DATA)."""
    import gzip

    config = recipes.config("ht", "tiny")
    examples = list(real_examples(config.dataset, "val")[:3])
    root = tmp_path / "data"
    (root / config.dataset).mkdir(parents=True)
    plain = str(tmp_path / "val.jsonl")
    _write_jsonl(plain, examples)
    with open(plain, "rb") as source, gzip.open(root / config.dataset / "val.jsonl.gz", "wb") as gz:
        gz.write(source.read())
    monkeypatch.setenv("KERAS_HSUM_DATA", str(root))
    vocab = str(tmp_path / "vocab.model")
    vocabulary.save(vocab)
    out = str(tmp_path / "out")
    assert cli.main(["preprocess", "--recipe", "ht", "--config", "tiny", "--out", out,
                     "--vocab", vocab, "--split", "val", "--num-shards", "1"]) == 0
    ids = [e["example_id"] for e in shards.read_shards(
        out, batch_size=1, include_ids=True, cycle_length=1).unbatch()]
    assert sorted(i.numpy().decode() for i in ids) == sorted(e.id for e in examples)


@pytest.mark.slow
def test_two_worker_direct_runner_writes_the_same_examples(corpus, tmp_path):
    out = str(tmp_path / "two")
    assert _preprocess(
        corpus["path"], out, corpus["vocab"], "--num-shards", "3",
        "--direct-num-workers", "2",
    ) == 0

    def examples(folder):
        dataset = shards.read_shards(folder, batch_size=1, include_ids=True, cycle_length=1)
        return [{k: v.numpy() for k, v in e.items()} for e in dataset.unbatch()]

    two, one = examples(out), examples(corpus["out"])
    assert [e["example_id"] for e in two] == [e["example_id"] for e in one]
    assert len(two) == 24
    for got, want in zip(two, one):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def write_shard_splits(folder, real_examples, vocabulary, recipe="ht"):
    """A folder of train/ and val/ shard folders written by preprocess from
    16 + 8 real qmsum_goldspan examples; returns its path."""
    examples = list(real_examples("qmsum_goldspan", "train")[:24])
    vocab = str(folder / "vocab.model")
    vocabulary.save(vocab)
    for split, part in (("train", examples[:16]), ("val", examples[16:])):
        path = str(folder / f"{split}.jsonl")
        _write_jsonl(path, part)
        assert cli.main([
            "preprocess", "--recipe", recipe, "--config", "tiny", "--data", path,
            "--out", str(folder / "shards" / split), "--vocab", vocab,
            "--split", split, "--num-shards", "2",
        ]) == 0
    return str(folder / "shards")


@pytest.mark.slow
def test_train_reads_a_shard_folder(tmp_path, real_examples, vocabulary):
    from keras_hsum.training import train

    data = write_shard_splits(tmp_path, real_examples, vocabulary)
    config = recipes.config("ht", "tiny").replace(
        epochs=1, steps_per_epoch=2, validation_steps=1
    )
    result = train(recipes.get("ht"), config, out=str(tmp_path / "run"), data=data, verbose=0)
    assert result.steps == 2
    assert np.isfinite(result.history["val_loss"][-1])
    # The run's vocabulary is the one the shards were tokenized with.
    assert shards.file_sha256(tmp_path / "run" / "vocabulary.model") == shards.file_sha256(
        tmp_path / "vocab.model"
    )
    # Another recipe on the same shards is refused before training.
    with pytest.raises(ValueError, match="written for recipe 'ht'"):
        train(recipes.get("pht"), recipes.config("pht", "tiny").replace(
            epochs=1, steps_per_epoch=1), out=str(tmp_path / "pht"), data=data, verbose=0)
    # --data-service without shards is refused.
    with pytest.raises(ValueError, match="give --data a folder of shards"):
        train(recipes.get("ht"), config, out=str(tmp_path / "svc"),
              data=str(tmp_path / "train.jsonl"), data_service="grpc://127.0.0.1:1",
              verbose=0)


@pytest.mark.slow  # trains; about 20 s on CI's 2 cores
def test_training_on_a_corrupt_shard_names_the_file(tmp_path, real_examples, vocabulary):
    """A flipped byte inside a record passes the size check and surfaces in
    training as TensorFlow's DataLossError, which names no file; train then
    raises the ShardError that names the shard and the record."""
    from keras_hsum.training import train

    data = write_shard_splits(tmp_path, real_examples, vocabulary)
    folder = os.path.join(data, "train")
    spec = shards.read_spec(folder)
    victim = os.path.join(folder, spec["shards"][0]["file"])
    with open(victim, "rb") as handle:
        content = bytearray(handle.read())
    content[len(content) // 2] ^= 0xFF
    with open(victim, "wb") as handle:
        handle.write(bytes(content))
    config = recipes.config("ht", "tiny").replace(
        epochs=1, steps_per_epoch=4, validation_steps=1
    )
    name = os.path.basename(victim)
    with pytest.raises(shards.ShardError, match=f"{name}' is corrupt at record"):
        train(recipes.get("ht"), config, out=str(tmp_path / "run"), data=data, verbose=0)
