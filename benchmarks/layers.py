"""Hierarchical vs flat encoders: forward+backward time and peak memory.

Three encoders of the same width D, heads H, FFN width and depth L, on
inputs of P paragraphs x T tokens (already embedded, [B,P,T,D]):

- HT: L/2 local layers (`keras_hub.layers.TransformerEncoder` on [B·P,T,D])
  then L/2 `GlobalTransformerLayer`s (multi-head pooling, inter-paragraph
  attention, context added to every token, FFN) — Liu & Lapata 2019;
- PHT: L/2 word-level layers on [B·P,T,D], `MultiHeadPooling` in PHT's
  feed-forward form to paragraph vectors [B,P,D], then L/2
  `TransformerEncoder` layers over the paragraphs — Ma & Zong;
- flat: L `TransformerEncoder` layers over the concatenated P·T tokens.

Every (encoder, P) point runs in a fresh subprocess, so that its peak
resident memory (ru_maxrss) is its own; memory is reported as the growth of
the peak over the process's footprint after the model was built. Time is
the median of `--steps` training steps (SGD on an MSE loss: one forward and
one backward pass plus a cheap update) after one warm-up step.

Targets (issue): at 30x100 tokens each hierarchical encoder takes at most
0.5x the flat encoder's time and memory; hierarchical time grows close to
linearly in P (fitted exponent <= 1.15) where flat attention is near
quadratic.

Usage:
    python benchmarks/layers.py                 # P = 10,20,30,40,80; T = 100
    python benchmarks/layers.py --quick         # small sizes, smoke test
Writes benchmarks/results/layers[_quick].json and .md.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODERS = ("ht", "pht", "flat")


def _build(kind, args):
    import keras
    import keras_hub
    from keras import ops

    from keras_hsum.layers.global_transformer_layer import GlobalTransformerLayer
    from keras_hsum.layers.multi_head_pooling import MultiHeadPooling

    half = args.depth // 2

    def local_stack(prefix, count):
        return [
            keras_hub.layers.TransformerEncoder(
                args.ffn, args.heads, dropout=0.0, name=f"{prefix}_{i}"
            )
            for i in range(count)
        ]

    class HTEncoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.local_layers = local_stack("local", half)
            self.global_layers = [
                GlobalTransformerLayer(args.heads, args.ffn, name=f"global_{i}")
                for i in range(args.depth - half)
            ]

        def call(self, inputs):
            x, token_mask = inputs["x"], inputs["token_mask"]
            b, p, t, d = ops.shape(x)
            flat = ops.reshape(x, (b * p, t, d))
            flat_mask = ops.reshape(token_mask, (b * p, t))
            for layer in self.local_layers:
                flat = layer(flat, padding_mask=flat_mask)
            x = ops.reshape(flat, (b, p, t, d))
            paragraph_mask = ops.any(token_mask, axis=-1)
            for layer in self.global_layers:
                x = layer(x, token_mask=token_mask, paragraph_mask=paragraph_mask)
            return x

    class PHTEncoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.word_layers = local_stack("word", half)
            self.pooling = MultiHeadPooling(
                args.heads, feedforward=True, intermediate_dim=args.ffn, name="pooling"
            )
            self.paragraph_layers = local_stack("paragraph", args.depth - half)

        def call(self, inputs):
            x, token_mask = inputs["x"], inputs["token_mask"]
            b, p, t, d = ops.shape(x)
            flat = ops.reshape(x, (b * p, t, d))
            flat_mask = ops.reshape(token_mask, (b * p, t))
            for layer in self.word_layers:
                flat = layer(flat, padding_mask=flat_mask)
            words = ops.reshape(flat, (b, p, t, d))
            paragraphs = self.pooling(words, token_mask=token_mask)
            paragraph_mask = ops.any(token_mask, axis=-1)
            for layer in self.paragraph_layers:
                paragraphs = layer(paragraphs, padding_mask=paragraph_mask)
            # Both memories feed PHT's decoder; the loss touches both.
            return words, paragraphs

    class FlatEncoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder_layers = local_stack("flat", args.depth)

        def call(self, inputs):
            x, token_mask = inputs["x"], inputs["token_mask"]
            b, p, t, d = ops.shape(x)
            x = ops.reshape(x, (b, p * t, d))
            mask = ops.reshape(token_mask, (b, p * t))
            for layer in self.encoder_layers:
                x = layer(x, padding_mask=mask)
            return x

    return {"ht": HTEncoder, "pht": PHTEncoder, "flat": FlatEncoder}[kind]()


def _max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(kind, paragraphs, args):
    """Runs in the child process: returns a dict of figures."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    from keras import ops

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    shape = (args.batch, paragraphs, args.tokens, args.width)
    x = rng.standard_normal(shape).astype("float32")
    token_mask = np.ones(shape[:3], bool)
    # Realistic padding: the last 10% of every paragraph is padding.
    token_mask[..., int(args.tokens * 0.9) :] = False
    inputs = {"x": x, "token_mask": token_mask}
    model = _build(kind, args)
    optimizer = keras.optimizers.SGD(1e-3)

    outputs = model(inputs)
    targets = [np.zeros(o.shape, "float32") for o in keras.tree.flatten(outputs)]

    class Trainer(keras.Model):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def call(self, inputs):
            return keras.tree.flatten(self.inner(inputs))

    trainer = Trainer(model)
    trainer.compile(
        optimizer=optimizer,
        loss=["mse"] * len(targets),
        jit_compile=args.jit,
    )
    baseline = _max_rss_mib()
    trainer.train_on_batch(inputs, targets)  # warm-up (tracing, compiling)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = trainer.train_on_batch(inputs, targets)
        times.append(time.perf_counter() - start)
    peak = _max_rss_mib()
    loss = float(np.ravel(ops.convert_to_numpy(loss))[0]) if np.ndim(loss) else float(loss)
    return {
        "encoder": kind,
        "paragraphs": paragraphs,
        "tokens": args.tokens,
        "step_seconds": float(np.median(times)),
        "peak_mib_over_baseline": peak - baseline,
        "baseline_mib": baseline,
        "parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
        "finite_loss": bool(np.isfinite(loss)),
    }


def _child(args):
    result = measure(args.child_encoder, args.child_paragraphs, args)
    print("RESULT " + json.dumps(result), flush=True)


def _run_point(kind, paragraphs, args):
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child-encoder",
        kind,
        "--child-paragraphs",
        str(paragraphs),
    ] + _shared_flags(args)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (process.stderr or "").strip().splitlines()[-3:]
    return {
        "encoder": kind,
        "paragraphs": paragraphs,
        "tokens": args.tokens,
        "error": f"exit {process.returncode}: {' | '.join(tail)}",
    }


def _shared_flags(args):
    return [
        f"--tokens={args.tokens}",
        f"--width={args.width}",
        f"--heads={args.heads}",
        f"--ffn={args.ffn}",
        f"--depth={args.depth}",
        f"--batch={args.batch}",
        f"--steps={args.steps}",
        f"--jit={args.jit}",
    ]


def _growth_exponent(points):
    import numpy as np

    points = [(p["paragraphs"], p["step_seconds"]) for p in points if "step_seconds" in p]
    if len(points) < 2:
        return None
    x = np.log([p for p, _ in points])
    y = np.log([t for _, t in points])
    return float(np.polyfit(x, y, 1)[0])


def _table(results, args):
    by = {(r["encoder"], r["paragraphs"]): r for r in results}
    lines = [
        f"Encoders: D={args.width}, H={args.heads}, FFN={args.ffn}, depth={args.depth} "
        f"(HT: {args.depth // 2} local + {args.depth - args.depth // 2} global; "
        f"PHT: {args.depth // 2} word + pooling + {args.depth - args.depth // 2} paragraph), "
        f"batch {args.batch}, T={args.tokens}, jit_compile={args.jit}.",
        "",
        "| P×T | encoder | step s | peak MiB | time / flat | memory / flat |",
        "|---|---|---|---|---|---|",
    ]
    for paragraphs in args.paragraphs:
        flat = by.get(("flat", paragraphs), {})
        for kind in ENCODERS:
            r = by.get((kind, paragraphs))
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {paragraphs}×{args.tokens} | {kind} | failed: {r['error'][:80]} | | | |")
                continue
            t_ratio = m_ratio = ""
            if "step_seconds" in flat and kind != "flat":
                t_ratio = f"{r['step_seconds'] / flat['step_seconds']:.3f}"
                m_ratio = f"{r['peak_mib_over_baseline'] / max(flat['peak_mib_over_baseline'], 1e-9):.3f}"
            lines.append(
                f"| {paragraphs}×{args.tokens} | {kind} | {r['step_seconds']:.3f} | "
                f"{r['peak_mib_over_baseline']:.0f} | {t_ratio} | {m_ratio} |"
            )
    lines.append("")
    lines.append("| encoder | fitted exponent of step time in P |")
    lines.append("|---|---|")
    for kind in ENCODERS:
        exponent = _growth_exponent([r for r in results if r["encoder"] == kind])
        lines.append(f"| {kind} | {'n/a' if exponent is None else f'{exponent:.2f}'} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paragraphs", type=int, nargs="+", default=[10, 20, 30, 40, 80])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--jit", default="auto", help="jit_compile: auto, true or false")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per point")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--child-encoder", choices=ENCODERS, help=argparse.SUPPRESS)
    parser.add_argument("--child-paragraphs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.jit = {"true": True, "false": False}.get(str(args.jit).lower(), "auto")
    if args.child_encoder:
        return _child(args)
    if args.quick:
        args.paragraphs, args.tokens, args.width, args.ffn, args.heads = [4, 8], 32, 64, 128, 4
        args.steps = 2

    from tqdm import tqdm

    points = [(k, p) for p in args.paragraphs for k in ENCODERS]
    results = []
    for kind, paragraphs in tqdm(points, desc="encoder points", unit="point"):
        result = _run_point(kind, paragraphs, args)
        results.append(result)
        tqdm.write(json.dumps(result))
    table = _table(results, args)
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    name = "layers_quick" if args.quick else "layers"
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "args": {k: v for k, v in vars(args).items() if not k.startswith("child")},
    }
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as handle:
        json.dump({"meta": meta, "results": results}, handle, indent=2)
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as handle:
        handle.write(f"# {name}\n\n{meta['date']} on {meta['machine']}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
