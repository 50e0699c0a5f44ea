"""The first call of an unbuilt model: its own input errors, without Keras'
"unbuilt state" warnings in front of them.

keras_hsum's models have no `build()`: Keras builds them on the first call by
tracing `call` on symbolic inputs. When the inputs are wrong (e.g. flat
`tokens` [B,T] given to a hierarchical model), that trace fails on the
model's own check, and Keras then warns twice ("... looks like it has
unbuilt state ..." and "`build()` was called on layer ...") before the
eager call raises the same check's ValueError. The warnings blame the
layer; the error says what was expected and what was received.

`call_without_unbuilt_warnings` runs a model's first call recording its
warnings: if the call succeeds, every warning is re-issued unchanged; if it
raises, the two Keras "unbuilt state" warnings are dropped (the error they
precede explains them), the others are re-issued, the model is left unbuilt
(Keras would have marked it built without building its layers) and the
error propagates. Later calls (the model built) run untouched.

Recording keeps the warning filters in force (an ignored warning stays
ignored, an "error" filter still raises). It swaps the process-wide warning
handler for the duration of that one call (`warnings.catch_warnings`), as any
test of warnings does; build a model in one thread before sharing it between
threads.
"""

import warnings

_UNBUILT_STATE = ("looks like it has unbuilt state", "however the layer does not have a `build()`")


def _is_unbuilt_state_warning(record):
    text = str(record.message)
    return any(marker in text for marker in _UNBUILT_STATE)


def _reissue(records):
    for record in records:
        warnings.warn_explicit(
            record.message, record.category, record.filename, record.lineno,
            source=record.source,
        )


def call_without_unbuilt_warnings(model, keras_call, *args, **kwargs):
    """`keras_call(*args, **kwargs)` (the model's `super().__call__`), with
    Keras' "unbuilt state" warnings dropped when a first call fails.

    Args:
        model: the model being called; built models run `keras_call` as is.
        keras_call: the bound `keras.Model.__call__` to run.
    """
    if model.built:
        return keras_call(*args, **kwargs)
    records = []
    try:
        with warnings.catch_warnings(record=True) as records:
            outputs = keras_call(*args, **kwargs)
    except BaseException:
        # Keras marks the model built after its failed trace ("despite not
        # being actually built", says its warning); unmark it, so that the
        # next call builds it by tracing.
        model.built = False
        _reissue([r for r in records if not _is_unbuilt_state_warning(r)])
        raise
    _reissue(records)
    return outputs
