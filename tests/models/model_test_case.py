"""Shared checks for recipe models (both backends).

- `assert_step_matches_call`: decoding one token at a time through
  `encode`/`initial_cache`/`step` gives the teacher-forced logits (the
  decoding contract of `keras_hsum.models.summarizer`), eagerly and, on
  TensorFlow, inside one `tf.function` (jit_compile when asked).
- `assert_beam_cache_step_matches_call`: the same with `beam_cache`'s
  K hypotheses per example (different targets), eager and jit-compiled on
  both backends.
- `assert_beam_cache_shares_the_memory`: `beam_cache` keeps one copy of
  each example's memory for its K hypotheses, and its steps (logits and
  aux) equal those on the memory repeated K times.
- `assert_save_reload`: a `.keras` round trip gives the same outputs.
- `memorize`: fits a compiled model on a few examples for a number of
  epochs and returns the final masked token accuracy, measured by an
  independent numpy argmax over `model.predict` (not by Keras' metric).
- `assert_token_shift_contract`, `set_token_shift_kernel`: models with a
  `TokenShift` on their source.
- `held_out_accuracy`, `span_task`: learning properties measured on
  held-out examples (the span-continuation task of the token shift).
- `real_batch`: a batch of real bundled examples for a recipe.
"""

import os

import keras
import numpy as np
from keras import ops


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def _tree_map(fn, tree):
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_tree_map(fn, v) for v in tree)
    return fn(tree)


def random_flat_inputs(seed=0, batch=2, source=9, target=6, vocabulary=60):
    """Random flat-family features: int `tokens` [B,N] (row 1 padded from
    N/2), `token_mask`, and `decoder_tokens` [B,S] (BOS first, row 1 padded
    at its last 2 positions)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, vocabulary, (batch, source)).astype("int32")
    tokens[1, source // 2:] = 0
    decoder = rng.integers(4, vocabulary, (batch, target)).astype("int32")
    decoder[:, 0] = 2
    decoder[1, target - 2:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0, "decoder_tokens": decoder}


def real_positions(inputs, pad_id=0):
    """bool [B,S]: real decoder positions (padding after the target is not
    decoded, so only these must agree)."""
    tokens = np.asarray(inputs["decoder_tokens"])
    real = tokens != pad_id
    real[:, 0] = True
    return real


def decode_teacher_forced(model, inputs, length, cache=None):
    """Runs `step` `length` times on `inputs["decoder_tokens"]`, from `cache`
    (default: `initial_cache` of the encoded inputs); returns (logits
    [B,length,V'] numpy, list of aux dicts (numpy))."""
    if cache is None:
        cache = model.initial_cache(model.encode(inputs), length)
    tokens = ops.convert_to_tensor(inputs["decoder_tokens"])
    logits, auxes = [], []
    for index in range(length):
        step_logits, cache, aux = model.step(tokens[:, index], index, cache)
        logits.append(to_numpy(step_logits))
        auxes.append(_tree_map(to_numpy, aux))
    return np.stack(logits, axis=1), auxes


def assert_step_matches_call(model, inputs, atol=1e-4, check_aux_keys=True):
    """`step` one token at a time == teacher-forced `call` (within atol)."""
    length = int(np.shape(inputs["decoder_tokens"])[1])
    full = to_numpy(model(inputs, training=False))
    stepped, auxes = decode_teacher_forced(model, inputs, length)
    assert stepped.shape == full.shape, (stepped.shape, full.shape)
    real = real_positions(inputs)
    np.testing.assert_allclose(stepped[real], full[real], atol=atol, rtol=1e-4)
    if check_aux_keys:
        keys = {tuple(sorted(aux)) for aux in auxes}
        assert len(keys) == 1, f"aux keys change between steps: {keys}"
        assert "paragraph_attention" in auxes[0]
        for aux in auxes:
            for name, value in aux.items():
                assert np.all(np.isfinite(value)), name
    return full, stepped, auxes


def assert_step_matches_call_in_graph(model, inputs, atol=1e-4, jit_compile=False):
    """On TensorFlow: the whole step loop inside one tf.function."""
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    length = int(np.shape(inputs["decoder_tokens"])[1])

    @tf.function(jit_compile=jit_compile)
    def run(inputs):
        memory = model.encode(inputs)
        cache = model.initial_cache(memory, length)
        logits = []
        for index in range(length):
            step_logits, cache, _ = model.step(
                inputs["decoder_tokens"][:, index], tf.constant(index), cache
            )
            logits.append(step_logits)
        return tf.stack(logits, axis=1)

    full = to_numpy(model(inputs, training=False))
    real = real_positions(inputs)
    np.testing.assert_allclose(to_numpy(run(inputs))[real], full[real], atol=atol, rtol=1e-4)


def assert_beam_cache_step_matches_call(model, inputs, beams=3, atol=1e-5, seed=0):
    """`beam_cache(memory, S, K)` + `step` on K different targets per
    example == the teacher-forced call on the source repeated K times with
    those targets, eagerly and inside one jit-compiled function
    (`tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX).

    The K targets of an example differ, so a step that mixed up the rows
    b·K + k (e.g. reading another example's memory) would fail. Returns the
    static part of the cache (for checks on what it holds)."""
    rng = np.random.default_rng(seed)
    targets = np.repeat(np.asarray(inputs["decoder_tokens"]), beams, axis=0)
    batch, length = targets.shape
    vocabulary = int(getattr(model, "vocabulary_size", 50))
    real = targets != 0
    targets[:, 1:] = np.where(
        real[:, 1:], rng.integers(4, vocabulary, (batch, length - 1)), 0
    ).astype(targets.dtype)
    tiled = {
        key: (np.repeat(np.asarray(value), beams, axis=0) if key != "decoder_tokens" else targets)
        for key, value in inputs.items()
    }
    full = to_numpy(model(tiled, training=False))
    source = {key: value for key, value in inputs.items() if key != "decoder_tokens"}

    def run(source, targets):
        memory = model.encode(source)
        cache = model.beam_cache(memory, length, beams)
        logits = []
        for index in range(length):
            step_logits, cache, _ = model.step(
                targets[:, index], ops.convert_to_tensor(index, "int32"), cache
            )
            logits.append(step_logits)
        return ops.stack(logits, axis=1), cache[0]

    runs = {"eager": run}
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        runs["jit"] = tf.function(run, jit_compile=True)
    elif keras.backend.backend() == "jax":
        import jax

        runs["jit"] = jax.jit(run)
    real = real_positions(tiled)
    for name, function in runs.items():
        stepped, static = function(
            {key: ops.convert_to_tensor(value) for key, value in source.items()},
            ops.convert_to_tensor(targets),
        )
        np.testing.assert_allclose(
            to_numpy(stepped)[real], full[real], atol=atol, rtol=1e-5, err_msg=name
        )
    _, static = run(source, ops.convert_to_tensor(targets))
    return static


def cache_rows(entry):
    """The set of axis-0 sizes of the arrays in a cache entry: one array or
    a nested structure of them (e.g. `"cross_caches"`, one `(key, value)`
    pair per layer); an entry without arrays fails."""
    leaves = keras.tree.flatten(entry)
    assert leaves, f"a cache entry without arrays: {entry!r}"
    return {int(tuple(leaf.shape)[0]) for leaf in leaves}


def assert_beam_cache_shares_the_memory(model, inputs, beams=3, atol=1e-5,
                                        shared_keys=("memory", "cross_caches"),
                                        teacher_forcing=True):
    """`beam_cache(memory, S, K)` keeps `shared_keys` of the static cache
    with B rows (one copy per example, not B·K: every array of the entry,
    which may be nested, e.g. `"cross_caches"`' per-layer `(key, value)`
    pairs), its steps equal teacher
    forcing on the repeated source (`assert_beam_cache_step_matches_call`,
    eager and jit; skipped with `teacher_forcing=False`), and every step's
    logits and aux equal (to `atol`) those of the same eager steps on the
    memory repeated K times (`Summarizer.beam_cache`, the reference), with
    the aux rows following the B·K hypotheses."""
    from keras_hsum.models.summarizer import Summarizer

    batch = int(np.shape(inputs["decoder_tokens"])[0])
    if teacher_forcing:
        static = assert_beam_cache_step_matches_call(model, inputs, beams=beams, atol=atol)
    else:
        memory = model.encode({k: v for k, v in inputs.items() if k != "decoder_tokens"})
        static = model.beam_cache(memory, np.shape(inputs["decoder_tokens"])[1], beams)[0]
    for key in shared_keys:
        assert cache_rows(static[key]) == {batch}, (key, cache_rows(static[key]))
    targets = np.repeat(np.asarray(inputs["decoder_tokens"]), beams, axis=0)
    length = targets.shape[1]
    memory = model.encode({k: v for k, v in inputs.items() if k != "decoder_tokens"})
    shared = model.beam_cache(memory, length, beams)
    repeated = Summarizer.beam_cache(model, memory, length, beams)
    for key in shared_keys:
        assert cache_rows(repeated[0][key]) == {batch * beams}, key
    for index in range(length):
        ids = ops.convert_to_tensor(targets[:, index])
        logits, shared, aux = model.step(ids, index, shared)
        expected_logits, repeated, expected_aux = model.step(ids, index, repeated)
        np.testing.assert_allclose(to_numpy(logits), to_numpy(expected_logits),
                                   atol=atol, rtol=1e-5)
        assert sorted(aux) == sorted(expected_aux)
        for key in aux:
            assert to_numpy(aux[key]).shape[0] == batch * beams, key
            np.testing.assert_allclose(to_numpy(aux[key]), to_numpy(expected_aux[key]),
                                       atol=atol, rtol=1e-5, err_msg=key)
    return static


def assert_save_reload(model, inputs, tmp_path, atol=1e-5):
    """Saves to `.keras`, reloads, and compares outputs."""
    expected = _tree_map(to_numpy, model(inputs, training=False))
    path = os.path.join(str(tmp_path), "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    actual = _tree_map(to_numpy, restored(inputs, training=False))
    flat_expected = expected if isinstance(expected, dict) else {"out": expected}
    flat_actual = actual if isinstance(actual, dict) else {"out": actual}
    for name in flat_expected:
        np.testing.assert_allclose(
            flat_actual[name], flat_expected[name], atol=atol, err_msg=name
        )
    return restored


def masked_token_accuracy(logits, labels, weights):
    """numpy: fraction of weighted positions whose argmax equals the label."""
    predicted = np.argmax(np.asarray(logits), axis=-1)
    weights = np.asarray(weights, dtype=bool)
    return float(np.mean(predicted[weights] == np.asarray(labels)[weights]))


def seeded(build, seed):
    """`build()` after `keras.utils.set_random_seed(seed)`: the model's
    initial weights then depend on `seed` alone."""
    keras.utils.set_random_seed(seed)
    return build()


def memorize(build, inputs, labels, weights, epochs, batch_size=None, loss=None,
             learning_rate=3e-3, seed=0):
    """Seeds `seed`, makes a model with `build()`, fits it on (inputs, labels,
    weights) for `epochs` and returns its token accuracy on the same data
    (dropout off). The seed comes before `build()` because Keras draws each
    initializer's seed from Python's `random` when a layer is constructed:
    seeding after construction leaves the initial weights to the random draws
    of the tests that ran before, and a few hundred steps do not memorize from
    every start."""
    from keras_hsum.models import LabelSmoothedCrossEntropy

    model = seeded(build, seed)
    assert not model.built, "`build` must return an unbuilt model"
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, clipnorm=1.0),
        loss=loss or LabelSmoothedCrossEntropy(0.0),
    )
    model.fit(inputs, labels, sample_weight=weights, epochs=epochs,
              batch_size=batch_size, verbose=0, shuffle=False)
    logits = model.predict(inputs, batch_size=batch_size, verbose=0)
    if isinstance(logits, dict):
        logits = logits["logits"]
    return masked_token_accuracy(logits, labels, weights)


def set_token_shift_kernel(model, seed=0):
    """Gives `model.source_token_shift` a random nonzero W (it starts at
    zero, where the shift changes nothing)."""
    kernel = model.source_token_shift.kernel
    kernel.assign(np.random.default_rng(seed).normal(0, 0.3, kernel.shape).astype("float32"))


def assert_token_shift_contract(model, inputs, tmp_path):
    """A `token_shift=True` model with a nonzero W: `step` equals teacher
    forcing (eagerly and in-graph) and a save/reload keeps the option."""
    model(inputs)
    set_token_shift_kernel(model)
    assert_step_matches_call(model, inputs)
    assert_step_matches_call_in_graph(model, inputs)
    restored = assert_save_reload(model, inputs, tmp_path)
    assert restored.get_config()["token_shift"] is True


def held_out_accuracy(build, train, held_out, epochs, batch_size=32):
    """Seeds 0, builds a model with `build()`, fits it on `train` = (inputs,
    labels, weights) with Adam 1e-3 (clipnorm 1.0) and returns its masked
    token accuracy on `held_out` (numpy argmax over `model.predict`)."""
    from keras_hsum.models import LabelSmoothedCrossEntropy

    model = seeded(build, 0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
                  loss=LabelSmoothedCrossEntropy(0.0))
    model.fit(*train[:2], sample_weight=train[2], epochs=epochs, batch_size=batch_size,
              verbose=0)
    logits = model.predict(held_out[0], batch_size=64, verbose=0)
    if isinstance(logits, dict):
        logits = logits["logits"]
    return masked_token_accuracy(logits, *held_out[1:])


def span_task(count, seed, vocabulary, shape, span):
    """numpy (inputs, labels, weights) of the span-continuation task: the
    source is random ids of `shape` ([N] or [P,T]) and the target `span`
    consecutive tokens cut at a random offset from one random row of its
    last axis. After the first target token (weight 0: it needs the offset)
    a model must find where the token it just wrote sits in the source and
    copy the next one."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, vocabulary, (count, *shape)).astype("int32")
    rows = tokens.reshape(count, -1, shape[-1])
    which = rng.integers(0, rows.shape[1], count)
    offsets = rng.integers(0, shape[-1] - span + 1, count)
    target = np.stack([r[w, o:o + span] for r, w, o in zip(rows, which, offsets)])
    decoder = np.concatenate([np.full((count, 1), 2, "int32"), target[:, :-1]], axis=1)
    weights = np.ones(target.shape, "float32")
    weights[:, 0] = 0.0
    inputs = {"tokens": tokens, "token_mask": tokens != 0, "decoder_tokens": decoder}
    return inputs, target, weights


def span_accuracy_by_shift(small_model, shape, span, vocabulary=500, **options):
    """`{True: a, False: b}`: the held-out token accuracy on `span_task`
    (source `shape`, spans of `span`) of a D=64 copy model built by
    `small_model(..., **options)` with and without the token shift, each
    trained one epoch (250 steps) on 8,000 examples and scored on 128
    others."""
    train = span_task(8000, 0, vocabulary, shape=shape, span=span)
    held_out = span_task(128, 1, vocabulary, shape=shape, span=span)

    def build(shift):
        return small_model(vocabulary_size=vocabulary, hidden_dim=64, num_heads=4,
                           intermediate_dim=128, pointer_generator=True,
                           token_shift=shift, **options)

    return {
        shift: held_out_accuracy(lambda: build(shift), train, held_out, epochs=1)
        for shift in (True, False)
    }


def real_batch(recipe, config, vocabulary, examples, count):
    """numpy (inputs, labels, weights) of the first `count` real `examples`
    through `recipe.make_dataset` (one batch of `count`)."""
    config = config.replace(batch_size=count)
    dataset = recipe.make_dataset(config, list(examples), vocabulary, training=False,
                                  max_examples=count)
    batch = next(iter(dataset))
    return _tree_map(lambda t: t.numpy(), batch)


# ------------------------------------------------ pointer-generator copying


def with_switch_bias(model, bias):
    """Forces the copy switch's p_gen ≈ sigmoid(bias) (its other weights zeroed)."""
    switch = model.copy_switch
    for dense in (switch.context_gate, switch.state_gate, switch.input_gate):
        dense.kernel.assign(np.zeros(dense.kernel.shape, "float32"))
    switch.context_gate.bias.assign(np.full((1,), bias, "float32"))


def assert_copy_limits(model, plain, inputs, vocabulary_size, source_ids=None):
    """The pointer-generator output between its two limits.

    `model` has `pointer_generator=True`, `plain` is the same architecture
    without it. Checks: the output is a distribution; p_gen → 1 gives exactly
    `plain`'s log-softmax when it holds the same weights; p_gen → 0 puts all
    mass on the ids of real (unmasked) source tokens. Returns the p_gen → 0
    probabilities float64 [B,S,V].
    """
    log_probs = to_numpy(model(inputs))
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-5)

    plain(inputs)
    weights = {w.path.split("/", 1)[1]: w for w in model.weights}
    for w in plain.weights:
        w.assign(weights[w.path.split("/", 1)[1]])
    with_switch_bias(model, 40.0)
    logits = to_numpy(plain(inputs)).astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(to_numpy(model(inputs)), expected, atol=1e-4)

    with_switch_bias(model, -40.0)
    probs = np.exp(to_numpy(model(inputs)).astype("float64"))
    tokens = np.asarray(inputs["tokens"])
    mask = np.asarray(inputs["token_mask"])
    if "paragraph_mask" in inputs and tokens.ndim == 3:
        mask = mask & np.asarray(inputs["paragraph_mask"])[:, :, None]
    for b in range(tokens.shape[0]):
        real_ids = set(tokens[b][mask[b]].tolist())
        elsewhere = [i for i in range(vocabulary_size) if i not in real_ids]
        assert probs[b][:, elsewhere].max() < 1e-9
        np.testing.assert_allclose(probs[b][:, sorted(real_ids)].sum(-1), 1.0, atol=1e-5)
    return probs
