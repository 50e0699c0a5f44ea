"""`--set backbone=PRESET` in the flat, ht and pht recipes: the model each
builds on a T5 preset saved by the test, its special ids, and the optimizer
groups that `backbone_learning_rate_scale` / `backbone_freeze_steps` make."""

import pytest

from preset_helpers import save_presets

pytestmark = [
    pytest.mark.tensorflow_only,
    # keras-hub's T5 layers hand their attention mask on as a Keras mask.
    pytest.mark.filterwarnings(
        "ignore:Layer '.*' \\(of type T5MultiHeadAttention\\) was passed an input with a mask"
    ),
]


@pytest.fixture(scope="module")
def t5_preset(tmp_path_factory, real_examples):
    return save_presets(tmp_path_factory.mktemp("presets"), real_examples, kinds=("t5",))["t5"]


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_each_recipe_builds_its_model_on_the_backbone(t5_preset):
    from keras_hsum import recipes
    from keras_hsum.data import PresetVocabulary
    from keras_hsum.models import BackboneSummarizer
    from keras_hsum.models import HierarchicalBackboneSummarizer

    vocabulary = PresetVocabulary.from_preset(t5_preset)
    size = vocabulary.vocabulary_size
    flat = recipes.get("flat").build_model(
        recipes.config("flat", "tiny").replace(backbone=t5_preset), size)
    assert type(flat) is BackboneSummarizer
    ht = recipes.get("ht").build_model(
        recipes.config("ht", "tiny").replace(backbone=t5_preset, layer_schedule="LLGLG"), size)
    assert type(ht) is HierarchicalBackboneSummarizer
    assert ht.num_global_layers == 2 and not ht.parallel_cross_attention
    pht = recipes.get("pht").build_model(
        recipes.config("pht", "tiny").replace(backbone=t5_preset, num_paragraph_layers=1), size)
    assert pht.parallel_cross_attention and pht.num_global_layers == 0
    assert len(pht.paragraph_encoder_layers) == 1
    for model in (flat, ht, pht):
        assert (model.pad_id, model.bos_id, model.eos_id) == (
            vocabulary.pad_id, vocabulary.bos_id, vocabulary.eos_id) == (0, 0, 1)
    with pytest.raises(ValueError, match="embeds"):
        recipes.get("flat").build_model(
            recipes.config("flat", "tiny").replace(backbone=t5_preset), size + 1)


def test_learning_rate_groups_follow_the_model(t5_preset):
    from keras_hsum import recipes
    from keras_hsum.training.learning_rate_groups import GroupedAdam
    from keras_hsum.training.model_setup import make_optimizer

    config = recipes.config("pht", "tiny").replace(backbone=t5_preset)
    model = recipes.get("pht").build_model(config, 10)
    groups = model.variable_groups()
    pretrained = {id(v) for v in groups["pretrained"]}
    assert pretrained == {id(v) for v in model.backbone.trainable_variables}
    encoder = {id(v) for v in groups["pretrained_encoder"]}
    assert encoder and encoder < pretrained
    assert id(model.backbone.token_embedding.embeddings) not in encoder  # shared with the decoder
    new = {id(v) for v in groups["new"]}
    assert new and not new & pretrained
    assert new | pretrained == {id(v) for v in model.trainable_variables}

    assert type(make_optimizer(config, model)).__name__ == "Adam"  # defaults: no groups
    tuned = config.replace(backbone_learning_rate_scale=0.1, backbone_freeze_steps=50)
    optimizer = make_optimizer(tuned, model)
    assert isinstance(optimizer, GroupedAdam)
    assert optimizer.groups == [
        {"name": "pretrained", "scale": 0.1, "freeze_steps": 0},
        {"name": "pretrained_encoder", "scale": 0.1, "freeze_steps": 50},
    ]
    optimizer.build(model.trainable_variables)
    settings = dict(zip((id(v) for v in model.trainable_variables), optimizer._settings))
    assert {settings[i] for i in encoder} == {(0.1, 50)}
    assert {settings[i] for i in pretrained - encoder} == {(0.1, 0)}
    assert {settings[i] for i in new} == {(1.0, 0)}


def test_backbone_options_are_checked(t5_preset):
    from keras_hsum import recipes

    config = recipes.config("pht", "tiny")
    with pytest.raises(ValueError, match="set `backbone` too"):
        config.replace(backbone_freeze_steps=10)
    with pytest.raises(ValueError, match="an int >= 0"):
        config.replace(backbone=t5_preset, backbone_freeze_steps=-1)
    with pytest.raises(ValueError, match="a number >= 0"):
        config.replace(backbone=t5_preset, backbone_learning_rate_scale="fast")
    with pytest.raises(ValueError, match="optimizer='adam'"):
        config.replace(backbone=t5_preset, backbone_learning_rate_scale=0.5, optimizer="adagrad")


def test_flat_on_a_bart_backbone_refuses_a_source_past_its_positions(
    tmp_path, real_examples
):
    """BART's learned positions end at max_sequence_length (8 in the test
    preset): the flat recipe refuses max_source_length=400 when it builds
    the model, naming the setting, both numbers and the --set that fits."""
    from keras_hsum import recipes
    from keras_hsum.data import PresetVocabulary

    bart = save_presets(tmp_path, real_examples, kinds=("bart",))["bart"]
    size = PresetVocabulary.from_preset(bart).vocabulary_size
    config = recipes.config("flat", "tiny").replace(backbone=bart)
    assert config.max_source_length == 400
    with pytest.raises(ValueError, match=r"max_source_length=400.* at most 8 source "
                                         r"positions.*--set max_source_length=8"):
        recipes.get("flat").build_model(config, size)
    model = recipes.get("flat").build_model(config.replace(max_source_length=8), size)
    assert model.max_sequence_length == 8
