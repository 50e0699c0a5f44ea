"""The cost of MBR reranking: beam search alone vs beam search + `mbr_rerank`,
and of sampling K sequences (`sample_search`, epsilon 0.02) + `mbr_rerank`
against a beam of the same K.

One model, the `flat` recipe's `tiny` configuration with the copy mechanism
and the token shift (scitldr_a's row of record; random weights: the cost does
not depend on them), a batch of 8 sources of 400 tokens, beam K = 4, 8, 16,
L = 64 generated tokens with EOS blocked until L (every hypothesis is full
length, MBR's worst case: K² · L² comparisons per n-gram order). Every
variant runs in one `tf.function(jit_compile=True)`, warmed up once and
timed over `--repeats` calls; ratios of medians are reported per K.

Usage: python benchmarks/mbr.py [--repeats 5]
Writes benchmarks/results/mbr.json and .md.
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

BATCH, SOURCE, LENGTH, VOCABULARY = 8, 400, 64, 8000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 8, 16])
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.decoding import LengthNormalization
    from keras_hsum.decoding import NgramBlocking
    from keras_hsum.decoding import beam_search
    from keras_hsum.decoding import mbr_rerank
    from keras_hsum.decoding import sample_search

    config = recipes.config("flat", "tiny").replace(pointer_generator=True, token_shift=True)
    keras.utils.set_random_seed(0)
    model = recipes.get("flat").build_model(config, VOCABULARY)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, VOCABULARY, (BATCH, SOURCE)).astype("int32")
    inputs = {"tokens": tf.constant(tokens), "token_mask": tf.constant(tokens != 0)}
    model(dict(inputs, decoder_tokens=tf.fill([BATCH, 3], 2)))

    def decoder(beams, variant):
        mbr = variant != "beam"

        @tf.function(jit_compile=True)
        def decode(inputs):
            terms = [LengthNormalization(), NgramBlocking(3)]
            if variant == "sample_mbr":
                out = sample_search(model, inputs, num_samples=beams, max_length=LENGTH,
                                    min_length=LENGTH, terms=terms, epsilon=0.02)
            else:
                out = beam_search(model, inputs, beam_size=beams, max_length=LENGTH,
                                  min_length=LENGTH, terms=terms)
            if mbr:
                out = mbr_rerank(out, eos_id=model.eos_id, pad_id=model.pad_id)
            return out["sequences"][:, 0]

        return decode

    rows = []
    for beams in args.beams:
        timings = {}
        for variant in ("beam", "mbr", "sample_mbr"):
            decode = decoder(beams, variant)
            np.asarray(decode(inputs))  # tracing + XLA compilation
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                np.asarray(decode(inputs))
                times.append(time.perf_counter() - start)
            timings[variant] = statistics.median(times)
        row = {"beams": beams, "beam_seconds": timings["beam"],
               "mbr_seconds": timings["mbr"], "ratio": timings["mbr"] / timings["beam"],
               "sample_mbr_seconds": timings["sample_mbr"],
               "sample_ratio": timings["sample_mbr"] / timings["beam"]}
        rows.append(row)
        print(f"K={beams:3d}: beam {row['beam_seconds']:.3f} s, beam + MBR "
              f"{row['mbr_seconds']:.3f} s ({row['ratio']:.3f}x), samples + MBR "
              f"{row['sample_mbr_seconds']:.3f} s ({row['sample_ratio']:.3f}x) per batch of "
              f"{BATCH}", flush=True)
    result = {
        "model": "flat tiny + copy + token shift (random weights)", "batch": BATCH,
        "source_tokens": SOURCE, "generated_tokens": LENGTH, "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "rows": rows,
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "mbr.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    lines = [f"# MBR reranking cost ({result['model']}, batch {BATCH}, {SOURCE} source tokens, "
             f"{LENGTH} generated tokens, jit)", "",
             f"Machine: {result['machine']}. Median of {args.repeats} calls.", "",
             "| K | beam search (s/batch) | + mbr_rerank (s/batch) | ratio | K samples "
             "+ mbr_rerank (s/batch) | ratio to the beam |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['beams']} | {row['beam_seconds']:.3f} | {row['mbr_seconds']:.3f} | "
                     f"{row['ratio']:.3f}x | {row['sample_mbr_seconds']:.3f} | "
                     f"{row['sample_ratio']:.3f}x |")
    with open(os.path.join(RESULTS, "mbr.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
