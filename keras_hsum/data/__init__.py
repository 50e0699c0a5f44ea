"""TF-only data layer: reading, vocabularies, structuring, labels, tf.data.

The pure-Python parts are imported here; `make_dataset` and the rest of
`keras_hsum.data.pipeline`, and `TextStructurer` (which import TensorFlow)
load on first use.
"""

from keras_hsum.data.corpora import corpus_path
from keras_hsum.data.corpora import sample_path
from keras_hsum.data.reader import Document
from keras_hsum.data.reader import Example
from keras_hsum.data.reader import InvalidExampleError
from keras_hsum.data.labels import principal_sentence_examples
from keras_hsum.data.reader import leave_one_out_examples
from keras_hsum.data.reader import one_example_per_reference
from keras_hsum.data.reader import Section
from keras_hsum.data.reader import read_examples
from keras_hsum.data.reader import read_jsonl
from keras_hsum.data.reader import read_text
from keras_hsum.data.reader import render_documents
from keras_hsum.data.reader import resplit_sentences
from keras_hsum.data.reader import example_from_text
from keras_hsum.data.sentences import split_sentences
from keras_hsum.data.structure import EmptyInputError
from keras_hsum.data.structure import EmptySummaryError
from keras_hsum.data.structure import Structured
from keras_hsum.data.structure import TruncationReport
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences

_PIPELINE = (
    "make_dataset",
    "DatasetOptions",
    "structured_examples",
    "training_pairs",
    "PipelineReport",
    # The extras of make_dataset(extras=[...]).
    "declare_features",
    "ranker_targets",
    "paragraph_graph",
    "seal_labels",
    "oracle_labels",
)


def __getattr__(name):
    if name == "TextStructurer":
        from keras_hsum.data.structurer import TextStructurer

        return TextStructurer
    if name == "PresetVocabulary":
        # A keras-hub preset's tokenizer (imports TensorFlow).
        from keras_hsum.data.preset_vocabulary import PresetVocabulary

        return PresetVocabulary
    if name in _PIPELINE:
        from keras_hsum.data import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'keras_hsum.data' has no attribute {name!r}")
