"""keras_hsum where users train: paper-size training and decoding on whatever device JAX sees.

Needs only JAX, Keras, keras-hub and numpy (no TensorFlow): run it with
`KERAS_BACKEND=jax` (set here when unset). Three sections, in the order of
`--tasks` (default: the order below, most wanted first):

- `train:<recipe>:<bf16|f32>[:FIELD=VALUE[+FIELD=VALUE...]]`: the recipe's
  `paper` config (with the given fields changed, parsed as `--set` does:
  e.g. `train:flat:bf16:attention_dropout=0`, the fused-attention variant of
  docs/recipes.md; `keras_dropout`, not a field, traces the step with
  Keras' own dropout masks instead of keras_hsum's packed ones,
  `keras_hsum.layers.packed_dropout`, and `keras_attention_dropout` with
  Keras' written-out attention dropout instead of the Pallas kernel of
  `keras_hsum.layers.dropout_attention`), synthetic
  inputs of its shapes (benchmarks/recipe_steps.py), one `jax.jit` stateless
  step (forward, the recipe's loss, backward, its optimizer; state donated)
  under `mixed_bfloat16` or `float32`, at the paper batch (seal at
  `BATCH_CAP`; halved on out-of-memory, the row says so). Step ms is the
  median of timed windows of `--steps` steps after two warm-up steps;
  MFU = the project's FLOP count of one step (benchmarks/results/
  data_pipeline_paper_flops.json: XLA's cost analysis of value_and_grad at
  batch 1 on CPU, discourse by hand) × batch ÷ step time ÷ the device's
  dense bf16 peak (989.4 TFLOP/s on an H100 or H200; f32 rows are also
  given against the TF32 peak). No peak is known for a CPU: no MFU there.
- `decode:<model>[:static]`: paper-size beam search (beam 5, 200 tokens with EOS
  blocked, batch 1 and 8, float32, untrained), benchmarks/decode.py's
  paper models and inputs: ours (`keras_hsum.decoding.beam_search` with
  GNMT 0.6 and trigram blocking; it checks whether it can stop once every
  `stop_check_every` = 8 positions, on a GPU a device-to-host read),
  keras-hub's `BeamSampler` on the same `model.step` and cache, and the
  floor (the encoder, the cache and 200 calls of `model.step` with argmax
  feeding, in one jit: no search at all). Each is one `jax.jit` function
  with the weights as arguments. `:static` adds "ours, static" (the same
  search with `stop_check_every=None`: one loop of a static trip count, no
  host reads) and whether it returned the same ids as ours (it must: with
  min_length = 200 neither can stop early).
- `dropout`: what attention dropout's random numbers cost. Jitted forward
  + backward (`jax.value_and_grad` of the sum) of dropout at the PHT paper
  config's attention dropout rate (0.3) on a bf16 tensor of its word
  attention probabilities ([16, 4, 199, 30, 100]): Keras' own
  (`keras.random.dropout`: `jax.random.bernoulli` of a threefry key),
  keras_hsum's (`packed_dropout`: four 16-bit fields of each threefry
  hash), the mask from `jax.random.bits` of an `unsafe_rbg` key made from
  the same seed (uint32 bits, and uint16 bits), and no dropout (the floor); median
  ms of each, its ratio to Keras', and the kept fraction (a wrong variant
  shows: it must be within 0.002 of 0.7).
- `cudnn_lstm`: the discourse paper word encoder (a bidirectional LSTM,
  cell 256, over 16·4 right-padded sections of 500 steps) by cuDNN's LSTM
  kernel (`jax_cudnn_bidirectional`, what the discourse model runs where a
  GPU is visible) against the scan: a float32 check of outputs, states and
  gradients, then a jitted forward + backward of each under mixed_bfloat16
  (benchmarks/cudnn_lstm.py). `train:discourse:bf16:use_cudnn=false` is the
  whole step with the scan.
- `profile:train:<recipe>` and `profile:decode:<model>`: a
  `jax.profiler` trace of 5 steps (or one decode per method) parsed into
  kernel time by class (matmul, attention, elementwise, reduction, copies,
  other), the top kernels, kernels per step (per token), the device's busy
  fraction and the idle gaps. On an accelerator the kernels are the device
  streams' events; on a CPU, the host's XLA op events (thunks).

`--budget` seconds (default 400) guard the run: a task starts only when the
time it is expected to take is left (it is skipped and the output says so),
and a watchdog writes what was measured and exits at the budget + 10 s.
`--smoke` runs every section on CPU-size configs in a couple of minutes.

`--cpu-proxies` measures instead, on the CPU, what the accelerator will pay
for the train step of `--recipes` (default pht, ht, flat, discourse) at the
paper config and `--batch` (default 2) under mixed_bfloat16: XLA's cost
analysis of the compiled step (flops, bytes accessed), and from its optimized
HLO the transposes, copies, fusions and custom-calls (all, and those at the
top level of the program: kernels of their own), and the largest float32
buffers (any as large as the [B·S, V] logits counted). With
benchmarks/decode_loop_hlo.py present it adds its decode-loop figures (while
loops with a known trip count, longest top-k row, kernel-like ops per loop
body; ours vs keras-hub). `--label before|after` names the column;
`--checkout DIR` measures another checkout's keras_hsum and recipes (e.g. a
`git worktree` of an older commit).

Results: benchmarks/results/accelerator.json and .md (`--out DIR` elsewhere),
merged with what is there: device runs keyed by device kind, smoke runs and
CPU proxies apart.

Usage:
    KERAS_BACKEND=jax python benchmarks/accelerator.py [--budget 400] [--tasks ...]
    KERAS_BACKEND=jax JAX_PLATFORMS=cpu python benchmarks/accelerator.py --smoke
    KERAS_BACKEND=jax python benchmarks/accelerator.py --cpu-proxies --label after
    bash benchmarks/accelerator_device.sh   # on the GPU machine (see its header)
"""

import argparse
import collections
import contextlib
import datetime
import gc
import glob
import gzip
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

os.environ.setdefault("KERAS_BACKEND", "jax")
START = time.perf_counter()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
RESULTS = os.path.join(BENCHMARKS, "results")
STEM = "accelerator"

# Dense peaks (no sparsity), NVIDIA's datasheets, SXM parts.
PEAKS = (  # (device kind contains, bf16 FLOP/s, TF32 FLOP/s)
    ("H200", 989.4e12, 494.7e12),
    ("H100", 989.4e12, 494.7e12),
    ("A100", 312e12, 156e12),
)
BEAMS, LENGTH, DECODE_BATCHES = 5, 200, (1, 8)
BATCH_CAP = {"seal": 4}  # seal's paper batch (256 × 256 × 64 tokens) fits no one GPU
TRAIN_RECIPES = ("pht", "ht", "flat", "discourse", "seal", "shte")
DECODE_MODELS = ("pht", "ht", "flat", "discourse")
DEFAULT_TASKS = (
    # Most wanted first (stop 67): what decides issue 57's targets. The four
    # paper decodes (the blocked top-k since the first GPU run; PHT also
    # with a static trip count, to price the stop check), the discourse word
    # encoder by cuDNN and the discourse step with and without it, the
    # fused-attention train variants; then the cheap questions (attention
    # dropout's random bits, the top-k blocks), the profiles, the anchor and
    # the paper rows measured once already.
    "decode:pht:static", "decode:ht", "decode:flat", "cudnn_lstm", "dropout", "topk",
    "decode:discourse",
    "train:discourse:bf16", "train:discourse:bf16:use_cudnn=false",
    # stop 69: the paper steps with attention dropout inside the Pallas
    # kernel (keras_hsum.layers.dropout_attention, on a GPU by default) and
    # with Keras' written-out attention, same run; then (stop 68) Keras'
    # own dropout masks against keras_hsum's packed ones.
    "train:pht:bf16", "train:pht:bf16:keras_attention_dropout",
    "train:flat:bf16", "train:flat:bf16:keras_attention_dropout", "train:ht:bf16",
    "train:ht:bf16:keras_attention_dropout",
    *(f"train:{name}:bf16:attention_dropout=0" for name in ("pht", "ht", "flat")),
    "train:pht:bf16:keras_dropout", "train:flat:bf16:keras_dropout",
    "profile:train:pht", "profile:train:pht:attention_dropout=0", "profile:decode:pht",
    "anchor:xla", "anchor:flash",
    "train:seal:bf16", "train:shte:bf16",
    *(f"train:{name}:f32" for name in ("pht", "ht", "flat", "discourse")),
)
# Seconds a task is expected to take on a GPU (compiles dominate); a task
# starts only with this much budget left.
# decode:MODEL:static compiles ours a second time (PHT's first calls of ours
# on the H200: 12.5 s at batch 1, 18.7 s at batch 8); profile:decode profiles
# the static search too where it ran (four traces, not three).
EXPECTED_S = {"train": 45, "decode": 90, "decode:static": 140, "profile:train": 30,
              "profile:decode": 50, "anchor": 25, "topk": 15, "dropout": 15, "cudnn_lstm": 45}
SMOKE_EXPECTED_S = {"train": 20, "decode": 30, "decode:static": 40, "profile:train": 10,
                    "profile:decode": 15, "anchor": 10, "topk": 10, "dropout": 10,
                    "cudnn_lstm": 15}
# --smoke: the tiny configs made smaller still, so that the CPU compiles fast.
SMOKE_CHANGES = {
    "pht": dict(max_paragraphs=4, max_paragraph_tokens=16, max_target_length=16),
    "ht": dict(max_paragraphs=4, paragraph_length=16, max_target_length=16),
    "flat": dict(max_source_length=64, max_target_length=16),
    "discourse": dict(max_sections=2, max_section_length=16, max_target_length=16),
    "seal": dict(max_snippets=8, snippet_length=16, max_target_length=17, segment_length=8,
                 extract_length=32),
    "shte": dict(max_sentences=8, max_sentence_tokens=16),
}
SMOKE_DECODE = {"pht": (4, 16), "ht": (4, 16), "flat": (1, 64), "discourse": (2, 16)}
SMOKE_LENGTH = 8


def register_recipes(root):
    """Make `root`/recipes importable as keras_hsum.recipes (what setup.py's
    `package_dir` does for an installed checkout; a checkout copied onto a
    machine and put on PYTHONPATH lacks it)."""
    import importlib.util

    import keras_hsum

    spec = importlib.util.spec_from_file_location(
        "keras_hsum.recipes", os.path.join(root, "recipes", "__init__.py"),
        submodule_search_locations=[os.path.join(root, "recipes")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["keras_hsum.recipes"] = module
    spec.loader.exec_module(module)
    keras_hsum.recipes = module


def use_checkout(path):
    """Import keras_hsum and its recipes from the checkout at `path`
    instead of this one."""
    path = os.path.abspath(path)
    sys.path.insert(0, path)
    for name in [m for m in sys.modules if m == "keras_hsum" or m.startswith("keras_hsum.")]:
        del sys.modules[name]
    import keras_hsum

    if not os.path.abspath(keras_hsum.__file__).startswith(path + os.sep):
        raise SystemExit(f"--checkout {path}: keras_hsum still imports from {keras_hsum.__file__}")
    register_recipes(path)


def merge_results(folder, path):
    """Folds the runs of another accelerator.json (e.g. the device's
    $OUT/accelerator.json) into `folder`'s."""
    with open(path, encoding="utf-8") as handle:
        other = json.load(handle)
    try:
        with open(os.path.join(folder, STEM + ".json"), encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        stored = {}
    keys = []
    for key, result in other.items():
        date = result.get("device", {}).get("date")
        # Another run on the same device kind (e.g. a second call in the same
        # session) is kept beside the first, keyed by its date.
        if key in stored and stored[key].get("device", {}).get("date") != date:
            key = f"{key}, {date}"
        write_results(folder, key, result)
        stored[key] = result
        keys.append(key)
    print(f"merged {keys} into {os.path.join(folder, STEM)}.json/.md")


def git_commit(path=ROOT):
    try:
        done = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return done.stdout.strip() + (" + uncommitted changes" if dirty else "") or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"


# ---------------------------------------------------------------------------
# The run: time guard, log, results written after every task.


class Run:
    def __init__(self, args):
        self.args = args
        self.result = {"rows": [], "skipped": [], "errors": []}
        self.lock = threading.Lock()

    def elapsed(self):
        return time.perf_counter() - START

    def left(self):
        return self.args.budget - self.elapsed()

    def log(self, message):
        print(f"[{self.elapsed():6.1f} s] {message}", flush=True)

    def save(self):
        with self.lock:
            self.result["seconds"] = round(self.elapsed(), 1)
            write_results(self.args.out, self.args.key, self.result)

    def start_watchdog(self):
        def fire():
            self.log(f"budget of {self.args.budget} s spent: writing what was measured, exiting")
            self.result["stopped"] = f"watchdog at {self.args.budget + 10} s"
            try:
                self.save()
            finally:
                os._exit(3)

        timer = threading.Timer(max(1.0, self.args.budget + 10 - self.elapsed()), fire)
        timer.daemon = True
        timer.start()


def device_info():
    import jax
    import keras

    device = jax.devices()[0]
    info = {"device_kind": device.device_kind, "platform": device.platform,
            "devices": len(jax.devices()), "jax": jax.__version__, "keras": keras.__version__,
            "python": platform.python_version(), "host": f"{platform.machine()}, "
            f"{os.cpu_count()} CPUs", "commit": git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        import keras_hub

        info["keras_hub"] = keras_hub.__version__
    except ImportError as error:
        info["keras_hub"] = f"absent ({error})"
    info["tensorflow_imported"] = "tensorflow" in sys.modules
    return info


def peaks(device_kind):
    for key, bf16, tf32 in PEAKS:
        if key.lower() in device_kind.lower():
            return bf16, tf32
    return None, None


def out_of_memory(error):
    text = f"{type(error).__name__}: {error}"
    return any(key in text for key in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory"))


def one_line(error):
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}"


# ---------------------------------------------------------------------------
# Train steps.


def recipe_config(name, smoke, changes=""):
    """(recipe module, config): `paper` (smoke: `tiny`, made smaller), with
    `changes` ("FIELD=VALUE+FIELD=VALUE", a train task's fourth part) applied
    as the command line's `--set` applies them."""
    from keras_hsum import recipes
    from keras_hsum.cli import parse_overrides

    module = recipes.get(name)
    if smoke:
        config = module.CONFIGS["tiny"].replace(**SMOKE_CHANGES.get(name, {}))
    else:
        config = module.CONFIGS["paper"]
    fields = [c for c in changes.split("+") if c and c not in FLAG_CHANGES]
    return module, parse_overrides(config, fields)


KERAS_DROPOUT = "keras_dropout"  # a train change: Keras' own dropout masks
# Train changes that are switches, not config fields: Keras' dropout masks;
# Keras' written-out attention dropout instead of keras_hsum's fused kernel
# (benchmarks/gpu_compile.py, dropout_attention.use_layer_implementation).
FLAG_CHANGES = (KERAS_DROPOUT, "keras_attention_dropout")


@contextlib.contextmanager
def dropout_draws(changes):
    """Traces with Keras' own dropout masks where `changes` names
    `keras_dropout` (keras_hsum's dropouts call `packed_dropout` at trace
    time: it is swapped for `keras.random.dropout` meanwhile), and with
    Keras' written-out attention dropout where it names
    `keras_attention_dropout` (`dropout_attention.use_layer_implementation
    ("keras")`: on a GPU keras_hsum's attentions otherwise drop inside the
    Pallas kernel); else as is."""
    from keras_hsum.layers import dropout_attention
    from keras_hsum.layers import packed_dropout

    flags = changes.split("+")
    if "keras_attention_dropout" in flags:
        previous = dropout_attention.use_layer_implementation("keras")
        try:
            with dropout_draws("+".join(f for f in flags if f != "keras_attention_dropout")):
                yield
        finally:
            dropout_attention.use_layer_implementation(previous)
        return
    if KERAS_DROPOUT not in flags:
        yield
        return
    import keras

    original = packed_dropout.packed_dropout
    packed_dropout.packed_dropout = (
        lambda inputs, rate, seed: keras.random.dropout(inputs, rate, seed=seed))
    try:
        yield
    finally:
        packed_dropout.packed_dropout = original


def project_flops_per_example():
    """{recipe: FLOPs of one training example} of benchmarks/results/
    data_pipeline_paper_flops.json (the paper configs), or {}."""
    try:
        with open(os.path.join(RESULTS, "data_pipeline_paper_flops.json"), encoding="utf-8") as f:
            rows = json.load(f)["rows"]
    except (OSError, KeyError, ValueError):
        return {}
    return {name: (row["flops_per_example"], row.get("method", ""))
            for name, row in rows.items() if row.get("flops_per_example")}


def xla_cost(stage):
    """XLA's cost analysis of a lowered or compiled stage as a dict (or {})."""
    try:
        analysis = stage.cost_analysis()
    except Exception:  # noqa: BLE001 (not every backend and version has one)
        return {}
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return dict(analysis or {})


def xla_buffer_bytes(compiled):
    try:
        stats = compiled.memory_analysis()
        return int(stats.temp_size_in_bytes + stats.argument_size_in_bytes
                   + stats.output_size_in_bytes - stats.alias_size_in_bytes)
    except Exception:  # noqa: BLE001
        return None


def prepared_step(ctx, name, precision, batch, changes=""):
    """(TrainStep, state, x, y, w, config) on the device, model built once
    per (recipe, policy, config changes)."""
    import jax
    import recipe_steps

    module, config = recipe_config(name, ctx["smoke"], changes)
    policy = "mixed_bfloat16" if precision == "bf16" else "float32"
    key = (name, policy, changes)
    if key not in ctx["models"]:
        ctx["models"][key] = recipe_steps.build(module, name, config, policy)
    step = recipe_steps.TrainStep(module, config, ctx["models"][key], policy)
    x, y, w = jax.device_put(recipe_steps.synthetic_batch(name, config, batch))
    return step, step.initial_state(), x, y, w, config


def measure_train(run, ctx, name, precision, changes=""):
    _, config = recipe_config(name, ctx["smoke"], changes)
    paper_batch = config.batch_size
    batch = 2 if ctx["smoke"] else min(paper_batch, BATCH_CAP.get(name, paper_batch))
    row = {"task": ":".join(filter(None, ("train", name, precision, changes))),
           "recipe": name, "precision": precision, "changes": changes,
           "paper_batch": paper_batch, "vocabulary_size": config.vocabulary_size}
    if batch != paper_batch and not ctx["smoke"]:
        row["note"] = f"batch {batch}, not the paper's {paper_batch} (far beyond one GPU's memory)"
    while True:
        row["batch"] = batch
        started = time.perf_counter()
        try:
            step, state, x, y, w, config = prepared_step(ctx, name, precision, batch, changes)
            row["parameters"] = int(step.model.count_params())
            with dropout_draws(changes):
                lowered = step.lower(state, x, y, w)
            lowered_cost = xla_cost(lowered)
            compiled = lowered.compile()
            row["compile_s"] = time.perf_counter() - started
            row["xla_buffer_gib"] = (xla_buffer_bytes(compiled) or 0) / 2**30 or None
            row["fused_attention_calls"] = fused_attention_calls(compiled)
            holder = {}

            def call(state):
                loss, holder["state"] = compiled(state, x, y, w)
                return loss, holder["state"]

            times, losses, steps = timed(run, ctx, call, state)
            state = holder["state"]
            break
        except Exception as error:  # noqa: BLE001
            if out_of_memory(error) and batch > 1:
                run.log(f"{row['task']} batch {batch}: out of memory, halving")
                row["note"] = (row.get("note", "") + f" batch {batch} ran out of memory;").strip()
                batch //= 2
                state = x = y = w = lowered = compiled = None
                gc.collect()
                continue
            raise
    step_s = statistics.median(times)
    ctx["compiled"][(name, precision, changes)] = (compiled, state, x, y, w, batch)  # for a profile
    row.update(step_ms=1000 * step_s, examples_per_s=batch / step_s,
               steps_timed=steps * len(times), losses=losses,
               loss_finite=all(math.isfinite(v) for v in losses),
               xla_flops_lowered=lowered_cost.get("flops"))
    flops = ctx["flops"].get(name)
    if flops and not ctx["smoke"]:
        row["flops_per_step"] = flops[0] * batch
        row["flops_method"] = f"project count ({flops[1]})"
    elif lowered_cost.get("flops"):
        row["flops_per_step"] = lowered_cost["flops"]
        row["flops_method"] = "XLA cost analysis of the lowered step"
    bf16_peak, tf32_peak = peaks(ctx["device"]["device_kind"])
    if row.get("flops_per_step"):
        row["tflop_per_s"] = row["flops_per_step"] / step_s / 1e12
        if bf16_peak:
            row["mfu_pct"] = 100 * row["flops_per_step"] / step_s / bf16_peak
            if precision == "f32":
                row["pct_of_tf32_peak"] = 100 * row["flops_per_step"] / step_s / tf32_peak
    run.log(f"{row['task']}: batch {batch}, {row['step_ms']:.1f} ms/step, "
            f"{row['examples_per_s']:.1f} examples/s, MFU {fmt(row.get('mfu_pct'), '.1f')}%, "
            f"compile {row['compile_s']:.1f} s, losses {[round(v, 3) for v in losses]}")
    return row


# ---------------------------------------------------------------------------
# The anchor: keras-hub's own encoder stack at PHT's width.

ANCHOR_LAYERS = 6


def anchor_program(variant, config, batch, layers):
    """(step, state, x, row): the anchor's jitted step `step(state, x) ->
    (loss, state)` (state donated) and its inputs, built under
    `mixed_bfloat16` with Keras' flash attention on (`flash`) or off
    (`xla`: Keras' MultiHeadAttention reads the setting when it is made);
    `row` describes it, with its FLOPs. x and state are numpy arrays."""
    import jax
    import keras
    import numpy as np
    from keras_hub.layers import TransformerEncoder

    if variant not in ("xla", "flash"):
        raise ValueError(f"unknown anchor variant {variant!r}; expected anchor:xla or anchor:flash")
    D, H, F = config.hidden_dim, config.num_heads, config.intermediate_dim
    P, T = config.max_paragraphs, config.max_paragraph_tokens
    sequences = batch * P
    row = {"task": f"anchor:{variant}", "recipe": f"anchor: keras-hub encoder ×{layers}",
           "precision": "bf16", "changes": "flash attention" if variant == "flash"
           else "XLA attention", "batch": batch, "sequences": sequences,
           "sequence_length": T, "hidden_dim": D, "intermediate_dim": F, "num_heads": H}
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        with anchor_attention(variant):
            inputs = keras.Input((T, D))
            hidden = inputs
            for i in range(layers):
                hidden = TransformerEncoder(F, H, dropout=0.0, name=f"encoder_{i}")(hidden)
            model = keras.Model(inputs, hidden)
    finally:
        keras.config.set_dtype_policy("float32")
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def step(trainable, x):
        def loss_fn(trainable):
            y, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            y = keras.ops.cast(y, "float32")
            return keras.ops.mean(y * y)

        loss, grads = jax.value_and_grad(loss_fn)(trainable)
        return loss, [t - 1e-4 * g.astype(t.dtype) for t, g in zip(trainable, grads)]

    x = np.random.default_rng(0).standard_normal((sequences, T, D), "float32")
    state = [np.array(t) for t in trainable]
    row["parameters"] = int(model.count_params())
    row["flops_per_step"] = 3 * layers * sequences * T * (8 * D * D + 4 * D * F + 4 * T * D)
    row["flops_method"] = "anchor: 3 × layers × tokens × (8D² + 4DF + 4TD)"
    return jax.jit(step, donate_argnums=0), state, x, row


@contextlib.contextmanager
def anchor_attention(variant):
    """Keras' flash attention on (`flash`) or off (`xla`) while the anchor
    is lowered; Keras' default (None: auto) afterwards."""
    import keras

    if variant == "flash":
        keras.config.enable_flash_attention()
    else:
        keras.config.disable_flash_attention()
    try:
        yield
    finally:
        keras.config.enable_flash_attention()


def measure_anchor(run, ctx, variant):
    """`anchor:xla|flash`: ANCHOR_LAYERS keras-hub TransformerEncoder layers
    (post-norm, relu, dropout 0, no mask) of the PHT paper config's width,
    on its encoder's B·P sequences of T tokens, forward + backward + an SGD
    update in one jit, mixed_bfloat16; `flash`: Keras' flash attention on
    (cuDNN where it applies), `xla`: off. The figure every Transformer recipe's
    MFU is compared with (issue 57). FLOPs counted analytically per layer and
    token: 8·D² (four projections) + 4·D·F (the feed-forward) + 4·T·D (QKᵀ and
    AV), ×3 for forward + backward."""
    import jax

    _, config = recipe_config("pht", ctx["smoke"])
    batch = 2 if ctx["smoke"] else config.batch_size
    layers = 2 if ctx["smoke"] else ANCHOR_LAYERS
    started = time.perf_counter()
    step, state, x, row = anchor_program(variant, config, batch, layers)
    x, state = jax.device_put(x), jax.device_put(state)
    compiled = step.lower(state, x).compile()
    row["compile_s"] = time.perf_counter() - started
    row["xla_buffer_gib"] = (xla_buffer_bytes(compiled) or 0) / 2**30 or None
    row["fused_attention_calls"] = fused_attention_calls(compiled)
    times, losses, steps = timed(run, ctx, lambda state: compiled(state, x), state)
    step_s = statistics.median(times)
    row.update(step_ms=1000 * step_s, examples_per_s=batch / step_s,
               steps_timed=steps * len(times), losses=losses,
               loss_finite=all(math.isfinite(v) for v in losses))
    row["tflop_per_s"] = row["flops_per_step"] / step_s / 1e12
    bf16_peak, _ = peaks(ctx["device"]["device_kind"])
    if bf16_peak:
        row["mfu_pct"] = 100 * row["flops_per_step"] / step_s / bf16_peak
    sequences, T = row["sequences"], row["sequence_length"]
    run.log(f"{row['task']}: {sequences}×{T} tokens, {row['step_ms']:.2f} ms/step, MFU "
            f"{fmt(row.get('mfu_pct'), '.1f')}%, cuDNN attention calls "
            f"{row['fused_attention_calls']}, compile {row['compile_s']:.1f} s")
    return row


def fused_attention_calls(compiled):
    """cuDNN fused-attention custom calls (forward and backward) in a compiled
    program's optimized HLO (None where its text cannot be read)."""
    try:
        return len(re.findall(r'custom_call_target="__cudnn\$fmha', compiled.as_text() or ""))
    except Exception:  # noqa: BLE001
        return None


def measure_topk(run, ctx):
    """`topk`: the search's blocked top-k against one `top_k` on the decode
    step's rows (benchmarks/blocked_top_k.py), on this device."""
    import blocked_top_k

    rows = []
    for label, shape, k, medians in blocked_top_k.measure(blocks=(256, 512, 1024)):
        base = medians["top_k"]
        row = {"task": "topk", "row": label, "shape": list(shape), "k": k,
               "top_k_us": 1e6 * base,
               "ratios": {name: value / base for name, value in medians.items()
                          if name != "top_k"}}
        rows.append(row)
        run.log(f"topk {label} {shape} k {k}: top_k {row['top_k_us']:.1f} µs, " + ", ".join(
            f"{name} {ratio:.2f}×" for name, ratio in row["ratios"].items()))
    return rows


# `dropout`: the PHT word attention's probabilities, [B, H, S, P, T] at
# the paper config (batch 16, 4 heads, 199 teacher-forcing positions, 30
# paragraphs of 100 tokens); smoke: about half a million elements, enough for
# the kept fraction to land within DROPOUT_KEPT_TOLERANCE.
SMOKE_DROPOUT_SHAPE = (2, 4, 63, 10, 100)
DROPOUT_KEPT_TOLERANCE = 0.002
DROPOUT_SEED_MIX = 0x9E3779B9  # the rbg key's second half: seed ^ this


def dropout_variants(rate):
    """`[(name, f(x, seed) -> x with dropout at `rate`)]`, x any float
    array, seed a raw uint32[2] key (what Keras' JAX backend passes):

    - "keras (threefry)": `keras.random.dropout`, i.e.
      `jax.random.bernoulli` of the raw threefry key (uniform float32 < keep);
    - "keras_hsum packed (threefry, 16-bit fields)": `packed_dropout`, the
      masks every keras_hsum dropout draws under JAX: one threefry hash per
      four elements;
    - "rbg, uint32 bits": `jax.random.bits` of an `unsafe_rbg` key made of
      the seed and the seed ^ DROPOUT_SEED_MIX, kept where the bits are
      below round(keep·2³²), scaled by 2³² / that threshold;
    - "rbg, uint16 bits": the same with 16-bit draws (threshold
      round(keep·2¹⁶), scale 2¹⁶ / threshold);
    - "no dropout": x itself (the floor).
    """
    import jax
    import jax.numpy as jnp
    import keras

    keep = 1.0 - rate

    def keras_threefry(x, seed):
        return keras.random.dropout(x, rate, seed=seed)

    def rbg_key(seed):
        return jax.random.wrap_key_data(
            jnp.concatenate([seed, seed ^ jnp.uint32(DROPOUT_SEED_MIX)]), impl="unsafe_rbg")

    def rbg_bits(bits_dtype, bits):
        threshold = round(keep * 2**bits)

        def dropout(x, seed):
            drawn = jax.random.bits(rbg_key(seed), x.shape, bits_dtype)
            return jax.lax.select(drawn < jnp.asarray(threshold, bits_dtype),
                                  x * (2**bits / threshold), jnp.zeros_like(x))

        return dropout

    def packed(x, seed):
        from keras_hsum.layers.packed_dropout import packed_dropout

        return packed_dropout(x, rate, seed)

    return [("keras (threefry)", keras_threefry),
            ("keras_hsum packed (threefry, 16-bit fields)", packed),
            ("rbg, uint32 bits", rbg_bits(jnp.uint32, 32)),
            ("rbg, uint16 bits", rbg_bits(jnp.uint16, 16)),
            ("no dropout", lambda x, seed: x)]


def median_ms(function, *arguments, calls=20, windows=5):
    """Median milliseconds per call of `function(*arguments)` (compiled and
    warm already): `windows` windows of `calls` calls, each window ended by
    `block_until_ready`."""
    import jax

    times = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = function(*arguments)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / calls)
    return 1000 * statistics.median(times)


def measure_dropout(run, ctx):
    """`dropout`: jitted forward + backward (`jax.value_and_grad` of the
    float32 sum) of dropout on a bf16 tensor of the PHT paper config's word
    attention probabilities at its attention dropout rate, for each of
    `dropout_variants`: median ms per call, the ratio to Keras' own, and the
    kept fraction (non-zero gradients; must be keep ± DROPOUT_KEPT_TOLERANCE)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    _, config = recipe_config("pht", smoke=False)
    rate = config.attention_dropout if config.attention_dropout is not None else config.dropout
    shape = SMOKE_DROPOUT_SHAPE if ctx["smoke"] else (
        config.batch_size, config.num_heads, config.max_target_length - 1,
        config.max_paragraphs, config.max_paragraph_tokens)
    calls, windows = (3, 3) if ctx["smoke"] else (20, 5)
    x = jax.device_put(np.random.default_rng(0).uniform(0.5, 1.5, shape).astype(jnp.bfloat16))
    seed = jax.device_put(np.array([1234, 0], np.uint32))
    kept = jax.jit(lambda grad: jnp.sum(grad != 0, dtype=jnp.int32))
    rows = []
    for name, dropout in dropout_variants(rate):
        def loss(x, seed, dropout=dropout):
            return jnp.sum(dropout(x, seed).astype(jnp.float32))

        started = time.perf_counter()
        step = jax.jit(jax.value_and_grad(loss))
        _, grad = jax.block_until_ready(step(x, seed))
        row = {"task": "dropout", "variant": name, "shape": list(shape), "dtype": "bfloat16",
               "rate": rate, "first_call_s": time.perf_counter() - started,
               "ms": median_ms(step, x, seed, calls=calls, windows=windows),
               "kept_fraction": int(kept(grad)) / math.prod(shape),
               "kept_scale": float(jnp.max(grad).astype(jnp.float32))}
        keep = 1.0 if name == "no dropout" else 1.0 - rate
        row["kept_ok"] = abs(row["kept_fraction"] - keep) <= DROPOUT_KEPT_TOLERANCE
        rows.append(row)
        grad = None
    base = rows[0]["ms"]
    for row in rows:
        row["over_keras"] = row["ms"] / base
    run.log(f"dropout {rate} on bf16 {shape}, forward + backward: " + ", ".join(
        f"{r['variant']} {r['ms']:.3f} ms ({r['over_keras']:.2f}×, kept {r['kept_fraction']:.4f}"
        f"{'' if r['kept_ok'] else ' WRONG'})" for r in rows))
    return rows


def measure_cudnn_lstm(run, ctx):
    """`cudnn_lstm`: the discourse paper word encoder by cuDNN's LSTM kernel
    (`jax_cudnn_bidirectional`) against the scan (benchmarks/cudnn_lstm.py):
    the float32 check, then a jitted forward + backward of each under
    mixed_bfloat16. Without a GPU the kernel is JAX's `lstm_ref`."""
    import cudnn_lstm

    result = cudnn_lstm.measure(smoke=ctx["smoke"], log=run.log)
    return {"task": "cudnn_lstm", **result}


def cudnn_lstm_lines(rows):
    lines = ["Discourse word encoder (benchmarks/cudnn_lstm.py), jitted forward + backward:", "",
             "| rows × steps, E, D | kernel | float32 check: max abs, max relative | policy | "
             "scan ms | cuDNN ms | cuDNN ÷ scan |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        sizes = r["sizes"]
        check = (f"{r['max abs difference']:.2e}, {r['max relative difference']:.2e}"
                 + ("" if r["equal"] else " (DIFFERENT)"))
        for key, value in r.items():
            if key.endswith(" ms") and isinstance(value, dict):
                policy = key[:-3]
                lines.append(
                    f"| {sizes['rows']} × {sizes['steps']}, {sizes['embedding']}, "
                    f"{sizes['units']} | {r['kernel']} | {check} | {policy} | "
                    f"{value['scan']:.2f} | {value['cuDNN']:.2f} | "
                    f"{r[f'{policy} cuDNN / scan']:.3f}× |")
    lines.append("")
    return lines


def timed(run, ctx, call, state):
    """(step times, losses, steps per window) of `call(state) -> (loss, state)`:
    two warm-up calls, then up to `--windows` windows of `--steps` calls
    (fewer windows when a window would take over 3 s)."""
    import jax

    losses = []
    for _ in range(2):
        t0 = time.perf_counter()
        loss, state = call(state)
        losses.append(float(loss))
        warm_s = time.perf_counter() - t0
    steps = run.args.steps if not ctx["smoke"] else 3
    windows = max(1, min(run.args.windows, int(3.0 / max(warm_s * steps, 1e-9))))
    times = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss, state = call(state)
        jax.block_until_ready((loss, state))
        times.append((time.perf_counter() - t0) / steps)
        losses.append(float(loss))
    return times, losses, steps


# ---------------------------------------------------------------------------
# Decoding.


def decode_model(ctx, name):
    """(label, model, inputs by batch) for benchmarks/decode.py's paper
    model `name` (smoke: the tiny config on small memories)."""
    import dataclasses

    import decode

    size = next(s for s in decode.PAPER_SIZES if s[1] == name)
    label, recipe, changes, paragraphs, tokens, vocabulary = size
    if ctx["smoke"]:
        from keras_hsum import recipes

        paragraphs, tokens = SMOKE_DECODE[name]
        module = recipes.get(recipe)
        config = dataclasses.replace(module.CONFIGS["tiny"], **{
            k: v for k, v in changes.items() if k != "max_source_length"})
        vocabulary = config.vocabulary_size
        model = decode.called(module.build_model(config, vocabulary), vocabulary)
        label = f"{name} {paragraphs}×{tokens} (smoke, tiny config)"
    else:
        model, _, vocabulary = decode.paper_model(recipe, changes, vocabulary)
    inputs = {b: decode.paper_inputs(vocabulary, paragraphs, tokens, batch=b)
              for b in ((1, 2) if ctx["smoke"] else DECODE_BATCHES)}
    return label, model, inputs


def ours(model, length, **options):
    """Our beam search (GNMT 0.6, trigram blocking, min_length = length);
    `options`: more keywords of `beam_search`."""
    from keras_hsum.decoding import LengthNormalization
    from keras_hsum.decoding import NgramBlocking
    from keras_hsum.decoding import beam_search

    def decode(inputs):
        return beam_search(model, inputs, beam_size=BEAMS, max_length=length, min_length=length,
                           terms=[LengthNormalization(0.6), NgramBlocking(3)],
                           **options)["sequences"]

    return decode


def ours_static(model, length):
    """`ours` with `stop_check_every=None`: one loop of a static trip count,
    no stop check (on a GPU: no device-to-host read every 8 positions). With
    min_length = length neither search can stop early: same sequences."""
    return ours(model, length, stop_check_every=None)


def floor(model, length):
    """The encoder, the cache and `length` calls of `model.step` for the
    B·K rows, each fed its own argmax: no search."""
    from keras import ops

    def decode(inputs):
        static, state = model.beam_cache(model.encode(inputs), length, BEAMS)
        rows = ops.shape(inputs["tokens"])[0] * BEAMS

        def body(index, ids, state):
            logits, (_, state), _ = model.step(ids, index, (static, state))
            return index + 1, ops.cast(ops.argmax(logits, -1), "int32"), state

        _, ids, _ = ops.while_loop(
            lambda index, *_: index < length, body,
            (ops.convert_to_tensor(0, "int32"), ops.full((rows,), model.bos_id, "int32"), state))
        return ids

    return decode


def keras_hub_beam(model, length):
    """keras-hub's BeamSampler over the same `model.step` and static cache
    as ours (benchmarks/decode.py's peer, `decode.keras_hub_search`; the
    sampler's JAX loop carries the weights, as keras-hub's CausalLM.generate
    does)."""
    import decode as decode_benchmark

    def decode(inputs):
        return decode_benchmark.keras_hub_search(model, inputs, length, beams=BEAMS,
                                                 carry_weights=True)

    return decode


DECODE_METHODS = (("ours", ours), ("keras-hub BeamSampler", keras_hub_beam), ("floor", floor))
# `decode:MODEL:static` adds this method (after ours) to the row.
STATIC_METHOD = ("ours, static", ours_static)


def decode_methods(variant=""):
    """The (name, builder) pairs a `decode:MODEL[:VARIANT]` task measures."""
    if variant == "static":
        return (DECODE_METHODS[0], STATIC_METHOD, *DECODE_METHODS[1:])
    if variant:
        raise ValueError(f"unknown decode variant {variant!r}; expected decode:MODEL or "
                         "decode:MODEL:static")
    return DECODE_METHODS


def stateless_jit(model, function):
    """`jax.jit(run)(values, inputs)`: `function(inputs)` with the model's
    variables read from `values` (so the weights are arguments, not
    constants folded into the program)."""
    import jax
    import keras

    variables = model.variables

    def run(values, inputs):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(inputs)

    return jax.jit(run)


def measure_decode(run, ctx, name, variant=""):
    """`decode:MODEL[:static]`: one row per batch, each method's median
    seconds per call (`static`: also `ours_static`, and whether it returned
    the same ids as ours)."""
    import jax
    import numpy as np

    methods = decode_methods(variant)
    label, model, inputs_by_batch = decode_model(ctx, name)
    length = SMOKE_LENGTH if ctx["smoke"] else LENGTH
    values = [v.value for v in model.variables]
    rows = []
    for batch, inputs in inputs_by_batch.items():
        inputs = jax.device_put(inputs)
        row = {"task": ":".join(filter(None, ("decode", name, variant))), "model": label,
               "batch": batch, "beams": BEAMS, "tokens": length}
        outputs = {}
        for method, build in methods:
            if run.left() < 10:
                row.setdefault("skipped", []).append(method)
                continue
            try:
                function = stateless_jit(model, build(model, length))
                t0 = time.perf_counter()
                out = np.asarray(function(values, inputs))
                row[f"{method}_first_call_s"] = time.perf_counter() - t0
                times = []
                for _ in range(run.args.decode_repeats):
                    t0 = time.perf_counter()
                    np.asarray(function(values, inputs))
                    times.append(time.perf_counter() - t0)
                row[f"{method}_s"] = statistics.median(times)
                outputs[method] = out
                ctx["decoders"][(name, batch, method)] = (function, values, inputs)
                if out.shape[0] != batch:
                    row[f"{method}_note"] = f"returned {out.shape[0]} rows"
            except Exception as error:  # noqa: BLE001 (the other methods still run)
                row[f"{method}_error"] = one_line(error)
                run.log(f"decode {name} batch {batch} {method}: FAILED {one_line(error)}")
        if row.get("floor_s"):
            for method, _ in methods:
                if method != "floor" and row.get(f"{method}_s"):
                    row[f"{method}_over_floor"] = row[f"{method}_s"] / row["floor_s"]
        if row.get("ours_s") and row.get("keras-hub BeamSampler_s"):
            row["keras_hub_over_ours"] = row["keras-hub BeamSampler_s"] / row["ours_s"]
        static = STATIC_METHOD[0]
        if row.get("ours_s") and row.get(f"{static}_s"):
            row["static_over_ours"] = row[f"{static}_s"] / row["ours_s"]
        if "ours" in outputs and static in outputs:
            row["static_equal"] = bool(np.array_equal(outputs["ours"], outputs[static]))
        run.log(f"decode {label} batch {batch}: " + ", ".join(
            f"{m} {fmt(row.get(f'{m}_s'), '.3f')} s" for m, _ in methods)
            + (f", static = ours: {row['static_equal']}" if "static_equal" in row else ""))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------
# Profiles: a jax.profiler trace parsed into kernel classes.

KERNEL_CLASSES = ("matmul", "attention", "elementwise", "reduction", "copies", "other")
_CLASS_KEYS = (
    # (class, substrings of the lower-cased kernel name or HLO op), first match wins
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn_fused_mha", "__cudnn$fmha")),
    ("matmul", ("gemm", "cublas", "cutlass", "xmma", "nvjet", "gemv", "matmul", "dot",
                "ynn_fusion", "onednn", "triton_gemm", "wgmma", "convolution")),
    ("copies", ("copy", "transpose", "memcpy", "memset", "concatenate", "dynamic_update_slice",
                "dynamic-update-slice", "pad", "slice", "gather", "scatter")),
    ("reduction", ("reduce", "reduction", "softmax", "argmax", "topk", "top_k", "sort",
                   "cub::", "radix", "stream_executor::cuda::run")),
    ("elementwise", ("loop_", "fusion", "elementwise", "add", "multiply", "convert", "select",
                     "exp", "log", "tanh", "compare", "broadcast", "iota", "divide", "subtract",
                     "maximum", "minimum", "rsqrt", "sqrt", "negate", "power", "clamp")),
)
# Host-side events that are no XLA op of the program.
_NOT_OPS = ("end: ", "ThunkExecutor", "ThreadpoolListener")


def kernel_class(name, hlo_op=""):
    text = f"{name} {hlo_op}".lower()
    for cls, keys in _CLASS_KEYS:
        if any(key in text for key in keys):
            return cls
    return "other"


def trace_events(log_dir):
    """The complete ('X') events of the newest trace under `log_dir`, each
    with the process and thread names: a list of dicts (name, ts, dur µs,
    process, thread, hlo_op)."""
    paths = sorted(glob.glob(os.path.join(log_dir, "**", "*.trace.json.gz"), recursive=True))
    paths = paths or sorted(glob.glob(os.path.join(log_dir, "**", "perfetto_trace.json.gz"),
                                      recursive=True))
    if not paths:
        return []
    with gzip.open(paths[-1], "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    processes, threads = {}, {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = event.get("args", {}).get("name", "")
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = event.get("args", {}).get("name", "")
    out = []
    for event in events:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        args = event.get("args") or {}
        out.append({"name": event.get("name", ""), "ts": float(event.get("ts", 0)),
                    "dur": float(event["dur"]), "process": processes.get(event.get("pid"), ""),
                    "thread": threads.get((event.get("pid"), event.get("tid")), ""),
                    "hlo_op": args.get("hlo_op", "")})
    return out


def select_kernels(events):
    """`(kernels, source)`: the device streams' kernel events where the
    trace has a device (an accelerator: processes named "/device:...",
    threads named "Stream ..."; the "XLA Ops"/"XLA Modules" lines, which
    repeat them, are left out), else the host's XLA op events (events with
    an `hlo_op`: the CPU thunks), else none."""
    device = [e for e in events if e["process"].startswith("/device:")
              and not e["process"].startswith("/device:CPU")]
    streams = [e for e in device if "stream" in e["thread"].lower()]
    if streams:
        return streams, "device streams"
    if device:
        lines = [e for e in device if e["thread"] not in ("XLA Modules", "Steps", "XLA Ops")]
        if lines:
            return lines, "device lines"
        ops = [e for e in device if e["thread"] == "XLA Ops"]
        if ops:
            return ops, "device XLA Ops line"
    host = [e for e in events if e["hlo_op"] and not e["name"].startswith(_NOT_OPS)
            and e["dur"] > 0]
    host = _leaves(host)
    return host, ("host XLA ops (CPU thunks)" if host else "none")


def _leaves(events):
    """The events that hold no other event of their thread: on a CPU a
    `while` or `call` thunk spans the thunks of its body, which would count
    twice."""
    leaves = []
    by_thread = collections.defaultdict(list)
    for event in events:
        by_thread[(event["process"], event["thread"])].append(event)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        for at, event in enumerate(thread_events):
            following = thread_events[at + 1] if at + 1 < len(thread_events) else None
            if following is None or following["ts"] >= event["ts"] + event["dur"]:
                leaves.append(event)
    return sorted(leaves, key=lambda e: e["ts"])


def kernel_profile(kernels, units, unit_name, source, top=12, gap_us=(10.0, 100.0)):
    """Kernel time by class, the top kernels, kernels per unit, busy
    fraction and idle gaps of `kernels` (dicts with name, ts, dur µs,
    hlo_op) over `units` steps or tokens. Robust to no kernels at all."""
    out = {"source": source, "unit": unit_name, "units": units, "kernels": len(kernels)}
    if not kernels:
        out["note"] = "no kernel events in the trace"
        return out
    by_class = collections.Counter()
    by_name = collections.defaultdict(lambda: [0.0, 0])
    hlo_ops = {}
    for kernel in kernels:
        cls = kernel_class(kernel["name"], kernel["hlo_op"])
        by_class[cls] += kernel["dur"]
        label = re.sub(r"\s+", " ", kernel["name"])[:90]
        by_name[(label, cls)][0] += kernel["dur"]
        by_name[(label, cls)][1] += 1
        hlo_ops.setdefault(label, kernel["hlo_op"] or "")
    total = sum(by_class.values())
    out["kernel_us"] = total
    out["classes_pct"] = {cls: 100 * by_class[cls] / total if total else 0.0
                          for cls in KERNEL_CLASSES}
    out["kernels_per_unit"] = len(kernels) / units
    out["top"] = [{"name": name, "class": cls, "ms_per_unit": dur / units / 1000,
                   "calls_per_unit": count / units, "pct": 100 * dur / total if total else 0.0,
                   "hlo_op": hlo_ops.get(name, "")}
                  for (name, cls), (dur, count) in sorted(by_name.items(), key=lambda i: -i[1][0])
                  [:top]]
    # Busy time: the union of the kernel intervals (streams may overlap).
    spans = sorted((k["ts"], k["ts"] + k["dur"]) for k in kernels)
    busy, gaps = 0.0, []
    start, end = spans[0]
    for s, e in spans[1:]:
        if s > end:
            busy += end - start
            gaps.append(s - end)
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    wall = spans[-1][1] - spans[0][0] if len(spans) > 1 else spans[0][1] - spans[0][0]
    wall = max(wall, max(e for _, e in spans) - spans[0][0])
    out["wall_us"] = wall
    out["busy_pct"] = 100 * busy / wall if wall else 100.0
    for threshold in gap_us:
        out[f"gaps_over_{int(threshold)}us"] = sum(g > threshold for g in gaps)
    out["idle_us_per_unit"] = (wall - busy) / units
    out["largest_gaps_us"] = sorted(gaps, reverse=True)[:5]
    return out


def hlo_op_sources(hlo_text, names, most=3):
    """{kernel or HLO op name: the source ops it runs} from a compiled
    program's optimized HLO: the `op_name` metadata (the JAX/Keras path,
    e.g. ".../parallel_cross_attention/.../softmax") of the instruction and,
    for a fusion, of the instructions of the computation it calls, up to
    `most` distinct ones, shortened to their last three path parts. A GPU
    kernel is named after its instruction with '.' as '_'; names not found
    are left out."""
    computations, current, instructions = collections.defaultdict(list), None, {}
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if header and "=" not in line.split("{")[0]:
            current = header.group(1)
            continue
        found = re.match(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", line)
        if not found:
            continue
        op_name = re.search(r'op_name="([^"]*)"', line)
        calls = re.search(r"calls=%?([\w.\-]+)", line)
        instructions[found.group(1)] = (op_name.group(1) if op_name else None,
                                        calls.group(1) if calls else None)
        if op_name and current:
            computations[current].append(op_name.group(1))
    by_underscore = {name.replace(".", "_").replace("-", "_"): name for name in instructions}

    def short(op_name):
        # "jit(_step)/transpose(jvp(decoder_layer_1))/self_attention/key/..." →
        # "bwd decoder_layer_1/self_attention/key/..." (the layer path kept)
        backward = "transpose(" in op_name
        parts = []
        for part in op_name.split("/")[1:]:  # not the jit of the step itself
            inner = re.sub(r"^(?:transpose\(|jvp\(|jit\(|vmap\()+", "", part).rstrip(")")
            if inner and not inner.startswith("_"):
                parts.append(inner)
        return ("bwd " if backward else "") + "/".join(parts[:2] + parts[-2:] if len(parts) > 4
                                                       else parts)

    out = {}
    for name in names:
        key = name if name in instructions else by_underscore.get(name)
        if key is None:
            continue
        op_name, calls = instructions[key]
        found = [op_name] if op_name else []
        found += computations.get(calls, []) if calls else []
        distinct = list(dict.fromkeys(short(o) for o in found if o))[:most]
        if distinct:
            out[name] = distinct
    return out


def annotate_top(profile, compiled):
    """Adds to each top kernel of `profile` the source ops of its HLO
    instruction in `compiled` (`hlo_op_sources`)."""
    try:
        text = compiled.as_text() or ""
    except Exception:  # noqa: BLE001
        return
    names = [t.get("hlo_op") or t["name"] for t in profile.get("top", [])]
    sources = hlo_op_sources(text, names)
    for entry, name in zip(profile.get("top", []), names):
        if name in sources:
            entry["sources"] = sources[name]


def profile_call(function, units, unit_name):
    """Runs `function()` (already compiled and warm) under the JAX
    profiler and parses the trace; the trace itself is deleted."""
    import jax

    folder = tempfile.mkdtemp(prefix="accelerator_trace_")
    try:
        with jax.profiler.trace(folder):
            function()
        events = trace_events(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    kernels, source = select_kernels(events)
    profile = kernel_profile(kernels, units, unit_name, source)
    profile["trace_events"] = len(events)
    return profile


def measure_profile_train(run, ctx, name, changes=""):
    import jax

    key = (name, "bf16", changes)
    if key not in ctx["compiled"]:
        task = ":".join(filter(None, ("train", name, "bf16", changes)))
        ctx["rows_by_task"][task] = measure_train(run, ctx, name, "bf16", changes)
    compiled, state, x, y, w, batch = ctx["compiled"][key]
    holder = {"state": state}

    def five():
        for _ in range(5):
            loss, holder["state"] = compiled(holder["state"], x, y, w)
        jax.block_until_ready((loss, holder["state"]))

    profile = profile_call(five, 5, "step")
    annotate_top(profile, compiled)
    ctx["compiled"][key] = (compiled, holder["state"], x, y, w, batch)
    what = f"{name} train step, bf16" + (f", {changes.replace('+', ', ')}" if changes else "")
    row = {"task": ":".join(filter(None, ("profile", "train", name, changes))),
           "what": f"{what}, batch {batch}", **profile}
    run.log(f"profile train {name}: {profile_summary(profile)}")
    return [row]


def measure_profile_decode(run, ctx, name):
    import numpy as np

    rows = []
    length = SMOKE_LENGTH if ctx["smoke"] else LENGTH
    if not any(key[0] == name for key in ctx["decoders"]):
        ctx["rows_by_task"][f"decode:{name}"] = measure_decode(run, ctx, name)
    for method, _ in decode_methods("static"):  # ours, static: where decode:MODEL:static ran
        key = (name, 1, method)
        if key not in ctx["decoders"]:
            continue
        function, values, inputs = ctx["decoders"][key]
        profile = profile_call(lambda: np.asarray(function(values, inputs)), length, "token")
        rows.append({"task": f"profile:decode:{name}",
                     "what": f"{name} decode, {method}, batch 1, beam {BEAMS}, {length} tokens",
                     **profile})
        run.log(f"profile decode {name} {method}: {profile_summary(profile)}")
    return rows


def profile_summary(profile):
    if not profile.get("kernels"):
        return f"{profile.get('note', 'no kernels')} ({profile['source']})"
    classes = ", ".join(f"{c} {p:.0f}%" for c, p in profile["classes_pct"].items() if p >= 0.5)
    return (f"{profile['kernels_per_unit']:.0f} kernels/{profile['unit']}, busy "
            f"{profile['busy_pct']:.0f}%, {classes} [{profile['source']}]")


# ---------------------------------------------------------------------------
# CPU proxies of the train step: cost analysis and the optimized HLO.

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+?)\s+([\w\-]+)\(")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_ARRAY = re.compile(r"\b(f32|bf16|f16|s32|pred|u32|s8|u8|f64|s64)\[([0-9,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "pred": 1, "u32": 4, "s8": 1, "u8": 1,
          "f64": 8, "s64": 8}


def hlo_counts(text, logits_elements=None, top=5):
    """Counts of an optimized HLO module's text: instructions by opcode in
    the whole module and at the top level (outside fused computations:
    each a kernel of its own on a GPU), the largest float32 arrays a
    top-level instruction produces (a buffer in memory), and how many of
    those are at least `logits_elements` (the [B·S, V] logits) large."""
    fused, owner, opcodes_all, opcodes_top = set(), None, collections.Counter(), collections.Counter()
    f32_arrays = []
    per_computation = []
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header and "=" not in line.split("(")[0]:
            owner = header.group(2)
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode = match.groups()
        per_computation.append((owner, opcode))
        for called in _CALLS.findall(line):
            if opcode == "fusion":
                fused.add(called)
        for dtype, dims in _ARRAY.findall(shape):
            if dtype == "f32":
                size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
                f32_arrays.append((owner, size, f"f32[{dims}]", opcode))
    for computation, opcode in per_computation:
        opcodes_all[opcode] += 1
        if computation not in fused:
            opcodes_top[opcode] += 1
    # Arrays inside a fusion never reach memory: only the top level's count.
    f32_arrays = [(size, shape, opcode) for computation, size, shape, opcode in f32_arrays
                  if computation not in fused]
    free = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}
    largest = sorted(set(f32_arrays), reverse=True)[:top]
    out = {
        "transposes": opcodes_all["transpose"], "copies": opcodes_all["copy"],
        "top_level_transposes": opcodes_top["transpose"], "top_level_copies": opcodes_top["copy"],
        "fusions": opcodes_top["fusion"], "custom_calls": opcodes_top["custom-call"],
        "top_level_kernels": sum(n for op, n in opcodes_top.items() if op not in free),
        "instructions": sum(opcodes_all.values()),
        "largest_f32": [{"shape": shape, "mib": size * 4 / 2**20, "opcode": opcode}
                        for size, shape, opcode in largest],
    }
    if logits_elements:
        out["f32_logits_size_arrays"] = sum(size >= logits_elements for size, _, _ in f32_arrays)
    return out


def proxy_row(name, batch, policy, config_name="paper"):
    import recipe_steps

    from keras_hsum import recipes

    module = recipes.get(name)
    config = module.CONFIGS[config_name]
    started = time.perf_counter()
    model = recipe_steps.build(module, name, config, policy)
    step = recipe_steps.TrainStep(module, config, model, policy)
    x, y, w = recipe_steps.synthetic_batch(name, config, batch)
    compiled = step.lower(step.initial_state(), x, y, w).compile()
    cost = xla_cost(compiled)
    labels = y.size if y.ndim == 2 and name != "ranker" else None
    row = {"recipe": name, "config": config_name, "batch": batch, "policy": policy,
           "compile_s": time.perf_counter() - started,
           "flops": cost.get("flops"), "bytes_accessed": cost.get("bytes accessed"),
           "xla_buffer_bytes": xla_buffer_bytes(compiled),
           **hlo_counts(compiled.as_text(),
                        logits_elements=labels * config.vocabulary_size if labels else None)}
    if labels:
        row["logits_shape"] = f"[{labels}, {config.vocabulary_size}]"
    return row


def cpu_proxies(args):
    import keras_hsum

    result = {"label": args.label, "commit": git_commit(os.path.dirname(os.path.dirname(
        os.path.abspath(keras_hsum.__file__)))), "keras_hsum": os.path.dirname(
        keras_hsum.__file__), "date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "train": [], "decode_loops": None}
    names = args.recipes.split(",")
    for name in names:
        for policy in args.policies.split(","):
            print(f"[{time.perf_counter() - START:6.0f} s] proxies {name} {policy} ...", flush=True)
            try:
                row = proxy_row(name, args.batch, policy, args.config)
            except Exception as error:  # noqa: BLE001 (the other recipes still run)
                traceback.print_exc()
                row = {"recipe": name, "batch": args.batch, "policy": policy,
                       "error": one_line(error)}
            print(json.dumps(row)[:600], flush=True)
            result["train"].append(row)
            write_results(args.out, f"cpu_proxies:{args.label}", result)
    # Hook: the decode loop's proxies (benchmarks/decode_loop_hlo.py, issue
    # 57 item 3), when that module is present.
    if args.decode_loops:
        try:
            import decode_loop_hlo
        except ImportError as error:
            result["decode_loops"] = {"skipped": f"benchmarks/decode_loop_hlo.py: {error}"}
        else:
            loops = {}
            try:
                loops["toy step, batch 8, beam 5, 200 tokens, V 8,000, PHT's terms"] = (
                    decode_loop_hlo.toy_figures(terms="pht"))
                if args.decode_paper:
                    loops["PHT 30×100 at paper size, batch 1, beam 5, 200 tokens"] = (
                        decode_loop_hlo.paper_pht_figures(batch=1))
            except Exception as error:  # noqa: BLE001
                traceback.print_exc()
                loops["error"] = one_line(error)
            result["decode_loops"] = loops
        write_results(args.out, f"cpu_proxies:{args.label}", result)
    return result


# ---------------------------------------------------------------------------
# Results: JSON merged by key, markdown rewritten from all of it.


def write_results(folder, key, result):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STEM + ".json")
    try:
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        stored = {}
    stored[key] = result
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(stored, handle, indent=1, default=str)
    os.replace(path + ".tmp", path)
    with open(os.path.join(folder, STEM + ".md"), "w", encoding="utf-8") as handle:
        handle.write(markdown(stored) + "\n")


def fmt(value, spec):
    return "—" if value is None else format(value, spec)


def markdown(stored):
    lines = ["# keras_hsum on an accelerator (issue 57)", "",
             "Written by `benchmarks/accelerator.py` (see its docstring for the method). Device "
             "runs first (keyed by the device JAX saw), then smoke runs, then the CPU proxies.", ""]
    for key in sorted(stored, key=lambda k: (k.startswith("cpu_proxies"), k.startswith("smoke"), k)):
        value = stored[key]
        if key.startswith("cpu_proxies"):
            continue
        lines += run_lines(key, value)
    proxies = {k.split(":", 1)[1]: v for k, v in stored.items() if k.startswith("cpu_proxies")}
    if proxies:
        lines += proxy_lines(proxies)
    return "\n".join(lines)


def precision_label(row):
    """A train row's precision, with the config fields its task changed."""
    changes = row.get("changes")
    return f"{row['precision']}, {changes.replace('+', ', ')}" if changes else row["precision"]


def run_lines(key, result):
    info = result.get("device", {})
    lines = [f"## {key}: {info.get('device_kind', '?')}", "",
             f"{info.get('date', '?')}, commit {info.get('commit', '?')}, jax {info.get('jax')}, "
             f"keras {info.get('keras')}, keras-hub {info.get('keras_hub')}, host "
             f"{info.get('host')}; TensorFlow imported: {info.get('tensorflow_imported')}; "
             f"{result.get('seconds', '?')} s of a {result.get('budget', '?')} s budget.", ""]
    rows = result.get("rows", [])
    train = [r for r in rows if r.get("task", "").startswith(("train:", "anchor:"))]
    if train:
        lines += ["| recipe | precision | batch | step ms | examples/s | TFLOP/s | MFU (bf16 peak) "
                  "| compile s | XLA buffers GiB | cuDNN attention calls | loss finite | note |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in train:
            if "error" in r:
                lines.append(f"| {r['recipe']} | {precision_label(r)} | — | failed: {r['error']} "
                             "| | | | | | | | |")
                continue
            mfu = fmt(r.get("mfu_pct"), ".1f") + ("%" if r.get("mfu_pct") is not None else "")
            if r.get("pct_of_tf32_peak") is not None:
                mfu += f" ({r['pct_of_tf32_peak']:.1f}% of TF32)"
            lines.append(
                f"| {r['recipe']} | {precision_label(r)} | {r['batch']} | {r['step_ms']:.1f} | "
                f"{r['examples_per_s']:.1f} | {fmt(r.get('tflop_per_s'), '.1f')} | {mfu} | "
                f"{r['compile_s']:.0f} | {fmt(r.get('xla_buffer_gib'), '.2f')} | "
                f"{fmt(r.get('fused_attention_calls'), 'd')} | "
                f"{r['loss_finite']} | {r.get('note', '')} |")
        methods = {r.get("flops_method") for r in train if r.get("flops_method")}
        lines += ["", "FLOPs: " + "; ".join(sorted(methods)) + ".", ""]
    decode = [r for r in rows if r.get("task", "").startswith("decode:")]
    if decode:
        lines += decode_lines(decode)
    dropout = [r for r in rows if r.get("task") == "dropout"]
    if dropout:
        lines += dropout_lines(dropout)
    cudnn = [r for r in rows if r.get("task") == "cudnn_lstm"]
    if cudnn:
        lines += cudnn_lstm_lines(cudnn)
    topk = [r for r in rows if r.get("task") == "topk"]
    if topk:
        names = list(topk[0]["ratios"])
        lines += ["| top-k row | shape | k | one top_k µs | " + " | ".join(
            f"{name} ÷ top_k" for name in names) + " |", "|---|---|---|---|" + "---|" * len(names)]
        lines += [f"| {r['row']} | {tuple(r['shape'])} | {r['k']} | {r['top_k_us']:.1f} | "
                  + " | ".join(f"{r['ratios'][name]:.2f}×" for name in names) + " |" for r in topk]
        lines.append("")
    for r in (r for r in rows if r.get("task", "").startswith("profile:")):
        lines += [f"**Profile: {r['what']}** — {profile_summary(r)}; {r.get('kernels', 0)} "
                  f"kernels over {r['units']} {r['unit']}s, gaps over 10 µs: "
                  f"{r.get('gaps_over_10us', '—')}, over 100 µs: {r.get('gaps_over_100us', '—')}.", ""]
        if r.get("top"):
            lines += [f"| kernel | class | ms per {r['unit']} | calls per {r['unit']} | % "
                      "| source ops (HLO metadata) |", "|---|---|---|---|---|---|"]
            lines += [f"| `{t['name']}` | {t['class']} | {t['ms_per_unit']:.3f} | "
                      f"{t['calls_per_unit']:.1f} | {t['pct']:.1f} | "
                      + "; ".join(f"`{o}`" for o in t.get("sources", [])) + " |"
                      for t in r["top"][:12]]
            lines.append("")
    for item in result.get("skipped", []):
        lines.append(f"- skipped {item}")
    for item in result.get("errors", []):
        lines.append(f"- error {item}")
    if result.get("stopped"):
        lines.append(f"- stopped: {result['stopped']}")
    lines.append("")
    return lines


def dropout_lines(dropout):
    """The `dropout` rows' table: ms per forward + backward, ratio to Keras'
    threefry dropout, kept fraction (and whether it is the expected one)."""
    first = dropout[0]
    lines = [f"Dropout {first['rate']} on {first['dtype']} {tuple(first['shape'])} (PHT's word "
             "attention probabilities), jitted forward + backward:", "",
             "| dropout | ms | ÷ keras (threefry) | kept fraction | scale of kept | "
             "first call s |", "|---|---|---|---|---|---|"]
    for r in dropout:
        lines.append(f"| {r['variant']} | {r['ms']:.3f} | {r['over_keras']:.2f}× | "
                     f"{r['kept_fraction']:.4f}{'' if r['kept_ok'] else ' (wrong)'} | "
                     f"{r['kept_scale']:.4g} | {r['first_call_s']:.1f} |")
    lines.append("")
    return lines


def decode_lines(decode):
    """The decode rows' table; the static search's columns only where a
    row has them (`decode:MODEL:static`)."""
    static = STATIC_METHOD[0]
    with_static = any(f"{static}_s" in r or f"{static}_error" in r for r in decode)
    lines = ["| model | batch | ours s | " + ("ours, static s | " if with_static else "")
             + "keras-hub s | floor s | ours ÷ floor | "
             + ("static ÷ ours | static ids = ours | " if with_static else "")
             + "keras-hub ÷ ours | errors |",
             "|---|---|---|---|---|---|---|" + ("---|---|---|" if with_static else "") + "---|"]
    def ratio(value):
        return "—" if value is None else f"{value:.2f}×"

    for r in decode:
        errors = "; ".join(f"{m}: {r[f'{m}_error']}" for m, _ in decode_methods("static")
                           if f"{m}_error" in r)
        cells = [r["model"], r["batch"], fmt(r.get("ours_s"), ".3f")]
        if with_static:
            cells.append(fmt(r.get(f"{static}_s"), ".3f"))
        cells += [fmt(r.get("keras-hub BeamSampler_s"), ".3f"), fmt(r.get("floor_s"), ".3f"),
                  ratio(r.get("ours_over_floor"))]
        if with_static:
            cells += [ratio(r.get("static_over_ours")), r.get("static_equal", "—")]
        cells += [ratio(r.get("keras_hub_over_ours")), errors]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    return lines


def proxy_lines(proxies):
    labels = sorted(proxies, key=lambda k: (k != "before", k))
    lines = ["## CPU proxies of the train step (issue 57)", "",
             "Paper configs, synthetic batch, one jitted stateless train step compiled for the "
             "CPU; XLA's cost analysis of the compiled step and counts in its optimized HLO "
             "(*top level*: outside fused computations, each a kernel of its own on a GPU). "
             "CPU fusion and layouts differ from the GPU's: compare columns, not absolute "
             "kernel counts.", ""]
    for label in labels:
        p = proxies[label]
        lines.append(f"- **{label}**: commit {p.get('commit')}, {p.get('date')}, "
                     f"{p.get('machine')}, keras_hsum from {p.get('keras_hsum')}")
    lines.append("")
    keys = (("flops", "GFLOP", 1e9, ".1f"), ("bytes_accessed", "GB accessed", 1e9, ".2f"),
            ("xla_buffer_bytes", "XLA buffers GiB", 2**30, ".2f"),
            ("transposes", "transposes", 1, "d"), ("top_level_transposes", "top-level transposes", 1, "d"),
            ("copies", "copies", 1, "d"), ("top_level_copies", "top-level copies", 1, "d"),
            ("fusions", "fusions", 1, "d"), ("custom_calls", "custom-calls", 1, "d"),
            ("top_level_kernels", "top-level kernel-like ops", 1, "d"),
            ("f32_logits_size_arrays", "f32 arrays ≥ [B·S, V]", 1, "d"))
    rows = collections.OrderedDict()
    for label in labels:
        for r in proxies[label].get("train", []):
            rows.setdefault((r["recipe"], r["policy"], r["batch"]), {})[label] = r
    ratio = labels[:1] == ["before"] and len(labels) > 1  # the latest ÷ before
    lines += ["| recipe, policy, batch | figure | " + " | ".join(labels)
              + (" | latest ÷ before" if ratio else "") + " |",
              "|---|---|" + "---|" * (len(labels) + ratio)]
    for (recipe, policy, batch), by_label in rows.items():
        for key, title, scale, spec in keys:
            cells = []
            for label in labels:
                r = by_label.get(label, {})
                if "error" in r:
                    cells.append(f"failed: {r['error'][:80]}")
                else:
                    v = r.get(key)
                    cells.append("—" if v is None else format(v / scale if scale != 1 else v, spec))
            if ratio:  # the latest measurement of this row ÷ before
                first = by_label.get(labels[0], {}).get(key)
                later = [by_label[label].get(key) for label in labels[1:] if label in by_label]
                last = later[-1] if later else None
                cells.append(f"{last / first:.2f}×" if first and last is not None else "—")
            lines.append(f"| {recipe}, {policy}, {batch} | {title} | " + " | ".join(cells) + " |")
        largest = []
        for label in labels:
            r = by_label.get(label, {})
            largest.append(", ".join(f"{a['shape']} {a['opcode']}" for a in r.get("largest_f32", [])[:3])
                           or "—")
        lines.append(f"| {recipe}, {policy}, {batch} | largest f32 arrays | " + " | ".join(largest)
                     + (" | |" if ratio else " |"))
    lines.append("")
    for label in labels:
        loops = proxies[label].get("decode_loops")
        if not loops:
            continue
        lines += [f"### Decode loop proxies ({label}; benchmarks/decode_loop_hlo.py)", ""]
        if "skipped" in loops or "error" in loops:
            lines += [f"- {loops.get('skipped') or loops.get('error')}", ""]
        for title, figures in loops.items():
            if not isinstance(figures, dict):
                continue
            lines += [f"{title}:", "", "| search | loop | known trip count | host reads per token "
                      "| longest top-k row | kernel-like ops in body |", "|---|---|---|---|---|---|"]
            for search, found in figures.items():
                for loop in found:
                    reads = loop.get("host_reads_per_token")
                    lines.append(f"| {search} | {loop['loop']} ({loop['parent'] or 'top'}) | "
                                 f"{loop['known_trip_count'] or 'none: host check per iteration'} | "
                                 f"{fmt(reads, '.3f')} | {loop['largest_topk']:,} | "
                                 f"{loop['kernels']} |")
            lines.append("")
    return lines


# ---------------------------------------------------------------------------


def task_cost(task, smoke):
    table = SMOKE_EXPECTED_S if smoke else EXPECTED_S
    parts = task.split(":")
    kind = parts[0]
    if kind == "profile":
        kind = ":".join(parts[:2])
    elif kind == "decode" and parts[2:] == ["static"]:
        kind = "decode:static"
    return table.get(kind, 60)


def run_tasks(args):
    import jax

    run = Run(args)
    run.start_watchdog()
    smoke = args.smoke
    ctx = {"smoke": smoke, "models": {}, "compiled": {}, "decoders": {}, "rows_by_task": {},
           "flops": project_flops_per_example(), "device": device_info()}
    run.result.update(device=ctx["device"], budget=args.budget, smoke=smoke)
    run.log(f"device {ctx['device']['device_kind']} ({jax.devices()[0]}), budget {args.budget} s")
    tasks = args.tasks.split(",") if args.tasks else list(DEFAULT_TASKS)
    for task in tasks:
        parts = task.split(":")
        if task in ctx["rows_by_task"]:  # measured already (a profile needed it)
            run.result["rows"].append(ctx["rows_by_task"].pop(task))
            continue
        cost = task_cost(task, smoke)
        if run.left() < cost:
            run.result["skipped"].append(f"{task}: {run.left():.0f} s left, expected ~{cost} s")
            run.log(f"skip {task} (left {run.left():.0f} s < expected {cost} s)")
            continue
        try:
            if parts[0] == "train":
                rows = [measure_train(run, ctx, parts[1], parts[2], ":".join(parts[3:]))]
            elif parts[0] == "decode":
                rows = measure_decode(run, ctx, parts[1], ":".join(parts[2:]))
            elif parts[0] == "dropout":
                rows = measure_dropout(run, ctx)
            elif parts[0] == "cudnn_lstm":
                rows = [measure_cudnn_lstm(run, ctx)]
            elif parts[0] == "anchor":
                rows = [measure_anchor(run, ctx, parts[1])]
            elif parts[:2] == ["profile", "train"]:
                rows = measure_profile_train(run, ctx, parts[2], ":".join(parts[3:]))
            elif parts[0] == "topk":
                rows = measure_topk(run, ctx)
            elif parts[:2] == ["profile", "decode"]:
                rows = measure_profile_decode(run, ctx, parts[2])
            else:
                raise ValueError(f"unknown task {task!r}; expected train:RECIPE:bf16|f32"
                                 "[:FIELD=VALUE], anchor:xla|flash, topk, dropout, cudnn_lstm, "
                                 "decode:MODEL[:static], profile:train:RECIPE or "
                                 "profile:decode:MODEL")
        except Exception as error:  # noqa: BLE001 (the next task still runs)
            traceback.print_exc()
            run.result["errors"].append(f"{task}: {one_line(error)}")
            rows = [{"task": task, "recipe": parts[1], "precision": parts[2],
                     "changes": ":".join(parts[3:]), "error": one_line(error)}
                    ] if parts[0] == "train" and len(parts) > 2 else []
        for key in list(ctx["rows_by_task"]):  # rows a profile measured on the way
            if key not in tasks[tasks.index(task) + 1:]:
                run.result["rows"].append(ctx["rows_by_task"].pop(key))
        run.result["rows"].extend(rows)
        run.save()
    run.save()
    run.log(f"done; results in {os.path.join(args.out, STEM)}.md/.json under key {args.key!r}")
    return run.result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU, minutes)")
    parser.add_argument("--budget", type=float, default=400, help="seconds for the whole run")
    parser.add_argument("--tasks", default=None, help="comma-separated, e.g. train:pht:bf16,"
                        "decode:pht,profile:train:pht (default: all, most wanted first)")
    parser.add_argument("--steps", type=int, default=20, help="train steps per timed window")
    parser.add_argument("--windows", type=int, default=3, help="timed windows (median)")
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--out", default=RESULTS, help="folder of accelerator.json/.md")
    parser.add_argument("--key", default=None, help="the run's key in the JSON (default: "
                        "the device kind, 'smoke: <kind>' with --smoke)")
    parser.add_argument("--cpu-proxies", action="store_true", help="the CPU proxies instead")
    parser.add_argument("--label", default="after", help="--cpu-proxies: the column's name")
    parser.add_argument("--recipes", default="pht,ht,flat,discourse")
    parser.add_argument("--batch", type=int, default=2, help="--cpu-proxies batch")
    parser.add_argument("--config", default="paper", help="--cpu-proxies: the recipes' config")
    parser.add_argument("--policies", default="mixed_bfloat16")
    parser.add_argument("--no-decode-loops", dest="decode_loops", action="store_false",
                        help="--cpu-proxies without benchmarks/decode_loop_hlo.py's figures")
    parser.add_argument("--decode-paper", action="store_true",
                        help="--cpu-proxies: also the decode loop of PHT at paper size (slow)")
    parser.add_argument("--merge", default=None, metavar="JSON",
                        help="fold another accelerator.json's runs into --out's, then exit")
    parser.add_argument("--checkout", default=None,
                        help="measure the keras_hsum and recipes of this checkout")
    args = parser.parse_args(argv)
    for path in (BENCHMARKS, ROOT):
        if path not in sys.path:
            sys.path.append(path)  # appended: a --checkout or PYTHONPATH keras_hsum wins
    if args.merge:
        merge_results(args.out, args.merge)
        return
    if args.checkout:
        use_checkout(args.checkout)
    else:
        import importlib.util

        try:
            found = importlib.util.find_spec("keras_hsum.recipes")
        except ModuleNotFoundError:
            found = None
        if found is None:  # a copied checkout on PYTHONPATH: recipes/ is not installed
            register_recipes(ROOT)
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit("benchmarks/accelerator.py runs under JAX: set KERAS_BACKEND=jax "
                         f"(the backend is {keras.backend.backend()}).")
    if args.cpu_proxies:
        cpu_proxies(args)
        return
    if args.key is None:
        import jax

        kind = jax.devices()[0].device_kind
        args.key = f"smoke: {kind}" if args.smoke else kind
    run_tasks(args)


if __name__ == "__main__":
    main()
