"""Kubeflow Pipelines components for distributed CTR training with PaddlePaddle on Volcano."""
from setuptools import find_packages, setup

# Pinned: of the paddlepaddle 3.x CPU wheels only 3.0.0 has the parameter-server core (3.1.0 lacks
# the distributed lookup ops, 3.1.1-3.3.1 the whole PS core); it runs PS mode on numpy 2 with PIR off.
INSTALL_REQUIRES = [
    "paddlepaddle==3.0.0",
    "numpy==2.4.6",
    "pandas==3.0.6",
    "pyarrow==26.0.1",
    "protobuf==6.33.6",  # 7.x breaks paddlepaddle 3.0.0's DistributedStrategy (a_sync)
    "kfp==2.17.3",
    "kfp-kubernetes==2.17.3",
    "kubernetes==30.1.0",
    "PyYAML==6.0.3",
    "jsonschema==4.26.0",  # `ctr-volcano render-job --check-crd` validates against the Volcano CRD
]

TEST_REQUIRES = [
    "pytest==9.2.0",
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
    version="0.1.0",
    description=__doc__,
    packages=find_packages(include=["ctr_volcano", "ctr_volcano.*", "ctr_model", "ctr_model.*",
                                    "components", "components.*", "pipelines", "pipelines.*"]),
    package_data={"components": ["*.yaml"], "pipelines": ["*.yaml"]},
    # pandas 3 needs Python 3.11; 3.11 is what the code and the tests are run with
    python_requires=">=3.11,<3.12",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
    ],
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": TEST_REQUIRES + BENCH_REQUIRES, "bench": BENCH_REQUIRES},
    entry_points={"console_scripts": ["ctr-volcano=ctr_volcano.cli:main"]},
)
