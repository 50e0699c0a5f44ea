"""`keras-hsum evaluate`: ROUGE of an extractive baseline (or, later, a model).

    keras-hsum evaluate --baseline lead3 --data DATA --split val \\
        [--out report.json] [--plot chart.png] [--markdown table.md] \\
        [--max-examples N] [--references primary|max|mean]

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


class ModelNotAvailableError(RuntimeError):
    """Evaluating an exported model is not wired up yet."""


def add_parser(subparsers):
    """Adds the `evaluate` command to an argparse subparsers object.

    Args:
        subparsers: the object returned by `parser.add_subparsers()`.

    Returns:
        The new `argparse.ArgumentParser`; its default `handler` is `run`.
    """
    from keras_hsum.evaluation.baselines import BASELINES

    parser = subparsers.add_parser(
        "evaluate", help="ROUGE of extractive baselines (or a model) on a corpus"
    )
    system = parser.add_argument_group("system (at least one)")
    system.add_argument(
        "--baseline",
        action="append",
        choices=list(BASELINES),
        help="an extractive baseline; repeat to compare several",
    )
    system.add_argument(
        "--model", help="a SavedModel folder (not available yet)"
    )
    parser.add_argument(
        "--data",
        required=True,
        help="JSONL(.gz) file, folder with <split>.jsonl.gz, folder, or dataset name",
    )
    parser.add_argument("--split", default="val", help="split name (default val)")
    parser.add_argument("--max-examples", type=int, default=0, help="0: all")
    parser.add_argument(
        "--max-sentences", type=int, default=None,
        help="sentence budget (default: 3, the oracle: until no ROUGE gain)",
    )
    parser.add_argument("--max-words", type=int, default=None, help="word budget")
    parser.add_argument(
        "--references", default="primary", choices=["primary", "max", "mean"],
        help="score against the primary summary, or max/mean over all references",
    )
    parser.add_argument("--num-resamples", type=int, default=1000, help="bootstrap B")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument("--out", help="write the report(s) as JSON here")
    parser.add_argument("--markdown", help="write a markdown table here")
    parser.add_argument("--plot", help="write a PNG bar chart here")
    parser.set_defaults(handler=run)
    return parser


def resolve_data(data, split):
    """The file or folder to read for `--data DATA --split SPLIT` (a str)."""
    if os.path.isfile(data):
        return data
    if os.path.isdir(data):
        for name in (f"{split}.jsonl.gz", f"{split}.jsonl"):
            candidate = os.path.join(data, name)
            if os.path.isfile(candidate):
                return candidate
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


def _baseline_system(name, max_sentences, max_words):
    from keras_hsum.evaluation.baselines import get_baseline

    function = get_baseline(name)
    if max_sentences is None and max_words is None and name != "oracle":
        max_sentences = 3
    return_budget = {"max_sentences": max_sentences, "max_words": max_words}
    return lambda example: function(example, **return_budget)


def run(args):
    """Runs `evaluate` for parsed `args`; returns the process exit code."""
    from keras_hsum.data.reader import read_examples
    from keras_hsum.evaluation import report as reporting

    if args.model:
        raise ModelNotAvailableError(
            f"--model {args.model!r}: evaluating an exported model is not "
            "available yet: exporting arrives with the export issue. Use "
            "--baseline lead3|lexrank|textrank|oracle for now."
        )
    if not args.baseline:
        print("evaluate: give at least one --baseline (or --model).", file=sys.stderr)
        return 2
    path = resolve_data(args.data, args.split)
    examples = read_examples(path)
    if args.max_examples:
        examples = itertools.islice(examples, args.max_examples)
    examples = [e for e in examples if e.sentences()]
    if not examples:
        print(f"evaluate: no example with text in {path}.", file=sys.stderr)
        return 1
    reports = []
    for name in args.baseline:
        reports.append(
            reporting.evaluate(
                _baseline_system(name, args.max_sentences, args.max_words),
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
        reporting.plot(reports, args.plot)
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
