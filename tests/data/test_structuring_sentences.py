"""The graph sentence splitter against its Python reference.

`keras_hsum.data.structuring.sentences.split_sentences` (RE2, in the
graph) must give exactly the sentences of
`keras_hsum.data.sentences.split_sentences` (the reference, tested on its
own in test_sentences.py), paragraph by paragraph: on every paragraph of
the bundled corpora, and on generated text that mixes every rule's
ingredients (abbreviations, initials, repeated marks, quotes and brackets,
Unicode upper-case letters, digits and whitespace, edge whitespace).
"""

import random

import pytest
import tensorflow as tf

from keras_hsum.data.sentences import split_sentences as reference_split
from keras_hsum.data.structuring.character_classes import CLOSERS
from keras_hsum.data.structuring.character_classes import OPENERS
from keras_hsum.data.structuring.character_classes import patterns
from keras_hsum.data.structuring.sentences import split_sentences

from conftest import SAMPLE_SPLITS


def split_in_graph(paragraphs):
    """The graph splitter's sentences of each paragraph: list of lists."""
    text, paragraph = split_sentences(tf.constant(paragraphs, tf.string), patterns())
    sentences = [[] for _ in paragraphs]
    previous = -1
    for sentence, index in zip(text.numpy(), paragraph.numpy()):
        assert index >= previous, "sentences are out of reading order"
        previous = index
        sentences[index].append(sentence.decode("utf-8"))
    return sentences


def assert_same_sentences(paragraphs):
    got = split_in_graph(paragraphs)
    wrong = [
        (paragraph, sentences, reference_split(paragraph))
        for paragraph, sentences in zip(paragraphs, got)
        if sentences != reference_split(paragraph)
    ]
    assert not wrong, (f"{len(wrong)} of {len(paragraphs)} paragraphs differ", wrong[:3])


EDGE_CASES = [
    "",
    " ",
    "\u2003\n\t\u3000",
    "One.",
    "One. ",
    "  padded.   Spaces.  ",
    "Hello!!! World",
    "Hello . World",
    "Hello .World. Next",
    "A. . B",
    ". Hello",
    " . Hello",
    "?! Hello. ",
    "Really?! Yes.",
    "x.\").  Y",
    "end.) \"Next (one.)\" [Third!] \u201cFourth.\u201d \u2018Fifth?\u2019 Last",
    "(( Open. ((A start. (B start.",
    "e.g. Paris. i.e. Rome. See Fig. 3. Dr. Who. The U.S. Army. No. 5. I said no. Then",
    "J. Smith. A. B. Jones. x. Then. \u00c9. Next",
    "It is on CF. Our work. Nos. 3 and nos. 4. Cf. Table. a.m. Then",
    "Kelvin \u212a. Then \u017ft. Next ST. Done. Digits \u00b2. Superscript. \u2160. Roman.",
    "Tabs\tand\u00a0nbsp. New\u2003space. Line\u2028sep. Info\x1fsep. Next\x85line. End",
    "Inner  runs\t of \u00a0 space. Stay  as\tthey are.  Yes",
    "\u00e9tant. \u00c9tant. \u0394elta. \u03b4elta. \u0130stanbul. 3 things. _under. End",
]


def test_edge_cases_split_as_in_python():
    assert_same_sentences(EDGE_CASES)
    assert split_in_graph(["", "  ", "One. Two"]) == [[], [], ["One.", "Two"]]


def test_every_bundled_paragraph_splits_as_in_python(real_examples):
    """Every paragraph of every bundled sample split (47k paragraphs, 7 MB)."""
    paragraphs = [
        " ".join(sentences)
        for name, split in SAMPLE_SPLITS
        for example in real_examples(name, split)
        for document in example.documents
        for section in document.sections
        for sentences in section.paragraphs
    ]
    assert len(paragraphs) > 40_000
    assert_same_sentences(paragraphs)


_WORDS = (
    "", "", "the", "model", "Model", "it", "x", "J", "\u00c9", "\u00e9t\u00e9", "\u00c9t\u00e9",
    "\u0394elta", "\u212a", "\u017ft", "\u0130", "ST", "CF", "cf", "No", "no", "nos",
    "e.g", "i.e", "Fig", "fig", "al", "Dr", "U.S", "u.s", "a.m", "Ph.D", "etc", "vs",
    "3", "3.14", "v2.0", "\u00b2", "\u2160", "_x", "\u6570\u636e", "-", "a.b",
)
_MARKS = ("", "", "", ".", ".", ".", "!", "?", "...", "?!", "!!!", ".!", ". .")
_SPACES = (
    " ", " ", " ", "  ", "\n", "\t", " \t ", "\u00a0", "\u2003", "\u2028",
    "\u3000", "\x1c", "\x85", "",
)


def _generated_paragraph(rng):
    words = []
    for _ in range(rng.randint(0, 24)):
        word = "".join(rng.choices(OPENERS, k=rng.choice((0, 0, 0, 1, 2))))
        word += rng.choice(_WORDS) + rng.choice(_MARKS)
        word += "".join(rng.choices(CLOSERS, k=rng.choice((0, 0, 0, 1, 2))))
        words.append(word + rng.choice(_SPACES))
    edge = rng.choice(("", "", " ", "\n \u2003"))
    return edge + "".join(words) + rng.choice(("", "", " ", "\t\u00a0"))


def test_generated_paragraphs_split_as_in_python():
    rng = random.Random(58)
    paragraphs = [_generated_paragraph(rng) for _ in range(4000)]
    assert_same_sentences(paragraphs)
    # The generated text exercises the rules: most paragraphs have several
    # sentences, and many candidate boundaries are not taken.
    counts = [len(reference_split(p)) for p in paragraphs]
    assert sum(c >= 3 for c in counts) > 1000


@pytest.mark.parametrize("batch", [[], ["   ", ""]])
def test_no_paragraph_or_no_text_gives_no_sentence(batch):
    text, paragraph = split_sentences(tf.constant(batch, tf.string), patterns())
    assert text.shape == (0,) and paragraph.shape == (0,)
    assert paragraph.dtype == tf.int32
