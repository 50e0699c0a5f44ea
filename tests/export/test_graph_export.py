"""Graph-informed HT end to end: trained with a paragraph graph, exported, and
the SavedModel run in a process that imports only TensorFlow and TF Text.

The reference is `keras_hsum.data.graphs.graph_for` (Python), run on the rows
the SavedModel's own structurer kept for the same raw text.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from structurer_helpers import SERVING_PREAMBLE
from test_export_cli import run_command
from test_serving import padded

pytestmark = pytest.mark.tensorflow_only

# Loads the SavedModel without keras_hsum, keras-hub or recipes; runs the
# summarize_with_context signature and the structurer the module holds.
SUBPROCESS = SERVING_PREAMBLE + textwrap.dedent(
    """
    inputs = {name: tf.constant(value) for name, value in request.items()}
    served = loaded.signatures["summarize_with_context"](**inputs)
    features = loaded.structurer._structure(
        inputs["documents"], inputs["title"], inputs["query"]
    )

    def plain(value):
        if value.dtype == tf.string:
            return [[t.decode() for t in row] for row in value.numpy()]
        return value.numpy().tolist()

    assert not any(m.startswith(("keras_hsum", "keras_hub")) for m in sys.modules)
    json.dump({
        "summary": [s.decode() for s in served["summary"].numpy()],
        "error": [e.decode() for e in served["error"].numpy()],
        "paragraphs": plain(served["paragraphs"]),
        "features": {k: plain(v) for k, v in features.items()},
    }, open(sys.argv[3], "w"))
    """
)


def test_build_structurer_builds_the_graph_the_run_trained_with(vocabulary):
    from keras_hsum import recipes
    from keras_hsum.export.exporter import build_structurer

    config = recipes.config("ht", "tiny").replace(graph_kind="discourse", graph_heads=(0,))
    structurer, options = build_structurer(recipes.get("ht"), "ht", config, vocabulary)
    assert options["graph_kind"] == "discourse"
    assert structurer.family_options["graph_kind"] == "discourse"

    class NoGraph:  # a recipe whose structure_options forget the graph
        @staticmethod
        def structure_options(config):
            return dict(family="paragraphs", max_units=4, max_tokens=16)

    with pytest.raises(ValueError, match=r"trained with graph_kind='discourse'.*would "
                                         r"run without the graph"):
        build_structurer(NoGraph, "ht", config, vocabulary)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["discourse", "similarity"])
def test_ht_trained_with_a_graph_exports_and_serves_it(kind, tmp_path, real_examples):
    from keras_hsum import recipes
    from keras_hsum.data import corpora
    from keras_hsum.data import graphs
    from keras_hsum.data import structure
    from keras_hsum.data.reader import render_documents
    from keras_hsum.export.serving import read_metadata
    from keras_hsum.training import train

    data = os.path.dirname(corpora.sample_path("qmsum_goldspan", "train"))
    run = tmp_path / "ht"
    config = recipes.config("ht", "tiny").replace(
        epochs=1, steps_per_epoch=2, validation_steps=1, batch_size=4,
        max_val_examples=4, hidden_dim=16, num_heads=2, intermediate_dim=32,
        layer_schedule="LG", num_decoder_layers=1, max_paragraphs=6,
        max_test_paragraphs=8, paragraph_length=24, max_target_length=12,
        graph_kind=kind, graph_heads=(0,),
    )
    train(recipes.get("ht"), config, out=str(run), data=data, recipe_name="ht",
          config_name="tiny", verbose=0)

    out = tmp_path / "saved_models" / "ht"
    assert run_command("export", "--run", run, "--out", out, "--beam-size", "2") == 0
    version = out / "1"
    assert read_metadata(version)["structure_options"]["graph_kind"] == kind

    examples = real_examples("qmsum_goldspan", "val")[:3] + real_examples(
        "fewsum_amazon", "val")[:2]
    request = {
        "documents": padded([render_documents(e) for e in examples]),
        "title": [e.title or "" for e in examples],
        "query": [e.query or "" for e in examples],
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    subprocess.run(
        [sys.executable, "-c", SUBPROCESS, str(version), str(tmp_path / "request.json"),
         str(tmp_path / "out.json")],
        check=True, cwd=str(tmp_path), timeout=300,
        env=dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="3"),
    )
    served = json.loads((tmp_path / "out.json").read_text())
    assert served["error"] == [""] * len(examples)
    assert all(summary.strip() for summary in served["summary"])
    features = served["features"]
    assert features["unit_texts"] == served["paragraphs"]  # the rows it read
    graph = np.asarray(features["graph"], np.float32)
    P = config.max_test_paragraphs
    assert graph.shape == (len(examples), P, P)
    for b in range(len(examples)):
        rows = int(np.sum(features["paragraph_mask"][b]))
        expected = graphs.graph_for(
            structure.Structured(
                features={
                    "document_ids": np.asarray(features["document_ids"][b][:rows]),
                    "paragraph_index": np.asarray(features["paragraph_index"][b][:rows]),
                },
                texts=features["unit_texts"][b][:rows],
                report=structure.TruncationReport(),
            ),
            kind,
        )
        np.testing.assert_allclose(graph[b, :rows, :rows], expected, atol=1e-6)
        assert not graph[b, rows:].any() and not graph[b, :, rows:].any()
    assert (graph > 0).sum() > len(examples)
