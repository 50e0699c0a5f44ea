"""Python's character predicates as RE2 classes, and the structurer's patterns.

RE2 (the regex engine of TensorFlow's string ops) has neither look-ahead
nor Python's notion of "upper-case" or "whitespace". So that the graph
structurer splits, strips and words text as the Python references do
(`keras_hsum.data.sentences`, `keras_hsum.data.ranking`,
`keras_hsum.data.graphs`), Python's `str` predicates are transcribed, code
point by code point, into explicit RE2 classes once per process, and every
pattern the structuring modules match is written from them here.
"""

import dataclasses
import functools
import sys

# split_sentences' punctuation (keras_hsum.data.sentences._BOUNDARY).
OPENERS = "\"'\u201c\u2018(["
CLOSERS = "\"'\u201d\u2019)]"


def escape(characters):
    """`characters` as RE2 code-point escapes (`\\x{...}` each): str."""
    return "".join(f"\\x{{{ord(c):x}}}" for c in characters)


@functools.lru_cache(maxsize=None)
def character_classes():
    """RE2 class bodies transcribing Python's `str` character predicates.

    Returns a dict of class bodies (without brackets), computed once over
    every code point: `space` (`str.isspace`, also Python's `\\s`),
    `upper` (`isupper`), `lower_or_title` (`islower`, titlecase), `digit`
    (`isdigit`), `sentence_start` (`\\w` and (upper or digit)), `alnum`
    (`[^\\W_]`).
    """
    predicates = {
        "space": str.isspace,
        "upper": str.isupper,
        "lower_or_title": lambda c: c.islower() or (c.istitle() and not c.isupper()),
        "digit": str.isdigit,
        "sentence_start": lambda c: (c.isalnum() or c == "_")
        and (c.isupper() or c.isdigit()),
        "alnum": str.isalnum,
    }
    ranges = {name: [] for name in predicates}
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue  # surrogates never occur in valid UTF-8
        character = chr(code)
        for name, predicate in predicates.items():
            if predicate(character):
                spans = ranges[name]
                if spans and spans[-1][1] == code - 1:
                    spans[-1][1] = code
                else:
                    spans.append([code, code])
    return {
        name: "".join(
            f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}"
            for a, b in spans
        )
        for name, spans in ranges.items()
    }


def abbreviation_patterns():
    """RE2 patterns matching `word.lower() in ABBREVIATIONS` exactly.

    Letters match both ASCII cases only (RE2's `(?i)` would also fold
    e.g. U+017F into "s", which `str.lower` does not).

    Returns:
        `(listed, numeral)`: the abbreviations that never end a sentence,
        and those that are abbreviations only before a digit
        (`keras_hsum.data.sentences.NUMERAL_ABBREVIATIONS`).
    """
    from keras_hsum.data.sentences import ABBREVIATIONS
    from keras_hsum.data.sentences import NUMERAL_ABBREVIATIONS

    def literal(word):
        return "".join(
            f"[{c}{c.upper()}]" if c.isalpha() else "\\" + c if c == "." else c
            for c in word
        )

    listed = sorted(ABBREVIATIONS - NUMERAL_ABBREVIATIONS)
    numeral = sorted(NUMERAL_ABBREVIATIONS)
    return (
        "(?:" + "|".join(literal(w) for w in listed) + ")",
        "(?:" + "|".join(literal(w) for w in numeral) + ")",
    )


@dataclasses.dataclass(frozen=True)
class Patterns:
    """The RE2 patterns of the structuring modules (see `patterns`).

    Attributes:
        strip: leading or trailing whitespace (`str.strip`).
        space: a run of whitespace (`str.split`'s separators).
        leading_space: whitespace at the start of a string.
        trailing_space: whitespace at the end of a string.
        boundary: a possible sentence boundary: `.`/`!`/`?` and closers
            (the end of a chunk), then the whitespace after them.
        before_last_word: everything up to a string's last whitespace
            (removing it leaves the last whitespace-separated word).
        ends: a chunk ending with `.`/`!`/`?` and closers.
        head: a chunk cut into its text before the terminal punctuation
            (group 1) and the first mark (group 2).
        openers: leading opening quotes or brackets.
        starts: a chunk that may start a sentence (an optional opener, then
            an upper-case letter or digit that is a word character).
        starts_digit: a chunk starting (after an optional opener) with a
            digit.
        upper_char: one upper-case character.
        upper_word: a word with an upper-case and no lower-case letter
            (an acronym).
        listed: an abbreviation that never ends a sentence.
        numeral: an abbreviation only before a digit ("no.", "nos.").
        nonword: a run of characters that are not `[^\\W_]` (what separates
            tf-idf terms and words).
        capitalised: a token starting with an upper-case letter.
    """

    strip: str
    space: str
    leading_space: str
    trailing_space: str
    boundary: str
    before_last_word: str
    ends: str
    head: str
    openers: str
    starts: str
    starts_digit: str
    upper_char: str
    upper_word: str
    listed: str
    numeral: str
    nonword: str
    capitalised: str


@functools.lru_cache(maxsize=None)
def patterns():
    """The structuring modules' `Patterns`, built once per process."""
    classes = character_classes()
    space = classes["space"]
    closers = escape(CLOSERS)
    openers = escape(OPENERS)
    not_lower = f"[^{classes['lower_or_title']}]*"
    listed, numeral = abbreviation_patterns()
    return Patterns(
        strip=f"^[{space}]+|[{space}]+$",
        space=f"[{space}]+",
        leading_space=f"^[{space}]+",
        trailing_space=f"[{space}]+$",
        boundary=f"[.!?][{closers}]*[{space}]+",
        before_last_word=f"(?s)^.*[{space}]",
        ends=f"(?s).*[.!?][{closers}]*",
        head=f"(?s)^(.*?)([.!?])[.!?]*[{closers}]*$",
        openers=f"^[{openers}]+",
        starts=f"(?s)[{openers}]?[{classes['sentence_start']}].*",
        starts_digit=f"(?s)[{openers}]?[{classes['digit']}].*",
        upper_char=f"[{classes['upper']}]",
        upper_word=f"(?s){not_lower}[{classes['upper']}]{not_lower}",
        listed=listed,
        numeral=numeral,
        nonword=f"[^{classes['alnum']}]+",
        capitalised=f"(?s)[{classes['upper']}].*",
    )
