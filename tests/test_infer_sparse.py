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
