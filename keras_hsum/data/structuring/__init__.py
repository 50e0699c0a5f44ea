"""The steps of in-graph structuring, one concern per module.

`keras_hsum.data.structurer.TextStructurer` composes them; each module
holds TensorFlow ops over a whole batch kept flat (every paragraph,
sentence, row or word of the B examples in one tensor, with its example
beside it), and names its Python reference:

| module                | step                                   | reference                              |
|-----------------------|----------------------------------------|----------------------------------------|
| `text`                | documents -> paragraphs; UTF-8 repair  | `data.reader.example_from_text`        |
| `sentences`           | paragraphs -> sentences                | `data.sentences.split_sentences`       |
| `character_classes`   | Python's `str` predicates as RE2       | `str.isupper`, `isspace`, ...          |
| `tokens`              | sentences -> ids; ids -> text          | `data.vocabulary.Vocabulary`           |
| `rows`                | ids -> the family's rows, [B,P,T]      | `tests/reference_structure.py`         |
| `flat`                | the `"flat"` family's sequence [B,N]   | `tests/reference_structure.py`         |
| `ranking`             | tf-idf or learned ranking of rows      | `data.ranking.tfidf_cosine`            |
| `graphs`              | HT's paragraph graphs [B,P,P]          | `data.graphs`                          |
| `extended_vocabulary` | See et al.'s OOV words and ids         | (defined there)                        |
| `statistics`          | truncation counts per example          | `data.structure.TruncationReport`      |
| `segments`            | numbering of flat items per example    |                                        |
| `options`             | family options, defaults and checks    |                                        |

`sentences`, `ranking` and `graphs` share their names with the pure-Python
modules of `keras_hsum.data` on purpose: each is the graph version of the
module of the same name one level up, which stays the independent
reference the tests compare it with (and which the Python label code
uses). Importing this package imports nothing; `options` imports no
TensorFlow.
"""
