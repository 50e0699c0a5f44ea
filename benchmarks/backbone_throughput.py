"""Training throughput of PHT on a BART-base backbone against flat BART (issue 50).

Three rows, measured in one run, each in its own subprocess (peak resident
memory from `resource.getrusage` of that process):

1. `pht_bart`: `HierarchicalBackboneSummarizer(parallel_cross_attention=True)`
   on a BART-base-size `keras_hub.models.BartBackbone` (6+6 layers, width
   768, 12 heads, FFN 3072, V = 50,265, 1,024 learned positions; random
   weights) reading 30 paragraphs x 100 tokens = 3,000 input tokens: the
   backbone's encoder reads each paragraph on its own (B·30 sequences of
   100), its decoder reads all 3,000 states, PHT's pooling and gated parallel
   cross attention sit after every decoder layer;
2. `bart_1024`: `BackboneSummarizer` on the same BART-base backbone over the
   same tokens (the paragraphs' real tokens packed in rank order, padding
   dropped) truncated to BART's 1,024 positions;
3. `bart_3000`: the same flat BART with its learned positions extended to
   3,000 (`max_sequence_length=3000`, otherwise BART-base), over the same
   packed tokens padded to 3,000.

The batches are real text: the PHT recipe's own `make_dataset` over
../shared/data/qmsum_general with the SentencePiece vocabulary that
benchmarks/train_throughput.py trains (its helpers, imported); the ids
(< 8,000) lie inside BART's embedding and the models take that
vocabulary's special ids (pad 0, BOS 2, EOS 3). Targets: 100 tokens
(99 decoder positions). Every row compiles as a training run does
(`keras_hsum.training.model_setup.build_compiled_model`: the PHT paper
config's Adam + Noam schedule, global-norm clipping 2.0, label-smoothed
cross entropy 0.1; Keras' default jit_compile), runs `--warmup` steps, then
times `--steps` calls of `train_on_batch`.

tokens/s = B x input positions per example / median step time (3,000 for
the PHT and BART-3000 rows, 1,024 for BART-1024, which reads only the first
1,024 tokens). tokens/CPU-s divides by the process's CPU seconds per step
(user + system, all threads) instead: on a machine shared with other work
the wall-clock step times vary several-fold while the CPU seconds hold
within a few percent. The ratios PHT-on-BART ÷ each flat row (tokens/s,
tokens/CPU-s, step time, peak RSS) come from the same run.

The parent process imports no TensorFlow (the batches are built in a child
of their own): on Linux a child's ru_maxrss starts at its parent's peak.

Usage:
    python benchmarks/backbone_throughput.py [--batch 1] [--steps 5] [--warmup 2]
    python benchmarks/backbone_throughput.py --batch 2 --rows pht_bart,bart_1024
    python benchmarks/backbone_throughput.py --quick   # tiny sizes, smoke test
Writes benchmarks/results/backbone_throughput[_quick][_bB].json and .md
(_bB for a batch B other than 1).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from train_throughput import RESULTS  # noqa: E402
from train_throughput import ROOT  # noqa: E402
from train_throughput import _batches  # noqa: E402
from train_throughput import _config  # noqa: E402
from train_throughput import _vocabulary  # noqa: E402

ROWS = ("pht_bart", "bart_1024", "bart_3000")
DESCRIPTION = {
    "pht_bart": "PHT on BART-base (30 x 100, encoder per paragraph)",
    "bart_1024": "BART-base flat, truncated to 1,024",
    "bart_3000": "BART flat, positions extended to 3,000",
}
# BART-base's architecture (keras-hub's `bart_base_en`).
BART_BASE = dict(vocabulary_size=50265, num_layers=6, num_heads=12, hidden_dim=768,
                 intermediate_dim=3072)
TINY = dict(vocabulary_size=8000, num_layers=2, num_heads=4, hidden_dim=64,
            intermediate_dim=128)
TARGET_TOKENS = {False: 100, True: 32}
# Positions of each row's backbone and, for the flat rows, input length N.
POSITIONS = {
    False: {"pht_bart": 1024, "bart_1024": 1024, "bart_3000": 3000},
    True: {"pht_bart": 128, "bart_1024": 128, "bart_3000": 300},
}
# The vocabulary's special ids (keras_hsum.data.vocabulary).
SPECIAL_IDS = dict(pad_id=0, bos_id=2, eos_id=3)


def _pht_config(quick):
    config = _config("pht", quick)
    return config.replace(max_target_length=TARGET_TOKENS[quick])


def _flat_inputs(x, length):
    """The paragraphs' real tokens [B,P,T] packed in rank order (padding
    dropped), truncated or padded (id 0) to `length`."""
    import numpy as np

    tokens, mask = x["tokens"], x["token_mask"]
    flat = np.zeros((tokens.shape[0], length), tokens.dtype)
    for b in range(tokens.shape[0]):
        real = tokens[b][mask[b]][:length]
        flat[b, : len(real)] = real
    return {"tokens": flat, "token_mask": flat != 0,
            "decoder_tokens": x["decoder_tokens"], "target_mask": x["target_mask"]}


def _row_inputs(row, x, quick):
    if row == "pht_bart":
        return {k: x[k] for k in ("tokens", "token_mask", "paragraph_mask",
                                   "decoder_tokens", "target_mask")}
    return _flat_inputs(x, POSITIONS[quick][row])


def _model(row, config, quick):
    import keras_hub

    from keras_hsum.models import BackboneSummarizer
    from keras_hsum.models import HierarchicalBackboneSummarizer

    backbone = keras_hub.models.BartBackbone(
        max_sequence_length=POSITIONS[quick][row], **(TINY if quick else BART_BASE)
    )
    if row == "pht_bart":
        return HierarchicalBackboneSummarizer(
            backbone, parallel_cross_attention=True,
            num_paragraph_layers=config.num_paragraph_layers, dropout=config.dropout,
            name="parallel_hierarchical_transformer", **SPECIAL_IDS,
        )
    return BackboneSummarizer(backbone, name="flat_transformer", **SPECIAL_IDS)


def measure(args):
    """Child: builds one row's model and times its training steps."""
    import numpy as np

    from keras_hsum.training.model_setup import build_compiled_model

    config = _pht_config(args.quick)
    with np.load(args.data) as data:
        raw = [
            ({k[len(f"{i}/x/"):]: data[k] for k in data.files if k.startswith(f"{i}/x/")},
             data[f"{i}/y"], data[f"{i}/w"])
            for i in range(int(data["count"]))
        ]
    batches = [(_row_inputs(args.row, x, args.quick), y, w) for x, y, w in raw]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = _model(args.row, config, args.quick)

    class Recipe:  # build_compiled_model's recipe: default loss and metrics
        @staticmethod
        def build_model(config, vocabulary_size):
            return model

    model = build_compiled_model(Recipe, config, model.vocabulary_size, batches[0][0])
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, cpu_times, load = [], [], os.getloadavg()[0]
    for step in range(args.warmup + args.steps):
        x, y, w = batches[step % len(batches)]
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        logs = model.train_on_batch(x, y, sample_weight=w, return_dict=True)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
            cpu_times.append(_cpu_seconds() - cpu_start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    median = statistics.median(times)
    tokens = batches[0][0]["tokens"]
    positions = int(np.prod(tokens.shape))
    return {
        "row": args.row,
        "description": DESCRIPTION[args.row] + (" [--quick: tiny]" if args.quick else ""),
        "batch": args.batch,
        "input_tokens_per_example": positions // args.batch,
        "real_tokens_per_example": float(np.mean(
            [np.sum(b[0]["token_mask"]) / args.batch for b in batches])),
        "target_tokens": int(batches[0][1].shape[1]),
        "backbone_positions": POSITIONS[args.quick][args.row],
        "parameters": int(model.count_params()),
        "step_seconds_median": median,
        "step_seconds": times,
        "step_seconds_min": min(times),
        # user + system CPU seconds of this process per step (all threads):
        # less sensitive than wall time to other processes on a shared
        # machine, though TensorFlow's spinning threads inflate it there.
        "step_cpu_seconds_median": statistics.median(cpu_times),
        "step_cpu_seconds": cpu_times,
        "load_average_1min": [load, os.getloadavg()[0]],
        "tokens_per_second": positions / median,
        "peak_rss_mib": peak / 1024.0,
        "peak_growth_mib": (peak - base) / 1024.0,
        "model_built_rss_mib": built / 1024.0,
        "vm_hwm_mib": _peak_rss_mib(),
        "loss": float(np.asarray(logs["loss"])),
        "jit_compile": bool(getattr(model, "jit_compile", False)),
    }


def _save_batches(path, batches):
    import numpy as np

    arrays = {"count": np.asarray(len(batches))}
    for i, (x, y, w) in enumerate(batches):
        arrays.update({f"{i}/x/{k}": v for k, v in x.items()})
        arrays[f"{i}/y"] = y
        arrays[f"{i}/w"] = w
    np.savez(path, **arrays)


def prepare(args):
    """Child: trains the SentencePiece vocabulary on qmsum_general and writes
    two batches of the PHT recipe's real inputs (30 x 100) to `args.prepare`."""
    with tempfile.TemporaryDirectory() as folder:
        vocabulary = os.path.join(folder, "vocabulary.model")
        _vocabulary(vocabulary)
        batches = _batches("pht", _pht_config(args.quick), vocabulary, args.batch, 2)
    _save_batches(args.prepare, batches)


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mib():
    """VmHWM of /proc/self/status (this process's own peak since exec), MiB;
    None where there is no /proc."""
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _child(args, row):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    command = [sys.executable, os.path.abspath(__file__), "--child", row,
               "--data", args.data, "--batch", str(args.batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.quick:
        command.append("--quick")
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in result.stdout.splitlines() if l.startswith("{")]
    if result.returncode or not lines:
        error = result.stderr.strip().splitlines()[-5:]
        if result.returncode < 0:
            error.append(f"killed by signal {-result.returncode} (9: out of memory?)")
        return {"row": row, "batch": args.batch, "error": error}
    row_result = json.loads(lines[-1])
    row_result["wall_seconds"] = time.perf_counter() - start
    return row_result


def _tokens_per_cpu_second(row):
    """Input positions per CPU-second of the process (all its threads)."""
    return row["tokens_per_second"] * row["step_seconds_median"] / row["step_cpu_seconds_median"]


def ratios(rows):
    """PHT-on-BART ÷ each flat row: tokens/s (wall and per CPU-second), step
    time, CPU seconds per step and peak RSS."""
    pht = next((r for r in rows if r["row"] == "pht_bart" and "error" not in r), None)
    out = {}
    for other in ("bart_1024", "bart_3000"):
        flat = next((r for r in rows if r["row"] == other and "error" not in r), None)
        if pht and flat:
            out[other] = {
                "tokens_per_second": pht["tokens_per_second"] / flat["tokens_per_second"],
                "step_seconds": pht["step_seconds_median"] / flat["step_seconds_median"],
                "tokens_per_cpu_second": _tokens_per_cpu_second(pht)
                / _tokens_per_cpu_second(flat),
                "step_cpu_seconds": pht["step_cpu_seconds_median"]
                / flat["step_cpu_seconds_median"],
                "peak_rss": pht["peak_rss_mib"] / flat["peak_rss_mib"],
            }
    return out


def table(rows):
    lines = [
        "| row | model | input positions/example | real tokens read | params | "
        "step ms (median) | min ms | CPU s/step | tokens/s | tokens/CPU-s | peak RSS MiB | "
        "load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['row']} | error: {' '.join(r['error'])[-160:]} |"
                         + " |" * 10)
            continue
        lines.append(
            f"| {r['row']} | {r['description']} | {r['input_tokens_per_example']:,} | "
            f"{r['real_tokens_per_example']:,.0f} | {r['parameters']:,} | "
            f"{1000 * r['step_seconds_median']:,.0f} | {1000 * r['step_seconds_min']:,.0f} | "
            f"{r['step_cpu_seconds_median']:.2f} | {r['tokens_per_second']:,.0f} | "
            f"{_tokens_per_cpu_second(r):,.0f} | "
            f"{r['peak_rss_mib']:,.0f} | "
            f"{r['load_average_1min'][0]:.1f}→{r['load_average_1min'][1]:.1f} |"
        )
    found = ratios(rows)
    if found:
        lines += ["", "| PHT-on-BART ÷ | tokens/s | tokens/CPU-s | step time | CPU s/step | "
                  "peak RSS |", "|---|---:|---:|---:|---:|---:|"]
        for other, ratio in found.items():
            lines.append(f"| {other} | {ratio['tokens_per_second']:.2f}x | "
                         f"{ratio['tokens_per_cpu_second']:.2f}x | "
                         f"{ratio['step_seconds']:.2f}x | {ratio['step_cpu_seconds']:.2f}x | "
                         f"{ratio['peak_rss']:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=ROWS)
    parser.add_argument("--prepare", metavar="NPZ", help="child: write the batches")
    parser.add_argument("--rewrite-md", metavar="JSON",
                        help="only rewrite the .md of an earlier results .json")
    parser.add_argument("--row")
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.child:
        args.row = args.child
        print(json.dumps(measure(args)))
        return

    if args.prepare:
        prepare(args)
        return
    if args.rewrite_md:
        write_markdown(args.rewrite_md)
        return

    # The parent imports neither TensorFlow nor the data pipeline: on Linux a
    # child's ru_maxrss starts at its parent's peak (the high-water mark is
    # carried over fork and exec), so a heavy parent would set every row's
    # floor. The batches are built in a child of their own.
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        args.data = os.path.join(folder, "batches.npz")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
        command = [sys.executable, os.path.abspath(__file__), "--prepare", args.data,
                   "--batch", str(args.batch)] + (["--quick"] if args.quick else [])
        subprocess.run(command, env=env, cwd=ROOT, check=True)
        for name in args.rows.split(","):
            if name not in ROWS:
                raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
            row = _child(args, name)
            row["steps_measured"] = args.steps
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "step_seconds"}),
                  flush=True)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "processor": platform.processor()},
        "batch": args.batch,
        "warmup": args.warmup,
        "steps": args.steps,
        "target_tokens": TARGET_TOKENS[args.quick],
        "backbone": TINY if args.quick else BART_BASE,
        "rows": rows,
        "ratios": ratios(rows),
    }
    report["quick"] = bool(args.quick)
    print(table(rows))
    suffix = ("_quick" if args.quick else "") + (f"_b{args.batch}" if args.batch != 1 else "")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"backbone_throughput{suffix}.json")
    with open(path, "w") as file:
        json.dump(report, file, indent=1)
    write_markdown(path)


def write_markdown(path):
    """Writes the .md beside a results .json (its table and ratios)."""
    with open(path) as file:
        report = json.load(file)
    quick = report.get("quick", False)
    with open(path[: -len(".json")] + ".md", "w") as file:
        file.write(
            "# Training throughput: PHT on BART-base against flat BART\n\n"
            f"{report['date']}, {report['machine']['platform']}, "
            f"{report['machine']['cpus']} CPUs, no GPU; batch {report['batch']}; "
            f"{report['target_tokens']} target tokens; {report['warmup']} warm-up + "
            f"{report['steps']} timed steps (median); random weights, real token ids"
            + ("; --quick: a tiny BART (2+2 layers, width 64), 6 x 50 tokens, "
               "flat rows at 128 and 300 positions" if quick else "")
            + ".\n\n"
            f"{table(report['rows'])}\n"
        )


if __name__ == "__main__":
    main()
