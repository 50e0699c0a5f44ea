"""Export: SavedModel modules with all preprocessing in the graph.

`TextStructurer` (in-graph preprocessing), the serving modules
(`SummarizerModule` for abstractive recipes, `ExtractorModule` for SHTE),
`SearchOptions` (the beam search they run) and `export_saved_model` (numbered
version folders + TF Serving's models.config). The `keras-hsum export` and
`summarize` commands live in `keras_hsum.export.cli`; see docs/serving.md.
"""

from keras_hsum.data.structurer import TextStructurer  # noqa: F401
from keras_hsum.export.serving import ExtractorModule  # noqa: F401
from keras_hsum.export.serving import SearchOptions  # noqa: F401
from keras_hsum.export.serving import SummarizerModule  # noqa: F401
from keras_hsum.export.serving import export_saved_model  # noqa: F401
from keras_hsum.export.serving import latest_version_path  # noqa: F401
from keras_hsum.export.serving import write_models_config  # noqa: F401
