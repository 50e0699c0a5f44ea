"""HT's paragraph graphs built by `TextStructurer` against `keras_hsum.data.graphs`.

The reference is the Python module (`graphs.graph_for`), run on the rows the
structurer kept: their texts (`unit_texts`), documents and reading-order
positions. Real bundled examples are rendered as the export receives them.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_hsum.data import graphs
from keras_hsum.data import structure
from keras_hsum.data.corpora import sample_tokenizer_path
from keras_hsum.data.structurer import TextStructurer
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK
from structurer_helpers import render

T = 48


@pytest.fixture(scope="module")
def vocabulary():
    # The bundled tokenizer: loading it costs nothing (the session fixture
    # trains one).
    return Vocabulary.load(sample_tokenizer_path())


def structure_batch(structurer, batch):
    documents = [d for d, _, _ in batch]
    width = max(1, max(len(d) for d in documents))
    out = structurer(
        tf.constant([d + [""] * (width - len(d)) for d in documents], tf.string),
        title=tf.constant([t for _, t, _ in batch], tf.string),
        query=tf.constant([q for _, _, q in batch], tf.string),
    )
    return {name: value.numpy() for name, value in out.items()}


def reference_graph(out, b, kind, options):
    """`graphs.graph_for` on example b's kept rows: float32 [P', P']."""
    rows = int(out[PARAGRAPH_MASK][b].sum())
    structured = structure.Structured(
        features={
            DOCUMENT_IDS: out[DOCUMENT_IDS][b][:rows],
            PARAGRAPH_INDEX: out[PARAGRAPH_INDEX][b][:rows],
        },
        texts=[t.decode("utf-8") for t in out["unit_texts"][b][:rows]],
        report=structure.TruncationReport(),
    )
    return graphs.graph_for(structured, kind, **options)


_STRUCTURERS = {}


def structurer_for(vocabulary, kind, options, max_units):
    """One structurer per graph and P in this module (tracing one costs
    seconds)."""
    key = (kind, tuple(sorted(options.items())), max_units)
    if key not in _STRUCTURERS:
        _STRUCTURERS[key] = TextStructurer(
            vocabulary.proto, "paragraphs", max_units, T,
            graph_kind=kind, graph_options=options,
        )
    return _STRUCTURERS[key]


def check_examples(examples, vocabulary, kind, options, max_units):
    """Structures `examples` in one batch; asserts graph == reference.

    Returns the structurer's output (numpy) for further checks.
    """
    structurer = structurer_for(vocabulary, kind, options, max_units)
    out = structure_batch(structurer, [render(e) for e in examples])
    graph = out[GRAPH]
    assert graph.dtype == np.float32
    assert graph.shape == (len(examples), max_units, max_units)
    for b, example in enumerate(examples):
        rows = int(out[PARAGRAPH_MASK][b].sum())
        expected = reference_graph(out, b, kind, options)
        np.testing.assert_allclose(
            graph[b, :rows, :rows], expected, atol=1e-6, rtol=0,
            err_msg=f"{kind} graph {options} of example {example.id!r}",
        )
        assert not graph[b, rows:].any() and not graph[b, :, rows:].any()
    return out


def dropped_rows(out):
    """Examples whose kept rows skip a reading-order position (ranking
    dropped a row between two kept ones)."""
    count = 0
    for b in range(out[PARAGRAPH_MASK].shape[0]):
        positions = np.sort(out[PARAGRAPH_INDEX][b][out[PARAGRAPH_MASK][b]])
        count += int(len(positions) > 1 and (np.diff(positions) > 1).any())
    return count


# (kind, graph options): the defaults and non-default values of each option.
CASES = (
    ("similarity", {}),
    ("discourse", {}),
    ("similarity", {"threshold": 0.05}),
    ("discourse", {"directed": False, "marker_weight": 2.0, "entity_weight": 0.5,
                   "adjacency_weight": 0.25}),
)


@pytest.mark.parametrize("kind,options", CASES[:2])
def test_graphs_equal_the_python_reference_on_bundled_examples(
    kind, options, real_examples, vocabulary
):
    # 16 qmsum meetings (P = 12 of many speaker turns: ranking drops rows)
    # and 8 multi-document review sets (fewsum) in one batch.
    examples = (
        real_examples("qmsum_goldspan", "val")[:16]
        + real_examples("fewsum_amazon", "val")[:8]
    )
    out = check_examples(examples, vocabulary, kind, options, max_units=12)
    assert dropped_rows(out) > 0
    assert out[DOCUMENT_IDS].max() > 0
    graph = out[GRAPH]
    assert (graph > 0).sum() > 100
    if kind == "discourse":
        # Marker relations make some edges one-way; entities link rows that
        # are not adjacent.
        assert (graph != np.transpose(graph, (0, 2, 1))).any()
        assert (graph > 1).any()


@pytest.mark.slow
@pytest.mark.parametrize("kind,options", CASES)
@pytest.mark.parametrize(
    "name,max_units", [("qmsum_goldspan", 12), ("qmsum_goldspan", 40),
                       ("fewsum_amazon", 16), ("fewsum_yelp", 16)]
)
def test_graphs_equal_the_python_reference_on_all_bundled_examples(
    name, max_units, kind, options, real_examples, vocabulary
):
    check_examples(real_examples(name, "val"), vocabulary, kind, options, max_units)


def test_discourse_graph_of_hand_written_rows(vocabulary):
    # Two documents; the first has twelve paragraphs, of which P = 12 drops
    # one: the zebra row (tf-idf 0 to the title, and the last of the rows
    # that tie at 0). Adjacency never bridges the dropped row, never crosses
    # documents; "However" opens a row (marker edge from its predecessor);
    # "Paris" is an entity in three rows, "The" is sentence-initial and "Mr"
    # a stop word; the filler rows hold no entity.
    fillers = [f"the {word} sat still." for word in
               ("cat", "dog", "hen", "cow", "pig", "ram", "yak", "elk", "owl")]
    documents = [
        "\n\n".join(
            ["We met Paris in March. Mr Smith came.", "However, rain fell on Paris."]
            + fillers + ["The zebra slept."]
        ),
        "Rain and Paris again. The end.",
    ]
    structurer = structurer_for(vocabulary, "discourse", {}, 12)
    out = structure_batch(structurer, [(documents, "Paris rain", "")])
    assert out[PARAGRAPH_MASK][0].sum() == 12
    expected = reference_graph(out, 0, "discourse", {})
    np.testing.assert_array_equal(out[GRAPH][0], expected)
    by_position = {
        (int(d), int(p)): i
        for i, (d, p) in enumerate(zip(out[DOCUMENT_IDS][0], out[PARAGRAPH_INDEX][0]))
    }
    assert (0, 11) not in by_position  # the zebra row was dropped
    first, second = by_position[(0, 0)], by_position[(0, 1)]
    other = by_position[(1, 12)]
    last_filler = by_position[(0, 10)]
    graph = out[GRAPH][0]
    # adjacency + marker one way, adjacency + "Paris" both ways.
    assert graph[first, second] == 3.0 and graph[second, first] == 2.0
    assert graph[first, other] == 1.0 and graph[second, other] == 1.0
    assert graph[second, by_position[(0, 2)]] == 1.0  # adjacency only
    # The last filler's successor was dropped; the next document is no
    # neighbour.
    assert graph[last_filler].tolist().count(1.0) == 1
    assert graph[last_filler, other] == 0.0 and graph[other, last_filler] == 0.0
    assert not np.diag(graph).any()


def test_graph_options_are_checked(vocabulary):
    with pytest.raises(ValueError, match=r"`graph_kind` must be"):
        TextStructurer(vocabulary.proto, "paragraphs", 4, T, graph_kind="lexrank")
    with pytest.raises(ValueError, match=r"Unknown graph_options \['model'\]"):
        TextStructurer(
            vocabulary.proto, "paragraphs", 4, T, graph_kind="similarity",
            graph_options={"model": None},
        )
    with pytest.raises(ValueError, match=r"only with `graph_kind`"):
        TextStructurer(
            vocabulary.proto, "paragraphs", 4, T, graph_options={"threshold": 0.1}
        )
    with pytest.raises(ValueError, match=r"`threshold` must be"):
        TextStructurer(
            vocabulary.proto, "paragraphs", 4, T, graph_kind="similarity",
            graph_options={"threshold": 2.0},
        )
    with pytest.raises(ValueError, match=r"Unknown family options"):
        TextStructurer(vocabulary.proto, "sections", 4, T, graph_kind="similarity")


def test_pipeline_graph_extra_reads_the_structurers_graph(
    real_examples, vocabulary, monkeypatch
):
    """`paragraph_graph` on the "paragraphs" family: the graph of training
    batches is the structurer's (no Python graph), equal to the reference."""
    from keras_hsum.data import pipeline

    seen = {}

    @pipeline.declare_features()
    def record(example, structured):
        seen[example.id] = (list(structured.texts), dict(structured.features))
        return {}

    def python_graph(*args, **kwargs):
        raise AssertionError("the graph was computed in Python")

    examples = (
        real_examples("fewsum_amazon", "val")[:4]
        + real_examples("qmsum_goldspan", "val")[:4]
    )
    extra = pipeline.paragraph_graph("discourse", marker_weight=2.0)
    assert extra.structurer_options == {
        "graph_kind": "discourse", "graph_options": {"marker_weight": 2.0}
    }
    with monkeypatch.context() as patch:
        patch.setattr(graphs, "graph_for", python_graph)
        batches = list(
            pipeline.make_dataset(
                examples, vocabulary, "paragraphs", batch_size=4, max_units=12,
                max_tokens=T, extras=[extra, record], include_ids=True,
            ).as_numpy_iterator()
        )
    count = 0
    for batch in batches:
        for i, example_id in enumerate(batch["example_id"]):
            texts, features = seen[example_id.decode("utf-8")]
            rows = len(texts)
            expected = graphs.graph_for(
                structure.Structured(
                    features=features, texts=texts, report=structure.TruncationReport()
                ),
                "discourse",
                marker_weight=2.0,
            )
            graph = batch[GRAPH][i]
            np.testing.assert_allclose(graph[:rows, :rows], expected, atol=1e-6)
            assert not graph[rows:].any() and not graph[:, rows:].any()
            count += 1
    assert count == len(examples)
    # A corpus-level tf-idf model is not built in the graph: Python computes it.
    assert pipeline.paragraph_graph("similarity", model=None).structurer_options is None


def test_graph_asked_for_in_family_options_reaches_the_batches(real_examples, vocabulary):
    from keras_hsum.data import pipeline

    examples = real_examples("fewsum_amazon", "val")[:2]
    options = {"graph_kind": "similarity", "graph_options": {"threshold": 0.1}}
    [batch] = list(
        pipeline.make_dataset(
            examples, vocabulary, "paragraphs", batch_size=2, max_units=6,
            max_tokens=T, family_options=options,
        ).as_numpy_iterator()
    )
    structurer = TextStructurer(vocabulary.proto, "paragraphs", 6, T, **options)
    expected = structure_batch(structurer, [render(e) for e in examples])[GRAPH]
    rows = batch[PARAGRAPH_MASK].shape[1]
    np.testing.assert_array_equal(batch[GRAPH], expected[:, :rows, :rows])
    with pytest.raises(ValueError, match="already set; give one paragraph graph"):
        pipeline.make_dataset(
            examples, vocabulary, "paragraphs", batch_size=2, max_units=6,
            max_tokens=T, family_options=options,
            extras=[pipeline.paragraph_graph("similarity")],
        )
