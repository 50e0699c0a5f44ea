"""`check_feature_shapes`: the features of one batch must agree (batch
size, masks against their tokens) wherever their static shapes are known;
models and the searches call it before any op, which would otherwise
broadcast a batch-1 mask over the batch. `check_hyperparameters`: sizes,
layer counts and dropout named by the constructors.

Reference: the property itself (a batch-1 mask must not give the outputs of
every example masked like the first), checked on a real model.
"""

import numpy as np
import pytest

from keras_hsum.layers.input_checks import check_feature_shapes
from keras_hsum.layers.input_checks import check_hyperparameters


def _features(batch=2, paragraphs=3, length=4):
    tokens = np.ones((batch, paragraphs, length), "int32")
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": np.ones((batch, paragraphs), bool),
            "decoder_tokens": np.ones((batch, 5), "int32")}


def test_agreeing_features_pass_and_unknown_sizes_are_not_compared():
    check_feature_shapes("m", _features())
    check_feature_shapes("m", dict(_features(), token_mask=None))
    check_feature_shapes("m", {"tokens": np.ones((2, 9), "int32"),
                               "token_mask": np.ones((2, 9), bool)})

    class Symbolic:  # a traced tensor: unknown batch and length
        shape = (None, None)
        dtype = "int32"

    check_feature_shapes("m", {"tokens": Symbolic(), "token_mask": np.ones((2, 9), bool),
                               "decoder_tokens": np.ones((2, 5), "int32")})
    check_feature_shapes("m", [1, 2])  # not a feature dict: nothing to compare


@pytest.mark.parametrize("change, message", [
    (dict(token_mask=np.ones((1, 3, 4), bool)),
     r"same batch size B .*'token_mask': 1, 'tokens': 2"),
    (dict(decoder_tokens=np.ones((3, 5), "int32")), r"'decoder_tokens': 3"),
    (dict(token_mask=np.ones((2, 3, 5), bool)),
     r"`token_mask` must have shape \(2, 3, 4\) \(from `tokens` \(2, 3, 4\)\), "
     r"received \(2, 3, 5\)"),
    (dict(paragraph_mask=np.ones((2, 2), bool)),
     r"`paragraph_mask` must have shape \(2, 3\)"),
])
def test_disagreeing_features_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        check_feature_shapes("my_model", dict(_features(), **change))


def test_models_and_searches_refuse_a_batch_one_mask():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
    import test_flat_transformer as flat_tests
    import test_parallel_hierarchical_transformer as pht_tests
    import test_paragraph_ranker as ranker_tests

    from keras_hsum.decoding import beam_search

    inputs = flat_tests.random_inputs()
    model = flat_tests.small_model()
    model(inputs)
    with pytest.raises(ValueError, match="same batch size"):
        model(dict(inputs, token_mask=inputs["token_mask"][:1]))
    pht = pht_tests.small_model()
    features = pht_tests.random_inputs()
    pht(features)
    source = {k: v for k, v in features.items() if k != "decoder_tokens"}
    with pytest.raises(ValueError, match="same batch size"):
        beam_search(pht, dict(source, paragraph_mask=source["paragraph_mask"][:1]),
                    beam_size=2, max_length=3)
    ranker = ranker_tests.small_model()
    ranker_inputs = ranker_tests.random_inputs()
    with pytest.raises(ValueError, match="same batch size"):
        ranker(dict(ranker_inputs, context_tokens=ranker_inputs["context_tokens"][:1]))


def test_token_ids_outside_the_vocabulary_are_named():
    """numpy ids are checked against [0, V) ([0, V + num_oov) for a copy
    model's decoder input); tensors and unknown vocabularies are not read."""
    features = _features()
    check_feature_shapes("m", features, vocabulary_size=2)
    check_feature_shapes("m", dict(features, tokens=features["tokens"] * 9))  # no V given
    for key in ("tokens", "decoder_tokens"):
        for bad, shown in ((7, "from 1 to 7"), (-1, "from -1 to 1")):
            changed = dict(features, **{key: features[key].copy()})
            changed[key].flat[-1] = bad
            with pytest.raises(ValueError, match=rf"^my_model: `{key}` must hold token ids in "
                                                 rf"\[0, 7\) .*received ids {shown}\. Encode"):
                check_feature_shapes("my_model", changed, vocabulary_size=7)
    extended = dict(features, decoder_tokens=np.full((2, 5), 8, "int32"))
    check_feature_shapes("m", extended, vocabulary_size=7, num_oov=2)
    with pytest.raises(ValueError, match=r"`decoder_tokens` must hold token ids in \[0, 9\) "
                                         r"\(the model's vocabulary_size 7 \+ num_oov 2\)"):
        check_feature_shapes("m", dict(extended, decoder_tokens=extended["decoder_tokens"] + 1),
                             vocabulary_size=7, num_oov=2)
    with pytest.raises(ValueError, match=r"`tokens` must hold token ids in \[0, 7\)"):
        check_feature_shapes("m", dict(features, tokens=np.full((2, 3, 4), 8, "int32")),
                             vocabulary_size=7, num_oov=2)  # source ids are never extended
    # The structurer's `source_extended_ids` (oov_words=K) must fit the model's num_oov.
    source = dict(features, source_extended_ids=np.full((2, 3, 4), 8, "int32"))
    check_feature_shapes("m", source, vocabulary_size=7, num_oov=2)
    with pytest.raises(ValueError, match=r"`source_extended_ids` must hold token ids in "
                                         r"\[0, 8\) \(the model's vocabulary_size 7 \+ num_oov 1\)"):
        check_feature_shapes("m", source, vocabulary_size=7, num_oov=1)


@pytest.mark.jax_slow  # 29 s under JAX (compiles whole searches): the slow set's JAX pass
def test_models_and_searches_refuse_ids_of_another_vocabulary():
    """A batch encoded with a larger vocabulary: ids >= V would give NaN
    logits under JAX (and negative ids wrap around on every backend); each
    model and the searches name the feature instead."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
    import test_discourse_summarizer as discourse_tests
    import test_flat_transformer as flat_tests
    import test_paragraph_ranker as ranker_tests
    import test_shte as shte_tests

    from keras_hsum.decoding import beam_search
    from keras_hsum.models import SummarizerEnsemble

    inputs = flat_tests.random_inputs()
    model = flat_tests.small_model()
    model(inputs)
    for key, value in (("tokens", 60), ("decoder_tokens", 60), ("tokens", -3)):
        changed = dict(inputs, **{key: inputs[key].copy()})
        changed[key][0, 1] = value
        with pytest.raises(ValueError, match=rf"flat_transformer.*: `{key}` must hold token ids in "
                                             r"\[0, 60\)"):
            model(changed)
    source = {k: v for k, v in inputs.items() if k != "decoder_tokens"}
    bad_source = dict(source, tokens=np.where(source["tokens"] > 0, 61, 0).astype("int32"))
    for searched in (model, SummarizerEnsemble([model, model])):
        with pytest.raises(ValueError, match=r"`tokens` must hold token ids in \[0, 60\)"):
            beam_search(searched, bad_source, beam_size=2, max_length=3)
    beam_search(model, source, beam_size=2, max_length=3)

    # The discourse model reads decoder ids >= V (a source OOV's extended
    # id) as unk: they are valid up to V + num_oov.
    discourse = discourse_tests.small_model()
    features = discourse_tests.random_inputs()
    extended = dict(features, decoder_tokens=features["decoder_tokens"].copy())
    extended["decoder_tokens"][0, 2] = discourse_tests.V + 2
    discourse(extended)
    extended["decoder_tokens"][0, 2] = discourse_tests.V + 3
    with pytest.raises(ValueError, match=r"`decoder_tokens` must hold token ids in \[0, 43\)"):
        discourse(extended)

    shte = shte_tests.small_model()
    shte_inputs = shte_tests.random_inputs()
    shte(shte_inputs)
    with pytest.raises(ValueError, match=r"`summary_tokens` must hold token ids in \[0, 40\)"):
        shte(dict(shte_inputs, summary_tokens=shte_inputs["summary_tokens"] + 40))
    ranker = ranker_tests.small_model()
    ranker_inputs = ranker_tests.random_inputs()
    ranker(ranker_inputs)
    with pytest.raises(ValueError, match=r"`context_tokens` must hold token ids in \[0, 50\)"):
        ranker(dict(ranker_inputs, context_tokens=ranker_inputs["context_tokens"] - 51))


def test_hyperparameters_by_name():
    check_hyperparameters("m", hidden_dim=np.int64(16), num_heads=2, num_encoder_layers=0,
                          num_decoder_layers=1, dropout=np.float32(0.1), num_oov=0,
                          sentence_intermediate_dim=None, layer_schedule="LLG",
                          optional=("sentence_intermediate_dim",))
    for values, message in [
        (dict(num_heads=0), "`num_heads` must be an int >= 1, received 0"),
        (dict(hidden_dim=16.0), "`hidden_dim` must be an int >= 1, received 16.0"),
        (dict(vocabulary_size=True), "`vocabulary_size`.*received True"),
        (dict(num_encoder_layers=-1), "`num_encoder_layers` must be an int >= 0"),
        (dict(num_decoder_layers=0), "`num_decoder_layers` must be an int >= 1"),
        (dict(extract_length=0), "`extract_length` must be an int >= 1"),
        (dict(dropout=1.0), r"`dropout` must be a number in \[0, 1\), received 1.0"),
        (dict(dropout=-0.1), "`dropout`"),
        (dict(dropout="0.1"), "`dropout`"),
        # None only where the constructor declares it optional.
        (dict(sentence_intermediate_dim=None), "`sentence_intermediate_dim` must be an int >= 1, "
                                               "received None"),
        (dict(num_decoder_layers=None), "`num_decoder_layers` must be an int >= 1, received None"),
        (dict(dropout=None), r"`dropout` must be a number in \[0, 1\), received None"),
    ]:
        with pytest.raises(ValueError, match="^my_model: " + message):
            check_hyperparameters("my_model", **values)


@pytest.mark.parametrize("model, arguments, message", [
    ("FlatTransformer", dict(vocabulary_size=50, num_heads=0), "`num_heads` must be an int >= 1"),
    ("FlatTransformer", dict(vocabulary_size=50, num_decoder_layers=0), "`num_decoder_layers`"),
    ("FlatTransformer", dict(vocabulary_size=50, num_encoder_layers=-1), "`num_encoder_layers`"),
    ("HierarchicalTransformer", dict(vocabulary_size=50, hidden_dim=0), "`hidden_dim`"),
    ("ParallelHierarchicalTransformer", dict(vocabulary_size=50, dropout=1.5), "`dropout`"),
    ("DiscourseSummarizer", dict(vocabulary_size=50, embedding_dim=0), "`embedding_dim`"),
    ("SEAL", dict(vocabulary_size=50, intermediate_dim=0), "`intermediate_dim`"),
    ("SHTE", dict(vocabulary_size=50, num_sentence_layers=-2), "`num_sentence_layers`"),
    ("ParagraphRanker", dict(vocabulary_size=0), "`vocabulary_size`"),
    ("AttentionPredictor", dict(num_heads=0), "`num_heads`"),
    ("CompressiveAbstractive", dict(vocabulary_size=50, dropout=-0.5), "`dropout`"),
    ("CompressiveAbstractive", dict(vocabulary_size=50, snippets_per_group=None),
     "`snippets_per_group` must be an int >= 1, received None"),
    ("CompressiveAbstractive", dict(vocabulary_size=50, compressed_length=0),
     "`compressed_length` must be an int >= 1, received 0"),
    ("CompressiveAbstractive", dict(vocabulary_size=50, max_documents=0),
     "`max_documents` must be an int >= 1, received 0"),
    ("CompressiveAbstractive", dict(vocabulary_size=50, max_documents=True),
     "`max_documents` must be an int >= 1, received True"),
    ("ParallelHierarchicalTransformer", dict(vocabulary_size=50, num_decoder_layers=None),
     "`num_decoder_layers` must be an int >= 1, received None"),
    ("FlatTransformer", dict(vocabulary_size=None), "`vocabulary_size` must be an int >= 1"),
])
def test_models_name_a_bad_constructor_argument(model, arguments, message):
    import keras_hsum.models as models

    with pytest.raises(ValueError, match=message):
        getattr(models, model)(**arguments)
