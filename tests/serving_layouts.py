"""Five layouts of click logs, each made, prepped and trained once per test session, for the ONNX and
server tests of every family: Criteo (the committed sample's first 40k lines), a CSV with a header,
string ids and no dense column (a multi-valued field in the log's own ``|`` form), a Parquet file
with two list columns, one pooled with ``mean`` and one with ``sum``, over two ``embedding_dim``, a
CSV with crosses (Wide&Deep's only: :func:`takes`) and a CSV with a history of ads pooled by target
attention against the candidate ad.

The raw rows of each test split are recovered from the raw files: prep's split is deterministic
(:class:`~ctr_volcano.data.prep.split.StratifiedSplit` over the labels in input order, one test
shard keeps that order), so row ``i`` of the raw test rows is row ``i`` of the prepped test split."""
from __future__ import annotations

import gzip
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ctr_model.feature_spec import FeatureSpec, criteo_spec, spec_from_dict
from ctr_model.features import RAW_COLUMNS
from ctr_volcano.app.cli.main import main as cli

__all__ = ["LAYOUTS", "FAMILIES", "Layout", "make_layout", "train_model", "TEST_FRACTION", "takes"]

_log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[1]
ROWS = 40_000
TEST_FRACTION = 0.2
SEED = 42                       # prep's default split seed

LAYOUTS: Dict[str, Optional[dict]] = {
    "criteo": None,
    "csv_no_dense": {"format": "csv", "header": True, "label": "clicked", "hash_buckets": 100003,
                     "embedding_dim": 6,
                     "categorical": [{"name": "user"}, {"name": "site"}, {"name": "ad"},
                                     {"name": "genres", "multivalued": True, "separator": "|",
                                      "pooling": "mean", "max_length": 6}]},
    "parquet_lists": {"format": "parquet", "label": "y", "hash_buckets": 100003,
                      "dense": [{"name": "price", "transform": "log1p"}, {"name": "age", "transform": "standardize"}],
                      "categorical": [{"name": "user", "embedding_dim": 8},
                                      {"name": "items", "multivalued": True, "pooling": "mean", "max_length": 8,
                                       "embedding_dim": 4},
                                      {"name": "tags", "multivalued": True, "pooling": "sum", "max_length": 5,
                                       "embedding_dim": 8},
                                      {"name": "site", "embedding_dim": 4}]},
    # Wide&Deep's crosses (its only family): pairwise and three-way, planted by gen-data
    "csv_crosses": {"format": "csv", "header": True, "label": "clicked", "hash_buckets": 100003,
                    "embedding_dim": 4, "dense": [{"name": "price", "transform": "log1p"}],
                    "categorical": [{"name": "user"}, {"name": "site"}, {"name": "ad"},
                                    {"name": "genres", "multivalued": True, "separator": "|",
                                     "pooling": "mean", "max_length": 6}],
                    "crosses": [{"features": ["user", "ad"]},
                                {"features": ["site", "ad", "user"], "hash_buckets": 50021}]},
    # DIN's target attention: a history of ads (the same ids as the candidate ad), every family
    "csv_history": {"format": "csv", "header": True, "label": "clicked", "hash_buckets": 100003,
                    "embedding_dim": 4, "dense": [{"name": "price", "transform": "log1p"}],
                    "categorical": [{"name": "user"}, {"name": "ad"},
                                    {"name": "seen_ads", "multivalued": True, "separator": "|",
                                     "pooling": "attention", "query": "ad", "max_length": 6}]},
}
#: (family, model_config per layout): DCN-v2 full-rank on Criteo, low-rank on the others.
FAMILIES: List[Tuple[str, Dict[str, dict]]] = [
    ("dnn", {}), ("wide_deep", {}), ("deepfm", {}),
    ("dcn_v2", {"criteo": {"cross_layers": 2, "low_rank": 0}, "csv_no_dense": {"low_rank": 8},
                "parquet_lists": {"low_rank": 8}, "csv_history": {"low_rank": 8}}),
]


def takes(layout: str, model: str) -> bool:
    """Whether family ``model`` trains layout ``layout`` (crosses: Wide&Deep only)."""
    from ctr_model.spec_crosses import CROSS_FAMILIES

    return not (LAYOUTS[layout] or {}).get("crosses") or model in CROSS_FAMILIES


@dataclass
class Layout:
    """A prepped layout and the raw rows of its test split.

    Attributes:
        spec: the spec as prep wrote it (standardize statistics filled in); the preset for Criteo.
        prep: the prep output directory (``train/``, ``test/``).
        raw: the test split's raw rows, column by column, as the file has them (text for Criteo and
            CSV; Parquet's values).
        label: the raw label column's name.
    """

    name: str
    spec: FeatureSpec
    prep: str
    raw: Dict[str, list]
    label: str


def _prep(spec_file: Optional[Path], raw: Path, out: Path) -> dict:
    args = ["prep", "--input", str(raw), "--out", str(out), "--shards", "2", "--test-shards", "1",
            "--test-fraction", str(TEST_FRACTION), "--seed", str(SEED)]
    if spec_file is not None:
        args += ["--feature-spec", str(spec_file)]
    else:
        args += ["--hash-buckets", "100003"]
    assert cli(args) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_rejected"] == 0, stats          # else the replayed split would not line up
    return stats


def _test_rows(labels: np.ndarray) -> np.ndarray:
    from ctr_volcano.data.prep.split import StratifiedSplit

    return StratifiedSplit(SEED, TEST_FRACTION).is_test(labels)


def _criteo(root: Path, sample_dir: Path) -> Tuple[Path, Dict[str, list]]:
    raw = root / "raw.tsv"
    lines: List[List[str]] = []
    with gzip.open(sample_dir / "part-00000.tsv.gz", "rt", encoding="utf-8") as fh, open(raw, "w") as out:
        for line in fh:
            out.write(line)
            lines.append(line.rstrip("\n").split("\t"))
            if len(lines) == ROWS:
                break
    return raw, {name: [r[j] for r in lines] for j, name in enumerate(RAW_COLUMNS)}


def _file_columns(spec: FeatureSpec, raw_dir: Path) -> Dict[str, list]:
    """Every column of the generated file: text for CSV (empty fields as ""), values for Parquet."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    (path,) = [raw_dir / n for n in os.listdir(raw_dir) if n.startswith("part-")]
    if spec.format == "parquet":
        return pq.read_table(path).to_pydict()
    names = pacsv.read_csv(path).column_names
    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False))
    return table.to_pydict()


def make_layout(name: str, root: Path, sample_dir: Path) -> Layout:
    """Generate (or cut), prep and recover the raw test rows of layout ``name``."""
    doc = LAYOUTS[name]
    root.mkdir(parents=True, exist_ok=True)
    if doc is None:
        raw, columns = _criteo(root, sample_dir)
        spec_file, label = None, "label"
    else:
        spec_file = root / "spec.json"
        spec_file.write_text(json.dumps(doc))
        raw = root / "raw"
        assert cli(["gen-data", "--feature-spec", str(spec_file), "--rows", str(ROWS), "--seed", "5",
                    "--out", str(raw), "--oracle-rows", "2000"]) == 0
        columns, label = _file_columns(spec_from_dict(doc), raw), doc["label"]
    _prep(spec_file, raw, root / "prep")
    schema = json.loads((root / "prep" / "test" / "schema.json").read_text())
    spec = spec_from_dict(schema["feature_spec"]) if doc is not None else criteo_spec(100003)
    mask = _test_rows(np.array([int(float(v)) for v in columns[label]]))
    raw_test = {c: [v for v, m in zip(values, mask) if m] for c, values in columns.items()}
    assert len(raw_test[label]) == schema["rows"], (len(raw_test[label]), schema["rows"])
    return Layout(name, spec, str(root / "prep"), raw_test, label)


def _one_dim(layout: Layout, root: Path) -> str:
    """The layout prepped again with one ``embedding_dim`` for every feature (DeepFM's condition)."""
    doc = json.loads(json.dumps(LAYOUTS[layout.name]))
    for c in doc["categorical"]:
        c["embedding_dim"] = 4
    spec_file = root / "spec-one-dim.json"
    spec_file.write_text(json.dumps(doc))
    raw = Path(layout.prep).parent / "raw"
    _prep(spec_file, raw, root / "prep-one-dim")
    return str(root / "prep-one-dim")


def train_model(layout: Layout, model: str, model_config: dict, root: Path) -> Tuple[str, str]:
    """``(model directory, how it was made)``: a real 2x2 local gang, 1 epoch of the small model (a spec
    without dense features too: the network then has no dense input)."""
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL, gang_job_id

    prep = _one_dim(layout, root) if model == "deepfm" and layout.name == "parquet_lists" else layout.prep
    config = {**SMALL, "epochs": 1, "model": model, "model_config": model_config}
    jobs = gang_job_id(f"serve-{model}", grace_s=10, poll_s=0.2)
    job = next(jobs)
    try:
        result = train_local(prep, str(root / "model"), config, pservers=2, trainers=2, max_retry=0,
                             workdir=str(root / "w"), job_id=job, log=lambda m: None)
    finally:
        for _ in jobs:             # no process of the gang may be left
            pass
    return result.model_dir, f"trained: test AUC {result.metrics['test']['auc']:.4f}"


def raw_values(layout: Layout, start: int, stop: int) -> Dict[str, List[Any]]:
    """The raw test rows ``start:stop`` of every feature column."""
    names = [d.name for d in layout.spec.dense] + [c.name for c in layout.spec.categorical]
    return {n: layout.raw[n][start:stop] for n in names}
