"""The cost of sequence-level training (`ReinforceObjective`) per optimizer
step, against a cross-entropy step of the same model and batch.

One model, scitldr_a's row of record (the `flat` recipe's `tiny`
configuration at hidden 128 / intermediate 512 / 8,000 pieces, with the copy
mechanism and the token shift; random weights: a random model rarely ends a
sample early, so every sample runs to its full length, the worst case), a
batch of 8 sources of 400 tokens and targets of 63 tokens. Each variant is
compiled by `model.compile` (Keras' default jit), warmed up twice, and timed
over `--repeats` `train_on_batch` calls; the ratios of medians are printed.

Usage: python benchmarks/reinforce.py [--repeats 10] [--samples 2 4 8]
Writes benchmarks/results/reinforce.json and .md.
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

BATCH, SOURCE, TARGET, VOCABULARY = 8, 400, 63, 8000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--samples", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import numpy as np

    from keras_hsum import recipes
    from keras_hsum.models import LabelSmoothedCrossEntropy
    from keras_hsum.decoding import ReinforceObjective

    config = recipes.config("flat", "tiny").replace(
        pointer_generator=True, token_shift=True, hidden_dim=128, intermediate_dim=512)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, VOCABULARY, (BATCH, SOURCE)).astype("int32")
    labels = rng.integers(4, VOCABULARY, (BATCH, TARGET)).astype("int32")
    labels[:, -1] = 3
    x = {"tokens": tokens, "token_mask": tokens != 0,
         "decoder_tokens": np.concatenate([np.full((BATCH, 1), 2), labels[:, :-1]], 1)
         .astype("int32"),
         "target_mask": np.ones((BATCH, TARGET), bool)}
    weights = np.ones((BATCH, TARGET), "float32")

    def seconds_per_step(samples):
        keras.utils.set_random_seed(0)
        model = recipes.get("flat").build_model(config, VOCABULARY)
        model(x)
        if samples:
            model.sequence_objective = ReinforceObjective(weight=0.9, num_samples=samples)
        model.compile(optimizer="adam", loss=LabelSmoothedCrossEntropy(0.1))
        for _ in range(2):  # tracing + compilation
            model.train_on_batch(x, labels, sample_weight=weights)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            model.train_on_batch(x, labels, sample_weight=weights)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    base = seconds_per_step(0)
    print(f"cross-entropy: {base:.3f} s/step", flush=True)
    rows = []
    for samples in args.samples:
        seconds = seconds_per_step(samples)
        rows.append({"samples": samples, "seconds": seconds, "ratio": seconds / base})
        print(f"K={samples}: {seconds:.3f} s/step ({seconds / base:.2f}x)", flush=True)
    result = {
        "model": "flat tiny 128/512 + copy + token shift (random weights)", "batch": BATCH,
        "source_tokens": SOURCE, "target_tokens": TARGET, "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "cross_entropy_seconds": base, "rows": rows,
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "reinforce.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    lines = [f"# Sequence-level training cost ({result['model']}, batch {BATCH}, {SOURCE} "
             f"source tokens, {TARGET} target tokens)", "",
             f"Machine: {result['machine']}. Median of {args.repeats} `train_on_batch` calls.",
             "", "| samples K | s/step | ratio to a cross-entropy step |", "|---:|---:|---:|",
             f"| 0 (cross-entropy only) | {base:.3f} | 1.00x |"]
    for row in rows:
        lines.append(f"| {row['samples']} | {row['seconds']:.3f} | {row['ratio']:.2f}x |")
    with open(os.path.join(RESULTS, "reinforce.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
