"""`keras-hsum export` and `keras-hsum summarize`: the command line of
`keras_hsum.export.exporter`.

    keras-hsum export --run runs/pht [--out saved_models/pht]
        [--predictor-run runs/pht_predictor] [--ranker-run runs/ranker]
        [--extractive-alignment BETA] [--version N]
        [--preset default|paper] [--beam-size K]
        [--max-length L] [--block-ngrams 3] [--serving-root /models]
        [--max-request-bytes N]
    keras-hsum summarize --model saved_models/pht/1 input.jsonl|input.txt
        [--explain out.png] [--batch-size 8] [--jsonl]

`export` exports a run folder written by `keras-hsum train` as a
text-in / text-out SavedModel in the next version folder of `--out` and
rewrites `models.config` next to `--out` (see docs/serving.md). Without
`--out` the base path is `saved_models/<the run folder's name>` under the
current directory (`DEFAULT_EXPORT_ROOT`), so `models.config` is
`./saved_models/models.config`. `--preset paper` decodes as the recipe's
paper does (the recipe's `DECODING["paper"]`; `decoding_settings`); decoding
flags given on the command line override it.

`summarize` loads a SavedModel and prints one summary per example. The input
is a JSONL file of examples (`keras_hsum.data.reader`) or a text file where
a blank line separates paragraphs, a `===` line starts a section and a `---`
line starts a document. `--explain` writes a PNG: the paragraph attention
per output token (PHT, HT, ...), the snippet selection per segment (SEAL)
or the sentence scores (SHTE).

As the entry point, this module gives the library the recipe registry
(`keras_hsum.recipes`): `load_run` and `export_run` here are the library's
with `recipes` bound. The commands are added to the main parser by
`add_parsers(subparsers)`.
"""

import dataclasses
import json
import os
import sys

from keras_hsum import features
from keras_hsum.argtypes import non_negative_int
from keras_hsum.argtypes import positive_int
from keras_hsum.argtypes import unwritable_output
from keras_hsum.export import exporter
from keras_hsum.export.exporter import DEFAULT_EXPORT_ROOT
from keras_hsum.export.exporter import PRESET
from keras_hsum.export.exporter import PRESETS
from keras_hsum.export.exporter import ExportOptions
from keras_hsum.export.exporter import as_text
from keras_hsum.export.exporter import load_saved_model
from keras_hsum.export.exporter import summarize_examples
from keras_hsum.export.exporter import write_explanations


def load_run(run, checkpoint="last", flag="--run"):
    """`exporter.load_run` with the recipes of `keras_hsum.recipes`."""
    from keras_hsum import recipes

    return exporter.load_run(run, checkpoint, flag, recipes=recipes)


def export_run(run, out, **keywords):
    """`exporter.export_run` with the recipes of `keras_hsum.recipes`."""
    from keras_hsum import recipes

    return exporter.export_run(run, out, recipes=recipes, **keywords)


def decoding_flags(args):
    """The decoding settings given on the `export` command line (a dict of
    `DECODING_DEFAULTS` keys; a flag left out is absent: the preset's)."""
    given = {
        "beam_size": args.beam_size,
        "length_alpha": args.length_alpha,
        "block_ngrams": args.block_ngrams,
        "block_recent": args.block_recent,
        "recent_exceptions": PRESET if args.recent_exception is None
        else tuple(args.recent_exception),
        "alignment_beta": args.alignment_beta,
    }
    return {key: value for key, value in given.items() if value is not PRESET}


def _export(args):
    from keras_hsum.decoding.sampling import Sampling

    defaults = dataclasses.asdict(Sampling())
    sampling = {key: getattr(args, key) for key in defaults}
    try:
        changed = [f"--{key.replace('_', '-')}" for key, value in sampling.items()
                   if value != defaults[key]]
        if changed and not args.sample:
            raise ValueError(f"{', '.join(changed)} set a sampling search: add --sample.")
        out = args.out or os.path.join(
            DEFAULT_EXPORT_ROOT, os.path.basename(os.path.abspath(args.run)))
        options = ExportOptions(
            version=args.version, preset=args.preset, **decoding_flags(args),
            max_length=args.max_length, min_length=args.min_length,
            extractive_beta=args.extractive_alignment,
            block_unknown=not args.allow_unknown, mbr=args.mbr,
            sampling=sampling if args.sample else None,
            extract_sentences=args.extract_sentences,
            serving_root=None if args.serving_root == "" else args.serving_root,
            jit_compile=args.jit_compile, max_request_bytes=args.max_request_bytes,
        )
        path = export_run(
            args.run, out, checkpoint=args.checkpoint, predictor_run=args.predictor_run,
            ranker_run=args.ranker_run, options=options,
        )
    except (ValueError, OSError) as error:
        print(f"keras-hsum export: error: {error}", file=sys.stderr)
        return 1
    root = os.path.dirname(os.path.abspath(out))
    print(f"Exported {args.run} to {path}; TF Serving config: "
          f"{os.path.join(root, 'models.config')}")
    return 0


def _summarize(args):
    from keras_hsum.data.reader import InvalidExampleError
    from keras_hsum.data.reader import ReadReport
    from keras_hsum.data.reader import read_examples
    from keras_hsum.export.explain import MissingMatplotlibError

    if args.explain:
        problem = unwritable_output(args.explain)
        if problem:
            print(f"keras-hsum summarize: error: --explain {args.explain!r}: {problem}",
                  file=sys.stderr)
            return 1
        try:
            from keras_hsum.export.explain import pyplot

            pyplot()  # fail before the (slow) model load
        except MissingMatplotlibError as error:
            print(f"keras-hsum summarize: error: {error}", file=sys.stderr)
            return 1
    report = ReadReport()
    try:
        examples = list(read_examples(
            args.input, unicode_errors="strict" if args.strict else "replace", report=report
        ))
        path, loaded, _ = load_saved_model(args.model)
    except (ValueError, FileNotFoundError, InvalidExampleError) as error:
        hint = (" On the command line: drop --strict to replace invalid bytes."
                if args.strict and "unicode_errors" in str(error) else "")
        print(f"keras-hsum summarize: error: {error}{hint}", file=sys.stderr)
        return 1
    if report.ignored_files:
        print(f"keras-hsum summarize: {len(report.ignored_files)} file(s) of {args.input!r} "
              f"are neither JSONL (.jsonl, .jsonl.gz) nor text (.txt) and were not read: "
              f"{[os.path.basename(f) for f in report.ignored_files]}.", file=sys.stderr)
    if not examples:
        print(f"keras-hsum summarize: error: {args.input!r} holds no example.",
              file=sys.stderr)
        return 1
    results = summarize_examples(loaded, examples, batch_size=args.batch_size)
    failed = 0
    for example, result in zip(examples, results):
        summary = as_text(result[features.SUMMARY])
        error = as_text(result.get(features.ERROR, b""))
        failed += bool(error)
        if args.jsonl:
            record = {"id": example.id, features.SUMMARY: summary}
            if features.SCORE in result:
                record[features.SCORE] = float(result[features.SCORE])
            if error:
                record[features.ERROR] = error
            print(json.dumps(record, ensure_ascii=False))
        else:
            print(f"[{example.id}] {summary}" + (f"  (error: {error})" if error else ""))
    if args.explain:
        for written in write_explanations(args.explain, examples, results):
            print(f"wrote {written}", file=sys.stderr)
    return 1 if failed == len(results) else 0


def add_parsers(subparsers):
    """Adds `export` and `summarize` to an argparse subparsers object.

    Returns:
        `(export_parser, summarize_parser)`.
    """
    export = subparsers.add_parser(
        "export", help="write a text-in/text-out SavedModel for TF Serving"
    )
    export.add_argument("--run", required=True, help="run folder of `keras-hsum train`")
    export.add_argument(
        "--out", default=None,
        help="model base path (versions are numbered folders; models.config "
        f"is written next to it); default: ./{DEFAULT_EXPORT_ROOT}/<the run "
        "folder's name>, under the current directory",
    )
    export.add_argument(
        "--predictor-run", default=None,
        help="PHT only: a pht_predictor run; adds η̂ and attention alignment",
    )
    export.add_argument(
        "--ranker-run", default=None,
        help="HT/PHT trained with rank=learned: the ranker run to serve (default: "
        "the one the run's config.json records)",
    )
    export.add_argument(
        "--extractive-alignment", type=float, default=0.0, metavar="BETA",
        help="HT/PHT trained with rank=learned: align the summary's paragraph "
        "attention with the learned ranker's normalised scores with this β "
        "(PHT §6's extProb; 0: off)",
    )
    export.add_argument("--version", type=int, default=None, help="default: next number")
    export.add_argument(
        "--checkpoint", default="last",
        help="the run's last weights (last: model.keras), those of its best "
        "validation loss or checkpoint_monitor (best: best.keras), epoch N's "
        "(epoch-N: epochs/epoch-NNN.keras) or the mean of epochs A to B's "
        "(epochs-A-B: checkpoint averaging); epochs are kept by "
        "keep_epoch_checkpoints=true. Names joined by '+' (epoch-9+epoch-13) "
        "serve an ensemble: the mean of their next-token distributions",
    )
    export.add_argument(
        "--preset", choices=PRESETS, default="default",
        help="decoding settings: default (beam 5, |y| normalisation, no "
        "blocking) or paper (the recipe's paper: HT beam 5 + α 0.4, PHT "
        "trigram + recent-token blocking (+ β 0.8 with --predictor-run), "
        "Cohan beam 4, SEAL greedy; docs/serving.md); the decoding flags "
        "below override it",
    )
    export.add_argument("--beam-size", type=positive_int, default=PRESET,
                        help="K (1: greedy; default: the preset's, 5)")
    export.add_argument(
        "--max-length", type=positive_int, default=None,
        help="most summary tokens (default: the recipe's max_target_length - 1)",
    )
    export.add_argument("--min-length", type=non_negative_int, default=0)
    export.add_argument(
        "--length-alpha", type=float, default=PRESET,
        help="GNMT length-penalty α (default: the preset's; default preset: divide by |y|)",
    )
    export.add_argument("--block-ngrams", type=non_negative_int, default=PRESET,
                        help="n-gram blocking (0: off; default: the preset's)")
    export.add_argument("--block-recent", type=non_negative_int, default=PRESET,
                        help="recent-token blocking window (0: off; default: the preset's)")
    export.add_argument(
        "--recent-exception", action="append", metavar="PIECE",
        help="a vocabulary piece --block-recent lets repeat (repeatable; "
        "PHT blocks all but the comma: --recent-exception ,)",
    )
    export.add_argument(
        "--allow-unknown", action="store_true",
        help="let the search generate the unknown piece (blocked by default: "
        "it detokenizes to ' ⁇ ')",
    )
    export.add_argument(
        "--extract-sentences", type=positive_int, default=None,
        help="SHTE: sentences per extract (default: the run's extract_sentences)",
    )
    export.add_argument("--alignment-beta", type=float, default=PRESET,
                        help="PHT attention alignment β (with --predictor-run; default 0.8)")
    export.add_argument(
        "--mbr", action="store_true",
        help="minimum Bayes risk: serve the beam's hypothesis of highest mean "
        "ROUGE-1/2 F1 against the others instead of the highest-scoring one",
    )
    export.add_argument(
        "--sample", action="store_true",
        help="draw --beam-size independent samples instead of a beam search "
        "(with --mbr: sampling-based minimum Bayes risk decoding)",
    )
    export.add_argument("--temperature", type=float, default=1.0, help="--sample: T")
    export.add_argument("--top-k", type=non_negative_int, default=0, help="--sample: top-k (0: off)")
    export.add_argument("--top-p", type=float, default=1.0, help="--sample: nucleus p (1: off)")
    export.add_argument(
        "--epsilon", type=float, default=0.0,
        help="--sample: drop tokens below this probability (0: off)",
    )
    export.add_argument("--seed", type=int, default=0, help="--sample: seed of the draws")
    export.add_argument(
        "--serving-root", default="/models",
        help="where the server sees the models folder, for models.config "
        "('' writes absolute local paths)",
    )
    export.add_argument(
        "--jit-compile", action="store_true",
        help="XLA-compile the encoder and beam search inside the SavedModel",
    )
    export.add_argument(
        "--max-request-bytes", type=positive_int, default=None, metavar="N",
        help="the most bytes of text one row of a request may hold (its "
        "documents, title and query; default 4 MiB = 4194304); a row over it "
        "gets the 'error' output, the request's other rows their summaries",
    )
    export.set_defaults(handler=_export)

    summarize = subparsers.add_parser(
        "summarize", help="summarize JSONL or text input with an exported SavedModel"
    )
    summarize.add_argument(
        "--model", required=True,
        help="a SavedModel version folder (saved_models/pht/1) or base path (latest version)",
    )
    summarize.add_argument(
        "input", help="JSONL examples, or text (blank line = paragraph, === = section, --- = document)"
    )
    summarize.add_argument(
        "--explain", default=None, metavar="OUT.png",
        help="write a PNG: attention per token (PHT/HT), snippets per segment "
        "(SEAL) or sentence scores (SHTE); needs matplotlib",
    )
    summarize.add_argument("--batch-size", type=positive_int, default=8)
    summarize.add_argument("--jsonl", action="store_true", help="print JSON lines")
    summarize.add_argument(
        "--strict", action="store_true", help="fail on invalid UTF-8 instead of replacing it"
    )
    summarize.set_defaults(handler=_summarize)
    return export, summarize
