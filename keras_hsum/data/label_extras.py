"""The library's label extras: ranker targets, paragraph graph, SEAL
proxy labels, the greedy oracle.

Each is an extra of `make_dataset(extras=[...])` (see
`keras_hsum.data.extras` for what an extra receives and returns), declared
with `declare_features`. They compute training labels in Python from the
structurer's rows (`structured.texts`) and the example's summary, with the
references in `keras_hsum.data.ranking`, `labels` and `graphs`; the
paragraph graph of the `"paragraphs"` family is built in the graph by the
structurer instead.
"""

from keras_hsum.data.extras import declare_features
from keras_hsum.data.ranking import rouge2_recall_targets
from keras_hsum.features import GRAPH
from keras_hsum.features import ORACLE_LABELS
from keras_hsum.features import PROXY_LABELS
from keras_hsum.features import RANKER_TARGETS
from keras_hsum.features import SEGMENT_LABELS


@declare_features(ranker_targets=("float32", ("P",)))
def ranker_targets(example, structured):
    """HT's learned-ranker targets: ROUGE-2 recall of each kept row.

    An extra for `structured_examples`/`make_dataset` (Liu & Lapata, 2019,
    §3): for every row the builder kept, the fraction of the summary's
    bigrams it covers (rouge-score tokenizer, Porter stemming).

    Args:
        example: the `Example` (its `summary` is the reference).
        structured: the builder's `Structured` (its `texts`, one per row).

    Returns:
        `{"ranker_targets": float32 [P]}` in [0, 1]; zeros when the example
        has no summary.
    """
    return {
        RANKER_TARGETS: rouge2_recall_targets(
            structured.texts, example.summary or ""
        )
    }


def paragraph_graph(kind="similarity", **graph_options):
    """An extra that adds HT's paragraph graph for graph-informed attention.

    For the `"paragraphs"` family the graph is built in the graph by the
    structurer (`TextStructurer(..., graph_kind=kind,
    graph_options=graph_options)`, the one an exported SavedModel runs), so
    training reads the graph serving computes; the extra then runs no
    Python. Other families, and a corpus-level tf-idf `model` (which the
    structurer does not take), compute it in Python with
    `keras_hsum.data.graphs.graph_for` on the structurer's rows, the
    reference the in-graph graph equals.

    Args:
        kind: `"similarity"` (tf-idf cosine with a threshold) or
            `"discourse"` (the approximate discourse graph); see
            `keras_hsum.data.graphs`.
        **graph_options: passed to the graph function (e.g. `threshold`).

    Returns:
        An extra returning `{"graph": float32 [P, P]}`, row and column i
        being row i of the structured example; the raw graph (the layer
        row-normalises it over valid paragraphs). Padded rows and columns
        of a batch are 0. Its `structurer_options` (None when the graph
        is computed in Python) are the structurer's family options that
        build it.
    """
    from keras_hsum.data import graphs
    from keras_hsum.data.structuring.graphs import GRAPH_OPTIONS

    if kind not in ("similarity", "discourse"):
        raise ValueError(
            f"`kind` must be 'similarity' or 'discourse', received {kind!r}."
        )

    @declare_features(graph=("float32", ("P", "P")))
    def graph(example, structured):
        return {GRAPH: graphs.graph_for(structured, kind, **graph_options)}

    graph.__name__ = f"{kind}_graph"
    graph.structurer_options = (
        {"graph_kind": kind, "graph_options": dict(graph_options)}
        if set(graph_options) <= set(GRAPH_OPTIONS[kind])
        else None
    )
    return graph


def seal_labels(segment_length=None, vocabulary=None):
    """An extra that adds SEAL's proxy extractive labels (snippets family).

    Args:
        segment_length: L_seg; when given, snippets are also labelled
            against every summary segment of L_seg tokens.
        vocabulary: the `Vocabulary` whose tokens define segments (the
            decoder's tokens); words without it.

    The labels read the whole reference summary, also when
    `max_target_length` cuts the decoder's target shorter (the tiny
    configs cut most qmsum_general summaries): they say which snippets the
    summary draws on, not only its first S - 2 tokens. Segment rows beyond
    the decoder's segments are dropped by the model.

    Returns:
        An extra returning `{"proxy_labels": float32 [P]}` (mean ROUGE-1/2
        F1 of each snippet against the whole summary) and, with
        `segment_length`, `{"segment_labels": float32 [M, P]}` (M summary
        segments, padded with 0 to the longest in the batch).
    """
    from keras_hsum.data import labels

    specs = {PROXY_LABELS: ("float32", ("P",))}
    if segment_length is not None:
        specs[SEGMENT_LABELS] = ("float32", (None, "P"))

    @declare_features(**specs)
    def proxy_labels(example, structured):
        result = labels.seal_proxy_labels(
            structured.texts, example.summary, segment_length, vocabulary
        )
        out = {PROXY_LABELS: result.summary_labels}
        if segment_length is not None:
            out[SEGMENT_LABELS] = result.segment_labels
        return out

    return proxy_labels


@declare_features(oracle_labels=("float32", ("P",)))
def oracle_labels(example, structured):
    """An extra that marks the rows of the greedy ROUGE oracle extract.

    For the `sentences` family (extractive baselines, SHTE's evaluation):
    1.0 on the kept sentences that the greedy oracle (`labels.greedy_oracle`
    against all references) selects, 0.0 elsewhere: float32 [P].
    """
    from keras_hsum.data import labels

    references = list(example.references) or [example.summary]
    chosen = labels.greedy_oracle(structured.texts, references)
    return {ORACLE_LABELS: labels.oracle_labels(len(structured.texts), chosen)}
