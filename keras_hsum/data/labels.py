"""Training labels computed with ROUGE: SEAL proxy labels, the greedy
extractive oracle, SHTE's positive/negative document-summary pairs and
PEGASUS's principal-sentence pairs.

ROUGE here is rouge-score's ROUGE-N (its tokenizer, Porter stemming on,
clipped n-gram counts), through `rouge_overlap`, which tokenises every text
once. `metric` arguments name rouge-score metrics, `("rouge1", "rouge2")`
by default; every `"rougeN"` is accepted.

- `seal_proxy_labels`: SEAL's weak supervision for the snippet scorer
  (Zhao, Saleh & Liu): a text similarity between each input snippet and the
  summary, or each summary segment. The paper settles on a non-sequential
  ROUGE F1 (its appendix compares precision, recall, F and sequential
  labelling and finds small differences); which n it uses was lost from the
  text we have, so the label is the mean F1 over `metric` (ROUGE-1 and
  ROUGE-2), in [0, 1].
- `greedy_oracle`: the standard greedy extractive oracle (Nallapati et al.
  2017; Liu & Lapata 2019): add the sentence that most increases
  ROUGE-1 F1 + ROUGE-2 F1 until nothing does.
- `shte_pairs`: SHTE (González et al. 2020, §3.3) trains its siamese
  classifier on one positive pair (document, own summary) and one negative
  pair (document, a summary drawn at random from the other documents) per
  document.
- `principal_sentence_examples`: PEGASUS's self-supervised pairs (Zhang et
  al. 2020): each passage of unlabelled text with its principal sentence,
  the one of highest ROUGE-1 F1 against the rest, as its summary.
"""

import bisect
import collections
import dataclasses
import itertools
import typing

import numpy as np
from rouge_score import scoring

from keras_hsum.checks import check_int
from keras_hsum.data.reader import Document
from keras_hsum.data.reader import Section
from keras_hsum.data.rouge_overlap import RougeReference
from keras_hsum.data.rouge_overlap import ngram_counts
from keras_hsum.data.rouge_overlap import overlap_score
from keras_hsum.data.rouge_overlap import rouge_tokens
from keras_hsum.data.structure import EmptySummaryError

DEFAULT_METRIC = ("rouge1", "rouge2")


def _orders(metric):
    """("rouge1", "rouge2") -> (1, 2), validated."""
    if isinstance(metric, str):
        metric = (metric,)
    orders = []
    for name in metric:
        suffix = ""
        if isinstance(name, str) and name.startswith("rouge"):
            suffix = name[len("rouge") :]
        if not suffix.isdigit() or int(suffix) < 1:
            raise ValueError(
                "`metric` must name ROUGE-N metrics as rouge-score does, e.g. "
                f"('rouge1', 'rouge2'); received {metric!r}. ROUGE-L is not "
                "supported for labels."
            )
        orders.append(int(suffix))
    if not orders:
        raise ValueError(
            "`metric` must name at least one ROUGE-N metric, received "
            f"{metric!r}."
        )
    return tuple(orders)


def _check_summary(summary, what="summary"):
    if not isinstance(summary, str):
        raise TypeError(
            f"The {what} must be a str, received {type(summary).__name__}."
        )
    if not rouge_tokens(summary):
        raise EmptySummaryError(
            f"The {what} {summary[:60]!r} has no ROUGE token (no letter or "
            "digit); labels need a non-empty reference summary."
        )


# --------------------------------------------------------------------------
# SEAL proxy labels
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SealProxyLabels:
    """SEAL's proxy labels for the snippets of one example.

    Attributes:
        summary_labels: float32 [P], each snippet's label against the whole
            summary (the extractive-abstractive model's labels).
        segment_labels: float32 [M, P], each snippet's label against each
            summary segment (SEAL's segment-wise labels); None when no
            segment length was given.
        segment_texts: the M segment texts (empty without a segment length).
    """

    summary_labels: np.ndarray
    segment_labels: typing.Optional[np.ndarray]
    segment_texts: tuple


def summary_segments(summary, segment_length, vocabulary=None):
    """Splits a summary into consecutive, non-overlapping segments.

    SEAL's decoder works in segments of L_seg target tokens; segment j of
    the summary covers target tokens [j * L_seg, (j + 1) * L_seg). We cut at
    token boundaries, not sentences, so that segment j is exactly what the
    decoder produces while segment j is being decoded. With a `vocabulary`
    the tokens are its ids (`vocabulary.encode(summary)`, the ids
    `make_dataset`'s target puts between BOS and EOS) and each segment's text is
    `vocabulary.decode(ids)` (a segment may start or end inside a word);
    without one they are whitespace-separated words.

    Args:
        summary: the reference str.
        segment_length: L_seg, a positive int.
        vocabulary: an optional `Vocabulary`.

    Returns:
        A list of M = ceil(len(tokens) / L_seg) str.
    """
    segment_length = check_int("segment_length", segment_length, hint=" (L_seg)")
    if vocabulary is not None:
        ids = vocabulary.encode(summary)
        return [
            vocabulary.decode(ids[start : start + segment_length])
            for start in range(0, len(ids), segment_length)
        ]
    tokens = summary.split()
    return [
        " ".join(tokens[start : start + segment_length])
        for start in range(0, len(tokens), segment_length)
    ]


def _mean_f1(reference, candidate_counts, orders):
    return sum(
        overlap_score(reference.counts(n), candidate_counts[n]).fmeasure
        for n in orders
    ) / len(orders)


def seal_proxy_labels(
    snippet_texts,
    summary,
    segment_length=None,
    vocabulary=None,
    metric=DEFAULT_METRIC,
):
    """SEAL's proxy extractive labels: ROUGE F1 of snippets vs the summary.

    Args:
        snippet_texts: a list of P str, e.g. the "snippets" rows' `unit_texts`.
        summary: the reference summary (str).
        segment_length: L_seg. When given, snippets are also scored against
            every segment of the summary (see `summary_segments`: L_seg
            vocabulary tokens with a `vocabulary`, otherwise L_seg words).
        vocabulary: an optional `Vocabulary` that defines segment tokens.
        metric: ROUGE-N metrics; the label is their mean F1.

    Returns:
        A `SealProxyLabels`: `summary_labels` float32 [P],
        `segment_labels` float32 [M, P] (None without `segment_length`),
        `segment_texts` (M str). All labels lie in [0, 1].

    Raises:
        EmptySummaryError: when the summary has no ROUGE token.

    Example:
    >>> labels = seal_proxy_labels(["the cat sat", "dogs bark"],
    ...                            "the cat sat. dogs ran.", segment_length=3)
    >>> labels.segment_labels.shape
    (2, 2)
    """
    orders = _orders(metric)
    _check_summary(summary)
    snippet_texts = list(snippet_texts)
    candidates = []
    for text in snippet_texts:
        tokens = rouge_tokens(text)
        candidates.append({n: ngram_counts(tokens, n) for n in orders})
    whole = RougeReference(summary)
    summary_labels = np.array(
        [_mean_f1(whole, counts, orders) for counts in candidates],
        dtype=np.float32,
    )
    if segment_length is None:
        return SealProxyLabels(summary_labels, None, ())
    segments = summary_segments(summary, segment_length, vocabulary)
    segment_labels = np.zeros((len(segments), len(snippet_texts)), np.float32)
    for m, segment in enumerate(segments):
        reference = RougeReference(segment)
        for p, counts in enumerate(candidates):
            segment_labels[m, p] = _mean_f1(reference, counts, orders)
    return SealProxyLabels(summary_labels, segment_labels, tuple(segments))


# --------------------------------------------------------------------------
# Greedy extractive oracle
# --------------------------------------------------------------------------


def _references(references):
    if isinstance(references, str):
        references = [references]
    references = list(references)
    if not references:
        raise ValueError(
            "`references` must be a str or a non-empty list of str, "
            "received an empty list."
        )
    for i, reference in enumerate(references):
        _check_summary(reference, what=f"reference {i}")
    return [RougeReference(r) for r in references]


class _GreedyState:
    """The selected extract's n-gram counts, updated one sentence at a time.

    The extract is the selected sentences joined by spaces in document
    order, tokenised as one text, so n-grams (n >= 2) cross sentence
    boundaries exactly as when rouge-score scores the joined extract.
    Inserting sentence k between its selected neighbours changes the counts
    by: the n-grams inside k, plus the n-grams across its two junctions,
    minus the n-grams that crossed the junction it splits.
    """

    def __init__(self, tokens, references, orders):
        self.tokens = tokens
        self.references = references
        self.orders = orders
        self.selected = []  # sorted sentence indices
        self.num_tokens = 0
        self.counts = {n: {} for n in orders}
        self.overlaps = [{n: 0 for n in orders} for _ in references]
        relevant = {n: set() for n in orders}
        for reference in references:
            for n in orders:
                relevant[n].update(reference.counts(n))
        # n-grams inside each sentence that occur in some reference.
        self.inside = [
            {
                n: {
                    g: c
                    for g, c in ngram_counts(t, n).items()
                    if g in relevant[n]
                }
                for n in orders
            }
            for t in tokens
        ]
        unigrams = set()
        for reference in references:
            unigrams.update(reference.tokens)
        # A sentence without any reference token can never raise the score.
        self.useful = [any(w in unigrams for w in t) for t in tokens]

    def _context(self, position, n):
        """Last n-1 tokens before, first n-1 after insertion at `position`."""
        width = n - 1
        left, right = [], []
        if width == 0:
            return left, right
        for index in reversed(self.selected[:position]):
            left[:0] = self.tokens[index][-width:]
            if len(left) >= width:
                break
        for index in self.selected[position:]:
            right.extend(self.tokens[index][:width])
            if len(right) >= width:
                break
        return left[-width:], right[:width]

    def delta(self, k):
        """n -> {gram: change in count} when sentence k is added."""
        position = bisect.bisect_left(self.selected, k)
        tokens = self.tokens[k]
        changes = {}
        for n in self.orders:
            change = dict(self.inside[k][n])
            if n > 1 and self.selected:
                left, right = self._context(position, n)
                width = n - 1
                if len(tokens) >= width:
                    added = ngram_counts(left + tokens[:width], n)
                    added.update(ngram_counts(tokens[-width:] + right, n))
                else:
                    added = ngram_counts(left + tokens + right, n)
                for g, c in added.items():
                    change[g] = change.get(g, 0) + c
                for g, c in ngram_counts(left + right, n).items():
                    change[g] = change.get(g, 0) - c
            changes[n] = change
        return changes

    def score(self, num_tokens, overlaps):
        """Mean over references of the sum over n of ROUGE-n F1."""
        total = 0.0
        for reference, by_order in zip(self.references, overlaps):
            for n in self.orders:
                candidate_total = max(num_tokens - n + 1, 0)
                reference_total = max(len(reference.tokens) - n + 1, 0)
                precision = by_order[n] / max(candidate_total, 1)
                recall = by_order[n] / max(reference_total, 1)
                total += scoring.fmeasure(precision, recall)
        return total / len(self.references)

    def evaluate(self, k):
        """(score, overlaps, changes) if sentence k were added."""
        changes = self.delta(k)
        overlaps = []
        for reference, current in zip(self.references, self.overlaps):
            by_order = {}
            for n in self.orders:
                reference_counts = reference.counts(n)
                counts = self.counts[n]
                overlap = current[n]
                for g, c in changes[n].items():
                    limit = reference_counts.get(g)
                    if limit:
                        before = counts.get(g, 0)
                        overlap += min(limit, before + c) - min(limit, before)
                by_order[n] = overlap
            overlaps.append(by_order)
        score = self.score(self.num_tokens + len(self.tokens[k]), overlaps)
        return score, overlaps, changes

    def add(self, k, overlaps, changes):
        bisect.insort(self.selected, k)
        self.num_tokens += len(self.tokens[k])
        self.overlaps = overlaps
        for n in self.orders:
            counts = self.counts[n]
            for g, c in changes[n].items():
                counts[g] = counts.get(g, 0) + c


def greedy_oracle_steps(
    sentences, references, max_sentences=None, metric=DEFAULT_METRIC
):
    """The greedy oracle's additions, one at a time.

    Args:
        sentences: a list of N str, the document's sentences in order.
        references: the reference summary (str) or several (list of str).
        max_sentences: stop after this many sentences (None: no limit).
        metric: ROUGE-N metrics whose F1 values are summed.

    Yields:
        `(index, score)` per added sentence, in the order added: the
        sentence index and the score of the extract after adding it. The
        extract is the selected sentences joined by spaces in document
        order, scored as rouge-score scores that text (n-grams cross
        sentence boundaries); its score is the sum over `metric` of F1,
        averaged over the references. Each score is strictly higher than
        the one before; ties between sentences go to the earliest.
    """
    orders = _orders(metric)
    max_sentences = check_int("max_sentences", max_sentences, 0, allow_none=True)
    reference_list = _references(references)
    tokens = [rouge_tokens(s) for s in sentences]
    state = _GreedyState(tokens, reference_list, orders)
    remaining = [k for k in range(len(tokens)) if state.useful[k]]
    limit = len(tokens) if max_sentences is None else max_sentences
    current = 0.0
    while remaining and len(state.selected) < limit:
        best = None
        for k in remaining:
            score, overlaps, changes = state.evaluate(k)
            if score > current and (best is None or score > best[0]):
                best = (score, k, overlaps, changes)
        if best is None:
            return
        current, k, overlaps, changes = best
        state.add(k, overlaps, changes)
        remaining.remove(k)
        yield k, current


def greedy_oracle(
    sentences, references, max_sentences=None, metric=DEFAULT_METRIC
):
    """Greedy extractive oracle (Nallapati et al., 2017).

    Repeatedly adds the sentence that most increases the extract's
    ROUGE-1 F1 + ROUGE-2 F1 (by default) against the reference(s), until
    no sentence increases it or `max_sentences` are selected. See
    `greedy_oracle_steps` for the scoring; every text is tokenised once and
    each step costs time linear in the matching n-grams, so a meeting of
    ~2,000 sentences takes a fraction of a second.

    Args:
        sentences: a list of N str, in document order.
        references: a str, or a list of str (scores are averaged).
        max_sentences: the most sentences selected (None: no limit).
        metric: ROUGE-N metrics whose F1 values are summed.

    Returns:
        A sorted list of sentence indices (document order), possibly empty.

    Example:
    >>> greedy_oracle(["A cat sat.", "Stocks fell.", "It was on a mat."],
    ...               "The cat sat on the mat.")
    [0, 2]
    """
    return sorted(
        k
        for k, _ in greedy_oracle_steps(
            sentences, references, max_sentences, metric
        )
    )


def oracle_labels(num_sentences, indices):
    """Binary extraction labels from oracle indices.

    Args:
        num_sentences: N.
        indices: selected sentence indices (any order).

    Returns:
        float32 array [N]: 1 at the selected sentences, 0 elsewhere.
    """
    labels = np.zeros((num_sentences,), dtype=np.float32)
    indices = list(indices)
    if indices and (min(indices) < 0 or max(indices) >= num_sentences):
        raise ValueError(
            f"Oracle indices must lie in [0, {num_sentences}), received "
            f"{sorted(indices)}."
        )
    labels[indices] = 1.0
    return labels


# --------------------------------------------------------------------------
# SHTE document-summary pairs
# --------------------------------------------------------------------------


class ShtePair(typing.NamedTuple):
    """One training pair of SHTE's siamese classifier.

    Attributes:
        example: the `Example` whose documents are the input X.
        summary: the summary text Y (its own or another example's).
        label: 1 for a positive pair (own summary), 0 for a negative one.
    """

    example: typing.Any
    summary: str
    label: int


def _batches(iterable, size):
    iterator = iter(iterable)
    if size is None:
        window = list(iterator)
        if window:
            yield window
        return
    while True:
        window = list(itertools.islice(iterator, size))
        if not window:
            return
        yield window


def _draw(rng, pool, forbidden, count):
    """`count` distinct pool entries not in `forbidden`, drawn uniformly."""
    chosen = []
    taken = set()
    for _ in range(20 * count + 20):
        if len(chosen) == count:
            return chosen
        index = int(rng.integers(len(pool)))
        if index not in taken and pool[index].strip() not in forbidden:
            taken.add(index)
            chosen.append(pool[index])
    # Few eligible summaries: draw from the explicit list instead.
    eligible = [
        i
        for i, text in enumerate(pool)
        if i not in taken and text.strip() not in forbidden
    ]
    needed = count - len(chosen)
    if len(eligible) < needed:
        return None
    for i in rng.choice(len(eligible), size=needed, replace=False):
        chosen.append(pool[eligible[int(i)]])
    return chosen


def shte_pairs(examples, negatives_per_positive=1, seed=0, buffer_size=None):
    """SHTE's positive and negative document-summary pairs.

    For each example, in input order: one positive pair (the example, its
    summary, 1), then `negatives_per_positive` negative pairs (the example,
    the summary of another example drawn uniformly at random, 0), as in
    SHTE §3.3 (Y' != Y, drawn from the summaries of the remaining
    documents). A negative summary is never the example's own summary nor
    one of its references (compared after stripping whitespace), and the
    negatives of one example are distinct texts. Draws use a private
    `numpy.random.Generator` seeded with `seed`: the same seed gives the
    same pairs; no global random state is touched.

    Args:
        examples: an iterable of `Example`s with non-empty summaries.
        negatives_per_positive: negative pairs per positive pair (>= 0).
        seed: int seed.
        buffer_size: None reads all examples first and draws negatives from
            every summary (the paper's setting). An int streams the input in
            windows of that many examples; negatives for a window are drawn
            from its summaries and the previous window's.

    Yields:
        `ShtePair(example, summary, label)` tuples.

    Raises:
        EmptySummaryError: for an example without a summary.
        ValueError: when a window holds too few distinct other summaries.
    """
    negatives_per_positive = check_int("negatives_per_positive", negatives_per_positive, 0)
    buffer_size = check_int("buffer_size", buffer_size, allow_none=True)
    rng = np.random.default_rng(seed)
    previous = []
    for window in _batches(examples, buffer_size):
        for example in window:
            if not example.summary or not example.summary.strip():
                raise EmptySummaryError(
                    f"Example {example.id!r} has no summary; SHTE pairs need "
                    "one per example. Filter such examples out first."
                )
        summaries = [example.summary for example in window]
        pool = list(dict.fromkeys(previous + summaries))
        for example in window:
            yield ShtePair(example, example.summary, 1)
            if not negatives_per_positive:
                continue
            forbidden = {example.summary.strip()}
            forbidden.update(r.strip() for r in example.references)
            negatives = _draw(rng, pool, forbidden, negatives_per_positive)
            if negatives is None:
                raise ValueError(
                    f"Example {example.id!r} needs {negatives_per_positive} "
                    "negative summaries, but its window of "
                    f"{len(window)} examples (+{len(previous)} previous) holds "
                    "fewer distinct summaries of other examples. Use more "
                    "examples, a larger `buffer_size`, or fewer negatives."
                )
            for summary in negatives:
                yield ShtePair(example, summary, 0)
        previous = summaries


def passages(sentences, max_words):
    """Cuts a list of sentences into passages of at most `max_words` words.

    Greedy from the first sentence: a passage takes the next sentence while
    its whitespace-separated word count stays within `max_words`; a sentence
    longer than `max_words` is a passage of its own.

    Returns:
        A list of lists of sentences, in order; their concatenation is
        `sentences`.
    """
    result, current, words = [], [], 0
    for sentence in sentences:
        length = len(sentence.split())
        if current and words + length > max_words:
            result.append(current)
            current, words = [], 0
        current.append(sentence)
        words += length
    if current:
        result.append(current)
    return result


def principal_sentence(sentences):
    """The index of the sentence of highest ROUGE-1 F1 against the others.

    PEGASUS's "Ind" principal-sentence score (Zhang et al. 2020, §3.1):
    each sentence scored independently against the rest of its text joined,
    with rouge-score's ROUGE-1 (its tokenizer, stemming on). Ties go to the
    first sentence.

    Args:
        sentences: a list of at least 2 str.
    """
    if len(sentences) < 2:
        raise ValueError(
            "A principal sentence needs at least 2 sentences to compare, "
            f"received {len(sentences)}."
        )
    counts = [ngram_counts(rouge_tokens(sentence), 1) for sentence in sentences]
    total = sum(counts, collections.Counter())
    scores = [overlap_score(total - count, count).fmeasure for count in counts]
    return int(np.argmax(scores))


def principal_sentence_examples(examples, max_words=250, min_sentences=3, remove=False):
    """Self-supervised pairs from unlabelled text: each passage's principal
    sentence as its summary (PEGASUS's gap-sentence generation, Zhang et al.
    2020, §3.1, with "Ind-Orig" selection: sentences scored independently,
    n-grams counted with repeats). PEGASUS removes the chosen sentence from
    the input (`remove=True`), so the pairs teach writing a passage's gist
    from its context; left in (the default), they teach which sentence
    carries a passage and how to copy it.

    Each section of each document is cut into passages (`passages`:
    consecutive sentences, paragraph breaks ignored, at most `max_words`
    words). A passage of at least `min_sentences` sentences yields one
    example whose input is that passage (one document, one section, one
    paragraph) and whose summary, and only reference, is its
    `principal_sentence`. Human references, titles and headings are not
    used; `query` is kept.

    Args:
        examples: an iterable of `Example`.
        max_words: the longest passage in words (an int >= 1).
        min_sentences: the fewest sentences a passage needs (an int >= 2).
        remove: whether the input leaves out the principal sentence (the
            other sentences keep their order).

    Yields:
        `Example`s with ids `"<id>#p<i>"`, i counting the passages of one
        example from 0 (including those too short to yield).
    """
    max_words = check_int("max_words", max_words)
    min_sentences = check_int("min_sentences", min_sentences, 2)
    for example in examples:
        index = 0
        for document in example.documents:
            for section in document.sections:
                sentences = [s for paragraph in section.paragraphs for s in paragraph if s.strip()]
                for passage in passages(sentences, max_words):
                    index += 1
                    if len(passage) < min_sentences:
                        continue
                    chosen = principal_sentence(passage)
                    summary = passage[chosen]
                    if remove:
                        passage = passage[:chosen] + passage[chosen + 1:]
                    yield dataclasses.replace(
                        example,
                        id=f"{example.id}#p{index - 1}",
                        title=None,
                        documents=(Document(None, (Section(None, (tuple(passage),)),)),),
                        summary=summary,
                        references=(summary,),
                    )
