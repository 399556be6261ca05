"""An Avazu-like day of candidates for the scoring tests: a CSV with a header, a string ``id`` column
(20-digit ids, as Avazu's), string categories only (no numeric column), no label; and a model of that
spec with random parameters over the ids of the first two thirds of the rows (the rest are unseen)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np

from ctr_model.feature_spec import FeatureSpec, spec_from_dict

__all__ = ["SPEC", "COLUMNS", "candidates", "write_csv", "avazu_model"]

SPEC: Dict = {"format": "csv", "header": True, "label": "click", "hash_buckets": 100003, "embedding_dim": 4,
              "ignore": ["id"],
              "categorical": [{"name": n} for n in ("hour", "banner_pos", "site_id", "site_domain",
                                                    "app_category", "device_model", "C14")]}
COLUMNS = ["id", "hour", "banner_pos", "site_id", "site_domain", "app_category", "device_model", "C14"]


def candidates(rows: int, seed: int = 3) -> Dict[str, List[str]]:
    """``rows`` candidate impressions, column by column, as the CSV has them (some values empty)."""
    rng = np.random.default_rng(seed)
    hexes = lambda n, k: [f"{v:08x}" for v in rng.integers(0, 16 ** 8, k)][:n]  # noqa: E731
    pools = {"hour": [f"141021{h:02d}" for h in range(24)], "banner_pos": ["0", "1", "7"],
             "site_id": hexes(300, 300), "site_domain": hexes(200, 200), "app_category": hexes(30, 30),
             "device_model": hexes(500, 500), "C14": [str(v) for v in rng.integers(15000, 24000, 400)]}
    cols = {"id": [str(v) for v in rng.integers(10 ** 18, 10 ** 19, rows, dtype=np.uint64)]}
    for name, pool in pools.items():
        picks = rng.integers(0, len(pool), rows)
        cols[name] = ["" if rng.random() < 0.02 else pool[int(i)] for i in picks]
    return cols


def write_csv(path: Path, cols: Dict[str, List[str]], start: int = 0, stop: int = -1) -> Path:
    names = list(cols)
    n = len(cols[names[0]]) if stop < 0 else stop
    lines = [",".join(names)] + [",".join(cols[c][i] for c in names) for i in range(start, n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def avazu_model(root: Path, cols: Dict[str, List[str]], model: str = "dnn") -> str:
    """A model directory of SPEC (exported ONNX included) whose tables hold the ids of the first two
    thirds of ``cols``' rows."""
    import pyarrow as pa

    from ctr_model.onnx_export import export_onnx
    from ctr_model.sparse_tables import sparse_tables
    from ctr_model.transforms import categorical_column
    from tests.onnx_models import random_scorer, write_model_dir

    spec: FeatureSpec = spec_from_dict(SPEC)
    seen = len(cols["id"]) * 2 // 3
    keys = []
    for t in sparse_tables(spec, 4):
        ids = [categorical_column(spec, spec.categorical[s], pa.array(cols[spec.categorical[s].name][:seen]))
               for s in t.slots]
        keys.append(np.unique(np.concatenate(ids)))
    scorer = random_scorer(spec, model, {}, keys=keys, seed=11, hash_buckets=100003)
    scorer.meta["feature_spec"] = json.loads(json.dumps(spec.to_dict()))
    model_dir = write_model_dir(scorer, str(root / "model"))
    export_onnx(model_dir)
    return model_dir
