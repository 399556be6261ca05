"""Benchmark: the KServe model server (a real process on loopback) against onnxruntime in process.

On one model and raw rows in its feature spec's layout -- by default a DeepFM trained here (1
pserver x 1 trainer, 1 epoch) on a generated CSV log with three dense columns, three single-valued
and two multi-valued features (``|``-separated, pooled with ``mean`` and ``sum``); or ``--model DIR``
with ``--raw FILE`` in that model's layout (a Criteo model reads the committed sample):

* parity: the served probabilities of ``--parity-rows`` raw rows vs the numpy scorer on the
  transforms' reference forms of the same rows (max abs difference);
* latency: sequential V2 JSON requests of 1 and of 256 raw rows over a kept-alive connection (p50,
  p99 in ms, client side: JSON encoding, HTTP, the transforms, onnxruntime, the answer);
* throughput: rows/s of 256-row requests from 4 concurrent clients;
* the floor: the same transforms + onnxruntime in this process (1 thread) for 1 and 256 rows;
  ``ratio_inprocess`` = server p50 at 1 row / in-process p50 at 1 row;
* the baseline: the same 1-row request left to KServe's own infer route (sent with the binary
  extension's header over the same JSON body), as every request was before the server's JSON route;
  ``ratio_kserve_route`` = server p50 at 1 row / that p50.

The server runs in this environment (the serve extra). Last line:
``RESULT family=... parity_max_abs=... p50_ms_1=... p99_ms_1=... p50_ms_256=... p99_ms_256=...
kserve_route_p50_ms_1=... rows_per_s=... inproc_p50_ms_1=... inproc_p50_ms_256=... ratio_inprocess=...
ratio_kserve_route=...``.

Usage: ``python bench/serve.py [--model DIR --raw FILE] [--rows N]``
"""
from __future__ import annotations

import argparse
import http.client
import json
import logging
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

_log = logging.getLogger("bench.serve")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))   # tools/ (the model server and the V2 client the tests use too)

#: DeepFM's features share one embedding_dim; two list features, one mean- and one sum-pooled.
SPEC = {"format": "csv", "header": True, "label": "clicked", "hash_buckets": 1000003, "embedding_dim": 8,
        "dense": [{"name": "price", "transform": "log1p"}, {"name": "age", "transform": "standardize"},
                  {"name": "visits", "transform": "criteo"}],
        "categorical": [{"name": "user"}, {"name": "site"}, {"name": "ad"},
                        {"name": "items", "multivalued": True, "separator": "|", "pooling": "mean",
                         "max_length": 16},
                        {"name": "tags", "multivalued": True, "separator": "|", "pooling": "sum",
                         "max_length": 8}]}


def _train(root: Path, rows: int) -> tuple:
    """(model dir, raw file) of a DeepFM trained on a generated log of ``SPEC``."""
    from ctr_volcano.app.cli import main as cli

    spec, raw, prep, model = root / "spec.json", root / "raw", root / "prep", root / "model"
    spec.write_text(json.dumps(SPEC))
    assert cli.main(["gen-data", "--feature-spec", str(spec), "--rows", str(rows), "--seed", "7",
                     "--out", str(raw), "--oracle-rows", "2000"]) == 0
    assert cli.main(["prep", "--feature-spec", str(spec), "--input", str(raw), "--out", str(prep)]) == 0
    assert cli.main(["train", "--data", str(prep), "--model-out", str(model), "--pservers", "1",
                     "--trainers", "1", "--epochs", "1", "--model", "deepfm", "--workdir", str(root / "work")]) == 0
    return model, next(raw.glob("part-*"))


def _raw_columns(spec: Any, path: Optional[Path], limit: int) -> Dict[str, List[Any]]:
    """The first ``limit`` raw rows of ``path`` (Criteo: the committed sample), column by column,
    as the file has them: text for Criteo/CSV/TSV (empty fields ""), values for Parquet."""
    import gzip

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    names = [d.name for d in spec.dense] + [c.name for c in spec.categorical]
    if spec.is_criteo:
        rows: List[List[str]] = []
        for part in sorted((REPO / "data" / "sample").glob("part-*.tsv.gz")) if path is None else [path]:
            with gzip.open(part, "rt", encoding="utf-8") if str(part).endswith(".gz") else open(part) as fh:
                rows += [line.rstrip("\n").split("\t") for _, line in zip(range(limit - len(rows)), fh)]
        return {name: [r[1 + j] for r in rows] for j, name in enumerate(names)}
    assert path is not None, "--raw FILE: raw rows in the model's feature spec's layout"
    if spec.format == "parquet":
        return {n: v[:limit] for n, v in pq.read_table(path, columns=names).to_pydict().items()}
    read = pacsv.ReadOptions(column_names=None if spec.header else list(spec.columns))
    parse = pacsv.ParseOptions(delimiter=spec.delimiter)
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, include_columns=names,
                                   strings_can_be_null=False)
    table = pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    return {n: v[:limit] for n, v in table.to_pydict().items()}


def _expected(scorer: Any, spec: Any, values: Dict[str, List[Any]]) -> np.ndarray:
    """The numpy scorer on the transforms' per-value reference forms of raw values."""
    import pyarrow as pa

    from ctr_model.transforms import categorical_ids, dense_value

    cols: Dict[str, Any] = {d.name: np.array([dense_value(d, v) for v in values[d.name]], np.float32)
                            for d in spec.dense}
    for c in spec.categorical:
        ids = [categorical_ids(spec, c, v) for v in values[c.name]]
        cols[c.name] = pa.array(ids, pa.list_(pa.int64())) if c.multivalued else np.array([i[0] for i in ids])
    return scorer.predict(cols if spec.is_criteo else pa.table(cols))


def _rows(values: Dict[str, List[Any]], start: int, stop: int) -> Dict[str, List[Any]]:
    return {k: v[start:stop] for k, v in values.items()}


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


def _poster(url: str, body: dict, kserve_route: bool = False) -> Callable[[], object]:
    """A POST of ``body`` over a kept-alive connection per calling thread, as a client library's
    session does (a new TCP connection per request would time urllib's set-up and the handshake).
    ``kserve_route``: with the binary extension's header over the same JSON body (no binary part),
    which the server leaves to KServe's own route (:mod:`ctr_volcano.serving.json_infer`)."""
    data = json.dumps(body).encode()
    parts = urllib.parse.urlsplit(url)
    local = threading.local()
    headers = {"Content-Type": "application/json"}
    if kserve_route:
        headers["Inference-Header-Content-Length"] = str(len(data))

    def post() -> object:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        local.conn.request("POST", "/v2/models/ctr/infer", body=data, headers=headers)
        resp = local.conn.getresponse()
        out = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {out[:200]!r}")
        return out
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


def _in_process(model: Path, spec: Any, values: Dict[str, List[Any]], n: int) -> Dict[str, float]:
    from ctr_model.onnx_export import servable
    from ctr_volcano.serving.kserve_model import session
    from ctr_volcano.serving.raw import model_inputs
    from tools.v2_client import raw_to_body

    sess = session(servable(str(model))[1])
    out = {}
    for size in (1, 256):
        body = raw_to_body(_rows(values, 0, size))
        cols = {i["name"]: (i["datatype"], np.array(i["data"], dtype=object)) for i in body["inputs"]}

        def run() -> object:
            return sess.run(["probability"], model_inputs(spec, cols))
        out[f"inproc_p50_ms_{size}"] = _percentiles(_timed(run, n))["p50"]
    return out


def _measure(args: argparse.Namespace, model: Path, raw: Optional[Path], log: Path) -> Dict[str, Any]:
    from ctr_model.infer import load_model
    from ctr_model.onnx_export import servable
    from ctr_volcano.serving.raw import request_spec
    from tools.model_server import model_server
    from tools.v2_client import infer, raw_to_body

    spec = request_spec(servable(str(model))[0])
    values = _raw_columns(spec, raw, max(args.parity_rows, 256))
    n = len(next(iter(values.values())))
    res: Dict[str, Any] = {"family": load_model(str(model)).config.model}
    with model_server(args.python, str(model), log) as url:
        served = np.concatenate([infer(url, raw_to_body(_rows(values, i, i + 5000)))[0] for i in range(0, n, 5000)])
        res["parity_max_abs"] = float(np.abs(served - _expected(load_model(str(model)), spec, values)).max())
        for size, count in ((1, args.requests), (256, max(args.requests // 4, 20))):
            p = _percentiles(_timed(_poster(url, raw_to_body(_rows(values, 0, size))), count))
            res[f"p50_ms_{size}"], res[f"p99_ms_{size}"] = p["p50"], p["p99"]
        kserve = _percentiles(_timed(_poster(url, raw_to_body(_rows(values, 0, 1)), kserve_route=True), args.requests))
        res["kserve_route_p50_ms_1"] = kserve["p50"]
        res["rows_per_s"] = _throughput(_poster(url, raw_to_body(_rows(values, 0, 256))), 256, 4, args.seconds)
    res.update(_in_process(model, spec, values, args.requests))
    res["ratio_inprocess"] = res["p50_ms_1"] / res["inproc_p50_ms_1"]
    res["ratio_kserve_route"] = res["p50_ms_1"] / res["kserve_route_p50_ms_1"]
    return res


def _format(key: str, value: Any) -> str:
    if isinstance(value, str):
        return f"{key}={value}"
    return f"{key}={value:.0f}" if key == "rows_per_s" else f"{key}={value:.3g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the server's interpreter (default: this one)")
    parser.add_argument("--model", default=None, help="exported model dir (default: train a DeepFM here)")
    parser.add_argument("--raw", default=None, help="with --model: raw rows in its layout (a Criteo model: the sample)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the generated log the DeepFM trains on")
    parser.add_argument("--parity-rows", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=400, help="sequential requests at 1 row (256 rows: 1/4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the 4-client throughput run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="ctr_bench_serve_") as tmp:
        if args.model:
            model, raw = Path(args.model), (Path(args.raw) if args.raw else None)
        else:
            model, raw = _train(Path(tmp), args.rows)
        res = _measure(args, model, raw, Path(tmp) / "server.log")
    print("RESULT " + " ".join(_format(k, v) for k, v in res.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
