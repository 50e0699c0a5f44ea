"""keras_hsum.features declares what the data parts produce: checked against
the real graph structurer and `make_dataset` on bundled examples, and
against the input checks' mask rules."""

import numpy as np
import pytest
import tensorflow as tf

from keras_hsum import features
from keras_hsum.data.pipeline import declare_features
from keras_hsum.data.pipeline import make_dataset
from keras_hsum.data.reader import render_documents
from keras_hsum.data.structurer import TextStructurer
from keras_hsum.layers.input_checks import check_feature_shapes

pytestmark = pytest.mark.tensorflow_only

SIZES = {"max_units": 6, "max_tokens": 12, "max_target_length": 10}
CONTEXT = 5


def _structure(family, vocabulary, examples):
    options = {"context_length": CONTEXT} if family == "paragraphs" else {}
    units = None if family == "flat" else SIZES["max_units"]
    structurer = TextStructurer(
        vocabulary.proto, family, units, SIZES["max_tokens"], **options
    )
    documents = [render_documents(example) for example in examples]
    width = max(len(d) for d in documents)
    documents = tf.constant([d + [""] * (width - len(d)) for d in documents])
    titles = tf.constant([example.title or "" for example in examples])
    return structurer(documents, title=titles)


def _expected_shape(feature, batch):
    sizes = features.axis_sizes(
        SIZES["max_units"], SIZES["max_tokens"], SIZES["max_target_length"], CONTEXT
    )
    return [batch] + features.padded_shape("x", feature, sizes, True, None)


@pytest.mark.parametrize("family", features.FAMILIES)
def test_the_structurer_produces_the_declared_features(family, vocabulary, real_examples):
    """The graph structurer's features are exactly the family's declared
    ones, with the declared dtype and the declared axes' sizes; every
    declared mask has the leading shape of the feature it masks."""
    examples = real_examples("qmsum_goldspan", "val")[:3]
    built = _structure(family, vocabulary, examples)
    declared = features.family_features(family)
    assert set(built) >= set(declared)
    for name, feature in declared.items():
        value = built[name].numpy()
        assert value.dtype == feature.numpy_dtype, name
        assert list(value.shape) == _expected_shape(feature, 3), name
    for mask, of, prefix in features.masks():
        if mask in declared:
            shape = built[of].shape
            want = shape if prefix is None else shape[:prefix]
            assert built[mask].shape == want, mask
            # Masked-out token positions hold the pad id.
            if mask == features.TOKEN_MASK:
                ids = built[of].numpy()
                assert np.all(ids[~built[mask].numpy()] == vocabulary.pad_id)


def test_make_dataset_batches_the_declared_features_and_extras(vocabulary, real_examples):
    """`make_dataset`'s batches hold the declared family features, the
    target and an extra's declared feature, each padded as declared."""

    @declare_features(row_score=("float32", ("P",), -1.0))
    def row_score(example, structured):
        return {"row_score": np.arange(len(structured.texts), dtype=np.float32)}

    examples = real_examples("qmsum_goldspan", "val")[:4]
    dataset = make_dataset(
        examples, vocabulary, "sections", batch_size=4, extras=[row_score], **SIZES
    )
    batch = next(iter(dataset))
    declared = dict(features.family_features("sections", with_target=True))
    declared["row_score"] = row_score.feature_spec["row_score"]
    assert set(batch) == set(declared)
    for name, feature in declared.items():
        assert batch[name].dtype == tf.as_dtype(feature.numpy_dtype), name
        assert batch[name].shape.rank == 1 + len(feature.axes), name
    rows = batch[features.PARAGRAPH_MASK].numpy()
    scores = batch["row_score"].numpy()[:, : rows.shape[1]]
    # Padded rows take the extra's declared padding, kept rows its values.
    assert np.all(scores[~rows] == -1.0)
    assert np.all(scores[rows] >= 0.0)


def test_padding_rule():
    token = features.family_features("flat")[features.TOKENS]
    mask = features.family_features("flat")[features.TOKEN_MASK]
    assert features.padding_value(features.TOKENS, token, 7) == 7
    assert features.padding_value(features.TOKEN_MASK, mask, 7) is False
    assert features.padding_value("x", features.Feature("float32", ("P",)), 7) == 0
    assert features.padding_value("x", features.Feature("string", ()), 7) == b""
    assert features.padding_value("x", features.Feature("float32", ("P",), -1.0), 7) == -1.0
    with pytest.raises(KeyError, match="'P'"):
        features.padded_shape(
            "x", features.Feature("float32", ("P",)), {"T": 4}, True,
            lambda name, axis: KeyError(axis),
        )
    assert features.padded_shape(
        "x", features.Feature("float32", ("P", "T", 3, None)), {"T": 4}, False, None
    ) == [None, 4, 3, None]


@pytest.mark.parametrize("mask, of, prefix", features.masks())
def test_input_checks_refuse_a_mask_that_disagrees_with_its_feature(mask, of, prefix):
    """Each declared mask relation is enforced by the models' input checks."""
    tokens = np.zeros((2, 3, 4), np.int32)
    good = np.ones((2, 3, 4) if prefix is None else (2, 3)[:prefix], bool)
    check_feature_shapes("model", {of: tokens, mask: good})
    bad = np.ones((2, 5, 4) if prefix is None else (2, 5), bool)
    with pytest.raises(ValueError, match=mask):
        check_feature_shapes("model", {of: tokens, mask: bad})


def test_training_pairs_give_the_declared_teacher_forcing_features():
    """`training_pairs` replaces `target` [B,S] by the declared
    `decoder_tokens` and `target_mask` [B,S-1]: target[:, :-1] and
    target[:, 1:] != pad, the labels being target[:, 1:]."""
    from keras_hsum.data.pipeline import training_pairs

    pad = 0
    target = np.array([[1, 5, 6, 2, 0, 0], [1, 7, 2, 0, 0, 0]], np.int32)
    batch = {features.TARGET: target, features.TOKENS: np.ones([2, 3, 4], np.int32)}
    batches = tf.data.Dataset.from_tensors(batch)
    inputs, labels, weights = next(iter(training_pairs(batches, pad)))
    declared = features.TEACHER_FORCING_FEATURES
    assert features.TARGET not in inputs and set(declared) <= set(inputs)
    for name, feature in declared.items():
        assert inputs[name].dtype == tf.as_dtype(feature.numpy_dtype), name
        assert inputs[name].shape.rank == 1 + len(feature.axes), name
    np.testing.assert_array_equal(inputs[features.DECODER_TOKENS], target[:, :-1])
    np.testing.assert_array_equal(labels, target[:, 1:])
    np.testing.assert_array_equal(inputs[features.TARGET_MASK], target[:, 1:] != pad)
    np.testing.assert_array_equal(weights, target[:, 1:] != pad)
    # The mask marks the decoder tokens' positions.
    assert declared[features.TARGET_MASK].mask_of == features.DECODER_TOKENS


# One recipe per structure family, the SavedModel kind it exports and the
# optional outputs it adds.
SERVED = {
    "pht": dict(ranked=True),  # paragraphs
    "flat": {},  # flat
    "discourse": {},  # sections
    "seal": dict(seal=True),  # snippets
    "shte": None,  # sentences: an extractor
}


# Tracing a summarizer's beam search takes 20-80 s on 2 cores: the
# summarizers run in the slow set, SHTE's extractor (6 s) by default.
@pytest.mark.parametrize("recipe_name", [
    pytest.param(name, marks=[] if SERVED[name] is None else [pytest.mark.slow])
    for name in sorted(SERVED)
])
def test_the_serving_signatures_return_the_declared_outputs(recipe_name, vocabulary):
    """Each signature of the serving module `keras-hsum export` builds for a
    recipe's run returns exactly the declared outputs, with their dtypes and
    ranks (a batch axis first); the signature's output names are what TF
    Serving and `keras-hsum summarize` read."""
    import keras

    from keras_hsum import recipes
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.exporter import build_module
    from keras_hsum.export.exporter import build_structurer
    from keras_hsum.export.serving import DEFAULT_SIGNATURE
    from keras_hsum.export.serving import EXTRACT_SIGNATURE

    recipe = recipes.get(recipe_name)
    config = recipes.config(recipe_name, "tiny")
    keras.utils.set_random_seed(0)
    model = recipe.build_model(config, vocabulary.vocabulary_size)
    structurer, _ = build_structurer(recipe, recipe_name, config, vocabulary)
    built = structurer(tf.constant([["A first paragraph. It has two sentences.\n\nA second one."]]))
    numeric = {k: v for k, v in built.items() if v.dtype != tf.string}
    if SERVED[recipe_name] is not None:  # a summarizer decodes once built
        model({**numeric, features.DECODER_TOKENS: tf.zeros([1, 2], tf.int32)})
    module = build_module(model, structurer, search=SearchOptions(beam_size=2, max_length=3))
    if SERVED[recipe_name] is None:
        expected = {DEFAULT_SIGNATURE: features.EXTRACTOR_OUTPUTS,
                    EXTRACT_SIGNATURE: features.EXTRACT_OUTPUTS}
    else:
        outputs = features.summarizer_outputs(**SERVED[recipe_name])
        expected = {name: outputs for name in module.signatures()}
    signatures = module.signatures()
    assert set(signatures) == set(expected)
    for signature, function in signatures.items():
        returned = function.structured_outputs
        assert sorted(returned) == sorted(expected[signature]), signature
        for name, feature in expected[signature].items():
            assert returned[name].dtype == tf.as_dtype(feature.numpy_dtype), (signature, name)
            assert returned[name].shape.rank == 1 + len(feature.axes), (signature, name)
