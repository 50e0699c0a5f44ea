"""Evidence of learning: every `tiny` recipe on its default real dataset.

Each recipe trains in its own subprocess through the real entry point
(`keras_hsum.training.train`, the code behind `keras-hsum train`) on the
recipe's default corpus (../shared/data/<dataset>, or the bundled sample),
for its tiny config's epochs or at most `--minutes` of wall time, whichever
comes first. The validation loss is measured before the first step (the
initialisation) and after every epoch, on the same validation batches.

Usage:
    python benchmarks/tiny_recipes.py [--recipes pht,ht] [--minutes 10]
Writes benchmarks/results/tiny_recipes.json, .md and tiny_recipes.png
(validation loss curves), and keeps the runs under runs/tiny_recipes/.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def child(name, out, minutes):
    import keras
    import numpy as np

    from keras_hsum import recipes
    from keras_hsum.training import trainer

    recipe = recipes.get(name)
    config = recipes.config(name, "tiny")
    if name == "pht_predictor":
        # The predictor learns the attention of a trained PHT: the tiny PHT
        # run of this benchmark (train "pht" first).
        teacher = os.path.join(os.path.dirname(out), "pht")
        from keras_hsum import run_folder

        if not os.path.exists(run_folder.path(teacher, run_folder.LAST_CHECKPOINT)):
            raise SystemExit(f"pht_predictor needs the tiny PHT run in {teacher}.")
        config = config.replace(teacher_run=teacher)

    class InitialValidation(keras.callbacks.Callback):
        """Validation loss at initialisation (before the first step)."""

        def __init__(self, data, steps):
            super().__init__()
            self.data, self.steps, self.logs = data, steps, None

        def on_train_begin(self, logs=None):
            if self.logs is None and int(np.asarray(self.model.optimizer.iterations)) == 0:
                self.logs = self.model.evaluate(
                    self.data, steps=self.steps, verbose=0, return_dict=True
                )

    os.makedirs(out, exist_ok=True)
    train_source, val_source = trainer.resolve_data(None, config.dataset)
    vocabulary = trainer.load_or_train_vocabulary(out, train_source, config.vocabulary_size)
    val_data = recipe.make_dataset(
        config, val_source, vocabulary, training=False, seed=config.seed,
        cache=True, max_examples=config.max_val_examples,
    )
    initial = InitialValidation(val_data, config.validation_steps)
    start = time.monotonic()
    result = trainer.train(
        recipe, config, out=out, recipe_name=name, config_name="tiny",
        max_minutes=minutes, verbose=2, extra_callbacks=[initial],
    )
    seconds = time.monotonic() - start
    initial_logs = {f"val_{k}": float(v) for k, v in (initial.logs or {}).items()}
    return {
        "recipe": name,
        "dataset": config.dataset,
        "steps": result.steps,
        "seconds": seconds,
        "stopped_by_time_budget": result.stopped_early,
        "initial": initial_logs,
        "history": result.history,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=None, help="comma-separated (default: all)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--runs", default=os.path.join(ROOT, "runs", "tiny_recipes"))
    parser.add_argument(
        "--merge", action="store_true",
        help="keep the other recipes' rows of an earlier results/tiny_recipes.json",
    )
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        report = child(args.child, os.path.join(args.runs, args.child), args.minutes)
        print("RESULT " + json.dumps(report))
        return

    from keras_hsum import recipes

    names = args.recipes.split(",") if args.recipes else recipes.names()
    rows = []
    for name in names:
        print(f"== {name}", flush=True)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        process = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", name,
             "--minutes", str(args.minutes), "--runs", args.runs],
            env=env, capture_output=True, text=True, cwd=ROOT,
        )
        lines = [l for l in process.stdout.splitlines() if l.startswith("RESULT ")]
        if process.returncode or not lines:
            rows.append({"recipe": name, "error": process.stderr.strip().splitlines()[-6:]})
            print("\n".join(rows[-1]["error"]))
            continue
        row = json.loads(lines[-1][len("RESULT "):])
        rows.append(row)
        losses = row["history"].get("val_loss", [])
        print(f"{name}: val_loss {row['initial'].get('val_loss')} -> {losses[-1:]} "
              f"in {row['steps']} steps, {row['seconds'] / 60:.1f} min", flush=True)

    if args.merge and os.path.exists(os.path.join(RESULTS, "tiny_recipes.json")):
        with open(os.path.join(RESULTS, "tiny_recipes.json")) as file:
            earlier = json.load(file)["rows"]
        names_now = {row["recipe"] for row in rows}
        rows = [row for row in earlier if row["recipe"] not in names_now] + rows

    lines = [
        "| recipe | dataset | steps | minutes | val loss at init | after each epoch | final / init |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['recipe']} | error | | | | {' '.join(row['error'])[-150:]} | |")
            continue
        init = row["initial"].get("val_loss")
        losses = row["history"].get("val_loss", [])
        # Classification recipes (SHTE) report accuracy beside the loss.
        curve = ", ".join(f"{v:.2f}" for v in losses)
        ratio = f"{losses[-1] / init:.2f}" if init and losses else "n/a"
        lines.append(
            f"| {row['recipe']} | {row['dataset']} | {row['steps']} | "
            f"{row['seconds'] / 60:.1f} | {init:.2f} | {curve} | {ratio} |"
        )
    table = "\n".join(lines)
    print(table)
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "minutes_budget": args.minutes,
        "rows": rows,
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "tiny_recipes.json"), "w") as file:
        json.dump(report, file, indent=1)
    with open(os.path.join(RESULTS, "tiny_recipes.md"), "w") as file:
        file.write(
            "# Tiny recipes on their default real datasets: validation loss\n\n"
            f"{report['date']}, {report['machine']['platform']}, "
            f"{report['machine']['cpus']} CPUs; at most {args.minutes:g} minutes each.\n\n"
            f"{table}\n"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        if "error" in row or not row["history"].get("val_loss"):
            continue
        steps = [0] + row["history"]["step"]
        losses = [row["initial"]["val_loss"]] + row["history"]["val_loss"]
        axis.plot(steps, [l / losses[0] for l in losses], marker="o", label=row["recipe"])
    axis.set_xlabel("optimizer steps")
    axis.set_ylabel("validation loss / loss at initialisation")
    axis.set_title("tiny recipes on real data")
    axis.legend()
    figure.tight_layout()
    figure.savefig(os.path.join(RESULTS, "tiny_recipes.png"), dpi=120)


if __name__ == "__main__":
    main()
