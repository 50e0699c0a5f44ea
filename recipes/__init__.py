"""Recipes: one module per paper and baseline, each declaring `RECIPE`.

`get(name)` returns the recipe module, `declaration(name)` its `Recipe`
(see `keras_hsum.recipes.base`), `names()` lists the recipes of this
installation. The modules live in the repository's top-level `recipes/`
folder and install as `keras_hsum.recipes` (setup.py's `package_dir`).

A recipe outside keras_hsum is named by its module path (a name with a
dot, e.g. `my_recipes.toy`): any importable module that declares `RECIPE =
Recipe(name="my_recipes.toy", ...)`. docs/recipes.md, "Add a recipe".
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
    """The recipe module: `keras_hsum.recipes.<name>` for a name of
    `RECIPES`, else the module `name` (a dotted module path) that declares
    `RECIPE` under that name.

    Raises:
        ValueError: an unknown name, a module that is not available or
            declares no `RECIPE`, or one whose `RECIPE.name` is another.
    """
    from keras_hsum.recipes.base import Recipe

    if name in RECIPES:
        module_name = f"{__name__}.{name}"
    elif isinstance(name, str) and "." in name:
        module_name = name
    else:
        raise ValueError(
            f"Unknown recipe {name!r}; expected one of {list(RECIPES)}, or the "
            "module path of a recipe outside keras_hsum (e.g. my_recipes.toy)."
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if module_name == error.name or module_name.startswith(f"{error.name}."):
            raise ValueError(
                f"Recipe {name!r} is not available in this installation "
                f"(no module {module_name!r} on the path); available: {names()}."
            ) from error
        raise
    recipe = getattr(module, "RECIPE", None)
    if not isinstance(recipe, Recipe):
        raise ValueError(
            f"Module {module_name!r} declares no recipe: it needs RECIPE = "
            "keras_hsum.recipes.base.Recipe(...) (docs/recipes.md, 'Add a recipe'); "
            f"its RECIPE is {recipe!r}."
        )
    if recipe.name != name:
        raise ValueError(
            f"Module {module_name!r} declares RECIPE.name={recipe.name!r}; it is "
            f"read as recipe {name!r}, the name a run's config.json records and "
            f"export looks up: set Recipe(name={name!r}, ...)."
        )
    return module


def declaration(name):
    """The `Recipe` that the module of recipe `name` declares (`get(name).RECIPE`)."""
    return get(name).RECIPE


def config(name, config_name):
    """The frozen config `CONFIGS[config_name]` of recipe `name`."""
    return declaration(name).config(config_name)
