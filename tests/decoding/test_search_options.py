"""`SearchOptions` (keras_hsum.decoding.search_options) on every backend.

Reference: the search functions called directly with the score terms each
option stands for; an options object must decode exactly what they decode.
The export tests cover it inside SavedModels (TensorFlow only).
"""

import numpy as np
import pytest

from keras_hsum.decoding import AttentionAlignment
from keras_hsum.decoding import ExtractiveAlignment
from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import RecentTokenBlocking
from keras_hsum.decoding import SearchOptions
from keras_hsum.decoding import TokenBlocking
from keras_hsum.decoding import beam_search
from keras_hsum.decoding import greedy_search
from keras_hsum.decoding import mbr_rerank
from keras_hsum.decoding import sample_search
from test_model_decoding import built
from test_model_decoding import flat_inputs
from test_model_decoding import flat_model
from test_model_decoding import numpy
from test_model_decoding import paragraph_inputs
from test_model_decoding import pht_model


def assert_same(result, expected):
    for key in ("sequences", "lengths"):
        np.testing.assert_array_equal(numpy(result[key]), numpy(expected[key]))
    np.testing.assert_allclose(numpy(result["scores"]), numpy(expected["scores"]), atol=1e-5)


@pytest.fixture(scope="module")
def flat():
    inputs = flat_inputs()
    return built(flat_model(), inputs), inputs


def test_beam_options_decode_what_beam_search_decodes_with_their_terms(flat):
    model, inputs = flat
    options = SearchOptions(beam_size=3, max_length=7, min_length=2, length_alpha=0.6,
                            block_ngrams=2, block_recent=2, recent_exceptions=(5,),
                            blocked_ids=(1,))
    expected = beam_search(
        model, inputs, beam_size=3, max_length=7, min_length=2,
        terms=[LengthNormalization(0.6), NgramBlocking(2), RecentTokenBlocking(2, (5,)),
               TokenBlocking((1,))])
    assert_same(options(model, inputs), expected)
    # The terms change what is decoded here, so a lost term would be seen.
    plain = beam_search(model, inputs, beam_size=3, max_length=7)
    assert not np.array_equal(numpy(plain["sequences"]), numpy(expected["sequences"]))


def test_beam_of_one_is_greedy_search(flat):
    model, inputs = flat
    result = SearchOptions(beam_size=1, max_length=6, length_normalization=False)(model, inputs)
    assert_same(result, greedy_search(model, inputs, max_length=6))


def test_sampling_with_mbr_is_sample_search_then_mbr_rerank(flat):
    model, inputs = flat
    options = SearchOptions(beam_size=4, max_length=6, length_normalization=False, mbr=True,
                            sampling={"epsilon": 0.02, "seed": 3})
    samples = sample_search(model, inputs, num_samples=4, max_length=6, epsilon=0.02, seed=3,
                            rows_alike=True)
    expected = mbr_rerank(samples, eos_id=model.eos_id, pad_id=model.pad_id)
    assert_same(options(model, inputs), expected)
    assert options.to_dict()["sampling"]["seed"] == 3
    assert SearchOptions(**options.to_dict()) == options


def test_attention_alignment_reads_the_predicted_attention_and_paragraph_mask():
    inputs = paragraph_inputs()
    model = built(pht_model(), inputs)
    eta_hat = np.random.default_rng(0).random((2, 4)).astype("float32")
    with_eta = dict(inputs, predicted_attention=eta_hat)
    (term,) = [t for t in SearchOptions(alignment_beta=0.5).terms(with_eta)
               if isinstance(t, AttentionAlignment)]
    assert term.beta == 0.5
    assert not any(isinstance(t, AttentionAlignment) for t in SearchOptions().terms(inputs))
    result = SearchOptions(beam_size=2, max_length=5, alignment_beta=0.5)(model, with_eta)
    mask = inputs["paragraph_mask"]
    expected = beam_search(model, with_eta, beam_size=2, max_length=5, terms=[
        LengthNormalization(None), AttentionAlignment(eta_hat, beta=0.5, paragraph_mask=mask)])
    assert_same(result, expected)


def test_extractive_alignment_reads_the_ranker_scores_and_paragraph_mask():
    """η̂ = the learned ranker's `rank_score` normalised over the real
    paragraphs (numpy), as `keras-hsum export --extractive-alignment` serves."""
    inputs = paragraph_inputs()
    model = built(pht_model(), inputs)
    scores = np.random.default_rng(1).random((2, 4)).astype("float32")
    ranked = dict(inputs, rank_score=scores)
    assert not any(isinstance(t, ExtractiveAlignment) for t in SearchOptions().terms(ranked))
    (term,) = [t for t in SearchOptions(extractive_beta=0.5).terms(ranked)
               if isinstance(t, ExtractiveAlignment)]
    mask = numpy(inputs["paragraph_mask"]).astype(bool)
    kept = np.where(mask, scores, 0.0)
    eta_hat = kept / kept.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(numpy(term.eta_hat), eta_hat, rtol=1e-6)
    result = SearchOptions(beam_size=2, max_length=5, extractive_beta=0.5)(model, ranked)
    expected = beam_search(model, ranked, beam_size=2, max_length=5, terms=[
        LengthNormalization(None),
        AttentionAlignment(eta_hat, beta=0.5, paragraph_mask=inputs["paragraph_mask"])])
    assert_same(result, expected)


def test_export_serving_still_has_it():
    pytest.importorskip("tensorflow")
    from keras_hsum.export import serving

    assert serving.SearchOptions is SearchOptions
