"""The library's label extras: ranker targets, paragraph graph, SEAL
proxy labels, the greedy oracle.

Each is an extra of `make_dataset(extras=[...])` (see
`keras_hsum.data.extras` for what an extra receives and returns), declared
with `declare_features`.

The ROUGE labels (ranker targets, SEAL's proxy labels, the oracle) run in
the graph: each carries a `graph_features(features, table)` that
`make_dataset` runs on each chunk of structured examples, right after the
structurer (mapped in parallel, no `tf.py_function`), computing ROUGE on
the ids the structurer produced (`keras_hsum.data.id_rouge`: the rows'
`tokens` under `token_mask`, and the summary's and references' ids, which
the pipeline tokenizes in the graph for them). Ranker targets and SEAL's
labels are computed for the whole chunk at once (`id_rouge.batch_rouge_n`);
the oracle, a loop per example, runs `id_rouge.greedy_oracle` on each
example of the chunk (`tf.map_fn`). Called in Python, `extra(example, structured)`, the same extra
computes the rouge-score definition on the row texts (`structured.texts`)
with `keras_hsum.data.ranking`/`labels`: the reference the graph labels are
measured against (`tests/data/test_label_extras.py`,
`benchmarks/results/data_stages.md`): words with Porter stemming there,
ROUGE ids (lower-cased vocabulary pieces) here. The paragraph graph of the
`"paragraphs"` family is built in the graph by the structurer.
"""

import numpy as np
import tensorflow as tf

from keras_hsum.data import id_rouge
from keras_hsum.data.extras import declare_features
from keras_hsum.data.ranking import rouge2_recall_targets
from keras_hsum.features import GRAPH
from keras_hsum.features import ORACLE_LABELS
from keras_hsum.features import PROXY_LABELS
from keras_hsum.features import RANKER_TARGETS
from keras_hsum.features import SEGMENT_LABELS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import TOKENS

# The ids `make_dataset` gives the graph labels with each chunk: the
# summaries' int32 ragged [B, None] and the references' int32 ragged
# [B, R, None].
SUMMARY_LABEL_IDS = "_summary_label_ids"
REFERENCE_LABEL_IDS = "_reference_label_ids"
# SEAL's proxy label and the oracle's score: ROUGE-1 and ROUGE-2 F1.
ORDERS = (1, 2)


def _summaries(features, width=None):
    """The summaries' ids as one reference per example: (int32 [B, 1, L],
    bool mask), cut to `width` ids when given."""
    ids = features[SUMMARY_LABEL_IDS]
    if width is not None:
        ids = ids[:, :width]
    dense = ids.to_tensor(0)
    mask = tf.sequence_mask(ids.row_lengths(), tf.shape(dense, out_type=tf.int64)[1])
    return dense[:, tf.newaxis], mask[:, tf.newaxis]


def _batch_scores(features, references, n, table):
    ids, mask = references
    return id_rouge.batch_rouge_n(features[TOKENS], features[TOKEN_MASK], ids, mask, n, table)


def _ranker_targets_graph(features, table):
    """[B,P,T] chunk -> {"ranker_targets": float32 [B,P]}."""
    recall = _batch_scores(features, _summaries(features), 2, table).recall
    return {RANKER_TARGETS: tf.cast(recall[:, 0], tf.float32)}


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

    In `make_dataset` it runs in the graph (`graph_features`): ROUGE-2
    recall on ROUGE ids of the row's tokens against the summary's ids
    (`keras_hsum.data.id_rouge`); called in Python, on rouge-score's words.
    """
    return {
        RANKER_TARGETS: rouge2_recall_targets(
            structured.texts, example.summary or ""
        )
    }


ranker_targets.graph_features = _ranker_targets_graph


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


def seal_labels(segment_length=None, vocabulary=None, num_segments=None):
    """An extra that adds SEAL's proxy extractive labels (snippets family).

    Args:
        segment_length: L_seg; when given, snippets are also labelled
            against every summary segment of L_seg tokens.
        vocabulary: the `Vocabulary` whose tokens define segments (the
            decoder's tokens); words without it.
        num_segments: M, with `segment_length`: `segment_labels` has
            exactly M rows (cut, or padded with 0), a static shape for
            `pad_to_max=True`; None: one row per segment of the summary.

    In `make_dataset` the labels run in the graph (`graph_features`): the
    same F1s on ROUGE ids (`keras_hsum.data.id_rouge`) of the snippets'
    tokens and of the summary's ids, segment j being the summary's ids
    [j * L_seg, (j + 1) * L_seg) (`vocabulary.encode(summary)`, with or
    without `vocabulary`). Called in Python, it computes them with
    rouge-score's words (`labels.seal_proxy_labels`), the reference. A
    summary without a ROUGE token skips the example in Python and gives
    zero labels in the graph.

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

    if segment_length is not None:
        segment_length = int(segment_length)
    if num_segments is not None and segment_length is None:
        raise ValueError(
            f"seal_labels(num_segments={num_segments!r}) cuts the segment labels, "
            "which need a `segment_length`; give one, or leave num_segments out."
        )
    specs = {PROXY_LABELS: ("float32", ("P",))}
    if segment_length is not None:
        specs[SEGMENT_LABELS] = ("float32", (num_segments, "P"))

    @declare_features(**specs)
    def proxy_labels(example, structured):
        result = labels.seal_proxy_labels(
            structured.texts, example.summary, segment_length, vocabulary
        )
        out = {PROXY_LABELS: result.summary_labels}
        if segment_length is not None:
            segments = result.segment_labels
            if num_segments is not None:
                fixed = np.zeros((num_segments, segments.shape[1]), np.float32)
                fixed[: min(num_segments, len(segments))] = segments[:num_segments]
                segments = fixed
            out[SEGMENT_LABELS] = segments
        return out

    def graph_features(features, table):
        """[B,P,T] chunk -> proxy_labels float32 [B,P] (and segment_labels
        float32 [B,M,P], ragged in M without `num_segments`)."""
        summary = _summaries(features)
        mean = tf.add_n(
            [_batch_scores(features, summary, n, table).fmeasure for n in ORDERS]
        ) / len(ORDERS)
        out = {PROXY_LABELS: tf.cast(mean[:, 0], tf.float32)}
        if segment_length is None:
            return out
        lengths = features[SUMMARY_LABEL_IDS].row_lengths()
        counts = (lengths + segment_length - 1) // segment_length
        if num_segments is not None:
            count = tf.constant(num_segments, tf.int64)
            width = num_segments * segment_length
        else:
            count = tf.reduce_max(tf.concat([counts, [0]], 0))
            width = None
        ids, mask = _summaries(features, width)
        size = count * segment_length
        ids = tf.pad(ids[:, 0], [[0, 0], [0, size - tf.shape(ids, out_type=tf.int64)[2]]])
        mask = tf.pad(mask[:, 0], [[0, 0], [0, size - tf.shape(mask, out_type=tf.int64)[2]]])
        shape = tf.stack([tf.shape(ids, out_type=tf.int64)[0], count, segment_length])
        segments = (tf.reshape(ids, shape), tf.reshape(mask, shape))
        by_segment = tf.cast(tf.add_n(
            [_batch_scores(features, segments, n, table).fmeasure for n in ORDERS]
        ) / len(ORDERS), tf.float32)
        if num_segments is None:
            by_segment = tf.RaggedTensor.from_tensor(by_segment, lengths=counts)
        out[SEGMENT_LABELS] = by_segment
        return out

    proxy_labels.graph_features = graph_features
    return proxy_labels


@declare_features(oracle_labels=("float32", ("P",)))
def oracle_labels(example, structured):
    """An extra that marks the rows of the greedy ROUGE oracle extract.

    For the `sentences` family (extractive baselines, SHTE's evaluation):
    1.0 on the kept sentences that the greedy oracle (`labels.greedy_oracle`
    against all references) selects, 0.0 elsewhere: float32 [P].

    In `make_dataset` it runs in the graph (`graph_features`):
    `id_rouge.greedy_oracle` on ROUGE ids of the sentences' tokens against
    the references' ids (the summary's when there are none); called in
    Python, `labels.greedy_oracle` on rouge-score's words. A reference
    without a ROUGE token skips the example in Python and scores 0 in the
    graph.
    """
    from keras_hsum.data import labels

    references = list(example.references) or [example.summary]
    chosen = labels.greedy_oracle(structured.texts, references)
    return {ORACLE_LABELS: labels.oracle_labels(len(structured.texts), chosen)}


def _oracle_labels_graph(features, table):
    """[B,P,T] chunk -> {"oracle_labels": float32 [B,P]}, one greedy
    oracle per example (against its references, else its summary)."""
    references = features[REFERENCE_LABEL_IDS]
    count = references.row_lengths()
    summary = tf.RaggedTensor.from_row_lengths(
        features[SUMMARY_LABEL_IDS], tf.ones_like(count), validate=False
    )
    # Each example's references, or its summary when it has none.
    chosen = tf.where(count > 0, count, 1)
    texts = tf.concat([references, summary], axis=1)  # the summary last
    flat = texts.values  # [sum(R_b + 1), None]
    first = texts.row_starts()
    index = tf.ragged.range(first, first + chosen)
    selected = tf.gather(flat, index.values)
    ids = selected.to_tensor(0)
    mask = tf.sequence_mask(selected.row_lengths(), tf.shape(ids, out_type=tf.int64)[1])
    offsets = tf.concat([[0], tf.cumsum(chosen)], 0)

    def one(b):
        reference = id_rouge.masked_rows(ids[offsets[b] : offsets[b + 1]],
                                         mask[offsets[b] : offsets[b + 1]], table)
        rows = id_rouge.masked_rows(features[TOKENS][b], features[TOKEN_MASK][b], table)
        return tf.cast(id_rouge.greedy_oracle(rows, reference, len(table), ORDERS), tf.float32)

    labels = tf.map_fn(
        one, tf.range(tf.shape(features[TOKENS], out_type=tf.int64)[0]),
        fn_output_signature=tf.TensorSpec([features[TOKENS].shape[1]], tf.float32),
    )
    return {ORACLE_LABELS: labels}


oracle_labels.graph_features = _oracle_labels_graph
