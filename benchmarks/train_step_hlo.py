"""CPU proxies of the accelerator train step (issue 57, item 4).

For each Transformer recipe's (and discourse's) `paper` config: the recipe's
model (`build_model`), loss (`loss(config)` or `LabelSmoothedCrossEntropy`)
and Adam/Adagrad with global-norm clipping, one `jax.jit` stateless train
step (forward + backward + optimizer update, as Keras' JAX `fit` compiles it)
on synthetic full rows of the paper shapes at a small batch, under
`mixed_bfloat16` (the policy users train with on a GPU) or float32.

Printed per recipe, from the compiled (optimised) XLA CPU program:
- `flops`, `bytes accessed`: `compiled.cost_analysis()`;
- transposes and copies: `transpose` / `copy` instructions anywhere in the
  optimised HLO (inside fusions too) and those left outside fusions;
- materialised buffers: results of instructions outside fusions (what a GPU
  writes to and reads back from memory), by dtype; "big f32" = float32
  buffers of at least B·S·V/4 elements (the logits' order of size), and the
  largest buffers with their shapes;
- XLA temp memory (`memory_analysis`);
- the jitted step's median wall time over `--steps` runs (CPU; ratios only).

`--compare REV` runs each recipe twice in subprocesses, once on the code of
git revision REV (exported with `git archive` to a temporary folder) and once
on the working tree, alternating, and writes both and the after/before ratios
to benchmarks/results/train_step_hlo.md (and .json).

Usage:
  python benchmarks/train_step_hlo.py [--recipes pht,ht,flat,discourse]
      [--batch 1] [--policy mixed_bfloat16] [--steps 5] [--compare 1c4cd50]
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
FAMILY = {"pht": "paragraphs", "ht": "paragraphs", "flat": "flat", "discourse": "sections"}


def train_shapes(name, config):
    """(P or None, T, S) of the recipe's training batches."""
    if name == "pht":
        return config.max_paragraphs, config.max_paragraph_tokens, config.max_target_length
    if name == "ht":
        return config.max_paragraphs, config.paragraph_length, config.max_target_length
    if name == "flat":
        return None, config.max_source_length, config.max_target_length
    if name == "discourse":
        return config.max_sections, config.max_section_length, config.max_target_length
    raise ValueError(f"Unknown recipe {name!r}; expected one of {', '.join(FAMILY)}.")


def synthetic_batch(name, config, batch, seed=0):
    """`(x, y, w)` of full rows (no padding) as the recipe's training pairs:
    every non-string feature the family declares, random token ids."""
    import numpy as np

    from keras_hsum import features as F

    rng = np.random.default_rng(seed)
    P, T, S = train_shapes(name, config)
    declared = dict(F.family_features(FAMILY[name], with_target=True))
    sizes = F.axis_sizes(P, T, S)
    x = {}
    for key, feature in declared.items():
        if feature.dtype == "string" or any(
                isinstance(a, str) and sizes.get(a) is None for a in feature.axes):
            continue
        shape = [batch] + [a if isinstance(a, int) else sizes[a] for a in feature.axes]
        if feature.dtype == "bool":
            value = np.ones(shape, bool)
        elif key in F.TOKEN_FEATURES:
            value = rng.integers(4, config.vocabulary_size, shape).astype(feature.dtype)
        elif key == F.PARAGRAPH_INDEX:
            value = np.broadcast_to(np.arange(shape[-1]), shape).astype(feature.dtype)
        elif feature.dtype.startswith("int"):
            value = np.zeros(shape, feature.dtype)
        else:
            value = rng.random(shape).astype(feature.dtype)
        x[key] = value
    target = x.pop(F.TARGET)
    target[:, 0], target[:, -1] = 2, 3
    labels = target[:, 1:]
    x["decoder_tokens"] = target[:, :-1]
    x["target_mask"] = labels != 0
    return x, labels, (labels != 0).astype("float32")


# --- optimised-HLO statistics -------------------------------------------------

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(ROOT\s+)?%?[\w.\-]+\s*=\s*(\([^=]*\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+([a-z\-]+)\(")
_SHAPE = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\]")
_CALLED = re.compile(r"(?:calls|to_apply)=%?([\w.\-]+)")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def _shapes(text):
    for dtype, dims in _SHAPE.findall(text):
        size = 1
        for d in dims.split(","):
            if d:
                size *= int(d)
        yield dtype, [int(d) for d in dims.split(",") if d], size


def lowered_f32_values(stablehlo_text, big_elements, weight_shapes):
    """Big float32 values the program asks for (the lowered StableHLO, before
    XLA CPU turns bfloat16 arithmetic into float32): `(count, examples)` of
    results of at least `big_elements` float32 elements, weight-shaped ones
    (gradients, optimizer slots) left out."""
    found = []
    for line in stablehlo_text.splitlines():
        if " = stablehlo." not in line:
            continue
        types = re.findall(r"tensor<([0-9x]+)xf32>", line.rsplit("->", 1)[-1].rsplit(":", 1)[-1])
        for dims in types[-1:]:
            shape = tuple(int(d) for d in dims.split("x") if d)
            size = 1
            for d in shape:
                size *= d
            if size >= big_elements and shape not in weight_shapes:
                found.append(line.split("=", 1)[1].split("(")[0].split()[0] + f" f32{list(shape)}")
    return len(found), collections.Counter(found).most_common(8)


# What a materialised buffer belongs to, from its instruction's op_name
# (first match wins; "other" when none does, "unnamed" without metadata).
CATEGORIES = (
    ("dropout (random bits, masks)", ("dropout", "_bernoulli", "_uniform", "threefry")),
    ("loss", ("cross_entropy",)),
    ("optimizer (update, clipping)", ("adam", "adagrad", "clip", "global_norm", "/sqrt")),
    ("token embedding / output projection", ("token_embedding",)),
    ("attention (scores, softmax, context)", ("attention", "softmax")),
    ("feedforward", ("feedforward",)),
    ("layer norm", ("layer_norm", "layernorm")),
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def category(line, computations=None):
    """The CATEGORIES label of one instruction line; a fusion without an
    op_name of its own is labelled by the first named instruction of its
    fused computation (from the root up)."""
    match = _OP_NAME.search(line)
    called = _CALLED.search(line)
    if not match and called and computations:
        for inner in reversed(computations.get(called.group(1), [])):
            match = _OP_NAME.search(inner)
            if match:
                break
    if not match:
        return "unnamed (XLA converts, transposes, copies)"
    name = match.group(1).lower()
    for label, keys in CATEGORIES:
        if any(key in name for key in keys):
            return label
    return "other"


def hlo_statistics(hlo_text, big_elements, weight_shapes=()):
    """Counts over the optimised HLO text (see the module docstring)."""
    computations = collections.OrderedDict()
    name = None
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match:  # a computation's header (instructions are indented)
            name = match.group(2)
            computations[name] = []
        elif name is not None and line.strip() and line.strip() != "}":
            computations[name].append(line)
    called = set()
    for lines in computations.values():
        for line in lines:
            called.update(_CALLED.findall(line))
    ops_all = collections.Counter()
    ops_top = collections.Counter()
    materialised = collections.Counter()
    by_category = collections.Counter()
    big_f32 = []
    largest = []
    for comp, lines in computations.items():
        top = comp not in called
        for line in lines:
            match = _INSTRUCTION.match(line)
            if not match:
                continue
            shape_text, op = match.group(2), match.group(3)
            ops_all[op] += 1
            if not top:
                continue
            ops_top[op] += 1
            if op in ("parameter", "constant", "get-tuple-element", "tuple", "bitcast"):
                continue
            for dtype, dims, size in _shapes(shape_text):
                nbytes = size * _BYTES.get(dtype, 4)
                materialised[dtype] += nbytes
                by_category[category(line, computations)] += nbytes
                largest.append((nbytes, f"{op} {dtype}{dims}"))
                if dtype == "f32" and size >= big_elements and tuple(dims) not in weight_shapes:
                    big_f32.append(f"{op} f32{dims}")
    largest.sort(reverse=True)
    return {
        "transposes_all": ops_all["transpose"], "copies_all": ops_all["copy"],
        "transposes_unfused": ops_top["transpose"], "copies_unfused": ops_top["copy"],
        "fusions": ops_top["fusion"], "dots_unfused": ops_top["dot"],
        "instructions_unfused": sum(ops_top.values()),
        "materialised_mib": {k: round(v / 2**20, 1) for k, v in sorted(materialised.items())},
        "materialised_mib_by_category": {
            k: round(v / 2**20, 1) for k, v in by_category.most_common()},
        "big_f32_buffers": len(big_f32), "big_f32_examples": big_f32[:12],
        "largest_buffers": [f"{n / 2**20:.1f} MiB {what}" for n, what in largest[:8]],
    }


# --- one recipe, in this process ----------------------------------------------

def measure(name, batch, policy, steps, changes=None):
    """One recipe's row: cost analysis, HLO statistics, median step time."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import keras
    import numpy as np

    from keras_hsum import recipes
    from keras_hsum.models.losses import LabelSmoothedCrossEntropy

    module = recipes.get(name)
    config = module.CONFIGS["paper"].replace(**(changes or {}))
    P, T, S = train_shapes(name, config)
    keras.config.set_dtype_policy(policy)
    try:
        model = module.build_model(config, config.vocabulary_size)
        x, y, w = synthetic_batch(name, config, batch)
        model({k: keras.KerasTensor(v.shape, v.dtype.name) for k, v in x.items()},
              training=False)
        loss_object = (module.loss(config) if hasattr(module, "loss")
                       else LabelSmoothedCrossEntropy(config.label_smoothing))
        clip = {"global_clipnorm": config.clipnorm} if config.clipnorm else {}
        if config.optimizer == "adam":
            optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.998, epsilon=1e-9, **clip)
        else:
            optimizer = keras.optimizers.Adagrad(config.learning_rate, **clip)
        optimizer.build(model.trainable_variables)

        def loss_fn(trainable, non_trainable, x, y, w):
            y_pred, non_trainable, losses = model.stateless_call(
                trainable, non_trainable, x, training=True, return_losses=True)
            loss = loss_object(y, y_pred, sample_weight=w)
            for extra in losses:
                loss = loss + extra
            return loss, non_trainable

        def train_step(state, x, y, w):
            trainable, non_trainable, optimizer_vars = state
            (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                trainable, non_trainable, x, y, w)
            trainable, optimizer_vars = optimizer.stateless_apply(
                optimizer_vars, grads, trainable)
            return loss, (trainable, non_trainable, optimizer_vars)

        state = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables],
                 [v.value for v in optimizer.variables])
        started = time.perf_counter()
        lowered = jax.jit(train_step).lower(state, x, y, w)
        compiled = lowered.compile()
        compile_s = time.perf_counter() - started
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):
            cost = cost[0]
        memory = compiled.memory_analysis()
        dump = os.environ.get("TRAIN_STEP_HLO_DUMP")
        if dump:  # a folder: the optimised HLO of each recipe, for reading
            with open(os.path.join(dump, f"{name}_{policy}.hlo.txt"), "w") as handle:
                handle.write(compiled.as_text())
        logits = batch * S * config.vocabulary_size
        weight_shapes = {tuple(v.shape) for v in model.trainable_variables}
        row = {
            "recipe": name, "policy": policy, "batch": batch, "shapes_PTS": [P, T, S],
            "config_changes": changes or {},
            "vocabulary_size": config.vocabulary_size,
            "gflop": cost.get("flops", 0) / 1e9,
            "bytes_accessed_gib": cost.get("bytes accessed", 0) / 2**30,
            "temp_mib": memory.temp_size_in_bytes / 2**20,
            "compile_s": compile_s,
            **hlo_statistics(compiled.as_text(), logits // 4, weight_shapes),
        }
        row["lowered_big_f32"], row["lowered_big_f32_examples"] = lowered_f32_values(
            lowered.as_text(), logits // 4, weight_shapes)
        losses, times = [], []
        for _ in range(steps + 1):
            begun = time.perf_counter()
            loss, _ = compiled(state, x, y, w)
            loss = float(loss)
            times.append(time.perf_counter() - begun)
            losses.append(loss)
        row["step_s_median"] = statistics.median(times[1:])
        row["step_s_all"] = times[1:]
        row["loss"] = losses[0]
        if not np.isfinite(losses[0]):
            row["note"] = "non-finite loss"
        return row
    finally:
        keras.config.set_dtype_policy("float32")


# --- before / after -----------------------------------------------------------

def export_revision(revision, folder):
    """The tracked keras_hsum/ and recipes/ of `revision` under `folder`, with
    recipes/ also as keras_hsum/recipes (what the editable install maps)."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "keras_hsum", "recipes"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    os.symlink(os.path.join(folder, "recipes"), os.path.join(folder, "keras_hsum", "recipes"))
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", revision],
                          check=True, capture_output=True, text=True).stdout.strip()


def run_child(source, name, args):
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    if source:
        env["PYTHONPATH"] = source + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, os.path.abspath(__file__), "--child", "--recipes", name,
               "--batch", str(args.batch), "--policy", args.policy, "--steps", str(args.steps)]
    command += [f"--set={change}" for change in args.set]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/tmp")
    for line in done.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"recipe": name, "error": (done.stderr or done.stdout)[-600:]}


# What the CPU program can and cannot show, and the levers of issue 57 item 4
# that the code does not take (facts about the code and Keras 3.15, checked
# by reading them; the figures are in the tables above them).
READING = """
## Reading

- XLA CPU computes bfloat16 arithmetic in float32 (its dots and most
  elementwise ops are upcast), and fuses less than XLA GPU (a reduction
  takes a materialised operand), so "materialised" and "big f32" here
  over-count what an H100 writes; `bytes accessed` is the cost model's
  total over the CPU program. They compare versions; they are not GPU
  traffic. "lowered" counts float32 values the program itself asks for,
  including the float32 sums that JAX's softmax of bfloat16 scores and
  the loss's reductions use (fused on a GPU).
- Flash / cuDNN attention (`keras.ops.dot_product_attention`): keras'
  `MultiHeadAttention` (inside keras-hub's TransformerEncoder/Decoder:
  every encoder, decoder and HT/flat cross attention here) takes it only
  when its attention dropout is 0; every paper config has dropout > 0
  (PHT 0.3, HT and flat 0.1) and keras-hub uses the same rate for the
  attention probabilities. Our own attentions (ParallelCrossAttention,
  InterParagraphAttention, MultiHeadPooling) also drop attention weights,
  and `jax.nn.dot_product_attention` has no dropout. Taking the fused
  kernels means training without attention dropout: a change of the
  recipe (results not equal), not of the layers. Stop 65 made it a
  declared option, `attention_dropout` (None = `dropout`: the paper
  configs, unchanged; 0 = fused attention in keras-hub's layers and in
  ParallelCrossAttention's word attention; docs/recipes.md), measured by
  benchmarks/attention_dropout_hlo.py (its section is kept by hand:
  rerunning this script rewrites the file without it).
- cuDNN LSTM (discourse): Keras 3.15's JAX `lstm` refuses any mask
  (`keras/src/backend/jax/rnn.py`: "Masking is not supported by the cuDNN
  path"), and the discourse encoder needs its mask (sections padded to
  500 tokens; masked steps keep the state; the backward direction would
  otherwise read the padding first). Its decoder is an LSTMCell in a scan
  with attention feedback, which no fused RNN kernel covers.
- Dropout random bits: every dropout draws 32 threefry bits per element
  (Keras' JAX `dropout` -> `jax.random.bernoulli`); its share of the
  materialised bytes is the "dropout" category. A cheaper generator
  (e.g. `jax_default_prng_impl="rbg"`) is a training-loop setting that
  changes the random stream (and Keras' uint32[2] seeds would need the
  rbg key shape): not taken here.
"""


def ratio(after, before):
    return after / before if before else float("nan")


def markdown(rows, args, base):
    lines = [
        "# Train step CPU proxies (issue 57, item 4)", "",
        f"`benchmarks/train_step_hlo.py --compare {args.compare}`: paper configs, batch "
        f"{args.batch}, `{args.policy}`, one jitted stateless train step (forward + backward + "
        f"optimizer), XLA CPU. before = {base}, after = working tree. bytes = "
        "`cost_analysis()['bytes accessed']`; transposes/copies: all = anywhere in the optimised "
        "HLO (fusions included), unfused = left as their own kernels; materialised = results of "
        "instructions outside fusions; big f32 = float32 buffers of >= B*S*V/4 elements that are "
        "not weight-shaped, in the optimised CPU program (where XLA CPU computes bfloat16 "
        "arithmetic in float32) and in the lowered program (the dtypes the step asks for); step = "
        f"median of {args.steps} CPU runs (shared, noisy machine: the ratio is what counts).", "",
        "| recipe | version | GFLOP | bytes GiB | transposes all / unfused | copies all / unfused "
        "| fusions | materialised MiB (f32 / bf16) | big f32 buffers (optimised / lowered) "
        "| temp MiB | step s |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pair in rows.items():
        for label in ("before", "after"):
            r = pair.get(label, {})
            if "error" in r or not r:
                lines.append(f"| {name} | {label} | error: {r.get('error', 'missing')[-200:]!r} "
                             "| | | | | | | | |")
                continue
            m = r["materialised_mib"]
            lines.append(
                f"| {name} | {label} | {r['gflop']:.1f} | {r['bytes_accessed_gib']:.2f} | "
                f"{r['transposes_all']} / {r['transposes_unfused']} | {r['copies_all']} / "
                f"{r['copies_unfused']} | {r['fusions']} | {m.get('f32', 0):.0f} / "
                f"{m.get('bf16', 0):.0f} | {r['big_f32_buffers']} / {r.get('lowered_big_f32', '')} | "
                f"{r['temp_mib']:.0f} | "
                f"{r['step_s_median']:.3f} |")
        b, a = pair.get("before", {}), pair.get("after", {})
        if "gflop" in a and "gflop" in b:
            lines.append(
                f"| {name} | after/before | {ratio(a['gflop'], b['gflop']):.3f} | "
                f"{ratio(a['bytes_accessed_gib'], b['bytes_accessed_gib']):.3f} | "
                f"{a['transposes_all'] - b['transposes_all']:+d} / "
                f"{a['transposes_unfused'] - b['transposes_unfused']:+d} | "
                f"{a['copies_all'] - b['copies_all']:+d} / "
                f"{a['copies_unfused'] - b['copies_unfused']:+d} | "
                f"{a['fusions'] - b['fusions']:+d} | | "
                f"{a['big_f32_buffers'] - b['big_f32_buffers']:+d} / "
                f"{a.get('lowered_big_f32', 0) - b.get('lowered_big_f32', 0):+d} | "
                f"{ratio(a['temp_mib'], b['temp_mib']):.3f} | "
                f"{ratio(a['step_s_median'], b['step_s_median']):.3f} |")
    lines += ["", "Where the materialised bytes go (after; MiB written by instructions outside "
              "fusions, by the op_name of the instruction; XLA CPU, so bfloat16 arithmetic "
              "appears as float32):", ""]
    for name, pair in rows.items():
        a = pair.get("after", {})
        if "materialised_mib_by_category" in a:
            total = sum(a["materialised_mib_by_category"].values()) or 1.0
            lines.append(f"- {name} ({total:.0f} MiB): " + "; ".join(
                f"{k} {v:.0f} ({100 * v / total:.0f}%)"
                for k, v in a["materialised_mib_by_category"].items()))
    lines += ["", "Largest materialised buffers (after):", ""]
    for name, pair in rows.items():
        a = pair.get("after", {})
        if "largest_buffers" in a:
            lines.append(f"- {name}: " + "; ".join(a["largest_buffers"][:5]))
    return "\n".join(lines) + "\n" + READING


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="pht,ht,flat,discourse")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--policy", default="mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compare", default=None, help="git revision of the 'before' code")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a paper config field (a float), e.g. --set dropout=0")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.recipes.split(",")
    if args.child:
        for name in names:
            changes = {k: float(v) for k, v in (c.split("=", 1) for c in args.set)}
            print("ROW " + json.dumps(measure(name, args.batch, args.policy, args.steps,
                                              changes)), flush=True)
        return
    if not args.compare:
        for name in names:
            row = run_child(None, name, args)
            print(json.dumps(row, indent=1), flush=True)
        return
    suffix = "" if args.policy == "mixed_bfloat16" else f"_{args.policy}"
    path = os.path.join(RESULTS, f"train_step_hlo{suffix}")
    with tempfile.TemporaryDirectory() as folder:
        base = export_revision(args.compare, folder)
        measured = {}
        for name in names:
            measured[name] = {}
            for label, source in (("before", folder), ("after", None)):
                measured[name][label] = run_child(source, name, args)
                print(name, label, json.dumps(measured[name][label]), flush=True)
            rows = {}
            if os.path.exists(path + ".json"):  # other recipes' rows, same comparison
                with open(path + ".json") as handle:
                    previous = json.load(handle)
                if previous.get("before") == base and previous.get("args", {}).get(
                        "batch") == args.batch:
                    rows = previous["rows"]
            rows.update(measured)
            os.makedirs(RESULTS, exist_ok=True)
            with open(path + ".json", "w") as handle:
                json.dump({"before": base, "args": vars(args), "rows": rows}, handle, indent=1)
            with open(path + ".md", "w") as handle:
                handle.write(markdown(rows, args, base))
    print(markdown(rows, args, base))


if __name__ == "__main__":
    main()
