"""A backbone run's vocabulary: the preset's tokenizer in `out/tokenizer/`.

`load_or_train_vocabulary(..., backbone=PRESET)` saves the preset's
tokenizer into the run folder instead of training `vocabulary.model`;
`run_vocabulary(out)` (what resume and export read) loads it back without
the preset. The reference for "the same tokenizer" is the preset's own
keras-hub tokenizer (`Tokenizer.from_preset`) on real text.
"""

import os
import shutil

import pytest

from preset_helpers import save_presets
from keras_hsum.data.preset_vocabulary import PresetVocabulary
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.training.vocabularies import load_or_train_vocabulary
from keras_hsum.training.vocabularies import run_vocabulary
from keras_hsum.training.vocabularies import shard_vocabulary

keras_hub = pytest.importorskip("keras_hub")


@pytest.fixture(scope="module")
def t5_preset(real_examples, tmp_path_factory):
    return save_presets(tmp_path_factory.mktemp("presets"), real_examples, ("t5",))["t5"]


def texts(real_examples):
    return [e.summary for e in real_examples("scitldr_a", "val")[:4]]


def test_backbone_run_saves_and_reloads_the_preset_tokenizer(
    t5_preset, tmp_path, real_examples
):
    preset = str(tmp_path / "preset")
    shutil.copytree(t5_preset, preset)
    out = str(tmp_path / "run")
    reference = keras_hub.tokenizers.Tokenizer.from_preset(preset)
    expected = [list(ids) for ids in reference(texts(real_examples))]

    vocabulary = load_or_train_vocabulary(out, None, 600, backbone=preset)
    assert isinstance(vocabulary, PresetVocabulary)
    assert sorted(os.listdir(out)) == ["tokenizer"]
    assert os.path.isfile(os.path.join(out, "tokenizer", "tokenizer.json"))
    assert vocabulary.encode_batch(texts(real_examples)) == expected
    # Resume and export read the run folder, not the preset.
    shutil.rmtree(preset)
    for loaded in (
        load_or_train_vocabulary(out, None, 600, backbone=preset),
        run_vocabulary(out),
    ):
        assert isinstance(loaded, PresetVocabulary)
        assert (loaded.pad_id, loaded.bos_id, loaded.eos_id) == (0, 0, 1)
        assert loaded.encode_batch(texts(real_examples)) == expected


def test_init_from_copies_the_tokenizer(t5_preset, tmp_path, real_examples):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    load_or_train_vocabulary(first, None, 600, backbone=t5_preset)
    vocabulary = load_or_train_vocabulary(
        second, None, 600, backbone="unreachable_preset", init_from=first
    )
    assert vocabulary.encode_batch(texts(real_examples)) == run_vocabulary(
        first
    ).encode_batch(texts(real_examples))
    with pytest.raises(ValueError, match="no tokenizer/"):
        load_or_train_vocabulary(
            str(tmp_path / "third"), None, 600, backbone=t5_preset,
            init_from=str(tmp_path / "missing"),
        )


def test_mixed_run_folders_are_refused(t5_preset, tmp_path, foreign_vocabulary):
    sentencepiece_run = str(tmp_path / "sp")
    foreign_vocabulary.save(os.path.join(sentencepiece_run, "vocabulary.model"))
    with pytest.raises(ValueError, match="holds a SentencePiece vocabulary.model"):
        load_or_train_vocabulary(sentencepiece_run, None, 600, backbone=t5_preset)
    assert isinstance(run_vocabulary(sentencepiece_run), Vocabulary)

    backbone_run = str(tmp_path / "backbone")
    load_or_train_vocabulary(backbone_run, None, 600, backbone=t5_preset)
    with pytest.raises(ValueError, match="holds a backbone preset's tokenizer"):
        load_or_train_vocabulary(backbone_run, [], 600)
    with pytest.raises(ValueError, match="rank='learned'"):
        load_or_train_vocabulary(
            str(tmp_path / "ranked"), None, 600, backbone=t5_preset,
            ranker_run=sentencepiece_run,
        )
    with pytest.raises(ValueError, match="neither vocabulary.model nor tokenizer/"):
        run_vocabulary(str(tmp_path))


def test_shards_are_refused_for_a_backbone_run(tmp_path):
    with pytest.raises(ValueError, match="shards do not record"):
        shard_vocabulary(
            str(tmp_path / "shards" / "train"), str(tmp_path / "run"),
            backbone="bart_base_en",
        )
