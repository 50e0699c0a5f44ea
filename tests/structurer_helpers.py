"""Helpers that the structurer and export tests share.

`render` writes an Example as the export receives it; `SERVING_PREAMBLE`
starts the script that runs a SavedModel in a process without keras_hsum or
keras-hub (as TF Serving has).
"""


def render(example):
    """An Example as the export receives it: documents, title, query.

    Written out here, not with `render_documents`, so that the format is
    pinned by the test: blank lines between paragraphs, a `===` line
    between sections.
    """
    documents = [
        "\n\n===\n\n".join(
            "\n\n".join(" ".join(paragraph) for paragraph in section.paragraphs)
            for section in document.sections
        )
        for document in example.documents
    ]
    return documents, example.title or "", example.query or ""


# The start of a `python -c` script (argv: SAVED_MODEL REQUEST.json ...):
# blocks importing our package, keras-hub and recipes, loads the SavedModel
# as `loaded` and the request as `request`. The test appends the rest.
SERVING_PREAMBLE = """\
import json, sys

class Blocked:  # what TF Serving lacks: our package and keras-hub
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("keras_hsum", "keras_hub", "recipes"):
            raise ImportError(f"{name} must not be needed to serve")

sys.meta_path.insert(0, Blocked())
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
loaded = tf.saved_model.load(sys.argv[1])
request = json.load(open(sys.argv[2]))
"""
