"""Fused-attention proxies of a recipe's train step (issue 57, item 4).

Runs `train_step_hlo.measure` (paper config, batch 1, `mixed_bfloat16`,
one jitted train step on whatever device JAX sees) for one recipe with the
given config changes, and adds:

- `dpa_calls_in_trace`: the `keras.ops.dot_product_attention` calls made
  while the train step is traced (Keras' MultiHeadAttention and the
  project's layers; the model's symbolic build call is not counted), with
  their query shapes;
- the arrays with the shape of an attention score tensor (any order,
  dimensions of 1 left out): "self_BP_H_T_T" [B·P,H,T,T], "cross_BP_H_S_T"
  [B·P,H,S−1,T] (PHT's word-level cross attention), "flat_cross_H_S_PT"
  [B,H,S−1,P·T] (a decoder over the P·T memory), by dtype: values of the
  lowered StableHLO, and instructions of the optimised program (all, and
  outside fusions).

JAX's `dot_product_attention` leaves no name in the program (its XLA
reference is plain einsums and a softmax), hence the call count.

Usage (one process per variant; results/train_step_hlo.md, section
"attention_dropout=0"):
  python benchmarks/attention_dropout_hlo.py pht default
  python benchmarks/attention_dropout_hlo.py pht zero attention_dropout=0
Prints `ROW {json}` and writes it, the lowered and the optimised program
under /tmp/attention_dropout_hlo/<recipe>_<label>/.
"""

import collections
import json
import os
import re
import sys

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import keras.ops as api_ops  # noqa: E402
from keras.src import ops as src_ops  # noqa: E402

import train_step_hlo  # noqa: E402


def signature(dims):
    return tuple(sorted(d for d in dims if d != 1))


def optimised_counts(text, kinds, materialised_only):
    counts = collections.Counter()
    fused = False
    for line in text.splitlines():
        if line and not line.startswith(" "):  # a computation's header
            fused = "fused" in line.split("(")[0]
            continue
        if materialised_only and fused:
            continue
        match = re.match(r"\s*(?:ROOT )?%\S+ = (f32|bf16)\[([0-9,]*)\]", line)
        if not match:
            continue
        dims = tuple(int(d) for d in match.group(2).split(",") if d)
        for kind, want in kinds.items():
            if signature(dims) == want:
                counts[f"{kind}_{match.group(1)}"] += 1
    return dict(counts)


def lowered_counts(text, kinds):
    counts = collections.Counter()
    for line in text.splitlines():
        match = re.search(r"(?:->|:) tensor<([0-9x]+)x(f32|bf16)>\s*$", line)
        if not match or "=" not in line:
            continue
        dims = tuple(int(d) for d in match.group(1).split("x"))
        for kind, want in kinds.items():
            if signature(dims) == want:
                counts[f"{kind}_{match.group(2)}"] += 1
    return dict(counts)


def main():
    name, label = sys.argv[1], sys.argv[2]
    changes = {k: float(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
    calls, lowering, lowered_texts = [], [], []
    original = src_ops.dot_product_attention

    def counted(*args, **kwargs):
        if lowering:
            query = kwargs["query"] if "query" in kwargs else args[0]
            calls.append(tuple(query.shape))
        return original(*args, **kwargs)

    src_ops.dot_product_attention = counted
    api_ops.dot_product_attention = counted

    class Jitted:
        def __init__(self, wrapped):
            self._wrapped = wrapped

        def __call__(self, *args, **kwargs):
            return self._wrapped(*args, **kwargs)

        def __getattr__(self, attribute):
            return getattr(self._wrapped, attribute)

        def lower(self, *args, **kwargs):
            lowering.append(1)
            lowered = self._wrapped.lower(*args, **kwargs)
            lowering.clear()
            lowered_texts.append(lowered.as_text())
            return lowered

    folder = os.path.join("/tmp/attention_dropout_hlo", f"{name}_{label}")
    os.makedirs(folder, exist_ok=True)
    os.environ["TRAIN_STEP_HLO_DUMP"] = folder
    jit = jax.jit
    jax.jit = lambda fn, *args, **kwargs: Jitted(jit(fn, *args, **kwargs))
    try:
        row = train_step_hlo.measure(name, 1, "mixed_bfloat16", 1, changes)
    finally:
        jax.jit = jit
    from keras_hsum import recipes

    heads = recipes.get(name).CONFIGS["paper"].num_heads
    P, T, S = row["shapes_PTS"]
    kinds = {
        "self_BP_H_T_T": signature((P, heads, T, T)),
        "cross_BP_H_S_T": signature((P, heads, S - 1, T)),
        "flat_cross_H_S_PT": signature((heads, S - 1, (P or 1) * T)),
    }
    with open(os.path.join(folder, f"{name}_mixed_bfloat16.hlo.txt")) as handle:
        optimised = handle.read()
    lowered = lowered_texts[-1]
    with open(os.path.join(folder, "lowered.txt"), "w") as handle:
        handle.write(lowered)
    row.update({
        "label": label,
        "dpa_calls_in_trace": len(calls),
        "dpa_query_shapes": sorted(set(map(str, calls))),
        "lowered_values": lowered_counts(lowered, kinds),
        "optimised_all": optimised_counts(optimised, kinds, False),
        "optimised_materialised": optimised_counts(optimised, kinds, True),
    })
    print("ROW " + json.dumps(row), flush=True)
    with open(os.path.join(folder, "row.json"), "w") as handle:
        json.dump(row, handle, indent=1)


if __name__ == "__main__":
    main()
