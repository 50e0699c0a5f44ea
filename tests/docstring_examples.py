"""Runs the `>>>` examples of keras_hsum's docstrings, module by module.

The convention of tests/layers/test_docstring_examples.py: an example sees
`np`, `keras`, `ops`, the public names of the module's package and the
module's own names, and its printed output is compared with doctest's
ELLIPSIS and NORMALIZE_WHITESPACE. A failure names the module, the
docstring (`module.Class.method`), the line and the example, with what it
printed or raised.

`modules_with_examples(package)` finds the modules by reading their source
(no import), so that collecting a test imports nothing heavy.
"""

import doctest
import importlib
import importlib.util
import os
import types

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules_with_examples(package_name, exclude=()):
    """The names of the modules under `package_name` (subpackages and
    `__init__` files included, those under a package of `exclude` left out)
    whose source has a line that starts with `>>>`."""
    root = os.path.dirname(importlib.util.find_spec(package_name).origin)
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        parts = os.path.relpath(folder, root).split(os.sep)
        prefix = ".".join([package_name] + [p for p in parts if p != "."])
        for file_name in sorted(files):
            if not file_name.endswith(".py"):
                continue
            stem = file_name[: -len(".py")]
            name = prefix if stem == "__init__" else f"{prefix}.{stem}"
            if any(name == e or name.startswith(e + ".") for e in exclude):
                continue
            with open(os.path.join(folder, file_name), encoding="utf-8") as file:
                if any(line.lstrip().startswith(">>>") for line in file):
                    found.append(name)
    return sorted(found)


def public_names(package):
    """The package's public names: its `__all__` (lazy names resolved) and
    every other attribute without a leading underscore that is not a
    module (submodules appear as attributes only once imported)."""
    names = {
        name: value
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    for name in getattr(package, "__all__", ()):
        names[name] = getattr(package, name)
    return names


def marked(module_names, *, slow=(), jax_slow=()):
    """`pytest.param`s of `module_names`, with the `slow` and `jax_slow`
    marks of the modules listed there."""
    import pytest

    params = []
    for name in module_names:
        marks = [pytest.mark.slow] if name in slow else []
        marks += [pytest.mark.jax_slow] if name in jax_slow else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


class _Recorder(doctest.DocTestRunner):
    """A DocTestRunner that keeps one readable entry per failing example."""

    def __init__(self):
        super().__init__(optionflags=OPTIONS, verbose=False)
        self.problems = []

    def _where(self, test, example):
        line = (test.lineno or 0) + example.lineno + 1
        source = "".join(
            ("    >>> " if i == 0 else "    ... ") + text + "\n"
            for i, text in enumerate(example.source.rstrip("\n").split("\n"))
        )
        return f"{test.name} (line {line}), example #{test.examples.index(example) + 1}:\n{source}"

    def report_start(self, out, test, example):
        pass

    def report_success(self, out, test, example, got):
        pass

    def report_failure(self, out, test, example, got):
        self.problems.append(
            self._where(test, example)
            + f"  expected:\n{_indent(example.want)}  got:\n{_indent(got)}"
        )

    def report_unexpected_exception(self, out, test, example, exc_info):
        kind, value, _ = exc_info
        self.problems.append(
            self._where(test, example)
            + f"  raised:\n{_indent(f'{kind.__name__}: {value}')}"
        )


def _indent(text):
    text = text if text.endswith("\n") else text + "\n"
    return "".join("      " + line + "\n" for line in text.rstrip("\n").split("\n"))


def run_examples(module_name):
    """Runs every docstring example of `module_name`.

    Returns:
        (examples attempted, list of failure descriptions).
    """
    import keras
    import numpy as np

    module = importlib.import_module(module_name)
    package_name = module_name if hasattr(module, "__path__") else module_name.rpartition(".")[0]
    globs = {"np": np, "keras": keras, "ops": keras.ops}
    globs.update(public_names(importlib.import_module(package_name)))
    globs.update(vars(module))
    runner = _Recorder()
    for test in doctest.DocTestFinder().find(module, module_name, globs=globs):
        runner.run(test, out=lambda text: None)
    return runner.tries, runner.problems


def check_examples(module_name):
    """Asserts that `module_name` has examples and that every one runs and
    prints what its docstring says."""
    tries, failures = run_examples(module_name)
    assert tries > 0, (
        f"{module_name} has a '>>>' line but doctest found no example in its "
        "docstrings (a '>>>' in a comment or a plain string?)."
    )
    assert not failures, (
        f"{len(failures)} of {tries} docstring example(s) of {module_name} failed:\n\n"
        + "\n".join(failures)
    )
