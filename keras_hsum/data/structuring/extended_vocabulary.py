"""See et al.'s source-vocabulary extension, in the graph.

See et al. (2017), "Get To The Point", §2.2: a pointer-generator copies
words of the source that the vocabulary cannot spell; each such word of an
example gets an extended id V + j. `TextStructurer(..., oov_words=K)`
adds `source_extended_ids` and `source_oov_words`, and writes and reads
extended ids in targets and summaries, through `ExtendedVocabulary`.

A *word* is what SentencePiece marks as one: a piece starting with "▁" (or
a sentence's first piece) and the pieces after it up to the next such
piece, i.e. a whitespace-delimited word of the text; its text is the
input's own characters (the pieces' offsets, before normalisation). A word
is *out of vocabulary* when one of its pieces is `<unk>` (id `unk_id`):
characters the vocabulary has no piece for (this vocabulary has no byte
fallback), so no sequence of ids spells it and the decoder could only
write " ⁇ ". Words that merely take several pieces are not OOV: the
decoder spells them, and the copy distribution copies them piece by piece
through `tokens`. An OOV word's *core* is the word without its leading and
trailing pieces that are punctuation alone (no alphanumeric character;
`<unk>` never is): the core's text is the OOV word, and its pieces take the
extended id, so that "café," in the source and "café" in a summary are one
word. The K distinct OOV words of the kept tokens, in order of first
occurrence (row-major over [P,T]), get the ids V + 0 .. V + K-1; later
ones keep their ordinary ids. A word cut by a forced split keeps one id on
both sides of the cut; a word cut at T is listed when a piece of its core
was kept.
"""

import tensorflow as tf

from keras_hsum.data.structuring.segments import per_example_terms
from keras_hsum.features import SOURCE_EXTENDED_IDS
from keras_hsum.features import SOURCE_OOV_WORDS


class ExtendedVocabulary:
    """The words of tokenised text and the extended ids of its OOV words.

    Args:
        vocabulary: a `Vocabulary` (its pieces, `unk_id`,
            `vocabulary_size`).
        oov_words: K >= 1, the extended vocabulary's slots per example.
        strip_pattern: the RE2 pattern of leading or trailing whitespace
            (`Patterns.strip`).
    """

    def __init__(self, vocabulary, oov_words, strip_pattern):
        self.oov_words = oov_words
        self.vocabulary_size = vocabulary.vocabulary_size
        self.unk_id = vocabulary.unk_id
        self._strip_pattern = strip_pattern
        # Per piece, bool [V]: it begins a word ("▁" first); it is
        # punctuation alone (characters, "▁" aside, none alphanumeric).
        pieces = [vocabulary.id_to_piece(i) for i in range(self.vocabulary_size)]
        self.begins_word = tf.constant(
            [piece.startswith("\u2581") for piece in pieces], tf.bool
        )
        self.punctuation_piece = tf.constant(
            [
                i != self.unk_id
                and bool(piece.lstrip("\u2581"))
                and not any(c.isalnum() for c in piece)
                for i, piece in enumerate(pieces)
            ],
            tf.bool,
        )

    def words(self, ids, starts, ends, texts):
        """The SentencePiece words of tokenised texts and their OOV cores
        (see the module docstring), numbered over all rows.

        Args:
            ids, starts, ends: ragged [R, None], `tokenize_with_offsets`
                of `texts` (byte offsets).
            texts: tf.string [R].

        Returns:
            A dict: `word` int32 [n] (the word of each token, non-decreasing),
            `copied` bool [n] (the token is in the core of an OOV word: the
            pieces that take an extended id), `first` bool [n] (the token
            is the first of its word's core), `row` int32 [W] (each word's
            row), `oov` bool [W] (a piece is `<unk>`), `text` tf.string [W]
            (an OOV word's core, its input characters with whitespace
            stripped; "" for the other words).
        """
        values = ids.flat_values
        token_row = ids.value_rowids()
        count = tf.shape(values)[0]
        index = tf.range(count)
        first_in_row = tf.equal(
            tf.cast(index, tf.int64), tf.gather(ids.row_starts(), token_row)
        )
        begins = tf.gather(self.begins_word, values) | first_in_row
        word = tf.cumsum(tf.cast(begins, tf.int32)) - 1
        num_words = tf.reduce_sum(tf.cast(begins, tf.int32))
        oov = tf.math.unsorted_segment_max(
            tf.cast(tf.equal(values, self.unk_id), tf.int32), word, num_words
        ) > 0
        row = tf.math.unsorted_segment_min(tf.cast(token_row, tf.int32), word, num_words)
        # The core: from the word's first to its last piece that is not
        # punctuation alone.
        inner = ~tf.gather(self.punctuation_piece, values)
        core_first = tf.math.unsorted_segment_min(
            tf.where(inner, index, count), word, num_words
        )
        core_last = tf.math.unsorted_segment_max(
            tf.where(inner, index, -1), word, num_words
        )
        copied = (
            tf.gather(oov, word)
            & (index >= tf.gather(core_first, word))
            & (index <= tf.gather(core_last, word))
        )
        # Only the OOV words' texts are cut out (a few in a thousand words).
        which = tf.where(oov)
        start = tf.gather(
            tf.math.unsorted_segment_min(
                tf.where(copied, starts.flat_values, tf.int64.max), word, num_words
            ),
            which[:, 0],
        )
        end = tf.gather(
            tf.math.unsorted_segment_max(
                tf.where(copied, ends.flat_values, -1), word, num_words
            ),
            which[:, 0],
        )
        text = tf.strings.regex_replace(
            tf.strings.substr(
                tf.gather(texts, tf.gather(row, which[:, 0])), start, end - start
            ),
            self._strip_pattern,
            "",
        )
        return {
            "word": word,
            "copied": copied,
            "first": copied & tf.equal(index, tf.gather(core_first, word)),
            "row": row,
            "oov": oov,
            "text": tf.tensor_scatter_nd_update(
                tf.fill(tf.reshape(num_words, [1]), ""), which, text
            ),
        }

    def features(self, tokens, token_words, words, num_batch):
        """`source_extended_ids` [B,P,T] and `source_oov_words` [B,K].

        Args:
            tokens: int32 [B,P,T].
            token_words: int32 [B,P,T], for each kept token in the core of
                an OOV word, that word in `words`; else -1.
            words: `words`' dict for the example's sentences.
            num_batch: B.

        Returns:
            A dict: `source_extended_ids` int32 [B,P,T] (`tokens` with the
            pieces of OOV word j replaced by V + j) and `source_oov_words`
            tf.string [B,K] (the words, "" pads).
        """
        K = self.oov_words
        position = tf.where(token_words >= 0)  # [k,3], row-major
        text = tf.gather(words["text"], tf.gather_nd(token_words, position))
        batch = tf.cast(position[:, 0], tf.int32)
        slot, _ = per_example_terms(text, batch, num_batch)
        listed = slot < K
        extended = tf.tensor_scatter_nd_update(
            tokens,
            tf.boolean_mask(position, listed),
            self.vocabulary_size + tf.boolean_mask(slot, listed),
        )
        # Every occurrence of word j writes the same text to slot j.
        oov_words = tf.tensor_scatter_nd_update(
            tf.fill(tf.stack([num_batch, K]), ""),
            tf.boolean_mask(tf.stack([batch, slot], 1), listed),
            tf.boolean_mask(text, listed),
        )
        return {
            SOURCE_EXTENDED_IDS: tf.ensure_shape(extended, tokens.shape),
            SOURCE_OOV_WORDS: tf.ensure_shape(oov_words, [None, K]),
        }

    def tokenize(self, tokenizer, texts, oov_words):
        """Clean texts -> ids over the extended vocabulary.

        Args:
            tokenizer: the SentencePiece tokenizer.
            texts: tf.string [B], valid UTF-8.
            oov_words: tf.string [B, K], the rows' `source_oov_words`.

        Returns:
            int32 ragged [B, None]: a word of `texts` that is out of
            vocabulary and equal to word j of its row's `oov_words` is the
            one id V + j; the other words are their pieces.
        """
        ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
        words = self.words(ids, starts, ends, texts)
        # j of every word: the first equal word of its row's list, else -1.
        candidates = tf.gather(oov_words, words["row"])  # [W, K]
        equal = (
            tf.equal(candidates, words["text"][:, None])
            & tf.not_equal(candidates, "")
            & words["oov"][:, None]
        )
        slot = tf.where(
            tf.reduce_any(equal, axis=1),
            tf.argmax(tf.cast(equal, tf.int32), axis=1, output_type=tf.int32),
            -1,
        )
        token_slot = tf.where(words["copied"], tf.gather(slot, words["word"]), -1)
        values = ids.flat_values
        # A replaced core keeps one token, its first, holding V + j.
        kept = (token_slot < 0) | words["first"]
        values = tf.where(token_slot >= 0, self.vocabulary_size + token_slot, values)
        return tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(values, kept),
            tf.boolean_mask(ids.value_rowids(), kept),
            nrows=ids.nrows(),
        )

    def detokenize(self, tokenizer, kept, oov_words):
        """Ragged ids [B, None] that may hold extended ids -> tf.string [B].

        Each row is cut into runs of ordinary ids, detokenised by
        SentencePiece, and single extended ids, written as their word; a
        run or word is preceded by a space when it begins a word ("▁"
        first; a copied word always does) and is not first in its row. An
        id >= V + K, or one whose word is "", reads as `<unk>`.

        Args:
            tokenizer: the SentencePiece tokenizer.
            kept: int32 ragged [B, None], `tokens.text_ids`.
            oov_words: tf.string [B, K].
        """
        V = self.vocabulary_size
        values = kept.flat_values
        row = tf.cast(kept.value_rowids(), tf.int32)
        count = tf.shape(values)[0]
        extended = values >= V
        first_in_row = tf.equal(
            tf.range(count, dtype=tf.int64), tf.gather(kept.row_starts(), kept.value_rowids())
        )
        after_extended = tf.concat([[False], extended[:-1]], 0)
        starts = first_in_row | extended | after_extended
        run = tf.cumsum(tf.cast(starts, tf.int32)) - 1
        num_runs = tf.reduce_sum(tf.cast(starts, tf.int32))
        run_row = tf.math.unsorted_segment_min(row, run, num_runs)
        run_first = tf.math.unsorted_segment_min(tf.range(count), run, num_runs)
        first_id = tf.gather(values, run_first)
        run_extended = first_id >= V
        ordinary = tokenizer.detokenize(
            tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(values, ~extended),
                tf.boolean_mask(run, ~extended),
                nrows=num_runs,
            )
        )
        # Column K of the padded list is "": ids past the list read as <unk>.
        K = tf.shape(oov_words)[1]
        padded = tf.concat([oov_words, tf.fill([tf.shape(oov_words)[0], 1], "")], 1)
        slot = tf.where(run_extended, tf.minimum(first_id - V, K), K)
        word = tf.gather_nd(padded, tf.stack([run_row, slot], 1))
        unknown = tokenizer.detokenize(tf.constant([[self.unk_id]], tf.int32))[0]
        word = tf.where(tf.equal(word, ""), unknown, word)
        begins = run_extended | tf.gather(
            self.begins_word, tf.where(run_extended, 0, first_id)
        )
        first_run = tf.equal(
            run_first, tf.gather(tf.cast(kept.row_starts(), tf.int32), run_row)
        )
        text = tf.where(run_extended, word, ordinary)
        text = tf.where(begins & ~first_run, " " + text, text)
        return tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(
                text, run_row, nrows=tf.cast(kept.nrows(), tf.int32)
            ),
            axis=1,
        )
