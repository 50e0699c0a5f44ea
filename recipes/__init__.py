"""Recipes: one module per paper and baseline, with frozen configs.

`get(name)` returns the recipe module; `names()` lists them. See
`keras_hsum.recipes.base` for what a recipe module defines. The modules live
in the repository's top-level `recipes/` folder and install as
`keras_hsum.recipes` (setup.py's `package_dir`).
"""

import importlib
import importlib.util

RECIPES = (
    "flat",
    "ht",
    "ranker",
    "pht",
    "pht_predictor",
    "seal",
    "extractive_abstractive",
    "compressive_abstractive",
    "discourse",
    "shte",
)


def names():
    """The recipe names that exist in this installation."""
    return [name for name in RECIPES if importlib.util.find_spec(f"{__name__}.{name}")]


def get(name):
    """The recipe module `keras_hsum.recipes.<name>`."""
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; expected one of {list(RECIPES)}.")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name == f"{__name__}.{name}":
            raise ValueError(
                f"Recipe {name!r} is not available in this installation; "
                f"available: {names()}."
            ) from error
        raise


def config(name, config_name):
    """The frozen config `CONFIGS[config_name]` of recipe `name`."""
    module = get(name)
    if config_name not in module.CONFIGS:
        raise ValueError(
            f"Recipe {name!r} has no config {config_name!r}; expected one of "
            f"{sorted(module.CONFIGS)}."
        )
    return module.CONFIGS[config_name]
