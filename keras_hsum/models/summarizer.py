"""The contract every abstractive recipe model follows.

A `Summarizer` is a `keras.Model` whose `call` is teacher-forced training
only; decoding (`keras_hsum.decoding`) drives the same weights one token at a
time through three methods:

    memory = model.encode(inputs)                 # once per example
    cache = model.initial_cache(memory, max_length)
    logits, cache, aux = model.step(ids, index, cache)   # once per position

`inputs` is the dict of features that `keras_hsum.data.make_dataset` gives
the model's family (`tokens`, `token_mask`, `paragraph_mask`, ...), plus
`decoder_tokens` [B,S] when teacher forcing. `ids` int32 [B] are the tokens
at position `index` (BOS at 0) and `logits` float32 [B,V'] score the token at
`index + 1` (V' = V, or V + source OOVs for pointer-generator copy: then the
"logits" are log-probabilities, which every search treats the same way).

`cache` is a pair `(memory, state)`: `memory` is constant while decoding and
equal across the beams of one example, so a search never reorders it (it
tiles it K times, along axis 0, or the model shares it: `beam_cache`);
`state` holds per-hypothesis tensors of fixed shape (self-attention
key/value caches, coverage, LSTM states, SEAL's currently selected memory)
that a search gathers when it reorders beams. Both are dicts of tensors with
the batch on axis 0. A search for K hypotheses per example asks for the
cache with `model.beam_cache(memory, max_length, K)`: by default it repeats
`memory` K times and calls `initial_cache`; a model whose `step` can read
one copy of an example's memory for its K hypotheses (rows b·K + k of
`state` and `ids` reading row b of `memory`) overrides it and keeps `memory`
[B,...] (PHT and the models on `TransformerSummaryDecoder` but SEAL,
whose hypotheses select their own memory: the beams then share their
cross-attention keys and values).
`aux` is a dict of per-step float32 tensors, always with the same keys for a
model: `"paragraph_attention"` [B,P] (how much the step attended to each
paragraph/section/snippet; what PHT's attention alignment sums) and
model-specific entries documented by each model.
"""

import keras
from keras import ops

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_model_features
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.models.first_call import call_without_unbuilt_warnings
from keras_hsum.models.losses import reference_weights

PAD_ID = 0
BOS_ID = 2
EOS_ID = 3


class Summarizer(keras.Model):
    """Base class of the abstractive models: teacher-forced `call` + decoding steps.

    Subclasses implement `encode`, `decode`, `initial_cache` and `step`; the
    base class gives `call` (teacher forcing), the special ids, and the
    documented decoding contract (see the module docstring).

    Args:
        pad_id, bos_id, eos_id: the vocabulary's special ids (keras_hsum's
            `Vocabulary` uses 0, 2 and 3).
    """

    @property
    def sequence_objective(self):
        """An optional sequence-level training term (`keras_hsum.decoding.
        ReinforceObjective`) that `compute_loss` adds while training. Not
        part of the config: a saved model reloads without it."""
        return self.__dict__.get("_sequence_objective")

    @sequence_objective.setter
    def sequence_objective(self, objective):
        self._sequence_objective = objective
        if (objective is not None and keras.backend.backend() == "jax"
                and self.__dict__.get("_draw_counter") is None):
            # JAX's `fit` traces the step without the optimizer's variables,
            # so the draws count steps with a seed generator of their own: a
            # non-trainable state that `fit` carries from step to step and
            # that is not saved with the weights. Attaching it to a built
            # model is allowed here (as Keras itself does when untracking).
            locked = self._tracker.locked
            self._tracker.unlock()
            self._draw_counter = keras.random.SeedGenerator(0, name="draw_counter")
            if locked:
                self._tracker.lock()

    @property
    def ready_to_decode(self):
        """Whether decoding may start: the model is built (one teacher-forced
        call, training or loading builds it; `step` reads layers' weights
        directly)."""
        return self.built

    @property
    def replica_placement(self):
        """A callable returning `(replica id, replicas in sync)` of the
        replica context `compute_loss` runs in, which places a
        `sequence_objective`'s draws and scales its term under a
        distribution strategy. Default `single_replica`, `(0, 1)`; the
        TensorFlow trainer sets `keras_hsum.training.replica_placement`
        (tf.distribute). Not part of the config."""
        return self.__dict__.get("_replica_placement", single_replica)

    @replica_placement.setter
    def replica_placement(self, placement):
        self.__dict__["_replica_placement"] = placement

    def __init__(self, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.eos_id = eos_id

    def encode(self, inputs, training=False):
        """Runs the encoder. Returns `memory`, a dict of batch-major tensors."""
        raise NotImplementedError

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        """Teacher-forced decoder: int [B,S] tokens → float32 logits [B,S,V']."""
        raise NotImplementedError

    def initial_cache(self, memory, max_length):
        """Returns `(memory, state)` for `step`, with room for `max_length` tokens."""
        raise NotImplementedError

    def step(self, ids, index, cache):
        """One decoding step: `(ids [B], index, cache) → (logits [B,V'], cache, aux)`."""
        raise NotImplementedError

    def beam_cache(self, memory, max_length, beam_size):
        """The cache of `beam_size` = K hypotheses per example of `memory`.

        Args:
            memory: `encode`'s dict, batch B on axis 0.
            max_length: int, as for `initial_cache`.
            beam_size: int K.

        Returns:
            `(memory, state)` for `step` with `ids` [B·K] (row b·K + k is
            hypothesis k of example b); `state` leaves have B·K rows. This
            default repeats every memory leaf K times (row b·K + k) and
            calls `initial_cache`; models whose `step` shares one memory row
            among K hypotheses override it.
        """
        tiled = keras.tree.map_structure(
            lambda x: None if x is None else ops.repeat(x, int(beam_size), axis=0),
            memory,
        )
        return self.initial_cache(tiled, max_length)

    def _check_teacher_forcing(self, inputs):
        if isinstance(inputs, dict) and DECODER_TOKENS not in inputs:
            raise ValueError(
                f"{self.name}: `call` is teacher-forced training and needs "
                "`decoder_tokens` [B,S] among the inputs (use "
                "keras_hsum.data.training_pairs); received keys "
                f"{sorted(inputs)}. To summarize, use keras_hsum.decoding."
            )

    def __call__(self, inputs, *args, **kwargs):
        # Checked before Keras builds an unbuilt model by tracing `call`;
        # the model's other input errors reach the user without Keras'
        # "unbuilt state" warnings (keras_hsum.models.first_call).
        self._check_teacher_forcing(inputs)
        check_model_features(self, inputs)
        return call_without_unbuilt_warnings(self, super().__call__, inputs, *args, **kwargs)

    def call(self, inputs, training=False):
        """Teacher forcing: `inputs` with `decoder_tokens` [B,S] → logits [B,S,V']."""
        self._check_teacher_forcing(inputs)
        memory = self.encode(inputs, training=training)
        return self.decode(
            inputs[DECODER_TOKENS], memory, inputs=inputs, training=training
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss, mixed with `sequence_objective`'s term while training."""
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        objective = self.sequence_objective
        if objective is None:
            return loss
        # A keras.metrics.Mean that the trainer adds: `reward` and `val_reward`
        # in the progress bar and the history.
        tracker = getattr(self, "reward_tracker", None)
        if training:
            replica, replicas = self.replica_placement()
            # Under a tf.distribute strategy this batch is one replica's
            # slice (equal slices, in replica order) of the global batch:
            # its draws are those one device makes for the same rows, and
            # its term is divided by the replicas, as Keras divides the
            # compiled loss, so that the replicas' gradients sum to the
            # global batch's.
            first_row = None if replicas == 1 else replica * ops.shape(y)[0]
            terms = objective.terms(
                self, x, y, sample_weight=sample_weight, step=_draw_stream(self),
                first_row=first_row,
            )
            rewards, weights = terms["rewards"], terms["weights"]
            loss = (1.0 - objective.weight) * loss + (
                objective.weight * terms["loss"] / float(replicas))
        elif tracker is not None:
            # The same draws at every evaluation (the seed alone), so that
            # `val_reward` compares epochs.
            rewards = objective.sample_rewards(self, x, y)[2]
            weights = reference_weights(y, sample_weight, self.pad_id)
        else:
            return loss
        if tracker is not None:
            tracker.update_state(rewards, weights[:, None] * ops.ones_like(rewards))
        return loss

    def get_config(self):
        config = super().get_config()
        config.update(
            {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        )
        return config


def single_replica():
    """`(replica id, replicas in sync)` on one device: `(0, 1)`."""
    return 0, 1


def _draw_stream(model):
    """The integer that `ReinforceObjective` mixes into its seed at a training
    step, so that each step draws new samples: the optimizer's step (which
    a resumed run restores). JAX's `fit` traces the step without the
    optimizer's variables, so there it is the count of training steps taken
    by the model's own draw counter (from 0 for each new model object: a
    resumed or reloaded run counts again from 0)."""
    if keras.backend.backend() == "jax":
        return ops.cast(model._draw_counter.next()[1], "int32")
    if model.optimizer is not None:
        return ops.convert_to_tensor(model.optimizer.iterations)
    return ops.convert_to_tensor(0, "int64")


def decoder_padding_mask(decoder_tokens, pad_id=PAD_ID):
    """bool [B,S]: True at real target positions (the first one, BOS, always)."""
    mask = ops.not_equal(decoder_tokens, pad_id)
    first = ops.arange(ops.shape(decoder_tokens)[1]) == 0
    return ops.logical_or(mask, first[None, :])


def required(model, inputs, name, symbols):
    """`inputs[name]`, or a ValueError naming the missing feature."""
    if name not in inputs:
        raise ValueError(
            f"{model.name}: inputs need `{name}` {symbols}; received keys "
            f"{sorted(inputs)}. Build batches with keras_hsum.data.make_dataset "
            "for this model's family (see its recipe)."
        )
    return inputs[name]


def optional_mask(inputs, name, like):
    """bool mask `inputs[name]`, or all True with the shape of `like`."""
    if name in inputs and inputs[name] is not None:
        return as_bool_mask(inputs[name])
    return ops.ones(ops.shape(like), dtype="bool")


def flat_tokens(model, tokens, mask):
    """`(tokens, mask)` as one flat sequence: int [B,N] and its mask as they
    are, [B,P,T] reshaped to [B,P·T]; a ValueError for any other rank."""
    if len(tokens.shape) == 3:
        tokens = ops.reshape(tokens, (ops.shape(tokens)[0], -1))
        mask = ops.reshape(mask, (ops.shape(mask)[0], -1))
    elif len(tokens.shape) != 2:
        raise ValueError(
            f"{model.name}: `tokens` must be int [B,N] or [B,P,T], received "
            f"shape {tuple(tokens.shape)}."
        )
    return tokens, mask


def paragraph_source_masks(model, inputs):
    """`(tokens int [B,P,T], token_mask bool [B,P,T], paragraph_mask bool
    [B,P])` of a paragraphs-family batch: the masks given, or tokens != pad
    and any(token_mask, -1); a padded paragraph's tokens are masked too (it
    pools to zero). A ValueError names any other rank."""
    tokens = required(model, inputs, TOKENS, "int [B,P,T]")
    if len(tokens.shape) != 3:
        raise ValueError(
            f"{model.name}: `tokens` must be int [B,P,T] (paragraphs of "
            f"tokens, the 'paragraphs' family), received shape "
            f"{tuple(tokens.shape)}. Build batches with "
            "keras_hsum.data.make_dataset(..., 'paragraphs', ...)."
        )
    if inputs.get(TOKEN_MASK) is not None:
        token_mask = as_bool_mask(inputs[TOKEN_MASK])
    else:
        token_mask = ops.not_equal(tokens, model.pad_id)
    if inputs.get(PARAGRAPH_MASK) is not None:
        paragraph_mask = as_bool_mask(inputs[PARAGRAPH_MASK])
    else:
        paragraph_mask = ops.any(token_mask, axis=-1)
    if len(token_mask.shape) != 3 or len(paragraph_mask.shape) != 2:
        raise ValueError(
            f"{model.name}: `token_mask` must be bool [B,P,T] and "
            f"`paragraph_mask` bool [B,P] (tokens: {tuple(tokens.shape)}); "
            f"received {tuple(token_mask.shape)} and "
            f"{tuple(paragraph_mask.shape)}. Pass the masks that "
            "keras_hsum.data.make_dataset(..., 'paragraphs', ...) gives."
        )
    token_mask = ops.logical_and(token_mask, paragraph_mask[:, :, None])
    return tokens, token_mask, paragraph_mask


def rows_per_hypothesis(tree, rows):
    """`tree`'s leaves (batch on axis 0) with `rows` rows: each example's
    row repeated K = rows / B times (row b·K + k = example b), as a step
    whose cache shares the memory among K hypotheses returns per-example
    aux; unchanged when they already have `rows` rows."""

    def repeated(x):
        examples = ops.shape(x)[0]
        if isinstance(examples, int) and isinstance(rows, int) and examples == rows:
            return x
        return ops.repeat(x, rows // examples, axis=0)

    return keras.tree.map_structure(repeated, tree)
