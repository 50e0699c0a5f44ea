"""The in-graph paragraph graphs against `keras_hsum.data.graphs` on hand-written rows.

`keras_hsum.data.structuring.graphs` cuts words without `regex_split` (a
static replacement leaves spaces between them, for entities a second one
keeps the capitalised ones, then a whitespace split) and matches every
marker in one pattern. The rows here probe where that could cut differently from the
Python reference's `[^\\W_]+` words: runs of punctuation and spaces, tabs,
no-break and ideographic spaces, underscores, single capitals, non-ASCII
capitals, sentence-initial and stop-word capitals, markers behind
punctuation or past the 200-character head.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_hsum.data import graphs as reference
from keras_hsum.data.structuring import graphs
from keras_hsum.data.structuring.character_classes import patterns
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK

P = 8
# Two examples of P rows ("" pads); each row's (document, reading-order
# position): rows of one document at positions p and p + 1 are adjacent.
ROWS = (
    (
        ("We met Paris in March. Mr Smith came, with Ünal and A B.", 0, 0),
        ("However,  Paris--and ÜNAL_X--stayed;  the  Élysée\tpalace.", 0, 1),
        ("(In addition) ...Paris  ,, Élysée \u00a0Ünal!", 0, 2),
        ("in additionally, The Hague met X Y Zed. No. 5 Street is Here.", 1, 3),
        ("\u3000Thus: ΣΟΦΙΑ and Σοφία, Ωmega's ΣΟΦΙΑ; Zed_Zed 1999 Zed.",
         1, 4),
        ("x" * 195 + " However, Paris is far.", 1, 5),
        ("", 0, 6),
        ("", 0, 7),
    ),
    (
        ("On the other hand, İstanbul and İzmir; Dr. Who? Yes.", 0, 0),
        ("On the other, İstanbul met Ǆemal \U0001d400b and Ⓐb.", 0, 1),
        ("for\u2009example -- the Greek ΣΟΦΙΑ, e.g. Ǆemal.", 0, 3),
        ("... ... !!! ???", 1, 4),
        ("A.B. Corp. and U.S. Steel, Mr. Big; The End.", 1, 5),
        ("Then Again We Go To Rome And Rome.", 1, 6),
        ("e.g. we saw NASA's AB_CD and x_Y ΑΒ.", 2, 7),
        ("", 0, 8),
    ),
)
OPTIONS = (
    ("similarity", {}),
    ("similarity", {"threshold": 0.0}),
    ("discourse", {}),
    (
        "discourse",
        {
            "directed": False,
            "markers": ("in addition", "thus", "e.g.", "the greek", "for  example"),
            "stop_words": ("the", "and", "paris", "zed"),
            "marker_weight": 2.0,
            "entity_weight": 0.5,
        },
    ),
)


def features():
    texts = [[text for text, _, _ in example] for example in ROWS]
    return {
        "unit_texts": tf.constant(texts),
        PARAGRAPH_MASK: tf.constant([[text != "" for text in row] for row in texts]),
        DOCUMENT_IDS: tf.constant([[d for _, d, _ in example] for example in ROWS]),
        PARAGRAPH_INDEX: tf.constant([[p for _, _, p in example] for example in ROWS]),
    }


def expected_graph(example, kind, options):
    """The Python reference on the example's real rows, padded to [P, P]."""
    rows = [row for row in example if row[0]]
    texts = [text for text, _, _ in rows]
    if kind == "similarity":
        graph = reference.similarity_graph(texts, **options)
    else:
        graph = reference.discourse_graph(
            texts, [d for _, d, _ in rows], [p for _, _, p in rows], **options
        )
    padded = np.zeros((P, P), np.float32)
    padded[: len(rows), : len(rows)] = graph
    return padded


@pytest.mark.parametrize("kind,options", OPTIONS)
def test_graph_of_hand_written_rows_equals_the_python_reference(kind, options):
    _, checked = graphs.check_graph(kind, options)
    got = graphs.paragraph_graph(features(), kind, checked, patterns()).numpy()
    assert got.shape == (len(ROWS), P, P) and got.dtype == np.float32
    for b, example in enumerate(ROWS):
        expected = expected_graph(example, kind, options)
        if kind == "similarity":
            # float64 cosines summed in another order (module docstring).
            np.testing.assert_allclose(got[b], expected, atol=1e-6, rtol=0)
            assert ((got[b] > 0) == (expected > 0)).all()
        else:
            np.testing.assert_array_equal(got[b], expected)
    if kind == "discourse":
        # Not vacuous: one-way marker edges and edges of several entities.
        assert (got != np.transpose(got, (0, 2, 1))).any() == options.get(
            "directed", True
        )
        assert (got > 2).any()
