"""Every `>>>` example in keras_hsum.models' docstrings runs and prints
what it says, under each backend (tests/docstring_examples.py).

The examples build small random models and call them (several decode with
`beam_search`): each takes about a second under TensorFlow but 10 to 30 s
under JAX, whose eager ops compile one by one, so those are `jax_slow`;
the two slowest under TensorFlow too are `slow`.
"""

import pytest

from docstring_examples import check_examples
from docstring_examples import marked
from docstring_examples import modules_with_examples

MODULES = modules_with_examples("keras_hsum.models")
SLOW = {
    "keras_hsum.models.ensemble",
    "keras_hsum.models.hierarchical_backbone_summarizer",
}
JAX_SLOW = {
    "keras_hsum.models.backbone_summarizer",
    "keras_hsum.models.discourse_summarizer",
    "keras_hsum.models.shte",
}


def test_marked_modules_have_examples():
    assert SLOW | JAX_SLOW <= set(MODULES), (SLOW | JAX_SLOW) - set(MODULES)


@pytest.mark.parametrize("module_name", marked(MODULES, slow=SLOW, jax_slow=JAX_SLOW))
def test_docstring_examples_run(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    check_examples(module_name)
