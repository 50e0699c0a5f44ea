"""An ensemble of summarizers that decodes as one: the mean of their
next-token distributions at every step.

    p(y_t | y_<t, x) = Σ_i w_i · p_i(y_t | y_<t, x)          (Σ_i w_i = 1)

This is the ensemble decoding of machine translation and summarization
systems (e.g. a snapshot ensemble of one run's kept epochs: `keras-hsum
export --checkpoint epoch-9+epoch-13+epoch-15`). Unlike checkpoint
averaging (`epochs-A-B`, one model with the mean weights), every member
runs: decoding costs the members' sum.
"""

import math

import keras
from keras import ops

from keras_hsum.models.summarizer import Summarizer


def _member_key(index):
    return f"member_{index}"


@keras.saving.register_keras_serializable(package="keras_hsum")
class SummarizerEnsemble(Summarizer):
    """Decodes with the weighted mean of several `Summarizer`s' next-token
    distributions (see the module docstring).

    The members must share the vocabulary, the extended vocabulary's size
    (`num_oov`) and the special ids, and read the same features (e.g.
    several checkpoints of one run, or runs of one recipe on one
    vocabulary). Copy models' distributions (log-probabilities, over
    the extended vocabulary V + the batch's source OOVs for the discourse
    model) mix the same way: the members score the same ids.

    Args:
        members: list of `keras_hsum.models.Summarizer`s (at least one).
        member_weights: optional list of w_i >= 0 (normalised to sum to 1);
            default uniform.

    Decoding (`keras_hsum.decoding`): `encode` returns `{"member_i": memory
    of member i}`, the cache holds each member's `(memory, state)` under the
    same keys, and `step` returns log Σ_i w_i p_i [B,V'] (log-probabilities,
    which every search accepts as logits). Its aux: each floating-point
    entry is the members' weighted mean (e.g. `paragraph_attention` [B,P]);
    other entries are the first member's (e.g. SEAL's selected snippet ids).

    `call` (teacher forcing) returns the ensemble's log-probabilities
    [B,S,V'] in the same way. The ensemble is for decoding and scoring:
    train its members separately.

    Example:
        >>> def small_model():
        ...     return FlatTransformer(vocabulary_size=20, hidden_dim=8, num_heads=2,
        ...                            intermediate_dim=16, num_encoder_layers=1,
        ...                            num_decoder_layers=1)
        >>> batch = {"tokens": np.random.default_rng(0).integers(4, 20, (2, 9)),
        ...          "decoder_tokens": np.full((2, 3), 2)}
        >>> model_a, model_b = small_model(), small_model()
        >>> p_a, p_b = (ops.convert_to_numpy(ops.softmax(m(batch))) for m in (model_a, model_b))
        >>> ensemble = SummarizerEnsemble([model_a, model_b], member_weights=[3, 1])
        >>> log_probs = ops.convert_to_numpy(ensemble(batch))  # [B,S,V]
        >>> np.allclose(np.exp(log_probs), 0.75 * p_a + 0.25 * p_b, atol=1e-6)
        True
        >>> from keras_hsum.decoding import beam_search
        >>> out = beam_search(ensemble, {"tokens": batch["tokens"]}, beam_size=3,
        ...                   max_length=4)
        >>> tuple(out["sequences"].shape)  # [B,K,L]
        (2, 3, 4)
    """

    def __init__(self, members, member_weights=None, **kwargs):
        members = list(members)
        if not members:
            raise ValueError("SummarizerEnsemble needs at least one member; received none.")
        for index, member in enumerate(members):
            if not isinstance(member, Summarizer):
                raise ValueError(
                    f"SummarizerEnsemble members must be keras_hsum.models.Summarizer "
                    f"models; member {index} is a {type(member).__name__}."
                )
        first = members[0]
        # num_oov: the extended vocabulary's source-OOV slots (the discourse
        # model's copy; 0 for models without one). The members' distributions
        # are mixed id by id, so they must cover the same V + num_oov ids.
        defaults = {"num_oov": 0}
        for index, member in enumerate(members[1:], start=1):
            for attribute in ("pad_id", "bos_id", "eos_id", "vocabulary_size", "num_oov"):
                mine = getattr(member, attribute, defaults.get(attribute))
                theirs = getattr(first, attribute, defaults.get(attribute))
                if mine != theirs:
                    raise ValueError(
                        f"SummarizerEnsemble members must share the vocabulary and "
                        f"special ids: member 0 has {attribute}={theirs}, member "
                        f"{index} has {attribute}={mine}."
                    )
        if member_weights is None:
            member_weights = [1.0] * len(members)
        member_weights = [float(w) for w in member_weights]
        if len(member_weights) != len(members) or not all(
            math.isfinite(w) and w >= 0 for w in member_weights
        ) or not sum(member_weights) > 0:
            raise ValueError(
                f"member_weights must be {len(members)} finite non-negative numbers, "
                f"not all zero (one per member); received {member_weights}."
            )
        kwargs.setdefault("pad_id", first.pad_id)
        kwargs.setdefault("bos_id", first.bos_id)
        kwargs.setdefault("eos_id", first.eos_id)
        super().__init__(**kwargs)
        self.members = members
        total = sum(member_weights)
        self.member_weights = [w / total for w in member_weights]
        if getattr(first, "vocabulary_size", None) is not None:
            self.vocabulary_size = first.vocabulary_size
        self.num_oov = getattr(first, "num_oov", 0)
        if all(member.built for member in members):
            self.built = True

    @property
    def ready_to_decode(self):
        """Whether every member is built (see `Summarizer.ready_to_decode`)."""
        return all(member.ready_to_decode for member in self.members)

    @property
    def segment_length(self):
        """The first member's SEAL segment length (None for other models)."""
        return getattr(self.members[0], "segment_length", None)

    def _mix(self, log_probs):
        """log Σ_i w_i exp(log_probs[i]): the members' log-probabilities
        (each after log-softmax) → the ensemble's, in float32."""
        stacked = ops.stack(
            [ops.log_softmax(ops.cast(x, "float32"), axis=-1) for x in log_probs], axis=0
        )
        log_w = [math.log(w) if w > 0 else -1e30 for w in self.member_weights]
        log_w = ops.reshape(
            ops.convert_to_tensor(log_w, "float32"), (-1,) + (1,) * (len(stacked.shape) - 1)
        )
        return ops.logsumexp(stacked + log_w, axis=0)

    def _mean_aux(self, auxes):
        mixed = {}
        for name, value in auxes[0].items():
            if "float" in str(keras.backend.standardize_dtype(value.dtype)):
                mixed[name] = sum(
                    w * ops.cast(aux[name], value.dtype)
                    for w, aux in zip(self.member_weights, auxes)
                )
            else:
                mixed[name] = value
        return mixed

    def encode(self, inputs, training=False):
        """`{"member_i": members[i].encode(inputs)}`."""
        return {
            _member_key(i): member.encode(inputs, training=training)
            for i, member in enumerate(self.members)
        }

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        """Teacher forcing: int [B,S] → the ensemble's log-probabilities
        float32 [B,S,V']."""
        return self._mix([
            member.decode(decoder_tokens, memory[_member_key(i)], inputs=inputs,
                          training=training)
            for i, member in enumerate(self.members)
        ])

    def initial_cache(self, memory, max_length):
        static, state = {}, {}
        for i, member in enumerate(self.members):
            key = _member_key(i)
            static[key], state[key] = member.initial_cache(memory[key], max_length)
        return static, state

    def beam_cache(self, memory, max_length, beam_size):
        """Each member's own `beam_cache` (PHT members share their memory
        among the K hypotheses; the others get it repeated K times)."""
        static, state = {}, {}
        for i, member in enumerate(self.members):
            key = _member_key(i)
            static[key], state[key] = member.beam_cache(
                memory[key], max_length, beam_size
            )
        return static, state

    def step(self, ids, index, cache):
        """`(ids [B], index, cache) → (log Σ_i w_i p_i [B,V'], cache, aux)`."""
        static, state = cache
        log_probs, auxes = [], []
        new_static, new_state = {}, {}
        for i, member in enumerate(self.members):
            key = _member_key(i)
            logits, (new_static[key], new_state[key]), aux = member.step(
                ids, index, (static[key], state[key])
            )
            log_probs.append(logits)
            auxes.append(aux)
        return self._mix(log_probs), (new_static, new_state), self._mean_aux(auxes)

    def get_config(self):
        config = super().get_config()
        config.update({
            "members": [keras.saving.serialize_keras_object(m) for m in self.members],
            "member_weights": list(self.member_weights),
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["members"] = [
            keras.saving.deserialize_keras_object(m) for m in config["members"]
        ]
        return cls(**config)
