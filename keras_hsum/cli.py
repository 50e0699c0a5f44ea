"""The `keras-hsum` command line.

    keras-hsum demo                      the README's main job: train the tiny PHT on bundled
                                         real data, export, summarize, heatmap
    keras-hsum vocab  --data D --out F   train a SentencePiece vocabulary on a corpus
    keras-hsum structure --data D --vocab F --family paragraphs
                                         structure a corpus, print shapes and truncation
    keras-hsum preprocess --recipe pht --config tiny [--data D] --out shards/train
                     [--split train|val] [--vocab F] [--num-shards N] [--direct-num-workers K]
                                         a corpus to TFRecord shards with Apache Beam
    keras-hsum train --recipe pht --config tiny [--data D] --out runs/pht
                     [--strategy default|mirrored|multi_worker] [--set key=value ...]
                     [--data-service grpc://host:port]
                     [--backend tensorflow|jax] [--distribution data_parallel|model_parallel]
                                         train a recipe; run again to resume

    keras-hsum evaluate --baseline lead3|lexrank|textrank|oracle --data D --split val
                                         ROUGE with bootstrap confidence intervals
    keras-hsum export --run runs/pht --out saved_models/pht [--jit-compile]
                                         a text-in/text-out SavedModel (TF Serving layout)
    keras-hsum summarize --model saved_models/pht/1 input.jsonl|input.txt [--explain out.png]
                                         summaries from a SavedModel (+ attention heatmaps)
"""

import argparse
import os
import sys

from keras_hsum.argtypes import non_negative_int
from keras_hsum.argtypes import positive_float
from keras_hsum.argtypes import positive_int
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS

# `keras-hsum train --backend`: the Keras backends the trainer runs on.
BACKENDS = ("tensorflow", "jax")


def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _vocab(args):
    from keras_hsum.data.reader import ReadReport
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    report = ReadReport()
    examples = read_examples(args.data, skip_invalid=True, report=report)
    try:
        vocabulary = Vocabulary.train(
            corpus_sentences(examples), vocabulary_size=args.size
        )
        vocabulary.save(args.out)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"keras-hsum vocab: error: {error}", file=sys.stderr)
        return 1
    print(
        f"Trained a {vocabulary.vocabulary_size}-piece vocabulary on "
        f"{report.examples} examples ({report.skipped} invalid lines skipped); "
        f"wrote {args.out}."
    )
    return 0


def _structure(args):
    import numpy as np
    import tensorflow as tf

    from keras_hsum.data.pipeline import PipelineReport
    from keras_hsum.data.pipeline import structured_examples
    from keras_hsum.data.vocabulary import Vocabulary

    report = PipelineReport()
    rows = []
    try:
        vocabulary = Vocabulary.load(args.vocab)
        examples = structured_examples(
            args.data, vocabulary, args.family, args.max_units, args.max_tokens,
            report=report, require_summary=False,
        )
        for features in examples:
            rows.append(
                len(features[TOKENS]) if args.family == "flat"
                else int(features[PARAGRAPH_MASK].sum())
            )
            if args.limit and len(rows) >= args.limit:
                break
    except (OSError, ValueError, tf.errors.OpError) as error:
        print(f"keras-hsum structure: error: {error}", file=sys.stderr)
        return 1
    for message in report.errors:
        print(f"skipped {message}", file=sys.stderr)
    unit = "tokens" if args.family == "flat" else "rows"
    print(
        f"{args.family}: {len(rows)} examples, {unit} per example "
        f"mean {np.mean(rows) if rows else 0:.1f} max {max(rows, default=0)} "
        f"(P <= {args.max_units}, T = {args.max_tokens}); "
        f"{report.empty_input + report.other_errors} examples could not be "
        f"structured; {report.invalid_lines} invalid lines skipped."
    )
    print(report.truncation)
    return 0


def _number_or_text(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_overrides(config, assignments):
    """`["epochs=3", "dropout=0.0"]` → a copy of the frozen `config`.

    Values are parsed with the type of the dataclass field's default
    (int, float, bool, str; "none" gives None; a tuple takes comma-separated
    items, each an int, a float or a string, and "" gives ()).
    """
    import dataclasses

    fields = {field.name: field for field in dataclasses.fields(config)}
    changes = {}
    for assignment in assignments or ():
        name, separator, text = assignment.partition("=")
        name = name.strip().replace("-", "_")
        if not separator or name not in fields:
            raise ValueError(
                f"--set expects key=value with key one of {sorted(fields)}; "
                f"received {assignment!r}."
            )
        current = getattr(config, name)
        optional = "None" in str(fields[name].type) or current is None
        if text.lower() in ("none", "null") and (optional or not isinstance(current, str)):
            # A str field that cannot be None keeps "none" as a value (e.g.
            # SHTE's position_encoding="none").
            value = None
        elif isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--set {name} expects true/false, received {text!r}.")
            value = text.lower() in ("true", "1")
        elif isinstance(current, (int, float)):
            kind = type(current)
            try:
                value = kind(text)
            except ValueError:
                raise ValueError(
                    f"--set {name} expects {'an int' if kind is int else 'a number'}, "
                    f"received {text!r}."
                ) from None
        elif current is None:
            value = _number_or_text(text)
        elif isinstance(current, tuple):
            value = tuple(_number_or_text(item.strip()) for item in text.split(",") if item.strip())
        else:
            value = text
        changes[name] = value
    return dataclasses.replace(config, **changes)


def _train(args):
    from keras_hsum import recipes
    from keras_hsum.training import NonFiniteLossError
    from keras_hsum.training import train

    try:
        if args.backend == "jax":
            from keras_hsum.training.jax_training import initialize_processes

            # Before anything runs on JAX.
            initialize_processes(args.coordinator, args.num_processes, args.process_id)
        elif any(v is not None for v in (args.distribution, args.model_parallel,
                                         args.coordinator, args.num_processes,
                                         args.process_id)):
            raise ValueError(
                "--distribution, --model-parallel, --coordinator, --num-processes and "
                "--process-id place a JAX run; add --backend jax (TensorFlow runs use "
                "--strategy and TF_CONFIG)."
            )
        recipe = recipes.declaration(args.recipe)
        config = parse_overrides(recipe.config(args.config), args.set)
        if args.epochs is not None:
            config = config.replace(epochs=args.epochs)
        if args.steps_per_epoch is not None:
            config = config.replace(steps_per_epoch=args.steps_per_epoch)
        result = train(
            recipe,
            config,
            out=args.out,
            data=args.data,
            strategy=args.strategy,
            recipe_name=args.recipe,
            config_name=args.config,
            max_minutes=args.max_minutes,
            verbose=0 if args.quiet else 1,
            init_from=args.init_from,
            init_checkpoint=args.init_checkpoint,
            data_service=args.data_service,
            distribution=args.distribution,
            model_parallel=args.model_parallel,
        )
    except (ValueError, OSError, NonFiniteLossError) as error:
        print(f"keras-hsum train: error: {error}", file=sys.stderr)
        return 1
    last = {key: values[-1] for key, values in result.history.items() if values}
    print(
        f"Trained {args.recipe}/{args.config} for {result.steps} steps into "
        f"{result.out}"
        + (" (time budget reached)" if result.stopped_early else "")
        + "; last epoch: "
        + ", ".join(
            f"{key} {value:.4f}" for key, value in sorted(last.items())
            if key not in ("epoch", "seconds", "step")
        )
    )
    return 0


def recipe_example_structure(recipe_name, config_name, overrides, training, vocabulary):
    """The `ExampleStructure` of a recipe's config with `--set` overrides:
    its declaration's `example_structure` (module level: Beam workers
    unpickle it and call it in `setup`)."""
    from keras_hsum import recipes

    recipe = recipes.declaration(recipe_name)
    config = parse_overrides(recipe.config(config_name), overrides)
    return recipe.example_structure(config, vocabulary, training=training)


def _preprocess(args):
    import functools
    import time

    from keras_hsum import recipes
    from keras_hsum.data import corpora
    from keras_hsum.data.beam_preprocess import REASONS
    from keras_hsum.data.beam_preprocess import preprocess
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    started = time.perf_counter()
    try:
        config = parse_overrides(recipes.config(args.recipe, args.config), args.set)
        data = args.data
        if data is None:
            # As `keras-hsum train` without --data: the recipe's corpus.
            data = corpora.corpus_path(config.dataset, args.split)
            print(f"[preprocess] no --data: reading the recipe's dataset "
                  f"{config.dataset!r}, {args.split} split ({data})", file=sys.stderr)
        elif os.path.isdir(data):
            for stem in corpora.SPLIT_FILE_STEMS[args.split]:
                for suffix in (".jsonl.gz", ".jsonl", ".json.gz"):
                    candidate = os.path.join(data, stem + suffix)
                    if os.path.exists(candidate):
                        data = candidate
                        break
                if data != args.data:
                    break
        vocab = args.vocab
        if vocab is None:
            os.makedirs(args.out, exist_ok=True)
            vocab = os.path.join(args.out, "vocabulary.trained.model")
            print(f"[preprocess] training a {config.vocabulary_size}-piece vocabulary "
                  f"on {data} (give --vocab to reuse one)", file=sys.stderr)
            Vocabulary.train(
                corpus_sentences(read_examples(data, skip_invalid=True)),
                vocabulary_size=config.vocabulary_size,
            ).save(vocab)
        training = args.split == "train"
        factory = functools.partial(
            recipe_example_structure, args.recipe, args.config, list(args.set or ()),
            training,
        )
        structure = factory(Vocabulary.load(vocab))
        pipeline_args = ["--runner", args.runner]
        if args.runner == "DirectRunner":
            pipeline_args += [
                "--direct_running_mode",
                "multi_processing" if args.direct_num_workers > 1 else "in_memory",
                "--direct_num_workers", str(args.direct_num_workers),
            ]
        spec = preprocess(
            data=data, out=args.out, structure=structure, structure_factory=factory,
            vocabulary_file=vocab, num_shards=args.num_shards, recipe=args.recipe,
            config=args.config, split=args.split,
            pipeline_args=pipeline_args + list(args.pipeline_args),
        )
        if args.vocab is None:
            os.remove(vocab)
    except ImportError as error:
        print(f"keras-hsum preprocess: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"keras-hsum preprocess: error: {error}", file=sys.stderr)
        return 1
    skipped = ", ".join(f"{spec['skipped'][r]} {r}" for r in REASONS)
    print(
        f"Wrote {spec['examples']:,} examples of {args.recipe}/{args.config} "
        f"({args.split}) to {len(spec['shards'])} shards in {args.out}; read "
        f"{spec['read']:,} records, skipped {sum(spec['skipped'].values()):,} "
        f"({skipped}); {time.perf_counter() - started:.1f} s wall "
        f"(pipeline {spec['wall_seconds']:.1f} s, {spec['worker_seconds']:.1f} s in "
        "shard writers)."
    )
    for error in spec["errors"][:3]:
        print(f"  skipped: {error}")
    return 0


def _demo(args):
    from keras_hsum import demo

    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        print(f"keras-hsum demo: error: --out {args.out!r}: cannot create it "
              f"({error.strerror or error}).", file=sys.stderr)
        return 1
    return demo.run(
        out_dir=args.out, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch
    )


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-hsum",
        description="Hierarchical summarization with Keras 3 (keras_hsum).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo",
        help="train the tiny PHT on bundled real data, export it, summarize a "
        "held-out example, write the attention heatmap",
    )
    demo.add_argument("--out", default="demo_out", help="output folder")
    demo.add_argument("--epochs", type=positive_int, default=None, help="override the tiny recipe")
    demo.add_argument("--steps-per-epoch", type=positive_int, default=None)
    demo.set_defaults(handler=_demo)

    vocab = commands.add_parser("vocab", help="train a SentencePiece vocabulary")
    vocab.add_argument("--data", required=True, help="JSONL/text file or folder")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.add_argument("--size", type=positive_int, default=8000, help="vocabulary size V")
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
    struct.add_argument("--max-units", type=positive_int, default=30, help="P")
    struct.add_argument("--max-tokens", type=positive_int, default=100, help="T")
    struct.add_argument("--limit", type=non_negative_int, default=0, help="stop after N examples")
    struct.set_defaults(handler=_structure)

    prep = commands.add_parser(
        "preprocess",
        help="structure a corpus for a recipe into TFRecord shards (Apache Beam)",
        description="Structures a corpus for a recipe's config with an Apache Beam "
        "pipeline and writes a shard folder: shard-NNNNN-of-NNNNN.tfrecord files "
        "(tf.train.Example, one per example), shards.json (recipe, config, split, "
        "features with dtypes and axes, vocabulary sha256, examples per shard) and "
        "vocabulary.model. For keras-hsum train --data DIR, write DIR/train with "
        "--split train and DIR/val with --split val --vocab DIR/train/vocabulary.model. "
        "Arguments after -- go to Beam as pipeline options (e.g. Dataflow's).",
    )
    prep.add_argument(
        "--recipe", required=True,
        help="e.g. pht, ht, flat, seal, or the module path of a recipe outside "
        "keras_hsum (docs/recipes.md, 'Add a recipe')")
    prep.add_argument("--config", default="tiny", help="tiny | paper | ...")
    prep.add_argument(
        "--data", default=None,
        help="JSONL/text file, a folder of them, or a folder of train/val splits "
        "(the --split file is read); default, as for train: the --split file of "
        "the recipe's corpus under ../shared/data ($KERAS_HSUM_DATA first) or "
        "the bundled sample",
    )
    prep.add_argument("--out", required=True, help="the shard folder to write")
    prep.add_argument(
        "--split", default="train", choices=["train", "val"],
        help="structure as for training (train) or validation (val); picks the "
        "split file of a folder of splits",
    )
    prep.add_argument(
        "--vocab", default=None,
        help="SentencePiece .model (default: train one on the data with the "
        "config's vocabulary_size)",
    )
    prep.add_argument("--num-shards", type=positive_int, default=4)
    prep.add_argument("--runner", default="DirectRunner", help="Beam runner")
    prep.add_argument(
        "--direct-num-workers", type=positive_int, default=1,
        help="DirectRunner worker processes (multi_processing mode when > 1)",
    )
    prep.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a config field, as for train (the same overrides must be "
        "given to train)",
    )
    prep.add_argument("pipeline_args", nargs="*", help=argparse.SUPPRESS)
    prep.set_defaults(handler=_preprocess)

    trainer = commands.add_parser(
        "train", help="train a recipe (resumes when --out holds a run)"
    )
    trainer.add_argument(
        "--recipe", required=True,
        help="e.g. pht, ht, flat, seal, or the module path of a recipe outside "
        "keras_hsum (docs/recipes.md, 'Add a recipe')")
    trainer.add_argument("--config", default="tiny", help="tiny | paper | ...")
    trainer.add_argument(
        "--data", default=None,
        help="folder with train/val JSONL, or one JSONL file (default: the "
        "recipe's corpus under ../shared/data or the bundled sample), or a shard "
        "folder of keras-hsum preprocess: DIR holding the shard folders DIR/train "
        "(--split train) and DIR/val (--split val, --vocab DIR/train/vocabulary.model)",
    )
    trainer.add_argument(
        "--data-service", default=None, metavar="ADDRESS",
        help="read the training shards through tf.data service workers at "
        "ADDRESS (e.g. grpc://localhost:5000; needs a shard folder as --data)",
    )
    trainer.add_argument("--out", required=True, help="run folder")
    trainer.add_argument(
        "--strategy", default="default", choices=["default", "mirrored", "multi_worker"]
    )
    trainer.add_argument("--epochs", type=positive_int, default=None)
    trainer.add_argument("--steps-per-epoch", type=positive_int, default=None)
    trainer.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a config field (repeatable), e.g. --set dropout=0.0",
    )
    trainer.add_argument(
        "--max-minutes", type=positive_float, default=None, help="stop after this much time"
    )
    trainer.add_argument(
        "--init-from", default=None, metavar="RUN",
        help="warm-start (fine-tune) from this run folder's vocabulary and "
        "weights; the same recipe and sizes are required",
    )
    trainer.add_argument(
        "--init-checkpoint", default="last",
        help="which weights of --init-from: its last epoch's (last: model.keras, "
        "the default), those of its best validation loss or checkpoint_monitor "
        "(best: best.keras), epoch N's (epoch-N) or the mean of epochs A to B's "
        "(epochs-A-B); epochs are kept by keep_epoch_checkpoints=true",
    )
    trainer.add_argument("--quiet", action="store_true", help="no progress bar")
    jax_options = trainer.add_argument_group(
        "JAX backend", "train under JAX with keras.distribution (docs/training.md, "
        "'JAX backend')"
    )
    jax_options.add_argument(
        "--backend", choices=BACKENDS, default=None,
        help="the Keras backend to train on (default: KERAS_BACKEND, else tensorflow); "
        "set before Keras is imported",
    )
    jax_options.add_argument(
        "--distribution", choices=["data_parallel", "model_parallel"], default=None,
        help="under --backend jax: data_parallel (the default: every device holds the "
        "weights, batches are split) or model_parallel (embedding, attention and "
        "feed-forward weights split over a 'model' mesh axis)",
    )
    jax_options.add_argument(
        "--model-parallel", type=positive_int, default=None, metavar="M",
        help="with --distribution model_parallel: devices on the 'model' mesh axis "
        "(default: all; the rest split the batch)",
    )
    jax_options.add_argument(
        "--coordinator", default=None, metavar="HOST:PORT",
        help="several JAX processes (hosts): process 0's address, the same in every "
        "process (or KERAS_DISTRIBUTION_JOB_ADDRESSES)",
    )
    jax_options.add_argument(
        "--num-processes", type=positive_int, default=None, metavar="N",
        help="the number of JAX processes (or KERAS_DISTRIBUTION_NUM_PROCESSES)",
    )
    jax_options.add_argument(
        "--process-id", type=non_negative_int, default=None, metavar="I",
        help="this process's index, 0 to N-1; 0 writes --out "
        "(or KERAS_DISTRIBUTION_PROCESS_ID)",
    )
    trainer.set_defaults(handler=_train)

    from keras_hsum.evaluation import cli as evaluation_cli

    evaluation_cli.add_parser(commands)

    from keras_hsum.export import cli as export_cli

    export_cli.add_parsers(commands)
    return parser


def requested_backend(argv):
    """The backend that `keras-hsum train --backend B` asks for in `argv`
    (None when not given, or for another command)."""
    if not argv or argv[0] != "train":
        return None
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", choices=BACKENDS, default=None)
    known, _ = parser.parse_known_args(argv[1:])
    return known.backend


def select_backend(argv):
    """Sets KERAS_BACKEND from `train --backend` before Keras is imported
    (building the parser imports it), and records the backend in use.

    Returns:
        None, or an error message when Keras was already imported in this
        process with another backend (a caller of `main` that imported it).
    """
    backend = requested_backend(argv)
    if backend is None:
        return None
    if "keras" in sys.modules:
        import keras

        running = keras.backend.backend()
        if running != backend:
            return (
                f"--backend {backend}: Keras was already imported in this process with "
                f"the {running!r} backend, which cannot change; run keras-hsum in a new "
                f"process (or set KERAS_BACKEND={backend} before importing keras)."
            )
    os.environ["KERAS_BACKEND"] = backend
    return None


def main(argv=None):
    _quiet_tensorflow()
    argv = sys.argv[1:] if argv is None else list(argv)
    error = select_backend(argv)
    if error:
        print(f"keras-hsum train: error: {error}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if getattr(args, "backend", "absent") is None:
        import keras

        args.backend = keras.backend.backend()
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
