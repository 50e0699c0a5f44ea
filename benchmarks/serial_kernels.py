"""CPU proxy of a launch-bound train step: serial kernels per step (issue 57, item 4).

A recurrent model's step on a GPU is a chain of loops whose iterations run
one after the other, each launching the kernels of its body: the step
costs about (iterations) x (kernels per iteration), forward and backward,
whatever the FLOPs. This script compiles a recipe's paper-config train step
exactly as `train_step_hlo.py` does (`train_step_hlo.measure`: jitted
stateless forward + backward + optimizer, JAX, synthetic full rows) and
reads its optimized XLA CPU HLO with `decode_loop_hlo.loop_figures`: for
every `while` loop, its trip count (`known_trip_count`) and the
kernel-like instructions of its body. "Serial kernels per step" = the sum
over the loops of trip count x body kernels. XLA CPU fuses differently
from XLA GPU, so this compares versions compiled the same way; it is not a
GPU kernel count.

With `--compare REV` the recipe's step is measured on the code of git
revision REV (exported as `train_step_hlo.py --compare` does) and on the
working tree (or on revision `--after REV2`), in child processes
alternating `--rounds` times; each child
also times the compiled step (median of `--steps` runs after one warm-up;
a shared, noisy machine: the after/before ratio is what counts). Results
go to benchmarks/results/<recipe>_serial_kernels.md (and .json).

Usage (JAX is required; run it with nice on a shared machine):
  KERAS_BACKEND=jax python benchmarks/serial_kernels.py [--recipe discourse]
      [--batch 1] [--policy mixed_bfloat16] [--steps 2] [--rounds 2]
      [--compare 6f74313] [--after 04c9934]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
RESULTS = os.path.join(BENCHMARKS, "results")
for path in (ROOT, BENCHMARKS):  # appended: PYTHONPATH's keras_hsum wins
    if path not in sys.path:
        sys.path.append(path)


def serial_kernels(hlo_text):
    """`(total, loops)`: the serial kernels of an optimized HLO program and
    one dict per `while` loop (`loop`, `parent`, `trips`, `kernels`,
    `serial` = trips x kernels, `top_opcodes`). A loop without a known
    trip count counts 0 and is flagged `trips: None`."""
    from decode_loop_hlo import loop_figures

    loops = []
    for figures in loop_figures(hlo_text):
        trips = figures["known_trip_count"]
        opcodes = sorted(figures["kernel_opcodes"].items(), key=lambda kv: -kv[1])
        loops.append({
            "loop": figures["loop"], "parent": figures["parent"], "trips": trips,
            "kernels": figures["kernels"], "serial": (trips or 0) * figures["kernels"],
            "top_opcodes": dict(opcodes[:5]),
        })
    loops.sort(key=lambda loop: -loop["serial"])
    return sum(loop["serial"] for loop in loops), loops


def child(args):
    """One version, in this process: prints `ROW {json}`."""
    from train_step_hlo import measure

    with tempfile.TemporaryDirectory() as folder:
        os.environ["TRAIN_STEP_HLO_DUMP"] = folder
        row = measure(args.recipe, args.batch, args.policy, args.steps)
        with open(os.path.join(folder, f"{args.recipe}_{args.policy}.hlo.txt")) as handle:
            hlo_text = handle.read()
    total, loops = serial_kernels(hlo_text)
    import keras_hsum

    print("ROW " + json.dumps({
        "keras_hsum": os.path.dirname(keras_hsum.__file__),
        "serial_kernels": total, "loops": loops,
        **{k: row[k] for k in ("recipe", "policy", "batch", "shapes_PTS", "compile_s",
                               "step_s_median", "step_s_all", "loss", "temp_mib")},
    }), flush=True)


def run_child(source, args):
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    if source:
        env["PYTHONPATH"] = source + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, os.path.abspath(__file__), "--child", "--recipe", args.recipe,
               "--batch", str(args.batch), "--policy", args.policy, "--steps", str(args.steps)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/tmp")
    for line in done.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"error": (done.stderr or done.stdout)[-800:]}


def markdown(runs, args, base, after, started, load):
    before_rows = [r for label, r in runs if label == "before" and "error" not in r]
    after_rows = [r for label, r in runs if label == "after" and "error" not in r]
    lines = [
        f"# {args.recipe}: serial kernels per train step (issue 57, item 4)", "",
        f"`benchmarks/serial_kernels.py --recipe {args.recipe} --compare {args.compare}"
        + (f" --after {args.after}" if args.after else "") + f"`, "
        f"{started} (load average at the start {load:.1f} on "
        f"{os.cpu_count()} CPUs): paper config, batch {args.batch}, `{args.policy}`, one "
        "jitted stateless train step (forward + backward + optimizer) compiled by XLA CPU "
        f"under JAX. before = {base}, after = {after}; children alternate "
        f"{args.rounds} times. Serial kernels = sum over the `while` loops of the optimized "
        "HLO of trip count x kernel-like instructions of the body "
        "(`decode_loop_hlo.loop_figures`); a proxy for the launch-bound GPU step, not a "
        "GPU kernel count. temp MiB: XLA's temporary buffers of the compiled step "
        "(`memory_analysis`; the values kept for the backward pass). Step = median of "
        f"{args.steps} CPU runs per child (shared machine: ratios only).", ""]
    if before_rows and after_rows:
        b, a = before_rows[0], after_rows[0]
        lines += [
            "| version | serial kernels | loops (trips x kernels) | temp MiB |",
            "|---|---|---|---|"]
        for label, r in (("before", b), ("after", a)):
            loops = ", ".join(f"{loop['trips']}x{loop['kernels']}" for loop in r["loops"])
            lines.append(f"| {label} | {r['serial_kernels']:,} | {loops} | "
                         f"{r['temp_mib']:,.0f} |")
        lines += ["", f"after / before: {a['serial_kernels'] / b['serial_kernels']:.3f}", ""]
    lines += ["| round | before step s | after step s | after / before |", "|---|---|---|---|"]
    pairs = [(runs[i][1], runs[i + 1][1]) for i in range(0, len(runs) - 1, 2)]
    ratios = []
    for number, (b, a) in enumerate(pairs, 1):
        if "error" in b or "error" in a:
            error = (b.get("error") or a.get("error"))[-160:]
            lines.append(f"| {number} | error: {error!r} | | |")
            continue
        ratios.append(a["step_s_median"] / b["step_s_median"])
        lines.append(f"| {number} | {b['step_s_median']:.2f} | {a['step_s_median']:.2f} | "
                     f"{ratios[-1]:.3f} |")
    if ratios:
        lines += ["", f"Median step ratio after / before: {statistics.median(ratios):.3f}"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="discourse")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--policy", default="mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", default=None, help="git revision of the 'before' code")
    parser.add_argument("--after", default=None,
                        help="git revision of the 'after' code (default: the working tree)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not args.compare:
        print(json.dumps(run_child(None, args), indent=1))
        return
    from train_step_hlo import export_revision

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as later:
        base = export_revision(args.compare, folder)
        after = export_revision(args.after, later) if args.after else "working tree"
        for _ in range(args.rounds):
            for label, source in (("before", folder), ("after", later if args.after else None)):
                runs.append((label, run_child(source, args)))
                summary = {k: runs[-1][1].get(k) for k in (
                    "keras_hsum", "serial_kernels", "step_s_median", "compile_s", "error")}
                print(label, json.dumps(summary), flush=True)
    path = os.path.join(RESULTS, f"{args.recipe}_serial_kernels")
    with open(path + ".json", "w") as handle:
        json.dump({"before": base, "after": after, "started": started, "load": load,
                   "args": vars(args),
                   "runs": [{"version": label, **row} for label, row in runs]}, handle, indent=1)
    text = markdown(runs, args, base, after, started, load)
    with open(path + ".md", "w") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
