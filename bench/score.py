"""Benchmark: ``ctr-volcano score`` against prep on the same file and against onnxruntime alone.

On an Avazu-like CSV of candidates (a header, a string ``id``, seven string categories, no numeric
column, no label; prep reads the same rows with their ``click`` label) and a model of that spec with random parameters over the ids
of a sample (scoring costs the same whatever the parameters), each measured in a fresh process so
each has its own peak memory (the process tree's, workers included):

* ``score_rows_per_s_1`` / ``_2``: ``ctr-volcano score --keep id --workers 1|2`` (start-up included);
* ``prep_rows_per_s``: ``ctr-volcano prep --feature-spec`` on the same file (one process);
  ``ratio_prep_1`` = score at 1 worker / prep (goal >= 0.8: the model must not cost more than the
  parsing);
* ``ort_rows_per_s``: onnxruntime alone (1 thread) on the prepped arrays of the same rows, in
  batches as the scorer's: the model's floor; ``ratio_ort_1`` = score at 1 worker / that;
* ``peak_rss_mb_small`` / ``_large``: scoring at 1 worker on ``--rows`` and ``--rows-large`` rows;
  ``ratio_rss`` = large / small (goal <= 1.2: memory independent of the input's size).

Run it alone on a quiet machine (it is CPU-bound). Last line:
``RESULT rows=... score_rows_per_s_1=... score_rows_per_s_2=... prep_rows_per_s=... ratio_prep_1=...
ort_rows_per_s=... ratio_ort_1=... peak_rss_mb_small=... peak_rss_mb_large=... ratio_rss=...``.

Usage: ``python bench/score.py [--rows 1000000] [--rows-large 10000000] [--workdir DIR]``
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))   # bench/prep.py imports its siblings by name

from prep import _run_argv_rss  # noqa: E402

_log = logging.getLogger("bench.score")
CLI = [sys.executable, "-m", "ctr_volcano.app.cli.main"]
SPEC = {"format": "csv", "header": True, "label": "click", "hash_buckets": 1000003, "embedding_dim": 8,
        "ignore": ["id"], "categorical": [{"name": n} for n in ("hour", "banner_pos", "site_id", "site_domain",
                                                                 "app_category", "device_model", "C14")]}
POOLS = {"hour": 240, "banner_pos": 7, "site_id": 4000, "site_domain": 3000, "app_category": 30,
         "device_model": 8000, "C14": 2500}
CHUNK = 200_000


def _chunk(rng: np.random.Generator, n: int) -> Dict[str, np.ndarray]:
    """``n`` rows of every column (the label included)."""
    cols = {"id": rng.integers(10 ** 18, 10 ** 19, n, dtype=np.uint64).astype(str)}
    for name, size in POOLS.items():
        cols[name] = np.char.add(name[:2], rng.integers(0, size, n).astype(str))
    cols["click"] = (rng.random(n) < 0.17).astype(np.int8).astype(str)
    return cols


def write_day(path: Path, rows: int, seed: int = 1, label: bool = False) -> Path:
    """An Avazu-like CSV of ``rows`` rows, written a chunk at a time; candidates (no ``click``)
    unless ``label`` (prep's input: the same rows with their label)."""
    rng = np.random.default_rng(seed)
    names = [*POOLS, "click"] if label else list(POOLS)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(["id", *names]) + "\n")
        for start in range(0, rows, CHUNK):
            cols = _chunk(rng, min(CHUNK, rows - start))
            lines = cols["id"]
            for name in names:
                lines = np.char.add(np.char.add(lines, ","), cols[name])
            fh.write("\n".join(lines.tolist()) + "\n")
    return path


def make_model(root: Path) -> str:
    """A model of SPEC with random parameters over the ids of every pool value (exported ONNX)."""
    import pyarrow as pa

    from ctr_model.feature_spec import spec_from_dict
    from ctr_model.onnx_export import export_onnx
    from ctr_model.sparse_tables import sparse_tables
    from ctr_model.transforms import categorical_column
    from tests.onnx_models import random_scorer, write_model_dir

    spec = spec_from_dict(SPEC)
    keys = []
    for t in sparse_tables(spec, 8):
        ids = [categorical_column(spec, spec.categorical[s], pa.array(np.char.add(
            spec.categorical[s].name[:2], np.arange(POOLS[spec.categorical[s].name]).astype(str)).tolist()))
            for s in t.slots]
        keys.append(np.unique(np.concatenate(ids)))
    scorer = random_scorer(spec, "dnn", {}, keys=keys, seed=3, hash_buckets=SPEC["hash_buckets"])
    scorer.meta["feature_spec"] = spec.to_dict()
    model = write_model_dir(scorer, str(root / "model"))
    export_onnx(model)
    return model


_ORT = """
import sys, time, glob
import numpy as np, pyarrow.parquet as pq, onnxruntime as ort
from ctr_model.feature_spec import spec_from_dict
from ctr_model.onnx_inputs import feeds, layout_of
import json
spec = spec_from_dict(json.loads(open(sys.argv[2]).read()))
opts = ort.SessionOptions(); opts.intra_op_num_threads = 1; opts.inter_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1] + "/model.onnx", opts, providers=["CPUExecutionProvider"])
layout, rows, spent = layout_of(spec), 0, 0.0
for path in sorted(glob.glob(sys.argv[3] + "/*/part-*.parquet")):
    for batch in pq.ParquetFile(path).iter_batches(batch_size=16384):
        feed = feeds(layout, batch)
        t = time.perf_counter(); sess.run(["probability"], feed); spent += time.perf_counter() - t
        rows += batch.num_rows
print(rows, spent)
"""


def measure(work: Path, rows: int, rows_large: int) -> Dict[str, float]:
    spec_file = work / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    model = make_model(work)
    day = write_day(work / "day.csv", rows)
    labelled = write_day(work / "day-labelled.csv", rows, label=True)
    out: Dict[str, float] = {"rows": rows}
    for n in (1, 2):
        shutil.rmtree(work / "scores", ignore_errors=True)
        secs, _, rss = _run_argv_rss(CLI + ["score", "--model", model, "--input", str(day), "--out",
                                            str(work / "scores"), "--keep", "id", "--workers", str(n)])
        out[f"score_rows_per_s_{n}"] = rows / secs
        if n == 1:
            out["peak_rss_mb_small"] = rss
    shutil.rmtree(work / "prep", ignore_errors=True)
    secs, _, _ = _run_argv_rss(CLI + ["prep", "--feature-spec", str(spec_file), "--input", str(labelled), "--out",
                                      str(work / "prep"), "--test-fraction", "0.1", "--shards", "1"])
    out["prep_rows_per_s"] = rows / secs
    _, text, _ = _run_argv_rss([sys.executable, "-c", _ORT, model, str(spec_file), str(work / "prep")])
    done, spent = text.split()
    out["ort_rows_per_s"] = int(done) / float(spent)
    large = write_day(work / "day-large.csv", rows_large, seed=2)
    shutil.rmtree(work / "scores", ignore_errors=True)
    _, _, out["peak_rss_mb_large"] = _run_argv_rss(CLI + ["score", "--model", model, "--input", str(large),
                                                          "--out", str(work / "scores"), "--keep", "id"])
    out["ratio_prep_1"] = out["score_rows_per_s_1"] / out["prep_rows_per_s"]
    out["ratio_ort_1"] = out["score_rows_per_s_1"] / out["ort_rows_per_s"]
    out["ratio_rss"] = out["peak_rss_mb_large"] / out["peak_rss_mb_small"]
    return out


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-large", type=int, default=10_000_000)
    parser.add_argument("--workdir", default=None, help="kept when given (the inputs are large)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import tempfile

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-score-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = measure(work, args.rows, args.rows_large)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    keys = ["rows", "score_rows_per_s_1", "score_rows_per_s_2", "prep_rows_per_s", "ratio_prep_1",
            "ort_rows_per_s", "ratio_ort_1", "peak_rss_mb_small", "peak_rss_mb_large", "ratio_rss"]
    print("RESULT " + " ".join(f"{k}={result[k]:.4g}" if isinstance(result[k], float) else f"{k}={result[k]}"
                               for k in keys))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
