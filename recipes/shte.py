"""SHTE: Siamese Hierarchical Transformer Encoders (González et al., 2020).

A siamese classifier learns whether a summary belongs to a document; the
attention of its last sentence-level block then ranks the document's
sentences for extraction (`SHTE.extract`, k = 3 in the paper).

Data. The paper trains on CNN/DailyMail, which is not available here beyond
the 100 SummEval articles (an evaluation set), so the default corpus is
`scitldr_a` (paper abstracts → a one-sentence TLDR). Every example gives one
positive pair (document, its own summary, label 1) and
`negatives_per_positive` negative pairs (document, the summary of another
example drawn at random, label 0), as in the paper's §3.3
(`keras_hsum.data.labels.shte_pairs`). In training the negatives are drawn
afresh on every pass through the source (seed + pass number); in
evaluation they are fixed by `seed`.
"""

import dataclasses
import os
import re

import keras
import numpy as np

from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_TOKENS
from keras_hsum.features import SUMMARY_TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.models.shte import SHTE
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "scitldr_a"

_INPUT_KEYS = (
    TOKENS,
    TOKEN_MASK,
    PARAGRAPH_MASK,
    SUMMARY_TOKENS,
    SUMMARY_TOKEN_MASK,
    SUMMARY_PARAGRAPH_MASK,
)


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """SHTE sizes and pairing (see `recipes.base.RecipeConfig` for the rest).

    Attributes:
        hidden_dim: d_e, embedding and encoder width.
        num_heads: h, attention heads.
        intermediate_dim: d_ffw, word-level feed-forward width.
        sentence_intermediate_dim: d_ffs, sentence-level feed-forward width.
        num_word_layers: N, word-level encoder blocks.
        num_sentence_layers: N̂, sentence-level encoder blocks.
        classifier_hidden_dim: d_h, hidden width of the classifier.
        position_encoding: "none", "sentence" or "sentence_and_word".
        pooling: "max", "mean" or "attention".
        score_head: None (mean of the heads) or one head's index.
        dropout: dropout rate.
        max_sentences: P, document sentences kept.
        max_sentence_tokens: T, tokens kept per sentence (document and
            summary alike).
        max_summary_sentences: Q, summary sentences kept.
        negatives_per_positive: negative pairs per positive pair.
        extract_sentences: k, sentences `SHTE.extract` keeps (3).
        attention_dropout: dropout on the attention probabilities (a
            recipe option, not the paper's); None uses `dropout`, as the
            paper configs do; 0 lets Keras take fused (cuDNN flash)
            attention on a GPU (docs/recipes.md, "Attention dropout").
    """

    dataset: str = DEFAULT_DATASET
    hidden_dim: int = 128
    num_heads: int = 6
    intermediate_dim: int = 128
    sentence_intermediate_dim: int = 128
    num_word_layers: int = 2
    num_sentence_layers: int = 2
    classifier_hidden_dim: int = 512
    position_encoding: str = "sentence"
    pooling: str = "max"
    score_head: int | None = None
    dropout: float = 0.0
    attention_dropout: float | None = None
    max_sentences: int = 40
    max_sentence_tokens: int = 50
    max_summary_sentences: int = 6
    negatives_per_positive: int = 1
    extract_sentences: int = 3
    label_smoothing: float = 0.0


CONFIGS = {
    "tiny": Config(
        vocabulary_size=4000,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        sentence_intermediate_dim=128,
        num_word_layers=1,
        num_sentence_layers=1,
        classifier_hidden_dim=128,
        max_sentences=16,
        max_sentence_tokens=32,
        max_summary_sentences=3,
        pooling="max",
        position_encoding="none",
        batch_size=16,
        epochs=8,
        steps_per_epoch=100,
        validation_steps=8,
        learning_rate=0.5,
        warmup_steps=400,
        max_val_examples=64,
    ),
    # §3.2: d_e = 128 (trained embeddings), N = N̂ = 2, h = 6, d_ffw = d_ffs
    # = 128, d_h = 512; batches of 128 pairs (64 positive, 64 negative);
    # Adam + Noam, warm-up 4000; 20 epochs of 5000 batches; k = 3.
    # P, T and Q are not given (CNN/DM averages 28 sentences of 27 words and
    # 3.8 summary sentences); these keep nearly every sentence whole.
    "paper": Config(
        vocabulary_size=32000,
        batch_size=128,
        epochs=20,
        steps_per_epoch=5000,
        optimizer="adam",
        learning_rate=1.0,
        warmup_steps=4000,
        clipnorm=None,
    ),
}


def build_model(config, vocabulary_size):
    return SHTE(**model_arguments(SHTE, config, vocabulary_size=vocabulary_size, name="shte"))


def loss(config):
    """Cross-entropy of the two-class logits (Eq. 20)."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def metrics(config):
    """Pair classification accuracy."""
    return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def _summary_example(example, summary):
    """An `Example` whose one document is `summary`, one sentence per row."""
    from keras_hsum.data import reader as reader_lib
    from keras_hsum.data.sentences import split_sentences

    sentences = tuple(split_sentences(summary))
    section = reader_lib.Section(heading=None, paragraphs=(sentences,))
    return reader_lib.Example(
        id=f"{example.id}/summary",
        dataset=example.dataset,
        title=None,
        query=None,
        documents=(reader_lib.Document(title=None, sections=(section,)),),
        summary="",
        references=(),
    )


class _Pairs:
    """A re-iterable source of pair examples (one per `ShtePair`).

    Each pair is the original example with `summary` set to the pair's
    summary and `references` set to the example's own references (its
    summary first): a pair is positive exactly when its summary is one of
    them, which `shte_pairs` guarantees negatives never are. Every pass
    draws new negatives when `reshuffle` is set.
    """

    def __init__(self, source, negatives_per_positive, seed, reshuffle, max_examples):
        self.source = source
        self.negatives_per_positive = negatives_per_positive
        self.seed = seed
        self.reshuffle = reshuffle
        self.max_examples = max_examples
        self.passes = 0

    def _examples(self):
        from keras_hsum.data import reader as reader_lib

        if isinstance(self.source, (str, os.PathLike)):
            examples = reader_lib.read_examples(self.source, skip_invalid=True)
        else:
            examples = iter(self.source)
        count = 0
        for example in examples:
            if self.max_examples is not None and count >= self.max_examples:
                return
            if example.summary and example.summary.strip():
                count += 1
                yield example

    def __iter__(self):
        from keras_hsum.data.labels import shte_pairs

        seed = self.seed + self.passes if self.reshuffle else self.seed
        self.passes += 1
        for pair in shte_pairs(
            self._examples(), self.negatives_per_positive, seed=seed
        ):
            own = tuple(dict.fromkeys((pair.example.summary,) + pair.example.references))
            yield dataclasses.replace(pair.example, summary=pair.summary, references=own)


def pair_label(example):
    """1 when the pair example's summary is one of its references, else 0."""
    references = {reference.strip() for reference in example.references}
    return int(example.summary.strip() in references)


def summary_features(config, vocabulary):
    """An extra: the pair's summary as sentences, and the pair's label.

    In `make_dataset` it runs in the graph (`graph_features`, on each chunk
    of pairs, no `tf.py_function`): the chunk's summaries are written as
    one paragraph each and structured as one batch, and the label compares
    the stripped summary with the stripped references. Called in Python
    (one pair), it splits the summary with the Python `split_sentences`,
    renders it (`_summary_example`) and compares with `pair_label`: the
    same features (tests/test_shte_summary_features.py checks every pair of
    the bundled scitldr_a sample).

    Returns:
        A `keras_hsum.data.pipeline` extra returning `summary_tokens` int32
        [Q,T], `summary_token_mask` bool [Q,T], `summary_paragraph_mask`
        bool [Q] (Q = `config.max_summary_sentences`, padded) and `label`
        int32 [] (1: the document's own summary).
    """
    import tensorflow as tf

    from keras_hsum.data import reader as reader_lib
    from keras_hsum.data.pipeline import declare_features
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.data.structuring.character_classes import character_classes
    from keras_hsum.data.structuring.character_classes import patterns

    rows, width, pad_id = (
        config.max_summary_sentences,
        config.max_sentence_tokens,
        vocabulary.pad_id,
    )

    structurer = TextStructurer(vocabulary.proto, "sentences", rows, width)
    strip = patterns().strip
    line_break = "[{0}]*\n[{0}]*".format(character_classes()["space"])
    marker = "|".join(
        (re.escape(reader_lib.SECTION_BREAK), re.escape(reader_lib.DOCUMENT_BREAK),
         reader_lib.ESCAPED_MARKER)
    )

    @declare_features(
        summary_tokens=("int32", (rows, "T"), pad_id),
        summary_token_mask=("bool", (rows, "T")),
        summary_paragraph_mask=("bool", (rows,)),
        label=("int32", ()),
    )
    def summary(example, structured):
        # The candidate summary as one paragraph, structured by the same
        # graph structurer as the documents (and the SavedModel).
        text = reader_lib.render_documents(_summary_example(example, example.summary))
        built = structurer(tf.constant([text]))
        return {
            SUMMARY_TOKENS: built[TOKENS][0].numpy(),
            SUMMARY_TOKEN_MASK: built[TOKEN_MASK][0].numpy(),
            SUMMARY_PARAGRAPH_MASK: built[PARAGRAPH_MASK][0].numpy(),
            "label": np.asarray(pair_label(example), np.int32),
        }

    def graph_features(features, table):
        """A chunk's pairs -> the four features with a batch axis B.

        `features["summary"]` tf.string [B] and `features["references"]`
        tf.string [B, None] (ragged) are the pairs' raw strings; `table`
        is not used. Each summary is written as one paragraph, as
        `render_documents(_summary_example(...))` writes it (whitespace
        with a line break -> one space, stripped, a marker escaped; the
        structurer's splitter then finds the same sentences, the Python
        `split_sentences` having only changed whitespace between them),
        and structured as a batch of one-document examples.
        """
        del table
        summary = features["summary"]
        text = tf.strings.regex_replace(summary, line_break, " ")
        text = tf.strings.regex_replace(text, strip, "")
        escape = tf.strings.regex_full_match(text, marker)
        text = tf.where(escape, tf.strings.join(["\\", text]), text)
        built = structurer(tf.expand_dims(text, 1))
        references = features["references"]
        stripped = tf.strings.regex_replace(references.flat_values, strip, "")
        own = tf.gather(tf.strings.regex_replace(summary, strip, ""), references.value_rowids())
        label = tf.reduce_any(references.with_flat_values(tf.equal(stripped, own)), axis=1)
        return {
            SUMMARY_TOKENS: built[TOKENS],
            SUMMARY_TOKEN_MASK: built[TOKEN_MASK],
            SUMMARY_PARAGRAPH_MASK: built[PARAGRAPH_MASK],
            "label": tf.cast(label, tf.int32),
        }

    summary.graph_features = graph_features
    return summary


def features(config, *, training):
    """The document side: the "sentences" family, P = `max_sentences`, T =
    `max_sentence_tokens` (what the exported extractor structures too)."""
    del training
    return text_features(
        "sentences", max_units=config.max_sentences, max_tokens=config.max_sentence_tokens
    )


def labels(config, vocabulary):
    """The candidate summary and the pair's label (`summary_features`)."""
    return [summary_features(config, vocabulary)]


def examples(config, source, *, training, seed, max_examples):
    """The document/summary pairs of `source`: 1 + `negatives_per_positive`
    per source example (`max_examples` limits the source EXAMPLES, taken
    before pairing); in training new negatives every pass."""
    return _Pairs(
        source,
        config.negatives_per_positive,
        seed=seed,
        reshuffle=training,
        max_examples=max_examples,
    )


def pairs(config, batches, vocabulary):
    """Batches of SHTE pairs: `(inputs, labels, sample_weight)`.

    `inputs`: `tokens` int32 [B,P,T], `token_mask` bool [B,P,T],
    `paragraph_mask` bool [B,P] (the document, "sentences" family) and
    `summary_tokens` int32 [B,Q,T], `summary_token_mask` bool [B,Q,T],
    `summary_paragraph_mask` bool [B,Q] (the candidate summary);
    `labels` int32 [B] in {0, 1}; `sample_weight` float32 [B] of ones.
    P, Q and T are padded to the config's maxima.
    """
    del config, vocabulary
    import tensorflow as tf

    def split(features):
        inputs = {name: features[name] for name in _INPUT_KEYS}
        labels = features["label"]
        return inputs, labels, tf.ones_like(labels, tf.float32)

    return batches.map(split, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


RECIPE = Recipe(
    name="shte",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=features,
    labels=labels,
    examples=examples,
    pairs=pairs,
    loss=loss,
    metrics=metrics,
    shuffle_buffer=512,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
