"""Export: SavedModel modules with all preprocessing in the graph."""

from keras_hsum.export.preprocessing import TextStructurer  # noqa: F401
