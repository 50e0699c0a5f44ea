"""`keras-hsum export --preset`: the recipes' paper decoding settings
(`keras_hsum.export.cli.decoding_settings`, `decoding_flags`).

Nothing is exported: the tests parse the command line and resolve the
settings the way `export_run` does before it builds `SearchOptions`.
"""

import argparse

import pytest

pytestmark = pytest.mark.tensorflow_only

# What `--preset default` gives every recipe (the export's behaviour before
# presets existed): beam 5, |y| normalisation, no blocking, β 0.8 (used only
# with a predictor).
DEFAULT = {
    "beam_size": 5, "length_alpha": None, "block_ngrams": 0, "block_recent": 0,
    "recent_exceptions": (), "alignment_beta": 0.8,
}

# Written out from the papers (../shared/papers), independently of the
# recipes' DECODING declarations.
PAPER = {
    # HT: "decoding use beam search beam size length penalty wu et al";
    # beam 5, α = 0.4 per the papers' README; no n-gram blocking.
    "ht": {**DEFAULT, "length_alpha": 0.4},
    # PHT §5.2: beam 5, no trigram repeated, the last two tokens blocked
    # except commas; Eq. 17: |y|; §5.3: β ≈ 0.8 (here with a predictor).
    "pht": {**DEFAULT, "block_ngrams": 3, "block_recent": 2,
            "recent_exceptions": (",",), "alignment_beta": 0.8},
    # Cohan et al., implementation details: "beam size of 4".
    "discourse": {**DEFAULT, "beam_size": 4},
    # SEAL, experimental details: every model decoded greedily.
    "seal": {**DEFAULT, "beam_size": 1},
    "extractive_abstractive": {**DEFAULT, "beam_size": 1},
    "compressive_abstractive": {**DEFAULT, "beam_size": 1},
}


def parse_export(*flags):
    from keras_hsum.export.cli import add_parsers

    root = argparse.ArgumentParser(prog="keras-hsum")
    add_parsers(root.add_subparsers(dest="command", required=True))
    return root.parse_args(["export", "--run", "runs/x", "--out", "saved/x", *flags])


def settings_from_command_line(recipe_name, *flags, predictor=False):
    """What `keras-hsum export` resolves for these flags: `(settings, notes)`."""
    from keras_hsum import recipes
    from keras_hsum.export.cli import decoding_flags
    from keras_hsum.export.exporter import decoding_settings

    args = parse_export(*flags)
    return decoding_settings(recipe_name, recipes.get(recipe_name), args.preset,
                             predictor=predictor, **decoding_flags(args))


def search_options(settings, max_length=50):
    """The `SearchOptions` export_run builds (pieces stand in as ids 0..n-1)."""
    from keras_hsum.decoding.search_options import SearchOptions

    settings = dict(settings)
    pieces = settings.pop("recent_exceptions")
    return SearchOptions(max_length=max_length, recent_exceptions=tuple(range(len(pieces))),
                         **settings)


def test_every_paper_preset_is_the_papers_decoding():
    from keras_hsum import recipes
    from keras_hsum.decoding import LengthNormalization

    declared = {name for name in recipes.names()
                if "paper" in getattr(recipes.get(name), "DECODING", {})}
    assert declared == set(PAPER)  # a new preset needs its reference here
    for name, expected in PAPER.items():
        settings, notes = settings_from_command_line(
            name, "--preset", "paper", predictor=name == "pht"
        )
        assert settings == expected, name
        assert notes == []
        options = search_options(settings)
        assert options.beam_size == expected["beam_size"]
        assert options.length_alpha == expected["length_alpha"]
        assert options.block_ngrams == expected["block_ngrams"]
        assert options.block_recent == expected["block_recent"]
        assert options.alignment_beta == expected["alignment_beta"]
    # HT's α reaches the search's length term (GNMT, not |y|).
    (length,) = [t for t in search_options(PAPER["ht"]).terms({})
                 if isinstance(t, LengthNormalization)]
    assert length.alpha == 0.4


def test_pht_paper_preset_without_a_predictor_turns_alignment_off_and_says_so():
    settings, notes = settings_from_command_line("pht", "--preset", "paper")
    assert settings == {**PAPER["pht"], "alignment_beta": 0.0}
    assert len(notes) == 1
    assert "alignment" in notes[0] and "--predictor-run" in notes[0]
    # An explicit β is the user's choice: kept, nothing to say.
    settings, notes = settings_from_command_line(
        "pht", "--preset", "paper", "--alignment-beta", "0.5"
    )
    assert settings["alignment_beta"] == 0.5 and notes == []


def test_command_line_flags_override_the_preset():
    settings, _ = settings_from_command_line("discourse", "--preset", "paper",
                                             "--beam-size", "8")
    assert settings == {**PAPER["discourse"], "beam_size": 8}
    settings, _ = settings_from_command_line(
        "pht", "--preset", "paper", "--block-ngrams", "0", "--length-alpha", "0.6",
        "--recent-exception", "-", "--recent-exception", ",", predictor=True,
    )
    assert settings == {**PAPER["pht"], "block_ngrams": 0, "length_alpha": 0.6,
                        "recent_exceptions": ("-", ",")}
    settings, _ = settings_from_command_line("seal", "--preset", "paper", "--beam-size", "3")
    assert settings["beam_size"] == 3


def test_the_default_preset_keeps_the_options_of_before():
    from keras_hsum import recipes
    from keras_hsum.export.cli import decoding_flags
    from keras_hsum.decoding.search_options import SearchOptions

    assert parse_export().preset == "default"
    assert decoding_flags(parse_export()) == {}
    for name in recipes.names():
        assert settings_from_command_line(name) == (DEFAULT, []), name
        assert settings_from_command_line(name, "--preset", "default") == (DEFAULT, [])
    # The SearchOptions an export without decoding flags built before.
    assert search_options(DEFAULT) == SearchOptions(max_length=50)
    settings, _ = settings_from_command_line("ht", "--beam-size", "2", "--block-ngrams", "3")
    assert settings == {**DEFAULT, "beam_size": 2, "block_ngrams": 3}


def test_an_unknown_preset_is_refused_naming_the_known_ones(capsys):
    from keras_hsum import recipes
    from keras_hsum.export.exporter import decoding_settings

    with pytest.raises(SystemExit):
        parse_export("--preset", "wikisum")
    error = capsys.readouterr().err
    assert "'wikisum'" in error and "'default'" in error and "'paper'" in error
    with pytest.raises(ValueError, match=r"Unknown --preset 'wikisum'.*'default', 'paper'"):
        decoding_settings("ht", recipes.get("ht"), "wikisum")
    # A recipe that declares no paper preset (FT is two papers' baseline).
    with pytest.raises(ValueError, match=r"'flat' declares no 'paper'.*\['default'\]"):
        settings_from_command_line("flat", "--preset", "paper")
