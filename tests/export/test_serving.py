"""Text-in/text-out SavedModels (keras_hsum.export.serving).

The SavedModel is loaded and run by `run_saved_model.py` in a subprocess
that has only TensorFlow and the TF Text kernels (Keras, keras-hub and
keras_hsum are made unimportable there), as TF Serving does. Its outputs are
compared with decoding in Python BEFORE saving: the same `TextStructurer`,
the same model and `keras_hsum.decoding.beam_search` called directly (not
through the serving module), the attention reduced with numpy.
"""

import base64
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_saved_model.py")
BEAM_SIZE = 3
MAX_LENGTH = 12
# The fixture's export caps a row at 64 KiB (the default is 4 MiB).
MAX_REQUEST_BYTES = 64 * 1024


def run_saved_model(path, requests, tmp_path, tensorflow_text=False):
    """Runs `requests` on the SavedModel in a fresh process → list of dicts."""
    requests_file = tmp_path / "requests.json"
    requests_file.write_text(json.dumps(requests))
    out = tmp_path / "outputs.npz"
    command = [sys.executable, RUNNER, str(path), str(requests_file), str(out)]
    if tensorflow_text:
        command.append("--tensorflow-text")
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=""),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    arrays = np.load(out, allow_pickle=True)
    results = [{} for _ in requests]
    for key in arrays.files:
        if key == "__modules__":
            continue
        index, name = key.split("/", 1)
        results[int(index)][name] = arrays[key]
    return results, list(arrays["__modules__"])


def documents_of(example):
    return [
        "\n\n".join(
            " ".join(paragraph)
            for section in document.sections
            for paragraph in section.paragraphs
        )
        for document in example.documents
    ]


def padded(rows):
    width = max(len(row) for row in rows)
    return [row + [""] * (width - len(row)) for row in rows]


def python_decoding(model, structurer, documents, title=None, query=None):
    """The reference: structurer → beam_search → detokenize, in Python."""
    import tensorflow as tf

    from keras_hsum.decoding import LengthNormalization
    from keras_hsum.decoding import NgramBlocking
    from keras_hsum.decoding import beam_search

    kwargs = {}
    if title is not None:
        kwargs = {"title": tf.constant(title), "query": tf.constant(query)}
    features = structurer(tf.constant(documents), **kwargs)
    inputs = {k: v for k, v in features.items() if v.dtype != tf.string}

    @tf.function
    def search(inputs):
        return beam_search(
            model, inputs, beam_size=BEAM_SIZE, max_length=MAX_LENGTH,
            terms=[LengthNormalization(), NgramBlocking(3)],
        )

    result = search(inputs)
    best = result["sequences"][:, 0]
    lengths = result["lengths"][:, 0].numpy()
    attention = result["aux"]["paragraph_attention"][:, 0].numpy()  # [B,L,P]
    mask = features["paragraph_mask"].numpy()
    expected_attention = []
    for b in range(attention.shape[0]):
        total = attention[b, : lengths[b]].sum(axis=0) * mask[b]
        expected_attention.append(total / total.sum() if total.sum() > 0 else total)
    return {
        "summary": structurer.detokenize(best).numpy(),
        "summary_ids": best.numpy(),
        "score": result["scores"][:, 0].numpy(),
        "lengths": lengths,
        "paragraph_attention": np.stack(expected_attention),
        "paragraphs": features["unit_texts"].numpy(),
    }


@pytest.fixture(scope="module")
def pht(tmp_path_factory, vocabulary, real_examples):
    """A random-weight tiny PHT, its structurer, the Python reference
    outputs, the exported SavedModel and the subprocess's outputs."""
    import keras
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.serving import SummarizerModule
    from keras_hsum.export.serving import export_saved_model

    recipe = recipes.get("pht")
    config = recipes.config("pht", "tiny").replace(
        hidden_dim=32, intermediate_dim=64, num_encoder_layers=1,
        num_decoder_layers=1, max_paragraphs=6, max_paragraph_tokens=24,
        max_target_length=MAX_LENGTH + 1,
    )
    keras.utils.set_random_seed(1)
    model = recipe.build_model(config, vocabulary.vocabulary_size)
    structurer = TextStructurer(vocabulary.proto, **recipe.structure_options(config))
    examples = real_examples("qmsum_goldspan", "val")[:2]
    documents = padded([documents_of(e) for e in examples])
    features = structurer(tf.constant(documents))
    model({**features, "decoder_tokens": tf.zeros([2, 4], tf.int32)})
    titles = [e.title or "" for e in examples]
    queries = [e.query or "" for e in examples]
    expected = python_decoding(model, structurer, documents)
    expected_context = python_decoding(model, structurer, documents, titles, queries)

    root = tmp_path_factory.mktemp("saved_models")
    module = SummarizerModule(
        model, structurer,
        SearchOptions(beam_size=BEAM_SIZE, max_length=MAX_LENGTH, block_ngrams=3),
        max_request_bytes=MAX_REQUEST_BYTES,
    )
    path = export_saved_model(module, root / "pht")
    # A run folder as `keras-hsum train` writes it, for the CLI tests.
    run = tmp_path_factory.mktemp("run")
    model.save(run / "model.keras")
    vocabulary.save(str(run / "vocabulary.model"))
    (run / "config.json").write_text(json.dumps(
        {"recipe": "pht", "config_name": "tiny", "config": dataclasses.asdict(config)}
    ))

    long_text = " ".join(
        " ".join(documents_of(e)) for e in real_examples("qmsum_goldspan", "train")[:3]
    )
    limit_words = 20 * config.max_paragraphs * config.max_paragraph_tokens
    words = long_text.split()
    oversized = "\n\n".join(
        " ".join(words[i: i + 60]) for i in range(0, min(len(words), limit_words), 60)
    )
    # One paragraph without a blank line, over the cap by its documents alone,
    # and a short title and query.
    over_cap = (long_text + " ") * (MAX_REQUEST_BYTES // len(long_text.encode()) + 1)
    invalid = base64.b64encode(b"Caf\xc3 au lait \xff\xfe is served. It is hot.").decode()
    requests = [
        {"signature": "serving_default", "inputs": {"documents": documents}},
        {"signature": "summarize_with_context",
         "inputs": {"documents": documents, "title": titles, "query": queries}},
        # bad requests
        {"signature": "serving_default", "inputs": {"documents": padded([["", ""], documents[0]])}},
        {"signature": "serving_default", "inputs": {"documents": [[""]]}},
        {"signature": "serving_default", "inputs": {"documents": [[" \n\n  "]]}},
        {"signature": "serving_default", "inputs": {"documents": [[oversized]]}},
        {"signature": "serving_default",
         "inputs": {"documents": [["base64:" + invalid, ""], ["A short one. Yes.", "Two."]]}},
        {"signature": "summarize_with_context",
         "inputs": {"documents": [["Some text here. More text."]],
                    "title": ["base64:" + base64.b64encode(b"\xc0\xaf").decode()],
                    "query": [""]}},
        # a ragged batch cannot become a [B, None] tensor: the request fails,
        # the process goes on serving the next one
        {"signature": "serving_default", "inputs": {"documents": [["One. Two."], ["a", "b"]]}},
        {"signature": "serving_default", "inputs": {"documents": [["One. Two."]]}},
        # a row over the export's byte cap, beside rows under it
        {"signature": "summarize_with_context",
         "inputs": {"documents": padded([documents[0], [over_cap[:40_000], over_cap[40_000:]]]),
                    "title": [titles[0], "A title"], "query": [queries[0], ""]}},
        # documents of another rank than [B, D]
        {"signature": "serving_default", "inputs": {"documents": [documents]}},
        {"signature": "summarize_with_context",
         "inputs": {"documents": documents[0], "title": titles, "query": queries}},
        {"signature": "summarize_with_context",
         "inputs": {"documents": documents, "title": [titles], "query": queries}},
        {"signature": "serving_default", "inputs": {"documents": [["One. Two."]]}},
    ]
    tmp = tmp_path_factory.mktemp("run_saved_model")
    results, leaked = run_saved_model(path, requests, tmp)
    return {
        "config": config, "model": model, "structurer": structurer, "path": path,
        "root": root, "run": run, "expected": expected,
        "expected_context": expected_context, "results": results,
        "leaked": leaked, "oversized_words": len(oversized.split()),
        "over_cap_bytes": len(over_cap.encode("utf-8")),
    }


def assert_same_decoding(result, expected):
    assert "__error__" not in result, result.get("__error__")
    np.testing.assert_array_equal(result["summary"], expected["summary"])
    np.testing.assert_array_equal(result["summary_ids"], np.where(
        np.arange(MAX_LENGTH)[None, :] < expected["lengths"][:, None],
        expected["summary_ids"], 0,
    ))
    np.testing.assert_allclose(result["score"], expected["score"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        result["paragraph_attention"], expected["paragraph_attention"], atol=1e-5
    )
    np.testing.assert_array_equal(result["paragraphs"], expected["paragraphs"])
    assert list(result["error"]) == [b"", b""]


def test_saved_model_runs_without_keras_and_equals_python_decoding(pht):
    assert pht["leaked"] == []  # nothing of keras / keras_hub / keras_hsum loaded
    assert_same_decoding(pht["results"][0], pht["expected"])
    assert all(len(s) > 0 for s in pht["results"][0]["summary"])


def test_context_signature_equals_python_decoding_with_title_and_query(pht):
    assert_same_decoding(pht["results"][1], pht["expected_context"])


def test_outputs_have_documented_shapes(pht):
    result = pht["results"][0]
    P = pht["config"].max_paragraphs
    assert result["paragraph_attention"].shape == (2, P)
    assert result["paragraphs"].shape == (2, P)
    assert result["token_attention"].shape == (2, MAX_LENGTH, P)
    assert result["summary_tokens"].shape == (2, MAX_LENGTH)
    np.testing.assert_allclose(result["paragraph_attention"].sum(axis=1), 1.0, atol=1e-5)
    # every decoded token's attention is a distribution over real paragraphs
    real = result["summary_ids"] != 0
    np.testing.assert_allclose(result["token_attention"].sum(-1)[real], 1.0, atol=1e-5)
    assert np.all(result["token_attention"].sum(-1)[~real] == 0)
    assert np.all(result["paragraph_attention"][result["paragraphs"] == b""] == 0)


def test_empty_rows_get_an_error_not_a_crash(pht):
    mixed, all_empty, blank = pht["results"][2:5]
    for result in (mixed, all_empty, blank):
        assert "__error__" not in result, result.get("__error__")
    assert mixed["summary"][0] == b"" and mixed["error"][0].startswith(b"empty input")
    assert mixed["summary"][1] != b"" and mixed["error"][1] == b""
    assert mixed["score"][0] == 0.0
    assert all_empty["summary"].tolist() == [b""]
    assert all_empty["error"][0].startswith(b"empty input")
    assert blank["error"][0].startswith(b"empty input")
    assert np.all(np.isfinite(all_empty["paragraph_attention"]))


def test_oversized_invalid_utf8_and_mixed_length_requests_are_summarized(pht):
    oversized, invalid, bad_title = pht["results"][5:8]
    assert pht["oversized_words"] > 2 * pht["config"].max_paragraphs * pht["config"].max_paragraph_tokens
    for result in (oversized, invalid, bad_title):
        assert "__error__" not in result, result.get("__error__")
        assert all(s != b"" for s in result["summary"])
        assert all(e == b"" for e in result["error"])
    # the request's text is kept, its bad bytes replaced by U+FFFD
    joined = b" ".join(invalid["paragraphs"][0])
    assert b"lait" in joined and "\ufffd".encode() in joined
    joined.decode("utf-8")  # valid UTF-8 now


def test_a_malformed_request_fails_alone(pht):
    ragged, after = pht["results"][8:10]
    assert "non-rectangular" in str(ragged["__error__"])
    assert "__error__" not in after and after["summary"][0] != b""


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_saved_model_cli_lists_signatures(pht):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    command = [cli] if os.path.exists(cli) else [
        sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"
    ]
    completed = subprocess.run(
        command + ["show", "--dir", str(pht["path"]), "--all"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    text = completed.stdout
    for expected in (
        "signature_def['serving_default']", "signature_def['summarize_with_context']",
        "inputs['documents']", "inputs['title']", "inputs['query']",
        "outputs['summary']", "outputs['score']", "outputs['paragraph_attention']",
        "outputs['error']",
    ):
        assert expected in text, expected
    assert "shape: (-1, -1)" in text  # documents [B, None]


def test_models_config_lists_the_export_with_docker_base_path(pht):
    text = (pht["root"] / "models.config").read_text()
    assert 'name: "pht"' in text
    assert 'base_path: "/models/pht"' in text
    assert 'model_platform: "tensorflow"' in text
    assert text.startswith("model_config_list {")


class _Constant:
    """A minimal exportable module (signatures() like the serving modules)."""

    def __new__(cls):
        import tensorflow as tf

        class Module(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="x")])
            def serving_default(self, x):
                return {"y": tf.strings.length(x)}

            def signatures(self):
                return {"serving_default": self.serving_default.get_concrete_function()}

        return Module()


def test_versions_are_numbered_and_never_overwritten(tmp_path):
    from keras_hsum.export.serving import export_saved_model
    from keras_hsum.export.serving import latest_version_path
    from keras_hsum.export.serving import next_version

    base = tmp_path / "saved_models" / "toy"
    assert next_version(base) == 1
    first = export_saved_model(_Constant(), base, serving_root=None)
    second = export_saved_model(_Constant(), base, serving_root=None)
    assert os.path.basename(first) == "1" and os.path.basename(second) == "2"
    assert export_saved_model(_Constant(), base, version=7).endswith("7")
    assert next_version(base) == 8
    with pytest.raises(FileExistsError, match="immutable"):
        export_saved_model(_Constant(), base, version=2)
    assert latest_version_path(base) == str(base / "7")
    assert latest_version_path(base / "1") == str(base / "1")
    with pytest.raises(FileNotFoundError, match="numbered version folders"):
        latest_version_path(tmp_path)
    # no temporary folder is left behind
    assert sorted(os.listdir(base)) == ["1", "2", "7"]
    export_saved_model(_Constant(), tmp_path / "saved_models" / "other", serving_root=None)
    text = (tmp_path / "saved_models" / "models.config").read_text()
    assert text.count("config {") == 2
    assert f'base_path: "{base}"' in text  # absolute local path without serving_root


def test_seal_segment_outputs_pick_the_selection_at_each_segment_start():
    import tensorflow as tf

    from keras_hsum.export.serving import seal_segment_outputs

    # B=1, L=7, P'=2, L_seg=3: segments start at 0, 3, 6; length 5 → the
    # third segment never started.
    selected = np.full((1, 7, 2), -1, np.int32)
    selected[0, 0:3] = [1, 0]
    selected[0, 3:6] = [2, -1]
    selected[0, 6] = [0, 2]
    texts = tf.constant([["a", "b", "c"]])
    ids, snippet_texts = seal_segment_outputs(
        tf.constant(selected), tf.constant([5]), texts, 3
    )
    np.testing.assert_array_equal(ids.numpy(), [[[1, 0], [2, -1], [-1, -1]]])
    assert snippet_texts.numpy().tolist() == [[[b"b", b"a"], [b"c", b""], [b"", b""]]]


def test_a_row_over_the_byte_cap_gets_an_error_the_others_their_summaries(pht):
    capped = pht["results"][10]
    assert "__error__" not in capped, capped.get("__error__")
    # row 0 is the first example, as summarized alone with its title/query
    assert capped["summary"][0] == pht["expected_context"]["summary"][0]
    assert capped["error"][0] == b""
    size = pht["over_cap_bytes"] + len(b"A title")
    assert size > MAX_REQUEST_BYTES
    assert capped["summary"][1] == b"" and capped["score"][1] == 0.0
    error = capped["error"][1].decode()
    assert error.startswith("request too large")
    assert f"holds {size} bytes" in error and f"cap of {MAX_REQUEST_BYTES} bytes" in error
    assert "--max-request-bytes" in error
    assert np.all(capped["paragraphs"][1] == b"")  # the row was not read


def test_inputs_of_another_rank_are_refused_with_the_expected_shape(pht):
    rank3, rank1, title_rank2, after = pht["results"][11:15]
    for result, name, shape, rank in (
        (rank3, "documents", "[B, D] (batch, documents)", 3),
        (rank1, "documents", "[B, D] (batch, documents)", 1),
        (title_rank2, "title", "[B]", 2),
    ):
        error = str(result.get("__error__"))
        assert "InvalidArgumentError" in error, error
        assert f"`{name}` must be tf.string {shape}" in error, error
        assert f"received a tensor of rank] [{rank}]" in error, error
    # the process goes on serving
    assert "__error__" not in after and after["summary"][0] != b""
