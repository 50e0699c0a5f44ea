"""Cohan et al.'s discourse-aware summarizer (2018): hierarchical BiLSTM,
discourse attention, pointer-generator copy and coverage."""

import functools

import keras
from keras import ops

from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import SOURCE_EXTENDED_IDS
from keras_hsum.features import TARGET_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.bidirectional_lstm_scan import bidirectional_lstm_scan
from keras_hsum.layers.bidirectional_lstm_scan import lstm_gates
from keras_hsum.layers.discourse_attention import DiscourseAttention
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import merge_masks
from keras_hsum.layers.pointer_generator import PointerGenerator
from keras_hsum.layers.pointer_generator import coverage_loss
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import required

UNK_ID = 1
# Floor of the final distribution before its log: words that neither the
# generator nor the copy distribution can produce (an OOV slot absent from
# the source) get log(1e-12) ≈ -27.6 instead of -inf.
MIN_PROBABILITY = 1e-12
# How the word-level BiLSTM reads the sections (see the class docstring).
SECTION_ENCODINGS = ("paper", "carry", "concatenated")
# What a saved config without `section_encoding` (a model saved before the
# option existed) was: one BiLSTM over the concatenated sections.
LEGACY_SECTION_ENCODING = "concatenated"


def scan_carries(step, initial, xs):
    """`ops.scan(step, initial, xs)[1]` where `step` emits its carry: the
    carries stacked on a new first axis. Under TensorFlow, a `while_loop`
    with `maximum_iterations` that writes each carry into its row
    (`scatter_update`): XLA (`jit_compile=True`, Keras' default for `fit` on a
    TensorFlow GPU) cannot differentiate the loop of Keras' TensorFlow
    `ops.scan`, which has none ("XLA compilation requires a fixed tensor
    list size"). JAX keeps `ops.scan`: its while loop has no reverse mode.

    Args:
        step: `(carry, x) -> (carry, carry)`, carry a dict of tensors.
        initial: the first carry.
        xs: [S, ...].
    """
    if keras.backend.backend() != "tensorflow":
        return ops.scan(step, initial, xs)[1]
    length = ops.shape(xs)[0]
    rows = {k: ops.zeros((length,) + tuple(ops.shape(v)), v.dtype) for k, v in initial.items()}

    def body(i, carry, rows):
        carry, _ = step(carry, ops.take(xs, i, axis=0))
        row = ops.reshape(i, (1, 1))
        rows = {k: ops.scatter_update(rows[k], row, ops.expand_dims(carry[k], 0))
                for k in rows}
        return i + 1, carry, rows

    start = ops.convert_to_tensor(0, "int32")
    return ops.while_loop(lambda i, carry, rows: i < length, body, (start, initial, rows),
                          maximum_iterations=length)[2]


@keras.saving.register_keras_serializable(package="keras_hsum")
class DiscourseSummarizer(Summarizer):
    """The discourse-aware abstractive summarizer of Cohan et al. (2018).

    Encoder (their §2, "Encoder"). Tokens are embedded (E) and read by a
    word-level BiLSTM shared by all sections; masked steps keep its state
    (a Keras LSTM skips them), so padded tokens and padded sections never
    change an output. Forward and backward states are combined by
    h = relu(W [h→; h←] + b) (the paper's combined state) into the word
    states h^(e)_(j,i) [B,P,T,D]. The final word state of section j,
    [h→ after its last word; h← after its first word] combined the same
    way, is the section's input to the section-level BiLSTM, whose combined
    outputs are the section states h^(s)_j [B,P,D]; its final (h, c)
    states, reduced by relu layers (See et al.), start the decoder.
    `section_encoding` says what the word-level BiLSTM reads:

    - `"paper"` (the default): each section alone, as §2 describes
      (h^(s)_j = RNN_sec{x_(j,1..M)}, "the parameters of RNN_sec are shared
      for all the discourse sections"): both directions start every section
      from zero state, so nothing crosses a section boundary. Computed as
      one BiLSTM over the B·P sections [B·P,T,E].
    - `"carry"`: the authors' released code (armancohan/long-summarization,
      `model.py`, `hier` branch), which runs its BiLSTM section by section
      and starts section j from *both* final states of section j-1
      (`initial_state_fw`, `initial_state_bw`): the forward LSTM continues
      from its state after section j-1's last word; the backward LSTM reads
      section j right to left starting from its state after section j-1's
      first word. So section j's states see sections 1..j and nothing of
      j+1..P, in either direction. (That code also gives every section the
      padded length, so its LSTM reads pad tokens and padded sections; here
      padding is skipped, as in the other modes.) Computed as the forward
      LSTM over the P·T concatenated slots [B,P·T,E], and the backward
      LSTM over the sections concatenated in reverse order.
    - `"concatenated"`: one BiLSTM over the P·T concatenated section slots
      [B,P·T,E]: the forward LSTM carries section j's state into j+1, the
      backward LSTM carries section j+1's into j, so every word state sees
      the whole document. What this class did before `section_encoding`
      existed; a saved config without the key loads as `"concatenated"`.

    Decoder (their §2, "Discourse-aware decoder", Eq. 4-9). An
    `keras.layers.LSTMCell` of width D reads [x_t; c_(t-1)] (the embedded
    previous word and the previous context vector; c_0 = 0). With its new
    state h_t, `DiscourseAttention` gives section weights β (Eq. 6), word
    weights α (Eq. 5, with coverage) and the context c_t (Eq. 4);
    P_vocab = softmax(V' (V [h_t; c_t] + b) + b') (Eq. 7) and
    `PointerGenerator` mixes it with the copy distribution Σ α over the
    source positions of each word (Eq. 8-9). The attention query is the new
    state h_t (See et al.'s and the authors' released code); Eq. 5-6 as
    printed use h_(t-1). Teacher forcing (`call`) and
    decoding (`step`) run the same code: the recurrence (cell, attention)
    and the output distribution (Eq. 7-9), which no later step reads;
    teacher forcing runs the recurrence in one scan over S (with the
    cell's input product x W of all steps computed before it, and the
    attention as `DiscourseAttention.attend` with its `loop_weights()`
    read before it: the same math up to float rounding, in fewer
    operations per step) and the output distribution once over all S
    steps.

    Both BiLSTMs run as `bidirectional_lstm_scan`: Keras' masked
    `Bidirectional(LSTM)` math with the two directions in one loop and the
    input projections of every step computed before it, from the weights
    of `word_encoder` and `section_encoder` (the layers that hold them).
    With a GPU visible, the "paper" word encoder runs cuDNN's LSTM kernel
    instead, one call for both directions (`use_cudnn`).

    Copying. `source_extended_ids` [B,P,T] gives every source word's id in
    the extended vocabulary V + `num_oov` (ids >= V name the example's
    source OOVs; the model's static `num_oov` is the most OOVs of one
    example, so a per-example OOV count in the inputs is not needed and is
    ignored); without it the copy distribution goes to the regular ids
    `tokens`. `TextStructurer(..., oov_words=K)` gives it (words with an
    `<unk>` piece; the discourse recipe's `num_oov`), the pipeline's
    targets then hold V + j, and `TextStructurer.detokenize(ids,
    oov_words)` writes V + j back as the word. Decoder input ids >= V
    are read as `unk_id`. The "logits" of `call` and `step` are the log of
    the final distribution over V + num_oov (floored at 1e-12, so finite);
    `LabelSmoothedCrossEntropy` takes them as they are.

    Coverage (See et al., 2017; Cohan et al. §2 "Decoder coverage"). The
    non-trainable variable `coverage_weight` λ starts at 0. While λ = 0 the
    attention gets zero coverage (the model is exactly the one without
    coverage) and no loss is added; set λ > 0 (`set_coverage_weight`, or
    the recipe's callback for the last epochs, as in the paper) to feed the
    coverage vector cov_t = Σ_(k<t) α_k to the attention and add
    λ · coverage_loss with `add_loss`: Σ min(α_t, cov_t) summed over the
    valid target steps and divided by B·S, as the compiled
    `LabelSmoothedCrossEntropy` divides its sum, so λ weighs the two terms
    as in See et al. (both averaged alike) whatever the padding. Only with
    `use_coverage=True`.

    Args:
        vocabulary_size: V.
        hidden_dim: D, the LSTM cell size (encoder and decoder) and the
            width of word/section states and attention features.
        embedding_dim: E, the token embedding width (shared by encoder and
            decoder).
        num_oov: the static number of extended-vocabulary slots for source
            OOVs (0: no extension; the output then has V entries).
        use_coverage: create the coverage mechanism (needed for λ > 0).
        section_weighting: `DiscourseAttention`'s `"scores"` (Eq. 5 as
            printed) or `"probabilities"`.
        unk_id: the id that decoder input ids >= V are mapped to.
        section_encoding: `"paper"`, `"carry"` or `"concatenated"`: what
            the word-level BiLSTM reads (see Encoder). The weights are the
            same in every mode.
        use_cudnn: True (default) or False. With True and a GPU
            visible, the "paper" word encoder (right-padded sections) runs
            cuDNN's LSTM kernel: under TensorFlow through Keras' layer,
            under JAX through `jax.experimental.rnn.lstm`, in float32 (see
            `bidirectional_lstm_scan`; on one device: a distribution over
            several keeps the scan). False keeps the scan everywhere.
            Same weights and math either way; no effect without a GPU.
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict):
        tokens: int [B,P,T] section tokens.
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P], the section mask; default: a
            section is real when it has a real token.
        source_extended_ids: optional int [B,P,T] (see Copying).
        target_mask: optional bool [B,S], real target steps (for the
            coverage loss; default decoder_tokens != pad).
        decoder_tokens: int [B,S] (teacher forcing).

    Returns (call):
        float32 log-probabilities [B,S,V + num_oov].

    Decoding: `initial_cache` projects the attention's memory terms once
    (W_h h, W_h' h_j; `DiscourseAttention.project_memory`) into the memory;
    `state` holds `h`, `c` [B,D], `context` [B,D] (c_(t-1)) and
    `coverage` [B,P,T]; aux is `{"paragraph_attention": β [B,P],
    "attention": α [B,P·T], "p_gen": [B]}`, all float32.

    Example:
    >>> model = DiscourseSummarizer(vocabulary_size=50, hidden_dim=8,
    ...                             embedding_dim=6)
    >>> log_probabilities = model({
    ...     "tokens": np.full((2, 3, 5), 7, "int32"),
    ...     "decoder_tokens": np.full((2, 4), 2, "int32"),
    ... })
    >>> tuple(log_probabilities.shape)
    (2, 4, 50)

    References:
        Cohan et al. (2018), A Discourse-Aware Attention Model for
        Abstractive Summarization of Long Documents, NAACL.
        See et al. (2017), Get To The Point: Summarization with
        Pointer-Generator Networks, ACL.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        embedding_dim=128,
        num_oov=0,
        use_coverage=True,
        section_weighting="scores",
        unk_id=UNK_ID,
        section_encoding="paper",
        use_cudnn=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
            embedding_dim=embedding_dim, num_oov=num_oov,
        )
        if section_encoding not in SECTION_ENCODINGS:
            raise ValueError(
                f"{self.name}: `section_encoding` must be one of "
                f"{', '.join(repr(name) for name in SECTION_ENCODINGS)}, received "
                f"{section_encoding!r}. \"paper\" encodes each section alone "
                "(Cohan et al. §2); see the DiscourseSummarizer docstring."
            )
        if not isinstance(use_cudnn, bool):
            raise ValueError(
                f"{self.name}: `use_cudnn` must be True or False, received "
                f"{use_cudnn!r}. True runs the \"paper\" word encoder by cuDNN's "
                "LSTM kernel where a GPU is visible; False always runs the scan."
            )
        self.section_encoding = section_encoding
        self.use_cudnn = use_cudnn
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim
        self.num_oov = num_oov
        self.use_coverage = use_coverage
        self.section_weighting = section_weighting
        self.unk_id = unk_id
        dtype = self.dtype_policy

        def lstm(**options):
            return keras.layers.LSTM(
                hidden_dim, dtype=dtype, use_cudnn="auto" if use_cudnn else False, **options)

        self.token_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=dtype, name="token_embedding"
        )
        # Both directions are built here and handed to Bidirectional. Left to
        # itself, Bidirectional serialises the one LSTM twice to derive the
        # backward copy; while Keras loads a model (inside its object-sharing
        # scope) that second serialisation can match a freed object's reused
        # id and hand back an unrelated layer ("Forward layer and backward
        # layer should have different `go_backwards` value"): 25 of 3,000
        # constructions in such a scope failed, none since. `templates` keeps
        # the LSTMs alive until __init__ returns, so their ids are not reused.
        templates = {}

        def bidirectional(name, **options):
            templates[name] = (
                lstm(name=name, **options),
                lstm(go_backwards=True, name=f"backward_{name}", **options),
            )
            forward, backward = templates[name]
            return keras.layers.Bidirectional(
                forward, backward_layer=backward, merge_mode=None, dtype=dtype,
                name=name.replace("_lstm", "_encoder"),
            )

        self.word_encoder = bidirectional("word_lstm", return_sequences=True)
        self.word_reduce = keras.layers.Dense(
            hidden_dim, activation="relu", dtype=dtype, name="word_reduce"
        )
        self.section_encoder = bidirectional(
            "section_lstm", return_sequences=True, return_state=True
        )
        self.section_reduce = keras.layers.Dense(
            hidden_dim, activation="relu", dtype=dtype, name="section_reduce"
        )
        self.initial_h_reduce = keras.layers.Dense(
            hidden_dim, activation="relu", dtype=dtype, name="initial_h_reduce"
        )
        self.initial_c_reduce = keras.layers.Dense(
            hidden_dim, activation="relu", dtype=dtype, name="initial_c_reduce"
        )
        self.decoder_cell = keras.layers.LSTMCell(
            hidden_dim, dtype=dtype, name="decoder_cell"
        )
        self.attention = DiscourseAttention(
            attention_dim=hidden_dim,
            use_coverage=use_coverage,
            section_weighting=section_weighting,
            dtype=dtype,
            name="discourse_attention",
        )
        self.output_projection = keras.layers.Dense(
            hidden_dim, dtype=dtype, name="output_projection"
        )
        self.vocabulary_projection = keras.layers.Dense(
            vocabulary_size, dtype=dtype, name="vocabulary_projection"
        )
        self.pointer_generator = PointerGenerator(
            vocabulary_size=vocabulary_size,
            num_oov=num_oov,
            dtype=dtype,
            name="pointer_generator",
        )
        self.coverage_weight = self.add_weight(
            shape=(),
            initializer="zeros",
            trainable=False,
            dtype="float32",
            name="coverage_weight",
        )

    # ------------------------------------------------------------------ #
    # Coverage switch.

    def set_coverage_weight(self, value):
        """Sets λ (0 switches coverage off; > 0 needs `use_coverage=True`)."""
        value = float(value)
        if value < 0 or (value > 0 and not self.use_coverage):
            raise ValueError(
                f"{self.name}: the coverage weight must be >= 0, and > 0 only "
                "for a model created with `use_coverage=True`; received "
                f"{value} with use_coverage={self.use_coverage}."
            )
        self.coverage_weight.assign(value)

    def _coverage_on(self):
        """float32 scalar: 1 while λ > 0, else 0."""
        return ops.cast(ops.greater(self.coverage_weight, 0.0), "float32")

    # ------------------------------------------------------------------ #
    # Encoder.

    def _source_masks(self, inputs, tokens):
        if TOKEN_MASK in inputs and inputs[TOKEN_MASK] is not None:
            token_mask = as_bool_mask(inputs[TOKEN_MASK])
        else:
            token_mask = ops.not_equal(tokens, self.pad_id)
        if PARAGRAPH_MASK in inputs and inputs[PARAGRAPH_MASK] is not None:
            section_mask = as_bool_mask(inputs[PARAGRAPH_MASK])
        else:
            section_mask = ops.any(token_mask, axis=-1)
        word_mask = merge_masks(token_mask, section_mask[:, :, None])
        # A section is real only if it has a real word.
        section_mask = ops.logical_and(section_mask, ops.any(word_mask, axis=-1))
        return word_mask, section_mask

    def _encode_words(self, embedded, word_mask):
        """The word-level BiLSTM's outputs, read as `section_encoding` says.

        Args:
            embedded: [B,P,T,E] embedded section tokens.
            word_mask: bool [B,P,T], the real words (masked steps keep the
                LSTM state, so padding is skipped).

        Returns:
            `(forward, backward)`, each [B,P,T,D]: h→ and h← at every slot,
            aligned with the input (zeros at masked slots).
        """
        shape = ops.shape(embedded)
        batch, sections, length = shape[0], shape[1], shape[2]
        dim = self.hidden_dim

        def slots(x, rows, steps):  # [B,P,T,...] -> [rows, steps, ...]
            return ops.reshape(x, (rows, steps) + tuple(x.shape[3:]))

        def sectioned(x):  # [B,P·T,D] or [B·P,T,D] -> [B,P,T,D]
            return ops.reshape(x, (batch, sections, length, dim))

        if self.section_encoding == "paper":
            # Each section is its own sequence of the batch: both directions
            # start from zero state in every section.
            # The structurer pads each section at its end: right padded.
            forward, backward, _ = bidirectional_lstm_scan(
                self.word_encoder,
                slots(embedded, batch * sections, length),
                slots(word_mask, batch * sections, length),
                right_padded=True,
            )
            return sectioned(forward), sectioned(backward)
        flat = slots(embedded, batch, sections * length)
        flat_mask = slots(word_mask, batch, sections * length)
        if self.section_encoding == "concatenated":
            forward, backward, _ = bidirectional_lstm_scan(self.word_encoder, flat, flat_mask)
            return sectioned(forward), sectioned(backward)
        # "carry": the forward LSTM reads the sections laid end to end (as
        # "concatenated"). The backward LSTM reads each section right to
        # left but the sections in document order, starting section j from
        # its state at the end of section j-1 (after that section's first
        # word): it reads the sections in reverse order laid end to end,
        # backwards.
        forward, backward, _ = bidirectional_lstm_scan(
            self.word_encoder,
            flat,
            flat_mask,
            backward_inputs=slots(ops.flip(embedded, axis=1), batch, sections * length),
            backward_mask=slots(ops.flip(word_mask, axis=1), batch, sections * length),
        )
        # Slot j·T + t of the backward input is word t of section P-1-j.
        return sectioned(forward), ops.flip(sectioned(backward), axis=1)

    def encode(self, inputs, training=False):
        """Runs the hierarchical encoder.

        Returns:
            `{"word_states": [B,P,T,D], "section_states": [B,P,D],
            "word_mask": bool [B,P,T], "section_mask": bool [B,P],
            "source_ids": int32 [B,P,T] (extended ids, or tokens),
            "initial_h", "initial_c": [B,D]}`.
        """
        tokens = required(self, inputs, TOKENS, "int [B,P,T]")
        if len(tokens.shape) != 3:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,P,T] (sections of "
                f"tokens; family 'sections'), received shape {tuple(tokens.shape)}. "
                "Build batches with keras_hsum.data.make_dataset(..., 'sections', ...)."
            )
        tokens = ops.cast(tokens, "int32")
        source_ids = tokens
        if inputs.get(SOURCE_EXTENDED_IDS) is not None:
            source_ids = ops.cast(inputs[SOURCE_EXTENDED_IDS], "int32")
            if tuple(source_ids.shape) != tuple(tokens.shape) and None not in (
                tuple(source_ids.shape) + tuple(tokens.shape)
            ):
                raise ValueError(
                    f"{self.name}: `source_extended_ids` must have the shape of "
                    f"`tokens` [B,P,T] = {tuple(tokens.shape)}, received "
                    f"{tuple(source_ids.shape)}."
                )
        word_mask, section_mask = self._source_masks(inputs, tokens)
        shape = ops.shape(tokens)
        batch, sections, length = shape[0], shape[1], shape[2]

        # Word level: forward and backward LSTM outputs [B,P,T,D], read per
        # `section_encoding`.
        embedded = self.token_embedding(tokens)
        forward, backward = self._encode_words(embedded, word_mask)
        word_states = self.word_reduce(ops.concatenate([forward, backward], axis=-1))
        word_states = word_states * ops.cast(word_mask[..., None], word_states.dtype)

        # Final word state of each section: h→ at its last word, h← at its first.
        # (With "carry" and "concatenated" these are the states the section
        # ends with, carried state included.)
        positions = ops.arange(length, dtype="int32")[None, None, :]
        last = ops.maximum(ops.max(ops.where(word_mask, positions, -1), axis=-1), 0)
        first = ops.minimum(ops.min(ops.where(word_mask, positions, length), axis=-1), length - 1)

        def at(states, index):  # [B,P,T,D], [B,P] -> [B,P,D]
            index = ops.broadcast_to(
                index[:, :, None, None], (batch, sections, 1, self.hidden_dim)
            )
            return ops.take_along_axis(states, index, axis=2)[:, :, 0, :]

        section_inputs = self.word_reduce(
            ops.concatenate([at(forward, last), at(backward, first)], axis=-1)
        )

        # Section level.
        section_forward, section_backward, (forward_h, forward_c, backward_h, backward_c) = (
            bidirectional_lstm_scan(self.section_encoder, section_inputs, section_mask)
        )
        section_states = self.section_reduce(
            ops.concatenate([section_forward, section_backward], axis=-1)
        )
        section_states = section_states * ops.cast(
            section_mask[..., None], section_states.dtype
        )
        return {
            "word_states": word_states,
            "section_states": section_states,
            "word_mask": word_mask,
            "section_mask": section_mask,
            "source_ids": source_ids,
            "initial_h": self.initial_h_reduce(
                ops.concatenate([forward_h, backward_h], axis=-1)
            ),
            "initial_c": self.initial_c_reduce(
                ops.concatenate([forward_c, backward_c], axis=-1)
            ),
        }

    # ------------------------------------------------------------------ #
    # Decoder.

    def _decoder_inputs(self, ids):
        """int [B] or [B,S] (extended ids allowed) → x, the embedded words
        [B,E] or [B,S,E]; ids >= V are read as `unk_id`."""
        ids = ops.cast(ids, "int32")
        return self.token_embedding(ops.where(ids >= self.vocabulary_size, self.unk_id, ids))

    def _recurrent_step(self, cell, state, memory, coverage_on, loop_weights=None):
        """The part of a decoder step that the next step depends on: the
        LSTM cell and the attention (Eq. 4-6).

        Args:
            cell: `f(context, h, c) → (h, c)`, the LSTM cell reading
                [x; c_(t-1)] with W and h_(t-1) with U for the step's input
                word x (decoding calls Keras' LSTMCell; teacher forcing
                computes the same with x W_x for all steps before its loop).
            state: dict `h`, `c`, `context` [B,D], `coverage` [B,P,T].
            memory: `encode`'s dict, with `"attention_cache"`.
            coverage_on: float32 scalar, 1 while λ > 0.
            loop_weights: optional `DiscourseAttention.loop_weights()`, read
                before a loop: the attention then runs as
                `DiscourseAttention.attend` (teacher forcing; the same math
                in fewer operations per step) instead of its `call`
                (decoding).

        Returns:
            `(new_state, alpha [B,P,T] float32, beta [B,P])`.
        """
        dtype = self.decoder_cell.compute_dtype
        h, c = cell(*(ops.cast(state[k], dtype) for k in ("context", "h", "c")))
        coverage = None
        if self.use_coverage:
            coverage = state["coverage"] * coverage_on
        attention = (
            self.attention if loop_weights is None
            else functools.partial(self.attention.attend, loop_weights=loop_weights)
        )
        context, alpha, beta = attention(
            h,
            memory["word_states"],
            memory["section_states"],
            token_mask=memory["word_mask"],
            section_mask=memory["section_mask"],
            coverage=coverage,
            memory_cache=memory["attention_cache"],
        )
        alpha = ops.cast(alpha, "float32")
        new_state = {
            "h": h,
            "c": c,
            "context": context,
            "coverage": state["coverage"] + alpha,
        }
        return new_state, alpha, beta

    def _output_distribution(self, x, h, context, alpha, memory):
        """Eq. 7-9 from a step's results; nothing of it feeds the next step,
        so teacher forcing runs it once over all S steps.

        Args:
            x: [B,E] (or [B,S,E]), the embedded input words.
            h, context: [B,D] (or [B,S,D]), the cell state and context.
            alpha: [B,P,T] (or [B,S,P,T]), the word weights.
            memory: `encode`'s dict.

        Returns:
            `(log_probabilities [B,V + num_oov], p_gen [B,1])` (or
            [B,S,V + num_oov] and [B,S,1]), float32.
        """
        hidden = self.output_projection(ops.concatenate([h, context], axis=-1))
        vocabulary_probabilities = ops.softmax(
            ops.cast(self.vocabulary_projection(hidden), "float32"), axis=-1
        )
        distribution, p_gen = self.pointer_generator(
            vocabulary_probabilities,
            alpha,
            memory["source_ids"],
            h,
            context,
            x,
            token_mask=memory["word_mask"],
        )
        return ops.log(ops.maximum(distribution, MIN_PROBABILITY)), p_gen

    def _decoder_step(self, ids, state, memory, coverage_on):
        """One decoder step (`step`); teacher forcing runs the same
        `_recurrent_step` and `_output_distribution`.

        Args:
            ids: int [B], the step's input words (extended ids allowed).
            state: dict `h`, `c`, `context` [B,D], `coverage` [B,P,T].
            memory: `encode`'s dict, with `"attention_cache"`.
            coverage_on: float32 scalar, 1 while λ > 0.

        Returns:
            `(log_probabilities [B,V + num_oov], new_state, alpha [B,P,T],
            beta [B,P], p_gen [B,1])`.
        """
        x = self._decoder_inputs(ids)

        def cell(context, h, c):
            _, (h, c) = self.decoder_cell(ops.concatenate([x, context], axis=-1), [h, c])
            return h, c

        new_state, alpha, beta = self._recurrent_step(cell, state, memory, coverage_on)
        log_probabilities, p_gen = self._output_distribution(
            x, new_state["h"], new_state["context"], alpha, memory
        )
        return log_probabilities, new_state, alpha, ops.cast(beta, "float32"), p_gen

    def _initial_state(self, memory):
        return {
            "h": memory["initial_h"],
            "c": memory["initial_c"],
            "context": ops.zeros_like(memory["initial_h"]),
            "coverage": ops.zeros(ops.shape(memory["word_mask"]), "float32"),
        }

    def _with_attention_cache(self, memory):
        """`memory` with `"attention_cache"`: the attention's memory terms
        W_h h [B,P,T,D] and W_h' h_j [B,P,D], projected once (building the
        decoder's layers first, so that no layer is built inside a loop)."""
        if not self.decoder_cell.built:
            self.decoder_cell.build((None, self.embedding_dim + self.hidden_dim))
        if not self.attention.built:
            self.attention.build(
                (None, self.hidden_dim),
                memory["word_states"].shape,
                memory["section_states"].shape,
            )
        if memory.get("attention_cache") is not None:
            return memory
        return dict(
            memory,
            attention_cache=self.attention.project_memory(
                memory["word_states"], memory["section_states"]
            ),
        )

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        """Teacher forcing: int [B,S] → float32 log-probabilities [B,S,V + num_oov].

        The recurrence (cell and attention, `_recurrent_step`) runs in
        one scan over S (`scan_carries`); the attention's memory terms are projected and
        its weights read (`DiscourseAttention.loop_weights`) before it, and
        the output distribution (`_output_distribution`: vocabulary
        softmax, pointer-generator), which no later step reads, runs once
        over all S steps after it. Adds λ · coverage_loss with `add_loss`
        (0 while λ = 0).
        """
        if len(decoder_tokens.shape) != 2:
            raise ValueError(
                f"{self.name}: `decoder_tokens` must be int [B,S], received "
                f"shape {tuple(decoder_tokens.shape)}."
            )
        decoder_tokens = ops.cast(decoder_tokens, "int32")
        coverage_on = self._coverage_on()
        memory = self._with_attention_cache(memory)
        x = self._decoder_inputs(decoder_tokens)  # [B,S,E]
        # The cell's [x; c] W + h U + b as x W_x + [c; h] [W_c; U] + b: x W_x
        # for all steps here, one matmul per step in the loop.
        kernel, recurrent_kernel, bias = (
            ops.cast(weight, self.decoder_cell.compute_dtype)
            for weight in (
                self.decoder_cell.kernel,
                self.decoder_cell.recurrent_kernel,
                self.decoder_cell.bias,
            )
        )
        x_projection = ops.matmul(x, kernel[: self.embedding_dim])  # [B,S,4D]
        state_kernel = ops.concatenate([kernel[self.embedding_dim:], recurrent_kernel], axis=0)
        # The attention's query kernels side by side, and its score vectors.
        attention_weights = self.attention.loop_weights()

        # Each step emits its whole carry; `scan_carries` stacks them.
        def step(carry, x_projection_t):
            state = {k: carry[k] for k in ("h", "c", "context", "coverage")}

            def cell(context, h, c):
                previous = ops.concatenate([context, h], axis=-1)
                z = ops.add(ops.add(x_projection_t, ops.matmul(previous, state_kernel)), bias)
                return lstm_gates(z, c, self.decoder_cell)

            state, alpha, _ = self._recurrent_step(
                cell, state, memory, coverage_on, attention_weights
            )
            carry = dict(state, alpha=alpha)
            return carry, carry

        initial = self._initial_state(memory)
        initial["alpha"] = ops.zeros_like(initial["coverage"])
        steps = scan_carries(step, initial, ops.moveaxis(x_projection, 1, 0))
        h, context, alphas = (ops.moveaxis(steps[k], 0, 1) for k in ("h", "context", "alpha"))
        log_probabilities, _ = self._output_distribution(x, h, context, alphas, memory)
        if self.use_coverage:
            target_mask = None if inputs is None else inputs.get(TARGET_MASK)
            if target_mask is None:
                target_mask = decoder_padding_mask(decoder_tokens, self.pad_id)
            # The coverage each step was given: Σ_(k<t) α_k. Reduced as the
            # compiled NLL is (Σ mask·loss / (B·S)), so λ is See et al.'s.
            loss = coverage_loss(
                alphas, target_mask=target_mask, reduction="sum_over_batch_size"
            )
            self.add_loss(ops.cast(self.coverage_weight, "float32") * loss)
        return log_probabilities

    def initial_cache(self, memory, max_length):
        """`(memory, state)`; the LSTM state needs no room for `max_length`.

        The memory also keeps `"attention_cache"`, the discourse attention's
        memory terms W_h h [B,P,T,D] and W_h' h_j [B,P,D]
        (`DiscourseAttention.project_memory`), projected once instead of at
        every step.
        """
        return self._with_attention_cache(memory), self._initial_state(memory)

    def step(self, ids, index, cache):
        static, state = cache
        log_probabilities, state, alpha, beta, p_gen = self._decoder_step(
            ids, state, static, self._coverage_on()
        )
        batch = ops.shape(ids)[0]
        aux = {
            PARAGRAPH_ATTENTION: beta,
            "attention": ops.reshape(alpha, (batch, -1)),
            "p_gen": ops.cast(p_gen[:, 0], "float32"),
        }
        return log_probabilities, (static, state), aux

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "embedding_dim": self.embedding_dim,
                "num_oov": self.num_oov,
                "use_coverage": self.use_coverage,
                "section_weighting": self.section_weighting,
                "unk_id": self.unk_id,
                "section_encoding": self.section_encoding,
                "use_cudnn": self.use_cudnn,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # A config without the key was saved before `section_encoding`
        # existed, by a model that read the concatenated sections: it must
        # reload with the same outputs, not with the constructor's default.
        config = dict(config)
        config.setdefault("section_encoding", LEGACY_SECTION_ENCODING)
        return super().from_config(config)
