"""The families' options: their names, defaults and checks.

`TextStructurer(vocabulary, family, max_units, max_tokens,
**family_options)` accepts, per family, the options of `FAMILY_OPTIONS`
(with those defaults) and those of `EXTRA_OPTIONS` (no default: absent
unless given, so that the structures described without them are
unchanged). `make_dataset` checks its `family_options` against the same
tables.
"""

from keras_hsum.checks import check_int
from keras_hsum.features import FAMILIES

# The family options each builder of the reference accepts, with defaults.
FAMILY_OPTIONS = {
    "paragraphs": {"rank": "tfidf", "context_length": 32, "pack": "paragraph"},
    "sections": {},
    "snippets": {},
    "sentences": {},
    "flat": {"rank": "tfidf"},
}
# Options a family accepts besides those (no default: absent unless given,
# so that the structures described without them are unchanged).
EXTRA_OPTIONS = {
    "paragraphs": ("ranker_run", "graph_kind", "graph_options", "oov_words"),
    "sections": ("oov_words",),
    "snippets": ("oov_words",),
    "sentences": ("oov_words",),
}


def check_family(family):
    """Raises a ValueError unless `family` is one of
    `keras_hsum.features.FAMILIES`."""
    if family not in FAMILIES:
        raise ValueError(
            f"Unknown family {family!r}; expected one of {', '.join(FAMILIES)}."
        )


def family_options(family, max_units, max_tokens, options):
    """Checks a structurer's family, limits and family options.

    Args:
        family: one of `keras_hsum.features.FAMILIES`.
        max_units: P (not checked for `"flat"`).
        max_tokens: T (N for `"flat"`).
        options: the family options given.

    Returns:
        The options with the family's defaults.

    Raises:
        ValueError: for an unknown family or option, or a bad value.
    """
    check_family(family)
    limits = [("max_tokens", max_tokens)]
    if family != "flat":
        limits.append(("max_units", max_units))
    for name, value in limits:
        check_int(name, value, owner=f"family {family!r}")
    allowed = FAMILY_OPTIONS[family]
    accepted = set(allowed) | set(EXTRA_OPTIONS.get(family, ()))
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(
            f"Unknown family options {unknown} for family {family!r}; "
            f"it accepts {sorted(accepted) or 'none'}."
        )
    options = dict(allowed, **options)
    ranks = ("tfidf", "order", "learned") if family == "paragraphs" else ("tfidf", "order")
    if "rank" in options and options["rank"] not in ranks:
        raise ValueError(
            f"`rank` of family {family!r} must be one of {ranks}, received "
            f"{options['rank']!r}."
            + (" The learned ranker ranks the 'paragraphs' family only."
               if options["rank"] == "learned" else "")
        )
    if family == "paragraphs" and (options["rank"] == "learned") != (
        options.get("ranker_run") is not None
    ):
        raise ValueError(
            "rank='learned' needs `ranker_run` (a `keras-hsum train --recipe "
            "ranker` folder), and `ranker_run` is used only with rank='learned'; "
            f"received rank={options['rank']!r}, ranker_run={options.get('ranker_run')!r}."
        )
    if "pack" in options and options["pack"] not in ("paragraph", "section"):
        raise ValueError(
            "`pack` must be 'paragraph' or 'section', received "
            f"{options['pack']!r}."
        )
    if "context_length" in options:
        check_int("context_length", options["context_length"])
    return options


def oov_words(family, options):
    """K, the extended vocabulary's slots (`oov_words`), or 0 without it."""
    if "oov_words" not in options:
        return 0
    return check_int(
        "oov_words", options["oov_words"], owner=f"family {family!r}",
        hint=" (the extended vocabulary's slots; leave it out for none)",
    )


def check_preset_options(preset, options):
    """Refuses the options that need a SentencePiece vocabulary of this
    library with a preset's tokenizer (`PresetVocabulary`)."""
    if options.get("rank") == "learned":
        raise ValueError(
            "rank='learned' reads a ranker run's SentencePiece vocabulary; a "
            f"structurer on a {preset.kind} preset's tokenizer cannot use it. "
            "Use rank='tfidf' or 'order'."
        )
    if options.get("oov_words"):
        raise ValueError(
            "`oov_words` finds words by SentencePiece's '\u2581' word starts "
            "and `<unk>` pieces; a structurer on a "
            f"{preset.kind} preset's tokenizer does not support it. Leave "
            "`oov_words` out."
        )
