"""Decoding speed: keras_hsum's beam search vs keras-hub, tf-models and an eager loop.

One trained model (default: the tiny PHT of benchmarks/tiny_recipes.py in
runs/tiny_recipes/pht; `--run DIR` for another run folder with model.keras),
batch 8, beam 5, 200 generated tokens. EOS is blocked for 200 tokens (our
`min_length=200`; the peers run a fixed 200 steps) so every method does the
same number of model steps. Each method drives the same `model.step`:

- ours: `keras_hsum.decoding.beam_search` in `tf.function(jit_compile=True)`,
  with alive + finished pools, GNMT length normalisation and trigram blocking;
- keras-hub `BeamSampler` (jit), driven by a `next(prompt, cache, index)`
  that wraps `model.step`, as keras-hub's CausalLM does;
- tf-models `sequence_beam_search` (jit, padded_decode=True), same step;
- eager: a Python loop calling `model.step` once per position (numpy top-k),
  how the PHT and Cohan reference implementations decode.

Every method reads the same static cache, `model.beam_cache(memory, 200, 5)`
(rows b·K + k, the order both peers give their flattened beams; PHT's K
beams share one copy of the memory's keys/values, the other models repeat
it K times); the peers tile only the per-hypothesis state themselves. (Before
`--paper-sizes` the peers repeated the memory K times for every model; that
differs from `beam_cache` for PHT only.)

Reports sequences/s (median of `--repeats` timed runs after one warm-up) and
ratios measured in the same run. Writes benchmarks/results/decode.json, .md.

`--memory-sizes` measures instead how a search step grows with the memory,
at paper width (untrained weights: speed does not depend on them): PHT with
D=256, FFN 1024, 4 heads, 3+3 layers, V=8000, batch 1, beam 5, memories of
P×T = 4×100, 30×100 and 60×100 tokens, one step's time (a jit-compiled loop
of `--steps` steps, divided) for three ways to get the cross-attention keys
and values:

- "uncached": projected again at every step (the decoder before issue 47;
  `step` on a memory without `cross_caches`);
- "cached, tiled": projected once per request from the memory repeated K
  times (`initial_cache` on the tiled memory), each beam reading its copy;
- "cached, shared": projected once per example, the K beams reading one
  copy (`beam_cache`, what `beam_search` uses);

the ratio step(3,000)/step(400) of each, the whole paper-size decode (beam
5, 200 tokens, 30×100, `beam_search` in one jit-compiled function) uncached
against shared, and the same per-step comparison for the discourse model
(hidden 256, embedding 128, V=8000, 4 sections × 500 tokens). These rows are
merged into decode.json/.md, the method comparison's rows are kept.

`--paper-sizes` runs the four methods on each paper's model at its size,
untrained, built by its recipe's `build_model` from the recipe's `paper`
config: PHT 30×100, discourse 4×500 (V=8,000, see PAPER_SIZES), flat 1,600
tokens (`max_source_length` 1,600), HT 24×100; beam 5, 200 tokens with EOS
blocked, batch 1 and 8 (`--eager-first-batch-only`: the eager loop at batch 1
only); sequences/s, ms per generated token and ours ÷ each method, merged
into decode.json/.md as "paper_sizes" (written after each model). `--quick`
is its smoke test: small memories, 10 tokens, batch 1 and 2, stored apart
as "paper_sizes_quick".
`--repeated-peers --merge` adds rows of ours and the peers reading the
memory repeated K times (PHT's peers before `--paper-sizes`; the same cache
as the main rows for the other models) to the stored paper-size rows.

Usage: python benchmarks/decode.py [--run runs/tiny_recipes/pht] [--repeats 3]
       python benchmarks/decode.py --memory-sizes [--repeats 3] [--steps 20]
       python benchmarks/decode.py --paper-sizes [--quick] [--repeats 1]
           [--eager-first-batch-only] [--paper-models pht,discourse,flat,ht]
           [--repeated-peers --merge]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

BATCH, BEAMS, LENGTH = 8, 5, 200


def load_model(run):
    import keras

    import keras_hsum.models  # noqa: F401  (registers the classes)
    from keras_hsum import run_folder

    return keras.saving.load_model(run_folder.path(run, run_folder.LAST_CHECKPOINT),
                                   compile=False)


def batch_for(model, config, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    P, T = config.get("max_paragraphs", 12), config.get("max_paragraph_tokens", 48)
    tokens = rng.integers(4, model.vocabulary_size, (BATCH, P, T)).astype("int32")
    lengths = rng.integers(T // 2, T + 1, (BATCH, P))
    tokens[np.arange(T)[None, None, :] >= lengths[..., None]] = 0
    tokens[1::2, P - P // 4:] = 0  # padded paragraphs
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": (tokens != 0).any(-1)}


def ours(model, inputs, length=LENGTH):
    import tensorflow as tf

    from keras_hsum.decoding import LengthNormalization, NgramBlocking, beam_search

    @tf.function(jit_compile=True)
    def decode(inputs):
        out = beam_search(model, inputs, beam_size=BEAMS, max_length=length, min_length=length,
                          terms=[LengthNormalization(0.6), NgramBlocking(3)])
        return out["sequences"]

    return decode


def peer_caches(model, memory, length, repeated=False, beams=BEAMS):
    """The peers' `(static, state)`: the static cache `beam_search` reads
    (`model.beam_cache` for K = `beams`, rows b·K + k; PHT's memory shared
    by the K beams; `repeated`: the memory repeated K times, the base
    `Summarizer.beam_cache`,
    what the peers read before `--paper-sizes`) and the state of ONE
    hypothesis per example, which the peers tile."""
    from keras_hsum.models.summarizer import Summarizer

    beam_cache = Summarizer.beam_cache if repeated else type(model).beam_cache
    static, _ = beam_cache(model, memory, length, beams)
    _, state = model.initial_cache(memory, length)
    return static, state


def keras_hub_search(model, inputs, length=LENGTH, repeated=False, beams=BEAMS,
                     carry_weights=False):
    """keras-hub's `BeamSampler(beams)` over `model.step`, driven as
    keras-hub's CausalLM drives it: a prompt of BOS then `length` zeros
    (mask: only BOS is given), `next(prompt, cache, index)` feeding the
    token at index - 1 to `model.step` with the static cache of
    `peer_caches` (the sampler tiles the per-hypothesis state K times).
    `carry_weights`: pass the model to the sampler, whose JAX loop then
    carries the weights through its own StatelessScope (as
    `CausalLM.generate` does; no effect under TensorFlow). Trace it inside
    a `jax.jit` or `tf.function(jit_compile=True)`.

    Args:
        inputs: the model's feature dict, batch B (`inputs["tokens"]`).

    Returns:
        int32 [B, beams, length + 1]: every beam, best first, BOS first.
    """
    from keras import ops
    from keras_hub.samplers import BeamSampler

    static, state = peer_caches(model, model.encode(inputs), length, repeated, beams)
    batch = ops.shape(inputs["tokens"])[0]
    prompt = ops.concatenate([ops.full((batch, 1), model.bos_id, "int32"),
                              ops.zeros((batch, length), "int32")], axis=1)
    mask = ops.broadcast_to(ops.arange(length + 1)[None, :] == 0, ops.shape(prompt))

    def next_fn(prompt, cache, index):
        ids = ops.take(prompt, index - 1, axis=1)
        logits, (_, cache), _ = model.step(ids, index - 1, (static, cache))
        return logits, None, cache

    sampler = BeamSampler(num_beams=beams, return_all_beams=True)
    return sampler(next_fn, prompt, cache=state, index=1, mask=mask,
                   model=model if carry_weights else None)[0]


def keras_hub_beam(model, inputs, length=LENGTH, repeated=False):
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def decode(inputs):
        return keras_hub_search(model, inputs, length, repeated)

    return decode


def tf_models_beam(model, inputs, length=LENGTH, repeated=False):
    import tensorflow as tf
    from official.nlp.modeling.ops import beam_search as tfm

    @tf.function(jit_compile=True)
    def decode(inputs):
        static, state = peer_caches(model, model.encode(inputs), length, repeated)
        batch = tf.shape(inputs["tokens"])[0]

        def symbols_to_logits(ids, index, cache):
            logits, (_, cache), _ = model.step(ids[:, -1], index, (static, cache))
            # the peer cannot block EOS: make it unreachable for equal work
            logits = logits - tf.one_hot(model.eos_id, tf.shape(logits)[-1]) * 1e9
            return logits, cache

        sequences, _ = tfm.sequence_beam_search(
            symbols_to_logits, tf.fill([batch], model.bos_id), state,
            vocab_size=model.vocabulary_size, beam_size=BEAMS, alpha=0.6,
            max_decode_length=length, eos_id=model.eos_id, padded_decode=True)
        return sequences

    return decode


def eager_loop(model, inputs, length=LENGTH):
    import keras
    import numpy as np
    from keras import ops

    def decode(inputs):
        batch = int(inputs["tokens"].shape[0])
        static, state = model.beam_cache(model.encode(inputs), length, BEAMS)
        scores = np.tile([0.0] + [-1e9] * (BEAMS - 1), (batch, 1))
        ids = np.full((batch * BEAMS,), model.bos_id, "int32")
        history = np.zeros((batch, BEAMS, 0), "int32")
        for index in range(length):
            logits, (_, state), _ = model.step(ops.convert_to_tensor(ids), index, (static, state))
            logits = np.asarray(logits, "float64")
            logits[:, model.eos_id] = -1e9
            log_probs = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
            total = (scores[..., None] + log_probs.reshape(batch, BEAMS, -1)).reshape(batch, -1)
            best = np.argsort(-total, axis=1)[:, :BEAMS]
            vocab = log_probs.shape[-1]
            parents, tokens = best // vocab, best % vocab
            scores = np.take_along_axis(total, best, axis=1)
            rows = (parents + np.arange(batch)[:, None] * BEAMS).reshape(-1)
            state = keras.tree.map_structure(lambda x: ops.take(x, rows, axis=0), state)
            history = np.concatenate([np.take_along_axis(history, parents[..., None], 1),
                                      tokens[..., None]], axis=2)
            ids = tokens.reshape(-1).astype("int32")
        return history

    return decode


def step_floor(model, inputs, length=LENGTH):
    """Not a search: `encode`, `beam_cache` and `length` calls of
    `model.step` for the B·K hypotheses, each row fed its own argmax, in one
    jit-compiled function. The least time any search driving this step
    can take, so method seconds ÷ floor seconds bounds how much faster
    than that method any search on this step can be."""
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def decode(inputs):
        static, state = model.beam_cache(model.encode(inputs), length, BEAMS)
        rows = tf.shape(inputs["tokens"])[0] * BEAMS

        def body(index, ids, state):
            logits, (_, state), _ = model.step(ids, index, (static, state))
            return index + 1, tf.cast(tf.argmax(logits, -1), "int32"), state

        _, ids, _ = tf.while_loop(lambda i, *_: i < length, body,
                                  (tf.constant(0), tf.fill([rows], model.bos_id), state))
        return ids

    return decode


FLOOR = "model.step alone, no search (jit)"
METHODS = (("keras_hsum beam_search (jit)", ours),
           (FLOOR, step_floor),
           ("keras-hub BeamSampler (jit)", keras_hub_beam),
           ("tf-models sequence_beam_search (jit)", tf_models_beam),
           ("eager Python loop", eager_loop))
# --repeated-peers: the peers on the memory repeated K times (differs for PHT only)
REPEATED_PEERS = (
    ("keras-hub BeamSampler, memory ×K (jit)",
     lambda model, inputs, length: keras_hub_beam(model, inputs, length, repeated=True)),
    ("tf-models sequence_beam_search, memory ×K (jit)",
     lambda model, inputs, length: tf_models_beam(model, inputs, length, repeated=True)))


def time_methods(model, inputs, methods, repeats, eager_repeats, length=LENGTH, prefix=""):
    """One row per `(name, build)` of `methods` (the first is ours): median
    seconds of `repeats` decodes of `inputs` (`eager_repeats` for the eager
    loop) after one warm-up call (tracing + XLA compile + one decode, its time
    is `first_call_seconds`), sequences/s, ms per generated token and ours ÷
    method. A method that fails keeps its error instead of the figures."""
    import numpy as np

    batch = int(inputs["tokens"].shape[0])
    rows = []
    for name, build in methods:
        row = {"method": name}
        try:
            decode = build(model, inputs, length)
            start = time.perf_counter()
            np.asarray(decode(inputs))  # warm-up (tracing + XLA compile)
            compile_s = time.perf_counter() - start
            times = []
            for _ in range(eager_repeats if name.startswith("eager") else repeats):
                start = time.perf_counter()
                np.asarray(decode(inputs))
                times.append(time.perf_counter() - start)
        except Exception as error:  # recorded, not raised: the other methods still run
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            print(f"{prefix}{name:40s} FAILED {row['error']}", flush=True)
            rows.append(row)
            continue
        seconds = statistics.median(times)
        row.update({"seconds_per_batch": seconds, "sequences_per_second": batch / seconds,
                    "ms_per_step": 1000 * seconds / length, "first_call_seconds": compile_s,
                    "timed_runs": len(times)})
        rows.append(row)
        print(f"{prefix}{name:40s} {batch / seconds:8.3f} seq/s  ({seconds:.3f} s/batch, "
              f"{1000 * seconds / length:.1f} ms/step, first call {compile_s:.1f} s)", flush=True)
    ours_rate = rows[0].get("sequences_per_second")
    floor = next((row["seconds_per_batch"] for row in rows
                  if row["method"] == FLOOR and "seconds_per_batch" in row), None)
    for row in rows:
        if ours_rate and "sequences_per_second" in row:
            row["ours_speedup"] = ours_rate / row["sequences_per_second"]
        if floor and "seconds_per_batch" in row:
            row["over_floor"] = row["seconds_per_batch"] / floor
    return rows


MEMORY_SIZES = ((4, 100), (30, 100), (60, 100))
PAPER_PHT = dict(vocabulary_size=8000, hidden_dim=256, num_heads=4, intermediate_dim=1024,
                 num_encoder_layers=3, num_decoder_layers=3, dropout=0.0)
PAPER_DISCOURSE = dict(vocabulary_size=8000, hidden_dim=256, embedding_dim=128, num_oov=0)


def paper_inputs(vocabulary_size, paragraphs, tokens, seed=0, batch=1):
    """A full memory (no padding) of `batch` examples of P×T random ids."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocabulary_size, (batch, paragraphs, tokens)).astype("int32")
    return {"tokens": ids, "token_mask": ids != 0, "paragraph_mask": (ids != 0).any(-1)}


def called(model, vocabulary_size, paragraphs=2, tokens=8):
    """`model` after one teacher-forced call on a small input (builds its weights)."""
    inputs = paper_inputs(vocabulary_size, paragraphs, tokens)
    model(dict(inputs, decoder_tokens=inputs["tokens"][:, 0, :4]))
    return model


def built_model(cls, options, paragraphs=2, tokens=8):
    return called(cls(**options), options["vocabulary_size"], paragraphs, tokens)


def without(static, key):
    """The static cache without `key`: `step` then projects the memory again."""
    static = dict(static)
    static.pop(key)
    return static


def caches(model, memory, way, length):
    """`(static, state)` for BEAMS hypotheses of the memory's one example."""
    import keras
    from keras import ops

    if way == "cached, shared":
        return model.beam_cache(memory, length, BEAMS)
    tiled = keras.tree.map_structure(lambda x: ops.repeat(x, BEAMS, axis=0), memory)
    static, state = model.initial_cache(tiled, length)
    if way == "uncached":
        key = "cross_caches" if "cross_caches" in static else "attention_cache"
        static = without(static, key)
    return static, state


def step_seconds(model, static, state, steps, repeats):
    """Median seconds of one `model.step` (a jit-compiled loop of `steps`)."""
    import numpy as np
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def run(static, state):
        def body(index, ids, state):
            logits, (_, state), _ = model.step(ids, index, (static, state))
            return index + 1, tf.cast(tf.argmax(logits, -1), "int32"), state

        rows = tf.shape(tf.nest.flatten(state)[0])[0]  # B·K hypotheses
        ids = tf.fill([rows], model.bos_id)
        _, ids, _ = tf.while_loop(lambda i, *_: i < steps, body, (tf.constant(0), ids, state))
        return ids

    np.asarray(run(static, state))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(run(static, state))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / steps


def eager_step_seconds(model, static, state, steps):
    """Median seconds of one eager `model.step` (no XLA: nothing is hoisted)."""
    import numpy as np
    import tensorflow as tf

    ids = tf.fill([BEAMS], model.bos_id)
    model.step(ids, 0, (static, state))  # warm-up
    times = []
    for index in range(steps):
        start = time.perf_counter()
        logits, (_, state), _ = model.step(ids, index, (static, state))
        np.asarray(logits)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_seconds(model, inputs, repeats, uncached):
    """Median seconds of one whole beam search (BEAMS, LENGTH tokens)."""
    import numpy as np
    import tensorflow as tf

    from keras_hsum.decoding import LengthNormalization, NgramBlocking, beam_search

    if uncached:  # the search's cache without the projected keys/values
        model.beam_cache = lambda memory, length, beams: caches(model, memory, "uncached", length)
    try:
        @tf.function(jit_compile=True)
        def decode(inputs):
            out = beam_search(model, inputs, beam_size=BEAMS, max_length=LENGTH,
                              min_length=LENGTH,
                              terms=[LengthNormalization(0.6), NgramBlocking(3)])
            return out["sequences"]

        inputs = {k: tf.constant(v) for k, v in inputs.items()}
        np.asarray(decode(inputs))  # compile
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            np.asarray(decode(inputs))
            times.append(time.perf_counter() - start)
    finally:
        if uncached:
            del model.beam_cache
    return statistics.median(times)


def memory_sizes(args):
    from keras_hsum.models import DiscourseSummarizer, ParallelHierarchicalTransformer

    pht = built_model(ParallelHierarchicalTransformer, PAPER_PHT)
    ways = ("uncached", "cached, tiled", "cached, shared")
    steps = []
    for paragraphs, tokens in MEMORY_SIZES:
        memory = pht.encode(paper_inputs(PAPER_PHT["vocabulary_size"], paragraphs, tokens))
        row = {"model": "pht", "paragraphs": paragraphs, "tokens": tokens,
               "memory_tokens": paragraphs * tokens}
        for way in ways:
            static, state = caches(pht, memory, way, LENGTH)
            row[way] = step_seconds(pht, static, state, args.steps, args.repeats)
            print(f"pht {paragraphs}x{tokens} {way:15s} {1000 * row[way]:8.2f} ms/step", flush=True)
        steps.append(row)
    growth = {way: steps[1][way] / steps[0][way] for way in ways}
    growth_6000 = {way: steps[2][way] / steps[0][way] for way in ways}

    paper = paper_inputs(PAPER_PHT["vocabulary_size"], 30, 100)
    decode = {way: decode_seconds(pht, paper, args.decode_repeats, way == "uncached")
              for way in ("uncached", "cached, shared")}
    print(f"pht 30x100 decode: uncached {decode['uncached']:.2f} s, "
          f"shared cache {decode['cached, shared']:.2f} s", flush=True)

    discourse = built_model(DiscourseSummarizer, PAPER_DISCOURSE)
    memory = discourse.encode(paper_inputs(PAPER_DISCOURSE["vocabulary_size"], 4, 500))
    discourse_row = {"model": "discourse", "paragraphs": 4, "tokens": 500, "memory_tokens": 2000}
    for way in ("uncached", "cached, tiled"):
        static, state = caches(discourse, memory, way, LENGTH)
        discourse_row[way] = step_seconds(discourse, static, state, args.steps, args.repeats)
        discourse_row[f"{way} (eager)"] = eager_step_seconds(discourse, static, state, args.steps)
        print(f"discourse 4x500 {way:15s} {1000 * discourse_row[way]:8.2f} ms/step jit, "
              f"{1000 * discourse_row[way + ' (eager)']:8.2f} ms/step eager", flush=True)
    return {
        "pht_options": PAPER_PHT, "discourse_options": PAPER_DISCOURSE,
        "batch": 1, "beams": BEAMS, "steps_per_timing": args.steps, "repeats": args.repeats,
        "decode_repeats": args.decode_repeats, "generated_tokens": LENGTH,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "step_seconds": steps + [discourse_row],
        "step_growth_3000_over_400": growth, "step_growth_6000_over_400": growth_6000,
        "decode_seconds_30x100": decode,
        "decode_speedup": decode["uncached"] / decode["cached, shared"],
    }


# (row name, recipe, changes to its `paper` config, P, T of the memory, V or
# None for the config's). Discourse's V is 8,000, not its config's 50,000: at
# 50,000 the output layer and softmax took about 70% of its step (a jit loop of
# `model.step`, batch 8 × beam 5, 4×500 memory: 107 ms at V=50,000 against
# 32 ms at V=8,000); the other models' steps moved by 1.0-1.1× between their
# config's 32,000 and 8,000 (HT's two figures were too noisy to compare), so
# they keep 32,000. In order of cost: the slowest last.
PAPER_SIZES = (
    ("PHT 30×100", "pht", {}, 30, 100, None),
    ("discourse 4×500", "discourse", {}, 4, 500, 8000),
    ("flat 1,600", "flat", {"max_source_length": 1600}, 1, 1600, None),
    ("HT 24×100", "ht", {}, 24, 100, None),
)
# --quick: the same models on small memories, 10 tokens, batch 1 and 2 (a smoke test)
QUICK_SIZES = (
    ("PHT 4×25 (quick)", "pht", {}, 4, 25, None),
    ("discourse 2×50 (quick)", "discourse", {}, 2, 50, 8000),
    ("flat 100 (quick)", "flat", {"max_source_length": 1600}, 1, 100, None),
    ("HT 4×25 (quick)", "ht", {}, 4, 25, None),
)
QUICK_LENGTH, QUICK_BATCHES, PAPER_BATCHES = 10, (1, 2), (1, 8)


def commit():
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def paper_model(recipe, changes, vocabulary):
    """`(model, options)`: the recipe's `paper` model, untrained and built."""
    import dataclasses

    from keras_hsum import recipes

    module = recipes.get(recipe)
    config = dataclasses.replace(module.CONFIGS["paper"], **changes)
    vocabulary = vocabulary or config.vocabulary_size
    model = called(module.build_model(config, vocabulary), vocabulary)
    return model, config, vocabulary


# --sharing: the models whose K beams can share one copy of the memory
SHARING_MODELS = ("flat", "ht", "pht")


def sharing(args):
    """Step time with the K beams of an example sharing one copy of the
    memory and its keys/values (`model.beam_cache`) against the memory
    repeated K times (`Summarizer.beam_cache`), at paper size, batch 1 and 8;
    and one whole `beam_search` each way at batch 8."""
    import datetime

    import tensorflow as tf

    from keras_hsum.models.summarizer import Summarizer

    rows = []
    for name, recipe, changes, paragraphs, tokens, vocabulary in PAPER_SIZES:
        if recipe not in (args.paper_models.split(",") if args.paper_models else SHARING_MODELS):
            continue
        model, _, vocabulary = paper_model(recipe, changes, vocabulary)
        for batch in PAPER_BATCHES:
            inputs = {k: tf.constant(v) for k, v in
                      paper_inputs(vocabulary, paragraphs, tokens, batch=batch).items()}
            memory = model.encode(inputs)
            row = {"model": name, "batch": batch, "memory_tokens": paragraphs * tokens}
            for way, cache in (("repeated", Summarizer.beam_cache),
                               ("shared", type(model).beam_cache)):
                static, state = cache(model, memory, LENGTH, BEAMS)
                row[way] = step_seconds(model, static, state, args.steps, args.repeats)
                print(f"{name} batch {batch} {way:8s} {1000 * row[way]:8.2f} ms/step", flush=True)
            row["repeated_over_shared"] = row["repeated"] / row["shared"]
            rows.append(row)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(), "beams": BEAMS, "steps_per_timing": args.steps,
        "repeats": args.repeats, "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "rows": rows,
    }


def sharing_lines(result):
    lines = ["## Beams sharing the memory (issue 47, item 1)", "",
             f"Each model at paper size (as the paper-size rows below), untrained; beam "
             f"{result['beams']}; one step = a `tf.function(jit_compile=True)` loop of "
             f"{result['steps_per_timing']} `model.step`s ÷ {result['steps_per_timing']}, median "
             f"of {result['repeats']}; *repeated*: the memory and its keys/values repeated K "
             "times (`Summarizer.beam_cache`), *shared*: one copy per example, the K beams' "
             f"queries folded into one axis (`model.beam_cache`). {result['date']}, "
             f"{result['machine']}, load average after {result['load_average_after']}.", "",
             "| model | batch | memory tokens | repeated ms/step | shared ms/step | "
             "repeated ÷ shared |", "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['model']} | {row['batch']} | {row['memory_tokens']:,} | "
                     f"{1000 * row['repeated']:.1f} | {1000 * row['shared']:.1f} | "
                     f"{row['repeated_over_shared']:.2f}× |")
    return lines


def paper_sizes(args, save=None):
    """Every method on each paper's model (untrained), batch 1 and 8; calls
    `save(partial result)` after each model, so a cut-off run keeps its rows."""
    import datetime

    import tensorflow as tf

    sizes = QUICK_SIZES if args.quick else PAPER_SIZES
    length = QUICK_LENGTH if args.quick else LENGTH
    batches = QUICK_BATCHES if args.quick else PAPER_BATCHES
    eager_batches = batches[:1] if args.eager_first_batch_only else batches
    models, rows = {}, []
    started = time.perf_counter()
    result = {
        "quick": bool(args.quick), "date": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(), "beams": BEAMS,
        "generated_tokens": length, "batches": list(batches), "repeats": args.repeats,
        "eager_repeats": args.eager_repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "models": models, "rows": rows,
    }
    for name, recipe, changes, paragraphs, tokens, vocabulary in sizes:
        if args.paper_models and recipe not in args.paper_models.split(","):
            continue
        model, config, vocabulary = paper_model(recipe, changes,
                                                args.paper_vocabulary or vocabulary)
        options = {k: v for k, v in model.get_config().items()
                   if isinstance(v, (int, float, str, bool)) and k not in ("name", "trainable")}
        models[name] = {"recipe": recipe, "config": "paper", "changes": changes,
                        "paragraphs": paragraphs, "tokens": tokens,
                        "memory_tokens": paragraphs * tokens, "vocabulary_size": vocabulary,
                        "config_vocabulary_size": config.vocabulary_size,
                        "parameters": int(model.count_params()), "options": options}
        for batch in batches:
            inputs = {k: tf.constant(v) for k, v in
                      paper_inputs(vocabulary, paragraphs, tokens, batch=batch).items()}
            methods = METHODS if batch in eager_batches else [
                method for method in METHODS if method[1] is not eager_loop]
            if args.repeated_peers:  # ours again, for ratios measured in the same run
                methods = (("keras_hsum beam_search (jit, beside the ×K peers)", ours),
                           *REPEATED_PEERS)
            for row in time_methods(model, inputs, methods, args.repeats, args.eager_repeats,
                                    length, prefix=f"{name} batch {batch}: "):
                rows.append(dict(row, model=name, batch=batch, date=result["date"]))
            if batch not in eager_batches and not args.repeated_peers:
                rows.append({"method": "eager Python loop", "model": name, "batch": batch,
                             "skipped": f"run at batch {batches[0]} only (time budget)"})
        models[name]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        result["total_seconds"] = time.perf_counter() - started
        if save is not None:
            save(result)
    return result


def merged(before, new):
    """`new` with the rows and models of `before` it did not measure again."""
    measured = {(r["model"], r["batch"], r["method"]) for r in new["rows"]}
    rows = [r for r in before["rows"] if (r["model"], r["batch"], r["method"]) not in measured]
    rows = [dict(r, date=r.get("date", before["date"])) for r in rows] + new["rows"]
    order = list(dict.fromkeys([*before["models"], *new["models"]]))
    rows.sort(key=lambda r: (order.index(r["model"]), r["batch"]))
    models = {**before["models"], **new["models"]}
    return dict(new, rows=rows, models={name: models[name] for name in order},
                date=f"{before['date']} (merged with {new['date']})",
                total_seconds=before.get("total_seconds", 0) + new.get("total_seconds", 0))


def short(method):
    return method.replace("keras_hsum ", "").replace(" (jit)", "").replace("(jit, ", "(")


def paper_lines(result):
    title = ("## Paper-size decoding, QUICK SMOKE TEST (small memories, not the paper sizes)"
             if result["quick"] else "## Paper-size decoding (issue 47)")
    lines = [title, "", f"{result['date']}, commit {result['commit']}, machine {result['machine']}. "
             f"Untrained weights at each recipe's `paper` sizes; beam {result['beams']}, "
             f"{result['generated_tokens']} generated tokens with EOS blocked; median of "
             f"{result['repeats']} timed decode(s) (eager loop: {result['eager_repeats']}) after a "
             "warm-up call; ms/step = s/decode ÷ tokens (encoder and cache set-up included).", "",
             f"Whole run: {result.get('total_seconds', 0) / 60:.1f} min.", "",
             "| model | memory tokens | V | parameters |", "|---|---|---|---|"]
    for name, info in result["models"].items():
        own = info["config_vocabulary_size"]
        vocabulary = f"{info['vocabulary_size']:,}" + (
            f" (config: {own:,})" if own != info["vocabulary_size"] else "")
        lines.append(f"| {name} | {info['memory_tokens']:,} | {vocabulary} | "
                     f"{info['parameters'] / 1e6:.1f} M |")
    lines += ["", "| model | batch | method | sequences/s | ms/step | first call (s) | ours ÷ method "
              "| method s ÷ floor s |", "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        head = f"| {row['model']} | {row['batch']} | {short(row['method'])} | "
        if "sequences_per_second" in row:
            lines.append(head + f"{row['sequences_per_second']:.3f} | {row['ms_per_step']:.1f} | "
                         f"{row['first_call_seconds']:.1f} | "
                         + (f"{row['ours_speedup']:.2f}× |" if "ours_speedup" in row else "|")
                         + (f" {row['over_floor']:.2f}× |" if "over_floor" in row else " |"))
        else:
            lines.append(head + f"{row.get('error') or row.get('skipped')} | | | | |")
    keys, peers = {}, []
    for row in result["rows"]:
        keys.setdefault((row["model"], row["batch"]), {})[short(row["method"])] = row
        if (not row["method"].startswith("keras_hsum") and row["method"] != FLOOR
                and short(row["method"]) not in peers):
            peers.append(short(row["method"]))
    lines += ["", "ours ÷ a peer: how much faster ours ran; in brackets, that peer's seconds ÷ "
              "the floor's (`model.step` alone, no search): the most any search driving the same "
              "step could gain over that peer.", "",
              "| model | batch | " + " | ".join(f"ours ÷ {p} [bound]" for p in peers) + " |",
              "|---|---|" + "---|" * len(peers)]
    for (name, batch), by in keys.items():
        cells = []
        for m in peers:
            row = by.get(m, {})
            cell = f"{row['ours_speedup']:.2f}×" if "ours_speedup" in row else "n/a"
            if "over_floor" in row:
                cell += f" [{row['over_floor']:.2f}×]"
            cells.append(cell)
        lines.append(f"| {name} | {batch} | " + " | ".join(cells) + " |")
    return lines


def memory_lines(result):
    ways = ("uncached", "cached, tiled", "cached, shared")
    lines = ["## Search step against memory size (issue 47)", "",
             f"PHT D=256, FFN 1024, 4 heads, 3+3 layers, V=8000, untrained; batch 1, beam "
             f"{result['beams']}; one step = a `tf.function(jit_compile=True)` loop of "
             f"{result['steps_per_timing']} steps ÷ {result['steps_per_timing']}, median of "
             f"{result['repeats']}. Machine: {result['machine']}.", "",
             "| model | P×T | memory tokens | uncached ms/step | cached, tiled ms/step | "
             "cached, shared ms/step | uncached ÷ cached (shared where measured) |", "|---|---|---|---|---|---|---|"]
    for row in result["step_seconds"]:
        cells = [f"{1000 * row[way]:.2f}" if way in row else "" for way in ways]
        best = row.get("cached, shared", row.get("cached, tiled"))
        lines.append(f"| {row['model']} | {row['paragraphs']}×{row['tokens']} | "
                     f"{row['memory_tokens']:,} | " + " | ".join(cells)
                     + f" | {row['uncached'] / best:.2f}× |")
    growth, growth_6000 = result["step_growth_3000_over_400"], result["step_growth_6000_over_400"]
    lines += ["", "| PHT step growth | " + " | ".join(ways) + " |", "|---|---|---|---|",
              "| step(3,000) ÷ step(400) | " + " | ".join(f"{growth[w]:.2f}×" for w in ways) + " |",
              "| step(6,000) ÷ step(400) | " + " | ".join(f"{growth_6000[w]:.2f}×" for w in ways) + " |"]
    decode = result["decode_seconds_30x100"]
    lines += ["", f"Whole PHT decode, 30×100, beam {result['beams']}, "
              f"{result['generated_tokens']} tokens (`beam_search` jit-compiled, median of "
              f"{result['decode_repeats']}): uncached {decode['uncached']:.2f} s, shared cache "
              f"{decode['cached, shared']:.2f} s, {result['decode_speedup']:.2f}× faster.",
              "", "Discourse (hidden 256, embedding 128, V=8000, 4×500, beam 5; its cached "
              "memory terms are repeated per beam, the default `beam_cache`): "]
    discourse = [row for row in result["step_seconds"] if row["model"] == "discourse"]
    if discourse and "uncached (eager)" in discourse[0]:
        row = discourse[0]
        lines[-1] += (f"eager steps {1000 * row['uncached (eager)']:.2f} ms uncached, "
                      f"{1000 * row['cached, tiled (eager)']:.2f} ms cached "
                      f"({row['uncached (eager)'] / row['cached, tiled (eager)']:.2f}×); "
                      "jit-compiled, as in the table.")
    return lines


def method_lines(result):
    lines = [f"# Decoding speed ({result['model']}, batch {BATCH}, beam {BEAMS}, {LENGTH} tokens)", "",
             f"Machine: {result['machine']}; devices {result['devices']}.", "",
             "| method | sequences/s | s/batch | first call (s) | ours ÷ method |",
             "|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['method']} | {row['sequences_per_second']:.2f} | "
                     f"{row['seconds_per_batch']:.3f} | {row['first_call_seconds']:.1f} | "
                     f"{row['ours_speedup']:.2f}× |")
    return lines


def write(result, echo=True):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "decode.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = method_lines(result) if "rows" in result else ["# Decoding speed"]
    if "memory_sizes" in result:
        lines += [""] + memory_lines(result["memory_sizes"])
    if "sharing" in result:
        lines += [""] + sharing_lines(result["sharing"])
    for key in ("paper_sizes", "paper_sizes_quick"):
        if key in result:
            lines += [""] + paper_lines(result[key])
    with open(os.path.join(RESULTS, "decode.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines) if echo else f"wrote {RESULTS}/decode.json, .md", flush=True)


def stored():
    path = os.path.join(RESULTS, "decode.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default=os.path.join(ROOT, "runs", "tiny_recipes", "pht"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eager-repeats", type=int, default=1)
    parser.add_argument("--memory-sizes", action="store_true",
                        help="the step-time table against memory size (see above)")
    parser.add_argument("--steps", type=int, default=20,
                        help="steps per timed loop with --memory-sizes")
    parser.add_argument("--decode-repeats", type=int, default=1,
                        help="timed whole decodes per variant with --memory-sizes")
    parser.add_argument("--sharing", action="store_true",
                        help="step time with the beams sharing the memory against it "
                             "repeated K times, at paper size (flat, HT, PHT; --paper-models)")
    parser.add_argument("--paper-sizes", action="store_true",
                        help="every method on each paper's model size (see above)")
    parser.add_argument("--quick", action="store_true",
                        help="with --paper-sizes: small memories, 10 tokens, batch 1 and 2")
    parser.add_argument("--paper-models", default="",
                        help="with --paper-sizes: comma-separated recipes (default all: "
                             "pht,ht,discourse,flat)")
    parser.add_argument("--paper-vocabulary", type=int, default=0,
                        help="with --paper-sizes: V for every model (default: each config's)")
    parser.add_argument("--repeated-peers", action="store_true",
                        help="with --paper-sizes: instead, ours and the peers on the memory "
                             "repeated K times (use with --merge)")
    parser.add_argument("--merge", action="store_true",
                        help="with --paper-sizes: keep the stored rows not measured again")
    parser.add_argument("--eager-first-batch-only", action="store_true",
                        help="with --paper-sizes: the eager loop at batch 1 only")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    if args.paper_sizes:
        result = stored()
        key = "paper_sizes_quick" if args.quick else "paper_sizes"  # a smoke test keeps the full rows
        before = result.get(key)

        def save(paper):
            if args.merge and before:
                paper = merged(before, paper)
            result[key] = paper
            write(result, echo=False)

        paper_sizes(args, save)
        return

    if args.sharing:
        result = stored()
        result["sharing"] = sharing(args)
        write(result)
        return

    if args.memory_sizes:
        result = stored()
        result["memory_sizes"] = memory_sizes(args)
        write(result)
        return

    model = load_model(args.run)
    from keras_hsum import run_folder

    config_path = run_folder.path(args.run, run_folder.CONFIG)
    config = json.load(open(config_path)).get("config", {}) if os.path.exists(config_path) else {}
    inputs = {k: tf.constant(v) for k, v in batch_for(model, config).items()}
    rows = time_methods(model, inputs, METHODS, args.repeats, args.eager_repeats)
    result = stored()
    result.update({
        "model": os.path.relpath(args.run, ROOT), "batch": BATCH, "beams": BEAMS,
        "generated_tokens": LENGTH, "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "rows": rows,
    })
    write(result)


if __name__ == "__main__":
    main()
