"""Loads a SavedModel and runs its signatures in a process that has only
TensorFlow and the TF Text kernels, as TF Serving has (no Keras, no
keras_hsum, no keras-hub).

    python run_saved_model.py SAVED_MODEL REQUESTS.json OUT.npz [--tensorflow-text]

REQUESTS.json: a list of `{"signature": name, "inputs": {name: nested list
of strings}}`; a string starting with "base64:" is decoded to bytes (for
invalid UTF-8). OUT.npz: `<i>/<output name>` arrays per request, plus
`<i>/__error__` (the exception text) when a request raised.

By default the `keras*` packages are made unimportable and the TF Text
kernels are loaded with `tf.load_op_library` (the Python `tensorflow_text`
package imports tf.keras); `--tensorflow-text` imports `tensorflow_text`
instead. Exit code 0 unless loading the SavedModel itself failed.
"""

import base64
import glob
import importlib.util
import json
import os
import sys

BLOCKED = ("keras", "keras_hub", "keras_nlp", "keras_hsum", "tf_keras")


def _decode(value):
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if value.startswith("base64:"):
        return base64.b64decode(value[len("base64:"):])
    return value.encode("utf-8")


def main(argv):
    path, requests_path, out_path = argv[:3]
    use_tensorflow_text = "--tensorflow-text" in argv
    if not use_tensorflow_text:
        for name in BLOCKED:
            sys.modules[name] = None  # `import keras` now fails
    import numpy as np
    import tensorflow as tf

    if use_tensorflow_text:
        import tensorflow_text  # noqa: F401
    else:
        spec = importlib.util.find_spec("tensorflow_text")  # does not import it
        folder = spec.submodule_search_locations[0]
        for library in sorted(glob.glob(os.path.join(folder, "python", "ops", "*.so"))):
            tf.load_op_library(library)
    loaded = tf.saved_model.load(path)
    with open(requests_path) as handle:
        requests = json.load(handle)
    results = {}
    for i, request in enumerate(requests):
        try:
            function = loaded.signatures[request["signature"]]
            inputs = {
                name: tf.constant(_decode(value), tf.string)
                for name, value in request["inputs"].items()
            }
            outputs = function(**inputs)
        except Exception as error:  # noqa: BLE001 - reported to the test
            results[f"{i}/__error__"] = np.array(f"{type(error).__name__}: {error}")
            continue
        for name, value in outputs.items():
            results[f"{i}/{name}"] = value.numpy()
    leaked = sorted(
        name for name in sys.modules
        if name.split(".")[0] in BLOCKED and sys.modules[name] is not None
    )
    results["__modules__"] = np.array(leaked if not use_tensorflow_text else
                                      [n for n in leaked if n.split(".")[0] != "keras"])
    np.savez(out_path, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
