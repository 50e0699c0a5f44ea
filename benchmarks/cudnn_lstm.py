"""The discourse word encoder by cuDNN's LSTM kernel against the scan (issue 57).

`DiscourseSummarizer`'s "paper" word encoder is a masked bidirectional LSTM
over each right-padded section. `bidirectional_lstm_scan` runs it as one
`ops.scan` of T steps (both directions stacked): on XLA CPU, forward 500 x 16
and backward 500 x 21 kernel-like ops per train step at the paper size,
39% of the discourse step's serial kernels
(benchmarks/results/discourse_serial_kernels.md). Where JAX sees a GPU it
now runs `jax_cudnn_bidirectional` instead: one call of
`jax.experimental.rnn.lstm` (cuDNN's kernel, float32) for both directions.

This builds the paper's word encoder (cell 256, embeddings 128) on
[B·P, T] = [16·4, 500] right-padded rows (lengths drawn from [T/4, T], a few
empty rows, as a batch of sections is), and on the device JAX sees:
- checks cuDNN against the scan in float32 (the paper's widths on 8 rows of
  40 steps, to compile fast): outputs, final states and the gradients of a
  fixed random linear function of them w.r.t. the inputs and the six
  weights (largest absolute difference, and relative to the largest value);
- times a jitted forward + backward of each at the paper size, alternating
  in one run, in float32 and under `mixed_bfloat16` (the discourse
  recipe's policy on a GPU; `accelerator.py`'s task `cudnn_lstm` times
  this one only): the ratio is the figure.
Without a GPU the cuDNN kernel does not exist: the "cuDNN" side then runs
JAX's reference `lstm_ref` through the same wrapper (`--smoke`, CPU), which
checks the plumbing, not the kernel, and says so in its output.

Usage: KERAS_BACKEND=jax python benchmarks/cudnn_lstm.py [--smoke]
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

PAPER = dict(rows=16 * 4, steps=500, embedding=128, units=256)
CHECK = dict(rows=8, steps=40, embedding=128, units=256)  # the paper's widths, short rows
SMOKE = dict(rows=6, steps=12, embedding=8, units=8)


def encoder(units, embedding, dtype=None):
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    forward = keras.layers.LSTM(units, return_sequences=True, dtype=dtype)
    backward = keras.layers.LSTM(units, return_sequences=True, go_backwards=True, dtype=dtype)
    layer = keras.layers.Bidirectional(forward, backward_layer=backward, merge_mode=None,
                                       dtype=dtype)
    layer.build((None, None, embedding))
    for lstm in (layer.forward_layer, layer.backward_layer):  # a bias that shows
        lstm.cell.bias.assign(np.random.default_rng(1).normal(size=4 * units) * 0.1)
    return layer


def batch(rows, steps, embedding, seed=0):
    """Inputs [rows, steps, E] and a right-padded mask: lengths in
    [steps/4, steps], every eighth row empty."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(steps // 4, steps + 1, rows)
    lengths[::8] = 0
    mask = np.arange(steps)[None, :] < lengths[:, None]
    return rng.normal(size=(rows, steps, embedding)).astype("float32"), mask


def loss_function(layer, mask, run):
    """`(values, x) -> (loss, results)` for jax.value_and_grad: a fixed
    random linear function of the outputs and states."""
    import keras
    import numpy as np
    from keras import ops

    variables = layer.trainable_variables

    def loss(values, x):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            forward, backward, states = run(layer, x, mask)
        total = 0.0
        rng = np.random.default_rng(2)
        for value in (forward, backward) + tuple(states):
            weights = rng.normal(size=tuple(value.shape)).astype("float32")
            total = total + ops.sum(ops.cast(value, "float32") * weights)
        return total, (forward, backward, states)

    return loss


def runs(lstm):
    from keras_hsum.layers.bidirectional_lstm_scan import bidirectional_lstm_scan
    from keras_hsum.layers.bidirectional_lstm_scan import jax_cudnn_bidirectional

    return {
        "scan": lambda layer, x, mask: bidirectional_lstm_scan(layer, x, mask),
        "cuDNN": lambda layer, x, mask: jax_cudnn_bidirectional(layer, x, mask, lstm),
    }


def compiled(layer, mask, lstm):
    """{name: jitted value_and_grad over (weights, inputs)} for the scan and
    the cuDNN path."""
    import jax

    return {name: jax.jit(jax.value_and_grad(loss_function(layer, mask, run), argnums=(0, 1),
                                             has_aux=True))
            for name, run in runs(lstm).items()}


def check(lstm, sizes):
    """cuDNN against the scan in float32 at `sizes`: outputs, states and the
    gradients w.r.t. the inputs and the six weights. Returns (largest
    absolute difference, largest difference relative to the largest value
    of each array)."""
    import jax
    import numpy as np

    layer = encoder(sizes["units"], sizes["embedding"], dtype="float32")
    x, mask = batch(sizes["rows"], sizes["steps"], sizes["embedding"], seed=3)
    values = [v.value for v in layer.trainable_variables]
    outputs = {}
    for name, function in compiled(layer, mask, lstm).items():
        (_, results), grads = function(values, jax.device_put(x))
        outputs[name] = [np.asarray(v, "float32") for v in jax.tree.leaves((results, grads))]
    pairs = list(zip(outputs["cuDNN"], outputs["scan"], strict=True))
    absolute = max(float(np.abs(a - b).max()) for a, b in pairs)
    relative = max(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in pairs)
    return absolute, relative


def measure(smoke=False, policies=("mixed_bfloat16",), repeats=10, rounds=5, log=print):
    """A dict: device, kernel ("cudnn" or "lstm_ref"), the float32 check
    (at CHECK sizes: the paper's widths, short rows) and, per policy, the
    median ms of a forward + backward of each at the paper size."""
    import jax

    sizes = SMOKE if smoke else PAPER
    on_gpu = jax.default_backend() == "gpu"
    if on_gpu:
        from jax.experimental import rnn

        lstm = rnn.lstm
    else:
        from keras_hsum.layers.bidirectional_lstm_scan import reference_lstm as lstm
    result = {"device": jax.devices()[0].device_kind, "sizes": sizes,
              "kernel": "cudnn" if on_gpu else "lstm_ref (no GPU: the plumbing, not the kernel)"}
    absolute, relative = check(lstm, SMOKE if smoke else CHECK)
    result["max abs difference"] = absolute
    result["max relative difference"] = relative
    # TF32 matmuls in cuDNN against float32 ones in the scan: 1e-2 relative
    # is far above their rounding and far below a wrong layout (order one).
    result["equal"] = relative < 1e-2
    log(f"cudnn_lstm check (float32, {CHECK if not smoke else SMOKE}): max abs {absolute:.2e}, "
        f"max relative {relative:.2e}")
    x, mask = batch(sizes["rows"], sizes["steps"], sizes["embedding"])
    x = jax.device_put(x)
    for policy in policies:
        layer = encoder(sizes["units"], sizes["embedding"], dtype=policy)
        values = [v.value for v in layer.trainable_variables]
        functions = compiled(layer, mask, lstm)
        for name, function in functions.items():
            t0 = time.perf_counter()
            jax.block_until_ready(function(values, x))
            result[f"{policy} {name} first call s"] = time.perf_counter() - t0
        times = {name: [] for name in functions}
        for _ in range(rounds):  # alternating
            for name, function in functions.items():
                jax.block_until_ready(function(values, x))
                t0 = time.perf_counter()
                for _ in range(repeats):
                    out = function(values, x)
                jax.block_until_ready(out)
                times[name].append((time.perf_counter() - t0) / repeats)
        medians = {name: statistics.median(t) for name, t in times.items()}
        result[f"{policy} ms"] = {name: 1e3 * m for name, m in medians.items()}
        result[f"{policy} cuDNN / scan"] = medians["cuDNN"] / medians["scan"]
        log(f"cudnn_lstm {policy} {sizes}: scan {1e3 * medians['scan']:.2f} ms, cuDNN "
            f"{1e3 * medians['cuDNN']:.2f} ms ({medians['cuDNN'] / medians['scan']:.3f}x)")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU check)")
    args = parser.parse_args(argv)
    result = measure(smoke=args.smoke, policies=("float32", "mixed_bfloat16"),
                     repeats=2 if args.smoke else 10, rounds=2 if args.smoke else 5)
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
