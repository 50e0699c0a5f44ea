"""Where the real corpora are: the shared data folder, or the bundled sample.

`corpus_path("scisummnet", "val")` returns, in this order of preference:
1. `$KERAS_HSUM_DATA/<name>/<split>.jsonl.gz` when that variable is set;
2. the shared corpora beside a checkout (`../shared/data/<name>/...`);
3. the sample bundled with the package (`keras_hsum/sample_data`), a few
   real examples per split (see its ATTRIBUTION.md).
`sample_path` always returns the bundled sample, so tests are reproducible.
"""

import os

SAMPLE_ROOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "sample_data")
SHARED_ROOT = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
)
DATASETS = (
    "scisummnet",
    "qmsum_general",
    "qmsum_goldspan",
    "fewsum_amazon",
    "fewsum_yelp",
    "scitldr_a",
    "cnndm",
)
SPLIT_FILE_STEMS = {"train": ("train",), "val": ("val", "validation", "dev"), "test": ("test",)}
"""The file stems a folder of splits may use for each split, in order of
preference (`train.jsonl.gz`, `validation.jsonl`, ...): read by the trainer
to find a `--data` folder's splits, and by evaluate to tell a folder of
splits from a folder of corpus files."""


def _file(root, name, split):
    return os.path.join(root, name, f"{split}.jsonl.gz")


def sample_path(name, split):
    """The bundled sample of `name`/`split` (always present)."""
    path = _file(SAMPLE_ROOT, name, split)
    if not os.path.exists(path):
        available = sorted(
            f"{d}/{f.split('.')[0]}"
            for d in os.listdir(SAMPLE_ROOT)
            if os.path.isdir(os.path.join(SAMPLE_ROOT, d)) and d != "tokenizers"
            for f in os.listdir(os.path.join(SAMPLE_ROOT, d))
        )
        raise FileNotFoundError(
            f"No bundled sample for {name!r} split {split!r}; "
            f"available: {', '.join(available)}."
        )
    return path


def corpus_path(name, split):
    """The fullest available copy of corpus `name`, split `split`."""
    roots = []
    if os.environ.get("KERAS_HSUM_DATA"):
        roots.append(os.environ["KERAS_HSUM_DATA"])
    roots.append(SHARED_ROOT)
    for root in roots:
        path = _file(root, name, split)
        if os.path.exists(path):
            return path
    return sample_path(name, split)


def sample_tokenizer_path():
    """The bundled foreign SentencePiece model (32k pieces, hotel reviews)."""
    return os.path.join(SAMPLE_ROOT, "tokenizers", "spm_unigram_32k.model")
