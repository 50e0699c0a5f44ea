"""`keras-hsum evaluate`: ROUGE of exported models and extractive baselines.

    keras-hsum evaluate --model saved_models/pht/1 --baseline textrank \\
        --data DATA --split val [--out report.json] [--plot chart.png] \\
        [--markdown table.md] [--max-examples N]
        [--references primary|max|mean|max_rouge1]

Models and baselines go through one code path: each is a system that maps
an `Example` to a summary, scored by `keras_hsum.evaluation.report.evaluate`.
A model is an exported SavedModel (`keras-hsum export`): it receives the
example's raw text exactly as `keras-hsum summarize` sends it, so the score
is the score of what a TF Serving client would get. Examples whose request
returns an error tensor are scored as empty summaries and listed under
`errors` in the report (never dropped).

DATA is a JSONL(.gz) file, a folder holding `<split>.jsonl.gz`, a folder of
corpus files, or a dataset name (`qmsum_goldspan`: `corpus_path(name,
split)`). Several `--baseline`s may be given; they are compared in one table
and one chart. Also runnable on its own: `python -m keras_hsum.evaluation.cli
evaluate ...`.
"""

import argparse
import itertools
import os
import sys

from keras_hsum.argtypes import non_negative_int
from keras_hsum.argtypes import positive_int
from keras_hsum.argtypes import unwritable_output
from keras_hsum.checks import check_int
from keras_hsum.features import ERROR
from keras_hsum.features import SUMMARY


def add_parser(subparsers):
    """Adds the `evaluate` command to an argparse subparsers object.

    Args:
        subparsers: the object returned by `parser.add_subparsers()`.

    Returns:
        The new `argparse.ArgumentParser`; its default `handler` is `run`.
    """
    from keras_hsum.evaluation.baselines import BASELINES

    parser = subparsers.add_parser(
        "evaluate", help="ROUGE of exported models and extractive baselines on a corpus"
    )
    system = parser.add_argument_group("system (at least one)")
    system.add_argument(
        "--baseline",
        action="append",
        choices=list(BASELINES),
        help="an extractive baseline; repeat to compare several",
    )
    system.add_argument(
        "--model",
        action="append",
        help="an exported SavedModel (saved_models/<name> for its latest "
        "version, or saved_models/<name>/<version>); repeat to compare several",
    )
    system.add_argument(
        "--name",
        action="append",
        help="display names of the --model systems, in order (default: "
        "<recipe>/<version>)",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=8, help="examples per SavedModel request"
    )
    parser.add_argument(
        "--data",
        required=True,
        help="JSONL(.gz) file, folder with <split>.jsonl.gz, folder, or dataset name",
    )
    parser.add_argument("--split", default="val", help="split name (default val)")
    parser.add_argument("--max-examples", type=non_negative_int, default=0, help="0: all")
    parser.add_argument(
        "--max-sentences", type=positive_int, default=None,
        help="sentence budget (default: 3, the oracle: until no ROUGE gain)",
    )
    parser.add_argument("--max-words", type=positive_int, default=None, help="word budget")
    parser.add_argument(
        "--references", default="primary", choices=["primary", "max", "mean", "max_rouge1"],
        help="score against the primary summary, or over all references: the best "
        "per metric (max), the mean (mean), or every metric against the reference "
        "of best ROUGE-1 (max_rouge1, SciTLDR's protocol)",
    )
    parser.add_argument("--num-resamples", type=positive_int, default=1000, help="bootstrap B")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument("--out", help="write the report(s) as JSON here")
    parser.add_argument("--markdown", help="write a markdown table here")
    parser.add_argument("--plot", help="write a PNG bar chart here")
    parser.set_defaults(handler=run)
    return parser


def _jsonl_stems(folder):
    stems = set()
    for name in os.listdir(folder):
        for suffix in (".jsonl.gz", ".jsonl"):
            if name.endswith(suffix) and os.path.isfile(os.path.join(folder, name)):
                stems.add(name[: -len(suffix)])
    return sorted(stems)


def resolve_data(data, split):
    """The file or folder to read for `--data DATA --split SPLIT` (a str).

    A folder holding `SPLIT.jsonl[.gz]` gives that file. A folder of split
    files (train, val, validation, dev or test .jsonl[.gz]) without SPLIT is
    an error naming the splits it holds, never read whole: `--split tst` must
    not score every split. Any other folder is read whole (a folder of
    corpus files)."""
    if os.path.isfile(data):
        return data
    if os.path.isdir(data):
        for name in (f"{split}.jsonl.gz", f"{split}.jsonl"):
            candidate = os.path.join(data, name)
            if os.path.isfile(candidate):
                return candidate
        from keras_hsum.data.corpora import SPLIT_FILE_STEMS

        # Split files mark a folder of splits, never read whole.
        stems = _jsonl_stems(data)
        if any(stem in names for names in SPLIT_FILE_STEMS.values() for stem in stems):
            raise FileNotFoundError(
                f"--data folder {data!r} holds the splits {stems} but no "
                f"{split}.jsonl or {split}.jsonl.gz; expected --split to be one of them."
            )
        return data
    from keras_hsum.data.corpora import DATASETS
    from keras_hsum.data.corpora import corpus_path

    if data in DATASETS:
        return corpus_path(data, split)
    raise FileNotFoundError(
        f"--data {data!r} is neither a file, a folder, nor a dataset name; "
        f"expected a JSONL file, a folder holding {split}.jsonl.gz, or one of "
        f"{', '.join(DATASETS)}."
    )


def _data_label(data):
    """A short name for `--data` in a chart title: a dataset name as given, a
    folder's name, or a file's folder and name. The examples' own `dataset`
    field can name several corpora alike (both QMSum subsets say "qmsum")."""
    if os.path.isdir(data):
        return os.path.basename(os.path.normpath(data))
    if os.path.isfile(data):
        path = os.path.normpath(data)
        return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
    return data


def _has_reference(example, mode):
    """Whether `example` has what `--references mode` scores against (the
    rule `report.evaluate` applies)."""
    from keras_hsum.evaluation.report import scored_references

    try:
        scored_references(example, mode)
    except ValueError:
        return False
    return True


def _baseline_system(name, max_sentences, max_words, references="primary"):
    from keras_hsum.evaluation.baselines import get_baseline

    function = get_baseline(name)
    if max_sentences is None and max_words is None and name != "oracle":
        max_sentences = 3
    budget = {"max_sentences": max_sentences, "max_words": max_words}
    if name == "oracle":
        from keras_hsum.evaluation.baselines import scored_oracle

        return lambda example: scored_oracle(example, references, **budget)
    return lambda example: function(example, **budget)


def model_system(path, batch_size=8, name=None, verbose=True):
    """An exported SavedModel as an evaluation system.

    Args:
        path: a SavedModel version folder, or its parent (latest version).
        batch_size: examples per request.
        name: the system's name (default `<recipe>/<version>`).
        verbose: show a progress bar while summarizing.

    Returns:
        `(name, summarize, info)`: `summarize(examples)` returns one summary
        str per example (an empty str where the model answered with an
        error, recorded in `info["errors"]` as {id: message}); `info` also
        holds the version folder and the export metadata.
    """
    from keras_hsum.export.exporter import load_saved_model
    from keras_hsum.export.exporter import summarize_examples

    batch_size = check_int("batch_size", batch_size)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"--model {path!r} does not exist; expected a SavedModel folder "
            "written by `keras-hsum export` (saved_models/<name>/<version>)."
        )
    version_path, loaded, metadata = load_saved_model(path)
    if name is None:
        recipe = metadata.get("recipe") or os.path.basename(
            os.path.dirname(os.path.abspath(version_path))
        )
        name = f"{recipe}/{os.path.basename(os.path.normpath(version_path))}"
    info = {"path": os.path.abspath(version_path), "metadata": metadata, "errors": {}}

    def summarize(examples):
        examples = list(examples)
        progress = None
        if verbose:
            import keras

            progress = keras.utils.Progbar(len(examples), unit_name="example")
        summaries = []
        for start in range(0, len(examples), batch_size):
            batch = examples[start:start + batch_size]
            for example, result in zip(batch, summarize_examples(loaded, batch, batch_size)):
                error = _text(result.get(ERROR, b""))
                if error:
                    info["errors"][example.id] = error
                    summaries.append("")
                else:
                    summaries.append(_text(result[SUMMARY]))
            if progress is not None:
                progress.add(len(batch))
        return summaries

    return name, summarize, info


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def run(args):
    """Runs `evaluate` for parsed `args`; returns the process exit code."""
    from keras_hsum.data.reader import read_examples
    from keras_hsum.evaluation import report as reporting

    models = args.model or []
    names = args.name or []
    if not models and not args.baseline:
        print("evaluate: give at least one --model or --baseline.", file=sys.stderr)
        return 2
    if len(names) > len(models):
        print(
            f"evaluate: {len(names)} --name given for {len(models)} --model; "
            "expected at most one name per model.",
            file=sys.stderr,
        )
        return 2
    try:
        path = resolve_data(args.data, args.split)
    except FileNotFoundError as error:
        print(f"evaluate: error: {error}", file=sys.stderr)
        return 2
    examples = read_examples(path)
    if args.max_examples:
        examples = itertools.islice(examples, args.max_examples)
    try:
        examples = list(examples)
    except (ValueError, OSError) as error:  # InvalidExampleError is a ValueError
        print(f"evaluate: error: {error}", file=sys.stderr)
        return 1
    read = len(examples)
    examples = [e for e in examples if e.sentences()]
    if not examples:
        print(f"evaluate: no example with text in {path}.", file=sys.stderr)
        return 1
    if len(examples) < read:
        print(
            f"evaluate: {read - len(examples)} of {read} examples in {path} have no "
            "source text and are not scored.",
            file=sys.stderr,
        )
    with_text = len(examples)
    examples = [e for e in examples if _has_reference(e, args.references)]
    if not examples:
        print(f"evaluate: no example in {path} has a reference summary to score "
              "against.", file=sys.stderr)
        return 1
    if len(examples) < with_text:
        print(
            f"evaluate: {with_text - len(examples)} of {read} examples in {path} have no "
            "reference summary and are not scored.",
            file=sys.stderr,
        )
    for flag, output in (("--out", args.out), ("--markdown", args.markdown),
                         ("--plot", args.plot)):
        problem = unwritable_output(output)
        if problem:
            print(f"evaluate: error: {flag} {output!r}: {problem}", file=sys.stderr)
            return 2
    reports = []
    for index, model in enumerate(models):
        try:
            name, summarize, info = model_system(
                model, args.batch_size, names[index] if index < len(names) else None
            )
        except (FileNotFoundError, ValueError, OSError) as error:
            print(f"evaluate: error: {error}", file=sys.stderr)
            return 1
        print(f"Summarizing {len(examples)} examples with {info['path']}")
        summaries = summarize(examples)
        report = reporting.evaluate(
            summaries,
            examples,
            name=name,
            references=args.references,
            num_resamples=args.num_resamples,
            seed=args.seed,
        )
        report["data"] = path
        report["model"] = info["path"]
        report["export"] = info["metadata"]
        report["errors"] = info["errors"]
        if info["errors"]:
            print(
                f"evaluate: {len(info['errors'])} of {len(examples)} requests to "
                f"{name} returned an error (scored as empty summaries; listed "
                "under 'errors' in the report).",
                file=sys.stderr,
            )
        reports.append(report)
    for name in args.baseline or []:
        reports.append(
            reporting.evaluate(
                _baseline_system(name, args.max_sentences, args.max_words, args.references),
                examples,
                name=name,
                references=args.references,
                num_resamples=args.num_resamples,
                seed=args.seed,
            )
        )
        reports[-1]["data"] = path
    print(f"{len(examples)} examples from {path}; ROUGE F1 x100 [95% bootstrap CI]")
    print(reporting.markdown_table(reports))
    if args.out:
        reporting.write_json(reports[0] if len(reports) == 1 else reports, args.out)
        print(f"Wrote {args.out}")
    if args.markdown:
        reporting.write_markdown(reports, args.markdown)
        print(f"Wrote {args.markdown}")
    if args.plot:
        confidence = reports[0]["bootstrap"]["confidence"]
        reporting.plot(reports, args.plot, title=(
            f"{_data_label(args.data)} ({args.split} split, {len(examples)} examples; "
            f"error bars: {100 * confidence:.0f}% bootstrap CI)"))
        print(f"Wrote {args.plot}")
    return 0


def main(argv=None):
    """`python -m keras_hsum.evaluation.cli evaluate ...`."""
    parser = argparse.ArgumentParser(prog="keras-hsum")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
