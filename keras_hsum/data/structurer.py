"""In-graph text structuring, shared by training and serving.

`TextStructurer` turns raw text into model features with TensorFlow and
tensorflow-text ops only: no `py_function`, no numpy. Training maps it over
the corpus (`keras_hsum.data.make_dataset` renders each example as text and
structures it here); an exported SavedModel holds the same structurer and
loads and runs in a process that imports only `tensorflow` and
`tensorflow_text` (TF Serving runs graphs only). One implementation, so a
model is served the features it was trained on.

`TextStructurer` composes the steps of `keras_hsum.data.structuring`, one
module each; the Python builders of `tests/reference_structure.py` (with
`keras_hsum.data.reader`, `sentences`, `ranking` and `graphs`) are its
independent reference in the tests. Step by step:

1. `structuring.text`: documents -> paragraphs, as
   `keras_hsum.data.reader.example_from_text` reads plain text.
2. `structuring.sentences`: paragraphs -> sentences, as
   `keras_hsum.data.sentences.split_sentences` (with RE2 transcriptions of
   Python's character classes, `structuring.character_classes`).
3. `structuring.tokens`: SentencePiece (or a preset's tokenizer) ids of
   every sentence; sentences without tokens are dropped.
4. `structuring.rows`: the family's rows (re-chunking at sentence
   boundaries with forced splits of over-long sentences, a sequential
   greedy packing in `tf.scan`), placed into [B,P,T];
   `structuring.flat` for `"flat"`.
5. `structuring.ranking`: tf-idf cosine to the query, else the title
   (`keras_hsum.data.ranking.tfidf_cosine`), or the learned ranker; the
   first P rows in that order are kept.
6. With `graph_kind`, `structuring.graphs`: HT's paragraph graph over the
   kept rows (`keras_hsum.data.graphs.graph_for`).
7. With `oov_words=K`, `structuring.extended_vocabulary`: See et al.'s
   source-vocabulary extension.
8. With `statistics=True`, `structuring.statistics`: what was left out.

Known differences from the Python reference (measured on the bundled real
samples by `tests/data/test_structurer.py`), each explained in its module:
invalid UTF-8 is replaced with ICU's rules (`text.clean`); lower-casing for
tf-idf and the graphs uses ICU instead of `str.lower`; tf-idf scores and
graph cosines are summed in another order (`ranking`, `graphs`). Plain text
carries sections only where a `===` line marks them (as
`keras_hsum.data.reader.render_documents` writes them); without one, a
document is one section, as in `example_from_text`.
"""

import tensorflow as tf

from keras_hsum.data.structuring import options as options_lib
from keras_hsum.data.structuring import ranking
from keras_hsum.data.structuring import rows as rows_lib
from keras_hsum.data.structuring import statistics as statistics_lib
from keras_hsum.data.structuring import text as text_lib
from keras_hsum.data.structuring import tokens as tokens_lib
from keras_hsum.data.structuring.character_classes import patterns
from keras_hsum.data.structuring.extended_vocabulary import ExtendedVocabulary
from keras_hsum.data.structuring.flat import flat_features
from keras_hsum.data.structuring.graphs import check_graph
from keras_hsum.data.structuring.graphs import paragraph_graph
from keras_hsum.data.structuring.segments import local_index
from keras_hsum.data.structuring.sentences import split_sentences
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import RANK_SCORE
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK


def _unchanged(texts):
    return texts


class TextStructurer(tf.Module):
    """Raw documents -> padded model features, inside the graph.

    The graph version of `keras_hsum.data.reader.example_from_text`
    followed by the family's builder in `tests/reference_structure.py` and
    `make_dataset(..., pad_to_max=True)`: the same keys, dtypes and ids
    (see the module docstring for the known differences).

    Args:
        vocabulary_proto: the serialized SentencePiece model (bytes), e.g.
            `Vocabulary.proto` (a `Vocabulary` is read as its proto); or a
            `keras_hsum.data.preset_vocabulary.PresetVocabulary`: a
            keras-hub preset's own tokenizer (BART's byte-level BPE, T5's
            SentencePiece) tokenizes and detokenizes instead, with its
            special ids and without separators (see that module).
        family: `"paragraphs"`, `"sections"`, `"snippets"`, `"sentences"`
            or `"flat"` (as in `keras_hsum.data.make_dataset`).
        max_units: P, rows per example (ignored by `"flat"`, may be None).
        max_tokens: T, tokens per row (N, the sequence length, for
            `"flat"`).
        statistics: also return `keras_hsum.data.TruncationReport`'s counts
            per example, int32 [B] each: `input_tokens` (the tokens of
            every sentence), `output_tokens` (those in the output; for
            `"flat"` without the `<para>` separators), `dropped_units`
            (rows beyond P), `truncated_units` (kept rows cut at T; for
            `"flat"` 1 when the sequence was cut at N) and `forced_splits`
            (sentences longer than T split at token boundaries by the
            packing families). Off for serving.
        valid_utf8: the caller's strings are valid UTF-8 (`make_dataset`'s
            source encodes Python `str`), so the replacement of invalid
            UTF-8 by U+FFFD, a transcoding of every document (most of the
            paragraph stage's time), is skipped: on valid UTF-8 it changes
            nothing. Off for serving, which reads any bytes.
        **family_options: the builder's keyword arguments:
            `rank="tfidf"|"order"|"learned"`, `ranker_run=None`,
            `pack="paragraph"|"section"`, `context_length=32` for
            `"paragraphs"`; `rank="tfidf"|"order"` for `"flat"`.
            `rank="learned"` ranks the rows with the `ParagraphRanker` of
            the `ranker` run folder `ranker_run`, inside the graph
            (`keras_hsum.data.learned_ranking`): the first P_c rows in
            reading order (P_c: the ranker run's `max_paragraphs`) are
            scored, and the P best (ties in reading order) are kept. The
            ranker run must have this vocabulary.
            `graph_kind="similarity"|"discourse"` (`"paragraphs"`, with
            `graph_options`, a dict of that graph's options in
            `keras_hsum.data.structuring.graphs.GRAPH_OPTIONS`) adds HT's
            paragraph graph over the kept rows, built in the graph as
            `keras_hsum.data.graphs.graph_for` builds it from the rows in
            Python (`keras_hsum.data.structuring.graphs`).
            `oov_words=K` (every family but `"flat"`; K >= 1) adds See et
            al.'s extended vocabulary (below).

    Extended vocabulary (See et al. 2017, §2.2, for a pointer-generator's
    copy): the K distinct out-of-vocabulary words of the kept tokens (a
    word with an `<unk>` piece), in order of first occurrence, get the ids
    V + 0 .. V + K-1; `keras_hsum.data.structuring.extended_vocabulary`
    defines words, their cores and the ids.

    Call arguments:
        documents: tf.string [B, None] (dense, "" pads; or a
            `tf.RaggedTensor`): one string per input document, paragraphs
            separated by blank lines, sections by a `===` line. Invalid UTF-8 is replaced by U+FFFD.
        title: optional tf.string [B] ("" or None: no title).
        query: optional tf.string [B] (ranks before the title, as
            `context_text` does).

    Returns:
        A dict of features (P = max_units, T = max_tokens, static):
        `tokens` int32 [B,P,T] (pad id where empty), `token_mask` bool
        [B,P,T], `paragraph_mask` bool [B,P], `document_ids` int32 [B,P],
        `unit_texts` tf.string [B,P] (each row's text, "" for padding);
        for `"paragraphs"` also `paragraph_index` int32 [B,P] (the row's
        place in reading order), `rank_score` float32 [B,P] (tf-idf cosine,
        the learned ranker's score, or 0 for "order") and `context_tokens` int32 [B,C] (C =
        context_length); with `graph_kind`, `graph` float32 [B,P,P] (raw
        edge weights, row and column i are row i; 0 for padding); with
        `oov_words=K`, `source_extended_ids` int32 [B,P,T] (`tokens` with
        the pieces of OOV word j replaced by V + j) and `source_oov_words`
        tf.string [B,K] (the words, "" pads). For
        `"flat"`: `tokens` int32 [B,N], `token_mask`
        bool [B,N] and `unit_texts` tf.string [B,None] (the paragraphs in
        the order used). An example without text gives all padding.

    Example:
    >>> import tensorflow as tf
    >>> from keras_hsum.data import Vocabulary, corpora
    >>> vocabulary = Vocabulary.load(corpora.sample_tokenizer_path())
    >>> structurer = TextStructurer(vocabulary.proto, "paragraphs", 4, 8)
    >>> features = structurer(  # B = 1 example of two documents
    ...     tf.constant([["The room was clean.\\n\\nThe staff were friendly.",
    ...                   "Breakfast was cold."]]),
    ...     title=tf.constant(["Our stay"]))
    >>> features["tokens"].shape  # [B,P,T]
    TensorShape([1, 4, 8])
    >>> features["paragraph_mask"].numpy(), features["document_ids"].numpy()
    (array([[ True,  True,  True, False]]), array([[0, 0, 1, 0]], dtype=int32))
    >>> features["unit_texts"].numpy()[0, :3].tolist()
    [b'The room was clean.', b'The staff were friendly.', b'Breakfast was cold.']
    """

    def __init__(
        self, vocabulary_proto, family, max_units, max_tokens, *,
        statistics=False, valid_utf8=False, **family_options
    ):
        super().__init__(name="text_structurer")
        self.statistics = bool(statistics)
        self._clean = _unchanged if valid_utf8 else text_lib.clean
        options_lib.check_family(family)
        preset, vocabulary_proto = _vocabulary_source(vocabulary_proto)
        options = options_lib.family_options(
            family, max_units, max_tokens, family_options
        )
        self.oov_words = options_lib.oov_words(family, options)
        self._graph_kind, self._graph_options = check_graph(
            options.get("graph_kind"), options.get("graph_options")
        )
        from keras_hsum.data.vocabulary import Vocabulary

        if preset is not None:
            options_lib.check_preset_options(preset, options)
            vocabulary = preset
        else:
            vocabulary = Vocabulary(bytes(vocabulary_proto))
        self.family = family
        self.max_units = max_units
        self.max_tokens = max_tokens
        self.family_options = options
        self.pad_id = vocabulary.pad_id
        self.bos_id = vocabulary.bos_id
        self.eos_id = vocabulary.eos_id
        self.paragraph_separator_id = vocabulary.paragraph_id
        self.vocabulary_size = vocabulary.vocabulary_size
        self.unk_id = vocabulary.unk_id
        self._patterns = patterns()
        self._extended = (
            ExtendedVocabulary(vocabulary, self.oov_words, self._patterns.strip)
            if self.oov_words else None
        )
        self._skipped_ids = tokens_lib.skipped_ids(vocabulary)
        self._space_before_sentences = bool(
            getattr(vocabulary, "space_before_sentences", False)
        )
        # The tokenizer and the ranker are attributes of this module, so
        # that a SavedModel holding it saves their resources and weights.
        self._tokenizer = tokens_lib.graph_tokenizer(vocabulary_proto, preset)
        self._ranker = None
        if options.get("rank") == "learned":
            from keras_hsum.data.learned_ranking import load_ranker_run

            self._ranker, self._ranker_context_length = load_ranker_run(
                options["ranker_run"], vocabulary_proto
            )
        self._structure = tf.function(
            self._structure_batch,
            input_signature=[
                tf.TensorSpec([None, None], tf.string),
                tf.TensorSpec([None], tf.string),
                tf.TensorSpec([None], tf.string),
            ],
            autograph=False,
        )

    # ------------------------------------------------------------------ API

    def __call__(self, documents, title=None, query=None):
        if isinstance(documents, tf.RaggedTensor):
            documents = documents.to_tensor(default_value="")
        documents = tf.convert_to_tensor(documents, dtype=tf.string)
        if documents.shape.rank != 2:
            raise ValueError(
                "`documents` must be tf.string [B, None] (one string per "
                f"document, \"\" pads), received shape {documents.shape}; "
                "wrap a single example as [[document, ...]]."
            )
        batch = tf.shape(documents)[0]
        title = _context_argument(title, batch, "title")
        query = _context_argument(query, batch, "query")
        return self._structure(documents, title, query)

    def detokenize(self, ids, oov_words=None):
        """Token ids -> text, stopping at EOS.

        Args:
            ids: int [B, L] (e.g. a decoded summary with BOS first).
            oov_words: optional tf.string [B, K], each row's
                `source_oov_words`: an extended id V + j (a copied OOV
                word) is written as the row's word j, as a word of its own
                (after a space unless it comes first); an id >= V + K, or
                one whose word is "", reads as `<unk>`. Without it, ids
                must be < V.

        Returns:
            tf.string [B]: the text of the ids before the first EOS, with
            padding, BOS and the separator pieces (`<title>`, `<para>`,
            `<sent>`, `<doc>`) dropped.
        """
        kept = tokens_lib.text_ids(ids, self.bos_id, self.eos_id, self._skipped_ids)
        if oov_words is None:
            return self._tokenizer.detokenize(kept)
        if not self.oov_words:
            raise ValueError(
                "detokenize(..., oov_words=...) writes the extended ids of a "
                "structurer built with `oov_words=K`; this one has none. Leave "
                "`oov_words` out, or build the structurer with oov_words."
            )
        return self._extended.detokenize(
            self._tokenizer, kept, tf.convert_to_tensor(oov_words, tf.string)
        )

    def tokenize(self, texts):
        """tf.string [B] -> int32 ragged [B, None] (`Vocabulary.encode`'s ids)."""
        return self._tokenizer.tokenize(self._clean(tf.convert_to_tensor(texts)))

    def tokenize_extended(self, texts, oov_words):
        """Texts -> ids over the extended vocabulary (a copy model's targets).

        As `tokenize`, except that a word of `texts` that is out of
        vocabulary (see `keras_hsum.data.structuring.extended_vocabulary`)
        and equal to word j of its row's `oov_words` becomes the one id
        V + j instead of its pieces, as See et al. write a target word that
        is an OOV of the source.

        Args:
            texts: tf.string [B].
            oov_words: tf.string [B, K], the rows' `source_oov_words`.

        Returns:
            int32 ragged [B, None].

        Raises:
            ValueError: for a structurer built without `oov_words`.
        """
        if not self.oov_words:
            raise ValueError(
                "tokenize_extended writes the extended ids of a structurer built "
                "with `oov_words=K`; this one has none. Use `tokenize`, or build "
                "the structurer with oov_words."
            )
        return self._extended.tokenize(
            self._tokenizer,
            self._clean(tf.convert_to_tensor(texts, tf.string)),
            tf.convert_to_tensor(oov_words, tf.string),
        )

    # ------------------------------------------------------------ structure

    def _structure_batch(self, documents, title, query):
        """documents tf.string [B,D], title and query tf.string [B] -> the
        features (see the class docstring)."""
        num_batch = tf.shape(documents)[0]
        title = self._clean(title)
        query = self._clean(query)
        context = tf.where(tf.not_equal(query, ""), query, title)
        paragraphs = text_lib.paragraphs(
            self._clean(documents), self._patterns.strip, replace_invalid=False
        )
        sentences = self._sentences(paragraphs)
        if self.family == "flat":
            features = flat_features(
                sentences, context, num_batch,
                max_tokens=self.max_tokens,
                rank=self.family_options["rank"],
                pad_id=self.pad_id,
                separator_id=self.paragraph_separator_id,
                nonword_pattern=self._patterns.nonword,
                statistics=self.statistics,
            )
        else:
            rows = rows_lib.family_rows(
                self.family, sentences, self.max_tokens, self._tokenizer,
                self.family_options.get("pack", "paragraph"),
            )
            features = self._dense(rows, sentences, context, num_batch)
        if self.statistics:
            features.update(
                statistics_lib.input_statistics(
                    sentences, num_batch, self.family, self.max_tokens
                )
            )
        return features

    def _sentences(self, paragraphs):
        """`paragraphs` (`text.paragraphs`) -> `tokens.sentence_table`."""
        text, paragraph = split_sentences(paragraphs[0], self._patterns)
        if self.oov_words:
            ids, starts, ends = self._tokenizer.tokenize_with_offsets(text)
            words = self._extended.words(ids, starts, ends, text)
        else:
            ids = self._tokenizer.tokenize(
                tokens_lib.sentence_inputs(
                    text, paragraph, self._space_before_sentences
                )
            )
            words = None
        return tokens_lib.sentence_table(ids, text, paragraph, paragraphs, words)

    def _order(self, rows, sentences, context, local, num_batch):
        """Each row's score float32 [R] and slot int32 [R] (P: dropped)
        under the family's `rank`."""
        batch = rows["batch"]
        rank = self.family_options["rank"] if self.family == "paragraphs" else None
        if rank == "tfidf":
            scores = ranking.tfidf_scores(
                rows["text"], batch, context, num_batch, self._patterns.nonword
            )
            return scores, ranking.rank(scores, batch, num_batch)
        if rank == "learned":
            # Every row is a candidate, as HT's ranker scores every
            # paragraph: R slots, the most rows of one example in the batch.
            num_rows = tf.maximum(tf.reduce_max(local) + 1, 1)
            length = self._ranker_context_length
            context_tokens = self._tokenizer.tokenize(context)[:, :length].to_tensor(
                default_value=self.pad_id, shape=tf.stack([num_batch, length])
            )
            return ranking.learned_rank(
                self._ranker,
                tf.ensure_shape(context_tokens, [None, length]),
                rows,
                sentences,
                rows_lib.RowPlacement(
                    batch, local, tf.ones_like(local, tf.bool), num_batch, num_rows
                ),
                self.pad_id,
                self.max_tokens,
                self.max_units,
            )
        return tf.zeros(tf.shape(batch), tf.float32), local

    def _dense(self, rows, sentences, context, num_batch):
        """Keeps the first (or best) P rows of each example; pads."""
        P, T = self.max_units, self.max_tokens
        batch = rows["batch"]
        local = local_index(batch, num_batch)
        scores, slot = self._order(rows, sentences, context, local, num_batch)
        placement = rows_lib.RowPlacement(batch, slot, slot < P, num_batch, P)
        kept_rows = tf.boolean_mask(tf.stack([batch, slot], 1), placement.kept)

        def rows_tensor(values, default):
            return tf.tensor_scatter_nd_update(
                tf.fill(tf.stack([num_batch, P]), default),
                kept_rows,
                tf.boolean_mask(values, placement.kept),
            )

        tokens, token_mask = rows_lib.place_tokens(
            rows, sentences, self.pad_id, placement, T
        )
        features = {
            TOKENS: tf.ensure_shape(tokens, [None, P, T]),
            TOKEN_MASK: tf.ensure_shape(token_mask, [None, P, T]),
            PARAGRAPH_MASK: tf.ensure_shape(
                rows_tensor(tf.ones(tf.shape(batch), tf.bool), False), [None, P]
            ),
            DOCUMENT_IDS: tf.ensure_shape(rows_tensor(rows["document"], 0), [None, P]),
            "unit_texts": tf.ensure_shape(rows_tensor(rows["text"], ""), [None, P]),
        }
        if self.family == "paragraphs":
            length = self.family_options["context_length"]
            context_ids = self._tokenizer.tokenize(context)[:, :length]
            features[PARAGRAPH_INDEX] = tf.ensure_shape(
                rows_tensor(local, 0), [None, P]
            )
            features[RANK_SCORE] = tf.ensure_shape(rows_tensor(scores, 0.0), [None, P])
            features[CONTEXT_TOKENS] = tf.ensure_shape(
                context_ids.to_tensor(
                    default_value=self.pad_id, shape=tf.stack([num_batch, length])
                ),
                [None, length],
            )
            if self._graph_kind is not None:
                features[GRAPH] = tf.ensure_shape(
                    paragraph_graph(
                        features, self._graph_kind, self._graph_options,
                        self._patterns,
                    ),
                    [None, P, P],
                )
        if self.oov_words:
            words = sentences["words"]
            token_words = rows_lib.place_values(
                rows, tf.where(words["copied"], words["word"], -1), -1, placement, T
            )
            features.update(
                self._extended.features(tokens, token_words, words, num_batch)
            )
        if self.statistics:
            features.update(
                statistics_lib.row_statistics(rows, token_mask, placement, T)
            )
        return features


def _vocabulary_source(vocabulary_proto):
    """`(preset, proto)`: a `PresetVocabulary` and None, or None and the
    SentencePiece proto (bytes) of `vocabulary_proto` (bytes or a
    `Vocabulary`).

    Raises:
        TypeError: for anything else.
    """
    if hasattr(vocabulary_proto, "graph_tokenizer"):
        return vocabulary_proto, None
    if not isinstance(vocabulary_proto, (bytes, bytearray)) and isinstance(
        getattr(vocabulary_proto, "proto", None), bytes
    ):
        vocabulary_proto = vocabulary_proto.proto
    if not isinstance(vocabulary_proto, (bytes, bytearray)):
        raise TypeError(
            "`vocabulary_proto` must be the serialized SentencePiece model "
            f"(bytes), received {type(vocabulary_proto).__name__}; pass "
            "`Vocabulary.proto`, or a PresetVocabulary for a preset's tokenizer."
        )
    return None, vocabulary_proto


def _context_argument(value, batch, name):
    """`title` or `query` of `TextStructurer.__call__` as tf.string [B]."""
    if value is None:
        return tf.fill([batch], "")
    value = tf.convert_to_tensor(value, dtype=tf.string)
    if value.shape.rank != 1:
        raise ValueError(
            f"`{name}` must be tf.string [B] (\"\" for none), received "
            f"shape {value.shape}."
        )
    return value
