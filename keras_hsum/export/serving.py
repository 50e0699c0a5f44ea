"""Text-in/text-out SavedModels for TF Serving (TensorFlow only).

TF Serving runs graphs, not Python, so everything between the request's
strings and the response's strings lives in the SavedModel: the in-graph
`TextStructurer` (split paragraphs and sentences, re-chunk, rank by tf-idf,
tokenise with SentencePiece, pad), the model's encoder, the beam search of
`keras_hsum.decoding` (one `while_loop`), and detokenisation.

Two serving modules:

- `SummarizerModule` (every abstractive recipe): signatures
  `serving_default(documents)` and `summarize_with_context(documents,
  title, query)` (TF Serving signatures have fixed inputs, so the optional
  title/query get a signature of their own; "" means "none" for a row).
- `ExtractorModule` (SHTE): `serving_default(document)` and
  `extract(document)`.

`export_saved_model(module, base_path)` writes the next numbered version
folder `<base_path>/<version>/` and rewrites `models.config` (TF Serving's
`model_config_list`) in the folder above `base_path`, listing every model
exported there. A SavedModel loads and runs in a process that has only
TensorFlow and the TF Text kernels (what `tensorflow/serving` has): no
Keras, no keras_hsum.

Example (a small random PHT; a trained one exports the same way):
>>> import tensorflow as tf
>>> from keras_hsum.data import Vocabulary, corpora
>>> from keras_hsum.models import ParallelHierarchicalTransformer
>>> vocabulary = Vocabulary.load(corpora.sample_tokenizer_path())
>>> structurer = TextStructurer(vocabulary.proto, "paragraphs", 4, 8)  # P, T
>>> model = ParallelHierarchicalTransformer(
...     vocabulary_size=vocabulary.vocabulary_size, hidden_dim=8, num_heads=2,
...     intermediate_dim=16, num_encoder_layers=1, num_decoder_layers=1)
>>> _ = model({"tokens": np.ones((1, 4, 8), "int32"),  # builds it
...            "decoder_tokens": np.full((1, 2), vocabulary.bos_id)})
>>> module = SummarizerModule(model, structurer, SearchOptions(beam_size=2, max_length=5))
>>> path = export_saved_model(module, "saved_models/pht")
>>> path, sorted(os.listdir("saved_models"))
('saved_models/pht/1', ['models.config', 'pht'])
>>> serve = tf.saved_model.load(path).signatures["serving_default"]
>>> outputs = serve(documents=tf.constant(  # B = 1 request of one document
...     [["The room was clean.\\n\\nThe staff were friendly."]]))
>>> outputs["summary"].shape, outputs["paragraph_attention"].shape  # [B], [B,P]
(TensorShape([1]), TensorShape([1, 4]))
>>> outputs["paragraphs"].numpy()[0, :2].tolist()
[b'The room was clean.', b'The staff were friendly.']
"""

import functools
import json
import os
import re
import shutil
import tempfile

import tensorflow as tf

from keras_hsum.checks import check_int
# Its home is keras_hsum.decoding.search_options; docs/library.md keeps this
# name importable for code written before it moved.
from keras_hsum.decoding.search_options import SearchOptions  # noqa: F401
from keras_hsum.features import ERROR
from keras_hsum.features import EXTRACTED
from keras_hsum.features import INDICES
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import PARAGRAPHS
from keras_hsum.features import PREDICTED_ATTENTION
from keras_hsum.features import RANK_SCORE
from keras_hsum.features import SCORE
from keras_hsum.features import SCORES
from keras_hsum.features import SELECTED_IDS
from keras_hsum.features import SELECTED_SNIPPET_IDS
from keras_hsum.features import SELECTED_SNIPPETS
from keras_hsum.features import SENTENCE_SCORES
from keras_hsum.features import SENTENCES
from keras_hsum.features import SOURCE_OOV_WORDS
from keras_hsum.features import SUMMARY
from keras_hsum.features import SUMMARY_IDS
from keras_hsum.features import SUMMARY_TOKENS
from keras_hsum.features import TOKEN_ATTENTION
from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import UNIT_TEXTS

DEFAULT_SIGNATURE = "serving_default"
CONTEXT_SIGNATURE = "summarize_with_context"
EXTRACT_SIGNATURE = "extract"
METADATA_FILE = "keras_hsum.json"
MODELS_CONFIG = "models.config"
EMPTY_INPUT_ERROR = (
    "empty input: this row of `documents` holds no text that could be split into "
    "paragraphs and tokens; send non-empty UTF-8 strings ('' only pads)."
)
EMPTY_DOCUMENT_ERROR = (
    "empty input: `document` holds no sentence; send a non-empty UTF-8 string."
)
# The most bytes of text one row of a request may hold (`max_request_bytes`).
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024


def require_rank(tensor, rank, name, shape):
    """`tensor`, refused at run time unless it has `rank` dimensions.

    A signature's `TensorSpec([None, None])` is only a declaration: a loaded
    SavedModel's signature (and TF Serving) feeds a tensor of any rank to
    the graph, whose ops then read it as if it had the declared one (a
    [B,D,E] `documents` would be summarized). The rank is computed from
    `tf.shape` at run time, in a form that graph optimisation cannot fold
    into the declared rank (`tf.rank` of a [None, None] tensor is the
    constant 2), and checked before anything reads the tensor; the
    `EnsureShape` after it is the graph's own check, in case an optimiser
    ever removes the first.

    Args:
        tensor: the signature's input.
        rank: the rank it must have.
        name: its name in the signature, for the message.
        shape: its documented shape, e.g. "[B, D] (batch, documents)".

    Returns:
        `tensor` (after the check).

    Raises:
        tf.errors.InvalidArgumentError (when run): another rank; the
        message names the expected shape and the received rank.
    """
    received = tf.reduce_sum(tf.cast(tf.shape(tensor) >= 0, tf.int32))
    check = tf.debugging.Assert(
        tf.equal(received, rank),
        [
            f"`{name}` must be tf.string {shape}, of rank {rank}; received a "
            "tensor of rank",
            received,
            f"(send one row per example{', one string per document' if rank == 2 else ''}).",
        ],
    )
    with tf.control_dependencies([check]):
        tensor = tf.identity(tensor)
    return tf.ensure_shape(tensor, [None] * rank)


def request_too_large_error(row_bytes, max_request_bytes):
    """The error of rows over the cap: tf.string [B] ("" for the others).

    Args:
        row_bytes: int64 [B], bytes of text in each row of the request.
        max_request_bytes: the cap.
    """
    message = (
        "request too large: this row holds "
        + tf.strings.as_string(row_bytes)
        + f" bytes of text, over this model's cap of {max_request_bytes} bytes "
        "per row (set by `keras-hsum export --max-request-bytes`); send a "
        "shorter text or split it over several rows."
    )
    return tf.where(row_bytes > max_request_bytes, message, tf.constant(""))


def row_bytes(*texts):
    """Bytes of text per row: int64 [B], summed over `texts` (tf.string [B,...])."""
    total = 0
    for text in texts:
        lengths = tf.cast(tf.strings.length(text, unit="BYTE"), tf.int64)
        if text.shape.rank > 1:
            lengths = tf.reduce_sum(lengths, axis=list(range(1, text.shape.rank)))
        total = total + lengths
    return total


def _normalised(weights, axis):
    """weights / their sum along `axis` (0 where the sum is 0)."""
    total = tf.reduce_sum(weights, axis=axis, keepdims=True)
    return tf.math.divide_no_nan(weights, total)


def best_hypothesis_outputs(result, features, detokenize, pad_id=0):
    """The serving outputs of the best beam of a `beam_search` result.

    Args:
        result: the dict of `keras_hsum.decoding.beam_search`
            (`sequences` int [B,K,L], `scores` [B,K], `lengths` [B,K],
            `aux` name → [B,K,L,...]).
        features: the `TextStructurer` output (`paragraph_mask` [B,P] or,
            for the flat family, `token_mask` [B,N]; `unit_texts` [B,P]).
        detokenize: ids int [B,L] → tf.string [B].
        pad_id: the padding id.

    Returns:
        A dict: `summary` tf.string [B], `score` float32 [B],
        `summary_ids` int32 [B,L], `summary_tokens` tf.string [B,L] (each id
        detokenised alone; "" after the end), `token_attention` float32
        [B,L,P] (each decoded token's paragraph attention, normalised over
        the real paragraphs; 0 after the end), `paragraph_attention`
        float32 [B,P] (summed over the summary's tokens, normalised),
        `paragraphs` tf.string [B,P] (what the attention indexes), `error`
        tf.string [B] ("" or why the row has no summary), and, when the
        search returned SEAL's per-step `selected_ids`, `selected_ids` int32
        [B,L,P'] for `seal_segment_outputs`.
    """
    sequences = tf.cast(result["sequences"][:, 0], tf.int32)  # [B,L]
    length = tf.shape(sequences)[1]
    lengths = tf.cast(result["lengths"][:, 0], tf.int32)  # [B]
    real = tf.sequence_mask(lengths, length)  # [B,L]
    real = tf.logical_and(real, tf.not_equal(sequences, pad_id))
    if PARAGRAPH_MASK in features:
        paragraph_mask = tf.cast(features[PARAGRAPH_MASK], tf.bool)
    else:
        paragraph_mask = tf.reduce_any(
            tf.cast(features[TOKEN_MASK], tf.bool), axis=-1, keepdims=True
        )
    valid = tf.reduce_any(paragraph_mask, axis=1)  # [B]
    summary = detokenize(sequences)
    summary = tf.where(valid, summary, tf.constant(""))
    score = tf.where(valid, tf.cast(result["scores"][:, 0], tf.float32), 0.0)
    batch = tf.shape(sequences)[0]
    pieces = detokenize(tf.reshape(sequences, [-1, 1]))
    pieces = tf.reshape(pieces, [batch, length])
    pieces = tf.where(real, pieces, tf.constant(""))

    aux = result.get("aux", {})
    if PARAGRAPH_ATTENTION in aux:
        attention = tf.cast(aux[PARAGRAPH_ATTENTION][:, 0], tf.float32)  # [B,L,P]
        paragraphs = tf.shape(attention)[2]
        keep = tf.logical_and(
            real[:, :, None], paragraph_mask[:, None, :paragraphs]
        )
        attention = tf.where(keep, attention, 0.0)
    else:
        attention = tf.zeros(
            [batch, length, tf.shape(paragraph_mask)[1]], tf.float32
        )
    token_attention = _normalised(attention, axis=2)
    paragraph_attention = _normalised(tf.reduce_sum(attention, axis=1), axis=1)
    error = tf.where(valid, tf.constant(""), tf.constant(EMPTY_INPUT_ERROR))
    outputs = {
        SUMMARY: summary,
        SCORE: score,
        SUMMARY_IDS: tf.where(real, sequences, pad_id),
        SUMMARY_TOKENS: pieces,
        TOKEN_ATTENTION: token_attention,
        PARAGRAPH_ATTENTION: paragraph_attention,
        ERROR: error,
    }
    if UNIT_TEXTS in features:
        outputs[PARAGRAPHS] = features[UNIT_TEXTS]
    if SELECTED_IDS in aux:
        outputs[SELECTED_IDS] = tf.cast(aux[SELECTED_IDS][:, 0], tf.int32)
    return outputs


def seal_segment_outputs(selected_ids, lengths, unit_texts, segment_length):
    """SEAL's snippet selection per decoded segment.

    Segment m covers decoder positions [m·L_seg, (m+1)·L_seg); its selection
    is the one the step at position m·L_seg used.

    Args:
        selected_ids: int32 [B,L,P'], the per-step selection (selection
            order, -1 padded) of the best beam.
        lengths: int32 [B], decoded length of the best beam.
        unit_texts: tf.string [B,P], the snippets' texts.
        segment_length: L_seg (None: one segment, as in EA).

    Returns:
        `(ids int32 [B,M,P'], texts tf.string [B,M,P'])`, M = ceil(L /
        L_seg); -1 and "" for unused slots and for segments after the end.
    """
    length = tf.shape(selected_ids)[1]
    if segment_length is None:
        segment_length = length
    starts = tf.range(0, length, segment_length)  # [M]
    ids = tf.gather(selected_ids, starts, axis=1)  # [B,M,P']
    started = starts[None, :] < lengths[:, None]  # [B,M]
    ids = tf.where(started[:, :, None], ids, -1)
    safe = tf.maximum(ids, 0)
    texts = tf.gather(unit_texts, safe, axis=1, batch_dims=1)
    texts = tf.where(ids >= 0, texts, tf.constant(""))
    return ids, texts


def _documents_input(documents):
    return require_rank(documents, 2, "documents", "[B, D] (batch, documents)")


class SummarizerModule(tf.Module):
    """Serving module of an abstractive recipe: raw text in, summary out.

    Holds the in-graph `TextStructurer`, the Keras `Summarizer` (TensorFlow
    backend; `encode` / `initial_cache` / `step`) and the beam search, and
    serves them as two signatures:

    - `serving_default(documents)`;
    - `summarize_with_context(documents, title, query)` (a row's "" title or
      query counts as none).

    Inputs: `documents` tf.string [B,None] (one string per input document,
    paragraphs separated by blank lines, sections by a `===` line, "" pads
    rows with fewer documents); `title`, `query` tf.string [B]. Invalid UTF-8 bytes are
    replaced by U+FFFD before anything else. An input of another rank is
    refused (InvalidArgumentError naming the expected shape and the
    received rank), although the signature declares the shape: loaded
    signatures and TF Serving do not check it.

    Outputs (a dict, the signature's output names): `summary` tf.string
    [B], `score` float32 [B] (the search's final score of the best beam),
    `paragraph_attention` float32 [B,P] (the summary's attention per
    paragraph/section/snippet, summed over its tokens and normalised; P =
    the structurer's `max_units`), `paragraphs` tf.string [B,P] (the units
    it indexes), `summary_ids` int32 [B,L], `summary_tokens` tf.string
    [B,L], `token_attention` float32 [B,L,P] (per output token, for
    heatmaps; with a structurer's extended vocabulary, `oov_words`, an id
    V + j of `summary_ids` is a copy of the request's OOV word j, which
    `summary` and `summary_tokens` write as that word), `error` tf.string [B] ("" when the row was summarised; a
    message, with summary "" and score 0, when it held no text or more
    than `max_request_bytes`: such a row is not read, the other rows of
    the request are summarized). SEAL adds
    `selected_snippet_ids` int32 [B,M,P'] and `selected_snippets` tf.string
    [B,M,P'] (the snippets selected for each of the M decoded segments);
    with a PHT `predictor`, `predicted_attention` float32 [B,P] (η̂); for a
    structurer that ranks its rows (the paragraphs family: HT, PHT),
    `rank_score` float32 [B,P], each row's ranking score (the learned
    ranker's with rank="learned", else the tf-idf cosine with the
    title/query; 0 on padding). `keras_hsum.features.summarizer_outputs`
    declares these names.

    Args:
        model: a `keras_hsum.models.Summarizer` (TensorFlow backend).
        structurer: a `keras_hsum.data.structurer.TextStructurer` for
            the model's family.
        search: `search(model, inputs) -> result dict` of
            `keras_hsum.decoding.beam_search` (e.g. a `functools.partial` of
            it with `beam_size`, `max_length`, `terms`).
        predictor: optional `AttentionPredictor` (PHT): its η̂ is computed
            from the model's paragraph memory and returned; `search` then
            receives it as `inputs["predicted_attention"]` [B,P] (for the
            attention-alignment score term).
        jit_compile: compile the encoder + search with XLA (the string
            preprocessing always runs outside XLA).
        max_request_bytes: the most bytes of text one row may hold (its
            documents, title and query together; default 4 MiB); a row
            over it gets the `error` "request too large: ..." and is not
            structured. None: no cap.
        name: module name.
    """

    def __init__(self, model, structurer, search, *, predictor=None,
                 jit_compile=False, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
                 name="summarizer"):
        super().__init__(name=name)
        self.model = model
        self.structurer = structurer
        self.predictor = predictor
        self.max_request_bytes = check_int(
            "max_request_bytes", max_request_bytes, allow_none=True
        )
        self._search_fn = search
        self.segment_length = getattr(model, "segment_length", None)
        self.pad_id = int(getattr(model, "pad_id", 0))
        self.decode_ids = tf.function(self._decode_ids, jit_compile=jit_compile)

    def _decode_ids(self, inputs):
        """Numeric features → the beam search result (may run under XLA)."""
        inputs = dict(inputs)
        if self.predictor is not None:
            memory = self.model.encode(inputs, training=False)
            eta = self.predictor(
                {
                    "paragraph_embeddings": memory["paragraph_memory"],
                    PARAGRAPH_MASK: memory[PARAGRAPH_MASK],
                },
                training=False,
            )
            inputs[PREDICTED_ATTENTION] = tf.cast(eta, tf.float32)
        result = dict(self._search_fn(self.model, inputs))
        if self.predictor is not None:
            result[PREDICTED_ATTENTION] = inputs[PREDICTED_ATTENTION]
        return result

    def summarize(self, documents, title=None, query=None):
        """documents tf.string [B,None] (+ title/query [B]) → the outputs
        documented in the class docstring. Callable eagerly or in a graph."""
        if isinstance(documents, tf.RaggedTensor):
            documents = documents.to_tensor(default_value="")
        documents = tf.convert_to_tensor(documents, tf.string)
        over = None
        if self.max_request_bytes is not None:
            # Rows over the cap are emptied before the structurer reads them.
            context = [tf.convert_to_tensor(t, tf.string) for t in (title, query)
                       if t is not None]
            size = row_bytes(documents, *context)
            over = size > self.max_request_bytes
            documents = tf.where(over[:, None], tf.constant(""), documents)
            if title is not None:
                title = tf.where(over, tf.constant(""), title)
            if query is not None:
                query = tf.where(over, tf.constant(""), query)
        # The structurer replaces invalid UTF-8 by U+FFFD itself.
        features = self.structurer(documents, title=title, query=query)
        numeric = {
            key: value for key, value in features.items() if value.dtype != tf.string
        }
        result = self.decode_ids(numeric)
        outputs = best_hypothesis_outputs(
            result, features, self._detokenizer(features), pad_id=self.pad_id
        )
        selected = outputs.pop(SELECTED_IDS, None)
        if selected is not None:
            ids, texts = seal_segment_outputs(
                selected,
                tf.cast(result["lengths"][:, 0], tf.int32),
                features[UNIT_TEXTS],
                self.segment_length,
            )
            outputs[SELECTED_SNIPPET_IDS] = ids
            outputs[SELECTED_SNIPPETS] = texts
        if PREDICTED_ATTENTION in result:
            outputs[PREDICTED_ATTENTION] = result[PREDICTED_ATTENTION]
        if RANK_SCORE in features:
            outputs[RANK_SCORE] = tf.cast(features[RANK_SCORE], tf.float32)
        if over is not None:
            outputs[ERROR] = tf.where(
                over, request_too_large_error(size, self.max_request_bytes),
                outputs[ERROR],
            )
        return outputs

    def _detokenize_extended(self, oov_words, ids):
        # ids: [B, L] (a row per example) or [B·L, 1] (a row per token,
        # example-major): each row gets its example's OOV words.
        copies = tf.shape(ids)[0] // tf.maximum(tf.shape(oov_words)[0], 1)
        return self.structurer.detokenize(
            ids, oov_words=tf.repeat(oov_words, copies, axis=0)
        )

    def _detokenizer(self, features):
        """ids -> text: with the structurer's extended vocabulary
        (`source_oov_words`), a copied OOV id V + j is written as the
        request's word j."""
        if SOURCE_OOV_WORDS not in features:
            return self.structurer.detokenize
        return functools.partial(self._detokenize_extended, features[SOURCE_OOV_WORDS])

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.string, name="documents")]
    )
    def serving_default(self, documents):
        """documents tf.string [B,None] → summary, score, paragraph_attention, ..."""
        return self.summarize(_documents_input(documents))

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.string, name="documents"),
            tf.TensorSpec([None], tf.string, name="title"),
            tf.TensorSpec([None], tf.string, name="query"),
        ]
    )
    def summarize_with_context(self, documents, title, query):
        """documents [B,None], title [B], query [B] ("" = none) → as
        `serving_default`."""
        return self.summarize(
            _documents_input(documents),
            title=require_rank(title, 1, "title", "[B]"),
            query=require_rank(query, 1, "query", "[B]"),
        )

    def signatures(self):
        """`{name: concrete function}` to pass to `tf.saved_model.save`."""
        return {
            DEFAULT_SIGNATURE: self.serving_default.get_concrete_function(),
            CONTEXT_SIGNATURE: self.summarize_with_context.get_concrete_function(),
        }


def _document_input(document):
    return require_rank(document, 1, "document", "[B] (one document per row)")


class ExtractorModule(tf.Module):
    """Serving module of SHTE: a document in, its sentence scores and the
    extractive summary out.

    Signatures (both take `document` tf.string [B], one document per row,
    paragraphs separated by blank lines):

    - `serving_default`: `sentences` tf.string [B,P] (the document's first P
      sentences, "" padded), `sentence_scores` float32 [B,P] (Eq. 21-23; 0
      on padding), `summary` tf.string [B], `indices` int32 [B,k],
      `scores` float32 [B,k], `error` tf.string [B];
    - `extract`: `summary`, `indices` int32 [B,k] (sentence indices in
      document order, -1 padded), `extracted` tf.string [B,k], `scores`
      float32 [B,k], `error`.

    Args:
        model: a `keras_hsum.models.SHTE` (TensorFlow backend).
        structurer: a `TextStructurer` of the "sentences" family.
        k: sentences to extract (3 in the paper).
        jit_compile: compile the encoder with XLA.
        max_request_bytes: the most bytes one `document` may hold (default
            4 MiB); a longer one gets the `error` "request too large: ..."
            and is not structured. None: no cap.

    A `document` of another rank than 1 is refused (InvalidArgumentError).
    """

    def __init__(self, model, structurer, *, k=3, jit_compile=False,
                 max_request_bytes=DEFAULT_MAX_REQUEST_BYTES, name="extractor"):
        super().__init__(name=name)
        self.model = model
        self.structurer = structurer
        self.k = int(k)
        self.max_request_bytes = check_int(
            "max_request_bytes", max_request_bytes, allow_none=True
        )
        self.score_sentences = tf.function(self._extract, jit_compile=jit_compile)

    def _extract(self, inputs):
        indices, scores, sentence_scores = self.model.extract(inputs, k=self.k)
        return {
            INDICES: tf.cast(indices, tf.int32),
            SCORES: tf.cast(scores, tf.float32),
            SENTENCE_SCORES: tf.cast(sentence_scores, tf.float32),
        }

    def extract_all(self, document):
        """document tf.string [B] → every output of both signatures."""
        document = tf.convert_to_tensor(document, tf.string)
        too_large = tf.fill(tf.shape(document), "")
        if self.max_request_bytes is not None:
            size = row_bytes(document)
            too_large = request_too_large_error(size, self.max_request_bytes)
            document = tf.where(size > self.max_request_bytes, tf.constant(""), document)
        features = self.structurer(document[:, None])
        numeric = {
            key: value for key, value in features.items() if value.dtype != tf.string
        }
        result = self.score_sentences(numeric)
        sentences = features[UNIT_TEXTS]
        mask = tf.cast(features[PARAGRAPH_MASK], tf.bool)
        valid = tf.reduce_any(mask, axis=1)
        indices = result[INDICES]
        extracted = tf.gather(sentences, tf.maximum(indices, 0), axis=1, batch_dims=1)
        extracted = tf.where(indices >= 0, extracted, tf.constant(""))
        summary = tf.strings.reduce_join(extracted, axis=1, separator=" ")
        summary = tf.strings.strip(tf.strings.regex_replace(summary, " +", " "))
        return {
            SENTENCES: sentences,
            SENTENCE_SCORES: tf.where(mask, result[SENTENCE_SCORES], 0.0),
            SUMMARY: tf.where(valid, summary, tf.constant("")),
            INDICES: indices,
            EXTRACTED: extracted,
            SCORES: result[SCORES],
            ERROR: tf.where(
                tf.not_equal(too_large, ""), too_large,
                tf.where(valid, tf.constant(""), tf.constant(EMPTY_DOCUMENT_ERROR)),
            ),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="document")])
    def serving_default(self, document):
        """document [B] → sentences, sentence_scores, summary, indices, scores, error."""
        outputs = self.extract_all(_document_input(document))
        outputs.pop(EXTRACTED)
        return outputs

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="document")])
    def extract(self, document):
        """document [B] → summary, indices, extracted, scores, error."""
        outputs = self.extract_all(_document_input(document))
        return {
            key: outputs[key]
            for key in (SUMMARY, INDICES, EXTRACTED, SCORES, ERROR)
        }

    def signatures(self):
        return {
            DEFAULT_SIGNATURE: self.serving_default.get_concrete_function(),
            EXTRACT_SIGNATURE: self.extract.get_concrete_function(),
        }


# ---------------------------------------------------------------- writing out
def versions(base_path):
    """The numbered version folders under `base_path` (sorted ints)."""
    if not os.path.isdir(base_path):
        return []
    return sorted(
        int(name)
        for name in os.listdir(base_path)
        if name.isdigit() and os.path.isdir(os.path.join(base_path, name))
    )


def next_version(base_path):
    """1 for a new model, else one more than the highest version folder."""
    existing = versions(base_path)
    return existing[-1] + 1 if existing else 1


def latest_version_path(path):
    """`path` itself when it is a SavedModel folder, else its highest
    numbered version folder.

    Raises:
        FileNotFoundError: neither.
    """
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    existing = [
        v for v in versions(path)
        if os.path.isfile(os.path.join(path, str(v), "saved_model.pb"))
    ]
    if not existing:
        raise FileNotFoundError(
            f"{path!r} is neither a SavedModel folder (with saved_model.pb) nor "
            "a model base path with numbered version folders. Give "
            "saved_models/<name>/<version> or saved_models/<name>, as written "
            "by `keras-hsum export`."
        )
    return os.path.join(path, str(existing[-1]))


def export_saved_model(module, base_path, *, version=None, metadata=None,
                       serving_root="/models", write_config=True):
    """Writes `module` as `<base_path>/<version>/` and updates models.config.

    The SavedModel is written to a temporary folder next to the version
    folder and renamed into place, so TF Serving (which polls `base_path`)
    never sees half a version.

    Args:
        module: a `SummarizerModule` or `ExtractorModule` (anything with
            `signatures()`).
        base_path: the model's base path, e.g. `saved_models/pht`; its name
            is the TF Serving model name.
        version: the version number (default: `next_version(base_path)`).
            An existing version is never overwritten.
        metadata: optional JSON-able dict written to
            `<version>/assets.extra/keras_hsum.json` (TF Serving ignores it;
            `keras-hsum summarize --explain` reads the model kind from it).
        serving_root: the folder the models are served from, for the
            `base_path` entries of models.config (default "/models": the
            docker mount point of docs/serving.md); None writes absolute
            local paths.
        write_config: rewrite `models.config` next to `base_path`.

    Returns:
        The version folder's path.

    Raises:
        FileExistsError: `version` already exists.
    """
    base_path = os.fspath(base_path)
    version = next_version(base_path) if version is None else check_int("version", version)
    path = os.path.join(base_path, str(version))
    if os.path.exists(path):
        raise FileExistsError(
            f"{path!r} exists; TF Serving versions are immutable. Omit "
            "`version` to write the next one."
        )
    os.makedirs(base_path, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{version}.", dir=base_path)
    try:
        tf.saved_model.save(module, temporary, signatures=module.signatures())
        if metadata is not None:
            extra = os.path.join(temporary, "assets.extra")
            os.makedirs(extra, exist_ok=True)
            with open(os.path.join(extra, METADATA_FILE), "w") as handle:
                json.dump(metadata, handle, indent=2, sort_keys=True)
        os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if write_config:
        write_models_config(
            os.path.dirname(os.path.abspath(base_path)), serving_root=serving_root
        )
    return path


def read_metadata(path):
    """The `keras_hsum.json` of a SavedModel version folder ({} if none)."""
    file = os.path.join(os.fspath(path), "assets.extra", METADATA_FILE)
    if not os.path.isfile(file):
        return {}
    with open(file) as handle:
        return json.load(handle)


def exported_models(root):
    """`{name: base_path}` for every folder of `root` with a version folder
    holding saved_model.pb."""
    models = {}
    if not os.path.isdir(root):
        return models
    for name in sorted(os.listdir(root)):
        base = os.path.join(root, name)
        if any(
            os.path.isfile(os.path.join(base, str(v), "saved_model.pb"))
            for v in versions(base)
        ):
            models[name] = base
    return models


_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def models_config_text(models):
    """TF Serving's `model_config_list` text proto for `{name: base_path}`."""
    lines = ["model_config_list {"]
    for name, base_path in sorted(models.items()):
        if not _MODEL_NAME.match(name):
            raise ValueError(
                f"TF Serving model name {name!r} must match {_MODEL_NAME.pattern}; "
                "rename the model folder."
            )
        lines += [
            "  config {",
            f'    name: "{name}"',
            f'    base_path: "{base_path}"',
            '    model_platform: "tensorflow"',
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_models_config(root, serving_root="/models"):
    """Rewrites `<root>/models.config` listing every model exported in `root`.

    Args:
        root: the folder holding model base paths (e.g. `saved_models`).
        serving_root: where `root` is mounted for the server (base_path =
            `<serving_root>/<name>`); None: absolute local paths.

    Returns:
        The config file's path.
    """
    models = exported_models(root)
    if serving_root is None:
        entries = {name: os.path.abspath(path) for name, path in models.items()}
    else:
        entries = {
            name: serving_root.rstrip("/") + "/" + name for name in models
        }
    path = os.path.join(root, MODELS_CONFIG)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        handle.write(models_config_text(entries))
    os.replace(temporary, path)
    return path
