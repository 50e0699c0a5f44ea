"""PHT on a pretrained backbone through the command line (issue 50): a BART
preset saved by the test (random weights, a BPE tokenizer learned from
bundled text) trains with `--set backbone=PRESET`, is killed mid-epoch and
resumes to the weights of an uninterrupted run, keeps its frozen encoder
equal to the preset's, exports, and serves raw text in a process that
imports neither keras_hsum nor keras-hub, returning what Python's beam
search decodes."""

import os
import sys

import numpy as np
import pytest

from preset_helpers import learn_bpe
from preset_helpers import training_text
from training_runs import history
from training_runs import kill_inside_an_epoch
from training_runs import max_difference
from training_runs import run
from training_runs import saved_weights
from training_runs import train_command
from training_runs import write_corpus

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.slow]

EPOCHS, STEPS_PER_EPOCH = 2, 3


@pytest.fixture(scope="module")
def preset(tmp_path_factory, real_examples):
    """A BART preset folder: backbone (V = the tokenizer's, 2 layers, D 16,
    64 positions) and its byte-level BPE tokenizer (300 merges)."""
    import keras
    import keras_hub

    vocabulary, merges = learn_bpe(training_text(real_examples), 300)
    tokenizer = keras_hub.tokenizers.BartTokenizer(vocabulary=vocabulary, merges=merges)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BartBackbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_heads=2,
        hidden_dim=16, intermediate_dim=32, max_sequence_length=64,
    )
    folder = str(tmp_path_factory.mktemp("presets") / "bart_small")
    backbone.save_to_preset(folder)
    tokenizer.save_to_preset(folder)
    return folder


def overrides(preset):
    return (
        f"backbone={preset}", "backbone_freeze_steps=100", "backbone_learning_rate_scale=0.5",
        "max_paragraphs=4", "max_paragraph_tokens=24", "max_target_length=24",
        "num_paragraph_layers=1", "batch_size=2", "max_val_examples=4",
        "backup_every_steps=1",
    )


def test_pht_on_a_backbone_resumes_freezes_exports_and_serves(preset, tmp_path):
    import keras
    import keras_hub
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.export.exporter import build_structurer
    from keras_hsum.export.cli import load_run
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.training.vocabularies import run_vocabulary
    from tests.export.test_serving import run_saved_model

    data = write_corpus(tmp_path / "data", train_examples=24, val_examples=4)
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    command = train_command("pht", data, killed, epochs=EPOCHS,
                            steps_per_epoch=STEPS_PER_EPOCH, overrides=overrides(preset))
    step = kill_inside_an_epoch(command, killed, STEPS_PER_EPOCH)
    assert 0 < step < EPOCHS * STEPS_PER_EPOCH
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [e["epoch"] for e in history(killed)] == [1, 2]
    result = run(train_command("pht", data, whole, epochs=EPOCHS,
                               steps_per_epoch=STEPS_PER_EPOCH, overrides=overrides(preset)))
    assert result.returncode == 0, result.stderr[-3000:]
    difference = max_difference(saved_weights(os.path.join(killed, "model.keras")),
                                saved_weights(os.path.join(whole, "model.keras")))
    assert difference < 1e-5, f"killed at step {step}: resumed differs by {difference}"

    # The run's tokenizer is the preset's; the encoder (frozen for 100 of 6
    # steps) is the preset's to the bit, the decoder and the gates moved.
    vocabulary = run_vocabulary(str(killed))
    assert vocabulary.vocabulary_size == keras_hub.tokenizers.Tokenizer.from_preset(
        preset).vocabulary_size()
    model = keras.models.load_model(os.path.join(killed, "model.keras"), compile=False)
    pretrained = keras_hub.models.Backbone.from_preset(preset)
    for mine, theirs in zip(model.backbone.encoder_transformer_layers,
                            pretrained.encoder_transformer_layers):
        for a, b in zip(mine.weights, theirs.weights):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max()
             for mine, theirs in zip(model.backbone.decoder_transformer_layers,
                                     pretrained.decoder_transformer_layers)
             for a, b in zip(mine.weights, theirs.weights)]
    assert max(moved) > 1e-4
    assert all(float(np.asarray(g.alpha)) != 0.0 for g in model.paragraph_gates)

    # Export; the SavedModel serves raw text without keras_hsum / keras-hub
    # and returns Python's beam search on the same structured features.
    out = tmp_path / "saved_models" / "pht_bart"
    result = run([sys.executable, "-m", "keras_hsum.cli", "export", "--run", str(killed),
                  "--out", str(out), "--beam-size", "2", "--max-length", "12",
                  "--allow-unknown"])
    assert result.returncode == 0, result.stderr[-3000:]
    recipe_name, recipe, config, loaded_model, loaded_vocabulary = load_run(str(killed))
    structurer, _ = build_structurer(recipe, recipe_name, config, loaded_vocabulary)
    documents = [["First, the committee reviewed the budget for the new school year.\n\n"
                  "Then the members discussed the timetable and agreed on a date.", ""],
                 ["The team looked at the remote control design.", ""]]
    features = structurer(tf.constant(documents))
    numeric = {k: v for k, v in features.items() if v.dtype != tf.string}
    options = SearchOptions(beam_size=2, max_length=12)
    expected = tf.function(lambda x: options(loaded_model, x))(numeric)["sequences"][:, 0]
    [served], leaked = run_saved_model(
        out / "1", [{"signature": "serving_default", "inputs": {"documents": documents}}],
        tmp_path, tensorflow_text=True,
    )
    assert leaked == [] and "__error__" not in served
    np.testing.assert_array_equal(served["summary_ids"][:, :expected.shape[1]],
                                  expected.numpy())
    for ids, text in zip(served["summary_ids"], served["summary"]):
        ids = list(ids)  # no start token; up to EOS (BART: </s>, its start token too)
        ids = ids[:ids.index(vocabulary.eos_id)] if vocabulary.eos_id in ids else ids
        text = text.decode() if isinstance(text, bytes) else str(text)
        assert text == vocabulary.decode(ids)
    assert recipes.config("pht", "tiny").backbone is None and config.backbone == preset
