"""keras_hsum's packed dropout masks against Keras' own, same run (issue 57).

Under JAX every keras_hsum dropout draws its mask from four 16-bit fields
of each Threefry-2x32 hash (`keras_hsum.layers.packed_dropout`); Keras'
`Dropout` spends one hash per element. Two measurements on whatever device
JAX sees, the variants' timed windows interleaved (shared machines drift):

1. dropout alone: jitted forward + backward (`jax.value_and_grad` of the
   float32 sum) of dropout 0.3 on a bf16 tensor of PHT's word-attention
   probabilities [B, 4, 199, 30, 100] (batch `--dropout-batch`): Keras',
   keras_hsum's, none;
2. a recipe's paper-config train step (benchmarks/recipe_steps.py: the
   recipe loss, backward, its optimizer; mixed_bfloat16) at `--batch`,
   traced with keras_hsum's masks and with Keras' (accelerator.py's
   `keras_dropout` change).

Median ms of each, and each ÷ Keras'. Writes results/packed_dropout.md/.json
(`--out`). The GPU figures come from benchmarks/accelerator.py (tasks
`dropout`, `train:pht:bf16` and `train:pht:bf16:keras_dropout`).

Usage: python benchmarks/packed_dropout.py [--recipes pht,flat] [--batch 1]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import accelerator  # noqa: E402


def interleaved_medians(functions, windows, calls):
    """{name: median ms per call}: `windows` rounds, each timing `calls`
    calls of every function in turn (compiled and warm already)."""
    import jax

    times = {name: [] for name in functions}
    for _ in range(windows):
        for name, function in functions.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                out = function()
            jax.block_until_ready(out)
            times[name].append(1000 * (time.perf_counter() - t0) / calls)
    return {name: statistics.median(values) for name, values in times.items()}


def measure_dropout(batch, windows, calls):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rate, shape = 0.3, (batch, 4, 199, 30, 100)
    x = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, shape)).astype(jnp.bfloat16)
    seed = jnp.asarray([1234, 0], jnp.uint32)
    chosen = {"keras (threefry)": "keras", "keras_hsum packed (threefry, 16-bit fields)": "packed",
              "no dropout": "none"}
    functions, kept = {}, {}
    for name, dropout in accelerator.dropout_variants(rate):
        if name not in chosen:
            continue
        step = jax.jit(jax.value_and_grad(
            lambda x, seed, dropout=dropout: jnp.sum(dropout(x, seed).astype(jnp.float32))))
        _, grad = jax.block_until_ready(step(x, seed))
        kept[chosen[name]] = float(jnp.mean(grad != 0))
        functions[chosen[name]] = lambda step=step: step(x, seed)
    medians = interleaved_medians(functions, windows, calls)
    return {"shape": list(shape), "rate": rate, "ms": medians, "kept_fraction": kept,
            "over_keras": {k: v / medians["keras"] for k, v in medians.items()}}


def measure_step(name, batch, windows, calls):
    import jax
    import keras
    import recipe_steps

    module, config = accelerator.recipe_config(name, smoke=False)
    model = recipe_steps.build(module, name, config, "mixed_bfloat16")
    x, y, w = jax.device_put(recipe_steps.synthetic_batch(name, config, batch))
    functions, losses, compile_s = {}, {}, {}
    for variant, changes in (("packed", ""), ("keras", accelerator.KERAS_DROPOUT)):
        step = recipe_steps.TrainStep(module, config, model, "mixed_bfloat16")
        started = time.perf_counter()
        with accelerator.dropout_draws(changes):
            compiled = step.lower(step.initial_state(), x, y, w).compile()
        compile_s[variant] = time.perf_counter() - started
        holder = {"state": step.initial_state()}

        def call(compiled=compiled, holder=holder):
            loss, holder["state"] = compiled(holder["state"], x, y, w)
            return loss

        losses[variant] = [float(call()) for _ in range(2)]  # warm
        functions[variant] = call
    medians = interleaved_medians(functions, windows, calls)
    return {"recipe": name, "config": "paper", "batch": batch, "policy": "mixed_bfloat16",
            "ms": medians, "packed_over_keras": medians["packed"] / medians["keras"],
            "compile_s": compile_s, "first_losses": losses}


def write(result, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "packed_dropout.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    d = result["dropout"]
    lines = [
        "# keras_hsum's packed dropout masks against Keras' (benchmarks/packed_dropout.py)", "",
        f"{result['date']}, commit {result['commit']}, {result['device']}, jax "
        f"{result['jax']}, keras {result['keras']}; medians of interleaved windows.", "",
        f"Dropout {d['rate']} alone, bf16 {d['shape']}, jitted forward + backward:", "",
        "| masks | ms | ÷ Keras' | kept fraction |", "|---|---|---|---|"]
    for name in ("keras", "packed", "none"):
        lines.append(f"| {name} | {d['ms'][name]:.2f} | {d['over_keras'][name]:.2f}× | "
                     f"{d['kept_fraction'][name]:.4f} |")
    lines += ["", "Paper-config train steps (recipe loss, backward, optimizer):", "",
              "| recipe | batch | policy | packed ms | Keras' ms | packed ÷ Keras' |",
              "|---|---|---|---|---|---|"]
    for r in result["steps"]:
        lines.append(f"| {r['recipe']} | {r['batch']} | {r['policy']} | {r['ms']['packed']:.1f} | "
                     f"{r['ms']['keras']:.1f} | {r['packed_over_keras']:.3f}× |")
    with open(os.path.join(out, "packed_dropout.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="pht,flat")
    parser.add_argument("--batch", type=int, default=1, help="train step batch")
    parser.add_argument("--dropout-batch", type=int, default=2)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    import jax
    import keras
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
              "device": f"{jax.devices()[0].device_kind} ({platform.machine()}, "
                        f"{os.cpu_count()} CPUs)",
              "jax": jax.__version__, "keras": keras.__version__}
    result["dropout"] = measure_dropout(args.dropout_batch, args.windows, args.calls)
    print(json.dumps(result["dropout"]["ms"]), flush=True)
    result["steps"] = []
    for name in [n for n in args.recipes.split(",") if n]:
        result["steps"].append(measure_step(name, args.batch, args.windows, args.calls))
        print(name, json.dumps(result["steps"][-1]["ms"]), flush=True)
    write(result, args.out)


if __name__ == "__main__":
    main()
