"""Kubeflow Pipelines components for distributed CTR training with PaddlePaddle on Volcano."""
import re
from pathlib import Path

from setuptools import find_packages, setup

# Written once, in ctr_volcano/version.py (the image tags follow it); read, not imported, here.
VERSION = re.search(r'^__version__ = "([^"]+)"$', (Path(__file__).parent / "ctr_volcano" / "version.py")
                    .read_text(), re.M).group(1)

# The SDK: compose, compile and submit pipelines, render Jobs and RBAC, generate data, prep and
# evaluate. No Paddle and no upper bound on numpy or pyarrow, so it installs into a notebook without
# moving its numpy, pyarrow or kfp (tests/test_install.py checks exactly that in a fresh venv).
INSTALL_REQUIRES = [
    "numpy>=1.26",
    "pyarrow>=25",
    "kfp==2.17.3",             # the committed YAML is this compiler's output
    "kfp-kubernetes==2.17.3",
    "kubernetes>=30.1,<31",    # kfp 2.17.3 takes < 31
    "PyYAML>=6",
    "jsonschema>=4.18",        # `ctr-volcano render-job --check-crd` validates against the Volcano CRD
    "onnx>=1.17,<2",           # `ctr-volcano export` and trainer 0 build model.onnx (no Paddle needed)
]

# The model server (`ctr-volcano serve`: KServe V2 over onnxruntime), bench/serve.py and the parity
# tests; the serving image installs this extra too (dockerfiles/Dockerfile.serving). One environment
# with the training stack: pip's resolver takes kserve 0.21 beside kfp 2.17.3, kubernetes 30.1,
# paddlepaddle 3.0.0 and numpy 2.4; kserve takes pandas < 3, which the tests' pandas >= 2.2 allows.
SERVE_REQUIRES = [
    "onnxruntime>=1.20",
    "kserve==0.21.0",
]

# Batch scoring (`ctr-volcano score`, the score_ctr component and its pods): the server's ONNX
# runtime without the server; the component image installs it (dockerfiles/Dockerfile.component).
SCORE_REQUIRES = [
    "onnxruntime>=1.20",
]

# The training stack: the local backend and the trainer image (`pip install 'ctr-volcano[train]'`).
# Of the paddlepaddle 3.x CPU wheels only 3.0.0 has the parameter-server core (3.1.0 lacks the
# distributed lookup ops, 3.1.1-3.3.1 the whole PS core); it runs PS mode on numpy 2 with PIR off.
TRAIN_REQUIRES = [
    "paddlepaddle==3.0.0",
    "numpy>=2",
    "protobuf>=6.31.1,<7",     # 7.x breaks Paddle's DistributedStrategy (a_sync); kfp takes >= 6.31.1
    "setuptools>=65",          # `import paddle` imports it; venvs of Python 3.12+ come without it
]

TEST_REQUIRES = [
    "pandas>=2.2",             # tests compare against pandas; the package does not use it
    "pytest==9.2.0",
    "packaging>=23",          # tests/test_volcano_images.py reads setup.py's specifiers
    "pytest-timeout==2.4.0",
    "scikit-learn==1.9.1",
    "nbformat==5.11.1",
    "nbclient==0.11.0",
    "ipykernel==7.4.0",
    "ruff==0.17.6",
    "mypy==2.4.1",
    "Pillow==13.0.0",  # reads the README's PNGs (tests/test_doc_pictures.py) and crops them (tools/docs/)
]

# The peers and plotting of bench/ (prep.py, scale.py); the test extra includes them because the
# default test tier checks the peers agree with prep (tests/test_prep_peers.py).
BENCH_REQUIRES = [
    "polars==2.1.0",
    "duckdb==2.0.0",
    "matplotlib==3.11.2",
]

setup(
    name="ctr-volcano",
    version=VERSION,
    description=__doc__,
    packages=find_packages(include=["ctr_volcano", "ctr_volcano.*", "ctr_model", "ctr_model.*",
                                    "components", "components.*", "pipelines", "pipelines.*"]),
    package_data={"components": ["*.yaml"], "pipelines": ["*.yaml"]},
    # 3.11 is the oldest Python the code runs on (datetime.fromisoformat of "...Z"); the base install
    # and the training stack are tested on 3.11 and 3.13 (tests/test_install.py)
    python_requires=">=3.11",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
    install_requires=INSTALL_REQUIRES,
    extras_require={"train": TRAIN_REQUIRES,
                    "test": TRAIN_REQUIRES + TEST_REQUIRES + BENCH_REQUIRES + SERVE_REQUIRES,
                    "bench": BENCH_REQUIRES, "serve": SERVE_REQUIRES,
                    "score": SCORE_REQUIRES},
    entry_points={"console_scripts": ["ctr-volcano=ctr_volcano.app.cli.main:main"]},
)
