"""`blocked_top_k` against one `ops.top_k` on a decode step's shapes (issue 57).

A decode step of a beam search takes the best 2·K candidates of each of its
B·K beams over V scores: a top-k of B·K rows of V. On a GPU one long row is
one thread block, so few rows leave the device idle (the top-k was 36% of
PHT's decode time per token on an H200, benchmarks/results/accelerator.md);
`keras_hsum.decoding.beam_search.blocked_top_k` cuts each row into blocks.
This times both, jitted under JAX on whatever device JAX sees, alternating
in one run (ratios, not absolute times, are the figure on a noisy machine),
checks they return the same indices, and prints a table: rows [B·K, V] at
K = 5, V = 32,000 (PHT's, HT's and flat's vocabulary), B = 1 and 8, k = 10,
and the finished-score row the stop check reads, [B, L·(C + K)] at
L = 200, for each block size in `--blocks`.

Usage: KERAS_BACKEND=jax python benchmarks/blocked_top_k.py [--blocks 256,512,1024]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)


def shapes(beams=5, vocabulary=32000, length=200):
    candidates = 2 * beams
    rows = []
    for batch in (1, 8):
        rows.append((f"candidates, B {batch}", (batch * beams, vocabulary), candidates))
        rows.append((f"finished scores, B {batch}", (batch, length * (candidates + beams)), beams))
    return rows


def measure(blocks, repeats=30, rounds=5):
    import jax
    import numpy as np
    from keras import ops

    from keras_hsum.decoding.beam_search import blocked_top_k

    results = []
    for label, shape, k in shapes():
        x = jax.device_put(np.random.default_rng(0).normal(size=shape).astype("float32"))
        flat = jax.jit(lambda x, k=k: ops.top_k(x, k))
        want = np.asarray(flat(x)[1])
        functions = {"top_k": flat}
        for block in blocks:
            functions[f"blocked {block}"] = jax.jit(
                lambda x, k=k, block=block: blocked_top_k(x, k, block))
            got = np.asarray(functions[f"blocked {block}"](x)[1])
            assert (got == want).all(), (label, block)
        times = {name: [] for name in functions}
        for _ in range(rounds):  # alternating
            for name, function in functions.items():
                jax.block_until_ready(function(x))
                t0 = time.perf_counter()
                for _ in range(repeats):
                    out = function(x)
                jax.block_until_ready(out)
                times[name].append((time.perf_counter() - t0) / repeats)
        medians = {name: statistics.median(values) for name, values in times.items()}
        results.append((label, shape, k, medians))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", default="256,512,1024")
    args = parser.parse_args(argv)
    import jax

    blocks = [int(b) for b in args.blocks.split(",")]
    print(f"device: {jax.devices()[0].device_kind}; times are medians of alternating rounds")
    print("| row | shape | k | top_k µs | " + " | ".join(f"blocked {b} ÷ top_k" for b in blocks)
          + " |")
    print("|---|---|---|---|" + "---|" * len(blocks))
    for label, shape, k, medians in measure(blocks):
        base = medians["top_k"]
        print(f"| {label} | {shape} | {k} | {1e6 * base:.1f} | "
              + " | ".join(f"{medians[f'blocked {b}'] / base:.2f}×" for b in blocks) + " |")


if __name__ == "__main__":
    main()
