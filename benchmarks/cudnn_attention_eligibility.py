"""Which attention calls of a recipe's train step cuDNN would take (issue 57).

The CPU proxy for "cuDNN fused-attention calls in the compiled step" until
a GPU session counts them. For each recipe's paper config with
`attention_dropout=0`, one train step (`recipe_steps.TrainStep`: forward,
loss, backward, optimizer) is traced under `mixed_bfloat16` at the paper
batch with `jax.eval_shape` (nothing is computed), while

- every call reaching Keras' JAX `dot_product_attention` (the backend
  function behind `keras.ops.dot_product_attention`, wrapped in this
  process only) is recorded with its query/key/value shapes and dtype, its
  mask and bias, and the layer that made it;
- every `MultiHeadAttention._compute_attention` (and `ParallelCrossAttention`
  word attention) call that does not reach it (an attention dropout above 0,
  or attention scores asked for) is recorded as "explicit".

Each recorded call is then put through the checks JAX's cuDNN path runs in
a train step (`jax.nn.dot_product_attention(implementation="cudnn")`, which
Keras tries first on a GPU): the boolean mask folded into a bias as
`combine_bias_and_mask` folds it, `check_layout` (bias [.., T, S] must have
the query's T and the key's S), and `check_is_flash_attention` with
`is_training=True` (with a bias, T and S must be even; head dim ≤ 256 and a
multiple of 8), with the device answering compute capability 9.0 (Hopper)
and cuDNN 9.8. A refused call is what the GPU log shows as "Failed to apply
cudnn implementation": XLA's reference attention runs instead.

Usage:
  python benchmarks/cudnn_attention_eligibility.py --label before
  python benchmarks/cudnn_attention_eligibility.py --label after
  python benchmarks/cudnn_attention_eligibility.py --recipes pht --smoke
Rows are stored by label in results/cudnn_attention_eligibility.json and
every stored label is written to results/cudnn_attention_eligibility.md.
"""

import argparse
import collections
import contextlib
import inspect
import json
import math
import os
import re
import sys
import time

if __name__ == "__main__":
    os.environ["KERAS_BACKEND"] = "jax"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RESULTS = os.path.join(HERE, "results")

CUDNN_VERSION = 90800  # cuDNN 9.8
CAPABILITY = (9, 0)  # Hopper (H100 / H200)
RECIPES = ("pht", "ht", "flat", "seal")
SMOKE = {  # tiny configs with odd decoder lengths, for the tests and --smoke
    "pht": dict(max_paragraphs=3, max_paragraph_tokens=8, max_target_length=8, batch_size=2),
    "ht": dict(max_paragraphs=3, paragraph_length=8, max_target_length=8, batch_size=2),
    "flat": dict(max_source_length=16, max_target_length=8, batch_size=2),
}


def _shape_struct(shape, dtype):
    import jax

    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dtype)


def _ensure_4d(shape):
    shape = tuple(int(d) for d in shape)
    return (1,) * (4 - len(shape)) + shape


def jax_bias_shape(mask_shape, bias_shape):
    """The [B|1, N|1, T|1, S|1] bias JAX's cuDNN path builds from a mask
    and a bias (`combine_bias_and_mask`: the mask becomes 0 / a large
    negative number, added to the bias), or None."""
    import numpy as np

    shapes = [_ensure_4d(s) for s in (bias_shape, mask_shape) if s is not None]
    if not shapes:
        return None
    return tuple(np.broadcast_shapes(*shapes))


@contextlib.contextmanager
def hopper_device(capability=CAPABILITY):
    """JAX's compute-capability checks answering `capability` (a tuple)."""
    from jax._src.cudnn import fused_attention_stablehlo as fused

    saved = fused.check_compute_capability, fused.is_cuda_compute_capability_equal

    def at_least(wanted):
        return capability >= tuple(int(x) for x in wanted.split("."))

    def equal(wanted):
        return capability == tuple(int(x) for x in wanted.split("."))

    fused.check_compute_capability, fused.is_cuda_compute_capability_equal = at_least, equal
    try:
        yield
    finally:
        fused.check_compute_capability, fused.is_cuda_compute_capability_equal = saved


def cudnn_refusal(query, key, value, mask=None, bias=None, is_causal=False,
                  is_training=True, cudnn_version=CUDNN_VERSION, capability=CAPABILITY):
    """Why JAX's cuDNN attention would refuse these inputs, or None.

    Args:
        query, key, value: arrays or shape structs [B, T|S, N, H] (BTNH, as
            Keras passes them), with `.shape` and `.dtype`.
        mask: shape of the boolean mask (broadcastable to [B, N, T, S]) or None.
        bias: shape of the additive bias or None.
        is_causal: Keras' `is_causal` (cuDNN's causal mask type: no bias).
        is_training: whether the call is differentiated (a train step).
        cudnn_version, capability: the device JAX is made to see.

    Returns:
        None if `check_layout` and `check_is_flash_attention` accept the
        call, else "ExceptionType: message" of the check that refuses it.
    """
    from jax._src.cudnn import fused_attention_stablehlo as fused

    del is_causal  # a mask type, not a bias: no constraint in these checks
    bias_shape = jax_bias_shape(mask, bias)
    bias_struct = None if bias_shape is None else _shape_struct(bias_shape, query.dtype)
    q, k, v = (_shape_struct(t.shape, t.dtype) for t in (query, key, value))
    layout = fused._normalize_layout("BTNH")
    layout_kwargs = {name: None for name in inspect.signature(fused.check_layout).parameters
                     if name not in ("query", "key", "value", "bias", "layout")}
    flash_parameters = inspect.signature(fused.check_is_flash_attention).parameters
    flash_kwargs = {"query": q, "key": k, "value": v, "layout": layout.value,
                    "cudnn_version": cudnn_version, "has_bias": bias_struct is not None,
                    "is_training": is_training}
    try:
        with hopper_device(capability):
            fused.check_layout(q, k, v, bias_struct, layout=layout, **layout_kwargs)
            fused.check_is_flash_attention(
                **{n: a for n, a in flash_kwargs.items() if n in flash_parameters})
    except Exception as error:  # noqa: BLE001 (the refusal is the result)
        return f"{type(error).__name__}: {error}"
    return None


def _calling_layers(frame, depth=2):
    """Names "Class:name" of the innermost `depth` distinct Keras layers on
    the call stack above `frame`, outermost first."""
    import keras

    found = []
    while frame is not None and len(found) < depth:
        owner = frame.f_locals.get("self")
        if isinstance(owner, keras.layers.Layer) and all(owner is not o for o in found):
            found.append(owner)
        frame = frame.f_back
    return "/".join(f"{type(o).__name__}:{o.name}" for o in reversed(found))


class AttentionRecorder:
    """Records `dot_product_attention` calls reaching Keras' JAX backend and
    the attention calls that take the explicit (dropout) path, while
    `active`. Install with `with recorder.installed():`."""

    def __init__(self):
        self.calls = []
        self.active = False
        self._depth = []  # one counter per open _compute_attention call

    def _record_dpa(self, original):
        def recorded(query, key, value, bias=None, mask=None, scale=None,
                     is_causal=False, flash_attention=None, **kwargs):
            if self.active:
                for i in range(len(self._depth)):
                    self._depth[i] += 1
                self.calls.append({
                    "site": _calling_layers(inspect.currentframe().f_back),
                    "path": "dot_product_attention",
                    "query": tuple(query.shape), "key": tuple(key.shape),
                    "value": tuple(value.shape), "dtype": str(query.dtype),
                    "mask": None if mask is None else tuple(mask.shape),
                    "mask_dtype": None if mask is None else str(mask.dtype),
                    "bias": None if bias is None else tuple(bias.shape),
                    "is_causal": bool(is_causal), "flash_attention": flash_attention,
                    "refusal": cudnn_refusal(
                        query, key, value,
                        None if mask is None else mask.shape,
                        None if bias is None else bias.shape, is_causal),
                })
            return original(query, key, value, bias=bias, mask=mask, scale=scale,
                            is_causal=is_causal, flash_attention=flash_attention, **kwargs)
        return recorded

    def _record_explicit(self, original, reason):
        recorder = self

        def recorded(layer, query, *args, **kwargs):
            if not recorder.active:
                return original(layer, query, *args, **kwargs)
            recorder._depth.append(0)
            try:
                return original(layer, query, *args, **kwargs)
            finally:
                if recorder._depth.pop() == 0:
                    recorder.calls.append({
                        "site": _calling_layers(inspect.currentframe()),
                        "path": "explicit", "query": tuple(query.shape),
                        "dtype": str(query.dtype), "reason": reason(layer),
                    })
        return recorded

    @contextlib.contextmanager
    def installed(self):
        from keras.layers import MultiHeadAttention
        from keras.src.backend.jax import nn as jax_nn

        from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention

        patches = [
            (jax_nn, "dot_product_attention",
             self._record_dpa(jax_nn.dot_product_attention)),
            (MultiHeadAttention, "_compute_attention", self._record_explicit(
                MultiHeadAttention._compute_attention,
                lambda layer: f"attention dropout {layer._dropout}")),
            (ParallelCrossAttention, "_explicit_word_context", self._record_explicit(
                ParallelCrossAttention._explicit_word_context,
                lambda layer: f"attention dropout {layer.attention_weights_dropout.rate}")),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        try:
            yield self
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)


def recipe_config(name, smoke=False, changes=None):
    from keras_hsum import recipes

    module = recipes.get(name)
    if smoke:
        config = module.CONFIGS["tiny"].replace(**SMOKE.get(name, {}))
    else:
        config = module.CONFIGS["paper"]
    return module, config.replace(**(changes or {}))


def trace_train_step(name, config, module, batch=None, policy="mixed_bfloat16"):
    """The attention calls of one traced train step of recipe `name`
    (`jax.eval_shape`: shapes only) at `batch` (default: the config's)."""
    import jax
    import keras

    import recipe_steps

    batch = batch or config.batch_size
    model = recipe_steps.build(module, name, config, policy)
    step = recipe_steps.TrainStep(module, config, model, policy)
    structs = lambda values: [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values]  # noqa: E731
    state = (structs(model.trainable_variables), structs(model.non_trainable_variables),
             structs(step.optimizer.variables))
    x, y, w = recipe_steps.synthetic_batch(name, config, batch)
    recorder = AttentionRecorder()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        with recorder.installed():
            recorder.active = True
            jax.eval_shape(step._step, state, x, y, w)
            recorder.active = False
    finally:
        keras.config.set_dtype_policy(previous)
    return recorder.calls


def summarize(calls):
    """Calls grouped by site (layer numbers as `*`) and shapes: a list of
    rows with a count."""
    groups = collections.OrderedDict()
    for call in calls:
        call = dict(call, site=re.sub(r"_[0-9]+\b", "_*", call["site"]))
        key = json.dumps(call, sort_keys=True, default=str)
        groups.setdefault(key, dict(call, count=0))["count"] += 1
    return list(groups.values())


def measure(names, smoke=False, changes=None):
    rows = {}
    for name in names:
        module, config = recipe_config(name, smoke, changes)
        start = time.perf_counter()
        calls = trace_train_step(name, config, module)
        dpa = [c for c in calls if c["path"] == "dot_product_attention"]
        rows[name] = {
            "batch": config.batch_size,
            "attention_calls": len(calls),
            "dot_product_attention_calls": len(dpa),
            "cudnn_eligible": sum(c["refusal"] is None for c in dpa),
            "explicit_calls": len(calls) - len(dpa),
            "sites": summarize(calls),
            "trace_s": round(time.perf_counter() - start, 1),
        }
        print(f"{name}: {rows[name]['cudnn_eligible']} of {len(dpa)} dot_product_attention "
              f"calls eligible, {rows[name]['explicit_calls']} explicit "
              f"({rows[name]['trace_s']} s)", flush=True)
    return rows


def numerical_difference(policy, batch=4, length=39, memory=101, width=256, heads=8, seed=0):
    """Max |difference| between keras_hsum's TransformerDecoder (attention
    dropout 0, training) with and without `use_fused_attention_inputs`
    (Keras' own path: broadcast masks, odd lengths), same weights: the
    outputs and the weight gradients of sum(outputs²)/size, and the largest
    |value| of each for scale. Odd decoder and memory lengths, padded
    targets and memories, one example with an empty memory."""
    import jax
    import keras
    import numpy as np

    from keras_hsum.layers.transformer_decoder import TransformerDecoder

    rng = np.random.default_rng(seed)
    queries = np.ones((batch, length), bool)
    queries[0, length // 2:] = False
    keys = rng.random((batch, memory)) < 0.8
    keys[:, 0] = True
    keys[-1] = False  # an empty memory
    inputs = {"decoder_sequence": rng.normal(size=(batch, length, width)).astype("float32"),
              "encoder_sequence": rng.normal(size=(batch, memory, width)).astype("float32"),
              "decoder_padding_mask": queries, "encoder_padding_mask": keys}
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(seed)
        layer = TransformerDecoder(4 * width, heads, attention_dropout=0.0)
        layer(**inputs)
        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(values):
            outputs, _ = layer.stateless_call(values, non_trainable, **inputs, training=True)
            outputs = keras.ops.cast(outputs, "float32")
            return keras.ops.mean(outputs ** 2), outputs

        run = jax.jit(jax.value_and_grad(loss, has_aux=True))
        (_, fused), fused_grads = run(trainable)
        for attention in (layer._self_attention_layer, layer._cross_attention_layer):
            del attention.__dict__["_compute_attention"]
        run = jax.jit(jax.value_and_grad(loss, has_aux=True))
        (_, plain), plain_grads = run(trainable)
    finally:
        keras.config.set_dtype_policy(previous)
    flat = lambda values: np.concatenate([np.ravel(np.asarray(v, "float32")) for v in values])  # noqa: E731
    fused_grads, plain_grads = flat(fused_grads), flat(plain_grads)
    fused, plain = np.asarray(fused), np.asarray(plain)
    return {
        "policy": policy,
        "shapes": f"B={batch}, T={length}, S={memory}, D={width}, heads={heads}",
        "output_max_abs_diff": float(np.abs(fused - plain).max()),
        "output_max_abs": float(np.abs(plain).max()),
        "gradient_max_abs_diff": float(np.abs(fused_grads - plain_grads).max()),
        "gradient_max_abs": float(np.abs(plain_grads).max()),
    }


NOTES = (
    "What the proxy does not show: whether cuDNN's runtime takes a [B,1,T,S] bias with its "
    "gradient (JAX's checks accept it; only the compiled step on a GPU, counting "
    "`__cudnn$fmha` custom calls as benchmarks/accelerator.py does, can tell), and the "
    "memory: the bias JAX builds is bfloat16 [B,1,T,S] per call (flat's encoder: 275 MiB "
    "per layer at batch 16, the bool mask [16,3000,3000] another 137 MiB), where XLA's "
    "reference attention materialised float32 [B,N,T,S] scores (8 heads: 16x the bias).")


def _shape(shape):
    return "—" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def markdown(stored):
    lines = [
        "# cuDNN attention eligibility of the train steps (CPU proxy)",
        "",
        "Written by `benchmarks/cudnn_attention_eligibility.py`: one train step per recipe, "
        "paper config with `attention_dropout=0`, `mixed_bfloat16`, the paper batch, traced "
        "with `jax.eval_shape`; every call reaching Keras' JAX `dot_product_attention` put "
        "through JAX's own `check_layout` and `check_is_flash_attention(is_training=True)` "
        f"(mask folded into a bias as JAX folds it; compute capability {CAPABILITY[0]}."
        f"{CAPABILITY[1]}, cuDNN {CUDNN_VERSION // 10000}.{CUDNN_VERSION // 100 % 100}). "
        "'explicit' calls never reach it (attention dropout above 0). 'JAX bias' is the "
        "additive bias JAX builds from the boolean mask for cuDNN, with its bfloat16 size "
        "per call (cuDNN's backward also returns its gradient, same shape).",
        "",
    ]
    runs = {label: run for label, run in stored.items() if label != "numerics"}
    if len(runs) > 1:
        lines += ["## Summary: cuDNN-eligible dot_product_attention calls per train step", "",
                  "| recipe | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
        for name in next(iter(runs.values()))["rows"]:
            cells = [f"{run['rows'][name]['cudnn_eligible']} of "
                     f"{run['rows'][name]['dot_product_attention_calls']}"
                     if name in run["rows"] else "—" for run in runs.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", NOTES, ""]
    for label, run in runs.items():
        lines += [f"## {label}", "", f"{run.get('note', '')}".strip(), ""]
        lines += ["| recipe | attention calls | reach dot_product_attention | cuDNN eligible "
                  "| explicit |", "|---|---|---|---|---|"]
        for name, row in run["rows"].items():
            lines.append(f"| {name} | {row['attention_calls']} | "
                         f"{row['dot_product_attention_calls']} | {row['cudnn_eligible']} | "
                         f"{row['explicit_calls']} |")
        lines += ["", "| recipe | site | calls | path | query [B,T,N,H] | key | dtype | mask "
                  "| JAX bias | cuDNN (training) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, row in run["rows"].items():
            for site in row["sites"]:
                if site["path"] == "explicit":
                    lines.append(f"| {name} | {site['site']} | {site['count']} | explicit | "
                                 f"{_shape(site['query'])} | | {site['dtype']} | | | "
                                 f"not called ({site['reason']}) |")
                    continue
                verdict = "accepted" if site["refusal"] is None else "refused: " + site["refusal"]
                bias = jax_bias_shape(site["mask"], site["bias"])
                size = "" if bias is None else f" {2 * math.prod(bias) / 2**20:,.0f} MiB"
                lines.append(
                    f"| {name} | {site['site']} | {site['count']} | dpa | "
                    f"{_shape(site['query'])} | {_shape(site['key'])} | {site['dtype']} | "
                    f"{_shape(site['mask'])} {site['mask_dtype'] or ''} | "
                    f"{_shape(bias)}{size} | {verdict} |")
        lines.append("")
    if "numerics" in stored:
        lines += [
            "## Numerical difference of the padded path",
            "",
            "`numerical_difference`: keras_hsum's TransformerDecoder, attention dropout 0, "
            "training, on CPU: the fused-attention inputs (full masks, odd lengths padded) "
            "against Keras' own path (broadcast masks, odd lengths), same weights; outputs and "
            "the weight gradients of mean(outputs²). Under mixed_bfloat16 the outputs are "
            "bfloat16, whose step between 4 and 8 is 0.03125.",
            "",
            "| policy | shapes | outputs max abs diff (max abs) | gradients max abs diff "
            "(max abs) |", "|---|---|---|---|"]
        for row in stored["numerics"]["rows"]:
            lines.append(f"| {row['policy']} | {row['shapes']} | "
                         f"{row['output_max_abs_diff']:.3g} ({row['output_max_abs']:.3g}) | "
                         f"{row['gradient_max_abs_diff']:.3g} ({row['gradient_max_abs']:.3g}) |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--label", default="current")
    parser.add_argument("--note", default="")
    parser.add_argument("--smoke", action="store_true", help="tiny configs, nothing written")
    parser.add_argument("--numerics", action="store_true",
                        help="store `numerical_difference` (float32, mixed_bfloat16) instead")
    args = parser.parse_args(argv)
    if args.numerics:
        rows = [numerical_difference(p) for p in ("float32", "mixed_bfloat16")]
        for row in rows:
            print(row, flush=True)
        args.label = "numerics"
    else:
        rows = measure(args.recipes.split(","), args.smoke, {"attention_dropout": 0.0})
    if args.smoke:
        print(markdown({args.label: {"rows": rows}}))
        return
    path = os.path.join(RESULTS, "cudnn_attention_eligibility.json")
    stored = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
    stored[args.label] = {"note": args.note, "rows": rows}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(stored, f, indent=1, default=str)
    with open(os.path.join(RESULTS, "cudnn_attention_eligibility.md"), "w", encoding="utf-8") as f:
        f.write(markdown(stored))
    print(markdown({args.label: stored[args.label]}))


if __name__ == "__main__":
    main()
