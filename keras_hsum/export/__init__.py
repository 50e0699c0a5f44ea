"""Export: SavedModel modules with all preprocessing in the graph.

`TextStructurer` (in-graph preprocessing), the serving modules
(`SummarizerModule` for abstractive recipes, `ExtractorModule` for SHTE),
`SearchOptions` (the beam search they run; it lives in
`keras_hsum.decoding.search_options`) and `export_saved_model` (numbered
version folders + TF Serving's models.config). `keras_hsum.export.exporter`
exports a run folder (`export_run`) and runs a SavedModel
(`summarize_examples`); the `keras-hsum export` and `summarize` commands are
its command line, `keras_hsum.export.cli`. See docs/serving.md.
"""

from keras_hsum.data.structurer import TextStructurer  # noqa: F401
from keras_hsum.decoding.search_options import SearchOptions  # noqa: F401
from keras_hsum.export.serving import ExtractorModule  # noqa: F401
from keras_hsum.export.serving import SummarizerModule  # noqa: F401
from keras_hsum.export.serving import export_saved_model  # noqa: F401
from keras_hsum.export.serving import latest_version_path  # noqa: F401
from keras_hsum.export.serving import write_models_config  # noqa: F401
