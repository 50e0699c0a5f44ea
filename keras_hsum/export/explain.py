"""Pictures of what a served summary looked at (`keras-hsum summarize --explain`).

Three kinds, one per model kind, all drawn from a SavedModel's outputs:

- `plot_token_attention`: PHT/HT/... — a heatmap of the paragraph attention
  of every output token (`token_attention` [L,P]);
- `plot_segment_selection`: SEAL — which snippets each decoded segment
  selected (`selected_snippet_ids` [M,P']);
- `plot_sentence_scores`: SHTE — every sentence's score, the extracted ones
  highlighted.

matplotlib is an optional dependency, imported on first use.
"""

import os

import numpy as np


class MissingMatplotlibError(RuntimeError):
    """--explain was asked for but matplotlib is not installed."""


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend.

    Raises:
        MissingMatplotlibError: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as error:
        raise MissingMatplotlibError(
            "--explain draws its PNG with matplotlib, which is not installed; "
            "install it (`pip install matplotlib`, or the keras_hsum[bench] "
            "extra) or leave out --explain."
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _text(value, limit=48):
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    value = " ".join(str(value).split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def plot_token_attention(path, tokens, paragraphs, attention, title=""):
    """Heatmap of the paragraph attention per output token.

    Args:
        path: the PNG to write.
        tokens: the summary's tokens [L] (str/bytes; "" after the end).
        paragraphs: the paragraph texts [P] ("" pads).
        attention: float [L,P], each real token's row sums to 1.
        title: figure title.

    Returns:
        `path`.
    """
    plt = pyplot()
    tokens = [_text(t, 16) for t in tokens]
    paragraphs = [_text(p) for p in paragraphs]
    # Real tokens come first; "" pads after the end.
    rows = max(1, sum(1 for t in tokens if t))
    cols = max(1, len([p for p in paragraphs if p]) or len(paragraphs))
    matrix = np.asarray(attention, dtype=np.float32)[:rows, :cols]
    figure, axes = plt.subplots(
        figsize=(min(2 + 0.5 * cols, 24), min(2 + 0.25 * rows, 40))
    )
    image = axes.imshow(matrix, aspect="auto", cmap="viridis", vmin=0.0)
    axes.set_xticks(range(cols))
    axes.set_xticklabels(
        [f"{i}: {p}" for i, p in enumerate(paragraphs[:cols])],
        rotation=60, ha="right", fontsize=7,
    )
    axes.set_yticks(range(rows))
    axes.set_yticklabels(tokens[:rows], fontsize=7)
    axes.set_xlabel("paragraph (rank order)")
    axes.set_ylabel("summary token")
    axes.set_title(title or "paragraph attention per output token", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.03)
    return _save(plt, figure, path)


def plot_segment_selection(path, selected_ids, snippets, title=""):
    """Which snippets SEAL's gate selected for each decoded segment.

    Args:
        path: the PNG to write.
        selected_ids: int [M,P'], per segment the selected snippet ids in
            selection order (-1 pads; a segment after the end is all -1).
        snippets: the snippet texts [P].
        title: figure title.

    Returns:
        `path`.
    """
    plt = pyplot()
    selected_ids = np.asarray(selected_ids)
    segments = max(1, int(np.sum(np.any(selected_ids >= 0, axis=1))))
    snippets = [_text(s) for s in snippets]
    used = max(1, len([s for s in snippets if s]) or len(snippets))
    matrix = np.zeros((segments, used), np.float32)
    for m in range(segments):
        for rank, snippet in enumerate(selected_ids[m]):
            if 0 <= snippet < used:
                # Earlier in the selection order = brighter.
                matrix[m, snippet] = 1.0 - rank / (2.0 * max(1, selected_ids.shape[1]))
    figure, axes = plt.subplots(
        figsize=(min(2 + 0.5 * used, 24), 1.5 + 0.5 * segments)
    )
    axes.imshow(matrix, aspect="auto", cmap="Greens", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(used))
    axes.set_xticklabels(
        [f"{i}: {s}" for i, s in enumerate(snippets[:used])],
        rotation=60, ha="right", fontsize=7,
    )
    axes.set_yticks(range(segments))
    axes.set_yticklabels([f"segment {m}" for m in range(segments)], fontsize=8)
    axes.set_xlabel("snippet")
    axes.set_title(title or "snippets selected per summary segment", fontsize=9)
    return _save(plt, figure, path)


def plot_sentence_scores(path, sentences, scores, indices, title=""):
    """SHTE's sentence scores as bars; the extracted sentences highlighted.

    Args:
        path: the PNG to write.
        sentences: the sentence texts [P] ("" pads).
        scores: float [P].
        indices: int [k], the extracted sentences (-1 pads).
        title: figure title.

    Returns:
        `path`.
    """
    plt = pyplot()
    sentences = [_text(s, 60) for s in sentences]
    count = max(1, len([s for s in sentences if s]))
    scores = np.asarray(scores, np.float32)[:count]
    chosen = {int(i) for i in np.asarray(indices).ravel() if i >= 0}
    colors = ["tab:orange" if i in chosen else "tab:blue" for i in range(count)]
    figure, axes = plt.subplots(figsize=(10, 1.5 + 0.3 * count))
    axes.barh(range(count), scores, color=colors)
    axes.set_yticks(range(count))
    axes.set_yticklabels([f"{i}: {s}" for i, s in enumerate(sentences[:count])], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("sentence score (orange: extracted)")
    axes.set_title(title or "SHTE sentence scores", fontsize=9)
    return _save(plt, figure, path)


def _save(plt, figure, path):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
