"""Tests for keras_hsum.data.reader: canonical JSONL and plain text."""

import gzip
import json
import os
import re

import pytest

from keras_hsum.data import corpora
from keras_hsum.data import reader
from keras_hsum.data.reader import InvalidExampleError
from keras_hsum.data.reader import ReadReport

SAMPLE_SPLITS = [
    ("scisummnet", "train"),
    ("scisummnet", "val"),
    ("qmsum_general", "train"),
    ("qmsum_general", "val"),
    ("qmsum_goldspan", "train"),
    ("qmsum_goldspan", "val"),
    ("fewsum_amazon", "train"),
    ("fewsum_amazon", "val"),
    ("fewsum_yelp", "train"),
    ("fewsum_yelp", "val"),
    ("scitldr_a", "train"),
    ("scitldr_a", "val"),
    ("cnndm", "summeval100"),
]


def record(example_id="a", **overrides):
    """A valid canonical record (a dict) with two sections."""
    value = {
        "id": example_id,
        "dataset": "toy",
        "title": "A title",
        "query": None,
        "documents": [
            {
                "title": None,
                "sections": [
                    {
                        "heading": "1 Introduction",
                        "paragraphs": [["First sentence.", "Second one."]],
                    },
                    {
                        "heading": None,
                        "paragraphs": [["Third."], ["Fourth.", "Fifth."]],
                    },
                ],
            }
        ],
        "summary": "The summary.",
        "references": ["The summary.", "Another reference."],
    }
    value.update(overrides)
    return value


def write_lines(path, lines, compress=False):
    """Writes raw lines (str or bytes) joined by newlines; returns the path."""
    data = b"\n".join(
        line if isinstance(line, bytes) else line.encode("utf-8")
        for line in lines
    ) + b"\n"
    if compress:
        data = gzip.compress(data)
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def dumps(value):
    return json.dumps(value, ensure_ascii=False)


# --- canonical JSONL ------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_reads_every_field_of_the_schema(tmp_path, compress):
    first = record("a")
    second = record(
        "b",
        title=None,
        query="What was decided?",
        documents=[
            {"title": "Doc 1", "sections": [{"paragraphs": [["One."]]}]},
            {"title": None, "sections": [{"heading": "H", "paragraphs": []}]},
        ],
    )
    path = write_lines(
        tmp_path / "x.jsonl.gz", [dumps(first), dumps(second)], compress
    )
    examples = list(reader.read_jsonl(path))
    assert [e.id for e in examples] == ["a", "b"]
    a, b = examples
    assert a.dataset == "toy" and a.title == "A title" and a.query is None
    assert a.summary == "The summary."
    assert a.references == ("The summary.", "Another reference.")
    assert len(a.documents) == 1
    sections = a.documents[0].sections
    assert [s.heading for s in sections] == ["1 Introduction", None]
    assert sections[0].paragraphs == (("First sentence.", "Second one."),)
    assert sections[1].paragraphs == (("Third.",), ("Fourth.", "Fifth."))
    assert a.sentences() == [
        "First sentence.",
        "Second one.",
        "Third.",
        "Fourth.",
        "Fifth.",
    ]
    assert a.num_words() == 7
    assert b.query == "What was decided?" and b.title is None
    assert [d.title for d in b.documents] == ["Doc 1", None]
    assert b.documents[0].sections[0].heading is None
    assert b.documents[1].sections[0].paragraphs == ()


def test_gzip_is_detected_from_content_not_name(tmp_path):
    line = dumps(record("z"))
    plain_named_gz = write_lines(tmp_path / "plain.jsonl.gz", [line])
    gzip_named_plain = write_lines(tmp_path / "packed.jsonl", [line], True)
    for path in (plain_named_gz, gzip_named_plain):
        assert [e.id for e in reader.read_jsonl(path)] == ["z"]


def test_unknown_fields_are_ignored_at_every_level(tmp_path):
    value = record("u", community_summary="x", system_summaries={"M0": "y"})
    value["documents"][0]["url"] = "http://example.org"
    value["documents"][0]["sections"][0]["labels"] = [1, 2]
    path = write_lines(tmp_path / "u.jsonl", [dumps(value)])
    (example,) = reader.read_jsonl(path)
    (expected,) = reader.read_jsonl(
        write_lines(tmp_path / "v.jsonl", [dumps(record("u"))])
    )
    assert example == expected


def test_defaults_for_optional_fields(tmp_path):
    minimal = {"documents": [{"sections": [{"paragraphs": [["Only."]]}]}]}
    with_summary = dict(minimal, id=7, summary="S.")
    path = write_lines(
        tmp_path / "m.jsonl", [dumps(minimal), "", dumps(with_summary)]
    )
    first, second = reader.read_jsonl(path)
    assert first.id == "m.jsonl:1"  # file name and line when there is no id
    assert first.summary == "" and first.references == ()
    assert first.title is None and first.query is None and first.dataset == ""
    assert second.id == "7"
    assert second.references == ("S.",)  # the summary is the only reference


def test_is_a_generator_that_yields_before_a_later_broken_line(tmp_path):
    lines = [dumps(record("a")), dumps(record("b")), '{"id": "c", "documents": [']
    path = write_lines(tmp_path / "broken.jsonl", lines)
    stream = reader.read_jsonl(path)
    assert next(stream).id == "a"
    assert next(stream).id == "b"
    with pytest.raises(InvalidExampleError) as info:
        next(stream)
    assert info.value.line_number == 3


def test_streams_a_large_file_lazily(tmp_path):
    # 20,000 lines: taking the first two must not decode the rest, which
    # would raise on the last (broken) line.
    line = dumps(record("x"))
    path = write_lines(tmp_path / "big.jsonl.gz", [line] * 20_000 + ["{"], True)
    stream = reader.read_jsonl(path)
    assert [next(stream).id, next(stream).id] == ["x", "x"]
    stream.close()


def _broken_records():
    sentence_is_number = record("n")
    sentence_is_number["documents"][0]["sections"][1]["paragraphs"][1][1] = 3.5
    sections_is_str = record("s")
    sections_is_str["documents"][0]["sections"] = "1 Introduction ..."
    sections_missing = record("m")
    del sections_missing["documents"][0]["sections"]
    paragraph_is_str = record("p")
    paragraph_is_str["documents"][0]["sections"][0]["paragraphs"] = ["One."]
    no_documents = record("d")
    del no_documents["documents"]
    return [
        ("bad json", '{"id": "j", "documents": [}', "<line>", "JSON"),
        ("sentence is a number", dumps(sentence_is_number),
         "documents[0].sections[1].paragraphs[1][1]", "float"),
        ("sections is a string", dumps(sections_is_str),
         "documents[0].sections", "str"),
        ("sections missing", dumps(sections_missing),
         "documents[0].sections", "NoneType"),
        ("paragraph is not a list", dumps(paragraph_is_str),
         "documents[0].sections[0].paragraphs[0]", "str"),
        ("documents missing", dumps(no_documents), "documents", "missing"),
        ("documents is a dict", dumps(record("e", documents={})),
         "documents", "dict"),
        ("summary is a list", dumps(record("f", summary=["a"])),
         "summary", "list"),
        ("reference is null", dumps(record("r", references=["a", None])),
         "references[1]", "NoneType"),
        ("line is a list", "[1, 2]", "<line>", "list"),
    ]


BROKEN = _broken_records()


@pytest.mark.parametrize(
    "line, field, detail", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
@pytest.mark.parametrize("compress", [False, True])
def test_malformed_line_names_file_line_and_field(
    tmp_path, line, field, detail, compress
):
    # A blank line before the broken one: line numbers count file lines.
    lines = [dumps(record("ok")), "", line, dumps(record("after"))]
    path = write_lines(tmp_path / "bad.jsonl.gz", lines, compress)
    with pytest.raises(InvalidExampleError) as info:
        list(reader.read_jsonl(path))
    error = info.value
    assert error.path == path and error.line_number == 3 and error.field == field
    message = str(error)
    assert path in message and "line 3" in message and f"`{field}`" in message
    assert detail in message


def test_skip_invalid_skips_and_reports_how_many(tmp_path):
    lines = [dumps(record("first"))]
    for _, line, _, _ in BROKEN:
        lines += [line, dumps(record(f"ok{len(lines)}"))]
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    report = ReadReport()
    examples = list(reader.read_jsonl(path, skip_invalid=True, report=report))
    assert len(examples) == 1 + len(BROKEN)
    assert all(e.id == "first" or e.id.startswith("ok") for e in examples)
    assert report.skipped == len(BROKEN)
    assert report.examples == len(examples)
    assert report.lines == len(lines)
    assert len(report.errors) == len(BROKEN)
    assert all("mixed.jsonl, line" in message for message in report.errors)


def test_report_keeps_at_most_max_errors_messages(tmp_path):
    path = write_lines(tmp_path / "all_bad.jsonl", ["{"] * 30)
    report = ReadReport(max_errors=5)
    assert list(reader.read_jsonl(path, skip_invalid=True, report=report)) == []
    assert report.skipped == 30 and len(report.errors) == 5


INVALID_UTF8 = b"caf\xe9 \xff\xfe ok."  # Latin-1 bytes inside a UTF-8 file


def _utf8_lines():
    good = dumps(record("good"))
    bad = record("bad")
    bad["documents"][0]["sections"][0]["paragraphs"] = [["PLACEHOLDER"]]
    bad_line = dumps(bad).encode("utf-8").replace(b"PLACEHOLDER", INVALID_UTF8)
    return [good.encode("utf-8"), bad_line, good.encode("utf-8")]


def test_invalid_utf8_is_an_error_naming_the_line(tmp_path):
    path = write_lines(tmp_path / "latin1.jsonl", _utf8_lines())
    with pytest.raises(InvalidExampleError) as info:
        list(reader.read_jsonl(path))
    assert info.value.line_number == 2
    assert "line 2" in str(info.value) and "UTF-8" in str(info.value)


def test_invalid_utf8_replace_keeps_the_line(tmp_path):
    path = write_lines(tmp_path / "latin1.jsonl.gz", _utf8_lines(), True)
    examples = list(reader.read_jsonl(path, unicode_errors="replace"))
    assert [e.id for e in examples] == ["good", "bad", "good"]
    sentence = examples[1].sentences()[0]
    assert sentence == INVALID_UTF8.decode("utf-8", errors="replace")
    assert sentence.count("\ufffd") == 3 and sentence.startswith("caf")


def test_invalid_utf8_skipped_with_skip_invalid(tmp_path):
    path = write_lines(tmp_path / "latin1.jsonl", _utf8_lines())
    report = ReadReport()
    examples = list(reader.read_jsonl(path, skip_invalid=True, report=report))
    assert [e.id for e in examples] == ["good", "good"]
    assert report.skipped == 1 and "line 2" in report.errors[0]


def _surrogate_lines():
    """Line 2 escapes half of an emoji's surrogate pair (valid JSON and
    UTF-8; json.loads gives a lone surrogate, which is no Unicode text)."""
    bad = record("half")
    bad["documents"][0]["sections"][0]["paragraphs"] = [["Great food PLACEHOLDER here."]]
    bad_line = dumps(bad).replace("PLACEHOLDER", "\\ud83d")  # the 6 characters \ud83d
    return [dumps(record("good")), bad_line, dumps(record("good"))]


def test_a_lone_surrogate_escape_is_invalid_text(tmp_path):
    path = write_lines(tmp_path / "emoji.jsonl", _surrogate_lines())
    with pytest.raises(InvalidExampleError) as info:
        list(reader.read_jsonl(path))
    assert info.value.line_number == 2 and "surrogate" in str(info.value)
    assert "\\ud83d" in str(info.value) and "unicode_errors='replace'" in str(info.value)
    report = ReadReport()
    kept = list(reader.read_jsonl(path, skip_invalid=True, report=report))
    assert [e.id for e in kept] == ["good", "good"] and report.skipped == 1
    replaced = list(reader.read_jsonl(path, unicode_errors="replace"))
    assert replaced[1].sentences()[0] == "Great food \ufffd here."
    # Every sentence is Unicode text again (UTF-8 encodes it).
    for sentence in replaced[1].sentences():
        sentence.encode("utf-8")


def test_unknown_unicode_errors_mode_is_rejected(tmp_path):
    path = write_lines(tmp_path / "x.jsonl", [dumps(record())])
    with pytest.raises(ValueError, match="unicode_errors"):
        list(reader.read_jsonl(path, unicode_errors="ignore"))


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    line = b"\xef\xbb\xbf" + dumps(record("bom")).encode("utf-8")
    path = write_lines(tmp_path / "bom.jsonl", [line])
    assert [e.id for e in reader.read_jsonl(path)] == ["bom"]


def test_non_ascii_text_round_trips(tmp_path):
    value = record("ü")
    value["documents"][0]["sections"][0]["paragraphs"] = [
        ["Größe: 3 µm — “quoted” 数据 🙂.", "Line\u2028separator."]
    ]
    path = write_lines(tmp_path / "u.jsonl.gz", [dumps(value)], True)
    (example,) = reader.read_jsonl(path)
    assert example.sentences()[:2] == value["documents"][0]["sections"][0][
        "paragraphs"
    ][0]


@pytest.mark.parametrize("name, split", SAMPLE_SPLITS)
def test_every_bundled_sample_file_reads(name, split):
    report = ReadReport()
    examples = list(reader.read_jsonl(corpora.sample_path(name, split), report=report))
    assert examples and report.skipped == 0
    assert report.examples == report.lines == len(examples)
    assert all(e.documents and e.summary for e in examples)
    assert len({e.id for e in examples}) == len(examples)
    assert all(e.references[0] == e.summary for e in examples)


def _shared_files():
    root = corpora.SHARED_ROOT
    if not os.path.isdir(root):
        return []
    return sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(root)
        for name in names
        if name.endswith(".jsonl.gz")
    )


@pytest.mark.skipif(not _shared_files(), reason="no shared corpora here")
@pytest.mark.parametrize(
    "path", _shared_files(), ids=lambda p: os.path.relpath(p, corpora.SHARED_ROOT)
)
def test_every_shared_real_file_reads(path):
    report = ReadReport()
    count = 0
    for example in reader.read_jsonl(path, report=report):
        count += 1
        assert example.documents
    assert count > 0 and report.skipped == 0 and report.examples == count


def test_corpus_path_prefers_shared_data_then_the_sample(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_HSUM_DATA", str(tmp_path))
    os.makedirs(tmp_path / "scitldr_a")
    override = write_lines(tmp_path / "scitldr_a" / "val.jsonl.gz", [dumps(record())])
    assert corpora.corpus_path("scitldr_a", "val") == override
    fallback = corpora.corpus_path("fewsum_yelp", "val")
    shared = os.path.join(corpora.SHARED_ROOT, "fewsum_yelp", "val.jsonl.gz")
    expected = shared if os.path.exists(shared) else corpora.sample_path(
        "fewsum_yelp", "val"
    )
    assert fallback == expected
    with pytest.raises(FileNotFoundError, match="scitldr_a/val"):
        corpora.sample_path("scitldr_a", "test")


# --- plain text -----------------------------------------------------------

TEXT = """\
First paragraph, line one.
Still the first paragraph. It has two sentences.

Second paragraph! Is it?

---
Second document.
   
Its second paragraph, e.g. this one.
---

---
"""


def test_plain_text_paragraphs_and_documents(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    example = reader.read_text(path)
    assert example.id == "input.txt" and example.summary == ""
    assert example.references == () and example.dataset == "text"
    paragraphs = [
        [list(p) for s in d.sections for p in s.paragraphs]
        for d in example.documents
    ]
    assert paragraphs == [
        [
            [
                "First paragraph, line one.",
                "Still the first paragraph.",
                "It has two sentences.",
            ],
            ["Second paragraph!", "Is it?"],
        ],
        [["Second document."], ["Its second paragraph, e.g. this one."]],
    ]


def test_plain_text_sections(tmp_path):
    # A line holding only `===` (spaces around it allowed) starts a section;
    # leading, repeated and trailing markers make no empty section; `===`
    # inside a line, or with other text, is text.
    text = (
        "===\n\nIntro one.\n\n  ===  \n===\nMethod one.\n\nMethod two ===.\n"
        "===\n\n---\n=== x\n===\nOther document.\n===\n"
    )
    path = tmp_path / "sections.txt"
    path.write_text(text, encoding="utf-8")
    example = reader.read_text(path)
    structure = [
        [[list(p) for p in s.paragraphs] for s in d.sections]
        for d in example.documents
    ]
    assert structure == [
        [[["Intro one."]], [["Method one."], ["Method two ===."]]],
        [[["=== x"]], [["Other document."]]],
    ]
    assert all(s.heading is None for d in example.documents for s in d.sections)


def test_plain_text_escaped_markers(tmp_path):
    # A backslash before a whole-line marker makes it text (one backslash
    # fewer); anything else with a backslash is text as written.
    text = "One.\n\n\\===\n\n\\\\---\n  \\---  \n===\n\\ ===\n\\=== x\n\\====\n"
    path = tmp_path / "escaped.txt"
    path.write_text(text, encoding="utf-8")
    example = reader.read_text(path)
    assert [[list(s.paragraphs) for s in d.sections] for d in example.documents] == [
        [[("One.",), ("===",), ("\\--- ---",)], [("\\ === \\=== x \\====",)]]
    ]


def test_render_documents_keeps_paragraphs_that_look_like_markers():
    # Paragraphs equal to a marker (or an escaped one) and sentences with
    # line breaks, blank lines and markers inside read back as the same
    # paragraphs: nothing becomes a marker, no paragraph is split or lost.
    paragraphs = [("===",), ("---",), (" --- ",), ("\\===",), ("\\\\---",),
                  ("a\n\nb",), ("x\n===\ny", "z."), ("\n---\n",), ("",), ("\\x",)]
    example = reader.Example(
        id="x", dataset="d", title=None, query=None, summary="", references=(),
        documents=(reader.Document(None, (reader.Section(None, tuple(paragraphs)),
                                          reader.Section(None, (("After.",),)))),
                   reader.Document(None, (reader.Section(None, (("===",),)),))),
    )
    back = reader.example_from_text(
        f"\n{reader.DOCUMENT_BREAK}\n".join(reader.render_documents(example)))
    expected = [" ".join(" ".join(p).split()) for p in paragraphs]
    assert [[[" ".join(p) for p in s.paragraphs] for s in d.sections]
            for d in back.documents] == [[[e for e in expected if e], ["After."]], [["==="]]]


@pytest.mark.parametrize("name,split", SAMPLE_SPLITS)
def test_render_documents_round_trips_sections(name, split):
    # The text format carries the structure the builders read: documents,
    # sections and paragraphs (sentences are re-split, so they are compared
    # joined). Documents and sections without text drop out, as in reading.
    from keras_hsum.data.sentences import split_sentences

    def layout(documents):
        kept = []
        for document in documents:
            sections = [
                [" ".join(p) for p in section.paragraphs if " ".join(p).strip()]
                for section in document.sections
            ]
            sections = [s for s in sections if s]
            if sections:
                kept.append(sections)
        return kept

    examples = list(reader.read_jsonl(corpora.sample_path(name, split)))[:40]
    for example in examples:
        texts = reader.render_documents(example)
        assert len(texts) == len(example.documents)
        back = reader.example_from_text(f"\n{reader.DOCUMENT_BREAK}\n".join(texts))
        expected = [
            [[" ".join(split_sentences(p)) for p in s] for s in d]
            for d in layout(example.documents)
        ]
        assert layout(back.documents) == expected, example.id


def _rendered_reference(example):
    """`render_documents` and `rendered_example` written out from their
    docstrings: a paragraph's sentences joined by spaces, its lines
    stripped and joined by spaces (blank ones dropped), a paragraph that
    is backslashes and a marker escaped with one more; paragraphs apart by
    a blank line, sections by a `===` line, empty ones dropped."""
    documents = []
    for document in example.documents:
        sections = []
        for section in document.sections:
            paragraphs = []
            for sentences in section.paragraphs:
                lines = [line.strip() for line in " ".join(sentences).split("\n")]
                text = " ".join(line for line in lines if line)
                if re.fullmatch(r"\\*(===|---)", text):
                    text = "\\" + text
                if text:
                    paragraphs.append(text)
            if paragraphs:
                sections.append("\n\n".join(paragraphs))
        documents.append("\n\n===\n\n".join(sections))
    return reader.RenderedExample(
        id=example.id, dataset=example.dataset, title=example.title,
        query=example.query, documents=tuple(documents), summary=example.summary,
        references=example.references,
    )


def test_rendered_reading_equals_the_rendered_examples_of_every_sample(tmp_path):
    # read_jsonl(rendered=True) validates and renders each line in one walk;
    # it must give every bundled example as reading then rendering gives it.
    lines = []
    for name, split in SAMPLE_SPLITS:
        with open(corpora.sample_path(name, split), "rb") as handle:
            data = handle.read()
        lines += (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).splitlines()
    path = write_lines(tmp_path / "all.jsonl", lines)
    examples = list(reader.read_jsonl(path))
    assert len(examples) > 1000
    expected = [_rendered_reference(example) for example in examples]
    assert [list(e.documents) for e in expected] == [
        reader.render_documents(example) for example in examples]
    assert list(reader.read_jsonl(path, rendered=True)) == expected


def _mutations(rng, value):
    """`value` (a JSON value) with a few random changes: a field deleted or
    given another type, odd but valid strings inserted or swapped in."""
    odd_values = [None, 0, 1, True, False, 1.5, "", "x", [], {}, ["x"], [1], [None],
                  [["x"]], {"sections": []}]
    odd_texts = ["===", " --- ", "\\===", "\\\\---", "a\n\nb", "\n---\n", " \u2028x\x1c ",
                 "\x85", "é\u00a0z", "   ", "x\r\ny", "-==="]
    if isinstance(value, dict):
        value = dict(value)
        for key in list(value):
            roll = rng.random()
            if roll < 0.01:
                del value[key]
            elif roll < 0.025:
                value[key] = odd_values[rng.integers(len(odd_values))]
            else:
                value[key] = _mutations(rng, value[key])
        return value
    if isinstance(value, list):
        value = [_mutations(rng, item) for item in value]
        if rng.random() < 0.02:
            value.append(odd_values[rng.integers(len(odd_values))])
        text = odd_texts[rng.integers(len(odd_texts))]
        if rng.random() < 0.3 and all(isinstance(item, str) for item in value):
            value.insert(int(rng.integers(len(value) + 1)), text)
        elif rng.random() < 0.3 and value and all(isinstance(item, list) for item in value):
            value.insert(int(rng.integers(len(value) + 1)), [text])
        return value
    if isinstance(value, str) and rng.random() < 0.1:
        return odd_texts[rng.integers(len(odd_texts))]
    return value


def test_rendered_from_dict_refuses_and_renders_as_example_from_dict():
    # 3,000 randomly broken or odd records (seed 58): each gives the error
    # example_from_dict raises, or the reference rendering of its Example.
    import numpy as np

    rng = np.random.default_rng(58)
    bases = [record(), record(7, dataset=None, references=None, title=None),
             record("q", query="Who?", summary="", references=[])]
    outcomes = set()
    for _ in range(3000):
        value = _mutations(rng, bases[rng.integers(len(bases))])
        try:
            expected = _rendered_reference(reader.example_from_dict(value, "f.jsonl", 3))
        except InvalidExampleError as error:
            expected = str(error)
        try:
            got = reader.rendered_from_dict(value, "f.jsonl", 3)
        except InvalidExampleError as error:
            got = str(error)
        assert got == expected, value
        outcomes.add(type(expected))
    assert outcomes == {str, reader.RenderedExample}


def test_rendered_reading_of_a_folder_counts_as_reading(tmp_path):
    write_lines(tmp_path / "b.jsonl.gz", [dumps(record("b1")), "{broken", dumps(record("b2"))],
                True)
    (tmp_path / "a.txt").write_text("Plain text.\n\n===\n\nTwo.\n", encoding="utf-8")
    (tmp_path / "c.txt").write_bytes(b"Bad " + INVALID_UTF8 + b"\n")
    plain, rendered = ReadReport(), ReadReport()
    expected = [_rendered_reference(e) for e in reader.read_examples(
        tmp_path, skip_invalid=True, unicode_errors="strict", report=plain)]
    got = list(reader.read_examples(tmp_path, skip_invalid=True, unicode_errors="strict",
                                    report=rendered, rendered=True))
    assert got == expected and [e.id for e in got] == ["a.txt", "b1", "b2"]
    assert got[0].documents == ("Plain text.\n\n===\n\nTwo.",)
    assert rendered == plain and plain.skipped == 2


def test_resplit_sentences_keeps_everything_but_the_split():
    section = reader.Section("Intro", (("See e.g.", "Smith et al. 2019. It works."), ("",)))
    example = reader.Example(
        id="x", dataset="d", title="T", query="Q",
        documents=(reader.Document("D", (section,)),),
        summary="S", references=("S", "R"),
    )
    resplit = reader.resplit_sentences(example)
    assert resplit.documents[0].sections[0].paragraphs == (
        ("See e.g. Smith et al. 2019.", "It works."),
    )
    assert resplit.documents[0].title == "D"
    assert resplit.documents[0].sections[0].heading == "Intro"
    assert (resplit.id, resplit.title, resplit.query, resplit.summary, resplit.references) == (
        "x", "T", "Q", "S", ("S", "R"))


def test_plain_text_invalid_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"Fine line.\n\nSecond " + INVALID_UTF8 + b"\n")
    example = reader.read_text(path)
    assert "\ufffd" in example.sentences()[1]
    with pytest.raises(InvalidExampleError) as info:
        reader.read_text(path, unicode_errors="strict")
    assert info.value.line_number == 3 and "line 3" in str(info.value)


def test_read_examples_reads_a_folder_in_sorted_order(tmp_path):
    write_lines(tmp_path / "b.jsonl.gz", [dumps(record("b1")), dumps(record("b2"))], True)
    (tmp_path / "a.txt").write_text("Plain text. Two sentences.\n", encoding="utf-8")
    (tmp_path / "c.md").write_text("ignored", encoding="utf-8")
    write_lines(tmp_path / "d.jsonl", [dumps(record("d1"))])
    report = ReadReport()
    ids = [e.id for e in reader.read_examples(tmp_path, report=report)]
    assert ids == ["a.txt", "b1", "b2", "d1"]
    assert report.examples == 4
    with pytest.raises(ValueError, match="c.md"):
        list(reader.read_examples(tmp_path / "c.md"))


def test_read_examples_of_a_missing_path_says_it_does_not_exist(tmp_path):
    for missing in (tmp_path / "corpus", tmp_path / "corpus.jsonl.gz"):
        with pytest.raises(FileNotFoundError, match="does not exist; expected a .jsonl"):
            list(reader.read_examples(missing))


def test_read_examples_applies_unicode_errors_to_text_files(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"Bad " + INVALID_UTF8 + b"\n")
    write_lines(tmp_path / "good.jsonl", [dumps(record("g"))])
    with pytest.raises(InvalidExampleError, match="bad.txt, line 1"):
        list(reader.read_examples(tmp_path))
    report = ReadReport()
    ids = [e.id for e in reader.read_examples(tmp_path, skip_invalid=True, report=report)]
    assert ids == ["g"] and report.skipped == 1
    replaced = list(reader.read_examples(tmp_path, unicode_errors="replace"))
    assert [e.id for e in replaced] == ["bad.txt", "g"]


def test_one_example_per_reference_on_fewsum():
    """Every reference of the real FewSum sample becomes one training pair,
    the inputs untouched and each reference first in its copy."""
    examples = list(reader.read_examples(corpora.sample_path("fewsum_amazon", "train")))
    assert all(len(e.references) == 3 for e in examples)
    pairs = list(reader.one_example_per_reference(examples))
    assert len(pairs) == 3 * len(examples)
    assert len({p.id for p in pairs}) == len(pairs)
    for i, example in enumerate(examples):
        copies = pairs[3 * i: 3 * i + 3]
        assert [c.summary for c in copies] == list(example.references)
        for c in copies:
            assert c.documents == example.documents and c.title == example.title
            assert c.references[0] == c.summary
            assert sorted(c.references) == sorted(example.references)
            assert c.id.startswith(example.id + "#ref")


def test_one_example_per_reference_keeps_single_and_missing_references():
    single = reader.example_from_dict({**record("one"), "references": ["The summary."]})
    none = reader.example_from_dict({**record("none"), "summary": "", "references": []})
    assert list(reader.one_example_per_reference([single, none])) == [single, none]


def test_leave_one_out_examples_on_fewsum():
    """Each of the 8 real reviews becomes the summary of the other 7."""
    examples = list(reader.read_examples(corpora.sample_path("fewsum_yelp", "train")))[:5]
    pairs = list(reader.leave_one_out_examples(examples))
    assert len(pairs) == sum(len(e.documents) for e in examples)
    assert len({p.id for p in pairs}) == len(pairs)
    position = 0
    for example in examples:
        for i, held_out in enumerate(example.documents):
            pair = pairs[position]
            position += 1
            assert pair.id == f"{example.id}#loo{i}"
            others = [d for j, d in enumerate(example.documents) if j != i]
            assert list(pair.documents) == others
            sentences = [s for sec in held_out.sections for par in sec.paragraphs for s in par]
            assert pair.summary == " ".join(sentences) and pair.references == (pair.summary,)
            # No human reference leaks into the pair.
            assert not set(example.references) & {pair.summary}


def test_leave_one_out_examples_skips_short_inputs_and_checks_its_argument():
    one_document = record("one")
    assert len(one_document["documents"]) == 1
    two = dict(one_document, id="two", documents=one_document["documents"] * 2)
    examples = [reader.example_from_dict(one_document), reader.example_from_dict(two)]
    assert list(reader.leave_one_out_examples(examples)) == []
    # Two copies of one document: each pair's input would be its own target.
    assert list(reader.leave_one_out_examples(examples, min_documents=2)) == []
    other = json.loads(json.dumps(one_document["documents"][0]))
    other["sections"][0]["paragraphs"] = [["A different review.", "It is short."]]
    three = dict(one_document, id="three", documents=one_document["documents"] * 2 + [other])
    pairs = list(reader.leave_one_out_examples([reader.example_from_dict(three)],
                                               min_documents=2))
    assert [p.id for p in pairs] == ["three#loo0", "three#loo1", "three#loo2"]
    assert [len(p.documents) for p in pairs] == [1, 1, 2]
    for pair in pairs:  # the target is never one of its input documents
        inputs = [" ".join(d.sentences()) for d in pair.documents]
        assert pair.summary not in inputs
    with pytest.raises(ValueError, match="`min_documents` must be an int >= 2, received 1"):
        list(reader.leave_one_out_examples([], min_documents=1))
