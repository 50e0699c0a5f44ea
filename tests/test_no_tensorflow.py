"""keras_hsum trains under JAX where TensorFlow is absent (issue 57, item 1).

The accelerator machines have JAX, Keras, keras-hub and numpy, not
TensorFlow. A subprocess with `KERAS_BACKEND=jax` blocks `tensorflow`,
`tensorflow_text` (and every `tensorflow.*` module), `tf_keras` and
`sentencepiece` from import with a `sys.meta_path` finder that raises
ImportError, then imports `keras_hsum.layers`, `.models`, `.decoding`,
`keras_hsum.recipes` and the loss/optimizer set-up
(`keras_hsum.training.model_setup`), builds each recipe's model (its tiny
config, made smaller), and runs jitted stateless train steps (forward,
the recipe's loss, backward, its optimizer: benchmarks/recipe_steps.py)
on synthetic inputs of the recipe's feature shapes. The properties: the
blocked packages were asked for by nobody who needed them (none is in
`sys.modules`), the loss is finite and every trainable weight changed.

The first test checks the blocker itself: the same finder makes
`import tensorflow` fail, so the other tests cannot pass by accident.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKED = ("tensorflow", "tensorflow_text", "tf_keras", "sentencepiece")

BLOCKER = textwrap.dedent(f"""
    import sys

    BLOCKED = {BLOCKED!r}

    class _NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{{name}} is blocked (tests/test_no_tensorflow.py)")
            return None

    sys.meta_path.insert(0, _NoTensorFlow())
""")

# Each recipe's tiny config, smaller still (compile time on a 2-core CPU).
SMALL = {
    "pht": dict(max_paragraphs=3, max_paragraph_tokens=8, max_target_length=8),
    "ht": dict(max_paragraphs=3, paragraph_length=8, max_target_length=8),
    "flat": dict(max_source_length=24, max_target_length=8),
    "discourse": dict(max_sections=2, max_section_length=8, max_target_length=8),
    "seal": dict(max_snippets=4, snippet_length=8, max_target_length=9, segment_length=4,
                 extract_length=16),
    "extractive_abstractive": dict(max_snippets=4, snippet_length=8, max_target_length=9,
                                   extract_length=16),
    "compressive_abstractive": dict(max_snippets=4, snippet_length=8, max_target_length=9,
                                    snippets_per_group=2, compressed_length=4),
    "shte": dict(max_sentences=4, max_sentence_tokens=8, max_summary_sentences=2),
    "ranker": dict(max_paragraphs=4, paragraph_length=8, context_length=8),
    "pht_predictor": dict(max_paragraphs=4),
}

# Weights a first step leaves alone by design: the discourse model's coverage
# (See et al.) is off while its coverage weight λ is 0, where it starts
# (`DiscourseSummarizer`; the recipe's CoveragePhase raises it later).
NO_GRADIENT_YET = {"discourse": ["discourse_summarizer/discourse_attention/coverage_dense/kernel"]}

SCRIPT = BLOCKER + textwrap.dedent("""
    import json
    import os

    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    import numpy as np

    import keras
    import keras_hsum.decoding  # noqa: F401
    import keras_hsum.layers  # noqa: F401
    import keras_hsum.models  # noqa: F401
    from keras_hsum import recipes
    from keras_hsum.training.model_setup import recipe_metrics

    import recipe_steps

    SMALL = json.loads(sys.argv[1])
    STEP = set(sys.argv[2].split(","))
    print(json.dumps({"backend": keras.backend.backend(), "recipes": recipes.names()}))
    for name in recipes.names():
        module = recipes.get(name)
        config = module.CONFIGS["tiny"].replace(**SMALL[name])
        model = recipe_steps.build(module, name, config)
        row = {"recipe": name, "parameters": int(model.count_params()),
               "metrics": len(recipe_metrics(module, config))}
        if name in STEP:
            step = recipe_steps.TrainStep(module, config, model)
            x, y, w = recipe_steps.synthetic_batch(name, config, 2)
            state = step.initial_state()
            before = [np.asarray(v) for v in state[0]]
            loss, state = step.step(state, x, y, w)
            row["loss"] = float(loss)
            row["weights"] = len(before)
            row["unchanged"] = [v.path for v, a, b in zip(model.trainable_variables, before, state[0])
                                if np.array_equal(a, np.asarray(b))]
        print(json.dumps(row), flush=True)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"blocked_modules_loaded": loaded}))
""")


def _run(script, *arguments, timeout=900):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    # Compiles dominate: the CPU backend's optimisation level does not change results.
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
    return subprocess.run([sys.executable, "-c", script, *arguments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _rows(done):
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _check(rows, stepped):
    head, *recipe_rows, tail = rows
    assert head["backend"] == "jax"
    assert sorted(head["recipes"]) == sorted(SMALL), "a recipe without sizes in SMALL"
    assert [r["recipe"] for r in recipe_rows] == head["recipes"]
    for row in recipe_rows:
        assert row["parameters"] > 0, row
        if row["recipe"] in stepped:
            assert row["loss"] == row["loss"] and abs(row["loss"]) < 1e6, row  # finite
            assert row["unchanged"] == NO_GRADIENT_YET.get(row["recipe"], []), row
    assert tail == {"blocked_modules_loaded": []}


def test_the_blocker_blocks_tensorflow():
    done = _run(BLOCKER + "import tensorflow\n")
    assert done.returncode != 0
    assert "tensorflow is blocked" in done.stderr


@pytest.mark.slow  # builds all ten recipes and compiles a train step: over a minute on 2 cores
def test_recipes_build_and_pht_trains_without_tensorflow():
    """Every recipe's model builds with its loss, metrics and optimizer
    importable; PHT's jitted train step runs (the default suite)."""
    rows = _rows(_run(SCRIPT, json.dumps(SMALL), "pht"))
    _check(rows, {"pht"})


@pytest.mark.slow
def test_every_recipe_trains_without_tensorflow():
    rows = _rows(_run(SCRIPT, json.dumps(SMALL), ",".join(SMALL)))
    _check(rows, set(SMALL))
