"""Every `>>>` example in keras_hsum.decoding's docstrings runs and prints
what it says, under each backend (tests/docstring_examples.py).

`beam_search`'s examples decode a small random model (3 to 5 s under
TensorFlow, about 30 s under JAX, which compiles the search): `slow`.
`mbr`'s runs a few dozen small ops: 0.1 s under TensorFlow, 9 s under
JAX, whose eager ops compile one by one: `jax_slow`.
"""

import pytest

from docstring_examples import check_examples
from docstring_examples import marked
from docstring_examples import modules_with_examples

MODULES = modules_with_examples("keras_hsum.decoding")
SLOW = {"keras_hsum.decoding.beam_search"}
JAX_SLOW = {"keras_hsum.decoding.mbr"}


def test_marked_modules_have_examples():
    assert SLOW | JAX_SLOW <= set(MODULES), (SLOW | JAX_SLOW) - set(MODULES)


@pytest.mark.parametrize("module_name", marked(MODULES, slow=SLOW, jax_slow=JAX_SLOW))
def test_docstring_examples_run(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_examples(module_name)
