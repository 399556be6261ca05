"""Benchmark: the KServe model server (a real process on loopback) against onnxruntime in process.

On one model (``--model``, an exported model with model.onnx; else one trained here on the committed
sample, 1 pserver x 1 trainer x 1 epoch) and the sample's raw rows:

* parity: the served probabilities of ``--parity-rows`` raw rows vs the numpy scorer on prep's
  transform of the same rows (max abs difference);
* latency: sequential V2 JSON requests of 1 and of 256 raw rows (p50, p99 in ms, client side:
  JSON encoding, HTTP, the transforms, onnxruntime, the answer);
* throughput: rows/s of 256-row requests from 4 concurrent clients;
* the floor: the same transforms + onnxruntime in this process (1 thread) for 1 and 256 rows;
  ``ratio_inprocess`` = server p50 at 1 row / in-process p50 at 1 row.

The server runs in the serving environment (``--python``; serving/requirements.txt). Last line:
``RESULT parity_max_abs=... p50_ms_1=... p99_ms_1=... p50_ms_256=... p99_ms_256=... rows_per_s=...
inproc_p50_ms_1=... inproc_p50_ms_256=... ratio_inprocess=...``.

Usage: ``python bench/serve.py --python /path/to/serving-venv/bin/python [--model DIR]``
"""
from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

_log = logging.getLogger("bench.serve")
REPO = Path(__file__).resolve().parents[1]


def _train(root: Path) -> Path:
    from ctr_volcano.app.cli import main as cli

    prep, model = root / "prep", root / "model"
    assert cli.main(["prep", "--input", str(REPO / "data" / "sample"), "--out", str(prep)]) == 0
    assert cli.main(["train", "--data", str(prep), "--model-out", str(model), "--pservers", "1",
                     "--trainers", "1", "--epochs", "1", "--workdir", str(root / "work")]) == 0
    return model


def _raw_rows(limit: int) -> List[List[str]]:
    import gzip

    rows: List[List[str]] = []
    for path in sorted((REPO / "data" / "sample").glob("part-*.tsv.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rows += [line.rstrip("\n").split("\t") for line in fh]
    return rows[:limit]


def _percentiles(times: List[float]) -> Dict[str, float]:
    ms = np.array(times) * 1000.0
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))}


def _timed(fn: Callable[[], object], n: int) -> List[float]:
    fn()                                            # warm-up
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _poster(url: str, body: dict) -> Callable[[], object]:
    data = json.dumps(body).encode()

    def post() -> object:
        req = urllib.request.Request(f"{url}/v2/models/ctr/infer", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read()
    return post


def _throughput(post: Callable[[], object], rows_per_request: int, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        while time.perf_counter() < stop:
            post()
            done[i] += rows_per_request
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(done) / (time.perf_counter() - t)


def _in_process(model: Path, rows: List[List[str]], buckets: int, n: int) -> Dict[str, float]:
    import onnxruntime as ort

    from ctr_volcano.serving.raw import RAW_INPUTS, model_inputs
    from tools.v2_client import rows_to_body

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model / "model.onnx"), sess_options=opts)
    out = {}
    for size in (1, 256):
        body = rows_to_body(rows[:size])
        cols = {i["name"]: (i["datatype"], np.array(i["data"], dtype=object)) for i in body["inputs"]}
        assert list(cols) == list(RAW_INPUTS)

        def run() -> object:
            dense, ids = model_inputs(cols, buckets)
            return session.run(["probability"], {"dense": dense, "ids": ids})
        out[f"inproc_p50_ms_{size}"] = _percentiles(_timed(run, n))["p50"]
    return out


def _parity(url: str, model: Path, rows: List[List[str]], buckets: int) -> float:
    from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS, transform_line
    from ctr_model.infer import load_model
    from tools.v2_client import infer, rows_to_body

    served = np.concatenate([infer(url, rows_to_body(rows[i:i + 5000]))[0] for i in range(0, len(rows), 5000)])
    parsed = [transform_line("\t".join(r), buckets) for r in rows]
    cols = {c: np.array([p[1][i] for p in parsed], dtype=np.float32) for i, c in enumerate(DENSE_COLUMNS)}
    cols.update({c: np.array([p[2][i] for p in parsed], dtype=np.int64) for i, c in enumerate(SPARSE_COLUMNS)})
    return float(np.abs(served - load_model(str(model)).predict(cols)).max())


def _measure(args: argparse.Namespace, model: Path, log: Path) -> Dict[str, float]:
    from ctr_model.onnx_export import read_manifest
    from tools.model_server import model_server
    from tools.v2_client import rows_to_body

    buckets = int(read_manifest(str(model))["hash_buckets"])
    rows = _raw_rows(max(args.parity_rows, 256))
    res: Dict[str, float] = {}
    with model_server(args.python, str(model), log) as url:
        res["parity_max_abs"] = _parity(url, model, rows[:args.parity_rows], buckets)
        for size, n in ((1, args.requests), (256, max(args.requests // 4, 20))):
            p = _percentiles(_timed(_poster(url, rows_to_body(rows[:size])), n))
            res[f"p50_ms_{size}"], res[f"p99_ms_{size}"] = p["p50"], p["p99"]
        res["rows_per_s"] = _throughput(_poster(url, rows_to_body(rows[:256])), 256, 4, args.seconds)
    res.update(_in_process(model, rows, buckets, args.requests))
    res["ratio_inprocess"] = res["p50_ms_1"] / res["inproc_p50_ms_1"]
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", required=True, help="the serving environment's interpreter")
    parser.add_argument("--model", default=None, help="exported model dir with model.onnx (default: train one)")
    parser.add_argument("--parity-rows", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=400, help="sequential requests at 1 row (256 rows: 1/4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the 4-client throughput run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="ctr_bench_serve_") as tmp:
        model = Path(args.model) if args.model else _train(Path(tmp))
        res = _measure(args, model, Path(tmp) / "server.log")
    print("RESULT " + " ".join(f"{k}={v:.3g}" if k != "rows_per_s" else f"{k}={v:.0f}"
                               for k, v in res.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
