"""keras_hsum: hierarchical summarization as reusable Keras 3 layers."""

__version__ = "0.1.0.dev0"
