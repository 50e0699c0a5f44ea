"""Streaming readers for the canonical JSONL schema and for plain text.

The canonical schema (one JSON object per line, optionally gzip-compressed) is
described in `../shared/data/README.md`:

```
{"id": str, "dataset": str, "title": str | null, "query": str | null,
 "documents": [{"title": str | null,
                "sections": [{"heading": str | null,
                              "paragraphs": [["sentence", ...], ...]}]}],
 "summary": str, "references": [str, ...]}
```

Unknown fields are ignored. Readers are generators: a corpus is never held in
memory at once. `one_example_per_reference` and `leave_one_out_examples` turn
examples into more training pairs (every reference; each document as the
summary of the others).
"""

import dataclasses
import gzip
import io
import json
import os
import re

from keras_hsum.checks import check_int
from keras_hsum.data.sentences import split_sentences

# Plain-text markers (`read_text`): a line holding only one of them.
SECTION_BREAK = "==="
DOCUMENT_BREAK = "---"
# A line holding only backslashes and a marker is text: the marker with one
# backslash fewer (`\===` reads as the text `===`), group 1 of this pattern.
# `render_documents` writes a paragraph equal to a marker so.
ESCAPED_MARKER = r"\\(\\*(?:===|---))"
_ESCAPED_MARKER = re.compile(ESCAPED_MARKER)
_MARKERS = (SECTION_BREAK, DOCUMENT_BREAK)


@dataclasses.dataclass(frozen=True)
class Section:
    """A discourse section: an optional heading and paragraphs of sentences."""

    heading: str | None
    paragraphs: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Document:
    """One input document: an optional title and its sections in order."""

    title: str | None
    sections: tuple[Section, ...]

    def sentences(self):
        """The document's sentences in reading order (a list of str)."""
        return [
            sentence
            for section in self.sections
            for paragraph in section.paragraphs
            for sentence in paragraph
        ]


@dataclasses.dataclass(frozen=True)
class Example:
    """One summarization example of the canonical schema.

    `documents` holds one document for single-document tasks and several for
    multi-document tasks. `summary` is the primary reference ("" when the
    example has no reference, e.g. plain text read for inference);
    `references` holds every reference, the primary one first.
    """

    id: str
    dataset: str
    title: str | None
    query: str | None
    documents: tuple[Document, ...]
    summary: str
    references: tuple[str, ...]

    def sentences(self):
        """All sentences of all documents, in reading order (a list of str)."""
        return [
            sentence for document in self.documents for sentence in document.sentences()
        ]

    def num_words(self):
        """Whitespace word count of the input documents."""
        return sum(len(s.split()) for s in self.sentences())


@dataclasses.dataclass(frozen=True)
class RenderedExample:
    """An `Example` with its documents as the plain text a SavedModel
    receives: `documents` holds `render_documents(example)`, one string per
    document; the other fields are the example's (`rendered_example`)."""

    id: str
    dataset: str
    title: str | None
    query: str | None
    documents: tuple[str, ...]
    summary: str
    references: tuple[str, ...]


class InvalidExampleError(ValueError):
    """A line of a corpus file does not follow the canonical schema.

    Attributes:
        path: the file.
        line_number: 1-based line number in the (decompressed) file.
        field: the offending field as a path, e.g. `documents[0].sections`.
    """

    def __init__(self, path, line_number, field, message):
        self.path = str(path)
        self.line_number = line_number
        self.field = field
        super().__init__(
            f"{self.path}, line {line_number}, field `{field}`: {message}"
        )


@dataclasses.dataclass
class ReadReport:
    """Counts of what a reader did; filled while the reader is consumed.

    Attributes:
        lines: non-blank lines seen.
        examples: examples yielded.
        skipped: invalid lines skipped (only with `skip_invalid=True`).
        errors: the first `max_errors` messages of skipped lines.
        ignored_files: files of a folder that are not read (neither
            JSONL nor text, e.g. `notes.md`, `data.json`).
    """

    lines: int = 0
    examples: int = 0
    skipped: int = 0
    errors: list = dataclasses.field(default_factory=list)
    max_errors: int = 20
    ignored_files: list = dataclasses.field(default_factory=list)

    def add_error(self, message):
        self.skipped += 1
        if len(self.errors) < self.max_errors:
            self.errors.append(message)


def _expect(value, kind, path, line_number, field):
    if not isinstance(value, kind):
        names = (
            " or ".join(k.__name__ for k in kind)
            if isinstance(kind, tuple)
            else kind.__name__
        )
        raise InvalidExampleError(
            path,
            line_number,
            field,
            f"expected {names}, received {type(value).__name__} "
            f"({_preview(value)}).",
        )
    return value


def _preview(value, limit=60):
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def _optional_str(record, key, path, line_number):
    value = record.get(key)
    if value is None:
        return None
    return _expect(value, str, path, line_number, key)


def example_from_dict(record, path="<dict>", line_number=0):
    """Validates one decoded JSON object and returns an `Example`.

    Raises:
        InvalidExampleError: naming the file, line and field that is wrong.
    """
    _expect(record, dict, path, line_number, "<line>")
    if "documents" not in record:
        raise InvalidExampleError(
            path, line_number, "documents", "missing; every example needs it."
        )
    documents = []
    raw_documents = _expect(
        record["documents"], list, path, line_number, "documents"
    )
    for d, raw_document in enumerate(raw_documents):
        field = f"documents[{d}]"
        _expect(raw_document, dict, path, line_number, field)
        raw_sections = _expect(
            raw_document.get("sections"),
            list,
            path,
            line_number,
            f"{field}.sections",
        )
        sections = []
        for s, raw_section in enumerate(raw_sections):
            sfield = f"{field}.sections[{s}]"
            _expect(raw_section, dict, path, line_number, sfield)
            heading = raw_section.get("heading")
            if heading is not None:
                _expect(heading, str, path, line_number, f"{sfield}.heading")
            raw_paragraphs = _expect(
                raw_section.get("paragraphs"),
                list,
                path,
                line_number,
                f"{sfield}.paragraphs",
            )
            paragraphs = []
            for p, raw_paragraph in enumerate(raw_paragraphs):
                pfield = f"{sfield}.paragraphs[{p}]"
                _expect(raw_paragraph, list, path, line_number, pfield)
                for i, sentence in enumerate(raw_paragraph):
                    _expect(sentence, str, path, line_number, f"{pfield}[{i}]")
                paragraphs.append(tuple(raw_paragraph))
            sections.append(Section(heading, tuple(paragraphs)))
        title = raw_document.get("title")
        if title is not None:
            _expect(title, str, path, line_number, f"{field}.title")
        documents.append(Document(title, tuple(sections)))

    summary = record.get("summary")
    summary = "" if summary is None else summary
    _expect(summary, str, path, line_number, "summary")
    references = record.get("references")
    if references is None:
        references = [summary] if summary else []
    _expect(references, list, path, line_number, "references")
    for i, reference in enumerate(references):
        _expect(reference, str, path, line_number, f"references[{i}]")
    raw_id = record.get("id", f"{os.path.basename(str(path))}:{line_number}")
    _expect(raw_id, (str, int), path, line_number, "id")
    dataset = record.get("dataset") or ""
    _expect(dataset, str, path, line_number, "dataset")
    return Example(
        id=str(raw_id),
        dataset=dataset,
        title=_optional_str(record, "title", path, line_number),
        query=_optional_str(record, "query", path, line_number),
        documents=tuple(documents),
        summary=summary,
        references=tuple(references),
    )


_UTF8_BOM = b"\xef\xbb\xbf"


def _open_binary(path):
    path = os.fspath(path)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


_SURROGATE = re.compile("[\ud800-\udfff]")
# The only way a surrogate reaches a decoded record: a \uD800-\uDFFF escape
# (UTF-8 decoding refuses encoded surrogates), so lines without one skip
# the walk over the record.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _without_lone_surrogates(record, unicode_errors, path, line_number):
    """`record` with no lone UTF-16 surrogate in its strings.

    JSON may escape half of a surrogate pair (`"\\ud83d"`, text cut inside
    an emoji); `json.loads` keeps it as a lone surrogate, which is no
    Unicode text: UTF-8 cannot encode it and SentencePiece refuses it. It
    is invalid input, treated as invalid UTF-8 is: refused under "strict",
    U+FFFD under "replace".
    """

    def clean(value):
        if isinstance(value, str):
            if not _SURROGATE.search(value):
                return value
            if unicode_errors == "strict":
                at = _SURROGATE.search(value).start()
                raise InvalidExampleError(
                    path,
                    line_number,
                    "<line>",
                    f"a lone UTF-16 surrogate escape (\\u{ord(value[at]):04x}) in a "
                    "string; pass unicode_errors='replace' to keep such lines.",
                )
            return _SURROGATE.sub("\ufffd", value)
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {clean(key): clean(item) for key, item in value.items()}
        return value

    return clean(record)


def parse_jsonl_line(raw, path="<line>", line_number=0, unicode_errors="strict"):
    """One line of a canonical JSONL file as an `Example`.

    What `read_jsonl` does to every non-blank line; readers that split a
    file themselves (`keras-hsum preprocess` reads byte ranges of a file in
    parallel) call it to refuse the same lines.

    Args:
        raw: the line's bytes (a trailing newline is allowed).
        path, line_number: where the line comes from, for error messages.
        unicode_errors: `"strict"` or `"replace"`, as in `read_jsonl`.

    Returns:
        The `Example`.

    Raises:
        InvalidExampleError: for invalid UTF-8, invalid JSON, a lone
            surrogate escape (under "strict") or a record that does not
            follow the schema; the message names the file, line and field.
    """
    record = _decoded_line(raw, path, line_number, unicode_errors)
    return example_from_dict(record, path, line_number)


def _decoded_line(raw, path, line_number, unicode_errors):
    """A line's JSON object, without lone surrogates (`parse_jsonl_line`)."""
    try:
        text = raw.decode("utf-8", errors=unicode_errors)
    except UnicodeDecodeError as error:
        raise InvalidExampleError(
            path,
            line_number,
            "<line>",
            f"invalid UTF-8 at byte {error.start} of the line; "
            "pass unicode_errors='replace' to keep such lines.",
        ) from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidExampleError(
            path,
            line_number,
            "<line>",
            f"not valid JSON ({error.msg} at column {error.colno}).",
        ) from None
    if _SURROGATE_ESCAPE.search(text):
        record = _without_lone_surrogates(record, unicode_errors, path, line_number)
    return record


def read_jsonl(path, skip_invalid=False, unicode_errors="strict", report=None,
               rendered=False):
    """Streams `Example`s from a canonical JSONL file (gzip or plain).

    Args:
        path: a `.jsonl` or `.jsonl.gz` file (gzip is detected from content).
        skip_invalid: when True, lines that are not valid JSON, not valid
            UTF-8 or do not follow the schema are skipped and counted in
            `report` instead of raising.
        unicode_errors: `"strict"` (invalid UTF-8 is an error) or
            `"replace"` (invalid bytes become U+FFFD and the line is kept).
            A lone UTF-16 surrogate escape in a JSON string (`"\\ud83d"`,
            half an emoji) counts as invalid text too.
        report: an optional `ReadReport` that receives the counts.
        rendered: yield `RenderedExample`s instead (`rendered_from_dict`:
            the same lines refused, with the same errors).

    Yields:
        `Example` objects in file order.

    Raises:
        InvalidExampleError: on the first invalid line, naming the file, the
            line number and the field, unless `skip_invalid=True`.
    """
    if unicode_errors not in ("strict", "replace"):
        raise ValueError(
            "`unicode_errors` must be 'strict' or 'replace', "
            f"received {unicode_errors!r}."
        )
    report = report if report is not None else ReadReport()
    build = rendered_from_dict if rendered else example_from_dict
    with _open_binary(path) as handle:
        for line_number, raw in enumerate(handle, start=1):
            if line_number == 1 and raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM) :]
            if not raw.strip():
                continue
            report.lines += 1
            try:
                record = _decoded_line(raw, path, line_number, unicode_errors)
                example = build(record, path, line_number)
            except InvalidExampleError as error:
                if not skip_invalid:
                    raise
                report.add_error(str(error))
                continue
            report.examples += 1
            yield example


def read_text(path, unicode_errors="replace", example_id=None):
    """Reads a plain-text file as one `Example` with no reference summary.

    A blank line separates paragraphs; a line holding only `===` starts a
    new section of the document (`SECTION_BREAK`; plain text has no
    headings, so sections have none); a line holding only `---` starts a
    new document (`DOCUMENT_BREAK`; multi-document input). Sections and
    documents without text are skipped. A line holding only a marker after
    one or more backslashes is text, the same line with its first
    backslash removed: `\\===` reads as `===` and `\\\\===` as `\\===`
    (`ESCAPED_MARKER`). Sentences are split with
    `keras_hsum.data.split_sentences`. Lines inside a paragraph are joined
    with spaces. `render_documents` writes an `Example` in this format.

    Args:
        path: a UTF-8 text file.
        unicode_errors: how invalid UTF-8 bytes are treated (`"replace"`
            keeps the text with U+FFFD, `"strict"` raises).
        example_id: the id of the example; defaults to the file name.

    Returns:
        An `Example` with `summary=""` and no references.

    Raises:
        InvalidExampleError: with `unicode_errors="strict"`, on invalid
            UTF-8, naming the file and the line.
    """
    if unicode_errors not in ("strict", "replace"):
        raise ValueError(
            "`unicode_errors` must be 'strict' or 'replace', "
            f"received {unicode_errors!r}."
        )
    with open(path, "rb") as handle:
        data = handle.read()
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    try:
        text = data.decode("utf-8", errors=unicode_errors)
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        raise InvalidExampleError(
            path,
            data.count(b"\n", 0, error.start) + 1,
            "<line>",
            f"invalid UTF-8 at byte {error.start - line_start} of the line; "
            "pass unicode_errors='replace' to keep the text.",
        ) from None
    return example_from_text(
        text, example_id=example_id or os.path.basename(os.fspath(path))
    )


def render_documents(example):
    """An `Example`'s documents as plain text, one string per document.

    The inverse of `example_from_text` up to sentence splitting: a
    paragraph's sentences are joined by spaces into one line (a line break
    inside a sentence becomes a space, as reading joins a paragraph's lines
    with spaces; a blank line inside a sentence would otherwise split its
    paragraph), paragraphs are separated by a blank line, and sections by
    a `SECTION_BREAK` line between blank lines (headings are dropped; the
    models read none). A paragraph whose text is a marker, or a marker
    after backslashes, is written with one more backslash, so it reads
    back as text (see `read_text`). A document without text gives "".
    """
    documents = []
    for document in example.documents:
        sections = []
        for section in document.sections:
            paragraphs = [_paragraph_line(" ".join(p)) for p in section.paragraphs]
            paragraphs = [p for p in paragraphs if p]
            if paragraphs:
                sections.append("\n\n".join(paragraphs))
        documents.append(_SECTION_SEPARATOR.join(sections))
    return documents


_SECTION_SEPARATOR = f"\n\n{SECTION_BREAK}\n\n"


def _paragraph_line(text):
    """A paragraph's sentences joined by spaces as one line of text ("" if
    it has none), escaped when it would read as a marker."""
    if "\n" in text:
        text = " ".join(line for line in map(str.strip, text.split("\n")) if line)
    else:
        text = text.strip()
    if text.endswith(_MARKERS) and (text in _MARKERS or _ESCAPED_MARKER.fullmatch(text)):
        text = "\\" + text
    return text


def rendered_example(example):
    """`example` (an `Example`) as a `RenderedExample`."""
    return RenderedExample(
        id=example.id,
        dataset=example.dataset,
        title=example.title,
        query=example.query,
        documents=tuple(render_documents(example)),
        summary=example.summary,
        references=example.references,
    )


def rendered_from_dict(record, path="<dict>", line_number=0):
    """`rendered_example(example_from_dict(record, path, line_number))`.

    A record that follows the schema with plain JSON types (what
    `json.loads` gives) is validated and rendered in one walk, without
    building its sections and paragraphs; any other record takes the way
    through `example_from_dict`, so the same records are refused with the
    same errors.

    Raises:
        InvalidExampleError: naming the file, line and field that is wrong.
    """
    example = _rendered_plain(record, path, line_number)
    if example is None:
        return rendered_example(example_from_dict(record, path, line_number))
    return example


def _rendered_plain(record, path, line_number):
    """`rendered_from_dict` of a record whose every field is of the exact
    type the schema names (None, str, list, dict; an int id); None for
    any other record."""
    if type(record) is not dict:
        return None
    raw_documents = record.get("documents")
    if type(raw_documents) is not list:
        return None
    documents = []
    for raw_document in raw_documents:
        if type(raw_document) is not dict:
            return None
        title = raw_document.get("title")
        raw_sections = raw_document.get("sections")
        if (title is not None and type(title) is not str) or type(raw_sections) is not list:
            return None
        sections = []
        for raw_section in raw_sections:
            if type(raw_section) is not dict:
                return None
            heading = raw_section.get("heading")
            raw_paragraphs = raw_section.get("paragraphs")
            if (heading is not None and type(heading) is not str) or (
                type(raw_paragraphs) is not list
            ):
                return None
            paragraphs = []
            for raw_paragraph in raw_paragraphs:
                if type(raw_paragraph) is not list:
                    return None
                try:
                    text = " ".join(raw_paragraph).strip()
                except TypeError:  # a sentence that is not a str
                    return None
                if "\n" in text or text.endswith(_MARKERS):
                    text = _paragraph_line(text)  # the same line, stripped first
                if text:
                    paragraphs.append(text)
            if paragraphs:
                sections.append("\n\n".join(paragraphs))
        documents.append(_SECTION_SEPARATOR.join(sections))
    summary = record.get("summary")
    summary = "" if summary is None else summary
    references = record.get("references")
    if references is None:
        references = [summary] if summary else []
    raw_id = record.get("id", f"{os.path.basename(str(path))}:{line_number}")
    dataset = record.get("dataset") or ""
    title, query = record.get("title"), record.get("query")
    if (
        type(summary) is not str
        or type(references) is not list
        or any(type(reference) is not str for reference in references)
        or type(raw_id) not in (str, int)
        or type(dataset) is not str
        or (title is not None and type(title) is not str)
        or (query is not None and type(query) is not str)
    ):
        return None
    return RenderedExample(
        id=str(raw_id),
        dataset=dataset,
        title=title,
        query=query,
        documents=tuple(documents),
        summary=summary,
        references=tuple(references),
    )


def resplit_sentences(example):
    """`example` with every paragraph's sentences split again by
    `split_sentences`, as a SavedModel splits the text it serves.

    A corpus' stored sentences come from its own splitter; the served text
    is split by ours, so rows packed at sentence boundaries (HT, PHT, SEAL,
    SHTE) can differ between training and serving. Training on re-split
    examples (a recipe's `resplit_sentences=True`) removes that difference.
    Paragraphs left without a sentence are dropped; headings, titles,
    queries and references are kept.
    """
    documents = []
    for document in example.documents:
        sections = []
        for section in document.sections:
            paragraphs = []
            for paragraph in section.paragraphs:
                sentences = tuple(split_sentences(" ".join(paragraph)))
                if sentences:
                    paragraphs.append(sentences)
            sections.append(Section(section.heading, tuple(paragraphs)))
        documents.append(Document(document.title, tuple(sections)))
    return dataclasses.replace(example, documents=tuple(documents))


def example_from_text(text, example_id="text", title=None, query=None):
    """Builds an `Example` from plain text (see `read_text` for the rules)."""
    documents = []
    sections = []
    paragraphs = []
    lines = []

    def close_paragraph():
        if lines:
            sentences = split_sentences(" ".join(lines))
            if sentences:
                paragraphs.append(tuple(sentences))
            lines.clear()

    def close_section():
        close_paragraph()
        if paragraphs:
            sections.append(Section(None, tuple(paragraphs)))
            paragraphs.clear()

    def close_document():
        close_section()
        if sections:
            documents.append(Document(None, tuple(sections)))
            sections.clear()

    for line in io.StringIO(text):
        stripped = line.strip()
        if stripped == DOCUMENT_BREAK:
            close_document()
        elif stripped == SECTION_BREAK:
            close_section()
        elif not stripped:
            close_paragraph()
        else:
            escaped = _ESCAPED_MARKER.fullmatch(stripped)
            lines.append(escaped.group(1) if escaped else stripped)
    close_document()
    return Example(
        id=str(example_id),
        dataset="text",
        title=title,
        query=query,
        documents=tuple(documents),
        summary="",
        references=(),
    )


def read_examples(path, skip_invalid=False, unicode_errors="strict", report=None,
                  rendered=False):
    """Streams examples from a JSONL file, a text file, or a folder of them.

    A folder is read in sorted file order; `.jsonl`/`.jsonl.gz`/`.json.gz`
    files as JSONL, `.txt` files as plain text (one example per file); its
    other files are listed in `report.ignored_files`.
    `skip_invalid`, `unicode_errors`, `report` and `rendered` (yield
    `RenderedExample`s: the documents as `render_documents` writes them)
    apply to every file as in `read_jsonl` (a text file counts as one
    line).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path!r} does not exist; expected a .jsonl, .jsonl.gz or .txt file "
            "or a folder of them."
        )
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            child = os.path.join(path, name)
            if os.path.isfile(child) and _kind(child) is not None:
                yield from read_examples(
                    child, skip_invalid, unicode_errors, report, rendered
                )
            elif os.path.isfile(child) and report is not None:
                report.ignored_files.append(child)
        return
    kind = _kind(path)
    if kind == "text":
        if report is not None:
            report.lines += 1
        try:
            example = read_text(path, unicode_errors=unicode_errors)
        except InvalidExampleError as error:
            if not skip_invalid:
                raise
            if report is not None:
                report.add_error(str(error))
            return
        if report is not None:
            report.examples += 1
        yield rendered_example(example) if rendered else example
    elif kind == "jsonl":
        yield from read_jsonl(path, skip_invalid, unicode_errors, report, rendered)
    else:
        raise ValueError(
            f"Cannot read {path!r}: expected a .jsonl, .jsonl.gz or .txt file "
            "or a folder of them."
        )


def _kind(path):
    name = os.path.basename(path).lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".jsonl.gzip")):
        return "jsonl"
    if name.endswith(".txt"):
        return "text"
    return None


def one_example_per_reference(examples):
    """Training pairs from every reference: one `Example` per reference.

    Datasets such as FewSum carry several references per input (3 per
    product); training on the primary one only throws the others away. Each
    yielded copy has `summary` set to one reference and that reference first
    in `references` (the others follow, in their order), and the id
    `"<id>#ref<i>"` (i from 0) when the example has more than one reference.
    An example with a single reference, or none, is yielded unchanged.

    Args:
        examples: an iterable of `Example`.

    Yields:
        `Example`s, those of one input consecutive.
    """
    for example in examples:
        references = example.references
        if len(references) <= 1:
            yield example
            continue
        for i, reference in enumerate(references):
            yield dataclasses.replace(
                example,
                id=f"{example.id}#ref{i}",
                summary=reference,
                references=(reference,) + references[:i] + references[i + 1:],
            )


def leave_one_out_examples(examples, min_documents=3):
    """Self-supervised pairs from multi-document inputs: each document as the
    summary of the others (FewSum's leave-one-out pretraining, Bražinskas et
    al. 2020, §3).

    For an example with N >= `min_documents` documents this yields N
    examples: the i-th keeps every document but the i-th as its input, and
    that document's sentences, joined by spaces, as its `summary` (its only
    reference). Human references are not used. A copy of the held-out
    document elsewhere in the example (the same text, a review posted
    twice) leaves the input too, so the target is never in its own input.
    Examples with fewer documents, or whose held-out document has no
    text, yield nothing, and so does a pair left with fewer than
    `min_documents - 1` input documents.

    Args:
        examples: an iterable of `Example`.
        min_documents: the fewest documents an example needs (the input
            keeps `min_documents - 1` of them).

    Yields:
        `Example`s with ids `"<id>#loo<i>"`.
    """
    min_documents = check_int("min_documents", min_documents, 2)
    for example in examples:
        documents = example.documents
        if len(documents) < min_documents:
            continue
        texts = [" ".join(document.sentences()).strip() for document in documents]
        for i, summary in enumerate(texts):
            if not summary:
                continue
            inputs = tuple(d for d, text in zip(documents, texts) if text != summary)
            if len(inputs) < min_documents - 1:
                continue
            yield dataclasses.replace(
                example,
                id=f"{example.id}#loo{i}",
                documents=inputs,
                summary=summary,
                references=(summary,),
            )
