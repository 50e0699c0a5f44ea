"""The export library behind `keras-hsum export` and `keras-hsum summarize`
(TensorFlow only; the command line is `keras_hsum.export.cli`).

`export_run` reads a run folder written by `keras-hsum train`
(`keras_hsum.run_folder`: config.json with the recipe name and config,
model.keras, vocabulary.model, or for a run on a backbone preset the
preset's tokenizer in tokenizer/), builds the in-graph `TextStructurer` for
the recipe's family and writes a text-in / text-out SavedModel to the next
version folder of `out`, then rewrites `models.config` next to `out` (see
docs/serving.md). The decoding settings come from `DECODING_DEFAULTS`, the
recipe's `DECODING[preset]` and the settings given (`decoding_settings`).

`load_saved_model` and `summarize_examples` run an exported SavedModel with
`tf.saved_model.load` (no Keras model is rebuilt); `write_explanations`
draws what `keras-hsum summarize --explain` draws.

The recipes sit above this library (keras_hsum.recipes.base, "Where the
recipes are read"): `load_run` and `export_run` take `recipes`, the
registry that maps the recipe name recorded in config.json to its module
(`keras_hsum.recipes`, which the command line `keras_hsum.export.cli` and
the demo pass), and read that module's declaration, `RECIPE`: its
`config_class` (config.json's config), `structure_options` (the in-graph
`TextStructurer`, derived from its `features`) and `decoding` presets.

Example:

```python
from keras_hsum import recipes
from keras_hsum.export.exporter import ExportOptions, export_run

options = ExportOptions(preset="paper", beam_size=4, serving_root=None)
export_run("runs/pht", "saved_models/pht", recipes=recipes, options=options)
```
"""

import dataclasses
import os
import sys

from keras_hsum import features
from keras_hsum import run_folder

# Where `keras-hsum export` writes without --out, relative to the current
# directory: the TF Serving model root (one base path per model and
# models.config), the repository's top-level saved_models/.
DEFAULT_EXPORT_ROOT = "saved_models"

# The decoding settings a preset may set, with the values of `--preset
# default` (today's behaviour for every recipe: beam 5, |y| normalisation,
# no blocking; β applies only with --predictor-run).
DECODING_DEFAULTS = {
    "beam_size": 5,
    "length_alpha": None,
    "block_ngrams": 0,
    "block_recent": 0,
    "recent_exceptions": (),
    "alignment_beta": 0.8,
}
PRESETS = ("default", "paper")


class _FromPreset:
    """The default of `export_run`'s decoding arguments: "the preset's"."""

    def __repr__(self):
        return "PRESET"


PRESET = _FromPreset()


def decoding_settings(recipe_name, recipe, preset="default", *, predictor=False,
                      **given):
    """The decoding settings of an export: `(settings, notes)`.

    `DECODING_DEFAULTS`, then the recipe's `DECODING[preset]` (none for
    "default"), then `given`, the settings named explicitly (command-line
    flags), which override the preset. A preset's `alignment_beta` needs an
    attention predictor: without one (`predictor=False`) it is set to 0 and
    a note says so.

    Args:
        recipe_name, recipe: the run's recipe and its declaration (or
            module).
        preset: one of `PRESETS`.
        predictor: whether a `--predictor-run` is exported with the run.
        **given: keys of `DECODING_DEFAULTS`.

    Returns:
        `(settings, notes)`: a dict with every key of `DECODING_DEFAULTS`
        (`recent_exceptions` a tuple of pieces), and a list of messages for
        the user (empty when there is nothing to say).

    Raises:
        ValueError: `preset` is unknown, the recipe declares no such preset,
            or `given` names an unknown setting.
    """
    if preset not in PRESETS:
        raise ValueError(
            f"Unknown --preset {preset!r}; expected one of {list(PRESETS)}."
        )
    unknown = sorted(set(given) - set(DECODING_DEFAULTS))
    if unknown:
        raise ValueError(
            f"decoding_settings: unknown settings {unknown}; expected some of "
            f"{sorted(DECODING_DEFAULTS)}."
        )
    declared = {}
    if preset != "default":
        from keras_hsum.training.model_setup import recipe_declaration

        presets = getattr(recipe_declaration(recipe), "decoding", None) or {}
        if preset not in presets:
            raise ValueError(
                f"Recipe {recipe_name!r} declares no {preset!r} decoding preset "
                f"(its presets: {['default', *sorted(presets)]}); leave --preset "
                "out or set the decoding flags yourself."
            )
        declared = dict(presets[preset])
        bad = sorted(set(declared) - set(DECODING_DEFAULTS))
        if bad:
            raise ValueError(
                f"keras_hsum.recipes.{recipe_name}.DECODING[{preset!r}] has unknown "
                f"settings {bad}; expected some of {sorted(DECODING_DEFAULTS)}."
            )
    settings = {**DECODING_DEFAULTS, **declared, **given}
    settings["recent_exceptions"] = tuple(settings["recent_exceptions"] or ())
    notes = []
    if declared.get("alignment_beta") and "alignment_beta" not in given and not predictor:
        settings["alignment_beta"] = 0.0
        notes.append(
            f"--preset {preset}: attention alignment (β = {declared['alignment_beta']}) "
            "is off because no --predictor-run was given."
        )
    return settings, notes


# ------------------------------------------------------------------- export
def load_run(run, checkpoint="last", flag="--run", *, recipes):
    """`(recipe_name, recipe, config, model, vocabulary)` of a run folder
    (`recipe`: the recipe's declaration, a `keras_hsum.recipes.base.Recipe`).

    Args:
        run: a `keras-hsum train` output folder.
        recipes: the recipe registry (`keras_hsum.recipes`): `recipes.get(name)`
            is the module of the recipe that config.json names.
        flag: the option that named it, for the error messages.
        checkpoint: "last" (model.keras, the weights training ended with),
            "best" (best.keras, the lowest validation loss or the run's
            checkpoint_monitor), "epoch-N" (epoch N's weights) or
            "epochs-A-B" (the mean of the weights of epochs A to B), where
            epochs are kept by `keep_epoch_checkpoints=True`, or such
            names joined by "+": a `SummarizerEnsemble` of those
            checkpoints (e.g. "epoch-9+epoch-13"); see
            `keras_hsum.training.checkpoints`.

    Raises:
        ValueError: the folder lacks config.json / the checkpoint /
            vocabulary.model, names an unknown recipe, or `checkpoint` is
            none of "last", "best", a kept "epoch-N", a kept range
            "epochs-A-B" and an ensemble of them.
    """
    import keras_hsum.models  # noqa: F401 - registers the model classes
    from keras_hsum.training.checkpoints import checkpoint_files
    from keras_hsum.training.checkpoints import load_checkpoint_model
    from keras_hsum.training.model_setup import recipe_declaration

    weights = list(dict.fromkeys(checkpoint_files(run, checkpoint, ensemble=True)))
    run = os.fspath(run)
    # A run on a backbone preset holds the preset's tokenizer instead.
    missing = [
        name for name in (run_folder.CONFIG, *weights, run_folder.vocabulary_file(run))
        if not os.path.isfile(run_folder.path(run, name))
    ]
    if missing:
        raise ValueError(
            f"{flag} {run!r} must be a folder written by `keras-hsum train` "
            f"holding {run_folder.CONFIG}, {', '.join(weights)} and "
            f"{run_folder.VOCABULARY} (or, for a run on a backbone preset, "
            f"{run_folder.TOKENIZER}/); missing {missing}. Train the recipe first "
            "(or wait for it to finish"
            + (f"; {run_folder.BEST_CHECKPOINT} needs validation data"
               if checkpoint == "best" else "")
            + ")."
        )
    resolved = run_folder.read_config(run, flag)
    name = resolved["recipe"]
    config_path = run_folder.path(run, run_folder.CONFIG)
    recipe = recipe_declaration(recipes.get(name))
    fields = resolved.get("config", {})
    known = {field.name for field in dataclasses.fields(recipe.config_class)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"{flag} {run!r}: {config_path} has settings that recipe {name!r} does "
            f"not know, {unknown} (a run of another keras_hsum version?)."
        )
    config = recipe.config_class(**fields)
    try:
        model = load_checkpoint_model(run, checkpoint, ensemble=True)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{flag} {run!r}: cannot load {', '.join(weights)}: {error} "
            "(the file exists; it may be truncated or corrupt, e.g. copied while "
            "training wrote it)."
        ) from None
    from keras_hsum.training.vocabularies import run_vocabulary

    vocabulary = run_vocabulary(run)
    return name, recipe, config, model, vocabulary


def build_structurer(recipe, recipe_name, config, vocabulary):
    """The recipe's `TextStructurer` and its options: the declaration's
    `structure_options(config)`, what its `features` give at evaluation
    time."""
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.training.model_setup import recipe_declaration

    recipe = recipe_declaration(recipe)
    if not hasattr(recipe, "structure_options"):
        raise ValueError(
            f"Recipe {recipe_name!r} defines no `structure_options(config)`, "
            "so its in-graph preprocessing is unknown and it cannot be exported."
        )
    options = dict(recipe.structure_options(config))
    graph_kind = getattr(config, "graph_kind", None)
    if graph_kind and options.get("graph_kind") != graph_kind:
        # HierarchicalTransformer drops a missing graph silently: the
        # served model would attend without the graph it trained with.
        raise ValueError(
            f"This {recipe_name!r} run trained with graph_kind={graph_kind!r}, "
            f"and recipe {recipe_name!r}'s structure_options builds "
            f"graph_kind={options.get('graph_kind')!r}, so the exported model "
            "would run without the graph it trained with. Make the recipe's "
            "features give the paragraph_graph extra (as recipes/ht.py does), "
            "or export a run trained without graph_kind."
        )
    # A Vocabulary is read as its proto; a PresetVocabulary as it is.
    return TextStructurer(vocabulary, **options), options


def build_module(model, structurer, *, search=None, predictor=None, k=3,
                 jit_compile=False, max_request_bytes=None):
    """The serving module for `model`: `ExtractorModule` for SHTE, else
    `SummarizerModule` (`max_request_bytes`: their cap on the bytes of one
    row; None: the modules' default).

    Raises:
        ValueError: the model does not summarize (a ranker or predictor).
    """
    from keras_hsum.export.serving import ExtractorModule
    from keras_hsum.export.serving import SummarizerModule
    from keras_hsum.models import SHTE
    from keras_hsum.models import Summarizer

    from keras_hsum.export.serving import DEFAULT_MAX_REQUEST_BYTES

    if max_request_bytes is None:
        max_request_bytes = DEFAULT_MAX_REQUEST_BYTES
    if isinstance(model, SHTE):
        return ExtractorModule(model, structurer, k=k, jit_compile=jit_compile,
                               max_request_bytes=max_request_bytes)
    if not isinstance(model, Summarizer):
        raise ValueError(
            f"{type(model).__name__} does not produce summaries, so it has no "
            "text-in/text-out SavedModel. Export the abstractive run it serves "
            "(e.g. a `pht` run with --predictor-run for an AttentionPredictor)."
        )
    return SummarizerModule(
        model, structurer, search, predictor=predictor, jit_compile=jit_compile,
        max_request_bytes=max_request_bytes,
    )


def ranked_config(name, config, ranker_run=None, extractive_beta=0.0,
                  predictor_run=None):
    """The run's config with `--ranker-run` applied; checks the learned-
    ranking flags.

    A run trained with rank="learned" records its `ranker_run`; export
    serves that ranker, or the one `ranker_run` names (e.g. the folder was
    moved). A run trained on another ranking is refused: its model never
    saw the learned ranker's paragraphs.

    Raises:
        ValueError: `ranker_run` or `extractive_beta` for a run that was not
            trained with rank="learned", or `extractive_beta` together with
            a predictor.
    """
    learned = getattr(config, "rank", None) == "learned"
    if ranker_run is not None:
        if not learned:
            raise ValueError(
                f"--ranker-run serves the learned ranker's top paragraphs, but this "
                f"{name!r} run trained on "
                + (f"rank={config.rank!r} paragraphs" if hasattr(config, "rank")
                   else "no paragraph ranking (only ht and pht rank paragraphs)")
                + ", so its model never saw them. Train it with --set rank=learned "
                "--set ranker_run=RANKER_RUN, or leave --ranker-run out."
            )
        config = config.replace(ranker_run=os.fspath(ranker_run))
    if extractive_beta:
        if not learned:
            raise ValueError(
                f"--extractive-alignment aligns the summary's attention with the "
                f"learned ranker's scores, and this {name!r} run was not trained "
                "with rank='learned' (it has no ranker scores). Leave it out, or "
                "export a run trained with --set rank=learned."
            )
        if predictor_run is not None:
            raise ValueError(
                "--extractive-alignment takes η̂ from the ranker's scores and "
                "--predictor-run from the attention predictor: give one of them."
            )
    return config


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How `export_run` decodes and serves a run: the search, the preset its
    settings come from, and the SavedModel's serving settings. Which run and
    weights are exported (the run, `checkpoint`, a predictor or ranker run)
    `export_run` takes itself.

    Attributes:
        version: the version number (default: the next one).
        preset: "default" or "paper": where the decoding settings left at
            `PRESET` come from (`decoding_settings`: `DECODING_DEFAULTS`,
            or the recipe's `DECODING["paper"]`); recorded in the
            version's keras_hsum.json as `decoding_preset`.
        beam_size, max_length, min_length, length_alpha, block_ngrams,
            block_recent, alignment_beta: `SearchOptions`; `max_length`
            defaults to the recipe's `max_target_length - 1`; `PRESET`:
            the preset's value.
        recent_exceptions: pieces of the run's vocabulary that
            `block_recent` lets repeat (PHT §5.2 exempts the comma: ",").
        extractive_beta: β of `ExtractiveAlignment` (PHT §6's extProb:
            attention alignment to the learned ranker's normalised
            scores); needs a run trained with rank="learned"; 0: off.
        block_unknown: never generate the vocabulary's unknown piece
            (it detokenizes to " ⁇ ").
        mbr: serve the beam's hypothesis of highest expected ROUGE-1/2
            against the others (`SearchOptions.mbr`; needs beam_size >= 2).
        sampling: None (beam search), or a dict of `Sampling`'s settings
            (`temperature`, `top_k`, `top_p`, `epsilon`, `seed`): draw
            `beam_size` samples instead (`SearchOptions.sampling`).
        extract_sentences: SHTE only: sentences per extract (default: the
            run's `extract_sentences`).
        serving_root: models.config base paths (`<serving_root>/<name>`);
            None: absolute local paths.
        jit_compile: XLA-compile the encoder and search.
        max_request_bytes: the most bytes of text one row of a request may
            hold (documents, title and query; default
            `serving.DEFAULT_MAX_REQUEST_BYTES`, 4 MiB); a row over it gets
            the `error` output "request too large: ..." without being
            read. Recorded in the version's keras_hsum.json.

    Example:

    ```python
    options = ExportOptions(preset="paper", beam_size=4, serving_root=None)
    export_run("runs/pht", "saved_models/pht", checkpoint="best", options=options)
    ```
    """

    version: object = None
    preset: str = "default"
    beam_size: object = PRESET
    max_length: object = None
    min_length: int = 0
    length_alpha: object = PRESET
    block_ngrams: object = PRESET
    block_recent: object = PRESET
    recent_exceptions: object = PRESET
    alignment_beta: object = PRESET
    extractive_beta: float = 0.0
    block_unknown: bool = True
    mbr: bool = False
    sampling: object = None
    extract_sentences: object = None
    serving_root: object = "/models"
    jit_compile: bool = False
    max_request_bytes: object = None


def export_run(run, out, *, recipes, checkpoint="last", predictor_run=None,
               ranker_run=None, options=None, **option_keywords):
    """Exports a trained run as `<out>/<version>/` (see `keras-hsum export`).

    Args:
        run: the run folder.
        out: the model base path, e.g. `saved_models/pht`.
        recipes: the recipe registry (`keras_hsum.recipes`; see `load_run`).
        checkpoint: "last" (model.keras), "best" (best.keras, the lowest
            validation loss), "epoch-N" (a kept epoch's) or "epochs-A-B"
            (the mean of kept epochs A to B) weights of `run`, or such
            names joined by "+" ("epoch-9+epoch-13"): an ensemble that
            decodes with the mean of their next-token distributions
            (`keras_hsum.models.SummarizerEnsemble`).
        predictor_run: optional `pht_predictor` run folder (PHT only): its
            η̂ is returned as `predicted_attention` and aligns the search.
        ranker_run: for a run trained with rank="learned", the `ranker`
            run to serve instead of the one its config.json records (the
            same ranker, moved); refused for other runs.
        options: an `ExportOptions`: the decoding and serving settings.
        **option_keywords: instead of `options`, its fields as keywords
            (`beam_size=4, serving_root=None, ...`). Passing both is a
            TypeError.

    Returns:
        The version folder written.
    """
    from keras_hsum.checks import check_int
    from keras_hsum.checks import options_or_keywords
    from keras_hsum.export.serving import DEFAULT_MAX_REQUEST_BYTES
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.serving import export_saved_model
    from keras_hsum.models import SHTE

    options = options_or_keywords("export_run", ExportOptions, options, option_keywords)
    max_request_bytes = options.max_request_bytes
    if max_request_bytes is None:
        max_request_bytes = DEFAULT_MAX_REQUEST_BYTES
    max_request_bytes = check_int(
        "max_request_bytes", max_request_bytes, owner="--max-request-bytes"
    )
    name, recipe, config, model, vocabulary = load_run(run, checkpoint, recipes=recipes)
    given = {
        key: getattr(options, key) for key in DECODING_DEFAULTS
        if getattr(options, key) is not PRESET
    }
    decoding, notes = decoding_settings(
        name, recipe, options.preset, predictor=predictor_run is not None, **given
    )
    config = ranked_config(name, config, ranker_run, options.extractive_beta, predictor_run)
    structurer, structure_options = build_structurer(recipe, name, config, vocabulary)
    predictor = None
    if predictor_run is not None:
        from keras_hsum.models import SummarizerEnsemble

        if isinstance(model, SummarizerEnsemble):
            raise ValueError(
                f"--predictor-run predicts the attention of one PHT model; --checkpoint "
                f"{checkpoint!r} is an ensemble of {len(model.members)}. Export one "
                "checkpoint (or their mean, epochs-A-B) with the predictor."
            )
        predictor_name, _, _, predictor, _ = load_run(
            predictor_run, flag="--predictor-run", recipes=recipes
        )
        if predictor_name != "pht_predictor" or name != "pht":
            raise ValueError(
                f"--predictor-run must be a `pht_predictor` run exported with "
                f"a `pht` run; received a {predictor_name!r} predictor for a "
                f"{name!r} run."
            )
    max_length = options.max_length
    if max_length is None:
        max_length = max(1, int(getattr(config, "max_target_length", 101)) - 1)
    recent_exceptions = decoding.pop("recent_exceptions")
    try:
        exception_ids = tuple(vocabulary.piece_to_id(piece) for piece in recent_exceptions)
    except ValueError as error:
        flag = ("--recent-exception" if "recent_exceptions" in given
                else f"--preset {options.preset} (recent exceptions)")
        raise ValueError(f"{flag}: {error}") from None
    search = SearchOptions(
        max_length=max_length, min_length=options.min_length, **decoding,
        recent_exceptions=exception_ids,
        extractive_beta=float(options.extractive_beta or 0.0),
        blocked_ids=(vocabulary.unk_id,) if options.block_unknown else (),
        mbr=options.mbr, sampling=options.sampling,
    )
    module = build_module(
        model, structurer, search=search, predictor=predictor,
        k=options.extract_sentences or getattr(config, "extract_sentences", 3),
        jit_compile=options.jit_compile, max_request_bytes=max_request_bytes,
    )
    metadata = {
        "recipe": name,
        "kind": "extractor" if isinstance(model, SHTE) else (
            "seal" if getattr(model, "segment_length", None) else "summarizer"
        ),
        "model_class": type(model).__name__,
        "run": os.path.abspath(run),
        "checkpoint": checkpoint,
        "predictor_run": os.path.abspath(predictor_run) if predictor_run else None,
        "ranker_run": getattr(config, "ranker_run", None),
        "structure_options": structure_options,
        "decoding_preset": options.preset,
        "search": None if isinstance(model, SHTE) else search.to_dict(),
        "recent_exception_pieces": list(recent_exceptions),
        "jit_compile": bool(options.jit_compile),
        "max_request_bytes": max_request_bytes,
    }
    for note in notes:
        print(f"keras-hsum export: {note}", file=sys.stderr)
    return export_saved_model(
        module, out, version=options.version, metadata=metadata,
        serving_root=options.serving_root,
    )


# ---------------------------------------------------------------- summarize
def _batches(items, size):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def as_text(value):
    """A numpy output string (bytes) as text; invalid UTF-8 replaced."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def load_saved_model(path):
    """`(version folder, loaded SavedModel, metadata)`; imports TF Text first
    (the preprocessing ops)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the SentencePiece ops

    from keras_hsum.export.serving import latest_version_path
    from keras_hsum.export.serving import read_metadata

    path = latest_version_path(path)
    return path, tf.saved_model.load(path), read_metadata(path)


def summarize_examples(loaded, examples, batch_size=8):
    """Runs the SavedModel's signatures on `examples`.

    Returns:
        A list with one dict of numpy outputs per example (leading batch
        axis removed).
    """
    import numpy as np
    import tensorflow as tf

    from keras_hsum.data.reader import render_documents
    from keras_hsum.export.serving import CONTEXT_SIGNATURE
    from keras_hsum.export.serving import DEFAULT_SIGNATURE
    from keras_hsum.export.serving import EXTRACT_SIGNATURE

    signatures = loaded.signatures
    extractor = EXTRACT_SIGNATURE in signatures
    results = []
    for batch in _batches(list(examples), batch_size):
        if extractor:
            document = ["\n\n".join(render_documents(e)) for e in batch]
            outputs = signatures[DEFAULT_SIGNATURE](document=tf.constant(document))
        else:
            documents = [render_documents(e) for e in batch]
            width = max(1, max(len(d) for d in documents))
            documents = [d + [""] * (width - len(d)) for d in documents]
            if any(e.title or e.query for e in batch) and CONTEXT_SIGNATURE in signatures:
                outputs = signatures[CONTEXT_SIGNATURE](
                    documents=tf.constant(documents),
                    title=tf.constant([e.title or "" for e in batch]),
                    query=tf.constant([e.query or "" for e in batch]),
                )
            else:
                outputs = signatures[DEFAULT_SIGNATURE](documents=tf.constant(documents))
        arrays = {name: np.asarray(value) for name, value in outputs.items()}
        for i in range(len(batch)):
            results.append({name: value[i] for name, value in arrays.items()})
    return results


def explain_paths(path, count):
    """`path` for one example; `<stem>-<i><ext>` (i from 1) for several."""
    if count == 1:
        return [path]
    stem, ext = os.path.splitext(path)
    return [f"{stem}-{i}{ext or '.png'}" for i in range(1, count + 1)]


def write_explanations(path, examples, results):
    """One PNG per example (see `explain_paths`); returns the paths."""
    from keras_hsum.export import explain

    written = []
    for target, example, result in zip(
        explain_paths(path, len(results)), examples, results
    ):
        title = f"{example.id}: {as_text(result.get(features.SUMMARY, b''))[:50]}"
        if features.SENTENCE_SCORES in result:
            explain.plot_sentence_scores(
                target, result[features.SENTENCES], result[features.SENTENCE_SCORES],
                result[features.INDICES], title=title,
            )
        elif features.SELECTED_SNIPPET_IDS in result:
            explain.plot_segment_selection(
                target, result[features.SELECTED_SNIPPET_IDS], result[features.PARAGRAPHS],
                title=title,
            )
        else:
            explain.plot_token_attention(
                target, result[features.SUMMARY_TOKENS], result[features.PARAGRAPHS],
                result[features.TOKEN_ATTENTION], title=title,
            )
        written.append(target)
    return written
