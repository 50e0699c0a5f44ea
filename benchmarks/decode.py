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

Usage: python benchmarks/decode.py [--run runs/tiny_recipes/pht] [--repeats 3]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default=os.path.join(ROOT, "runs", "tiny_recipes", "pht"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eager-repeats", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

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
    result = {
        "model": os.path.relpath(args.run, ROOT), "batch": BATCH, "beams": BEAMS,
        "generated_tokens": LENGTH, "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "rows": rows,
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "decode.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"# Decoding speed ({result['model']}, batch {BATCH}, beam {BEAMS}, {LENGTH} tokens)", "",
             f"Machine: {result['machine']}; devices {result['devices']}.", "",
             "| method | sequences/s | s/batch | first call (s) | ours ÷ method |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['method']} | {row['sequences_per_second']:.2f} | "
                     f"{row['seconds_per_batch']:.3f} | {row['first_call_seconds']:.1f} | "
                     f"{row['ours_speedup']:.2f}× |")
    with open(os.path.join(RESULTS, "decode.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
