"""A recipe's training step on synthetic batches, without TensorFlow.

`synthetic_batch(name, config, batch)` gives `(inputs, labels,
sample_weight)` numpy arrays of the shapes the recipe's `make_dataset`
yields for `config` (the family's features as `keras_hsum.features`
declares them, every axis padded to the config's maxima as `recipes.base.
batches` pads, the recipe's extras, the teacher-forcing split of
`keras_hsum.data.training_pairs`), filled with random ids and full rows.
`build(name, config)` builds the recipe's model under a dtype policy;
`TrainStep` is one `jax.jit`-compiled stateless step: forward, the recipe's
loss (`keras_hsum.training.model_setup.recipe_loss`) plus the model's own
losses, backward, and the recipe's optimizer update (`make_optimizer`),
the state donated, as Keras' JAX `fit` compiles it without its metrics.

Only JAX, Keras, keras-hub and numpy are needed: benchmarks/accelerator.py
runs this where TensorFlow is absent, and tests/test_no_tensorflow.py runs
it with TensorFlow blocked from import.
"""

import math

import numpy as np

from keras_hsum import features as F

BOS, EOS, FIRST_ID = 2, 3, 4  # the project's special ids (pad 0, unk 1)
CONTEXT_LENGTH = 32  # the "paragraphs" family's default context_length


def _teacher_forced(name, config):
    """(family, sizes {axis: size}, extras {feature: Feature}) of a
    sequence-to-sequence recipe's examples under `config`."""
    S = config.max_target_length
    if name == "pht":
        return "paragraphs", F.axis_sizes(
            config.max_paragraphs, config.max_paragraph_tokens, S, CONTEXT_LENGTH), {}
    if name == "ht":
        extras = {}
        if config.graph_kind:
            extras[F.GRAPH] = F.Feature("float32", ("P", "P"))
        return "paragraphs", F.axis_sizes(
            config.max_paragraphs, config.paragraph_length, S, CONTEXT_LENGTH), extras
    if name == "flat":
        return "flat", F.axis_sizes(None, config.max_source_length, S), {}
    if name == "discourse":
        extras = {}
        if getattr(config, "num_oov", 0):
            extras[F.SOURCE_EXTENDED_IDS] = F.Feature("int32", ("P", "T"))
        return "sections", F.axis_sizes(
            config.max_sections, config.max_section_length, S), extras
    if name in ("seal", "extractive_abstractive", "compressive_abstractive"):
        extras = {}
        if name != "compressive_abstractive":
            extras[F.PROXY_LABELS] = F.Feature("float32", ("P",))
        if name == "seal":
            segments = math.ceil((S - 1) / config.segment_length)  # recipes.seal.num_segments
            extras[F.SEGMENT_LABELS] = F.Feature("float32", (segments, "P"))
        return "snippets", F.axis_sizes(config.max_snippets, config.snippet_length, S), extras
    return None


TEACHER_FORCED = ("pht", "ht", "flat", "discourse", "seal", "extractive_abstractive",
                  "compressive_abstractive")
RECIPES = (*TEACHER_FORCED, "shte", "ranker", "pht_predictor")
"""The recipes `synthetic_batch` knows (every recipe in recipes/)."""


def _fill(name, feature, shape, vocabulary_size, rng):
    if feature.dtype == "bool":
        return np.ones(shape, bool)
    if name in F.TOKEN_FEATURES:
        return rng.integers(FIRST_ID, vocabulary_size, shape).astype(feature.dtype)
    if name == F.PARAGRAPH_INDEX:
        return np.broadcast_to(np.arange(shape[-1]), shape).astype(feature.dtype)
    if feature.dtype.startswith("int"):
        return np.zeros(shape, feature.dtype)
    return rng.random(shape).astype(feature.dtype)


def _features(declared, sizes, batch, vocabulary_size, rng):
    out = {}
    for name, feature in declared.items():
        if feature.dtype == "string":
            continue
        shape = [batch] + [a if isinstance(a, int) else sizes[a] for a in feature.axes]
        out[name] = _fill(name, feature, shape, vocabulary_size, rng)
    return out


def synthetic_batch(name, config, batch, seed=0):
    """`(inputs, labels, sample_weight)` of recipe `name` under `config`.

    Args:
        name: a recipe name (`RECIPES`).
        config: the recipe's config (its sizes give the shapes).
        batch: B, examples in the batch.
        seed: the random ids' seed.

    Returns:
        Numpy arrays: sequence-to-sequence recipes give the family's
        features plus `decoder_tokens` int32 [B,S-1] (BOS first) and
        `target_mask` bool [B,S-1], labels int32 [B,S-1] (EOS last) and
        sample weights float32 [B,S-1]; SHTE gives the document and summary
        features, labels int32 [B] and weights float32 [B]; the ranker the
        paragraphs' features, targets float32 [B,P] and weights [B,P]; the
        PHT predictor `paragraph_embeddings` float32 [B,P,D] with
        `paragraph_mask`, η float32 [B,P] (rows summing to 1) and weights
        [B,P].

    Raises:
        ValueError: for a recipe this module does not know.
    """
    rng = np.random.default_rng(seed)
    V = config.vocabulary_size
    if name in TEACHER_FORCED:
        family, sizes, extras = _teacher_forced(name, config)
        declared = {**F.family_features(family, with_target=True), **extras}
        x = _features(declared, sizes, batch, V, rng)
        target = x.pop(F.TARGET)
        target[:, 0], target[:, -1] = BOS, EOS
        labels = target[:, 1:]
        x["decoder_tokens"] = target[:, :-1]
        x["target_mask"] = labels != 0
        return x, labels, x["target_mask"].astype("float32")
    if name == "shte":
        sizes = F.axis_sizes(config.max_sentences, config.max_sentence_tokens)
        x = _features(F.family_features("sentences"), sizes, batch, V, rng)
        x.pop(F.DOCUMENT_IDS)  # not an SHTE input (recipes/shte.py's _INPUT_KEYS)
        rows = dict(sizes, P=config.max_summary_sentences)
        summary = {n: F.Feature(f.dtype, tuple("P" if a is None else a for a in f.axes))
                   for n, f in F.SUMMARY_FEATURES.items()}
        x.update(_features(summary, rows, batch, V, rng))
        labels = (np.arange(batch) % 2).astype("int32")  # positives and negatives
        return x, labels, np.ones(batch, "float32")
    if name == "ranker":
        sizes = F.axis_sizes(config.max_paragraphs, config.paragraph_length,
                             context_length=config.context_length)
        x = _features(F.family_features("paragraphs"), sizes, batch, V, rng)
        targets = rng.random((batch, config.max_paragraphs)).astype("float32")
        return x, targets, x[F.PARAGRAPH_MASK].astype("float32")
    if name == "pht_predictor":
        P = config.max_paragraphs
        x = {"paragraph_embeddings": rng.standard_normal(
                 (batch, P, config.hidden_dim)).astype("float32"),
             F.PARAGRAPH_MASK: np.ones((batch, P), bool)}
        eta = rng.random((batch, P)).astype("float32")
        return x, eta / eta.sum(-1, keepdims=True), np.ones((batch, P), "float32")
    raise ValueError(
        f"synthetic_batch knows the recipes {list(RECIPES)}; received {name!r}. "
        "Add its features to benchmarks/recipe_steps.py.")


def build(recipe, name, config, policy="float32", seed=0):
    """The recipe's model (`recipe.build_model(config, V)`) built under the
    dtype `policy` by one call on a batch of one example; the global policy
    is restored afterwards."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(seed)
        model = recipe.build_model(config, config.vocabulary_size)
        x, _, _ = synthetic_batch(name, config, 1, seed=seed)
        try:  # symbolic: no arithmetic, fast at paper sizes
            model({k: keras.KerasTensor(v.shape, v.dtype.name) for k, v in x.items()},
                  training=False)
        except Exception:  # noqa: BLE001 (a model that cannot trace symbolically)
            model = recipe.build_model(config, config.vocabulary_size)
            model(x, training=False)
    finally:
        keras.config.set_dtype_policy(previous)
    return model


class TrainStep:
    """One jitted stateless training step of a built model.

    `step(state, x, y, w) -> (loss, state)`, `state` = (trainable values,
    non-trainable values, optimizer variables), donated. `initial_state()`
    copies the model's and the optimizer's current values.

    Args:
        recipe: the recipe module (its `loss(config)` or the default).
        config: its config (optimizer settings).
        model: the built model.
        policy: the dtype policy the step traces under (the model's).
    """

    def __init__(self, recipe, config, model, policy="float32"):
        import jax

        from keras_hsum.training.model_setup import make_optimizer
        from keras_hsum.training.model_setup import recipe_loss

        self.model, self.policy = model, policy
        self.loss_object = recipe_loss(recipe, config)
        self.optimizer = make_optimizer(config, model)
        self.optimizer.build(model.trainable_variables)
        self.step = jax.jit(self._step, donate_argnums=0)

    def _loss(self, trainable, non_trainable, x, y, w):
        y_pred, non_trainable, losses = self.model.stateless_call(
            trainable, non_trainable, x, training=True, return_losses=True)
        loss = self.loss_object(y, y_pred, sample_weight=w)
        for extra in losses:
            loss = loss + extra
        return loss, non_trainable

    def _step(self, state, x, y, w):
        import jax

        trainable, non_trainable, optimizer_variables = state
        (loss, non_trainable), grads = jax.value_and_grad(self._loss, has_aux=True)(
            trainable, non_trainable, x, y, w)
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_variables)

    def initial_state(self):
        import jax.numpy as jnp

        return ([jnp.array(v.value) for v in self.model.trainable_variables],
                [jnp.array(v.value) for v in self.model.non_trainable_variables],
                [jnp.array(v.value) for v in self.optimizer.variables])

    def lower(self, state, x, y, w):
        """`jax.jit(...).lower` under the step's dtype policy."""
        return self._under_policy(lambda: self.step.lower(state, x, y, w))

    def jaxpr(self, state, x, y, w):
        """The step's closed jaxpr (`jax.make_jaxpr`) under its dtype policy."""
        import jax

        return self._under_policy(lambda: jax.make_jaxpr(self._step)(state, x, y, w))

    def _under_policy(self, function):
        import keras

        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.policy)
        try:
            return function()
        finally:
            keras.config.set_dtype_policy(previous)
