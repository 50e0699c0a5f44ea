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

Usage: python benchmarks/decode.py [--run runs/tiny_recipes/pht] [--repeats 3]
       python benchmarks/decode.py --memory-sizes [--repeats 3] [--steps 20]
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

    return keras.saving.load_model(os.path.join(run, "model.keras"), compile=False)


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


def ours(model, inputs):
    import tensorflow as tf

    from keras_hsum.decoding import LengthNormalization, NgramBlocking, beam_search

    @tf.function(jit_compile=True)
    def decode(inputs):
        out = beam_search(model, inputs, beam_size=BEAMS, max_length=LENGTH, min_length=LENGTH,
                          terms=[LengthNormalization(0.6), NgramBlocking(3)])
        return out["sequences"]

    return decode


def keras_hub_beam(model, inputs):
    import keras
    import tensorflow as tf
    from keras import ops
    from keras_hub.samplers import BeamSampler

    sampler = BeamSampler(num_beams=BEAMS, return_all_beams=True)

    @tf.function(jit_compile=True)
    def decode(inputs):
        memory = model.encode(inputs)
        tiled = keras.tree.map_structure(lambda x: ops.repeat(x, BEAMS, axis=0), memory)
        static, _ = model.initial_cache(tiled, LENGTH)
        _, state = model.initial_cache(memory, LENGTH)  # the sampler tiles it
        batch = ops.shape(inputs["tokens"])[0]
        prompt = ops.concatenate([ops.full((batch, 1), model.bos_id, "int32"),
                                  ops.zeros((batch, LENGTH), "int32")], axis=1)
        mask = ops.arange(LENGTH + 1)[None, :] == 0

        def next(prompt, cache, index):
            ids = ops.take(prompt, index - 1, axis=1)
            logits, (_, cache), _ = model.step(ids, index - 1, (static, cache))
            return logits, None, cache

        sequences, _ = sampler(next, prompt, cache=state, index=1,
                               mask=ops.broadcast_to(mask, ops.shape(prompt)))
        return sequences

    return decode


def tf_models_beam(model, inputs):
    import keras
    import tensorflow as tf
    from keras import ops
    from official.nlp.modeling.ops import beam_search as tfm

    @tf.function(jit_compile=True)
    def decode(inputs):
        memory = model.encode(inputs)
        tiled = keras.tree.map_structure(lambda x: ops.repeat(x, BEAMS, axis=0), memory)
        static, _ = model.initial_cache(tiled, LENGTH)
        _, state = model.initial_cache(memory, LENGTH)
        batch = tf.shape(inputs["tokens"])[0]

        def symbols_to_logits(ids, index, cache):
            logits, (_, cache), _ = model.step(ids[:, -1], index, (static, cache))
            # the peer cannot block EOS: make it unreachable for equal work
            logits = logits - tf.one_hot(model.eos_id, tf.shape(logits)[-1]) * 1e9
            return logits, cache

        sequences, _ = tfm.sequence_beam_search(
            symbols_to_logits, tf.fill([batch], model.bos_id), state,
            vocab_size=model.vocabulary_size, beam_size=BEAMS, alpha=0.6,
            max_decode_length=LENGTH, eos_id=model.eos_id, padded_decode=True)
        return sequences

    return decode


def eager_loop(model, inputs):
    import keras
    import numpy as np
    from keras import ops

    def decode(inputs):
        memory = model.encode(inputs)
        tiled = keras.tree.map_structure(lambda x: ops.repeat(x, BEAMS, axis=0), memory)
        static, state = model.initial_cache(tiled, LENGTH)
        scores = np.tile([0.0] + [-1e9] * (BEAMS - 1), (BATCH, 1))
        ids = np.full((BATCH * BEAMS,), model.bos_id, "int32")
        history = np.zeros((BATCH, BEAMS, 0), "int32")
        for index in range(LENGTH):
            logits, (_, state), _ = model.step(ops.convert_to_tensor(ids), index, (static, state))
            logits = np.asarray(logits, "float64")
            logits[:, model.eos_id] = -1e9
            log_probs = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
            total = (scores[..., None] + log_probs.reshape(BATCH, BEAMS, -1)).reshape(BATCH, -1)
            best = np.argsort(-total, axis=1)[:, :BEAMS]
            vocab = log_probs.shape[-1]
            parents, tokens = best // vocab, best % vocab
            scores = np.take_along_axis(total, best, axis=1)
            rows = (parents + np.arange(BATCH)[:, None] * BEAMS).reshape(-1)
            state = keras.tree.map_structure(lambda x: ops.take(x, rows, axis=0), state)
            history = np.concatenate([np.take_along_axis(history, parents[..., None], 1),
                                      tokens[..., None]], axis=2)
            ids = tokens.reshape(-1).astype("int32")
        return history

    return decode


MEMORY_SIZES = ((4, 100), (30, 100), (60, 100))
PAPER_PHT = dict(vocabulary_size=8000, hidden_dim=256, num_heads=4, intermediate_dim=1024,
                 num_encoder_layers=3, num_decoder_layers=3, dropout=0.0)
PAPER_DISCOURSE = dict(vocabulary_size=8000, hidden_dim=256, embedding_dim=128, num_oov=0)


def paper_inputs(vocabulary_size, paragraphs, tokens, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocabulary_size, (1, paragraphs, tokens)).astype("int32")
    return {"tokens": ids, "token_mask": ids != 0, "paragraph_mask": (ids != 0).any(-1)}


def built_model(cls, options, paragraphs=2, tokens=8):
    inputs = paper_inputs(options["vocabulary_size"], paragraphs, tokens)
    model = cls(**options)
    model(dict(inputs, decoder_tokens=inputs["tokens"][:, 0, :4]))
    return model


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

        ids = tf.fill([BEAMS], model.bos_id)
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


def write(result):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "decode.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = method_lines(result) if "rows" in result else ["# Decoding speed"]
    if "memory_sizes" in result:
        lines += [""] + memory_lines(result["memory_sizes"])
    with open(os.path.join(RESULTS, "decode.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


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
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

    if args.memory_sizes:
        result = stored()
        result["memory_sizes"] = memory_sizes(args)
        write(result)
        return

    model = load_model(args.run)
    config_path = os.path.join(args.run, "config.json")
    config = json.load(open(config_path)).get("config", {}) if os.path.exists(config_path) else {}
    inputs = {k: tf.constant(v) for k, v in batch_for(model, config).items()}
    methods = [("keras_hsum beam_search (jit)", ours), ("keras-hub BeamSampler (jit)", keras_hub_beam),
               ("tf-models sequence_beam_search (jit)", tf_models_beam),
               ("eager Python loop", eager_loop)]
    rows = []
    for name, build in methods:
        decode = build(model, inputs)
        start = time.perf_counter()
        np.asarray(decode(inputs))  # warm-up (tracing + XLA compile)
        compile_s = time.perf_counter() - start
        times = []
        for _ in range(args.eager_repeats if name.startswith("eager") else args.repeats):
            start = time.perf_counter()
            np.asarray(decode(inputs))
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        rows.append({"method": name, "seconds_per_batch": seconds,
                     "sequences_per_second": BATCH / seconds, "first_call_seconds": compile_s})
        print(f"{name:40s} {BATCH / seconds:8.2f} seq/s  ({seconds:.3f} s/batch, first call {compile_s:.1f} s)",
              flush=True)
    ours_rate = rows[0]["sequences_per_second"]
    for row in rows:
        row["ours_speedup"] = ours_rate / row["sequences_per_second"]
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
