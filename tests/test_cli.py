"""The `keras-hsum` entry point, run as a user runs it (a subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from keras_hsum.data.corpora import sample_path
from keras_hsum.data.corpora import sample_tokenizer_path
from keras_hsum.data.vocabulary import Vocabulary


def _run(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "keras_hsum.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )


@pytest.mark.slow  # 85 s under TensorFlow on CI's 2 cores: the slow set
def test_demo_trains_exports_and_summarizes(tmp_path):
    """The README's main job with a 2-step schedule: a real training run, a
    SavedModel, a summary of a held-out example scored with ROUGE, the
    heatmap PNG."""
    result = _run("demo", "--out", str(tmp_path / "demo"), "--epochs", "1",
                  "--steps-per-epoch", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    demo = tmp_path / "demo"
    report = json.loads((demo / "demo_report.json").read_text())
    assert report["training"]["steps"] == 2
    assert (demo / "run" / "model.keras").exists()
    assert (demo / "run" / "vocabulary.model").exists()
    assert os.path.exists(os.path.join(report["export"]["path"], "saved_model.pb"))
    png = (demo / "paragraph_attention.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    from rouge_score import rouge_scorer

    from keras_hsum.data.reader import read_jsonl

    reference = next(iter(read_jsonl(sample_path("qmsum_goldspan", "val")))).summary
    assert report["example"]["reference"] == reference
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    assert len(report["example"]["systems"]) == 3
    for system in report["example"]["systems"].values():
        expected = scorer.score(reference, system["summary"])
        for key, value in system["rouge"].items():
            assert abs(value - round(100 * expected[key].fmeasure, 2)) < 1e-9
    assert "[4/4]" in result.stdout


def test_vocab_then_structure(tmp_path):
    model = tmp_path / "spm.model"
    data = sample_path("fewsum_amazon", "train")
    result = _run("vocab", "--data", data, "--out", str(model), "--size", "1500", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert Vocabulary.load(model).vocabulary_size == 1500
    result = _run(
        "structure", "--data", data, "--vocab", str(model), "--family", "snippets",
        "--max-units", "8", "--max-tokens", "32", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "28 examples" in result.stdout and "source tokens" in result.stdout


def test_vocab_and_structure_errors_are_one_line(tmp_path, capsys):
    """Missing files and a corpus without text end with a one-line error
    naming what was expected, not a traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    data = sample_path("fewsum_amazon", "train")
    cases = [
        (("demo", "--out", str(blocker / "demo")), "cannot create it"),
        (("vocab", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "v.model")),
         "does not exist"),
        (("vocab", "--data", str(empty), "--out", str(tmp_path / "v.model")),
         "no non-empty sentence"),
        (("structure", "--data", data, "--vocab", str(tmp_path / "none.model")),
         "No such file"),
        (("structure", "--data", str(tmp_path / "missing"), "--vocab",
          sample_tokenizer_path()), "does not exist"),
    ]
    from keras_hsum.cli import main

    for args, message in cases:  # in-process: the handlers' own error paths
        assert main(list(args)) == 1, args
        err = capsys.readouterr().err
        assert message in err and f"keras-hsum {args[0]}: error:" in err, err


def test_unknown_command_fails_with_usage(tmp_path):
    result = _run("train-everything", cwd=tmp_path)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_numbers_out_of_range_are_usage_errors_naming_the_flag(capsys):
    """Checked by argparse before anything loads: a zero beam, length, batch
    or epoch count used to export a model that fails on every request,
    print nothing, or train 0 steps and report success."""
    import pytest

    from keras_hsum.cli import build_parser

    cases = [
        (["export", "--run", "r", "--out", "o", "--max-length", "0"], "--max-length", 1),
        (["export", "--run", "r", "--out", "o", "--beam-size", "-2"], "--beam-size", 1),
        (["export", "--run", "r", "--out", "o", "--block-ngrams", "-1"], "--block-ngrams", 0),
        (["summarize", "--model", "m", "in.jsonl", "--batch-size", "0"], "--batch-size", 1),
        (["train", "--recipe", "flat", "--out", "o", "--epochs", "0"], "--epochs", 1),
        (["train", "--recipe", "flat", "--out", "o", "--steps-per-epoch", "x"],
         "--steps-per-epoch", 1),
        (["demo", "--epochs", "0"], "--epochs", 1),
        (["structure", "--data", "d", "--vocab", "v", "--max-units", "0"], "--max-units", 1),
    ]
    for argv, flag, least in cases:
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args(argv)
        assert exit_info.value.code == 2
        assert f"argument {flag}: expected an int >= {least}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--recipe", "flat", "--out", "o",
                                   "--max-minutes", "0"])
    assert "argument --max-minutes: expected a number > 0" in capsys.readouterr().err


def test_search_options_refuse_sizes_that_cannot_decode():
    import pytest

    from keras_hsum.decoding.search_options import SearchOptions

    for options, message in [
        (dict(max_length=0), "`max_length` must be an int >= 1"),
        (dict(beam_size=0), "`beam_size` must be an int >= 1"),
        (dict(block_ngrams=-1), "`block_ngrams` must be an int >= 0"),
        (dict(min_length=10, max_length=5), r"`min_length` \(10\) must not exceed"),
    ]:
        with pytest.raises(ValueError, match=message):
            SearchOptions(**options)
    assert SearchOptions(min_length=5, max_length=5).max_length == 5
