"""SavedModel serving latency vs in-Python XLA decoding, one 30×100 cluster.

The same trained model (default: the tiny PHT run `runs/tiny_recipes/pht`,
its weights and vocabulary), the same input (one qmsum_goldspan validation
cluster, structured to P = 30 paragraphs × T = 100 tokens: the paper's
input size), the same beam search (K = 5, L = `--max-length`, |y|
normalisation + trigram blocking), timed two ways:

- serving: `keras-hsum export` builds a `SummarizerModule` (in-graph
  preprocessing + encoder + beam search + detokenisation), it is written
  as a SavedModel, loaded with `tf.saved_model.load` and its
  `serving_default` signature is called (what TF Serving runs);
- python: the same `TextStructurer` (a tf.function), then encoder + beam
  search as a Python `tf.function(jit_compile=True)`, then detokenize.

Both are warmed up (tracing / XLA compilation excluded) and timed over
`--repeats` calls; the ratio of medians is reported. The SavedModel is
exported with and without `jit_compile` (the serving module's XLA option);
the ratio that the target (≤ 1.2) refers to is the jit-compiled export.

Usage: python benchmarks/serving.py [--run runs/tiny_recipes/pht]
       [--repeats 5] [--max-length 63]
Writes benchmarks/results/serving.json and .md.

`--load`: serving under load (issue 47). Each `--model` (a SavedModel base
path or version folder written by `keras-hsum export`) is loaded with
`tf.saved_model.load` in this process with TensorFlow and the TF Text
kernels only (`keras` made unimportable, the kernels' .so files loaded as
in tests/export/run_saved_model.py: a stand-in for TF Serving), and
in-process client threads call it (no network):

- memory: the resident set size (psutil RSS, after `gc.collect()`) before
  and after `--memory-requests` requests (default 1,000, 4 clients) that
  follow a warm-up of `--warmup` requests; stops early at
  `--memory-seconds` (the count run is reported);
- clients: for each of `--clients` (1, 4, 16) threads, single-example
  requests built from the bundled qmsum_goldspan validation texts
  (`render_documents`, the `summarize_with_context` signature for their
  queries, as `keras-hsum summarize` sends them), round robin, until
  `--seconds` have passed or `--max-requests` were sent: throughput,
  p50/p99 latency, errors (an exception or a non-empty `error` output);
- batched: the first `--batch` (8) texts as one call against 8 sequential
  single calls, median of `--batch-repeats`.

Writes benchmarks/results/serving_load.json and .md. The models of the
recorded run (a tiny PHT, exported without and with XLA):

    python benchmarks/tiny_recipes.py --recipes pht      # runs/tiny_recipes/pht
    keras-hsum export --run runs/tiny_recipes/pht --out /tmp/sm_pht
    keras-hsum export --run runs/tiny_recipes/pht --out /tmp/sm_pht_jit --jit-compile
    python benchmarks/serving.py --load --model /tmp/sm_pht --model /tmp/sm_pht_jit \
        --seconds 15
"""

import argparse
import json
import os
import platform
import statistics
import sys
import shutil
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pick_cluster(structurer, count=40):
    """The first validation cluster that fills the most of the 30×100 grid."""
    import tensorflow as tf

    from keras_hsum.data import corpus_path
    from keras_hsum.data import read_examples
    from keras_hsum.data.reader import render_documents

    best, best_tokens = None, -1
    for example in list(read_examples(corpus_path("qmsum_goldspan", "val")))[:count]:
        documents = tf.constant([render_documents(example)])
        tokens = int(tf.reduce_sum(tf.cast(structurer(documents)["token_mask"], tf.int32)))
        if tokens > best_tokens:
            best, best_tokens = documents, tokens
    return best, best_tokens


def latency_main(args):
    """The SavedModel vs in-Python comparison (the default mode)."""
    import numpy as np
    import tensorflow as tf

    from keras_hsum.export.cli import load_run
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.serving import SummarizerModule

    name, recipe, config, model, vocabulary = load_run(args.run)
    options = dict(recipe.structure_options(config))
    options.update(max_units=args.paragraphs, max_tokens=args.tokens)
    structurer = TextStructurer(vocabulary.proto, **options)
    max_length = args.max_length or config.max_target_length - 1
    search = SearchOptions(beam_size=args.beam_size, max_length=max_length, block_ngrams=3)
    documents, real_tokens = pick_cluster(structurer)

    # In-Python: structurer, then encoder + search under XLA, then detokenize.
    @tf.function(jit_compile=True)
    def jit_search(inputs):
        result = search(model, inputs)
        return result["sequences"][:, 0], result["scores"][:, 0]

    def python_decoding():
        features = structurer(documents)
        inputs = {k: v for k, v in features.items() if v.dtype != tf.string}
        ids, scores = jit_search(inputs)
        return structurer.detokenize(ids).numpy(), scores.numpy()

    python_decoding()  # warm-up: tracing, XLA compilation
    python_summary, python_score = python_decoding()

    paths = {}
    folder = tempfile.mkdtemp(prefix="serving_benchmark_")
    for jit in (True, False):
        module = SummarizerModule(model, structurer, search, jit_compile=jit)
        path = os.path.join(folder, f"jit_{jit}")
        tf.saved_model.save(module, path, signatures=module.signatures())
        paths["saved_model_jit" if jit else "saved_model"] = path
    servings = {}
    for key, path in paths.items():
        signature = tf.saved_model.load(path).signatures["serving_default"]

        def serving(signature=signature):
            outputs = signature(documents=documents)
            return outputs["summary"].numpy(), outputs["score"].numpy()

        serving()  # warm-up
        servings[key] = serving
    # Interleaved: every round times each path once, so that load from other
    # processes on the machine hits all paths alike.
    times = {"python": [], **{key: [] for key in servings}}
    for _ in range(args.repeats):
        for key, function in [("python", python_decoding), *servings.items()]:
            start = time.perf_counter()
            function()
            times[key].append(time.perf_counter() - start)
    python_times = times["python"]
    rows = {}
    for key, serving in servings.items():
        summary, score = serving()
        rows[key] = {
            "median_s": statistics.median(times[key]),
            "min_s": min(times[key]),
            "times_s": times[key],
            "same_summary_as_python": bool(np.array_equal(summary, python_summary)),
            "score_difference": float(np.max(np.abs(score - python_score))),
        }
    shutil.rmtree(folder, ignore_errors=True)
    python_median = statistics.median(python_times)
    result = {
        "run": os.path.relpath(args.run, REPO) if args.run.startswith(REPO) else args.run,
        "recipe": name,
        "input": {
            "paragraphs": args.paragraphs, "tokens_per_paragraph": args.tokens,
            "real_tokens": real_tokens, "documents": int(documents.shape[1]),
        },
        "search": search.to_dict(),
        "python_jit": {"median_s": python_median, "min_s": min(python_times),
                       "times_s": python_times},
        **rows,
        "ratio_saved_model_jit": rows["saved_model_jit"]["median_s"] / python_median,
        "ratio_saved_model_no_jit": rows["saved_model"]["median_s"] / python_median,
        "ratio_saved_model_jit_min": rows["saved_model_jit"]["min_s"] / min(python_times),
        "target_ratio": 1.2,
        "summary": python_summary[0].decode("utf-8", errors="replace"),
        "machine": {
            "platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "tensorflow": tf.__version__,
            "devices": [d.device_type for d in tf.config.list_physical_devices()],
        },
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    print(f"ratio SavedModel (jit) / in-Python jit: {result['ratio_saved_model_jit']:.3f}")
    print(f"ratio SavedModel (no jit) / in-Python jit: {result['ratio_saved_model_no_jit']:.3f}")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "serving.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    lines = [
        "# Serving latency: SavedModel vs in-Python XLA decoding",
        "",
        f"One qmsum_goldspan validation cluster structured to {args.paragraphs} × "
        f"{args.tokens} tokens ({real_tokens} real tokens), `{result['run']}` "
        f"({name}), beam {args.beam_size}, up to {max_length} tokens, trigram "
        f"blocking; {args.repeats} interleaved rounds after warm-up; "
        f"{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}.",
        "",
        "| path | median latency (s) | min (s) | ratio of medians to in-Python jit | same summary |",
        "|---|---|---|---|---|",
        f"| in-Python: structurer + `tf.function(jit_compile=True)` search | "
        f"{python_median:.3f} | {min(python_times):.3f} | 1.000 | - |",
    ]
    for key, label in (("saved_model_jit", "SavedModel `serving_default`, exported with jit_compile"),
                       ("saved_model", "SavedModel `serving_default`, exported without jit_compile")):
        row = rows[key]
        lines.append(
            f"| {label} | {row['median_s']:.3f} | {row['min_s']:.3f} | "
            f"{row['median_s'] / python_median:.3f} | "
            f"{'yes' if row['same_summary_as_python'] else 'no'} |"
        )
    lines += ["", "Target: ≤ 1.2 (the jit-compiled export)."]
    with open(os.path.join(RESULTS, "serving.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


# ------------------------------------------------------------- --load mode
# What TF Serving has: TensorFlow and the TF Text kernels, no Keras.
BLOCKED = ("keras", "keras_hub", "keras_nlp", "tf_keras")


def _version_folder(path):
    """`path` when it holds saved_model.pb, else its highest numbered
    version folder (as `keras-hsum summarize --model` resolves it)."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    numbers = sorted(int(n) for n in os.listdir(path)
                     if n.isdigit() and os.path.isdir(os.path.join(path, n)))
    if not numbers:
        raise SystemExit(f"--model {path!r} holds no saved_model.pb and no version folder.")
    return os.path.join(path, str(numbers[-1]))


def _metadata(path):
    file = os.path.join(path, "assets.extra", "keras_hsum.json")
    if not os.path.isfile(file):
        return {}
    with open(file) as handle:
        return json.load(handle)


def _load_text_kernels(tf, use_package):
    """Registers the TF Text ops: the kernels' .so files (default, as in
    tests/export/run_saved_model.py: the Python package imports tf.keras),
    or `import tensorflow_text` (`--tensorflow-text`). Returns which."""
    import glob
    import importlib.util

    if not use_package:
        spec = importlib.util.find_spec("tensorflow_text")  # does not import it
        folder = spec.submodule_search_locations[0]
        for library in sorted(glob.glob(os.path.join(folder, "python", "ops", "*.so"))):
            tf.load_op_library(library)
        return "tf.load_op_library(tensorflow_text/python/ops/*.so)"
    import tensorflow_text  # noqa: F401

    return "import tensorflow_text"


def _requests(examples):
    """One client request per example: the signature name and its inputs
    (what `keras-hsum summarize` sends: `render_documents`, the context
    signature when the example has a title or query)."""
    from keras_hsum.data.reader import render_documents

    requests = []
    for example in examples:
        documents = render_documents(example) or [""]
        if example.title or example.query:
            requests.append(("summarize_with_context", {
                "documents": [documents], "title": [example.title or ""],
                "query": [example.query or ""],
            }))
        else:
            requests.append(("serving_default", {"documents": [documents]}))
    return requests


def _batch(requests):
    """The requests as one call (documents padded with "" to one width)."""
    name = ("summarize_with_context"
            if any(n == "summarize_with_context" for n, _ in requests) else "serving_default")
    rows = [inputs["documents"][0] for _, inputs in requests]
    width = max(len(row) for row in rows)
    inputs = {"documents": [row + [""] * (width - len(row)) for row in rows]}
    if name == "summarize_with_context":
        inputs["title"] = [i.get("title", [""])[0] for _, i in requests]
        inputs["query"] = [i.get("query", [""])[0] for _, i in requests]
    return name, inputs


def _caller(tf, loaded):
    signatures = dict(loaded.signatures)

    def call(request):
        """Runs one request; returns (summaries, error texts)."""
        name, inputs = request
        name = name if name in signatures else "serving_default"
        if name == "serving_default":
            inputs = {"documents": inputs["documents"]}
        outputs = signatures[name](**{k: tf.constant(v, tf.string) for k, v in inputs.items()})
        summaries = outputs["summary"].numpy()
        errors = outputs["error"].numpy() if "error" in outputs else [b""] * len(summaries)
        return list(summaries), [e.decode("utf-8", "replace") for e in errors]

    return call


def _rss():
    import gc

    import psutil

    gc.collect()
    return psutil.Process().memory_info().rss


def drive(call, requests, clients, seconds, max_requests, trace_every=0):
    """`clients` threads send `requests` (round robin) until `seconds` have
    passed or `max_requests` were sent, whichever comes first; a request in
    flight at the deadline completes and counts. Returns the latencies, the
    error messages, the wall time and (with `trace_every`) `(done, RSS)`
    every `trace_every` completed requests."""
    import threading

    lock = threading.Lock()
    state = {"issued": 0, "done": 0}
    latencies, errors, trace = [], [], []
    start = time.perf_counter()
    deadline = start + seconds

    def client():
        while True:
            with lock:
                if state["issued"] >= max_requests or time.perf_counter() >= deadline:
                    return
                index = state["issued"]
                state["issued"] += 1
            request = requests[index % len(requests)]
            began = time.perf_counter()
            try:
                _, messages = call(request)
                failure = next((m for m in messages if m), None)
            except Exception as error:  # noqa: BLE001 - counted as an error
                failure = f"{type(error).__name__}: {error}"[:300]
            elapsed = time.perf_counter() - began
            with lock:
                latencies.append(elapsed)
                if failure:
                    errors.append(failure)
                state["done"] += 1
                if trace_every and state["done"] % trace_every == 0:
                    trace.append((state["done"], _rss()))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.perf_counter() - start, trace


def _stats(latencies, errors, wall, clients, seconds):
    import numpy as np

    values = np.asarray(latencies) if latencies else np.zeros([1])
    return {
        "clients": clients, "seconds_bound": seconds, "wall_s": wall,
        "requests": len(latencies), "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "throughput_rps": len(latencies) / wall if wall else 0.0,
        "p50_s": float(np.percentile(values, 50)),
        "p99_s": float(np.percentile(values, 99)),
        "mean_s": float(values.mean()), "max_s": float(values.max()),
    }


def load_main(args):
    """Concurrent clients, memory and batching against loaded SavedModels."""
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.reader import read_jsonl

    examples = list(read_jsonl(sample_path("qmsum_goldspan", "val")))
    if args.examples:
        examples = examples[:args.examples]
    requests = _requests(examples)
    if not args.tensorflow_text:
        for name in BLOCKED:
            sys.modules[name] = None  # `import keras` now fails, as in TF Serving
    import numpy as np
    import tensorflow as tf

    text_kernels = _load_text_kernels(tf, args.tensorflow_text)
    rss_start = _rss()
    models = []
    for given in args.model:
        path = _version_folder(given)
        metadata = _metadata(path)
        label = f"{given} ({'jit' if metadata.get('jit_compile') else 'no jit'})"
        print(f"== {label}", flush=True)
        rss_before_load = _rss()
        began = time.perf_counter()
        loaded = tf.saved_model.load(path)
        load_s = time.perf_counter() - began
        call = _caller(tf, loaded)
        began = time.perf_counter()
        call(requests[0])
        first_s = time.perf_counter() - began
        for request in requests[1:args.warmup]:
            call(request)
        row = {
            "model": given, "version_folder": path, "label": label,
            "jit_compile": bool(metadata.get("jit_compile")),
            "recipe": metadata.get("recipe"), "search": metadata.get("search"),
            "structure_options": metadata.get("structure_options"),
            "load_s": load_s, "first_call_s": first_s,
            "rss_before_load_mib": rss_before_load / 2**20,
            "rss_after_warmup_mib": _rss() / 2**20, "settings": [],
        }
        # Memory first (after warm-up only), the strictest place to see growth.
        if args.memory_requests:
            before = _rss()
            latencies, errors, wall, trace = drive(
                call, requests, args.memory_clients, args.memory_seconds,
                args.memory_requests, trace_every=max(1, args.memory_requests // 10),
            )
            after = _rss()
            row["memory"] = {
                "requests_asked": args.memory_requests, "requests": len(latencies),
                "clients": args.memory_clients, "seconds_bound": args.memory_seconds,
                "wall_s": wall, "errors": len(errors),
                "error_examples": sorted(set(errors))[:3],
                "rss_before_mib": before / 2**20, "rss_after_mib": after / 2**20,
                "growth_pct": 100.0 * (after - before) / before,
                "trace_mib": [(done, rss / 2**20) for done, rss in trace],
            }
            print(f"   memory: {len(latencies)} requests, {args.memory_clients} clients, "
                  f"{wall:.1f} s, RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB "
                  f"({row['memory']['growth_pct']:+.2f}%), {len(errors)} errors", flush=True)
        for clients in args.clients:
            latencies, errors, wall, _ = drive(
                call, requests, clients, args.seconds, args.max_requests
            )
            stats = _stats(latencies, errors, wall, clients, args.seconds)
            row["settings"].append(stats)
            print(f"   {clients:>2} clients: {stats['requests']} requests in {wall:.1f} s, "
                  f"{stats['throughput_rps']:.2f} req/s, p50 {stats['p50_s']:.3f} s, "
                  f"p99 {stats['p99_s']:.3f} s, {stats['errors']} errors", flush=True)
        # Batched: the same texts in one call vs as many single calls.
        group = requests[:args.batch]
        batched = _batch(group)
        call(batched)  # warm-up: a new batch size (XLA compiles per shape)
        batch_times, single_times = [], []
        for _ in range(args.batch_repeats):
            began = time.perf_counter()
            batch_summaries, batch_errors = call(batched)
            batch_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            single = [call(request) for request in group]
            single_times.append(time.perf_counter() - began)
        single_summaries = [s for summaries, _ in single for s in summaries]
        row["batched"] = {
            "texts": len(group), "repeats": args.batch_repeats,
            "batch_call_s": float(np.median(batch_times)), "batch_times_s": batch_times,
            "single_calls_s": float(np.median(single_times)), "single_times_s": single_times,
            "speedup": float(np.median(single_times) / np.median(batch_times)),
            "same_summaries": batch_summaries == single_summaries,
            "errors": sum(bool(e) for e in batch_errors)
            + sum(bool(e) for _, errs in single for e in errs),
        }
        print(f"   batch of {len(group)}: {row['batched']['batch_call_s']:.3f} s vs "
              f"{len(group)} single calls {row['batched']['single_calls_s']:.3f} s "
              f"({row['batched']['speedup']:.2f}x), same summaries: "
              f"{row['batched']['same_summaries']}", flush=True)
        row["rss_end_mib"] = _rss() / 2**20
        models.append(row)
        del loaded, call
    leaked = sorted(n for n in sys.modules
                    if n.split(".")[0] in BLOCKED and sys.modules[n] is not None)
    result = {
        "mode": "load",
        "texts": f"keras_hsum sample qmsum_goldspan/val ({len(examples)} examples, "
                 f"{requests[0][0]} signature)",
        "text_kernels": text_kernels, "keras_modules_imported": leaked,
        "rss_start_mib": rss_start / 2**20,
        "models": models,
        "machine": {
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "tensorflow": tf.__version__,
            "devices": [d.device_type for d in tf.config.list_physical_devices()],
        },
        "args": {k: v for k, v in vars(args).items()},
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "serving_load.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    lines = [
        "# Serving under load: concurrent clients against a loaded SavedModel",
        "",
        f"In-process clients (Python threads) call the SavedModel's signature as "
        f"TF Serving would (loaded with `tf.saved_model.load` in a process with "
        f"TensorFlow and the TF Text kernels only: {text_kernels}; Keras modules "
        f"imported: {leaked or 'none'}). Each request is one example of {result['texts']}, "
        f"sent round robin; a setting runs for at most {args.seconds:g} s "
        f"(or {args.max_requests} requests). Errors: an exception or a non-empty "
        f"`error` output. {os.cpu_count()} CPU cores, TensorFlow {tf.__version__}.",
        "",
        "| model | clients | requests | errors | throughput (req/s) | p50 (s) | p99 (s) | max (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in models:
        for s in row["settings"]:
            lines.append(
                f"| {row['label']} | {s['clients']} | {s['requests']} | {s['errors']} | "
                f"{s['throughput_rps']:.2f} | {s['p50_s']:.3f} | {s['p99_s']:.3f} | "
                f"{s['max_s']:.3f} |"
            )
    if any("memory" in row for row in models):
        lines += [
            "",
            "Resident memory (RSS of the process, after `gc.collect()`) before and after "
            "a run of requests that follows the warm-up:",
            "",
            "| model | requests | clients | wall (s) | errors | RSS before (MiB) | RSS after (MiB) | growth |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in models:
            m = row.get("memory")
            if m:
                lines.append(
                    f"| {row['label']} | {m['requests']} | {m['clients']} | {m['wall_s']:.0f} | "
                    f"{m['errors']} | {m['rss_before_mib']:.0f} | {m['rss_after_mib']:.0f} | "
                    f"{m['growth_pct']:+.2f}% |"
                )
    lines += [
        "",
        f"Batched: the same {args.batch} texts as one call vs {args.batch} sequential "
        f"single calls (median of {args.batch_repeats}, after a warm-up of the batch shape):",
        "",
        "| model | one call of 8 (s) | 8 single calls (s) | single ÷ batched | same summaries |",
        "|---|---:|---:|---:|---|",
    ]
    for row in models:
        b = row["batched"]
        lines.append(
            f"| {row['label']} | {b['batch_call_s']:.3f} | {b['single_calls_s']:.3f} | "
            f"{b['speedup']:.2f}x | {'yes' if b['same_summaries'] else 'no'} |"
        )
    lines += ["", "Load and first call (s): " + "; ".join(
        f"{row['label']}: {row['load_s']:.1f} / {row['first_call_s']:.1f}" for row in models)]
    with open(os.path.join(RESULTS, "serving_load.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _counts(text):
    return [int(part) for part in text.split(",") if part]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=os.path.join(REPO, "runs", "tiny_recipes", "pht"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--paragraphs", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=100)
    load = parser.add_argument_group("--load: concurrent clients against exported SavedModels")
    load.add_argument("--load", action="store_true",
                      help="run the load test on the --model SavedModels instead")
    load.add_argument("--model", action="append", default=[],
                      help="a SavedModel base path or version folder (repeatable)")
    load.add_argument("--clients", type=_counts, default=[1, 4, 16],
                      help="client thread counts, comma separated (default 1,4,16)")
    load.add_argument("--seconds", type=float, default=20.0,
                      help="time bound of each client setting")
    load.add_argument("--max-requests", type=int, default=10000,
                      help="count bound of each client setting")
    load.add_argument("--memory-requests", type=int, default=1000,
                      help="requests between the two RSS readings (0: skip)")
    load.add_argument("--memory-clients", type=int, default=4)
    load.add_argument("--memory-seconds", type=float, default=600.0,
                      help="time bound of the memory run (fewer requests if reached)")
    load.add_argument("--batch", type=int, default=8, help="texts in the batched call")
    load.add_argument("--batch-repeats", type=int, default=3)
    load.add_argument("--warmup", type=int, default=4, help="requests before timing")
    load.add_argument("--examples", type=int, default=0,
                      help="use the first N validation examples (0: all)")
    load.add_argument("--tensorflow-text", action="store_true",
                      help="`import tensorflow_text` (imports tf.keras) instead of "
                      "loading its kernels")
    args = parser.parse_args(argv)
    if args.load:
        if not args.model:
            parser.error("--load needs at least one --model")
        return load_main(args)
    return latency_main(args)


if __name__ == "__main__":
    main(sys.argv[1:])
