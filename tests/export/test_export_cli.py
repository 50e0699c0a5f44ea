"""`keras-hsum export` and `keras-hsum summarize` (keras_hsum.export.cli).

The commands run in-process through `add_parsers` (the same handlers
`keras_hsum.cli` dispatches to), on a run folder laid out as `keras-hsum
train` writes it: config.json, model.keras (random weights, tiny sizes) and
vocabulary.model (trained on the bundled real data).
"""

import argparse
import dataclasses
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only


def parser():
    from keras_hsum.export.cli import add_parsers

    root = argparse.ArgumentParser(prog="keras-hsum")
    add_parsers(root.add_subparsers(dest="command", required=True))
    return root


def run_command(*argv):
    args = parser().parse_args([str(a) for a in argv])
    return args.handler(args)


def write_run(folder, recipe_name, config, vocabulary, sample_inputs):
    import keras

    from keras_hsum import recipes

    keras.utils.set_random_seed(2)
    model = recipes.get(recipe_name).build_model(config, vocabulary.vocabulary_size)
    model(sample_inputs)
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / "model.keras")
    vocabulary.save(str(folder / "vocabulary.model"))
    (folder / "config.json").write_text(json.dumps({
        "recipe": recipe_name, "config_name": "tiny",
        "config": dataclasses.asdict(config),
    }))
    return model


@pytest.fixture(scope="module")
def pht_run(tmp_path_factory, vocabulary):
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data.structurer import TextStructurer

    config = recipes.config("pht", "tiny").replace(
        hidden_dim=32, intermediate_dim=64, num_encoder_layers=1,
        num_decoder_layers=1, max_paragraphs=5, max_paragraph_tokens=16,
        max_target_length=9,
    )
    structurer = TextStructurer(
        vocabulary.proto, **recipes.get("pht").structure_options(config)
    )
    features = structurer(tf.constant([["A sentence here. Another one."]]))
    run = tmp_path_factory.mktemp("runs") / "pht"
    write_run(run, "pht", config, vocabulary,
              {**features, "decoder_tokens": tf.zeros([1, 3], tf.int32)})
    return run


@pytest.fixture(scope="module")
def exported(pht_run, tmp_path_factory):
    """The base path `keras-hsum export` without --out writes, run from an
    empty directory: ./saved_models/pht (the run folder's name)."""
    cwd = tmp_path_factory.mktemp("export")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        assert run_command("export", "--run", pht_run, "--beam-size", "2") == 0
    return cwd / "saved_models" / "pht"


def test_export_writes_version_metadata_and_models_config(exported, pht_run):
    from keras_hsum.export.serving import read_metadata

    assert sorted(os.listdir(exported)) == ["1"]
    assert os.path.isfile(exported / "1" / "saved_model.pb")
    metadata = read_metadata(exported / "1")
    assert metadata["recipe"] == "pht" and metadata["kind"] == "summarizer"
    assert metadata["search"]["beam_size"] == 2
    assert metadata["decoding_preset"] == "default"  # no --preset given
    assert metadata["checkpoint"] == "last"
    assert metadata["search"]["max_length"] == 8  # max_target_length - 1
    assert metadata["structure_options"]["family"] == "paragraphs"
    assert metadata["max_request_bytes"] == 4 * 1024 * 1024  # the default cap
    config = (exported.parent / "models.config").read_text()
    assert 'name: "pht"' in config and 'base_path: "/models/pht"' in config


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_export_again_writes_the_next_version(exported, pht_run):
    """Version 2 also caps a row at 1 MB (--max-request-bytes): the cap is
    recorded with the export and served by it."""
    import tensorflow as tf

    from keras_hsum.export.serving import read_metadata

    assert run_command("export", "--run", pht_run, "--out", exported,
                       "--beam-size", "1", "--serving-root", "",
                       "--max-request-bytes", 1_000_000) == 0
    assert sorted(os.listdir(exported)) == ["1", "2"]
    config = (exported.parent / "models.config").read_text()
    assert f'base_path: "{os.path.abspath(exported)}"' in config
    assert read_metadata(exported / "2")["max_request_bytes"] == 1_000_000
    loaded = tf.saved_model.load(str(exported / "2"))
    big = "The committee met again. " * 40_001  # 1,000,025 bytes, no blank line
    outputs = loaded.signatures["serving_default"](
        documents=tf.constant([["The budget rose. Costs fell."], [big]])
    )
    error = [e.decode() for e in outputs["error"].numpy()]
    assert error[0] == "" and outputs["summary"].numpy()[0] != b""
    assert error[1].startswith("request too large")
    assert "holds 1000025 bytes" in error[1] and "cap of 1000000 bytes" in error[1]
    assert outputs["summary"].numpy()[1] == b""


def test_export_without_out_writes_under_saved_models_in_the_current_directory(exported):
    """`exported` ran `keras-hsum export --run <runs>/pht` with no --out from
    an empty directory: the model and models.config (TF Serving's model root)
    are all it wrote there, under ./saved_models."""
    cwd = exported.parent.parent
    assert sorted(os.listdir(cwd)) == ["saved_models"]
    assert sorted(os.listdir(cwd / "saved_models")) == ["models.config", "pht"]
    assert os.path.isfile(exported / "1" / "saved_model.pb")


def test_summarize_text_and_jsonl_with_explain(exported, tmp_path, capsys, real_examples):
    from keras_hsum.data.corpora import sample_path

    text = tmp_path / "input.txt"
    text.write_text(
        "The committee met on Monday. It discussed the budget.\n\n"
        "Costs rose by ten percent.\n---\nA second document. It agrees.\n"
    )
    png = tmp_path / "explain.png"
    assert run_command("summarize", "--model", exported / "1", text,
                       "--explain", png) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("[input.txt] ")
    assert len(printed[0]) > len("[input.txt] ")
    assert png.stat().st_size > 1000

    # JSONL (titles and queries → the context signature); the base path
    # resolves to its latest version.
    jsonl = tmp_path / "examples.jsonl"
    import gzip

    path = sample_path("qmsum_goldspan", "val")
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as source:
        lines = [next(source) for _ in range(3)]
    jsonl.write_bytes(b"".join(lines))
    assert run_command("summarize", "--model", exported, jsonl, "--jsonl",
                       "--batch-size", "2", "--explain", tmp_path / "many.png") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected_ids = [e.id for e in real_examples("qmsum_goldspan", "val")[:3]]
    assert [r["id"] for r in records] == expected_ids
    assert all(r["summary"] and np.isfinite(r["score"]) for r in records)
    assert all((tmp_path / f"many-{i}.png").exists() for i in (1, 2, 3))


def test_summarize_says_which_files_it_did_not_read_and_checks_explain(
        exported, tmp_path, capsys):
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "a.txt").write_text("The committee met on Monday. It discussed the budget.\n")
    (folder / "notes.md").write_text("# not read")
    (folder / "data.json").write_text("[]")
    assert run_command("summarize", "--model", exported, folder) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("[a.txt] ")
    assert "2 file(s) of" in captured.err and "['data.json', 'notes.md']" in captured.err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run_command("summarize", "--model", exported, folder,
                       "--explain", blocker / "x.png") == 1
    captured = capsys.readouterr()
    assert "--explain" in captured.err and "cannot create" in captured.err
    assert not captured.out  # refused before summarizing
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 menu. Fine food.\n")
    assert run_command("summarize", "--model", exported, bad, "--strict") == 1
    assert "drop --strict" in capsys.readouterr().err


def test_summarize_matches_the_loaded_signature(exported, tmp_path):
    import tensorflow as tf

    from keras_hsum.data.reader import example_from_text
    from keras_hsum.export.exporter import load_saved_model
    from keras_hsum.export.exporter import summarize_examples

    example = example_from_text("First paragraph. It talks.\n\nSecond one.", "x")
    _, loaded, _ = load_saved_model(exported / "1")
    [result] = summarize_examples(loaded, [example])
    direct = loaded.signatures["serving_default"](
        documents=tf.constant([["First paragraph. It talks.\n\nSecond one."]])
    )
    assert result["summary"] == direct["summary"].numpy()[0]


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_export_lets_the_named_pieces_repeat(tmp_path, capsys, pht_run, vocabulary):
    import sentencepiece

    from keras_hsum.decoding import RecentTokenBlocking
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.serving import read_metadata

    out = tmp_path / "pht"
    assert run_command("export", "--run", pht_run, "--out", out, "--beam-size", "1",
                       "--block-recent", "2", "--recent-exception", ",",
                       "--recent-exception", "-") == 0
    metadata = read_metadata(out / "1")
    search = metadata["search"]
    processor = sentencepiece.SentencePieceProcessor(model_proto=vocabulary.proto)
    expected = [processor.piece_to_id(","), processor.piece_to_id("-")]
    assert vocabulary.unk_id not in expected
    assert search["recent_exceptions"] == expected
    assert metadata["recent_exception_pieces"] == [",", "-"]
    (term,) = [t for t in SearchOptions(**search).terms({})
               if isinstance(t, RecentTokenBlocking)]
    assert term.window == 2 and term.exceptions == tuple(expected)
    # A piece the vocabulary lacks (SentencePiece would map it to <unk>).
    assert run_command("export", "--run", pht_run, "--out", out,
                       "--recent-exception", "qqqzzz") == 1
    assert "--recent-exception: 'qqqzzz' is not a piece" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["1"]


def test_export_errors_are_clear(tmp_path, capsys, pht_run):
    (tmp_path / "incomplete").mkdir()
    assert run_command("export", "--run", tmp_path / "incomplete",
                       "--out", tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert "model.keras" in error and "keras-hsum train" in error
    assert run_command("export", "--run", pht_run, "--out", tmp_path / "out",
                       "--predictor-run", pht_run) == 1
    assert "pht_predictor" in capsys.readouterr().err
    assert run_command("summarize", "--model", tmp_path / "nowhere",
                       tmp_path / "missing.txt") == 1
    assert "error" in capsys.readouterr().err
    assert run_command("export", "--run", pht_run, "--out", tmp_path / "out",
                       "--predictor-run", tmp_path / "incomplete") == 1
    assert "--predictor-run '" in capsys.readouterr().err


def test_export_options_and_the_same_keywords_export_the_same_version(
    tmp_path, monkeypatch, pht_run
):
    """`export_run(..., options=ExportOptions(...))` hands the SavedModel
    writer what the same settings as keywords do (the writer is replaced by
    a recorder: the settings, not the file, are under test)."""
    from keras_hsum.export import serving
    from keras_hsum.export.exporter import ExportOptions
    from keras_hsum.export.cli import export_run

    written = []

    def record(module, out, *, version, metadata, serving_root):
        written.append(dict(out=out, version=version, metadata=metadata,
                            serving_root=serving_root, module=type(module).__name__))
        return os.path.join(out, str(version))

    monkeypatch.setattr(serving, "export_saved_model", record)
    settings = dict(version=3, beam_size=2, length_alpha=0.6, block_ngrams=3,
                    block_recent=2, recent_exceptions=(",",), min_length=1, max_length=5,
                    serving_root=None, max_request_bytes=1000)
    out = str(tmp_path / "pht")
    assert export_run(pht_run, out, checkpoint="last", **settings) == os.path.join(out, "3")
    export_run(pht_run, out, checkpoint="last", options=ExportOptions(**settings))
    by_keywords, by_options = written
    assert by_keywords == by_options
    search = by_options["metadata"]["search"]
    assert (search["beam_size"], search["max_length"], search["min_length"]) == (2, 5, 1)
    assert by_options["metadata"]["max_request_bytes"] == 1000
    assert by_options["serving_root"] is None and by_options["version"] == 3


def test_export_options_with_keywords_is_a_type_error_naming_them(tmp_path, pht_run):
    from keras_hsum.export.exporter import ExportOptions
    from keras_hsum.export.cli import export_run

    with pytest.raises(TypeError, match=r"options= and the keyword\(s\) "
                                        r"\['beam_size', 'preset'\]"):
        export_run(pht_run, tmp_path / "pht", options=ExportOptions(),
                   beam_size=2, preset="paper")
    with pytest.raises(TypeError, match="unexpected keyword argument 'beam'"):
        export_run(pht_run, tmp_path / "pht", beam=2)
    assert not (tmp_path / "pht").exists()


def test_damaged_run_folders_are_named(tmp_path, pht_run):
    """A broken config.json, one without a recipe, one of another version
    and a truncated model.keras: each a ValueError naming the file."""
    import shutil

    from keras_hsum.export.cli import load_run

    def damaged(name, config_text=None, truncate=False):
        folder = tmp_path / name
        shutil.copytree(pht_run, folder)
        if config_text is not None:
            (folder / "config.json").write_text(config_text)
        if truncate:
            data = (folder / "model.keras").read_bytes()
            (folder / "model.keras").write_bytes(data[: len(data) // 2])
        return str(folder)

    stored = json.loads((pht_run / "config.json").read_text())
    cases = [
        (damaged("not_json", "{\n"), r"config\.json is not valid JSON"),
        (damaged("no_recipe", json.dumps({"config": {}})), "names no recipe"),
        (damaged("newer", json.dumps({**stored, "config": {**stored["config"], "bogus": 1}})),
         r"settings that recipe 'pht' does not know, \['bogus'\]"),
        (damaged("truncated", truncate=True), "cannot load model.keras: .*truncated or corrupt"),
    ]
    for folder, message in cases:
        with pytest.raises(ValueError, match=message):
            load_run(folder)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_export_with_mbr_serves_the_hypothesis_of_highest_expected_rouge(
        tmp_path, capsys, pht_run, real_examples):
    """The SavedModel's summary is the beam hypothesis whose mean ROUGE-1/2
    F1 (on ids) against the others is highest, computed here by brute force
    over the Python beam search's hypotheses on the same features."""
    import collections

    import tensorflow as tf

    from keras_hsum.export.exporter import build_structurer
    from keras_hsum.export.cli import load_run
    from keras_hsum.export.exporter import load_saved_model
    from keras_hsum.decoding.search_options import SearchOptions

    assert run_command("export", "--run", pht_run, "--out", tmp_path / "bad",
                       "--beam-size", "1", "--mbr") == 1
    assert "beam of at least 2" in capsys.readouterr().err
    out = tmp_path / "saved_models" / "pht"
    assert run_command("export", "--run", pht_run, "--out", out, "--beam-size", "4",
                       "--mbr", "--serving-root", "") == 0
    _, loaded, metadata = load_saved_model(out)
    assert metadata["search"]["mbr"] is True
    documents = tf.constant([[" ".join(e.documents[0].sentences()[:12])]
                             for e in real_examples("scisummnet", "val")[:3]])
    served = loaded.signatures["serving_default"](documents=documents)["summary_ids"].numpy()

    name, recipe, config, model, vocabulary = load_run(pht_run)
    structurer, _ = build_structurer(recipe, name, config, vocabulary)
    search = dict(metadata["search"], mbr=False)
    result = SearchOptions(**{k: tuple(v) if isinstance(v, list) else v
                              for k, v in search.items()})(model, structurer(documents))
    sequences, lengths = result["sequences"].numpy(), result["lengths"].numpy()
    scores = result["scores"].numpy()

    def grams(ids, n):
        return collections.Counter(tuple(ids[i:i + n]) for i in range(len(ids) - n + 1))

    def f1(a, b, n):
        total = len(a) - n + 1 + len(b) - n + 1
        return 2 * sum((grams(a, n) & grams(b, n)).values()) / total if total > 0 else 0.0

    for b in range(len(sequences)):
        texts = [[t for t in sequences[b, k, :lengths[b, k]]
                  if t not in (model.eos_id, model.pad_id)] for k in range(4)]
        alive = [k for k in range(4) if scores[b, k] > -5e8]
        utility = {i: np.mean([(f1(texts[i], texts[j], 1) + f1(texts[i], texts[j], 2)) / 2
                               for j in alive if j != i]) for i in alive}
        # Utilities equal up to float32 rounding tie: the first in beam order wins.
        top = max(utility.values())
        best = min(k for k in alive if utility[k] > top - 1e-5)
        np.testing.assert_array_equal(served[b, :lengths[b, best]],
                                      sequences[b, best, :lengths[b, best]])


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_export_with_sampling_serves_the_same_samples_as_python(
        tmp_path, capsys, pht_run, real_examples):
    """`--sample --mbr`: the SavedModel draws the same samples as the Python
    `SearchOptions` on the same features (the generator is counter-based,
    not a backend's random op) and serves their MBR choice; sampling flags
    without `--sample` are refused."""
    import tensorflow as tf

    from keras_hsum.export.exporter import build_structurer
    from keras_hsum.export.cli import load_run
    from keras_hsum.export.exporter import load_saved_model
    from keras_hsum.decoding.search_options import SearchOptions

    assert run_command("export", "--run", pht_run, "--out", tmp_path / "bad",
                       "--temperature", "0.7", "--top-k", "5") == 1
    assert "--temperature, --top-k set a sampling search: add --sample" in capsys.readouterr().err
    out = tmp_path / "saved_models" / "pht"
    assert run_command("export", "--run", pht_run, "--out", out, "--beam-size", "4",
                       "--sample", "--temperature", "1.5", "--top-p", "0.95", "--seed", "5", "--mbr",
                       "--block-ngrams", "3", "--serving-root", "") == 0
    _, loaded, metadata = load_saved_model(out)
    assert metadata["search"]["sampling"] == {"temperature": 1.5, "top_k": 0, "top_p": 0.95,
                                              "epsilon": 0.0, "seed": 5}
    documents = tf.constant([[" ".join(e.documents[0].sentences()[:12])]
                             for e in real_examples("scisummnet", "val")[:3]])
    served = loaded.signatures["serving_default"](documents=documents)["summary_ids"].numpy()

    name, recipe, config, model, vocabulary = load_run(pht_run)
    structurer, _ = build_structurer(recipe, name, config, vocabulary)
    search = SearchOptions(**{k: tuple(v) if isinstance(v, list) else v
                              for k, v in metadata["search"].items()})
    features = structurer(documents)
    result = search(model, features)
    assert search.sampling.seed == 5  # the dict came back as a Sampling
    plain = dataclasses.replace(search, mbr=False)(model, features)
    sequences = result["sequences"].numpy()
    for b in range(len(sequences)):
        length = int(result["lengths"][b, 0])
        np.testing.assert_array_equal(served[b, :length], sequences[b, 0, :length])
        # The choice is one of the samples, which are not all alike.
        samples = plain["sequences"].numpy()[b]
        assert any(np.array_equal(sequences[b, 0], row) for row in samples)
    distinct = {tuple(row) for row in plain["sequences"].numpy().reshape(-1, served.shape[-1])}
    assert len(distinct) > 3
    # A request's summary does not depend on its row in the batch: each
    # document alone, and the batch reversed, give what the batch gave.
    for b in range(len(documents)):
        alone = loaded.signatures["serving_default"](documents=documents[b:b + 1])
        np.testing.assert_array_equal(alone["summary_ids"].numpy()[0], served[b])
    reversed_ = loaded.signatures["serving_default"](documents=documents[::-1])
    np.testing.assert_array_equal(reversed_["summary_ids"].numpy()[::-1], served)


def test_load_run_reads_the_best_checkpoint_when_asked(tmp_path, pht_run, capsys):
    import shutil

    import keras

    from keras_hsum.export.cli import load_run

    run = tmp_path / "run"
    shutil.copytree(pht_run, run)
    assert run_command("export", "--run", run, "--out", tmp_path / "out",
                       "--checkpoint", "best") == 1
    assert "best.keras" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'last', 'best'|\\['best', 'last'\\]"):
        load_run(run, "middle")
    # best.keras: the same model with other weights.
    model = keras.models.load_model(run / "model.keras", compile=False)
    for weight in model.weights:
        weight.assign(weight.numpy() + 1.0)
    model.save(run / "best.keras")
    last = load_run(run)[3]
    best = load_run(run, "best")[3]
    for w_last, w_best, w_saved in zip(last.weights, best.weights, model.weights):
        np.testing.assert_array_equal(w_best.numpy(), w_saved.numpy())
        np.testing.assert_array_equal(w_best.numpy(), w_last.numpy() + 1.0)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_load_run_reads_a_kept_epoch_when_asked(tmp_path, pht_run, capsys):
    import shutil

    import keras

    from keras_hsum.export.cli import load_run

    run = tmp_path / "run"
    shutil.copytree(pht_run, run)
    with pytest.raises(ValueError, match="kept no epoch's weights .*keep_epoch_checkpoints"):
        load_run(run, "epoch-2")
    for bad in ("epoch-0", "epoch-x", "epoch2", "2"):
        with pytest.raises(ValueError, match="'epoch-N'"):
            load_run(run, bad)
    # epochs/epoch-002.keras: the same model with other weights.
    model = keras.models.load_model(run / "model.keras", compile=False)
    for weight in model.weights:
        weight.assign(weight.numpy() - 1.0)
    (run / "epochs").mkdir()
    model.save(run / "epochs" / "epoch-002.keras")
    with pytest.raises(ValueError, match=r"no epochs/epoch-003.keras .*kept epochs \[2\]"):
        load_run(run, "epoch-3")
    last = load_run(run)[3]
    second = load_run(run, "epoch-2")[3]
    for w_last, w_epoch in zip(last.weights, second.weights):
        np.testing.assert_array_equal(w_epoch.numpy(), w_last.numpy() - 1.0)
    # The command line takes the same names and says what it lacks.
    assert run_command("export", "--run", run, "--out", tmp_path / "out",
                       "--checkpoint", "epoch-5") == 1
    assert "kept epochs [2]" in capsys.readouterr().err

    # "epochs-A-B": the mean of kept epochs A to B (checkpoint averaging).
    for weight in model.weights:
        weight.assign(weight.numpy() + 3.0)  # last + 2
    model.save(run / "epochs" / "epoch-001.keras")
    averaged = load_run(run, "epochs-1-2")[3]
    for w_last, w_mean in zip(last.weights, averaged.weights):
        np.testing.assert_allclose(w_mean.numpy(), w_last.numpy() + 0.5, rtol=0, atol=1e-6)
    single = load_run(run, "epochs-2-2")[3]
    for w_epoch, w_single in zip(second.weights, single.weights):
        np.testing.assert_array_equal(w_single.numpy(), w_epoch.numpy())
    with pytest.raises(ValueError, match=r"no epochs/epoch-003.keras .*kept epochs \[1, 2\]"):
        load_run(run, "epochs-1-3")
    for bad in ("epochs-2-1", "epochs-0-2", "epochs-1", "epochs-1-2-3"):
        with pytest.raises(ValueError, match="'epochs-A-B'"):
            load_run(run, bad)
    assert run_command("export", "--run", run, "--out", tmp_path / "out",
                       "--checkpoint", "epochs-2-1") == 1
    assert "1 <= A <= B" in capsys.readouterr().err


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_export_of_an_ensemble_serves_the_mixture(tmp_path, vocabulary, real_examples,
                                                  pht_run, capsys):
    """`--checkpoint epoch-1+epoch-2`: the SavedModel, run in a fresh
    process, serves what Python's beam search of the SummarizerEnsemble of
    the two checkpoints decodes, and that differs from each alone."""
    import keras
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.serving import read_metadata
    from keras_hsum.models import SummarizerEnsemble
    from tests.export.test_serving import documents_of
    from tests.export.test_serving import padded

    config = recipes.config("flat", "tiny").replace(
        hidden_dim=32, intermediate_dim=64, num_encoder_layers=1,
        num_decoder_layers=1, max_source_length=96, max_target_length=13,
    )
    structurer = TextStructurer(vocabulary.proto, **recipes.get("flat").structure_options(config))
    documents = padded([documents_of(e) for e in real_examples("scitldr_a", "val")[:2]])
    features = structurer(tf.constant(documents))
    numeric = {k: v for k, v in features.items() if v.dtype != tf.string}
    run = tmp_path / "run"
    write_run(run, "flat", config, vocabulary,
              {**numeric, "decoder_tokens": tf.zeros([2, 3], tf.int32)})
    (run / "epochs").mkdir()
    members = []
    for epoch in (1, 2):
        keras.utils.set_random_seed(10 + epoch)
        member = recipes.get("flat").build_model(config, vocabulary.vocabulary_size)
        member({**numeric, "decoder_tokens": tf.zeros([2, 3], tf.int32)})
        member.save(run / "epochs" / f"epoch-00{epoch}.keras")
        members.append(member)
    # The exported search: length normalisation, no blocking (--allow-unknown).
    options = SearchOptions(beam_size=2, max_length=12)
    search = tf.function(lambda m, x: options(m, x))
    expected = search(SummarizerEnsemble(members), numeric)["sequences"][:, 0].numpy()
    for member in members:
        assert not np.array_equal(search(member, numeric)["sequences"][:, 0].numpy(), expected)

    out = tmp_path / "saved_models" / "flat"
    assert run_command("export", "--run", run, "--out", out, "--beam-size", "2",
                       "--max-length", "12", "--allow-unknown",
                       "--checkpoint", "epoch-1+epoch-2") == 0
    metadata = read_metadata(out / "1")
    assert metadata["checkpoint"] == "epoch-1+epoch-2"
    assert metadata["model_class"] == "SummarizerEnsemble"
    [served], leaked = _run_subprocess_runner(
        out / "1", [{"signature": "serving_default", "inputs": {"documents": documents}}],
        tmp_path,
    )
    assert leaked == [] and "__error__" not in served
    np.testing.assert_array_equal(served["summary_ids"][:, :expected.shape[1]], expected)

    # Errors: a missing member names the kept epochs; a predictor (one
    # PHT's attention) refuses an ensemble.
    assert run_command("export", "--run", run, "--out", out,
                       "--checkpoint", "epoch-1+epoch-3") == 1
    assert "no epochs/epoch-003.keras" in capsys.readouterr().err
    import shutil

    pht = tmp_path / "pht"
    shutil.copytree(pht_run, pht)
    (pht / "best.keras").write_bytes((pht / "model.keras").read_bytes())
    assert run_command("export", "--run", pht, "--out", tmp_path / "p",
                       "--checkpoint", "last+best", "--predictor-run", pht) == 1
    assert "ensemble of 2" in capsys.readouterr().err


def test_explain_without_matplotlib_says_how_to_install(monkeypatch):
    import builtins

    from keras_hsum.export import explain

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(explain.MissingMatplotlibError, match="pip install matplotlib"):
        explain.plot_sentence_scores("x.png", ["a"], [1.0], [0])


def _run_subprocess_runner(path, requests, tmp_path):
    from tests.export.test_serving import run_saved_model

    return run_saved_model(path, requests, tmp_path)


@pytest.mark.slow
def test_seal_export_returns_the_python_selection_per_segment(
    tmp_path, vocabulary, real_examples
):
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.decoding import beam_search
    from keras_hsum.data.structurer import TextStructurer
    from tests.export.test_serving import documents_of
    from tests.export.test_serving import padded

    config = recipes.config("seal", "tiny").replace(
        hidden_dim=32, intermediate_dim=64, num_encoder_layers=1,
        num_decoder_layers=1, max_snippets=6, snippet_length=16,
        extract_length=48, segment_length=4, max_target_length=11,
    )
    recipe = recipes.get("seal")
    structurer = TextStructurer(vocabulary.proto, **recipe.structure_options(config))
    documents = padded([documents_of(e) for e in real_examples("qmsum_general", "val")[:2]])
    features = structurer(tf.constant(documents))
    numeric = {k: v for k, v in features.items() if v.dtype != tf.string}
    model = write_run(tmp_path / "run", "seal", config, vocabulary,
                      {**numeric, "decoder_tokens": tf.zeros([2, 5], tf.int32)})
    result = tf.function(lambda x: beam_search(model, x, beam_size=2, max_length=10))(numeric)
    selected = result["aux"]["selected_ids"][:, 0].numpy()  # [B,L,P']
    lengths = result["lengths"][:, 0].numpy()
    # Python's sentencepiece detokenises (TF Text's eager SentencePiece
    # resource can be gone by now: tensorflow_text's kernel-owned resource,
    # b/318839908 in tensorflow_text/python/ops/sentencepiece_tokenizer.py).
    expected_summary = []
    for row in result["sequences"][:, 0].numpy():
        ids = []
        for token in row:
            if token == model.eos_id:
                break
            if token not in (model.pad_id, model.bos_id):
                ids.append(int(token))
        expected_summary.append(vocabulary.decode(ids).encode("utf-8"))
    texts = features["unit_texts"].numpy()

    out = tmp_path / "saved_models" / "seal"
    assert run_command("export", "--run", tmp_path / "run", "--out", out,
                       "--beam-size", "2", "--max-length", "10") == 0
    [served], leaked = _run_subprocess_runner(
        out / "1", [{"signature": "serving_default", "inputs": {"documents": documents}}],
        tmp_path,
    )
    assert leaked == [] and "__error__" not in served
    np.testing.assert_array_equal(served["summary"], expected_summary)
    ids = served["selected_snippet_ids"]  # [B,M,P']
    assert ids.shape[:2] == (2, 3)  # M = ceil(10 / 4)
    for b in range(2):
        for m in range(3):
            if 4 * m < lengths[b]:
                np.testing.assert_array_equal(ids[b, m], selected[b, 4 * m])
                for slot, snippet in enumerate(ids[b, m]):
                    expected = texts[b, snippet] if snippet >= 0 else b""
                    assert served["selected_snippets"][b, m, slot] == expected
            else:
                assert np.all(ids[b, m] == -1)
    png = tmp_path / "seal.png"
    text = tmp_path / "input.txt"
    text.write_text("\n\n".join(documents[0]))
    assert run_command("summarize", "--model", out, text, "--explain", png) == 0
    assert png.stat().st_size > 1000


@pytest.mark.slow
def test_shte_export_extracts_what_python_extracts(tmp_path, vocabulary, real_examples):
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data.structurer import TextStructurer
    from tests.export.test_serving import documents_of

    config = recipes.config("shte", "tiny").replace(
        hidden_dim=32, intermediate_dim=64, sentence_intermediate_dim=64,
        classifier_hidden_dim=32, max_sentences=8, max_sentence_tokens=16,
    )
    recipe = recipes.get("shte")
    structurer = TextStructurer(vocabulary.proto, **recipe.structure_options(config))
    document = ["\n\n".join(documents_of(e)) for e in real_examples("scitldr_a", "val")[:2]]
    features = structurer(tf.constant(document)[:, None])
    numeric = {k: v for k, v in features.items() if v.dtype != tf.string}
    summary_side = {
        "summary_tokens": numeric["tokens"][:, :2],
        "summary_token_mask": numeric["token_mask"][:, :2],
        "summary_paragraph_mask": numeric["paragraph_mask"][:, :2],
    }
    model = write_run(tmp_path / "run", "shte", config, vocabulary,
                      {**numeric, **summary_side})
    indices, scores, sentence_scores = model.extract(numeric, k=config.extract_sentences)

    out = tmp_path / "saved_models" / "shte"
    cap = 20_000
    assert max(len(d.encode()) for d in document) < cap
    assert run_command("export", "--run", tmp_path / "run", "--out", out,
                       "--max-request-bytes", cap) == 0
    served, leaked = _run_subprocess_runner(out / "1", [
        {"signature": "serving_default", "inputs": {"document": document}},
        {"signature": "extract", "inputs": {"document": document + [""]}},
        {"signature": "extract", "inputs": {"document": ["It rose. " * 2500, document[0]]}},
        {"signature": "serving_default", "inputs": {"document": [document]}},
    ], tmp_path)
    assert leaked == []
    default, extract, capped, rank2 = served
    assert capped["summary"][0] == b"" and capped["summary"][1] == extract["summary"][0]
    assert capped["error"][0].decode().startswith(
        "request too large: this row holds 22500 bytes of text, over this model's "
        f"cap of {cap} bytes"
    )
    assert capped["error"][1] == b""
    assert "`document` must be tf.string [B] (one document per row), of rank 1; " \
        "received a tensor of rank] [2]" in str(rank2["__error__"])
    np.testing.assert_array_equal(default["indices"], indices.numpy())
    np.testing.assert_allclose(default["sentence_scores"], sentence_scores.numpy(), atol=1e-5)
    np.testing.assert_array_equal(default["sentences"], features["unit_texts"].numpy())
    np.testing.assert_array_equal(extract["indices"][:2], indices.numpy())
    texts = features["unit_texts"].numpy()
    for b in range(2):
        chosen = [texts[b, i] for i in indices.numpy()[b] if i >= 0]
        assert list(extract["extracted"][b][: len(chosen)]) == chosen
        assert extract["summary"][b] == b" ".join(chosen)
    assert extract["summary"][2] == b"" and extract["error"][2].startswith(b"empty input")
    png = tmp_path / "shte.png"
    text = tmp_path / "input.txt"
    text.write_text(document[0])
    assert run_command("summarize", "--model", out, text, "--explain", png) == 0
    assert png.stat().st_size > 1000


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_evaluate_scores_a_saved_model_beside_a_baseline(exported, tmp_path, capsys):
    """`keras-hsum evaluate --model`: the report holds exactly what the
    SavedModel's signature answers for each example's raw text, scored as
    rouge-score scores it, in one table with a baseline."""
    import tensorflow as tf
    from rouge_score import rouge_scorer

    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.reader import read_jsonl
    from keras_hsum.data.reader import render_documents
    from keras_hsum.evaluation import cli as evaluation_cli

    data = sample_path("qmsum_goldspan", "val")
    root = argparse.ArgumentParser()
    evaluation_cli.add_parser(root.add_subparsers(dest="command"))
    out = tmp_path / "report.json"
    args = root.parse_args([
        "evaluate", "--model", str(exported / "1"), "--name", "tiny-pht",
        "--baseline", "lead3", "--data", data, "--max-examples", "5",
        "--batch-size", "2", "--num-resamples", "50", "--out", str(out),
    ])
    assert evaluation_cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "| tiny-pht | qmsum | 5 |" in printed and "| lead3 | qmsum | 5 |" in printed
    model_report, lead_report = json.loads(out.read_text(encoding="utf-8"))
    assert model_report["export"]["recipe"] == "pht"
    assert model_report["errors"] == {}
    examples = list(read_jsonl(data))[:5]
    assert model_report["num_examples"] == lead_report["num_examples"] == 5
    loaded = tf.saved_model.load(str(exported / "1"))
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    for row, example in zip(model_report["examples"], examples):
        direct = loaded.signatures["summarize_with_context"](
            documents=tf.constant([render_documents(example)]),
            title=tf.constant([example.title or ""]),
            query=tf.constant([example.query or ""]),
        )
        assert row["id"] == example.id
        assert row["summary"] == direct["summary"].numpy()[0].decode("utf-8")
        expected = scorer.score(example.summary, row["summary"])
        for metric in ("rouge1", "rouge2"):
            assert row["scores"][metric]["f1"] == pytest.approx(
                expected[metric].fmeasure, abs=1e-12
            )


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_evaluate_keeps_examples_whose_request_fails(exported, tmp_path):
    """An example with no text reaches the model as an empty request: the
    model answers with its error tensor; the example stays in the report
    as an empty summary, listed under `errors`."""
    from keras_hsum.data.reader import example_from_text
    from keras_hsum.evaluation import report as reporting
    from keras_hsum.evaluation.cli import model_system

    good = example_from_text("The budget rose. Costs fell.\\n\\nIt was agreed.", "good")
    empty = example_from_text("", "empty")
    name, summarize, info = model_system(str(exported), batch_size=2, verbose=False)
    assert name == f"pht/{sorted(os.listdir(exported), key=int)[-1]}"
    summaries = summarize([good, empty])
    assert summaries[1] == "" and list(info["errors"]) == ["empty"]
    scored = [dataclasses.replace(e, summary="The budget rose.") for e in (good, empty)]
    report = reporting.evaluate(summaries, scored, name=name, num_resamples=10)
    assert report["num_examples"] == 2
    assert report["examples"][1]["scores"]["rouge1"]["f1"] == 0.0


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_discourse_run_exports_with_a_per_request_extended_vocabulary(tmp_path, vocabulary):
    """The pointer-generator's extended vocabulary (V + the request's OOVs)
    and the number of sections are only known per request: the exported
    beam search must size its buffers at run time, and decode what the
    Python search decodes on the same features."""
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.export.exporter import load_saved_model
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.decoding.search_options import SearchOptions

    config = recipes.config("discourse", "tiny").replace(
        hidden_dim=16, embedding_dim=8, max_sections=3, max_section_length=20,
        max_target_length=9,
    )
    structurer = TextStructurer(
        vocabulary.proto, **recipes.get("discourse").structure_options(config)
    )
    documents = tf.constant([
        ["The committee met. Zxqvbn costs rose.\n\nThey agreed.", "A second one."],
        ["Short text here. Fine.", ""],
    ])
    features = structurer(documents)
    run = tmp_path / "discourse"
    model = write_run(run, "discourse", config, vocabulary,
                      {**features, "decoder_tokens": tf.zeros([2, 3], tf.int32)})
    out = tmp_path / "saved_models" / "discourse"
    assert run_command("export", "--run", run, "--out", out, "--beam-size", "2",
                       "--serving-root", "") == 0
    _, loaded, metadata = load_saved_model(out)
    result = loaded.signatures["serving_default"](documents=documents)
    assert list(result["error"].numpy()) == [b"", b""]
    search = SearchOptions(**{
        k: tuple(v) if isinstance(v, list) else v for k, v in metadata["search"].items()
    })
    expected = search(model, features)
    best = expected["sequences"][:, 0].numpy()
    lengths = expected["lengths"][:, 0].numpy()
    ids = result["summary_ids"].numpy()
    for b in range(2):
        np.testing.assert_array_equal(ids[b, :lengths[b]], best[b, :lengths[b]])


@pytest.mark.slow
def test_export_with_the_paper_preset_records_it_and_says_alignment_is_off(
    tmp_path, capsys, pht_run, vocabulary
):
    """PHT §5.2 without a predictor: trigram and recent-token blocking (the
    comma exempt), beam 5 (here overridden to 2), alignment off and said so."""
    from keras_hsum.export.serving import read_metadata

    out = tmp_path / "pht"
    assert run_command("export", "--run", pht_run, "--out", out,
                       "--preset", "paper", "--beam-size", "2") == 0
    assert "alignment (β = 0.8) is off" in capsys.readouterr().err
    metadata = read_metadata(out / "1")
    assert metadata["decoding_preset"] == "paper"
    search = metadata["search"]
    assert (search["beam_size"], search["block_ngrams"], search["block_recent"]) == (2, 3, 2)
    assert search["length_alpha"] is None and search["alignment_beta"] == 0.0
    assert search["recent_exceptions"] == [vocabulary.piece_to_id(",")]
    assert metadata["recent_exception_pieces"] == [","]
