"""Sequence-level training on a ROUGE reward (REINFORCE with a leave-one-out baseline).

Teacher forcing trains every position on the reference's prefix; the
summary a search returns is instead judged whole, by ROUGE. Following
Ranzato et al. (2016) and Paulus et al. (2018), `ReinforceObjective` adds
to the token cross-entropy a policy-gradient term on a sequence reward: for
each training example x with reference y*, K samples y_1..y_K are drawn
from the model (the in-graph `search` with `Sampling`, no gradient; the
padding and BOS ids, which no reference holds, are blocked), each scored

    r_k = mean over the orders n of ROUGE-N F1(y_k, y*)

on token ids (`keras_hsum.decoding.pairwise_rouge_n`: subword pieces, no
stemming, EOS and padding excluded), with the mean of the other samples'
rewards as its baseline (Kool et al. 2019, "Buy 4 REINFORCE samples, get a
baseline for free"),

    b_k = 1 / (K - 1) · Σ_{j ≠ k} r_j,   A_k = r_k - b_k,

so that the reward's scale and the example's difficulty cancel without a
second (greedy) decode. With log p(y_k | x) the teacher-forced
log-probability of the sample (EOS included; dropout as in training) and
w_b ∈ {0, 1} whether example b has a reference token,

    L_RL  = -1 / (B · K · L) · Σ_b w_b Σ_k A_bk · log p(y_bk | x_b)
    L     = (1 - λ) · L_MLE + λ · L_RL

(L: the padded target length, a constant, so L_RL is on the per-token
scale of the label-smoothed cross-entropy L_MLE, which Keras reduces as
Σ mask · loss / (B · L)). The gradient of L_RL is the REINFORCE estimate
of -∇ E[r] / (K · L) per example: A_k is a constant (no gradient flows
through the draws or the rewards).

Choosing λ: per token, the REINFORCE term pulls with λ · |A| / K against
the cross-entropy's 1 - λ. Advantages are small (|A| about 0.05 for
ROUGE-1/2 F1 rewards on scitldr_a), so λ = 0.9 leaves the reward nearly
unchanged, while λ = 0.99 (about 1.2 to 1 at K = 4) raised the held-out
sample reward from 0.117 to 0.140 in 800 steps (benchmarks/quality.py,
flat_copy_shift_rl_scitldr and flat_copy_shift_rl99_scitldr).

Distributed training: under a tf.distribute strategy each replica holds
an equal slice of the global batch, in replica order. Its samples are drawn
from the uniforms of its own rows of the global batch (`hashed_uniforms`'
`first_row`), so the replicas draw what one device draws, and its L_RL is
divided by the number of replicas, as Keras divides the compiled loss, so
that the replicas' losses and gradients sum to those of the global batch
(`keras-hsum train --strategy mirrored|multi_worker`). The model learns its
replica from `Summarizer.replica_placement`, which the trainer sets to
`keras_hsum.training.replica_placement`; a custom tf.distribute loop sets
it the same way.

Use: `model.sequence_objective = ReinforceObjective(weight=0.99)` on a
compiled `Summarizer`; its `compute_loss` then adds the term while
training (evaluation keeps the plain cross-entropy, so `val_loss` stays
comparable). `keras-hsum train --set reinforce_weight=0.99 [--set
reinforce_samples=4]` does this from a recipe config, usually with
`--init-from` a trained run. The objective is not part of the saved model:
a checkpoint reloads as the plain `Summarizer`.
"""

import dataclasses

from keras import ops

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import TARGET_MASK
from keras_hsum.decoding.beam_search import model_search
from keras_hsum.decoding.mbr import pairwise_rouge_n
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.decoding.terms import TokenBlocking
from keras_hsum.models.losses import reference_weights


def rouge_rewards(samples, lengths, reference, *, eos_id, pad_id=0, orders=(1, 2)):
    """ROUGE-N F1 of each sample against its example's reference, on token ids.

    Args:
        samples: int [B,K,L] sampled token ids (EOS included, then padding).
        lengths: int [B,K], tokens of each sample (EOS included).
        reference: int [B,S] reference ids (EOS and padding are not counted).
        eos_id, pad_id: ids that are not content.
        orders: the n-gram orders averaged.

    Returns:
        float32 [B,K]: mean over `orders` of ROUGE-N F1 (0 for an order that
        neither has an n-gram of).
    """
    if not orders:
        raise ValueError("rouge_rewards needs at least one n-gram order; received orders=().")
    samples = ops.cast(samples, "int32")
    reference = ops.cast(reference, "int32")
    length = ops.shape(samples)[-1]
    ref_length = ops.shape(reference)[-1]
    width = ops.maximum(length, ref_length)
    if samples.shape[-1] is not None and reference.shape[-1] is not None:
        width = max(samples.shape[-1], reference.shape[-1])
    samples = ops.pad(samples, [[0, 0], [0, 0], [0, width - length]], constant_values=pad_id)
    reference = ops.pad(reference, [[0, 0], [0, width - ref_length]], constant_values=pad_id)
    positions = ops.arange(width, dtype="int32")
    sample_valid = positions[None, None, :] < ops.cast(lengths, "int32")[:, :, None]
    sequences = ops.concatenate([samples, reference[:, None, :]], axis=1)  # [B,K+1,W]
    valid = ops.concatenate(
        [sample_valid, ops.ones_like(reference[:, None, :], dtype="bool")], axis=1
    )
    valid = ops.logical_and(valid, ops.not_equal(sequences, eos_id))
    valid = ops.logical_and(valid, ops.not_equal(sequences, pad_id))
    reward = 0.0
    for n in orders:
        n = int(n)
        if isinstance(width, int) and n > width:
            continue
        reward = reward + pairwise_rouge_n(sequences, valid, n)[:, :-1, -1]
    return ops.cast(reward, "float32") / float(len(orders))


def leave_one_out_advantages(rewards):
    """float [B,K] rewards → A_k = r_k - mean of the other K - 1 rewards."""
    rewards = ops.cast(rewards, "float32")
    K = ops.shape(rewards)[-1]
    if rewards.shape[-1] is not None and rewards.shape[-1] < 2:
        raise ValueError(
            "The leave-one-out baseline needs at least 2 samples per example; "
            f"received rewards of shape {tuple(rewards.shape)}."
        )
    total = ops.sum(rewards, axis=-1, keepdims=True)
    baseline = (total - rewards) / ops.cast(K - 1, "float32")
    return rewards - baseline


def sequence_log_probs(model, inputs, samples, lengths, training=True):
    """log p(y_k | x) [B,K] of samples under teacher forcing.

    Args:
        model: a `Summarizer`.
        inputs: the batch's feature dict (batch B; `decoder_tokens` and
            `target_mask`, if any, are replaced).
        samples: int [B,K,L]; lengths: int [B,K] (EOS included).
        training: the model's training flag (dropout).

    Returns:
        float32 [B,K]: Σ over the first `lengths` positions of log p(y_t | y_<t, x).
    """
    samples = ops.cast(samples, "int32")
    B, K, L = ops.shape(samples)[0], ops.shape(samples)[1], ops.shape(samples)[2]
    K_static = samples.shape[1]
    flat = ops.reshape(samples, (-1, L))  # row b·K + k
    bos = ops.full((ops.shape(flat)[0], 1), model.bos_id, dtype="int32")
    decoder_tokens = ops.concatenate([bos, flat[:, :-1]], axis=1)
    positions = ops.arange(L, dtype="int32")
    mask = positions[None, :] < ops.reshape(ops.cast(lengths, "int32"), (-1, 1))
    tiled = {
        key: ops.repeat(value, K_static, axis=0)
        for key, value in inputs.items()
        if key not in (DECODER_TOKENS, TARGET_MASK) and value is not None
    }
    tiled[DECODER_TOKENS] = ops.where(mask, decoder_tokens, model.pad_id)
    # BOS always counts as real (decoder_padding_mask keeps position 0).
    tiled[TARGET_MASK] = mask
    logits = model(tiled, training=training)  # [B·K, L, V]
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    picked = ops.squeeze(ops.take_along_axis(log_probs, flat[..., None], axis=-1), -1)
    total = ops.sum(ops.where(mask, picked, 0.0), axis=-1)
    return ops.reshape(total, (B, K))


@dataclasses.dataclass(frozen=True)
class ReinforceObjective:
    """The sequence-level term of the module docstring.

    Attributes:
        weight: λ in (0, 1]: L = (1 - λ) · L_MLE + λ · L_RL (see "Choosing λ"
            in the module docstring).
        num_samples: K >= 2 samples per example.
        orders: n-gram orders of the reward (ROUGE-1 and ROUGE-2 F1).
        sampling: a `keras_hsum.decoding.Sampling` (or its dict): the
            sampling distribution (the default draws from the model) and the
            draws' seed; each training step mixes its step number into the
            seed (the optimizer's step; under JAX, the model's own count of
            training steps, which restarts at 0 for a new model object), so
            a run is reproducible and every step draws new samples.
    """

    weight: float = 0.99
    num_samples: int = 4
    orders: tuple = (1, 2)
    sampling: Sampling = Sampling()

    def __post_init__(self):
        problems = []
        if not 0 < self.weight <= 1:
            problems.append(f"weight in (0, 1] (received {self.weight!r})")
        if int(self.num_samples) != self.num_samples or self.num_samples < 2:
            problems.append(f"num_samples an integer >= 2 (received {self.num_samples!r})")
        orders = tuple(self.orders)
        if not orders or any(int(n) != n or n < 1 for n in orders):
            problems.append(f"orders a non-empty tuple of integers >= 1 (received {self.orders!r})")
        if problems:
            raise ValueError("ReinforceObjective expects " + "; ".join(problems) + ".")
        object.__setattr__(self, "orders", tuple(int(n) for n in orders))
        if isinstance(self.sampling, dict):  # Sampling checks its settings
            object.__setattr__(self, "sampling", Sampling(**self.sampling))
        if not isinstance(self.sampling, Sampling):
            raise ValueError(
                "ReinforceObjective expects `sampling` a keras_hsum.decoding.Sampling "
                f"or its dict; received {self.sampling!r}."
            )

    def get_config(self):
        config = dataclasses.asdict(self)  # `sampling` becomes its dict
        config["orders"] = list(self.orders)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def sample_rewards(self, model, inputs, labels, step=None, first_row=None):
        """Draws K samples per example (no gradient) and scores them.

        Args:
            model: the `Summarizer`.
            inputs: its feature dict (teacher-forcing keys are ignored).
            labels: int [B,S] reference ids of static length S.
            step: an integer scalar mixed into the seed (None: the seed alone).
            first_row: the row of the global batch that this batch's first
                example is (a replica's slice; None: 0), so that each row
                draws the same samples however the batch is split.

        Returns:
            `(samples int32 [B,K,S], lengths int32 [B,K], rewards float32 [B,K])`.
        """
        labels = ops.cast(labels, "int32")
        length = labels.shape[-1]
        if length is None:
            raise ValueError(
                "ReinforceObjective needs labels of static length (batches padded "
                "to the config's max_target_length); received labels of shape "
                f"{tuple(labels.shape)}."
            )
        encoder_inputs = {
            key: value for key, value in inputs.items()
            if key not in (DECODER_TOKENS, TARGET_MASK)
        }
        # Padding and BOS are never targets; a sample holding one would be
        # scored by teacher forcing on another input than it was drawn
        # from (a pad id is masked as padding there).
        blocking = [TokenBlocking(sorted({int(model.pad_id), int(model.bos_id)}))]
        result = model_search(
            model, encoder_inputs, self.num_samples, length, blocking, None, None, False,
            self.sampling, step, first_row,
        )
        samples = ops.stop_gradient(result["sequences"])
        lengths = ops.stop_gradient(result["lengths"])
        rewards = rouge_rewards(samples, lengths, labels, eos_id=model.eos_id,
                                pad_id=model.pad_id, orders=self.orders)
        return samples, lengths, ops.stop_gradient(rewards)

    def terms(self, model, inputs, labels, sample_weight=None, step=None, training=True,
              first_row=None):
        """The sampled rewards and the RL loss of one batch.

        Args:
            model: the `Summarizer` being trained.
            inputs: its teacher-forcing feature dict.
            labels: int [B,S] reference ids (EOS last, then padding).
            sample_weight: optional float [B,S], the label mask.
            step: an integer scalar mixed into the seed (the optimizer step).
            first_row: see `sample_rewards`.

        Returns:
            dict: `samples` int32 [B,K,S], `lengths` [B,K], `rewards`
            float32 [B,K], `advantages` [B,K], `log_probs` [B,K], `weights`
            float32 [B] (w_b), `loss` (the scalar L_RL).
        """
        labels = ops.cast(labels, "int32")
        length = labels.shape[-1]
        samples, lengths, rewards = self.sample_rewards(model, inputs, labels, step, first_row)
        advantages = ops.stop_gradient(leave_one_out_advantages(rewards))
        log_probs = sequence_log_probs(model, inputs, samples, lengths, training=training)
        weights = reference_weights(labels, sample_weight, model.pad_id)
        batch = ops.cast(ops.shape(labels)[0], "float32")
        loss = -ops.sum(weights[:, None] * advantages * log_probs) / (
            batch * float(self.num_samples) * float(length)
        )
        return {"samples": samples, "lengths": lengths, "rewards": rewards,
                "advantages": advantages, "log_probs": log_probs, "weights": weights,
                "loss": loss}
