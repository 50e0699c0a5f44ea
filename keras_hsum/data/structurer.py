"""In-graph text structuring, shared by training and serving.

`TextStructurer` turns raw text into model features with TensorFlow and
tensorflow-text ops only: no `py_function`, no numpy. Training maps it over
the corpus (`keras_hsum.data.make_dataset` renders each example as text and
structures it here); an exported SavedModel holds the same structurer and
loads and runs in a process that imports only `tensorflow` and
`tensorflow_text` (TF Serving runs graphs only). One implementation, so a
model is served the features it was trained on.

The Python builders of `keras_hsum.data.structure` are its independent
reference in the tests. Step by step, the structurer does what they do to
plain text:

1. `keras_hsum.data.reader.example_from_text`: each string of `documents`
   is one document; inside it, lines are stripped, a blank line closes a
   paragraph, a line holding only `===` starts a new section, a line
   holding only `---` starts a new document, a line holding only
   backslashes and a marker is text with one backslash fewer (`\\===`
   reads as `===`), and the lines of a paragraph are joined with single
   spaces. Documents without text (e.g. the "" that
   pad a batch) are skipped, so `document_ids` count only documents with
   text, as in Python; sections without text are skipped too.
2. `keras_hsum.data.sentences.split_sentences`, rewritten for RE2 (which
   has no look-ahead): a paragraph is cut into whitespace-separated chunks
   and a sentence ends between two chunks when the first ends with
   `.`/`!`/`?` (+ closing quotes or brackets), the second starts (after
   an optional opening quote or bracket) with an upper-case letter or a
   digit, and the abbreviation rules do not apply. Python's character
   predicates (`str.isspace`, `isupper`, `islower`, `istitle`, `isdigit`,
   `isalnum`) are transcribed into explicit RE2 code-point classes when the
   structurer is built, so the two splitters agree on every code point.
3. SentencePiece tokenisation of every sentence
   (`tensorflow_text.SentencepieceTokenizer` on the vocabulary's proto: the
   same ids as `Vocabulary.encode`); sentences without tokens are dropped.
4. The family's builder (`keras_hsum.data.structure`): re-chunking at
   sentence boundaries with forced splits of over-long sentences (a
   sequential greedy packing, `tf.scan`), tf-idf cosine ranking to the
   query, else the title (`keras_hsum.data.ranking.tfidf_cosine`: terms are
   lower-cased `[^\\W_]+` words, smoothed idf over the rows of one example,
   float64 arithmetic, stable sort), truncation to P rows of T tokens.
5. With `graph_kind`, HT's paragraph graph over the kept rows
   (`keras_hsum.data.graphs.graph_for`: the similarity or the discourse
   graph, whose module docstring defines both), from the rows' texts,
   documents and reading-order positions.
6. With `oov_words=K`, See et al.'s source-vocabulary extension: the
   example's out-of-vocabulary words (whitespace-delimited words whose
   pieces include `<unk>`; see `TextStructurer`) and the extended ids of
   its tokens, read from the tokens kept in the output.

Known differences from the Python builders (measured on the bundled real
samples by `tests/data/test_structurer.py`):
- Invalid UTF-8 is replaced by U+FFFD with ICU's rules
  (`tf.strings.unicode_transcode`), which may emit a different number of
  U+FFFD than Python's `bytes.decode(errors="replace")` for one bad
  sequence; valid text is unaffected.
- Lower-casing for tf-idf uses ICU (`tf.strings.lower(encoding="utf-8")`)
  instead of `str.lower`; they agree on the text we have seen, and any
  difference only moves tf-idf scores.
- tf-idf scores are summed in a different order than numpy's, so a score
  can differ in the last float64 bit; after the cast to float32 this can
  only swap two rows whose scores tie to within one float32 ulp.
- The paragraph graphs lower-case with ICU too (tf-idf terms, discourse
  markers, the stop-word test of entities), and their cosines are summed in
  another order than `graphs`' float64 dot products: a cosine within one
  float32 ulp of `threshold` may fall on the other side of it. On the
  bundled qmsum_goldspan and fewsum validation examples every graph is
  equal (`tests/data/test_structurer_graphs.py`).
- Plain text carries sections only where a `===` line marks them (as
  `keras_hsum.data.reader.render_documents` writes them); without one, a
  document is one section, as in `example_from_text`.
"""

import functools
import sys

import tensorflow as tf
import tensorflow_text as tf_text

from keras_hsum.checks import check_int
from keras_hsum.data.reader import DOCUMENT_BREAK
from keras_hsum.data.reader import ESCAPED_MARKER
from keras_hsum.data.reader import SECTION_BREAK
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import FAMILIES
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import RANK_SCORE
from keras_hsum.features import SOURCE_EXTENDED_IDS
from keras_hsum.features import SOURCE_OOV_WORDS
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK

# A whole line that is an escaped marker (the reader's ESCAPED_MARKER).
_UNESCAPE_PATTERN = f"^{ESCAPED_MARKER}$"

# The family options each builder of `keras_hsum.data.structure` accepts.
FAMILY_OPTIONS = {
    "paragraphs": {"rank": "tfidf", "context_length": 32, "pack": "paragraph"},
    "sections": {},
    "snippets": {},
    "sentences": {},
    "flat": {"rank": "tfidf"},
}
# Options a family accepts besides those (no default: absent unless given,
# so that the structures described without them are unchanged).
EXTRA_OPTIONS = {
    "paragraphs": ("ranker_run", "graph_kind", "graph_options", "oov_words"),
    "sections": ("oov_words",),
    "snippets": ("oov_words",),
    "sentences": ("oov_words",),
}

# The options of each paragraph graph (`keras_hsum.data.graphs`) that the
# structurer builds in the graph, with their defaults.
GRAPH_OPTIONS = {
    "similarity": {"threshold": 0.2},
    "discourse": {
        "adjacency_weight": 1.0,
        "marker_weight": 1.0,
        "entity_weight": 1.0,
        "directed": True,
        "markers": None,  # graphs.DISCOURSE_MARKERS
        "stop_words": None,  # graphs.STOP_WORDS
    },
}

# split_sentences' punctuation (keras_hsum.data.sentences._BOUNDARY).
_OPENERS = "\"'\u201c\u2018(["
_CLOSERS = "\"'\u201d\u2019)]"


def _escape(characters):
    return "".join(f"\\x{{{ord(c):x}}}" for c in characters)


@functools.lru_cache(maxsize=None)
def _character_classes():
    """RE2 class bodies transcribing Python's `str` character predicates.

    Returns a dict of class bodies (without brackets), computed once over
    every code point: `space` (`str.isspace`, also Python's `\\s`),
    `upper` (`isupper`), `lower_or_title` (`islower`, titlecase), `digit`
    (`isdigit`), `sentence_start` (`\\w` and (upper or digit)), `alnum`
    (`[^\\W_]`).
    """
    predicates = {
        "space": str.isspace,
        "upper": str.isupper,
        "lower_or_title": lambda c: c.islower() or (c.istitle() and not c.isupper()),
        "digit": str.isdigit,
        "sentence_start": lambda c: (c.isalnum() or c == "_")
        and (c.isupper() or c.isdigit()),
        "alnum": str.isalnum,
    }
    ranges = {name: [] for name in predicates}
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue  # surrogates never occur in valid UTF-8
        character = chr(code)
        for name, predicate in predicates.items():
            if predicate(character):
                spans = ranges[name]
                if spans and spans[-1][1] == code - 1:
                    spans[-1][1] = code
                else:
                    spans.append([code, code])
    return {
        name: "".join(
            f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}"
            for a, b in spans
        )
        for name, spans in ranges.items()
    }


def _abbreviation_pattern():
    """An RE2 pattern matching `word.lower() in ABBREVIATIONS` exactly.

    Letters match both ASCII cases only (RE2's `(?i)` would also fold
    e.g. U+017F into "s", which `str.lower` does not).
    """
    from keras_hsum.data.sentences import ABBREVIATIONS
    from keras_hsum.data.sentences import NUMERAL_ABBREVIATIONS

    def literal(word):
        return "".join(
            f"[{c}{c.upper()}]" if c.isalpha() else "\\" + c if c == "." else c
            for c in word
        )

    listed = sorted(ABBREVIATIONS - NUMERAL_ABBREVIATIONS)
    numeral = sorted(NUMERAL_ABBREVIATIONS)
    return (
        "(?:" + "|".join(literal(w) for w in listed) + ")",
        "(?:" + "|".join(literal(w) for w in numeral) + ")",
    )


def _group_rows(keys):
    """Row number of each item for runs of equal (sorted) keys: int32 [n]."""
    size = tf.shape(keys)[0]
    changes = tf.concat(
        [tf.ones([tf.minimum(size, 1)], tf.bool), keys[1:] != keys[:-1]], 0
    )
    return tf.cumsum(tf.cast(changes, tf.int32)) - 1


def _local_index(batch, num_batch):
    """Position of each item among the items of its batch element.

    Args:
        batch: int32 [n], non-decreasing batch index of each item.
        num_batch: B.

    Returns:
        int32 [n].
    """
    positions = tf.range(tf.shape(batch)[0], dtype=tf.int32)
    first = tf.math.unsorted_segment_min(positions, batch, num_batch)
    return positions - tf.gather(first, batch)


def _check_preset_options(preset, options):
    """Refuses the options that need a SentencePiece vocabulary of this
    library with a preset's tokenizer."""
    if options.get("rank") == "learned":
        raise ValueError(
            "rank='learned' reads a ranker run's SentencePiece vocabulary; a "
            f"structurer on a {preset.kind} preset's tokenizer cannot use it. "
            "Use rank='tfidf' or 'order'."
        )
    if options.get("oov_words"):
        raise ValueError(
            "`oov_words` finds words by SentencePiece's '\u2581' word starts "
            "and `<unk>` pieces; a structurer on a "
            f"{preset.kind} preset's tokenizer does not support it. Leave "
            "`oov_words` out."
        )


def _check_graph(kind, options):
    """Validates `graph_kind` / `graph_options`; returns (kind, options with
    defaults) or (None, None)."""
    if kind is None:
        if options:
            raise ValueError(
                "`graph_options` are used only with `graph_kind` ('similarity' "
                f"or 'discourse'); received graph_options={options!r} without it."
            )
        return None, None
    if kind not in GRAPH_OPTIONS:
        raise ValueError(
            "`graph_kind` must be 'similarity' or 'discourse' (or absent), "
            f"received {kind!r}."
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(GRAPH_OPTIONS[kind]))
    if unknown:
        raise ValueError(
            f"Unknown graph_options {unknown} for graph_kind={kind!r}; it "
            f"accepts {sorted(GRAPH_OPTIONS[kind])} (a corpus-level tf-idf "
            "`model` is not built in the graph: idf is over the rows)."
        )
    from keras_hsum.data import graphs

    options = dict(GRAPH_OPTIONS[kind], **options)
    if kind == "similarity":
        graphs.check_threshold(options["threshold"])
    else:
        for name in ("adjacency_weight", "marker_weight", "entity_weight"):
            if not isinstance(options[name], (int, float)) or isinstance(
                options[name], bool
            ):
                raise ValueError(
                    f"`{name}` must be a number, received {options[name]!r}."
                )
        if not isinstance(options["directed"], bool):
            raise ValueError(
                f"`directed` must be True or False, received {options['directed']!r}."
            )
        for name, default in (
            ("markers", graphs.DISCOURSE_MARKERS),
            ("stop_words", graphs.STOP_WORDS),
        ):
            value = default if options[name] is None else options[name]
            if isinstance(value, str) or not all(isinstance(w, str) for w in value):
                raise ValueError(
                    f"`{name}` must be a collection of str, received {value!r}."
                )
            options[name] = tuple(sorted(set(value)))
    return kind, options


class TextStructurer(tf.Module):
    """Raw documents -> padded model features, inside the graph.

    The graph version of `keras_hsum.data.reader.example_from_text`
    followed by the family's builder in `keras_hsum.data.structure` and
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
            `GRAPH_OPTIONS`) adds HT's paragraph graph over the kept rows,
            built in the graph as `keras_hsum.data.graphs.graph_for` builds
            it from the rows in Python (see `_similarity_graph`,
            `_discourse_graph`).
            `oov_words=K` (every family but `"flat"`; K >= 1) adds See et
            al.'s extended vocabulary (below).

    Extended vocabulary (See et al. 2017, §2.2, for a pointer-generator's
    copy). A *word* is what SentencePiece marks as one: a piece starting
    with "▁" (or a sentence's first piece) and the pieces after it up to
    the next such piece, i.e. a whitespace-delimited word of the text; its
    text is the input's own characters (the pieces' offsets, before
    normalisation). A word is *out of vocabulary* when one of its pieces is
    `<unk>` (id `unk_id`): characters the vocabulary has no piece for
    (this vocabulary has no byte fallback), so no sequence of ids spells
    it and the decoder could only write " ⁇ ". Words that merely take
    several pieces are not OOV: the decoder spells them, and the copy
    distribution copies them piece by piece through `tokens`. An OOV
    word's *core* is the word without its leading and trailing pieces that
    are punctuation alone (no alphanumeric character; `<unk>` never is):
    the core's text is the OOV word, and its pieces take the extended id,
    so that "café," in the source and "café" in a summary are one word.
    The K distinct OOV words of the kept tokens, in order of first
    occurrence (row-major over [P,T]), get the ids V + 0 .. V + K-1; later
    ones keep their ordinary ids. A word cut by a forced split keeps one id
    on both sides of the cut; a word cut at T is listed when a piece of its
    core was kept.

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
    >>> structurer = TextStructurer(vocabulary.proto, "paragraphs", 8, 48)
    >>> features = structurer(tf.constant([["First paragraph.\\n\\nSecond."]]),
    ...                       title=tf.constant(["A title"]))
    >>> features["tokens"].shape
    TensorShape([1, 8, 48])
    """

    def __init__(
        self, vocabulary_proto, family, max_units, max_tokens, *,
        statistics=False, **family_options
    ):
        super().__init__(name="text_structurer")
        self.statistics = bool(statistics)
        if family not in FAMILIES:
            raise ValueError(
                f"Unknown family {family!r}; expected one of {', '.join(FAMILIES)}."
            )
        preset = None
        if hasattr(vocabulary_proto, "graph_tokenizer"):
            preset, vocabulary_proto = vocabulary_proto, None
        elif not isinstance(vocabulary_proto, (bytes, bytearray)) and isinstance(
            getattr(vocabulary_proto, "proto", None), bytes
        ):
            vocabulary_proto = vocabulary_proto.proto
        if preset is None and not isinstance(vocabulary_proto, (bytes, bytearray)):
            raise TypeError(
                "`vocabulary_proto` must be the serialized SentencePiece model "
                f"(bytes), received {type(vocabulary_proto).__name__}; pass "
                "`Vocabulary.proto`, or a PresetVocabulary for a preset's tokenizer."
            )
        limits = [("max_tokens", max_tokens)]
        if family != "flat":
            limits.append(("max_units", max_units))
        for name, value in limits:
            check_int(name, value, owner=f"family {family!r}")
        allowed = FAMILY_OPTIONS[family]
        accepted = set(allowed) | set(EXTRA_OPTIONS.get(family, ()))
        unknown = sorted(set(family_options) - accepted)
        if unknown:
            raise ValueError(
                f"Unknown family options {unknown} for family {family!r}; "
                f"it accepts {sorted(accepted) or 'none'}."
            )
        options = dict(allowed, **family_options)
        ranks = ("tfidf", "order", "learned") if family == "paragraphs" else ("tfidf", "order")
        if "rank" in options and options["rank"] not in ranks:
            raise ValueError(
                f"`rank` of family {family!r} must be one of {ranks}, received "
                f"{options['rank']!r}."
                + (" The learned ranker ranks the 'paragraphs' family only."
                   if options["rank"] == "learned" else "")
            )
        if family == "paragraphs" and (options["rank"] == "learned") != (
            options.get("ranker_run") is not None
        ):
            raise ValueError(
                "rank='learned' needs `ranker_run` (a `keras-hsum train --recipe "
                "ranker` folder), and `ranker_run` is used only with rank='learned'; "
                f"received rank={options['rank']!r}, ranker_run={options.get('ranker_run')!r}."
            )
        if "pack" in options and options["pack"] not in ("paragraph", "section"):
            raise ValueError(
                "`pack` must be 'paragraph' or 'section', received "
                f"{options['pack']!r}."
            )
        if "context_length" in options:
            check_int("context_length", options["context_length"])
        self.oov_words = 0
        if "oov_words" in options:
            self.oov_words = check_int(
                "oov_words", options["oov_words"], owner=f"family {family!r}",
                hint=" (the extended vocabulary's slots; leave it out for none)",
            )
        self._graph_kind, self._graph_options = _check_graph(
            options.get("graph_kind"), options.get("graph_options")
        )
        from keras_hsum.data.vocabulary import Vocabulary

        if preset is not None:
            _check_preset_options(preset, options)
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
        if self.oov_words:
            # Per piece, bool [V]: it begins a word ("▁" first); it is
            # punctuation alone (characters, "▁" aside, none alphanumeric).
            pieces = [vocabulary.id_to_piece(i) for i in range(self.vocabulary_size)]
            self._begins_word = tf.constant(
                [piece.startswith("\u2581") for piece in pieces], tf.bool
            )
            self._punctuation_piece = tf.constant(
                [
                    i != self.unk_id
                    and bool(piece.lstrip("\u2581"))
                    and not any(c.isalnum() for c in piece)
                    for i, piece in enumerate(pieces)
                ],
                tf.bool,
            )
        self._skipped_ids = sorted(
            {vocabulary.pad_id, vocabulary.bos_id}
            | {
                i
                for i in (
                    vocabulary.title_id,
                    vocabulary.paragraph_id,
                    vocabulary.sentence_id,
                    vocabulary.document_id,
                )
                if i is not None
            }
            - {-1}
        )
        # A preset tokenizer's special tokens (BART's <s>, <mask>) are text
        # of none; one start token equal to EOS (BART) is not the end.
        self._skipped_ids = sorted(
            set(self._skipped_ids) | set(getattr(vocabulary, "control_ids", ()))
        )
        self._space_before_sentences = bool(
            getattr(vocabulary, "space_before_sentences", False)
        )
        if preset is not None:
            # A keras-hub layer: its lookup tables are tracked by this
            # module and saved with it.
            self._tokenizer = preset.graph_tokenizer()
        else:
            self._tokenizer = tf_text.SentencepieceTokenizer(
                model=bytes(vocabulary_proto), out_type=tf.int32
            )
        classes = _character_classes()
        space = classes["space"]
        self._strip_pattern = f"^[{space}]+|[{space}]+$"
        self._space_pattern = f"[{space}]+"
        closers = _escape(_CLOSERS)
        openers = _escape(_OPENERS)
        self._ends_pattern = f"(?s).*[.!?][{closers}]*"
        self._head_pattern = f"(?s)^(.*?)([.!?])[.!?]*[{closers}]*$"
        self._openers_pattern = f"^[{openers}]+"
        self._starts_pattern = f"(?s)[{openers}]?[{classes['sentence_start']}].*"
        self._starts_digit_pattern = f"(?s)[{openers}]?[{classes['digit']}].*"
        self._upper_char_pattern = f"[{classes['upper']}]"
        not_lower = f"[^{classes['lower_or_title']}]*"
        self._upper_word_pattern = (
            f"(?s){not_lower}[{classes['upper']}]{not_lower}"
        )
        self._listed_pattern, self._numeral_pattern = _abbreviation_pattern()
        self._nonword_pattern = f"[^{classes['alnum']}]+"
        self._capitalised_pattern = f"(?s)[{classes['upper']}].*"
        self._ranker = None
        if options.get("rank") == "learned":
            from keras_hsum.data.learned_ranking import load_ranker_run

            (self._ranker, self._ranker_candidates,
             self._ranker_context_length) = load_ranker_run(
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
        title = self._context_argument(title, batch, "title")
        query = self._context_argument(query, batch, "query")
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
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        is_eos = tf.equal(ids, self.eos_id)
        if self.bos_id == self.eos_id:
            # BART starts from </s>: a first </s> may be the start token.
            is_eos &= tf.range(tf.shape(ids)[1])[None, :] > 0
        before_eos = tf.equal(tf.cumsum(tf.cast(is_eos, tf.int32), axis=1), 0)
        skipped = tf.reduce_any(
            tf.equal(ids[..., None], tf.constant(self._skipped_ids, tf.int32)),
            axis=-1,
        )
        kept = tf.ragged.boolean_mask(ids, before_eos & ~skipped)
        if oov_words is None:
            return self._tokenizer.detokenize(kept)
        if not self.oov_words:
            raise ValueError(
                "detokenize(..., oov_words=...) writes the extended ids of a "
                "structurer built with `oov_words=K`; this one has none. Leave "
                "`oov_words` out, or build the structurer with oov_words."
            )
        return self._detokenize_extended(kept, tf.convert_to_tensor(oov_words, tf.string))

    def tokenize(self, texts):
        """tf.string [B] -> int32 ragged [B, None] (`Vocabulary.encode`'s ids)."""
        return self._tokenizer.tokenize(self._clean(tf.convert_to_tensor(texts)))

    def tokenize_extended(self, texts, oov_words):
        """Texts -> ids over the extended vocabulary (a copy model's targets).

        As `tokenize`, except that a word of `texts` that is out of
        vocabulary (see the class docstring) and equal to word j of its
        row's `oov_words` becomes the one id V + j instead of its pieces, as
        See et al. write a target word that is an OOV of the source.

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
        texts = self._clean(tf.convert_to_tensor(texts, tf.string))
        oov_words = tf.convert_to_tensor(oov_words, tf.string)
        ids, starts, ends = self._tokenizer.tokenize_with_offsets(texts)
        words = self._words(ids, starts, ends, texts)
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

    # ------------------------------------------------------------- helpers

    @staticmethod
    def _context_argument(value, batch, name):
        if value is None:
            return tf.fill([batch], "")
        value = tf.convert_to_tensor(value, dtype=tf.string)
        if value.shape.rank != 1:
            raise ValueError(
                f"`{name}` must be tf.string [B] (\"\" for none), received "
                f"shape {value.shape}."
            )
        return value

    def _words(self, ids, starts, ends, texts):
        """The SentencePiece words of tokenised texts and their OOV cores
        (see the class docstring), numbered over all rows.

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
        begins = tf.gather(self._begins_word, values) | first_in_row
        word = tf.cumsum(tf.cast(begins, tf.int32)) - 1
        num_words = tf.reduce_sum(tf.cast(begins, tf.int32))
        oov = tf.math.unsorted_segment_max(
            tf.cast(tf.equal(values, self.unk_id), tf.int32), word, num_words
        ) > 0
        row = tf.math.unsorted_segment_min(tf.cast(token_row, tf.int32), word, num_words)
        # The core: from the word's first to its last piece that is not
        # punctuation alone.
        inner = ~tf.gather(self._punctuation_piece, values)
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

    def _detokenize_extended(self, kept, oov_words):
        """`detokenize` of ragged ids [B, None] that may hold extended ids.

        Each row is cut into runs of ordinary ids, detokenised by
        SentencePiece, and single extended ids, written as their word; a
        run or word is preceded by a space when it begins a word ("▁"
        first; a copied word always does) and is not first in its row.
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
        ordinary = self._tokenizer.detokenize(
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
        unknown = self._tokenizer.detokenize(tf.constant([[self.unk_id]], tf.int32))[0]
        word = tf.where(tf.equal(word, ""), unknown, word)
        begins = run_extended | tf.gather(
            self._begins_word, tf.where(run_extended, 0, first_id)
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

    @staticmethod
    def _clean(texts):
        """Invalid UTF-8 -> U+FFFD (never raises)."""
        return tf.strings.unicode_transcode(
            texts,
            input_encoding="UTF-8",
            output_encoding="UTF-8",
            errors="replace",
            replacement_char=0xFFFD,
            replace_control_characters=False,
        )

    def _paragraphs(self, documents):
        """`example_from_text` on every document string.

        Returns:
            `(text, batch, document, document_key, section_key)`: per
            paragraph, the joined text tf.string, the batch index, the
            document number within its example (documents without text not
            counted), and a document and a section number unique over the
            batch (non-decreasing; a new document also starts a new
            section); all [num_paragraphs].
        """
        num_documents = tf.shape(documents)[1]
        flat = self._clean(tf.reshape(documents, [-1]))
        document_batch = tf.repeat(
            tf.range(tf.shape(documents)[0], dtype=tf.int32), num_documents
        )
        lines = tf.strings.split(flat, sep="\n")
        line_document = tf.cast(lines.value_rowids(), tf.int32)
        line_batch = tf.gather(document_batch, line_document)
        stripped = tf.strings.regex_replace(
            lines.flat_values, self._strip_pattern, ""
        )
        is_first = tf.equal(
            tf.range(tf.shape(stripped)[0], dtype=tf.int64),
            tf.gather(lines.row_starts(), lines.value_rowids()),
        )
        separator = tf.equal(stripped, DOCUMENT_BREAK)
        section_break = tf.equal(stripped, SECTION_BREAK)
        content = tf.not_equal(stripped, "") & ~separator & ~section_break
        previous = tf.concat([[False], content[:-1]], 0) & ~is_first
        starts = content & ~previous
        document_key = tf.cumsum(tf.cast(is_first | separator, tf.int32)) - 1
        section_key = (
            tf.cumsum(tf.cast(is_first | separator | section_break, tf.int32)) - 1
        )
        paragraph = tf.cumsum(tf.cast(starts, tf.int32)) - 1
        num_paragraphs = tf.reduce_sum(tf.cast(starts, tf.int32))
        # An escaped marker is text, with its first backslash removed.
        text_lines = tf.strings.regex_replace(
            tf.boolean_mask(stripped, content), _UNESCAPE_PATTERN, r"\1"
        )
        joined = tf.RaggedTensor.from_value_rowids(
            text_lines,
            tf.boolean_mask(paragraph, content),
            nrows=num_paragraphs,
        )
        text = tf.strings.reduce_join(joined, axis=1, separator=" ")
        batch = tf.boolean_mask(line_batch, starts)
        key = tf.boolean_mask(document_key, starts)
        ordinal = _group_rows(key)
        first = tf.math.unsorted_segment_min(
            ordinal, batch, tf.shape(documents)[0]
        )
        document = ordinal - tf.gather(first, batch)
        return text, batch, document, key, tf.boolean_mask(section_key, starts)

    def _split_sentences(self, paragraphs):
        """`split_sentences` on every paragraph.

        Returns:
            `(text, paragraph)`: tf.string [S] and the paragraph each
            sentence comes from, int32 [S], in reading order.
        """
        # The whitespace runs are kept as pieces of their own, so that a
        # sentence's text is the join of its pieces: one pass over the
        # paragraph (a substring of the paragraph per sentence would copy
        # the whole paragraph once per sentence, quadratic in its length).
        pieces = tf_text.regex_split(
            paragraphs, self._space_pattern, self._space_pattern
        )
        piece_values = pieces.flat_values
        is_chunk = ~tf.strings.regex_full_match(
            piece_values, self._space_pattern
        )
        values = tf.boolean_mask(piece_values, is_chunk)
        row = tf.boolean_mask(tf.cast(pieces.value_rowids(), tf.int32), is_chunk)
        count = tf.shape(values)[0]
        last = tf.concat([row[1:] != row[:-1], tf.ones([tf.minimum(count, 1)], tf.bool)], 0)
        # Only a chunk that ends with . ! or ? and is not its paragraph's
        # last can end a sentence (a tenth of the chunks or fewer in real
        # text): the next chunk's start and the abbreviation rules are
        # matched for those alone.
        ends = tf.where(
            ~last & tf.strings.regex_full_match(values, self._ends_pattern)
        )[:, 0]
        following = tf.gather(values, ends + 1)
        where = tf.boolean_mask(
            ends, tf.strings.regex_full_match(following, self._starts_pattern)
        )
        chunks = tf.gather(values, where)
        next_digit = tf.strings.regex_full_match(
            tf.gather(values, where + 1), self._starts_digit_pattern
        )
        head = tf.strings.regex_replace(chunks, self._head_pattern, r"\1")
        mark = tf.strings.regex_replace(chunks, self._head_pattern, r"\2")
        word = tf.strings.regex_replace(head, self._openers_pattern, "")
        single = tf.equal(tf.strings.length(word, unit="UTF8_CHAR"), 1)
        single_upper = tf.strings.regex_full_match(word, self._upper_char_pattern)
        acronym = tf.strings.regex_full_match(
            word, self._upper_word_pattern
        ) & ~tf.strings.regex_full_match(word, r"(?s).*\..*")
        numeral = tf.strings.regex_full_match(word, self._numeral_pattern)
        listed = tf.strings.regex_full_match(word, self._listed_pattern)
        abbreviation = tf.where(
            single,
            single_upper,
            ~acronym & tf.where(numeral, next_digit, listed),
        )
        boundary = tf.scatter_nd(
            where[:, None],
            tf.not_equal(mark, ".") | ~abbreviation,
            tf.shape(last, out_type=tf.int64),
        )
        first = tf.concat(
            [tf.ones([tf.minimum(count, 1)], tf.bool), boundary[:-1] | last[:-1]], 0
        )
        sentence = tf.cumsum(tf.cast(first, tf.int32)) - 1
        num_sentences = tf.maximum(tf.reduce_max(sentence) + 1, 0)
        paragraph = tf.math.segment_min(row, sentence)
        # A whitespace piece belongs to a sentence when the chunks on both
        # sides of it do; leading, trailing and between-sentence runs do not.
        before = tf.cumsum(tf.cast(is_chunk, tf.int32)) - 1  # last chunk so far
        padded_sentence = tf.concat([[-1], sentence, [-1]], 0)
        previous_sentence = tf.gather(padded_sentence, before + 1)
        next_sentence = tf.gather(
            padded_sentence, before + 1 + tf.cast(~is_chunk, tf.int32)
        )
        inside = is_chunk | (
            tf.equal(previous_sentence, next_sentence) & (previous_sentence >= 0)
        )
        text = tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(piece_values, inside),
                tf.boolean_mask(previous_sentence, inside),
                nrows=num_sentences,
            ),
            axis=1,
        )
        return text, paragraph

    def _pack(self, lengths, groups):
        """`structure._pack` over all sentences: greedy rows of <= T tokens.

        Args:
            lengths: int32 [S] (> 0) tokens per sentence.
            groups: int32 [S] non-decreasing group of each sentence; rows
                never cross groups.

        Returns:
            `(row, column, forced)`: the row of each sentence's first
            token, its column, and whether it was split at token
            boundaries (longer than T); a token j of sentence s lies at
            position column + j of row row, counted over rows of T.
        """
        limit = tf.constant(self.max_tokens, tf.int32)
        # Rows never cross groups, so every group packs on its own: the
        # scan runs over the j-th sentence of all groups at once (as many
        # steps as the longest group has sentences, not one per sentence),
        # and each group's rows follow those of the groups before it.
        count = tf.shape(lengths)[0]
        group = _group_rows(groups)
        num_groups = tf.maximum(tf.reduce_max(group) + 1, 0)
        first = tf.math.unsorted_segment_min(tf.range(count), group, num_groups)
        within = tf.range(count) - tf.gather(first, group)
        # At least one step (of zeros: no sentence), so that the scan of a
        # batch without text still has a shape.
        depth = tf.reduce_max(tf.concat([within + 1, [1]], 0))
        index = tf.stack([within, group], 1)
        grid = tf.scatter_nd(index, lengths, tf.stack([depth, num_groups]))

        def step(state, length):  # length: int32 [G], 0 where a group ended
            used, current, _, _ = state
            present = length > 0
            forced = length > limit
            join = present & ~forced & (current > 0) & (current + length <= limit)
            row = tf.where(join, used - 1, used)
            column = tf.where(join, current, 0)
            grown = tf.where(forced, used + (length + limit - 1) // limit, used + 1)
            used = tf.where(present & ~join, grown, used)
            current = tf.where(
                present,
                tf.where(join, current + length, tf.where(forced, 0, length)),
                current,
            )
            return used, current, row, column

        zeros = tf.zeros([num_groups], tf.int32)
        used, _, rows, columns = tf.scan(
            step, grid, initializer=(zeros, zeros, zeros, zeros)
        )
        offset = tf.cumsum(used[-1], exclusive=True)
        row = tf.gather(offset, group) + tf.gather_nd(rows, index)
        column = tf.gather_nd(columns, index)
        return row, column, lengths > limit

    def _tfidf(self, texts, batch, context, num_batch):
        """`ranking.tfidf_cosine` for every example at once: float32 [R]."""
        num_rows = tf.shape(texts)[0]
        words = tf_text.regex_split(
            tf.strings.lower(texts, encoding="utf-8"), self._nonword_pattern, ""
        )
        query = tf_text.regex_split(
            tf.strings.lower(context, encoding="utf-8"), self._nonword_pattern, ""
        )
        word_row = tf.cast(words.value_rowids(), tf.int32)
        query_batch = tf.cast(query.value_rowids(), tf.int32)
        keys = tf.concat(
            [
                tf.strings.as_string(tf.gather(batch, word_row))
                + " "
                + words.flat_values,
                tf.strings.as_string(query_batch) + " " + query.flat_values,
            ],
            0,
        )
        terms, term = tf.unique(keys, out_idx=tf.int32)
        num_terms = tf.shape(terms)[0]
        num_words = tf.shape(words.flat_values)[0]
        row_term, query_term = term[:num_words], term[num_words:]
        pairs, _, counts = tf.unique_with_counts(
            tf.cast(word_row, tf.int64) * tf.cast(num_terms, tf.int64)
            + tf.cast(row_term, tf.int64)
        )
        pair_row = tf.cast(pairs // tf.cast(num_terms, tf.int64), tf.int32)
        pair_term = tf.cast(pairs % tf.cast(num_terms, tf.int64), tf.int32)
        document_frequency = tf.math.unsorted_segment_sum(
            tf.ones_like(pair_term, tf.float64), pair_term, num_terms
        )
        rows_per_example = tf.cast(
            tf.math.bincount(batch, minlength=num_batch, maxlength=num_batch),
            tf.float64,
        )

        def idf(example, term_ids):
            n = tf.gather(rows_per_example, example)
            df = tf.gather(document_frequency, term_ids)
            return tf.math.log((1.0 + n) / (1.0 + df)) + 1.0

        weights = tf.cast(counts, tf.float64) * idf(
            tf.gather(batch, pair_row), pair_term
        )
        norms = tf.sqrt(
            tf.math.unsorted_segment_sum(weights * weights, pair_row, num_rows)
        )
        query_counts = tf.math.unsorted_segment_sum(
            tf.ones_like(query_term, tf.float64), query_term, num_terms
        )
        in_query = query_counts > 0
        term_batch = tf.where(
            in_query,
            tf.math.unsorted_segment_max(query_batch, query_term, num_terms),
            0,
        )
        query_weights = tf.where(
            in_query,
            query_counts * idf(term_batch, tf.range(num_terms)),
            tf.zeros_like(query_counts),
        )
        query_norms = tf.sqrt(
            tf.math.unsorted_segment_sum(
                query_weights * query_weights, term_batch, num_batch
            )
        )
        dots = tf.math.unsorted_segment_sum(
            weights * tf.gather(query_weights, pair_term), pair_row, num_rows
        )
        denominator = norms * tf.gather(query_norms, batch)
        scores = tf.where(
            denominator > 0,
            dots / tf.where(denominator > 0, denominator, 1.0),
            0.0,
        )
        return tf.cast(scores, tf.float32)

    def _rank(self, scores, batch, num_batch):
        """Rank of each row in its example (stable, best first): int32 [R]."""
        local = _local_index(batch, num_batch)
        padded = tf.RaggedTensor.from_value_rowids(
            -scores, batch, nrows=num_batch
        ).to_tensor(default_value=2.0)
        order = tf.argsort(padded, axis=1, stable=True)
        ranks = tf.argsort(order, axis=1, stable=True)
        return tf.gather_nd(ranks, tf.stack([batch, local], 1))

    # ------------------------------------------------------------ structure

    def _structure_batch(self, documents, title, query):
        num_batch = tf.shape(documents)[0]
        title = self._clean(title)
        query = self._clean(query)
        context = tf.where(tf.not_equal(query, ""), query, title)
        (paragraph_text, paragraph_batch, paragraph_document, paragraph_key,
         paragraph_section) = self._paragraphs(documents)
        sentence_text, sentence_paragraph = self._split_sentences(paragraph_text)
        if self.oov_words:
            ids, starts, ends = self._tokenizer.tokenize_with_offsets(sentence_text)
        else:
            ids = self._tokenizer.tokenize(
                self._sentence_inputs(sentence_text, sentence_paragraph)
            )
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        nonempty = lengths > 0
        if self.oov_words:
            # The words of the sentences with tokens (a sentence without
            # any has no word either).
            words = self._words(ids, starts, ends, sentence_text)
        ids = tf.ragged.boolean_mask(ids, nonempty)
        lengths = tf.boolean_mask(lengths, nonempty)
        sentence_text = tf.boolean_mask(sentence_text, nonempty)
        sentence_paragraph = tf.boolean_mask(sentence_paragraph, nonempty)
        sentences = dict(
            ids=ids,
            lengths=lengths,
            text=sentence_text,
            paragraph=sentence_paragraph,
            batch=tf.gather(paragraph_batch, sentence_paragraph),
            document=tf.gather(paragraph_document, sentence_paragraph),
            document_key=tf.gather(paragraph_key, sentence_paragraph),
            section_key=tf.gather(paragraph_section, sentence_paragraph),
        )
        if self.oov_words:
            sentences["words"] = words
        if self.family == "flat":
            features = self._flat(sentences, context, num_batch)
        else:
            rows = getattr(self, "_rows_" + self.family)(sentences)
            features = self._dense(rows, sentences, context, num_batch)
        if self.statistics:
            features.update(self._input_statistics(sentences, num_batch))
        return features

    def _sentence_inputs(self, text, paragraph):
        """What the tokenizer reads of each sentence: its text, after one
        space when it continues its paragraph and the tokenizer marks word
        starts by the space before them (byte-level BPE)."""
        if not self._space_before_sentences:
            return text
        continues = tf.concat(
            [tf.zeros([tf.minimum(tf.shape(paragraph)[0], 1)], tf.bool),
             tf.equal(paragraph[1:], paragraph[:-1])],
            0,
        )
        return tf.where(continues, " " + text, text)

    def _input_statistics(self, sentences, num_batch):
        """`TruncationReport`'s input counts per example: int32 [B] each."""
        packed = self.family in ("paragraphs", "snippets")
        forced = tf.cast(sentences["lengths"] > self.max_tokens, tf.int32)
        return {
            "input_tokens": tf.math.unsorted_segment_sum(
                sentences["lengths"], sentences["batch"], num_batch
            ),
            "forced_splits": tf.math.unsorted_segment_sum(
                forced if packed else tf.zeros_like(forced),
                sentences["batch"],
                num_batch,
            ),
        }

    def _rows_sentences(self, sentences):
        count = tf.shape(sentences["lengths"])[0]
        return dict(
            token_row=tf.cast(sentences["ids"].value_rowids(), tf.int32),
            token_column=tf.cast(
                tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
            ),
            num_rows=count,
            batch=sentences["batch"],
            document=sentences["document"],
            text=sentences["text"],
        )

    def _rows_sections(self, sentences):
        row = _group_rows(sentences["section_key"])
        num_rows = tf.maximum(tf.reduce_max(row) + 1, 0)
        first = tf.math.unsorted_segment_min(
            tf.range(tf.shape(row)[0]), row, num_rows
        )
        before = tf.cumsum(sentences["lengths"], exclusive=True)
        offset = before - tf.gather(before, tf.gather(first, row))
        token_sentence = tf.cast(sentences["ids"].value_rowids(), tf.int32)
        column = tf.gather(offset, token_sentence) + tf.cast(
            tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
        )
        return dict(
            token_row=tf.gather(row, token_sentence),
            token_column=column,
            num_rows=num_rows,
            batch=tf.gather(sentences["batch"], first),
            document=tf.gather(sentences["document"], first),
            text=tf.strings.reduce_join(
                tf.RaggedTensor.from_value_rowids(
                    sentences["text"], row, nrows=num_rows
                ),
                axis=1,
                separator=" ",
            ),
        )

    def _rows_packed(self, sentences, groups):
        limit = self.max_tokens
        row, column, forced = self._pack(sentences["lengths"], groups)
        count = tf.shape(row)[0]
        num_rows = tf.cond(
            count > 0,
            lambda: row[-1]
            + (column[-1] + sentences["lengths"][-1] + limit - 1) // limit,
            lambda: 0,
        )
        token_sentence = tf.cast(sentences["ids"].value_rowids(), tf.int32)
        position = tf.gather(column, token_sentence) + tf.cast(
            tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
        )
        token_row = tf.gather(row, token_sentence) + position // limit
        token_forced = tf.gather(forced, token_sentence)
        row_forced = (
            tf.math.unsorted_segment_max(
                tf.cast(token_forced, tf.int32), token_row, num_rows
            )
            > 0
        )
        row_sentence = tf.math.unsorted_segment_min(
            token_sentence, token_row, num_rows
        )
        joined = tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(sentences["text"], ~forced),
                tf.boolean_mask(row, ~forced),
                nrows=num_rows,
            ),
            axis=1,
            separator=" ",
        )
        # A row cut out of an over-long sentence reads as its pieces:
        # detokenise those rows only.
        forced_rows = tf.where(row_forced)[:, 0]
        in_forced = tf.gather(row_forced, token_row)
        compact = tf.cumsum(tf.cast(row_forced, tf.int32)) - 1
        pieces = self._tokenizer.detokenize(
            tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(sentences["ids"].flat_values, in_forced),
                tf.gather(compact, tf.boolean_mask(token_row, in_forced)),
                nrows=tf.shape(forced_rows, out_type=tf.int32)[0],
            )
        )
        return dict(
            token_row=token_row,
            token_column=position % limit,
            num_rows=num_rows,
            batch=tf.gather(sentences["batch"], row_sentence),
            document=tf.gather(sentences["document"], row_sentence),
            text=tf.tensor_scatter_nd_update(joined, forced_rows[:, None], pieces),
        )

    def _rows_snippets(self, sentences):
        # A snippet may cross sections, never documents (`build_snippets`).
        return self._rows_packed(sentences, sentences["document_key"])

    def _rows_paragraphs(self, sentences):
        if self.family_options["pack"] == "paragraph":
            groups = sentences["paragraph"]
        else:
            groups = sentences["section_key"]
        return self._rows_packed(sentences, groups)

    def _dense(self, rows, sentences, context, num_batch):
        """Keeps the first (or best) P rows of each example; pads."""
        P, T = self.max_units, self.max_tokens
        batch = rows["batch"]
        local = _local_index(batch, num_batch)
        rank = self.family_options["rank"] if self.family == "paragraphs" else None
        if rank == "tfidf":
            scores = self._tfidf(rows["text"], batch, context, num_batch)
            slot = self._rank(scores, batch, num_batch)
        elif rank == "learned":
            scores, slot = self._learned_rank(
                rows, sentences, context, batch, local, num_batch
            )
        else:
            scores = tf.zeros(tf.shape(batch), tf.float32)
            slot = local
        kept = slot < P
        row_index = tf.stack([batch, slot], 1)
        kept_rows = tf.boolean_mask(row_index, kept)

        def rows_tensor(values, default):
            return tf.tensor_scatter_nd_update(
                tf.fill(tf.stack([num_batch, P]), default),
                kept_rows,
                tf.boolean_mask(values, kept),
            )

        token_row = rows["token_row"]
        tokens, token_mask = self._row_tokens(
            rows, sentences, batch, slot, kept, num_batch, P
        )
        if self.statistics:
            cut = tf.math.unsorted_segment_max(
                tf.cast(rows["token_column"] >= T, tf.int32), token_row,
                tf.shape(batch)[0],
            )
            statistics = {
                "output_tokens": tf.reduce_sum(tf.cast(token_mask, tf.int32), [1, 2]),
                "dropped_units": tf.math.unsorted_segment_sum(
                    tf.cast(~kept, tf.int32), batch, num_batch
                ),
                "truncated_units": tf.math.unsorted_segment_sum(
                    tf.where(kept, cut, 0), batch, num_batch
                ),
            }
        features = {
            TOKENS: tf.ensure_shape(tokens, [None, P, T]),
            TOKEN_MASK: tf.ensure_shape(token_mask, [None, P, T]),
            PARAGRAPH_MASK: tf.ensure_shape(
                rows_tensor(tf.ones(tf.shape(batch), tf.bool), False), [None, P]
            ),
            DOCUMENT_IDS: tf.ensure_shape(
                rows_tensor(rows["document"], 0), [None, P]
            ),
            "unit_texts": tf.ensure_shape(
                rows_tensor(rows["text"], ""), [None, P]
            ),
        }
        if self.family == "paragraphs":
            length = self.family_options["context_length"]
            context_ids = self._tokenizer.tokenize(context)[:, :length]
            features[PARAGRAPH_INDEX] = tf.ensure_shape(
                rows_tensor(local, 0), [None, P]
            )
            features[RANK_SCORE] = tf.ensure_shape(
                rows_tensor(scores, 0.0), [None, P]
            )
            features[CONTEXT_TOKENS] = tf.ensure_shape(
                context_ids.to_tensor(
                    default_value=self.pad_id, shape=tf.stack([num_batch, length])
                ),
                [None, length],
            )
            if self._graph_kind is not None:
                features[GRAPH] = tf.ensure_shape(
                    self._graph(features), [None, P, P]
                )
        if self.oov_words:
            words = sentences["words"]
            features.update(
                self._extended_vocabulary(
                    tokens,
                    self._row_values(
                        rows, tf.where(words["copied"], words["word"], -1), -1,
                        batch, slot, kept, num_batch, P,
                    ),
                    words,
                    num_batch,
                )
            )
        if self.statistics:
            features.update(statistics)
        return features

    def _extended_vocabulary(self, tokens, token_words, words, num_batch):
        """`source_extended_ids` [B,P,T] and `source_oov_words` [B,K] (see
        the class docstring).

        Args:
            tokens: int32 [B,P,T].
            token_words: int32 [B,P,T], for each kept token in the core of
                an OOV word, that word in `words` (`_words`); else -1.
            words: `_words`' dict for the example's sentences.
        """
        K = self.oov_words
        position = tf.where(token_words >= 0)  # [k,3], row-major
        text = tf.gather(words["text"], tf.gather_nd(token_words, position))
        batch = tf.cast(position[:, 0], tf.int32)
        slot, _ = self._per_example_terms(text, batch, num_batch)
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

    # --------------------------------------------------------------- graphs

    def _graph(self, features):
        """HT's paragraph graph over the kept rows: float32 [B,P,P]."""
        texts = features["unit_texts"]
        valid = features[PARAGRAPH_MASK]
        if self._graph_kind == "similarity":
            return self._similarity_graph(texts, valid)
        return self._discourse_graph(
            texts, valid, features[DOCUMENT_IDS], features[PARAGRAPH_INDEX]
        )

    def _per_example_terms(self, keys, batch, num_batch):
        """Ids of distinct strings within each example, from 0.

        Args:
            keys: tf.string [n], in non-decreasing `batch` order.
            batch: int32 [n].

        Returns:
            `(local, size)`: int32 [n], the string's id among the distinct
            strings of its example, and V, one more than the largest id.
        """
        _, term = tf.unique(
            tf.strings.as_string(batch) + " " + keys, out_idx=tf.int32
        )
        # tf.unique numbers strings by first appearance, so each example's
        # distinct strings have consecutive ids.
        first = tf.math.unsorted_segment_min(term, batch, num_batch)
        local = term - tf.gather(first, batch)
        return local, tf.reduce_max(tf.concat([local + 1, [1]], 0))

    def _similarity_graph(self, texts, valid):
        """`graphs.similarity_graph` of each example's kept rows.

        tf-idf vectors over the example's P' real rows (terms: lower-cased
        `[^\\W_]+` words; idf ln((1 + P') / (1 + df)) + 1; float64), L2
        normalised; G = X X^T, entries below `threshold` set to 0, the
        diagonal 1 for a row with words and 0 without.

        Args:
            texts: tf.string [B,P] ("" pads).
            valid: bool [B,P].

        Returns:
            float32 [B,P,P].
        """
        P = self.max_units
        num_batch = tf.shape(texts)[0]
        words = tf_text.regex_split(
            tf.strings.lower(tf.reshape(texts, [-1]), encoding="utf-8"),
            self._nonword_pattern,
            "",
        )
        word_row = tf.cast(words.value_rowids(), tf.int32)
        word_batch = word_row // P
        local, size = self._per_example_terms(
            words.flat_values, word_batch, num_batch
        )
        counts = tf.scatter_nd(
            tf.stack([word_batch, word_row % P, local], 1),
            tf.ones_like(local, tf.float64),
            tf.stack([num_batch, P, size]),
        )
        rows = tf.reduce_sum(tf.cast(valid, tf.float64), axis=1)[:, None, None]
        document_frequency = tf.reduce_sum(
            tf.cast(counts > 0, tf.float64), axis=1, keepdims=True
        )
        weights = counts * (
            tf.math.log((1.0 + rows) / (1.0 + document_frequency)) + 1.0
        )
        norms = tf.sqrt(tf.reduce_sum(weights * weights, axis=2, keepdims=True))
        vectors = weights / tf.where(norms > 0, norms, 1.0)
        cosine = tf.cast(tf.matmul(vectors, vectors, transpose_b=True), tf.float32)
        has_words = norms[:, :, 0] > 0
        cosine = tf.linalg.set_diag(cosine, tf.cast(has_words, tf.float32))
        threshold = tf.constant(self._graph_options["threshold"], tf.float32)
        return tf.where(cosine < threshold, 0.0, cosine)

    def _discourse_graph(self, texts, valid, document, position):
        """`graphs.discourse_graph` of each example's kept rows.

        Rows i, j of one document at reading-order positions p and p + 1
        are adjacent (`adjacency_weight`, both ways); j opening with a
        marker (its first words, lower-cased, of its first 200 characters)
        adds `marker_weight` from i to j (both ways unless `directed`);
        each distinct entity two rows share adds `entity_weight` both ways.

        Args:
            texts: tf.string [B,P] ("" pads).
            valid: bool [B,P].
            document: int32 [B,P], the document of each row.
            position: int32 [B,P], its reading-order position.

        Returns:
            float32 [B,P,P], zero diagonal.
        """
        options = self._graph_options
        both = valid[:, :, None] & valid[:, None, :]
        # follows[b, i, j]: row j comes right after row i in one document.
        follows = (
            both
            & tf.equal(document[:, :, None], document[:, None, :])
            & tf.equal(position[:, None, :] - position[:, :, None], 1)
        )
        adjacent = follows | tf.transpose(follows, [0, 2, 1])
        marked = follows & self._opens_with_marker(texts)[:, None, :]
        if not options["directed"]:
            marked = marked | tf.transpose(marked, [0, 2, 1])
        graph = (
            tf.cast(adjacent, tf.float64) * options["adjacency_weight"]
            + tf.cast(marked, tf.float64) * options["marker_weight"]
            + self._shared_entities(texts) * options["entity_weight"]
        )
        return tf.cast(graph, tf.float32)

    def _opens_with_marker(self, texts):
        """`graphs.opens_with_marker` on every row: bool [B,P]."""
        markers = {}
        for marker in self._graph_options["markers"]:
            markers.setdefault(len(marker.split()), []).append(" ".join(marker.split()))
        flat = tf.reshape(texts, [-1])
        head = tf_text.regex_split(
            tf.strings.lower(
                tf.strings.substr(flat, 0, 200, unit="UTF8_CHAR"),
                encoding="utf-8",
            ),
            self._nonword_pattern,
            "",
        )
        found = tf.zeros(tf.shape(flat), tf.bool)
        for count, listed in sorted(markers.items()):
            if count == 0:
                continue
            # A row with fewer words joins fewer than `count` words, which
            # equals no marker of `count` words.
            start = tf.strings.reduce_join(head[:, :count], axis=1, separator=" ")
            found |= tf.reduce_any(
                tf.equal(start[:, None], tf.constant(listed)[None, :]), axis=1
            )
        return tf.reshape(found, tf.shape(texts))

    def _shared_entities(self, texts):
        """Distinct entities each pair of rows shares: float64 [B,P,P].

        `graphs.entities`: word tokens of at least 2 characters, capitalised,
        not the first of a sentence (`split_sentences` in the graph), whose
        lower-case form is no stop word. The diagonal is 0.
        """
        P = self.max_units
        num_batch = tf.shape(texts)[0]
        sentence_text, sentence_row = self._split_sentences(tf.reshape(texts, [-1]))
        tokens = tf_text.regex_split(sentence_text, self._nonword_pattern, "")[:, 1:]
        values = tokens.flat_values
        row = tf.gather(sentence_row, tf.cast(tokens.value_rowids(), tf.int32))
        stop_words = "(?:" + "|".join(
            _escape(word) for word in self._graph_options["stop_words"]
        ) + ")"
        entity = (
            (tf.strings.length(values, unit="UTF8_CHAR") >= 2)
            & tf.strings.regex_full_match(values, self._capitalised_pattern)
            & ~tf.strings.regex_full_match(
                tf.strings.lower(values, encoding="utf-8"), stop_words
            )
        )
        values = tf.boolean_mask(values, entity)
        row = tf.boolean_mask(row, entity)
        batch = row // P
        local, size = self._per_example_terms(values, batch, num_batch)
        present = tf.cast(
            tf.scatter_nd(
                tf.stack([batch, row % P, local], 1),
                tf.ones_like(local),
                tf.stack([num_batch, P, size]),
            )
            > 0,
            tf.float64,
        )
        shared = tf.matmul(present, present, transpose_b=True)
        return tf.linalg.set_diag(shared, tf.zeros(tf.shape(shared)[:2], tf.float64))

    def _row_tokens(self, rows, sentences, batch, slot, kept, num_batch, P):
        """Tokens [B,P,T] (pad id elsewhere) and token_mask [B,P,T] of the
        rows: row r's first T token ids go to example `batch[r]`, row
        `slot[r]`, where `kept[r]`."""
        tokens = self._row_values(
            rows, sentences["ids"].flat_values, self.pad_id, batch, slot, kept,
            num_batch, P,
        )
        token_mask = self._row_values(
            rows, tf.ones_like(rows["token_row"], tf.bool), False, batch, slot,
            kept, num_batch, P,
        )
        return tokens, token_mask

    def _row_values(self, rows, values, default, batch, slot, kept, num_batch, P):
        """A value per token placed as `_row_tokens` places the token:
        [B,P,T] of `values`' dtype, `default` elsewhere.

        Args:
            values: [n], one per token of the sentences (flat, in order).
        """
        T = self.max_tokens
        token_row = rows["token_row"]
        token_kept = tf.gather(kept, token_row) & (rows["token_column"] < T)
        token_index = tf.boolean_mask(
            tf.stack(
                [
                    tf.gather(batch, token_row),
                    tf.gather(slot, token_row),
                    rows["token_column"],
                ],
                1,
            ),
            token_kept,
        )
        return tf.tensor_scatter_nd_update(
            tf.fill(tf.stack([num_batch, P, T]), tf.constant(default, values.dtype)),
            token_index,
            tf.boolean_mask(values, token_kept),
        )

    def _learned_rank(self, rows, sentences, context, batch, local, num_batch):
        """The learned ranker's score and slot of every row.

        The first P_c rows of each example in reading order (the ranker
        run's `max_paragraphs`) are the candidates: as tokens [B,P_c,T]
        with the context cut to the ranker run's `context_length`, they go
        through the `ParagraphRanker`; candidates are ranked by score
        (stable: ties in reading order), the other rows get slot P
        (dropped).

        Returns:
            `(scores float32 [R], slot int32 [R])`; 0 for non-candidates.
        """
        P, T = self._ranker_candidates, self.max_tokens
        candidate = local < P
        tokens, token_mask = self._row_tokens(
            rows, sentences, batch, local, candidate, num_batch, P
        )
        length = self._ranker_context_length
        context_tokens = self._tokenizer.tokenize(context)[:, :length].to_tensor(
            default_value=self.pad_id, shape=tf.stack([num_batch, length])
        )
        ranker_scores = self._ranker(
            {
                TOKENS: tf.ensure_shape(tokens, [None, P, T]),
                TOKEN_MASK: tf.ensure_shape(token_mask, [None, P, T]),
                PARAGRAPH_MASK: tf.reduce_any(token_mask, axis=-1),
                CONTEXT_TOKENS: tf.ensure_shape(context_tokens, [None, length]),
            },
            training=False,
        )
        row_scores = tf.gather_nd(
            tf.cast(ranker_scores, tf.float32),
            tf.stack([batch, tf.minimum(local, P - 1)], 1),
        )
        # Scores are in (0,1): non-candidates (-1) sort after every candidate.
        rank = self._rank(tf.where(candidate, row_scores, -1.0), batch, num_batch)
        return (
            tf.where(candidate, row_scores, 0.0),
            tf.where(candidate, rank, self.max_units),
        )

    def _flat(self, sentences, context, num_batch):
        """`build_flat`: ranked whole paragraphs, `<para>`-separated, cut at N."""
        N = self.max_tokens
        row = _group_rows(sentences["paragraph"])
        num_rows = tf.maximum(tf.reduce_max(row) + 1, 0)
        first = tf.math.unsorted_segment_min(
            tf.range(tf.shape(row)[0]), row, num_rows
        )
        batch = tf.gather(sentences["batch"], first)
        text = tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(sentences["text"], row, nrows=num_rows),
            axis=1,
            separator=" ",
        )
        length = tf.math.unsorted_segment_sum(sentences["lengths"], row, num_rows)
        if self.family_options["rank"] == "tfidf":
            rank = self._rank(
                self._tfidf(text, batch, context, num_batch), batch, num_batch
            )
        else:
            rank = _local_index(batch, num_batch)
        separator = self.paragraph_separator_id
        step = length + (1 if separator is not None else 0)
        by_rank = tf.stack([batch, rank], 1)
        width = tf.maximum(tf.reduce_max(rank) + 1, 0)
        grid = tf.stack([num_batch, width])
        starts = tf.gather_nd(
            tf.cumsum(tf.scatter_nd(by_rank, step, grid), axis=1, exclusive=True),
            by_rank,
        )
        token_sentence = tf.cast(sentences["ids"].value_rowids(), tf.int32)
        before = tf.cumsum(sentences["lengths"], exclusive=True)
        within = before - tf.gather(before, tf.gather(first, row))
        token_paragraph = tf.gather(row, token_sentence)
        position = (
            tf.gather(starts, token_paragraph)
            + tf.gather(within, token_sentence)
            + tf.cast(tf.ragged.range(sentences["lengths"]).flat_values, tf.int32)
        )
        index = tf.stack([tf.gather(batch, token_paragraph), position], 1)
        values = sentences["ids"].flat_values
        if separator is not None:
            has_separator = rank > 0
            index = tf.concat(
                [index, tf.boolean_mask(tf.stack([batch, starts - 1], 1), has_separator)],
                0,
            )
            values = tf.concat(
                [
                    values,
                    tf.fill(
                        [tf.reduce_sum(tf.cast(has_separator, tf.int32))],
                        tf.constant(separator, tf.int32),
                    ),
                ],
                0,
            )
        kept = index[:, 1] < N
        if self.statistics:
            content = tf.concat(
                [tf.ones(tf.shape(sentences["ids"].flat_values), tf.int32),
                 tf.zeros([tf.shape(values)[0] - tf.shape(sentences["ids"].flat_values)[0]],
                          tf.int32)],
                0,
            )
            statistics = {
                "output_tokens": tf.math.unsorted_segment_sum(
                    content * tf.cast(kept, tf.int32), index[:, 0], num_batch
                ),
                "dropped_units": tf.zeros([num_batch], tf.int32),
                "truncated_units": tf.math.unsorted_segment_max(
                    tf.cast(~kept, tf.int32), index[:, 0], num_batch
                ),
            }
            statistics["truncated_units"] = tf.maximum(statistics["truncated_units"], 0)
        index = tf.boolean_mask(index, kept)
        shape = tf.stack([num_batch, N])
        tokens = tf.tensor_scatter_nd_update(
            tf.fill(shape, tf.constant(self.pad_id, tf.int32)),
            index,
            tf.boolean_mask(values, kept),
        )
        token_mask = tf.scatter_nd(
            index, tf.ones([tf.shape(index)[0]], tf.bool), shape
        )
        texts = tf.tensor_scatter_nd_update(tf.fill(grid, ""), by_rank, text)
        features = {
            TOKENS: tf.ensure_shape(tokens, [None, N]),
            TOKEN_MASK: tf.ensure_shape(token_mask, [None, N]),
            "unit_texts": texts,
        }
        if self.statistics:
            features.update(statistics)
        return features
