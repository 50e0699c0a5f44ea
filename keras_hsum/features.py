"""Feature names that more than one part of keras_hsum reads (backend-free).

The models, decoding and export read the features that `keras_hsum.data`
builds; a name they share is declared here, beneath all of them, so that none
reaches into another for it (issue 49 item 1 grows this into each family's
whole feature contract).
"""

PARAGRAPH_FEATURES = (
    "tokens",
    "token_mask",
    "paragraph_mask",
    "document_ids",
    "paragraph_index",
    "rank_score",
    "ranker_targets",
    "graph",
)
"""The paragraph-major features of the `paragraphs` family: P is axis 1
(and axis 2 of the [B,P,P] `graph`). Reordering paragraphs
(`keras_hsum.models.take_paragraphs`) or keeping some of them
(`keras_hsum.decoding.compress_paragraphs`) gathers these together."""
