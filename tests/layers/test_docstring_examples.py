"""Every `>>>` example in the layers' docstrings runs and prints what it says."""

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest

import keras_hsum.layers

MODULES = sorted(
    name
    for _, name, _ in pkgutil.iter_modules(keras_hsum.layers.__path__)
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(f"keras_hsum.layers.{module_name}")
    globs = {"np": np, "keras": keras, "ops": keras.ops}
    globs.update(vars(keras_hsum.layers))
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    for test in finder.find(module, globs=dict(globs, **vars(module))):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) failed in {module_name}"
