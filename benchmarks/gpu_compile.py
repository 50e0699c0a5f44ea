"""The train step as XLA compiles it for an H100, on a machine without a GPU (issue 57).

JAX can compile for a GPU it does not have: `jax.experimental.topologies`
makes a compile-only CUDA device from a `GpuTargetConfig` (the device's
compute capability, core count, memory bandwidth, cuDNN and CUDA versions),
and `jit(...).lower(...)` with inputs placed on it runs XLA's whole GPU
pipeline (fusion, layout assignment, cuBLAS / cuDNN / Triton rewrites,
scheduling) without autotuning (`--xla_gpu_autotune_level=0`; Triton gemm
off, whose tiling needs autotuning: every dot is a cuBLAS call). The
optimized HLO it prints is the program a GPU run executes, kernel by kernel,
up to the autotuned gemm choices. It needs jaxlib's CUDA plugin (no GPU, no
driver): `bash benchmarks/gpu_compile_env.sh` makes `.venv-gpu-compile`
with the project's JAX and Keras and `jax[cuda12]`.

What is read from the program (one `jax.jit` step, traced as on a GPU:
Keras' cuDNN attention checks, keras_hsum's blocked top-k and cuDNN LSTM
take their GPU paths, `as_on_gpu`):
- kernels: every instruction of the entry computation (and of loop bodies,
  times their trip count) that launches work: fusions, custom calls
  (cuBLAS, cuDNN, ...), copies, sorts; not parameters, tuples, bitcasts;
- each kernel's class, as `benchmarks/accelerator.py`'s profile names
  them: matmul (cuBLAS calls, fusions holding a dot), attention (cuDNN
  fused attention), reduction (fusions holding a reduce), copies (fusions
  and instructions that only move data: transpose, copy, pad, slice,
  concatenate, ...), elementwise (the rest);
- each kernel's bytes: its operands read and its outputs written (a fusion
  operand read only through a slice counts the slice; cuBLAS' workspace
  output is not counted), and its FLOPs (2·M·N·K of each gemm);
- a roofline time per kernel, max(bytes ÷ memory bandwidth, FLOPs ÷ dense
  bf16 peak): a lower bound of what the GPU spends on it (summed: the
  step's roofline). Measured steps run at a fraction of it, which
  `benchmarks/results/gpu_compile.md` gives for the runs of the first GPU
  measurement (the same code compiled here against the H200 step times);
- the largest kernels with the Keras op they come from (the HLO metadata),
  and the same by layer; cuDNN attention and RNN calls; XLA's temporary
  buffer size.

Tasks (`--tasks`, comma-separated): `train:<recipe>:<bf16|f32>[:CHANGES]`
as benchmarks/accelerator.py takes them (paper config, its batch; CHANGES
such as `attention_dropout=0` or `keras_dropout`), `anchor:xla` and
`anchor:flash` (6 keras-hub encoder layers at PHT's width, the issue's
anchor). `--target h100|h200`. `--checkout DIR` compiles another checkout's
keras_hsum and recipes (a `git worktree` of an older commit): the runs of the
GPU measurement are compared with the code they measured.

Results: benchmarks/results/gpu_compile.json and .md, keyed by
`--label` (default: the commit) and target.

Usage:
    bash benchmarks/gpu_compile_env.sh
    .venv-gpu-compile/bin/python benchmarks/gpu_compile.py --target h100 \\
        --tasks train:pht:bf16,anchor:xla [--label after] [--checkout DIR] [--top 12]
"""

import argparse
import collections
import contextlib
import datetime
import json
import math
import os
import re
import sys
import time

GPU_COMPILE_FLAGS = ("--xla_gpu_autotune_level=0", "--xla_gpu_enable_triton_gemm=false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
RESULTS = os.path.join(BENCHMARKS, "results")
STEM = "gpu_compile"

# 132 SMs × 128 FP32 lanes × 1.98 GHz: one elementwise operation per lane and
# cycle (an FMA counts once; 32-bit integer operations run at this rate or half).
ALU_RATE = 132 * 128 * 1.98e9
# The devices' figures as their data sheets give them (SXM parts); the
# fields are XLA's GpuDeviceInfoProto's.
TARGETS = {
    "h100": {"description": "NVIDIA H100 80GB HBM3", "memory_bandwidth": 3.35e12,
             "device_memory_size": 85520809984, "bf16_peak": 989.4e12, "alu_rate": ALU_RATE},
    "h200": {"description": "NVIDIA H200", "memory_bandwidth": 4.8e12,
             "device_memory_size": 150754820096, "bf16_peak": 989.4e12, "alu_rate": ALU_RATE},
}


def target_config(target):
    """The `GpuTargetConfig` text of a Hopper (sm_90, 132 SMs) with the
    target's memory: what XLA's GPU compiler reads of a device."""
    spec = TARGETS[target]
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(spec["memory_bandwidth"])}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {spec["device_memory_size"]}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{
    major: 9
    minor: 0
  }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{
  major: 9
  minor: 8
}}
runtime_version {{
  major: 12
  minor: 8
}}
device_description_str: "{spec["description"]}"
"""


def compile_only_device(target):
    """A `NamedSharding` on one compile-only CUDA device of `target`: place
    `jax.ShapeDtypeStruct`s on it and `lower(...).compile()` compiles for
    it. JAX's own devices stay the CPU's."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" not in sys.modules:  # XLA reads its flags once, when JAX starts
        os.environ["XLA_FLAGS"] = " ".join(filter(None, (flags, *GPU_COMPILE_FLAGS)))
    elif not all(flag in flags for flag in GPU_COMPILE_FLAGS):
        raise RuntimeError("compile_only_device needs XLA_FLAGS to hold "
                           f"{' '.join(GPU_COMPILE_FLAGS)} before JAX is imported.")
    import jax
    from jax.experimental import topologies

    jax.config.update("jax_platforms", "cpu")
    try:
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=target_config(target), topology="1x1x1")
    except Exception as error:  # noqa: BLE001
        raise SystemExit(
            "No compile-only CUDA device: this JAX lacks its CUDA plugin "
            f"({type(error).__name__}: {str(error)[:200]}). Run "
            "`bash benchmarks/gpu_compile_env.sh` and use .venv-gpu-compile/bin/python.")
    mesh = topologies.make_mesh(topo=topology, mesh_shape=(1,), axis_names=("x",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


@contextlib.contextmanager
def as_on_gpu():
    """Trace as on a GPU although JAX's devices are CPUs: Keras' cuDNN
    attention check passes (compute capability 9.0), keras_hsum's blocked
    top-k blocks, the discourse encoder takes cuDNN's LSTM where the
    plugin has it (`_jax_takes_cudnn`'s other conditions unchanged), and
    attention dropout takes the Pallas kernel (`dropout_attention.
    layer_implementation` "flash"; a train change `keras_attention_dropout`
    keeps Keras' written-out attention with its `Dropout`)."""
    import importlib

    import jax
    import jax._src.cudnn.fused_attention_stablehlo as fused

    def optional(module_name, attribute):
        """(module, attribute) where this checkout has them (older ones
        lack the blocked top-k, or keep it in beam_search), else None."""
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        return (module, attribute) if hasattr(module, attribute) else None

    switches = [(fused, "check_compute_capability")] + list(filter(None, (
        optional("keras_hsum.decoding.top_k", "_gpu_visible"),
        optional("keras_hsum.decoding.beam_search", "_gpu_visible"),
        optional("keras_hsum.layers.bidirectional_lstm_scan", "_jax_takes_cudnn"),
        optional("keras_hsum.layers.dropout_attention", "_layer_implementation"))))
    try:  # cuDNN's RNN asks a cuDNN handle (a GPU) for its buffer sizes
        from jaxlib import gpu_rnn

        if hasattr(gpu_rnn, "compute_rnn_workspace_reserve_space_sizes"):
            switches.append((gpu_rnn, "compute_rnn_workspace_reserve_space_sizes"))
    except ImportError:
        pass
    saved = [(module, name, getattr(module, name)) for module, name in switches]
    for module, name, original in saved:
        if name == "compute_rnn_workspace_reserve_space_sizes":
            replacement = rnn_buffer_sizes
        elif name == "check_compute_capability":
            replacement = lambda *args, **kwargs: True  # noqa: E731
        elif name == "_gpu_visible":
            replacement = lambda: True  # noqa: E731
        elif name == "_layer_implementation":  # the Pallas kernel, as on a GPU
            replacement = "flash" if original is None else original
        else:
            def replacement(bidirectional, original=original):
                backend = jax.default_backend
                jax.default_backend = lambda: "gpu"
                try:
                    return original(bidirectional)
                finally:
                    jax.default_backend = backend
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def rnn_buffer_sizes(input_size, hidden_size, num_layers, batch_size, max_seq_length,
                     dropout, bidirectional, cudnn_allow_tf32):
    """(workspace, reserve space) float32 elements of a cuDNN LSTM, as
    `as_on_gpu` states them without a GPU: cuDNN keeps for the backward
    pass each step's four gates, cell and hidden state (6·hidden per row,
    layer and direction); its workspace is taken as one step's gates
    (what cuDNN asks is not known without a device: the bytes of the RNN
    calls are approximate)."""
    directions = 2 if bidirectional else 1
    rows = batch_size * max_seq_length * num_layers * directions
    return 4 * hidden_size * batch_size * directions, 6 * hidden_size * rows


# ---------------------------------------------------------------------------
# Reading the optimized HLO.

_BYTES = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2,
          "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1}
_ARRAY = re.compile(r"\b(" + "|".join(sorted(_BYTES, key=len, reverse=True))
                    + r")\[([0-9,]*)\]")
_FREE = frozenset({"parameter", "get-tuple-element", "tuple", "constant", "bitcast",
                   "after-all", "opt-barrier", "partition-id", "replica-id", "add-dependency"})
_MOVES = frozenset({"parameter", "constant", "bitcast", "transpose", "copy", "reshape",
                    "broadcast", "slice", "dynamic-slice", "dynamic-update-slice",
                    "concatenate", "pad", "tuple", "get-tuple-element", "iota", "reverse"})
_SLICES = frozenset({"slice", "dynamic-slice"})
_WORKSPACE = re.compile(r",?\s*s8\[\d+\]\{0\}")


def array_bytes(shape):
    """Bytes of every array in an HLO shape text (tuples summed)."""
    return sum(_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
               for dtype, dims in _ARRAY.findall(shape))


def _dims(shape):
    match = re.search(r"\[([0-9,]*)\]", shape)
    return [] if match is None else [int(d) for d in match.group(1).split(",") if d]


def _called(instruction, key):
    match = re.search(key + r"=%([^\s,}]+)", instruction["attributes"])
    return match.group(1) if match else None


def _op_name(instruction):
    match = re.search(r'op_name="([^"]+)"', instruction["attributes"])
    return match.group(1) if match else ""


def _gemm_flops(instruction, shapes):
    """2·(output elements)·K of a cuBLAS gemm custom call (0 if unreadable)."""
    output = _dims(_WORKSPACE.sub("", instruction["shape"]))
    lhs = _dims(shapes.get(instruction["operands"][0], "")) if instruction["operands"] else []
    contracting = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]',
                            instruction["attributes"])
    if not (output and lhs and contracting):
        return 0
    k = math.prod(lhs[int(d.strip('" '))] for d in contracting.group(1).split(",") if d.strip())
    return 2 * math.prod(output) * k


def _fused_dot_flops(body, shapes):
    flops = 0
    for instruction in body:
        if instruction["opcode"] != "dot":
            continue
        lhs = _dims(shapes.get(instruction["operands"][0], ""))
        contracting = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", instruction["attributes"])
        if lhs and contracting:
            k = math.prod(lhs[int(d)] for d in contracting.group(1).split(",") if d)
            flops += 2 * math.prod(_dims(instruction["shape"])) * k
    return flops


# Elementwise work a fusion does per output element of each fused
# instruction: 1 for arithmetic, comparisons, selects and bit operations,
# more for what the GPU's special-function units or several instructions
# compute (XLA's GPU cost model weighs them likewise).
_ALU_COST = {"exponential": 4, "log": 4, "log-plus-one": 4, "exponential-minus-one": 4,
             "tanh": 4, "logistic": 4, "rsqrt": 2, "sqrt": 2, "divide": 4, "power": 8,
             "sine": 4, "cosine": 4, "erf": 8, "atan2": 8, "cbrt": 4}
_NO_ALU = _MOVES | {"reduce", "reduce-window", "dot", "convolution", "scatter", "gather",
                    "sort", "custom-call", "fusion", "call", "while", "rng-bit-generator",
                    "opt-barrier"}


def _alu_ops(body):
    """Elementwise operations of a fused computation (each instruction's
    output elements × its `_ALU_COST`, 1 by default), reductions' adds
    included (one per input element)."""
    total = 0
    for instruction in body:
        opcode = instruction["opcode"]
        elements = math.prod(_dims(instruction["shape"]) or [1])
        if opcode in ("reduce", "reduce-window"):
            total += math.prod(_dims(instruction.get("input_shape", "")) or [0]) or elements
        elif opcode not in _NO_ALU:
            total += elements * _ALU_COST.get(opcode, 1)
    return total


# ---------------------------------------------------------------------------
# The work inside Pallas (Triton) kernels, which the HLO does not show: a
# `__gpu$xla.gpu.triton` custom call is opaque there. Counted from the step's
# jaxpr, each `pallas_call`'s kernel body times its grid.

# Elementwise operations that do no arithmetic in a kernel.
_KERNEL_FREE = frozenset({"masked_load", "masked_swap", "load", "swap", "get", "broadcast_in_dim",
                   "reshape", "squeeze", "expand_dims", "program_id", "num_programs", "iota",
                   "convert_element_type", "copy", "multiple_of", "max_contiguous"})
_KERNEL_COST = {"exp": 4, "exp2": 4, "log": 4, "div": 4, "rsqrt": 2, "sqrt": 2, "tanh": 4,
         "logistic": 4, "pow": 8}


def _elements(aval):
    return math.prod(getattr(aval, "shape", ()) or (1,))


def kernel_work(jaxpr, multiplier=1):
    """(dot FLOPs, elementwise operations) of a kernel jaxpr run
    `multiplier` times: scans times their length, `jit`s and `cond`s
    inlined (a cond's costlier branch), reductions one per input element."""
    flops = ops = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        params = eqn.params
        if name == "scan":
            inner = kernel_work(params["jaxpr"].jaxpr, multiplier * params["length"])
        elif name in ("jit", "pjit", "closed_call", "core_call"):
            inner = kernel_work(params["jaxpr"].jaxpr if hasattr(params["jaxpr"], "jaxpr")
                                else params["jaxpr"], multiplier)
        elif name == "cond":
            inner = max((kernel_work(branch.jaxpr, multiplier)
                         for branch in params["branches"]), key=lambda w: w[0] + w[1])
        elif name == "while":
            raise ValueError("a while loop in a kernel: trip count unknown")
        else:
            inner = None
        if inner is not None:
            flops += inner[0]
            ops += inner[1]
            continue
        if name == "dot_general":
            (contracting, _), _ = params["dimension_numbers"]
            k = math.prod(eqn.invars[0].aval.shape[d] for d in contracting)
            flops += multiplier * 2 * _elements(eqn.outvars[0].aval) * k
            continue
        if name in _KERNEL_FREE:
            continue
        if name.startswith("reduce_") or name in ("argmax", "argmin"):
            ops += multiplier * _elements(eqn.invars[0].aval)
            continue
        aval = eqn.outvars[0].aval
        integer = str(getattr(aval, "dtype", "")).startswith(("int", "uint"))
        weight = _KERNEL_COST.get(name, 1) * (2 if integer else 1)
        ops += multiplier * _elements(aval) * weight
    return flops, ops


def _pallas_equations(jaxpr):
    """Every `pallas_call` equation of a jaxpr, nested jaxprs included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    yield from _pallas_equations(inner)
                elif hasattr(item, "eqns"):
                    yield from _pallas_equations(item)


def _pallas_name(eqn):
    name = eqn.params.get("name_and_src_info", eqn.params.get("name"))
    return getattr(name, "name", name)


def pallas_calls(jaxpr):
    """[(name, grid, kernel jaxpr)] of every `pallas_call` in a jaxpr."""
    return [(_pallas_name(eqn), tuple(eqn.params["grid_mapping"].grid), eqn.params["jaxpr"])
            for eqn in _pallas_equations(jaxpr)]


_HLO_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
               "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8",
               "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "pred"}


def _aval_text(aval):
    return f"{_HLO_DTYPES.get(str(aval.dtype), str(aval.dtype))}[{','.join(map(str, aval.shape))}]"


def pallas_signature(name, operand_texts):
    """How a Pallas kernel call is known in both the jaxpr and the HLO: its
    name and its operands' dtypes and shapes ("bf16[16,3000,8,64]", ...)."""
    return f"{name}({', '.join(operand_texts)})"


def pallas_work(jaxpr):
    """{`pallas_signature`: [dot FLOPs, elementwise operations]} per call of
    each distinct Pallas kernel call in a (closed) jaxpr's `jaxpr`."""
    work = {}
    for eqn in _pallas_equations(jaxpr):
        grid = tuple(eqn.params["grid_mapping"].grid)
        key = pallas_signature(_pallas_name(eqn), [_aval_text(v.aval) for v in eqn.invars])
        work[key] = list(kernel_work(eqn.params["jaxpr"], math.prod(grid)))
    return work


def _triton_signature(instruction):
    """`pallas_signature` of a `__gpu$xla.gpu.triton` custom call (its
    `name = "..."` and operand_layout_constraints), or None."""
    attributes = instruction["attributes"]
    name = re.search(r'name = \\?"(\w+)\\?"', attributes)
    operands = re.search(r"operand_layout_constraints=\{((?:[^{}]|\{[^}]*\})*)\}", attributes)
    if not name or not operands:
        return None
    texts = re.findall(r"(\w+\[[0-9,]*\])(?:\{[^}]*\})?", operands.group(1))
    return pallas_signature(name.group(1), texts)


def kernels(hlo_text, tokens=None, pallas=None):
    """The kernels of an optimized GPU HLO text, each a dict: `name`,
    `kind` (fusion kind or custom-call target or opcode), `class`,
    `calls` (per program run: loop bodies × their known trip count; a loop
    whose trip count XLA does not know runs `tokens` ÷ (the iterations of
    the known loops inside it) times when `tokens` is given (a decode loop
    produces `tokens` positions in all), once otherwise; each such iteration
    reads its condition back to the host: `host_reads`),
    `bytes` and `flops` per call, `shape`, `op` (the Keras op it comes
    from: the metadata of the fusion's root, else its own). A Triton
    custom call (a Pallas kernel) gets the FLOPs and elementwise operations
    `pallas` (`pallas_work` of the program's jaxpr) gives its
    `pallas_signature`, class "attention" where its name says attention
    (else "other"); without them, only its operands' and outputs' bytes."""
    from decode_loop_hlo import parse_hlo

    computations = parse_hlo(hlo_text)
    shapes = {i["name"]: i["shape"] for body in computations.values() for i in body}
    entry = re.search(r"^ENTRY\s+%(\S+)", hlo_text, re.M).group(1)
    # HLO names are unique in a module: parameter name -> its index.
    index = {name: int(i) for name, i in re.findall(
        r"%([^\s=]+) = [^=]*? parameter\((\d+)\)", hlo_text)}
    found = []

    def fusion_bytes(instruction, body):
        """(read, written) bytes of a fusion: each operand whole, or only
        the slices its fused computation takes of it; a buffer it updates
        in place (operand 0 of a dynamic-update-slice, an output aliased
        to it) neither read nor written whole: the update is written."""
        parameters = {index[inner["name"]]: inner for inner in body if inner["name"] in index}
        by_name = {inner["name"]: inner for inner in body}
        users = collections.defaultdict(list)
        for inner in body:
            for operand in inner["operands"]:
                users[operand].append(inner)
        read = 0
        for position, operand in enumerate(instruction["operands"]):
            whole = array_bytes(shapes.get(operand, ""))
            param = parameters.get(position)
            uses = users.get(param["name"], []) if param else []
            if uses and all(use["opcode"] in _SLICES for use in uses):
                read += min(whole, sum(array_bytes(use["shape"]) for use in uses))
            elif uses and all(use["opcode"] == "dynamic-update-slice"
                              and use["operands"][0] == param["name"] for use in uses):
                continue
            else:
                read += whole
        root = body[-1] if body else None  # printed last
        outputs = [by_name.get(o) for o in root["operands"]] if root and root[
            "opcode"] == "tuple" else [root]
        written = 0
        for output in outputs:
            if output is None:
                continue
            if output["opcode"] == "dynamic-update-slice" and len(output["operands"]) > 1:
                written += array_bytes(shapes.get(output["operands"][1], ""))
            else:
                written += array_bytes(output["shape"])
        return read, written

    def classify(instruction):
        opcode = instruction["opcode"]
        if opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', instruction["attributes"])
            target = target.group(1) if target else "custom-call"
            if "fmha" in target:
                return target, "attention", 0
            if "cublas" in target or "gemm" in target:
                return target, "matmul", _gemm_flops(instruction, shapes)
            if "rnn" in target.lower():
                return target, "matmul", 0
            if target == "__gpu$xla.gpu.triton":
                signature = _triton_signature(instruction) or ""
                return target, "attention" if "attention" in signature.split("(")[0] else (
                    "other"), (pallas or {}).get(signature, (0, 0))[0]
            return target, "other", 0
        if opcode == "fusion":
            kind = re.search(r"kind=(\w+)", instruction["attributes"])
            backend = re.search(r'"kind":"([^"]+)"', instruction["attributes"])
            kind = "fusion:" + (kind.group(1) if kind else "?") + (
                ":" + backend.group(1) if backend else "")
            body = computations.get(_called(instruction, "calls"), [])
            opcodes = {inner["opcode"] for inner in body}
            if "dot" in opcodes or "convolution" in opcodes:
                return kind, "matmul", _fused_dot_flops(body, shapes)
            if opcodes & {"reduce", "reduce-window", "scatter"}:
                return kind, "reduction", 0
            if opcodes <= _MOVES:
                return kind, "copies", 0
            return kind, "elementwise", 0
        if opcode in ("copy", "transpose", "copy-start", "copy-done", "pad", "slice",
                      "concatenate", "dynamic-slice", "dynamic-update-slice", "gather"):
            return opcode, "copies", 0
        if opcode in ("sort", "reduce"):
            return opcode, "reduction", 0
        if opcode in ("dot", "convolution"):
            return opcode, "matmul", _fused_dot_flops([instruction], shapes)
        return opcode, "other", 0

    def walk(name, calls, seen):
        if (name, calls) in seen:
            return
        seen.add((name, calls))
        for instruction in computations.get(name, []):
            opcode = instruction["opcode"]
            if opcode in _FREE:
                continue
            if opcode == "while":
                body = _called(instruction, "body")
                walk(body, calls * _trips(instruction, body, computations, tokens), seen)
                continue
            if opcode in ("call", "conditional", "async-start"):
                for key in ("to_apply", "calls", "branch_computations"):
                    for called in re.findall(key + r"=\{?%([^\s,}]+)", instruction["attributes"]):
                        walk(called, calls, seen)
                continue
            if opcode in ("async-done", "async-update"):
                continue
            kind, cls, flops = classify(instruction)
            output = instruction["shape"]
            if opcode == "custom-call":
                output = _WORKSPACE.sub("", output)
            written = array_bytes(output)
            if opcode == "fusion":
                body = computations.get(_called(instruction, "calls"), [])
                read, written = fusion_bytes(instruction, body)
                ops = [_op_name(inner) for inner in body if _op_name(inner)]
                op = ops[-1] if ops else _op_name(instruction)
            elif opcode == "dynamic-update-slice" and len(instruction["operands"]) > 1:
                read = written = array_bytes(shapes.get(instruction["operands"][1], ""))
                op = _op_name(instruction)
            else:
                read = sum(array_bytes(shapes.get(o, "")) for o in dict.fromkeys(
                    instruction["operands"]))
                op = _op_name(instruction)
            alu = 0
            if kind == "__gpu$xla.gpu.triton":
                alu = (pallas or {}).get(_triton_signature(instruction) or "", (0, 0))[1]
            if opcode == "fusion" and cls != "matmul":
                body = computations.get(_called(instruction, "calls"), [])
                for inner in body:
                    if inner["opcode"] in ("reduce", "reduce-window") and inner["operands"]:
                        inner["input_shape"] = shapes.get(inner["operands"][0], "")
                alu = _alu_ops(body)
            found.append({"name": instruction["name"], "kind": kind, "class": cls,
                          "calls": calls, "bytes": read + written,
                          "flops": flops, "alu_ops": alu, "shape": output[:120], "op": op})

    walk(entry, 1, set())
    return found


def host_reads(hlo_text, tokens=None):
    """Iterations, per program run, of the loops whose trip count XLA does
    not know (each ends with a device-to-host read of its condition), as
    `kernels` counts them."""
    from decode_loop_hlo import parse_hlo

    computations = parse_hlo(hlo_text)
    entry = re.search(r"^ENTRY\s+%(\S+)", hlo_text, re.M).group(1)
    reads = 0

    def walk(name, calls):
        nonlocal reads
        for instruction in computations.get(name, []):
            if instruction["opcode"] == "while":
                body = _called(instruction, "body")
                trips = _trips(instruction, body, computations, tokens)
                if not re.search(r'"known_trip_count"', instruction["attributes"]):
                    reads += calls * trips
                walk(body, calls * trips)
            elif instruction["opcode"] in ("call", "conditional"):
                for key in ("to_apply", "calls", "branch_computations"):
                    for called in re.findall(key + r"=\{?%([^\s,}]+)", instruction["attributes"]):
                        walk(called, calls)

    walk(entry, 1)
    return reads


def _inner_trips(body, computations):
    """Iterations of the known-trip-count loops nested in `body` (the
    longest chain), 1 without any."""
    best = 1
    for instruction in computations.get(body, []):
        if instruction["opcode"] == "while":
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', instruction["attributes"])
            inner = _inner_trips(_called(instruction, "body"), computations)
            best = max(best, (int(trip.group(1)) if trip else 1) * inner)
    return best


def _trips(instruction, body, computations, tokens):
    trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', instruction["attributes"])
    if trip:
        return int(trip.group(1))
    if tokens:
        return max(1, -(-tokens // _inner_trips(body, computations)))
    return 1


CLASSES = ("matmul", "attention", "elementwise", "reduction", "copies", "other")


def roofline_s(kernel, target):
    """The kernel's time at the device's limits: memory bandwidth for its
    bytes, the dense bf16 tensor-core peak for its gemm FLOPs, the CUDA
    cores' rate for its elementwise operations; whichever binds."""
    spec = TARGETS[target]
    return max(kernel["bytes"] / spec["memory_bandwidth"], kernel["flops"] / spec["bf16_peak"],
               kernel.get("alu_ops", 0) / spec["alu_rate"])


def layer_of(op):
    """The model layer a Keras op name comes from: the innermost name under
    `jvp(...)` or `transpose(jvp(...))` (numbered layers as `name_N`)."""
    names = re.findall(r"jvp\(([\w\-]+)\)", op)
    if not names:
        parts = [p for p in op.split("/")[1:] if p]
        name = parts[0] if parts else op or "?"
    else:
        name = names[-1]
    rest = op.split(f"jvp({name})", 1)[-1].strip(")/").split("/")
    part = rest[0] if rest and rest[0] and not rest[0].startswith(("jit(", "transpose")) else ""
    name = re.sub(r"_\d+$", "_N", name)
    return f"{name}/{part}" if part else name


def summary(found, target, top=12):
    """Totals by class and by layer, and the `top` costliest kernels."""
    by_class = {cls: {"kernels": 0, "gb": 0.0, "roofline_ms": 0.0} for cls in CLASSES}
    by_layer = collections.defaultdict(lambda: {"kernels": 0, "gb": 0.0, "roofline_ms": 0.0})
    total = {"kernels": 0, "gb": 0.0, "tflop": 0.0, "roofline_ms": 0.0}
    for kernel in found:
        seconds = roofline_s(kernel, target) * kernel["calls"]
        for bucket in (by_class[kernel["class"]], by_layer[layer_of(kernel["op"])], total):
            bucket["kernels"] += kernel["calls"]
            bucket["gb"] += kernel["bytes"] * kernel["calls"] / 1e9
            bucket["roofline_ms"] += 1e3 * seconds
        total["tflop"] += kernel["flops"] * kernel["calls"] / 1e12
    costly = sorted(found, key=lambda k: -roofline_s(k, target) * k["calls"])[:top]
    layers = sorted(by_layer.items(), key=lambda item: -item[1]["roofline_ms"])[:top]
    total["matmul_bound_ms"] = 1e3 * total["tflop"] * 1e12 / TARGETS[target]["bf16_peak"]
    return {"total": total, "by_class": by_class,
            "by_layer": [{"layer": name, **values} for name, values in layers],
            "top": [{"roofline_ms": 1e3 * roofline_s(k, target) * k["calls"],
                     "mb": k["bytes"] * k["calls"] / 1e6, "class": k["class"],
                     "kind": k["kind"], "calls": k["calls"], "shape": k["shape"],
                     "op": k["op"][-140:]} for k in costly]}


# ---------------------------------------------------------------------------
# Tasks.


def _specs(tree, sharding):
    import jax
    import numpy as np

    return jax.tree.map(
        lambda v: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype if not hasattr(
            v, "dtype") else v.dtype, sharding=sharding), tree)


def compile_train(task, sharding):
    """(compiled, row) of `train:<recipe>:<bf16|f32>[:CHANGES]` at the
    paper batch (seal capped as benchmarks/accelerator.py caps it)."""
    import accelerator
    import recipe_steps

    parts = task.split(":")
    name, precision = parts[1], parts[2] if len(parts) > 2 else "bf16"
    changes = ":".join(parts[3:])
    module, config = accelerator.recipe_config(name, False, changes)
    batch = min(config.batch_size, accelerator.BATCH_CAP.get(name, config.batch_size))
    policy = "mixed_bfloat16" if precision == "bf16" else "float32"
    with as_on_gpu():
        model = recipe_steps.build(module, name, config, policy)
        step = recipe_steps.TrainStep(module, config, model, policy)
        state = _specs(([v.value for v in model.trainable_variables],
                        [v.value for v in model.non_trainable_variables],
                        [v.value for v in step.optimizer.variables]), sharding)
        x, y, w = _specs(recipe_steps.synthetic_batch(name, config, batch), sharding)
        # Switches such as keras_dropout; older checkouts lack packed_dropout
        # and dropout_attention (and these switches).
        flags = getattr(accelerator, "FLAG_CHANGES", (accelerator.KERAS_DROPOUT,))
        draws = (accelerator.dropout_draws(changes)
                 if set(flags) & set(changes.split("+")) else contextlib.nullcontext())
        with draws:
            lowered = step.lower(state, x, y, w)
        compiled = lowered.compile()
        work = None
        if "__gpu$xla.gpu.triton" in compiled.as_text():  # Pallas kernels: their work
            with draws:
                work = pallas_work(step.jaxpr(state, x, y, w).jaxpr)
    flops = accelerator.project_flops_per_example().get(name)
    row = {"task": task, "recipe": name, "precision": precision, "changes": changes,
           "batch": batch, "parameters": int(model.count_params()),
           "project_flops_per_step": flops[0] * batch if flops else None}
    if work:
        row["pallas_work"] = work
    return compiled, row


def compile_anchor(task, sharding):
    import accelerator

    variant = task.split(":")[1]
    _, config = accelerator.recipe_config("pht", False)
    with as_on_gpu():
        step, state, x, row = accelerator.anchor_program(
            variant, config, config.batch_size, accelerator.ANCHOR_LAYERS)
        compiled = step.lower(_specs(state, sharding), _specs(x, sharding)).compile()
    row["project_flops_per_step"] = row.pop("flops_per_step")
    return compiled, row


def compile_decode(task, sharding):
    """(compiled, row) of `decode:<model>:<method>:<batch>`: benchmarks/
    accelerator.py's paper-size decode (beam 5, 200 positions, float32)
    by `method` (ours, static, keras-hub or floor) at `batch`."""
    import accelerator

    parts = task.split(":")
    if len(parts) != 4:
        raise SystemExit(f"decode task {task!r}: expected decode:<model>:<method>:<batch>, "
                         "method one of ours, static, keras-hub, floor")
    name, method, batch = parts[1], parts[2], int(parts[3])
    builders = {"ours": accelerator.ours, "static": accelerator.ours_static,
                "keras-hub": accelerator.keras_hub_beam, "floor": accelerator.floor}
    label, model, inputs = _decode_inputs(accelerator, name, batch)  # runs it: on the CPU
    with as_on_gpu():
        function = accelerator.stateless_jit(model, builders[method](model, accelerator.LENGTH))
        values = _specs([v.value for v in model.variables], sharding)
        compiled = function.lower(values, _specs(inputs, sharding)).compile()
    row = {"task": task, "model": label, "method": method, "batch": batch,
           "beams": accelerator.BEAMS, "tokens": accelerator.LENGTH}
    return compiled, row


def _decode_inputs(accelerator, name, batch):
    """(label, model, inputs of `batch`) of benchmarks/decode.py's paper
    model `name`, built once per model."""
    import decode

    if name not in _DECODE_MODELS:
        size = next(s for s in decode.PAPER_SIZES if s[1] == name)
        label, recipe, changes, paragraphs, tokens, vocabulary = size
        model, _, vocabulary = decode.paper_model(recipe, changes, vocabulary)
        _DECODE_MODELS[name] = (label, model, vocabulary, paragraphs, tokens)
    label, model, vocabulary, paragraphs, tokens = _DECODE_MODELS[name]
    return label, model, decode.paper_inputs(vocabulary, paragraphs, tokens, batch=batch)


_DECODE_MODELS = {}


def run_task(task, target, sharding, top, hlo_dir=None):
    started = time.perf_counter()
    kind = task.split(":")[0]
    if kind == "train":
        compiled, row = compile_train(task, sharding)
    elif kind == "anchor":
        compiled, row = compile_anchor(task, sharding)
    elif kind == "decode":
        compiled, row = compile_decode(task, sharding)
    else:
        raise SystemExit(f"unknown task {task!r}: expected train:<recipe>:<bf16|f32>[:CHANGES], "
                         "anchor:xla|anchor:flash or decode:<model>:<method>:<batch>")
    text = compiled.as_text()
    row["compile_s"] = round(time.perf_counter() - started, 1)
    stats = compiled.memory_analysis()
    row["temp_gib"] = stats.temp_size_in_bytes / 2**30 if stats else None
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        path = os.path.join(hlo_dir, re.sub(r"[^\w.=-]+", "_", task) + f".{target}.hlo.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        row["hlo_file"] = path
    row["cudnn_attention_calls"] = len(re.findall(r'custom_call_target="__cudnn\$fmha', text))
    row["cudnn_rnn_calls"] = len(re.findall(r'custom_call_target="[^"]*[Rr]nn', text))
    return analysed(row, text, target, top)


def analysed(row, text, target, top):
    """`row` with the program's figures (`summary`) added (a decode row's
    loops of unknown trip count make `row["tokens"]` positions)."""
    tokens = row.get("tokens")
    row["cudnn_attention_calls"] = len(re.findall(r'custom_call_target="__cudnn\$fmha', text))
    row["cudnn_rnn_calls"] = len(re.findall(r'custom_call_target="[^"]*[Rr]nn', text))
    row["host_reads"] = host_reads(text, tokens)
    found = kernels(text, tokens, row.get("pallas_work"))
    triton = [k for k in found if k["kind"] == "__gpu$xla.gpu.triton"]
    row["pallas_calls"] = sum(k["calls"] for k in triton)
    row["pallas_calls_without_work"] = sum(k["calls"] for k in triton if not k["flops"])
    row.update(summary(found, target, top))
    if tokens:
        loop_kernels = [k for k in found if k["calls"] >= tokens - 1]  # once per position
        row["kernels_per_token"] = sum(k["calls"] for k in loop_kernels) / tokens
        row["top_k_rows"] = sorted({
            f"{k['kind'].split(':')[-1]} {re.sub(r'[{][^}]*[}]', '', k['shape'])[:50]}"
            for k in loop_kernels if "top_k" in k["op"] or "topk" in k["kind"].lower()
            or k["kind"] == "sort"})
    flops = row.get("project_flops_per_step")
    if flops:
        row["mfu_at_roofline_pct"] = 100 * flops / (
            row["total"]["roofline_ms"] / 1e3) / TARGETS[target]["bf16_peak"]
    return row


def git_commit(path):
    import subprocess

    try:
        commit = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "keras_hsum",
                                "recipes"], capture_output=True, text=True).stdout.strip()
        return commit + (" + uncommitted changes" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


# ---------------------------------------------------------------------------
# Results.


def _fmt(value, spec=".2f"):
    return "—" if value is None else format(value, spec)


def markdown(stored):
    lines = ["# The train step as XLA compiles it for a GPU, without one (issue 57)", "",
             "Written by `benchmarks/gpu_compile.py` (its docstring has the method): "
             "XLA's GPU compiler run for a compile-only H100 or H200 on this CPU machine; "
             "kernels, bytes and a roofline (each kernel at the memory bandwidth or the "
             "dense bf16 peak, whichever binds) read off the optimized program. "
             "A roofline is a lower bound, not a measurement.", ""]
    calibration = stored.get("_calibration")
    if calibration:
        lines += ["**Predicted step.** predicted ms = "
                  f"{calibration['roofline_factor']:.3f} × roofline ms + "
                  f"{1e3 * calibration['per_kernel_ms']:.2f} µs × kernels: least squares "
                  "(relative errors) over the steps measured on "
                  f"{calibration['device']} ({calibration['measured']}) against the same "
                  f"code compiled here (run \"{calibration['run']}\"). Its points:", "",
                  "| task | measured ms | predicted ms | predicted ÷ measured | roofline ms "
                  "| kernels |", "|---|---|---|---|---|---|"]
        for point in calibration["points"]:
            lines.append(f"| {point['task']} | {point['measured_ms']:.1f} | "
                         f"{point['predicted_ms']:.1f} | "
                         f"{point['predicted_ms'] / point['measured_ms']:.2f} | "
                         f"{point['roofline_ms']:.2f} | {point['kernels']} |")
        lines.append("")
    if stored.get("_notes"):
        lines += [stored["_notes"], ""]
    for key, run in stored.items():
        if key.startswith("_"):
            continue
        lines += [f"## {key}", "", f"{run['date']}, {run['code']}, jax {run['jax']}, "
                  f"keras {run['keras']}; target {run['target']} "
                  f"({TARGETS[run['target']]['memory_bandwidth'] / 1e12:.2f} TB/s, "
                  f"{TARGETS[run['target']]['bf16_peak'] / 1e12:.0f} TFLOP/s bf16).", ""]
        decodes = [row for row in run["rows"] if row.get("tokens") and "error" not in row]
        if decodes:
            lines += ["| decode | kernels per token | kernels | host reads | GB moved | roofline ms "
                      "| top-k kernels (outputs) |", "|---|---|---|---|---|---|---|"]
            for row in decodes:
                t = row["total"]
                lines.append(
                    f"| {row['task']} | {row.get('kernels_per_token', 0):.0f} | {t['kernels']} | "
                    f"{row['host_reads']} | {t['gb']:.1f} | {t['roofline_ms']:.2f} | "
                    f"{'; '.join(row.get('top_k_rows') or []) or '—'} |")
            lines.append("")
            if len(decodes) == len(run["rows"]):
                continue
        lines += ["| task | batch | kernels | GB moved | TFLOP | roofline ms | of which matmul "
                  "| elementwise | reduction | copies | attention | MFU at roofline | predicted "
                  "ms | cuDNN attention calls | temp GiB |", "|---" * 15 + "|"]
        for row in run["rows"]:
            if row.get("tokens") and "error" not in row:
                continue
            if "error" in row:
                lines.append(f"| {row['task']} | error: {row['error'][:200]} |" + " |" * 13)
                continue
            t, c = row["total"], row["by_class"]
            lines.append(
                f"| {row['task']} | {row['batch']} | {t['kernels']} | {t['gb']:.1f} | "
                f"{t['tflop']:.2f} | {t['roofline_ms']:.2f} | {c['matmul']['roofline_ms']:.2f} | "
                f"{c['elementwise']['roofline_ms']:.2f} | {c['reduction']['roofline_ms']:.2f} | "
                f"{c['copies']['roofline_ms']:.2f} | {c['attention']['roofline_ms']:.2f} | "
                f"{_fmt(row.get('mfu_at_roofline_pct'), '.1f')}% | "
                f"{_fmt(predicted_ms(row, calibration), '.1f')} | "
                f"{row['cudnn_attention_calls']} | {_fmt(row.get('temp_gib'))} |")
        for row in run["rows"]:
            if "error" in row or not run.get("details", True):
                continue
            lines += ["", f"**{row['task']}**: by layer (roofline ms, GB, kernels): " + "; ".join(
                f"{layer['layer']} {layer['roofline_ms']:.2f} / {layer['gb']:.1f} / "
                f"{layer['kernels']}" for layer in row["by_layer"][:8]), "",
                "| roofline ms | MB | class | kernel | output | Keras op |", "|---|---|---|---|---|---|"]
            for kernel in row["top"]:
                shape = kernel["shape"].replace("|", "/")[:60]
                lines.append(f"| {kernel['roofline_ms']:.3f} | {kernel['mb']:.0f} | "
                             f"{kernel['class']} | {kernel['kind']} | `{shape}` | "
                             f"`{kernel['op'][-90:]}` |")
        lines.append("")
    return "\n".join(lines)


def write_results(folder, key, result):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STEM + ".json")
    try:
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        stored = {}
    stored[key] = result
    save(folder, stored)


def measured_steps(path, device_kind):
    """{task: step ms} of the device runs of `device_kind` in a
    benchmarks/accelerator.py results file."""
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    steps = {}
    for run in stored.values():
        if isinstance(run, dict) and run.get("device", {}).get("device_kind") == device_kind:
            for row in run.get("rows", []):
                if row.get("step_ms") and row.get("task", "").startswith(("train:", "anchor:")):
                    steps[row["task"]] = row["step_ms"]
    return steps


def fit(folder, key, accelerator_json, device_kind):
    """Fits step ms ≈ a·(roofline ms) + c·kernels to the measured steps of
    `device_kind` (accelerator.json) and the programs of run `key` (the
    code that was measured, compiled for that device): least squares on
    relative errors. Stored as `_calibration`; the markdown then gives each
    row's predicted ms."""
    import numpy as np

    path = os.path.join(folder, STEM + ".json")
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    measured = measured_steps(accelerator_json, device_kind)
    pairs = [(row, measured[row["task"]]) for row in stored[key]["rows"]
             if "error" not in row and row["task"] in measured]
    if len(pairs) < 3:
        raise SystemExit(f"{len(pairs)} tasks of {key!r} have a measured step of {device_kind}; "
                         "a fit needs 3 or more.")
    design = np.array([[r["total"]["roofline_ms"], r["total"]["kernels"]] for r, _ in pairs])
    steps = np.array([m for _, m in pairs])
    (a, c), *_ = np.linalg.lstsq(design / steps[:, None], np.ones(len(steps)), rcond=None)
    points = [{"task": r["task"], "measured_ms": m, "roofline_ms": r["total"]["roofline_ms"],
               "kernels": r["total"]["kernels"], "predicted_ms": a * x[0] + c * x[1]}
              for (r, m), x in zip(pairs, design)]
    stored["_calibration"] = {
        "roofline_factor": float(a), "per_kernel_ms": float(c), "run": key,
        "device": device_kind, "measured": os.path.relpath(accelerator_json, ROOT),
        "points": points}
    save(folder, stored)
    for point in points:
        print(f"{point['task']:40s} measured {point['measured_ms']:7.1f} ms, predicted "
              f"{point['predicted_ms']:7.1f} ({point['predicted_ms'] / point['measured_ms']:.2f}x)")
    print(f"step ms ≈ {a:.3f} × roofline ms + {1e3 * c:.2f} µs × kernels")


def predicted_ms(row, calibration):
    """The fitted train-step prediction (None for decode rows: a decode's
    time goes to latency-bound kernels, a top-k over one block per row, that
    neither bytes nor kernel counts price)."""
    if not calibration or "total" not in row or row.get("tokens"):
        return None
    return (calibration["roofline_factor"] * row["total"]["roofline_ms"]
            + calibration["per_kernel_ms"] * row["total"]["kernels"])


def reanalyse(folder, top):
    """Reads the programs of `folder`'s stored rows again (their
    `hlo_file`s, where still there) and rewrites the results."""
    path = os.path.join(folder, STEM + ".json")
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    for key, run in stored.items():
        for row in run.get("rows", []) if not key.startswith("_") else []:
            if row.get("hlo_file") and os.path.exists(row["hlo_file"]):
                with open(row["hlo_file"], encoding="utf-8") as handle:
                    analysed(row, handle.read(), run["target"], top)
    save(folder, stored)


def save(folder, stored):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STEM + ".json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(stored, handle, indent=1)
    os.replace(path + ".tmp", path)
    with open(os.path.join(folder, STEM + ".md"), "w", encoding="utf-8") as handle:
        handle.write(markdown(stored) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="h100", choices=sorted(TARGETS))
    parser.add_argument("--tasks", default="train:pht:bf16,train:ht:bf16,train:flat:bf16,"
                        "train:discourse:bf16,anchor:xla,anchor:flash")
    parser.add_argument("--label", default=None, help="the run's key (default: the commit)")
    parser.add_argument("--checkout", default=None,
                        help="compile the keras_hsum and recipes of this checkout")
    parser.add_argument("--top", type=int, default=12, help="kernels and layers listed")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--hlo-dir", default=None,
                        help="also write each optimized program's text here (MBs each)")
    parser.add_argument("--no-details", dest="details", action="store_false",
                        help="the summary row only in the markdown")
    parser.add_argument("--fit", default=None, metavar="KEY",
                        help="fit the prediction to the measured steps of --device-kind in "
                        "--measured (benchmarks/accelerator.py's results) for run KEY of --out")
    parser.add_argument("--measured", default=os.path.join(RESULTS, "accelerator.json"))
    parser.add_argument("--device-kind", default="NVIDIA H200")
    parser.add_argument("--reanalyse", action="store_true",
                        help="read the programs of --out's rows again from their --hlo-dir "
                        "files (no compiling) and rewrite the results")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path[:0] = [p for p in (BENCHMARKS,) if p not in sys.path]
    if args.reanalyse:
        reanalyse(args.out, args.top)
        return
    if args.fit:
        fit(args.out, args.fit, args.measured, args.device_kind)
        return
    sharding = compile_only_device(args.target)  # before keras_hsum imports JAX
    import accelerator

    code_root = ROOT
    if args.checkout:
        accelerator.use_checkout(args.checkout)
        code_root = os.path.abspath(args.checkout)
    else:
        if ROOT not in sys.path:
            sys.path.append(ROOT)
        import importlib.util

        try:
            found = importlib.util.find_spec("keras_hsum.recipes")
        except ModuleNotFoundError:
            found = None
        if found is None:
            accelerator.register_recipes(ROOT)
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit("benchmarks/gpu_compile.py runs under JAX (KERAS_BACKEND=jax).")
    code = git_commit(code_root)
    key = f"{args.label or code}, {args.target}"
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "code": f"code of {code}", "jax": jax.__version__, "keras": keras.__version__,
              "target": args.target, "details": args.details, "rows": []}
    for task in filter(None, args.tasks.split(",")):
        print(f"[gpu_compile] {task} ...", flush=True)
        try:
            row = run_task(task, args.target, sharding, args.top, args.hlo_dir)
        except SystemExit:
            raise
        except Exception as error:  # noqa: BLE001 (one task's failure is its row)
            row = {"task": task, "error": f"{type(error).__name__}: {str(error)[:300]}"}
        result["rows"].append(row)
        if "error" in row:
            print(f"[gpu_compile] {task}: {row['error']}", flush=True)
        else:
            t = row["total"]
            print(f"[gpu_compile] {task}: {t['kernels']} kernels, {t['gb']:.1f} GB, "
                  f"{t['tflop']:.2f} TFLOP, roofline {t['roofline_ms']:.2f} ms, cuDNN attention "
                  f"{row['cudnn_attention_calls']}, compile {row['compile_s']} s", flush=True)
        write_results(args.out, key, result)


if __name__ == "__main__":
    main()
