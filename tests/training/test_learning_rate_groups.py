"""GroupedAdam against a numpy transcription of Adam with per-group rates
and freezing; the config's groups through make_optimizer."""

import keras
import numpy as np
import pytest

from keras_hsum.training.learning_rate_groups import GroupedAdam


def numpy_adam(values, gradients, rates, beta_1=0.9, beta_2=0.998, epsilon=1e-9):
    """Keras' Adam (bias correction folded into the rate) with the rate of
    step t given by `rates[t]` (0 while frozen; the moments still move)."""
    x = values.astype(np.float64)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    for t, (g, rate) in enumerate(zip(gradients, rates), start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        alpha = rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        x = x - alpha * m / (np.sqrt(v) + epsilon)
    return x


def test_scaled_frozen_and_plain_groups_follow_adam():
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=(3, 2)), rng.normal(size=(2,)), rng.normal(size=(4,))]
    variables = [keras.Variable(s.astype("float32"), name=f"v{i}") for i, s in enumerate(starts)]
    optimizer = GroupedAdam(
        learning_rate=0.05, beta_1=0.9, beta_2=0.998, epsilon=1e-9,
        groups=[{"name": "slow", "scale": 0.1, "freeze_steps": 0},
                {"name": "frozen", "scale": 0.5, "freeze_steps": 3}],
    )
    optimizer.assign_group_variables({"slow": [variables[0]], "frozen": [variables[1]]})
    steps = 6
    gradients = [[rng.normal(size=s.shape).astype("float32") for s in starts]
                 for _ in range(steps)]
    for step in gradients:
        optimizer.apply_gradients(zip(step, variables))
    rates = [[0.005] * steps, [0.0] * 3 + [0.025] * 3, [0.05] * steps]
    for i, variable in enumerate(variables):
        expected = numpy_adam(starts[i], [g[i] for g in gradients], rates[i])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected,
                                   rtol=1e-4, atol=1e-6)


def test_frozen_group_does_not_move_until_it_thaws():
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer = GroupedAdam(learning_rate=0.1, groups=[
        {"name": "encoder", "scale": 1.0, "freeze_steps": 2}])
    optimizer.assign_group_variables({"encoder": [variable]})
    for step in range(3):
        optimizer.apply_gradients([(np.ones(3, "float32"), variable)])
        values = keras.ops.convert_to_numpy(variable)
        assert np.all(values == 1.0) == (step < 2)


def test_config_round_trip_and_errors():
    optimizer = GroupedAdam(learning_rate=1e-3, groups=[
        {"name": "pretrained", "scale": 0.1, "freeze_steps": 0}])
    restored = GroupedAdam.from_config(optimizer.get_config())
    assert restored.groups == optimizer.groups
    with pytest.raises(ValueError, match="keys 'name', 'scale' and 'freeze_steps'"):
        GroupedAdam(groups=[{"name": "x", "scale": 1.0}])
    with pytest.raises(ValueError, match="scale >= 0"):
        GroupedAdam(groups=[{"name": "x", "scale": -1.0, "freeze_steps": 0}])
    with pytest.raises(ValueError, match="no variables for the groups \\['pretrained'\\]"):
        optimizer.assign_group_variables({"new": []})
    optimizer.assign_group_variables({"pretrained": []})
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ValueError, match="before the optimizer is built"):
        optimizer.assign_group_variables({"pretrained": []})
