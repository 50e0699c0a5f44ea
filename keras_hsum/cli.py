"""The `keras-hsum` command line.

    keras-hsum demo                      the README's main job on bundled real data
    keras-hsum vocab  --data D --out F   train a SentencePiece vocabulary on a corpus
    keras-hsum structure --data D --vocab F --family paragraphs
                                         structure a corpus, print shapes and truncation

Commands for training, export, summarizing and evaluation arrive with the
issues that build those parts.
"""

import argparse
import os
import sys


def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _vocab(args):
    from keras_hsum.data.reader import ReadReport
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    report = ReadReport()
    examples = read_examples(args.data, skip_invalid=True, report=report)
    vocabulary = Vocabulary.train(
        corpus_sentences(examples), vocabulary_size=args.size
    )
    vocabulary.save(args.out)
    print(
        f"Trained a {vocabulary.vocabulary_size}-piece vocabulary on "
        f"{report.examples} examples ({report.skipped} invalid lines skipped); "
        f"wrote {args.out}."
    )
    return 0


def _structure(args):
    import numpy as np

    from keras_hsum.data import structure
    from keras_hsum.data.reader import ReadReport
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary

    vocabulary = Vocabulary.load(args.vocab)
    builder = structure.BUILDERS[args.family]
    total = structure.TruncationReport()
    read_report = ReadReport()
    rows = []
    failures = 0
    for example in read_examples(args.data, skip_invalid=True, report=read_report):
        try:
            result = builder(example, vocabulary, args.max_units, args.max_tokens)
        except ValueError as error:
            failures += 1
            print(f"skipped {example.id}: {error}", file=sys.stderr)
            continue
        total.merge(result.report)
        rows.append(result.features["tokens"].shape[0])
        if args.limit and len(rows) >= args.limit:
            break
    print(
        f"{args.family}: {len(rows)} examples, rows per example "
        f"mean {np.mean(rows):.1f} max {max(rows, default=0)} (P <= {args.max_units}, "
        f"T = {args.max_tokens}); {failures} examples could not be structured; "
        f"{read_report.skipped} invalid lines skipped."
    )
    print(total)
    return 0


def _demo(args):
    from keras_hsum import demo

    return demo.run(out_dir=args.out, vocabulary_size=args.vocabulary_size)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-hsum",
        description="Hierarchical summarization with Keras 3 (keras_hsum).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run the demo on bundled real data")
    demo.add_argument("--out", default="demo_out", help="output folder")
    demo.add_argument("--vocabulary-size", type=int, default=8000)
    demo.set_defaults(handler=_demo)

    vocab = commands.add_parser("vocab", help="train a SentencePiece vocabulary")
    vocab.add_argument("--data", required=True, help="JSONL/text file or folder")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.add_argument("--size", type=int, default=8000, help="vocabulary size V")
    vocab.set_defaults(handler=_vocab)

    struct = commands.add_parser(
        "structure", help="structure a corpus and report truncation"
    )
    struct.add_argument("--data", required=True, help="JSONL/text file or folder")
    struct.add_argument("--vocab", required=True, help="SentencePiece .model file")
    struct.add_argument(
        "--family",
        default="paragraphs",
        choices=["paragraphs", "sections", "snippets", "sentences"],
    )
    struct.add_argument("--max-units", type=int, default=30, help="P")
    struct.add_argument("--max-tokens", type=int, default=100, help="T")
    struct.add_argument("--limit", type=int, default=0, help="stop after N examples")
    struct.set_defaults(handler=_structure)
    return parser


def main(argv=None):
    _quiet_tensorflow()
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
