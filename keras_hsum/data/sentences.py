"""A rule-based sentence splitter for text that arrives without sentences.

A sentence ends at `.`, `!` or `?` (possibly repeated, possibly followed by
closing quotes or brackets) when whitespace follows and the next word starts
like a sentence (an upper-case letter, a digit, an opening quote or bracket).
It does not end:
- after a known abbreviation (`e.g.`, `i.e.`, `Fig.`, `Eq.`, `et al.`,
  `Dr.`, `vs.`, ...), so "see Fig. 3" and "e.g. Paris" stay whole;
- after a single capital initial ("J. Smith");
- inside a number ("3.14", "v2.0"), since no whitespace follows the dot.
An all-capital word is an acronym, not an abbreviation ("... on CF. Our"
ends a sentence although "cf." is listed); "no." is an abbreviation only
before a digit ("No. 5" vs "I said no. Then"). The next sentence may start
with any upper-case letter, not only ASCII ("... here. Étant").
A newline that ends a line is treated as ordinary whitespace.
"""

import re

# Lower-cased, without the final dot. Abbreviations that often end a
# sentence ("etc.", "Inc.") are not listed: splitting after them is right
# more often than not.
ABBREVIATIONS = frozenset(
    """
    e.g i.e cf vs viz al fig figs eq eqs sec secs tab ch chap no nos vol
    pp p approx dept est mr mrs ms dr prof sr jr st mt jan feb mar apr jun
    jul aug sep sept oct nov dec ref refs resp incl ca op ed eds rev
    gen gov lt col sgt capt u.s u.k a.m p.m ph.d
    """.split()
)

# Listed abbreviations that are also ordinary words ending sentences; they
# count as abbreviations only before a digit ("No. 5", "nos. 3-4").
NUMERAL_ABBREVIATIONS = frozenset(("no", "nos"))

_BOUNDARY = re.compile(
    r"""
    (?P<end>[.!?]+["'\u201d\u2019)\]]*)   # terminal punctuation + closers
    (?P<space>\s+)                       # whitespace
    (?=["'\u201c\u2018(\[]?(?P<first>\w)) # the next sentence's first char
    """,
    re.VERBOSE,
)
_LAST_WORD = re.compile(r"(\S+)$")


def _is_abbreviation(text_before, next_char):
    match = _LAST_WORD.search(text_before)
    if not match:
        return False
    word = match.group(1).lstrip("(\"'[\u201c\u2018")
    if word.endswith("."):
        word = word[:-1]
    if len(word) == 1:
        # A single capital initial: "J. Smith", "A. B. Jones". A lower-case
        # letter is more often a variable ending a sentence ("of x. Then").
        return word.isupper()
    if word.isupper() and "." not in word:
        return False  # an acronym ("CF", "NO"), not "cf." or "No."
    lowered = word.lower()
    if lowered in NUMERAL_ABBREVIATIONS:
        return next_char.isdigit()
    return lowered in ABBREVIATIONS


def split_sentences(text):
    """Splits `text` into sentences.

    Args:
        text: a str of any length.

    Returns:
        A list of non-empty, whitespace-stripped sentences whose
        concatenation (joined by single spaces) keeps every non-space
        character of `text` in order.

    Example:
    >>> split_sentences("See Fig. 3 for details. It costs 3.5 dollars.")
    ['See Fig. 3 for details.', 'It costs 3.5 dollars.']
    """
    if not isinstance(text, str):
        raise TypeError(f"split_sentences expects a str, received {type(text).__name__}.")
    text = text.strip()
    if not text:
        return []
    sentences = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        first = match.group("first")
        if not (first.isupper() or first.isdigit()):
            continue
        end = match.start("space")
        if match.group("end")[0] == "." and _is_abbreviation(
            text[start : match.start("end") + 1], first
        ):
            continue
        sentence = text[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end("space")
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences
