"""Attention with dropout as XLA compiles it for an H100, without a GPU.

Compiles forward + backward (`jax.value_and_grad` of the float32 sum,
gradients wrt query, key and value) of `keras_hsum.layers.dropout_attention`
for a compile-only H100 (`gpu_compile.compile_only_device`, which must run
before any other JAX computation) and reads the optimized program with
`gpu_compile.kernels` / `gpu_compile.summary`:

- `xla`: `reference_dropout_attention`, the written-out attention (what a
  Keras `MultiHeadAttention` with attention dropout compiles to: [B,N,T,S]
  logits, weights and mask in memory);
- `flash`: `flash_dropout_attention`, the Pallas kernel (Triton backend:
  `pallas_call` with `triton.CompilerParams`; three `__gpu$xla.gpu.triton`
  custom calls: forward, dK/dV, dQ);
- `xla_bf16`: the same written out as Keras' `MultiHeadAttention` computes
  it under mixed_bfloat16 (bf16 logits and weights, softmax in float32);
- for scale, at rate 0: `xla_rate0` (the reference without dropout),
  `flash_rate0` (the kernel without its hash) and `cudnn_rate0` (`jax.nn.dot_product_attention(implementation="cudnn")`,
  what Keras picks without dropout).

Shapes (`--shapes`): flat, the flat Transformer recipe's paper encoder
attention (B 16, T = S = 3,000, 8 heads, Dh 32, as its train step
compiles it: `gpu_compile.py`'s `pallas_work` signatures) and ht, HT's local
attention over its B·P = 384 paragraphs of 100 tokens (8 heads, Dh 32); bf16, dropout 0.1,
a key padding mask [B,1,1,S]. One attention call each (a model has one
per layer).

gpu_compile gives a Triton or cuDNN custom call its operands' and outputs'
bytes and no FLOPs (it cannot see inside), so its roofline of such a
kernel is the time to read its inputs and write its outputs once: a lower
bound that leaves out the kernel's work (K and V re-read by every block of
queries are assumed to come from L2). This script adds the kernels' own work, counted from their jaxprs
(the `pallas_call` bodies, loop trip counts times grid size): dot FLOPs
(at the dense bf16 peak) and elementwise operations (at gpu_compile's
`alu_rate`; exp and divisions weigh 4 as there, 32-bit integer operations
2, Hopper's INT32 lanes being half its FP32 lanes), and the `flash`
roofline is the larger of the bytes, FLOPs and operations times, kernel by
kernel. For `cudnn_rate0` it adds FlashAttention-2's dots (2 forward, 5
backward, 2·B·N·T·S·Dh FLOPs each) at the peak. With `ptxas` (the CUDA
plugin's nvidia-cuda-nvcc), each Triton kernel's PTX is assembled for
sm_90a and its registers and spills printed.

Usage (the compile venv: `bash benchmarks/gpu_compile_env.sh`):
  KERAS_BACKEND=jax .venv-gpu-compile/bin/python benchmarks/dropout_attention_hlo.py \\
      [--shapes flat,ht] [--variants xla,xla_bf16,flash,xla_rate0,flash_rate0,cudnn_rate0] \\
      [--mask keys|full|none] [--json PATH]
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SHAPES = {  # B, T, S, heads, head width
    "flat": (16, 3000, 3000, 8, 32),
    "ht": (384, 100, 100, 8, 32),
}
RATE = 0.1

def ptxas_report(dump_dir, module_name):
    """{kernel: "R registers, spills S/L bytes, smem M bytes"} from the PTX
    XLA dumped for `module_name` (Triton kernels only), or {} without ptxas."""
    try:
        import nvidia.cuda_nvcc as nvcc
    except ImportError:
        return {}
    ptxas = os.path.join(list(nvcc.__path__)[0], "bin", "ptxas")
    if not os.path.exists(ptxas):
        return {}
    report = {}
    for path in sorted(glob.glob(os.path.join(dump_dir, f"*{module_name}*.ptx"))):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        entry = re.search(r"\.entry\s+(dropout_attention\w*)", text)
        if not entry:
            continue
        result = subprocess.run([ptxas, "--gpu-name", "sm_90a", "-v", path, "-o", os.devnull],
                                capture_output=True, text=True)
        info = result.stderr
        registers = re.search(r"Used (\d+) registers", info)
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
        smem = re.search(r"(\d+) bytes smem", info)
        report[entry.group(1)] = {
            "registers": int(registers.group(1)) if registers else None,
            "spill_store_bytes": int(spills.group(1)) if spills else None,
            "spill_load_bytes": int(spills.group(2)) if spills else None,
            "static_smem_bytes": int(smem.group(1)) if smem else 0,
            "threads": int(re.search(r"\.reqntid (\d+)", text).group(1))
            if re.search(r"\.reqntid (\d+)", text) else None,
        }
    return report


def written_out_bf16(query, key, value, mask, rate, seed):
    """The reference as Keras' MultiHeadAttention computes it under
    mixed_bfloat16: logits in bf16, softmax in float32, weights cast to bf16
    before the dropout and the weights·v product (same mask as the kernel)."""
    import jax.numpy as jnp
    import numpy as np

    from keras_hsum.layers import dropout_attention as da

    b, t, n, h = query.shape
    s = key.shape[1]
    logits = jnp.einsum("btnh,bsnh->bnts", query, key) * (1.0 / math.sqrt(h))
    logits = logits.astype(jnp.float32)
    if mask is not None:
        logits = jnp.where(mask, logits, da.MASKED_LOGIT)
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    weights = (weights / jnp.sum(weights, axis=-1, keepdims=True)).astype(query.dtype)
    threshold = da.keep_threshold(rate)
    bits = da.dropout_mask_bits(seed, b, n, t, s)
    weights = jnp.where(bits < np.uint32(threshold), weights * (2**32 / threshold), 0)
    return jnp.einsum("bnts,bsnh->btnh", weights.astype(query.dtype), value)


def attention_fn(variant, mask_kind):
    import jax
    import jax.numpy as jnp

    from keras_hsum.layers import dropout_attention as da

    def attend(query, key, value, mask, seed):
        if variant == "xla":
            return da.reference_dropout_attention(query, key, value, mask, RATE, seed)
        if variant == "xla_rate0":
            return da.reference_dropout_attention(query, key, value, mask, 0.0, seed)
        if variant == "flash":
            return da.flash_dropout_attention(query, key, value, mask, RATE, seed)
        if variant == "flash_rate0":
            return da.flash_dropout_attention(query, key, value, mask, 0.0, seed)
        if variant == "xla_bf16":
            return written_out_bf16(query, key, value, mask, RATE, seed)
        if variant == "cudnn_rate0":
            # cuDNN takes a key padding mask as lengths (a prefix of keys).
            lengths = None if mask is None else jnp.sum(
                jnp.broadcast_to(mask, (mask.shape[0], 1, 1, key.shape[1]))[:, 0, 0],
                axis=-1, dtype=jnp.int32)
            return jax.nn.dot_product_attention(query, key, value,
                                                key_value_seq_lengths=lengths,
                                                implementation="cudnn")
        raise SystemExit(f"unknown variant {variant!r}")

    def loss(query, key, value, mask, seed):
        return jnp.sum(attend(query, key, value, mask, seed).astype(jnp.float32))

    step = jax.value_and_grad(loss, argnums=(0, 1, 2))
    step.__name__ = f"dropout_attention_{variant}_{mask_kind}"
    return step


def inputs(shape, mask_kind, sharding):
    import jax
    import jax.numpy as jnp

    b, t, s, n, h = shape
    spec = lambda dims, dtype: jax.ShapeDtypeStruct(dims, dtype, sharding=sharding)  # noqa: E731
    mask = {"keys": spec((b, 1, 1, s), jnp.bool_), "full": spec((b, 1, t, s), jnp.bool_),
            "none": None}[mask_kind]
    return (spec((b, t, n, h), jnp.bfloat16), spec((b, s, n, h), jnp.bfloat16),
            spec((b, s, n, h), jnp.bfloat16), mask, spec((2,), jnp.uint32))


def measure(shape_name, variant, mask_kind, sharding, target, dump_dir):
    import jax

    import gpu_compile

    shape = SHAPES[shape_name]
    step = attention_fn(variant, mask_kind)
    args = inputs(shape, mask_kind, sharding)
    row = {"shape": shape_name, "dims_B_T_S_N_Dh": list(shape), "variant": variant,
           "mask": mask_kind, "rate": 0.0 if variant.endswith("rate0") else RATE}
    with gpu_compile.as_on_gpu():
        jitted = jax.jit(step)
        lowered = jitted.lower(*args)
        compiled = lowered.compile()
    text = compiled.as_text()
    found = gpu_compile.kernels(text)
    totals = gpu_compile.summary(found, target)
    stats = compiled.memory_analysis()
    row["temp_gib"] = stats.temp_size_in_bytes / 2**30 if stats else None
    row["kernels"] = totals["total"]["kernels"]
    row["gb"] = totals["total"]["gb"]
    row["gpu_compile_roofline_ms"] = totals["total"]["roofline_ms"]
    row["by_class_ms"] = {k: v["roofline_ms"] for k, v in totals["by_class"].items()
                          if v["kernels"]}
    row["cudnn_attention_calls"] = len(re.findall(r'custom_call_target="__cudnn\$fmha', text))
    triton = [k for k in found if k["kind"] == "__gpu$xla.gpu.triton"]
    row["triton_calls"] = len(triton)
    row["largest_kernels"] = [
        {"kind": k["kind"], "class": k["class"], "mb": k["bytes"] * k["calls"] / 1e6,
         "shape": k["shape"][:70]}
        for k in sorted(found, key=lambda k: -k["bytes"] * k["calls"])[:6]]
    if triton:
        spec = gpu_compile.TARGETS[target]
        jaxpr = jax.make_jaxpr(step)(*args)
        work = {}
        for name, grid, kernel_jaxpr in gpu_compile.pallas_calls(jaxpr.jaxpr):
            flops, ops = gpu_compile.kernel_work(kernel_jaxpr, math.prod(grid))
            work[str(name)] = {"kernel": str(name), "grid": list(grid), "tflop": flops / 1e12,
                               "g_alu_ops": ops / 1e9,
                               "flops_ms": flops / spec["bf16_peak"] * 1e3,
                               "alu_ms": ops / spec["alu_rate"] * 1e3}
        roofline_ms = 0.0
        for kernel in found:
            seconds = gpu_compile.roofline_s(kernel, target) * kernel["calls"]
            if kernel["kind"] == "__gpu$xla.gpu.triton":
                name = re.search(r"(dropout_attention_(?:forward|backward_dkdv|backward_dq))",
                                 kernel["op"])
                entry = work[name.group(1)]  # the custom call's pallas_call
                entry["mb"] = kernel["bytes"] / 1e6
                entry["bytes_ms"] = seconds * 1e3
                entry["roofline_ms"] = max(entry["bytes_ms"], entry["flops_ms"], entry["alu_ms"])
                roofline_ms += entry["roofline_ms"]
            else:
                roofline_ms += seconds * 1e3
        row["triton_work"] = list(work.values())
        row["roofline_ms"] = roofline_ms
        if dump_dir:
            row["ptxas"] = ptxas_report(dump_dir, step.__name__)
    else:
        row["roofline_ms"] = totals["total"]["roofline_ms"]
    if row["cudnn_attention_calls"]:
        b, t, s, n, h = shape
        flops = 7 * 2 * b * n * t * s * h
        attention_ms = totals["by_class"]["attention"]["roofline_ms"]
        row["cudnn_dot_tflop"] = flops / 1e12
        row["roofline_ms"] = totals["total"]["roofline_ms"] - attention_ms + max(
            attention_ms, flops / gpu_compile.TARGETS[target]["bf16_peak"] * 1e3)
    return row


def print_row(row):
    print(f"\n== {row['shape']} {row['dims_B_T_S_N_Dh']} {row['variant']} "
          f"(rate {row['rate']}, mask {row['mask']})")
    if "error" in row:
        print("   error:", row["error"])
        return
    print(f"   kernels {row['kernels']}, {row['gb']:.2f} GB moved, roofline "
          f"{row['roofline_ms']:.3f} ms (gpu_compile's, bytes only for custom calls: "
          f"{row['gpu_compile_roofline_ms']:.3f} ms), temp {row['temp_gib']:.2f} GiB, "
          f"cuDNN attention calls {row['cudnn_attention_calls']}, Triton calls "
          f"{row['triton_calls']}")
    if "cudnn_dot_tflop" in row:
        print(f"   cuDNN attention dots (FlashAttention-2's count): {row['cudnn_dot_tflop']:.3f} "
              "TFLOP, in the roofline at the bf16 peak")
    print("   by class (ms):", ", ".join(f"{k} {v:.3f}" for k, v in row["by_class_ms"].items()))
    for kernel in row["largest_kernels"]:
        print(f"   {kernel['mb']:10.1f} MB  {kernel['class']:<11} {kernel['kind']:<28} "
              f"{kernel['shape']}")
    for work in row.get("triton_work", []):
        print(f"   kernel {work['kernel']} grid {work['grid']}: {work.get('mb', 0):.1f} MB "
              f"({work.get('bytes_ms', 0):.3f} ms), {work['tflop']:.3f} TFLOP "
              f"({work['flops_ms']:.3f} ms at peak), {work['g_alu_ops']:.1f} G ALU ops "
              f"({work['alu_ms']:.3f} ms): {work.get('roofline_ms', 0):.3f} ms")
    for name, info in row.get("ptxas", {}).items():
        print(f"   ptxas sm_90a {name}: {info['registers']} registers x {info['threads']} "
              f"threads, spills {info['spill_store_bytes']}/{info['spill_load_bytes']} B")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="flat,ht")
    parser.add_argument("--variants",
                        default="xla,xla_bf16,flash,xla_rate0,flash_rate0,cudnn_rate0")
    parser.add_argument("--mask", default="keys", choices=("keys", "full", "none"))
    parser.add_argument("--target", default="h100")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--no-ptxas", dest="ptxas", action="store_false")
    args = parser.parse_args(argv)
    dump_dir = tempfile.mkdtemp(prefix="dropout_attention_hlo_") if args.ptxas else None
    if dump_dir:  # read by XLA when the backend starts: before gpu_compile's device
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_dump_to={dump_dir}").strip()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path[:0] = [p for p in (HERE, ROOT) if p not in sys.path]
    import gpu_compile

    sharding = gpu_compile.compile_only_device(args.target)
    import jax

    print(f"jax {jax.__version__}, target {args.target}, dropout {RATE}, mask {args.mask}")
    rows = []
    for shape_name in filter(None, args.shapes.split(",")):
        for variant in filter(None, args.variants.split(",")):
            try:
                row = measure(shape_name, variant, args.mask, sharding, args.target, dump_dir)
            except Exception as error:  # noqa: BLE001 (one variant's failure is its row)
                row = {"shape": shape_name, "dims_B_T_S_N_Dh": list(SHAPES[shape_name]),
                       "variant": variant, "mask": args.mask, "rate": RATE,
                       "error": f"{type(error).__name__}: {str(error)[:400]}"}
            rows.append(row)
            print_row(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"jax": jax.__version__, "target": args.target, "rows": rows}, handle,
                      indent=1)
    if dump_dir:
        shutil.rmtree(dump_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
