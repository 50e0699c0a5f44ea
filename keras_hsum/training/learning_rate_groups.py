"""Per-group learning rates and freezing for fine-tuning a pretrained
backbone: `GroupedAdam`.

Keras 3 optimizers apply one learning rate to every variable. Fine-tuning a
pretrained backbone with new layers on top usually wants the pretrained
weights to move more slowly than the new ones, and sometimes the encoder
held fixed for the first steps while the new layers settle. Scaling the
gradients instead would not do it: Adam's update is invariant to a
constant gradient scale. `GroupedAdam` scales the learning rate itself,
variable by variable, inside the update step.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_hsum")
class GroupedAdam(keras.optimizers.Adam):
    """Adam whose learning rate is scaled per group of variables.

    For a variable in group g, the update uses learning rate
    lr_t · scale_g, and 0 while the optimizer's step count is below
    `freeze_steps_g` (the moments still accumulate meanwhile, so they are
    warm when the group thaws). Variables in no group use lr_t. A variable
    listed in two groups takes the last one's settings.

    Args:
        groups: list of dicts `{"name": str, "scale": float,
            "freeze_steps": int}`; the variables of each are given by
            `assign_group_variables` (they are not serialized: a reloaded
            optimizer applies the scales only once they are assigned
            again).
        *args, **kwargs: `keras.optimizers.Adam`'s arguments.

    Example (a backbone model gives its groups as `model.variable_groups()`,
    e.g. `"pretrained"` and `"pretrained_encoder"`; then
    `model.compile(optimizer=optimizer, ...)`):
    >>> pretrained, head = keras.layers.Dense(2), keras.layers.Dense(2)
    >>> model = keras.Sequential([keras.Input((3,)), pretrained, head])
    >>> optimizer = GroupedAdam(learning_rate=0.1, groups=[
    ...     {"name": "pretrained", "scale": 0.1, "freeze_steps": 1}])
    >>> optimizer.assign_group_variables({"pretrained": pretrained.trainable_variables})
    >>> for step in range(2):  # how far each kernel moves under a gradient of ones
    ...     before = [ops.convert_to_numpy(d.kernel) for d in (pretrained, head)]
    ...     optimizer.apply([ops.ones_like(v) for v in model.trainable_variables],
    ...                     model.trainable_variables)
    ...     print([round(float(np.max(b - ops.convert_to_numpy(d.kernel))), 4)
    ...            for b, d in zip(before, (pretrained, head))])
    [0.0, 0.1]
    [0.01, 0.1]
    """

    def __init__(self, *args, groups=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = [self._checked(group) for group in (groups or [])]
        self._group_variables = {}
        self._settings = None

    @staticmethod
    def _checked(group):
        if not isinstance(group, dict) or set(group) != {"name", "scale", "freeze_steps"}:
            raise ValueError(
                "GroupedAdam: each group must be a dict with keys 'name', 'scale' "
                f"and 'freeze_steps', received {group!r}."
            )
        scale, freeze = group["scale"], group["freeze_steps"]
        if not isinstance(scale, (int, float)) or scale < 0:
            raise ValueError(
                f"GroupedAdam: group {group['name']!r} needs a scale >= 0, received {scale!r}."
            )
        if not isinstance(freeze, int) or isinstance(freeze, bool) or freeze < 0:
            raise ValueError(
                f"GroupedAdam: group {group['name']!r} needs freeze_steps, an int >= 0; "
                f"received {freeze!r}."
            )
        return {"name": str(group["name"]), "scale": float(scale), "freeze_steps": freeze}

    def assign_group_variables(self, variables_by_name):
        """Gives each group its variables.

        Args:
            variables_by_name: dict name → list of variables (e.g. a model's
                `variable_groups()`); every group needs an entry.

        Raises:
            ValueError: for a group without variables, or after `build`.
        """
        if self.built:
            raise ValueError(
                "GroupedAdam: assign the groups' variables before the optimizer "
                "is built (before the first step or `optimizer.build`)."
            )
        missing = [g["name"] for g in self.groups if g["name"] not in variables_by_name]
        if missing:
            raise ValueError(
                f"GroupedAdam: no variables for the groups {missing}; the model "
                f"offers the groups {sorted(variables_by_name)}."
            )
        self._group_variables = {
            g["name"]: list(variables_by_name[g["name"]]) for g in self.groups
        }

    def build(self, var_list):
        super().build(var_list)
        settings = [(1.0, 0)] * len(var_list)
        index = {id(v): i for i, v in enumerate(var_list)}
        for group in self.groups:
            for variable in self._group_variables.get(group["name"], ()):
                if id(variable) in index:
                    settings[index[id(variable)]] = (group["scale"], group["freeze_steps"])
        self._settings = settings

    def update_step(self, gradient, variable, learning_rate):
        if self._settings:
            scale, freeze = self._settings[self._get_variable_index(variable)]
            if scale != 1.0:
                learning_rate = learning_rate * scale
            if freeze:
                thawed = ops.greater_equal(self.iterations, freeze)
                learning_rate = learning_rate * ops.cast(thawed, "float32")
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config["groups"] = [dict(group) for group in self.groups]
        return config
