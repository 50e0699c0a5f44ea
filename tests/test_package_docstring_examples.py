"""Every `>>>` example in the docstrings of the TensorFlow-side packages
(keras_hsum.data, training, export, evaluation) and of keras_hsum's own
modules runs and prints what it says (tests/docstring_examples.py).

The backend-agnostic packages have their own files, run under both
backends: tests/layers, tests/models and tests/decoding.
"""

import pytest

from docstring_examples import check_examples
from docstring_examples import marked
from docstring_examples import modules_with_examples

AGNOSTIC = ("keras_hsum.layers", "keras_hsum.models", "keras_hsum.decoding")

# Modules whose examples take seconds (a traced TextStructurer, a
# SavedModel export): the slow set runs them.
SLOW = {
    "keras_hsum.data.example_features",
    "keras_hsum.data.structurer",
    "keras_hsum.export.serving",
}

MODULES = modules_with_examples("keras_hsum", exclude=AGNOSTIC)


def test_slow_modules_have_examples():
    assert SLOW <= set(MODULES), f"not modules with examples: {SLOW - set(MODULES)}"


@pytest.mark.parametrize("module_name", marked(MODULES, slow=SLOW))
def test_docstring_examples_run(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    check_examples(module_name)
