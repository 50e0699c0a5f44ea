"""CPU proxy of the decode loop on an accelerator (issue 57, item 3).

A whole beam search is jitted under JAX and the optimized HLO
(`jax.jit(f).lower(...).compile().as_text()`) is read for what costs time
on a GPU that a CPU run hides:

- every `while` loop, and whether XLA knows its trip count
  (`backend_config` `known_trip_count`): a loop without one reads its
  condition back to the host every iteration (one round trip per token
  when the loop runs one token per iteration);
- the longest top-k row inside each loop body (the last axis of the first
  operand of a `sort`, `topk` or `TopK` custom-call, fusions and calls
  included): a top-k over the K·V scores of an example is one long row per
  example and token;
- the kernel-like instructions of each loop body (every instruction of the
  body and the computations it `call`s, except parameters, tuples,
  get-tuple-element, constants, bitcasts and nested loops, which are
  counted as their own loops): on a GPU each is about one kernel launch.
  CPU fusion differs from GPU fusion, so these are proxies to compare
  searches compiled the same way, not GPU kernel counts.

Functions the accelerator benchmark calls (all need `KERAS_BACKEND=jax`):

- `loop_figures(hlo_text)` → list of dicts, one per while loop;
- `outside_loop_kernels(hlo_text)`: kernel-like ops outside the loops;
- `ours_hlo(step_fn, state, batch_size, **search_arguments)` and
  `keras_hub_hlo(next_fn, prompt, cache, beam_size)`: the optimized HLO of
  `keras_hsum.decoding.search` and of keras-hub's `BeamSampler`;
- `toy_figures(...)` and `paper_pht_figures(...)`: the rows of the table
  `main()` prints (a tiny cached step; PHT at paper size).

Usage: KERAS_BACKEND=jax python benchmarks/decode_loop_hlo.py [--no-paper]
Run it against another checkout with PYTHONPATH=/that/checkout (the
checkout's `keras_hsum` comes first on the path).
"""

import argparse
import inspect
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
for path in (ROOT, BENCHMARKS):  # appended: PYTHONPATH's keras_hsum wins
    if path not in sys.path:
        sys.path.append(path)

# Instructions that are no kernel of their own.
FREE_OPCODES = frozenset({
    "parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all",
    "partition-id", "replica-id", "opt-barrier",
})
TOPK_OPCODES = frozenset({"sort", "topk"})

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(\S+)\s+\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(.*)$")


def _split_shape(text):
    """'SHAPE opcode(...)...' → (SHAPE, rest); SHAPE may be a tuple in ( )."""
    if text.startswith("("):
        depth = 0
        for at, char in enumerate(text):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                return text[: at + 1], text[at + 1:].lstrip()
    shape, _, rest = text.partition(" ")
    return shape, rest


def _dimensions(shape):
    """The sizes of the first array shape in `shape` text ([] if none)."""
    match = re.search(r"\[([0-9,]*)\]", shape)
    return [] if match is None else [int(size) for size in filter(None, match.group(1).split(","))]


def parse_hlo(text):
    """Optimized HLO text → {computation: [instruction dicts]} where an
    instruction is {name, shape, opcode, operands, attributes}."""
    computations, current = {}, None
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = computations.setdefault(header.group(1), [])
            continue
        if line.startswith("}"):
            current = None
            continue
        match = _INSTRUCTION.match(line) if current is not None else None
        if not match:
            continue
        shape, rest = _split_shape(match.group(2))
        opcode, _, after = rest.partition("(")
        depth, at = 1, 0
        for at, char in enumerate(after):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                break
        current.append({
            "name": match.group(1), "shape": shape, "opcode": opcode.strip(),
            "operands": re.findall(r"%([^\s,)]+)", after[:at]),
            "attributes": after[at + 1:],
        })
    return computations


def _called(instruction, key):
    match = re.search(key + r"=%([^\s,}]+)", instruction["attributes"])
    return match.group(1) if match else None


def loop_figures(hlo_text):
    """One dict per `while` loop of the optimized HLO text:

    `loop`: its instruction name; `parent`: the loop whose body holds it
    (None at the top); `known_trip_count`: int or None (the condition then
    goes back to the host every iteration on a GPU); `largest_topk`: the
    longest row (last axis) a sort/top-k operand has in its body (0: none;
    a GPU top-k kernel works row by row, so a top-k over K·V in one row is
    K times longer and K times less parallel than K rows of V);
    `kernels`: kernel-like instructions in its body (see the module
    docstring); `kernel_opcodes`: {opcode: count} of those;
    `host_reads_per_token`: condition reads per innermost iteration (0 for
    a known trip count; 1/n for a loop whose iterations run an inner loop
    of n iterations of known trip count); `outside_loop_kernels`: the
    search's kernel-like instructions outside every loop (once per search,
    `outside_loop_kernels`), the same in every dict of one text.
    """
    computations = parse_hlo(hlo_text)
    shapes = {i["name"]: i["shape"] for body in computations.values() for i in body}
    loops = []

    def walk(computation, loop, figures, seen):
        """Adds the body's instructions to `figures`; nested loops recurse."""
        if computation in seen or computation not in computations:
            return
        seen.add(computation)
        for instruction in computations[computation]:
            opcode = instruction["opcode"]
            target = re.search(r'custom_call_target="([^"]+)"', instruction["attributes"])
            is_topk = opcode in TOPK_OPCODES or (
                opcode == "custom-call" and target and "topk" in target.group(1).lower())
            if is_topk and instruction["operands"]:
                sizes = _dimensions(shapes.get(instruction["operands"][0], "")) or [0]
                figures["largest_topk"] = max(figures["largest_topk"], sizes[-1])
            if opcode == "while":
                nested(instruction, loop)
                continue
            if opcode in ("fusion",):  # one kernel; look inside for sorts only
                fused = {"largest_topk": 0, "kernels": 0, "kernel_opcodes": {}}
                walk(_called(instruction, "calls"), loop, fused, seen)
                figures["largest_topk"] = max(figures["largest_topk"], fused["largest_topk"])
            elif opcode in ("call", "conditional", "async-start"):
                for key in ("to_apply", "calls", "branch_computations"):
                    for name in re.findall(key + r"=\{?%([^\s,}]+)", instruction["attributes"]):
                        walk(name, loop, figures, seen)
                continue
            if opcode not in FREE_OPCODES and figures is not None:
                figures["kernels"] += 1
                figures["kernel_opcodes"][opcode] = figures["kernel_opcodes"].get(opcode, 0) + 1

    def nested(instruction, parent):
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', instruction["attributes"])
        figures = {"loop": instruction["name"], "parent": parent,
                   "known_trip_count": int(trip.group(1)) if trip else None,
                   "largest_topk": 0, "kernels": 0, "kernel_opcodes": {}}
        loops.append(figures)
        walk(_called(instruction, "body"), instruction["name"], figures, set())

    entry = next(name for name in computations if re.search(
        r"^ENTRY\s+%" + re.escape(name) + r"\s", hlo_text, re.M))
    walk(entry, None, {"largest_topk": 0, "kernels": 0, "kernel_opcodes": {}}, set())

    def iterations_within(loop):
        """Innermost iterations one iteration of `loop` runs (its nested
        loops of known trip count multiplied; 1 without any)."""
        inner = [iterations_within(child) * child["known_trip_count"] for child in loops
                 if child["parent"] == loop["loop"] and child["known_trip_count"]]
        return max(inner, default=1)

    outside = outside_loop_kernels(hlo_text)
    for loop in loops:
        # The token loop is the innermost: an outer loop of unknown trip count
        # reads its condition once per iterations_within(loop) tokens.
        loop["host_reads_per_token"] = (
            0.0 if loop["known_trip_count"] else 1.0 / iterations_within(loop))
        loop["outside_loop_kernels"] = outside
    return loops


def outside_loop_kernels(hlo_text):
    """Kernel-like instructions of the entry computation outside every
    `while` loop (and the computations it calls): run once per search, e.g.
    the set-up before the loop and reading the results back after it."""
    computations = parse_hlo(hlo_text)
    entry = next(name for name in computations if re.search(
        r"^ENTRY\s+%" + re.escape(name) + r"\s", hlo_text, re.M))
    count, pending, seen = 0, [entry], set()
    while pending:
        name = pending.pop()
        if name in seen or name not in computations:
            continue
        seen.add(name)
        for instruction in computations[name]:
            opcode = instruction["opcode"]
            if opcode in ("call", "conditional", "async-start"):
                for key in ("to_apply", "calls", "branch_computations"):
                    pending += re.findall(key + r"=\{?%([^\s,}]+)", instruction["attributes"])
            elif opcode != "while" and opcode not in FREE_OPCODES:
                count += 1
    return count


def _compiled_text(function, *arguments):
    import jax

    return jax.jit(function).lower(*arguments).compile().as_text()


def ours_hlo(step_fn, state, batch_size, **search_arguments):
    """Optimized HLO of `keras_hsum.decoding.search(step_fn, state,
    batch_size, **search_arguments)` jitted whole (state: B·K rows)."""
    from keras_hsum.decoding import search

    def decode(state):
        return search(step_fn, state, batch_size, **search_arguments)["sequences"]

    return _compiled_text(decode, state)


def keras_hub_hlo(next_fn, prompt, cache, beam_size):
    """Optimized HLO of keras-hub's `BeamSampler(beam_size)` over
    `next_fn(prompt, cache, index) → (logits, None, cache)` from index 1 of
    `prompt` int32 [B, L+1] (BOS first), `cache` a nest of [B,...] tensors
    (the sampler repeats each row K times)."""
    from keras import ops
    from keras_hub.samplers import BeamSampler

    sampler = BeamSampler(num_beams=beam_size, return_all_beams=True)

    def decode(prompt, cache):
        mask = ops.broadcast_to(ops.arange(ops.shape(prompt)[1])[None, :] == 0,
                                ops.shape(prompt))
        return sampler(next_fn, prompt, cache=cache, index=1, mask=mask)[0]

    return _compiled_text(decode, prompt, cache)


def toy_step(vocabulary, hidden, seed=0):
    """A tiny decoder step: `step(ids [N], index, keys [N,L,D]) → (logits
    [N,V], keys)`: the token's embedding is written into the cache at
    `index` (dynamic_update_slice, as keras-hub's caches), the logits
    project the embedding plus the mean of the cache."""
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(seed)
    embedding = ops.convert_to_tensor(rng.normal(size=(vocabulary, hidden)).astype("float32"))
    output = ops.convert_to_tensor(rng.normal(size=(hidden, vocabulary)).astype("float32"))

    def step(ids, index, keys):
        x = ops.take(embedding, ids, axis=0)
        keys = ops.slice_update(keys, (0, index, 0), x[:, None, :])
        return ops.matmul(x + ops.mean(keys, axis=1), output), keys

    return step


def _search_accepts(name):
    from keras_hsum.decoding import search

    return name in inspect.signature(search).parameters


def toy_figures(batch=8, beams=5, length=200, vocabulary=8000, hidden=64, terms="none",
                search_options=None, keras_hub=True):
    """`{"ours": loops, "keras-hub": loops}` for `toy_step` (`terms`: "none"
    or "pht" = GNMT length normalisation 0.6 and trigram blocking;
    `search_options`: more keywords of `search`)."""
    import numpy as np
    from keras import ops

    from keras_hsum.decoding import LengthNormalization, NgramBlocking

    step = toy_step(vocabulary, hidden)
    terms = [] if terms == "none" else [LengthNormalization(0.6), NgramBlocking(3)]

    def step_fn(ids, index, keys):
        logits, keys = step(ids, index, keys)
        return logits, keys, {}

    keys = np.zeros((batch * beams, length, hidden), "float32")
    figures = {"ours": loop_figures(ours_hlo(
        step_fn, keys, batch, beam_size=beams, max_length=length, bos_id=2, eos_id=3, pad_id=0,
        terms=terms, **(search_options or {})))}
    if not keras_hub:
        return figures

    def next_fn(prompt, keys, index):
        ids = ops.take(prompt, index - 1, axis=1)
        logits, keys = step(ids, index - 1, keys)
        return logits, None, keys

    prompt = np.zeros((batch, length + 1), "int32")
    prompt[:, 0] = 2
    hub = keras_hub_hlo(next_fn, prompt, np.zeros((batch, length, hidden), "float32"), beams)
    figures["keras-hub"] = loop_figures(hub)
    return figures


def paper_pht_figures(batch=1, beams=5, length=200, search_options=None):
    """`{"ours": loops, "keras-hub": loops}` for PHT at paper size (30×100
    memory, untrained), driven as benchmarks/decode.py drives it: ours with
    GNMT length normalisation 0.6, trigram blocking and min_length = L."""
    import decode

    from keras_hsum.decoding import LengthNormalization, NgramBlocking, beam_search

    model, _, vocabulary = decode.paper_model("pht", {}, None)
    inputs = decode.paper_inputs(vocabulary, 30, 100, batch=batch)

    def ours(inputs):
        return beam_search(model, inputs, beam_size=beams, max_length=length, min_length=length,
                           terms=[LengthNormalization(0.6), NgramBlocking(3)],
                           **(search_options or {}))["sequences"]

    def hub(inputs):  # the static cache as decode.py's peers read it
        return decode.keras_hub_search(model, inputs, length, beams=beams)

    return {"ours": loop_figures(_compiled_text(ours, inputs)),
            "keras-hub": loop_figures(_compiled_text(hub, inputs))}


def table_lines(title, figures):
    lines = [f"### {title}", "",
             "| search | loop (parent) | known trip count | host reads per token | "
             "longest top-k row | kernel-like ops in body | largest opcodes |",
             "|---|---|---|---|---|---|---|"]
    for search_name, loops in figures.items():
        for loop in loops:
            opcodes = sorted(loop["kernel_opcodes"].items(), key=lambda item: -item[1])[:5]
            lines.append(
                f"| {search_name} | {loop['loop']} ({loop['parent'] or 'top'}) | "
                f"{loop['known_trip_count'] or 'no'} | {loop['host_reads_per_token']:.3g} | "
                f"{loop['largest_topk']:,} | {loop['kernels']} | "
                + ", ".join(f"{name} {count}" for name, count in opcodes) + " |")
    outside = [f"{name} {loops[0]['outside_loop_kernels']}"
               for name, loops in figures.items() if loops]
    lines += ["", "Kernel-like ops outside the loops (once per search): "
              + ", ".join(outside) + "."]
    return lines


def _blocked_top_k_module():
    """The module whose `_gpu_visible` decides whether `blocked_top_k` cuts
    rows into blocks (it reads it from its own module at every call):
    keras_hsum.decoding.top_k, or beam_search in checkouts from before
    top_k.py; None in checkouts without a blocked top-k."""
    import importlib

    for name in ("keras_hsum.decoding.top_k", "keras_hsum.decoding.beam_search"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "_gpu_visible"):
            return module
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-paper", action="store_true", help="skip PHT at paper size")
    parser.add_argument("--as-on-gpu", action="store_true",
                        help="compile our search as it is traced where a GPU is visible "
                        "(its long top-k rows cut into blocks: top_k.blocked_top_k)")
    args = parser.parse_args(argv)
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit("decode_loop_hlo reads JAX's compiled HLO: run it with "
                         f"KERAS_BACKEND=jax (the backend is {keras.backend.backend()}).")
    import keras_hsum

    if args.as_on_gpu:
        module = _blocked_top_k_module()
        if module is None:
            raise SystemExit("--as-on-gpu: this checkout's search has no blocked top-k")
        module._gpu_visible = lambda: True
        print(f"our search traced as where a GPU is visible (blocked top-k rows: "
              f"{module.__name__}._gpu_visible)")
    # Where search has stop_check_every: its default, every position, never.
    variants = [("ours", {})]
    if _search_accepts("stop_check_every"):
        variants = [("ours (default N=8)", {}), ("ours (N=1)", {"stop_check_every": 1}),
                    ("ours (static)", {"stop_check_every": None})]
    print(f"keras_hsum from {os.path.dirname(keras_hsum.__file__)}")
    for terms in ("none", "pht"):
        started, figures = time.time(), {}
        for at, (label, options) in enumerate(variants):
            found = toy_figures(terms=terms, search_options=options, keras_hub=at == 0)
            figures[label] = found["ours"]
            if "keras-hub" in found:
                keras_hub_figures = found["keras-hub"]
        figures["keras-hub"] = keras_hub_figures
        print("\n".join(table_lines(
            f"toy step, batch 8, beam 5, 200 tokens, V 8,000, terms: {terms} "
            f"({time.time() - started:.0f} s to compile)", figures)) + "\n", flush=True)
    if not args.no_paper:
        for batch in (1, 8):
            started = time.time()
            figures = paper_pht_figures(batch=batch)
            figures = {variants[0][0]: figures["ours"], "keras-hub": figures["keras-hub"]}
            print("\n".join(table_lines(
                f"PHT 30×100 at paper size, batch {batch}, beam 5, 200 tokens "
                f"({time.time() - started:.0f} s to build and compile)", figures)) + "\n",
                flush=True)


if __name__ == "__main__":
    main()
