"""`keras-hsum evaluate`, run as a subprocess on the bundled data."""

import argparse
import json
import os
import subprocess
import sys

import PIL.Image
import pytest
from rouge_score import rouge_scorer

from keras_hsum.data.corpora import sample_path
from keras_hsum.data.reader import read_jsonl
from keras_hsum.data.sentences import split_sentences
from keras_hsum.evaluation import cli


def test_evaluate_writes_json_report_and_png(tmp_path):
    data = os.path.dirname(sample_path("qmsum_goldspan", "val"))
    result = subprocess.run(
        [sys.executable, "-m", "keras_hsum.evaluation.cli", "evaluate",
         "--baseline", "lead3", "--baseline", "textrank", "--data", data, "--split", "val",
         "--max-examples", "12", "--num-resamples", "200",
         "--out", str(tmp_path / "report.json"), "--plot", str(tmp_path / "chart.png")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| lead3 | qmsum | 12 |" in result.stdout
    reports = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert [r["system"] for r in reports] == ["lead3", "textrank"]
    examples = list(read_jsonl(sample_path("qmsum_goldspan", "val")))[:12]
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    for row, example in zip(reports[0]["examples"], examples):
        assert row["summary"] == "\n".join(example.sentences()[:3])
        expected = scorer.score("\n".join(split_sentences(example.summary)), row["summary"])
        assert row["scores"]["rougeLsum"]["f1"] == pytest.approx(expected["rougeLsum"].fmeasure, abs=1e-12)
    with open(tmp_path / "chart.png", "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    # The chart names the data it scored: the examples' own field says only
    # "qmsum", which qmsum_general's examples say too.
    assert {e.dataset for e in examples} == {"qmsum"}
    with PIL.Image.open(tmp_path / "chart.png") as image:
        assert image.text["Title"] == (
            "qmsum_goldspan (val split, 12 examples; error bars: 95% bootstrap CI)")


def _parse(argv):
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_missing_model_and_bad_arguments_are_clear(tmp_path, capsys):
    data = sample_path("qmsum_goldspan", "val")
    missing = str(tmp_path / "saved_models" / "ht" / "1")
    assert cli.run(_parse(["evaluate", "--model", missing, "--data", data])) == 1
    assert "does not exist" in capsys.readouterr().err
    assert cli.run(_parse(["evaluate", "--data", data])) == 2
    assert "at least one --model or --baseline" in capsys.readouterr().err
    args = _parse(["evaluate", "--baseline", "lead3", "--name", "x", "--data", data])
    assert cli.run(args) == 2
    assert "at most one name per model" in capsys.readouterr().err


def test_data_resolution(tmp_path):
    assert cli.resolve_data("scitldr_a", "val").endswith(os.path.join("scitldr_a", "val.jsonl.gz"))
    folder = os.path.dirname(sample_path("fewsum_yelp", "train"))
    assert cli.resolve_data(folder, "train") == sample_path("fewsum_yelp", "train")
    with pytest.raises(FileNotFoundError, match="dataset name"):
        cli.resolve_data(str(tmp_path / "missing"), "val")


def test_unknown_split_is_an_error_not_every_split(tmp_path, capsys):
    """A folder of split files without the asked split names the splits it
    holds (reading the folder whole would score train and val together)."""
    folder = os.path.dirname(sample_path("fewsum_yelp", "train"))
    with pytest.raises(FileNotFoundError, match=r"\['train', 'val'\].*tst\.jsonl"):
        cli.resolve_data(folder, "tst")
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", folder,
                           "--split", "tst"])) == 2
    assert "holds the splits ['train', 'val']" in capsys.readouterr().err
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", "fewsum_yelp",
                           "--split", "tst"])) == 2
    assert "'fewsum_yelp' split 'tst'" in capsys.readouterr().err
    # A folder of corpus files (no split names) is still read whole.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "reviews.jsonl.gz").write_bytes(
        open(sample_path("fewsum_yelp", "val"), "rb").read())
    assert cli.resolve_data(str(corpus), "val") == str(corpus)


def test_invalid_lines_and_textless_examples_are_reported(tmp_path, capsys):
    lines = gzip_lines(sample_path("fewsum_yelp", "val"))
    data = tmp_path / "val.jsonl"
    record = json.loads(lines[0])
    empty = dict(record, id="no-text", documents=[])
    data.write_text("\n".join([lines[0], json.dumps(empty), lines[1]]) + "\n")
    out = tmp_path / "report.json"
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", str(data),
                           "--out", str(out)])) == 0
    assert "1 of 3 examples" in capsys.readouterr().err
    report = json.load(open(out))
    assert report["num_examples"] == 2
    assert [e["id"] for e in report["examples"]] == [
        json.loads(lines[0])["id"], json.loads(lines[1])["id"]]
    unreferenced = dict(record, id="no-reference", summary="", references=[])
    data.write_text("\n".join([lines[0], json.dumps(unreferenced), lines[1]]) + "\n")
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", str(data),
                           "--out", str(out)])) == 0
    assert "1 of 3 examples" in capsys.readouterr().err
    assert json.load(open(out))["num_examples"] == 2
    data.write_text("\n".join([lines[0], '{"id": "broken", "documents": 3}']) + "\n")
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", str(data)])) == 1
    err = capsys.readouterr().err
    assert "line 2" in err and "Traceback" not in err


def gzip_lines(path):
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def test_bad_numbers_and_unwritable_outputs_fail_before_scoring(tmp_path, capsys):
    data = sample_path("fewsum_yelp", "val")
    for flag, value in (("--num-resamples", "0"), ("--max-examples", "-1"),
                        ("--max-sentences", "0"), ("--max-words", "-3"),
                        ("--batch-size", "0")):
        with pytest.raises(SystemExit):
            _parse(["evaluate", "--baseline", "lead3", "--data", data, flag, value])
        assert f"argument {flag}: expected an int >=" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    for flag in ("--out", "--markdown", "--plot"):
        target = str(blocker / "report.json")  # a folder inside a file
        assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", data,
                               flag, target])) == 2
        captured = capsys.readouterr()
        assert f"evaluate: error: {flag} " in captured.err and "cannot create" in captured.err
        assert "ROUGE" not in captured.out  # nothing was scored
    markdown = tmp_path / "new" / "table.md"
    assert cli.run(_parse(["evaluate", "--baseline", "lead3", "--data", data,
                           "--markdown", str(markdown)])) == 0
    assert markdown.read_text().startswith("|")


def test_chart_title_names_the_data_as_given(tmp_path):
    folder = os.path.dirname(sample_path("qmsum_general", "val"))
    assert cli._data_label("qmsum_general") == "qmsum_general"
    assert cli._data_label(folder + os.sep) == "qmsum_general"
    assert cli._data_label(sample_path("qmsum_general", "val")) == os.path.join(
        "qmsum_general", os.path.basename(sample_path("qmsum_general", "val")))
