"""``read_sparse_table`` runs in trainer 0 at export, inside the trainer image (paddle, numpy,
pyarrow; no pandas): it must parse the pservers' text shards without pandas."""
from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap

import numpy as np

from ctr_model.infer import read_sparse_table


def _write_shards(model_dir, dim):
    rng = np.random.default_rng(0)
    expected = {}
    shard_dir = model_dir / "000"
    shard_dir.mkdir(parents=True)
    for part in range(2):
        lines = []
        for j in range(5):
            key = (1 << 63) + part * 100 + j          # above int64: must stay uint64
            vec = rng.normal(size=dim).astype(np.float32)
            expected[key] = vec
            # key slot unseen_days delta_score show click embed_w m v beta1pow beta2pow embedx_w...
            fields = [str(key), "1", "0", "0.5", "3", "1", repr(float(vec[0])), "0", "0", "0.9", "0.99"]
            fields += [repr(float(v)) for v in vec[1:]]
            lines.append(" ".join(fields))
        with gzip.open(shard_dir / f"part-{part:03d}.gz", "wt") as fh:
            fh.write("\n".join(lines) + "\n")
    with gzip.open(shard_dir / "part-999.gz", "wt") as fh:   # an empty shard of an idle pserver
        fh.write("")
    return expected


def test_sparse_table_parsed_exactly(tmp_path):
    expected = _write_shards(tmp_path, dim=4)
    keys, rows = read_sparse_table(str(tmp_path), 4)
    assert keys.dtype == np.uint64 and rows.dtype == np.float32
    assert list(keys) == sorted(expected)
    for k, row in zip(keys, rows):
        np.testing.assert_allclose(row, expected[int(k)], rtol=1e-6)


def test_sparse_table_needs_no_pandas(tmp_path):
    _write_shards(tmp_path, dim=3)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["pandas"] = None          # any 'import pandas' now raises ImportError
        from ctr_model.infer import write_sparse_npz
        print(write_sparse_npz({str(tmp_path)!r}, 3))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


def test_scorer_matches_a_float64_reference(tmp_path):
    """The scorer runs the network in float32 (as Paddle does) with unseen ids on a zero row; its
    probabilities match a plain float64 forward pass written out here."""
    import json

    import pyarrow as pa

    from ctr_model.features import DENSE_COLUMNS, SCHEMA_VERSION, SPARSE_COLUMNS
    from ctr_model.infer import load_model

    rng = np.random.default_rng(3)
    dim, sizes = 4, [16, 8]
    keys = np.sort(rng.choice(10_000, size=300, replace=False)).astype(np.uint64)
    rows = rng.normal(size=(300, dim)).astype(np.float32)
    np.savez(tmp_path / "sparse.npz", keys=keys, rows=rows)
    widths = [len(SPARSE_COLUMNS) * dim + len(DENSE_COLUMNS)] + sizes + [2]
    names = [f"fc{i}" for i in range(len(sizes))] + ["out"]
    arrays = {}
    for name, (a, b) in zip(names, zip(widths, widths[1:])):
        arrays[f"{name}.w"] = (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
        arrays[f"{name}.b"] = rng.normal(size=b).astype(np.float32) * 0.1
    np.savez(tmp_path / "dense.npz", **arrays)
    (tmp_path / "model_meta.json").write_text(json.dumps(
        {"schema_version": SCHEMA_VERSION, "hash_buckets": 10_000,
         "config": {"embedding_dim": dim, "fc_sizes": sizes}}))
    n = 500
    ids = rng.integers(0, 10_000, size=(n, len(SPARSE_COLUMNS)))   # about 3% of them seen
    dense = rng.random((n, len(DENSE_COLUMNS))).astype(np.float32)
    table = pa.table({**{c: dense[:, i] for i, c in enumerate(DENSE_COLUMNS)},
                      **{c: ids[:, i] for i, c in enumerate(SPARSE_COLUMNS)}})
    got = load_model(str(tmp_path)).predict(table)

    lookup = {int(k): r.astype(np.float64) for k, r in zip(keys, rows)}
    emb = np.array([[v for i in row for v in lookup.get(int(i), np.zeros(dim))] for row in ids])
    x = np.concatenate([emb, dense.astype(np.float64)], axis=1)
    for name in names[:-1]:
        x = np.maximum(x @ arrays[f"{name}.w"].astype(np.float64) + arrays[f"{name}.b"], 0.0)
    logits = x @ arrays["out.w"].astype(np.float64) + arrays["out.b"]
    want = 1.0 / (1.0 + np.exp(-(logits[:, 1] - logits[:, 0])))
    assert got.dtype == np.float64 and got.shape == (n,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.ptp(want) > 0.1                     # the check is not vacuous: predictions vary
