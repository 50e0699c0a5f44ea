"""keras_hsum: hierarchical summarization as reusable Keras 3 layers."""

import pathlib

from setuptools import find_packages
from setuptools import setup

HERE = pathlib.Path(__file__).parent

INSTALL_REQUIRES = [
    "tensorflow==2.20.0",
    "tensorflow-text==2.20.1",
    "keras>=3.15,<3.16",
    "keras-hub==0.32.0",
    "sentencepiece>=0.2,<0.3",
    "rouge-score==0.1.2",
    "numpy>=1.26",
    "tqdm>=4.60",
]
EXTRAS_REQUIRE = {
    "test": [
        "pytest>=8",
        "hypothesis>=6.100",
        "tf-models-official==2.20.0",
    ],
    "jax": ["jax[cpu]>=0.5"],
    "bench": ["matplotlib>=3.8", "psutil>=5.9"],
    # keras-hsum preprocess (Apache Beam). 2.77.0 was checked with the pins
    # above (pip check clean; TensorFlow, tensorflow-text, keras-hub import);
    # it needs protobuf < 7, which TensorFlow 2.20 (>= 5.28) accepts.
    "beam": ["apache-beam==2.77.0", "protobuf>=5.28,<7"],
}

setup(
    name="keras-hsum",
    version="0.1.0.dev0",
    description=(
        "Hierarchical summarization models (HT, PHT, SEAL, discourse-aware "
        "attention, SHTE) as reusable Keras 3 layers."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    # recipes/ stays a top-level folder of the repository but installs as
    # keras_hsum.recipes, so that no global `recipes` package lands in
    # site-packages.
    packages=find_packages(include=["keras_hsum", "keras_hsum.*"]) + ["keras_hsum.recipes"],
    package_dir={"keras_hsum.recipes": "recipes"},
    package_data={
        "keras_hsum": [
            "sample_data/ATTRIBUTION.md",
            "sample_data/*/*.jsonl.gz",
            "sample_data/tokenizers/*.model",
        ]
    },
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["keras-hsum=keras_hsum.cli:main"]},
)
