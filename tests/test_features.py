"""The shared transforms: dense normalisation, the stable categorical hash, split schema checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from ctr_model import features as F

VALUES = ["68fd1e64", "80e26c9b", "", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf",
          "DE7995B8", "de7995b8", "abc", "0123456789", "héllo", "a" * 300, "x", "\x00" * 8,
          "ffffffff", "00000000"]


def _documented_hash(value: bytes, j: int, buckets: int) -> int:
    """The algorithm exactly as written in ctr_model.features' docstring, transcribed again here."""
    m = (1 << 64) - 1

    def mix64(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    if not value:
        return j - 1
    if len(value) == 8:
        key = sum(b << (8 * i) for i, b in enumerate(value))
    else:
        key = 0xCBF29CE484222325
        for c in value:
            key = ((key ^ c) * 0x100000001B3) & m
    salt = mix64((0x6374725F766F6C63 + j) & m)
    return 26 + mix64(key ^ salt) % (buckets - 26)


def test_dense_transform_rules():
    out = F.dense_transform([None, float("nan"), -3, 0, 1, 10, 2 ** 40])
    assert out.dtype == np.float32
    expected = np.array([0, 0, 0, 0, np.log(2), np.log(11), np.log1p(2.0 ** 40)], dtype=np.float32)
    np.testing.assert_array_equal(out, expected)
    arrow = F.dense_transform(pa.array([None, -1, 5], type=pa.int64()))
    np.testing.assert_array_equal(arrow, np.array([0, 0, np.log(6)], dtype=np.float32))
    for text in ("", " 7 ", "-12", "123456789012"):
        x = int(text) if text.strip() else 0
        assert F.dense_value(text) == F.dense_transform([x])[0]
    for bad in ("abc", "1.5", "1e3"):
        with pytest.raises(F.BadRow, match="not an integer"):
            F.dense_value(bad)


@pytest.mark.parametrize("buckets", [27, 1000, F.DEFAULT_HASH_BUCKETS, 2 ** 40 + 7])
def test_hash_matches_the_documented_algorithm(buckets):
    for j in (1, 7, 26):
        ref = [F.hash_value(v, j, buckets) for v in VALUES]
        doc = [_documented_hash(v.encode("utf-8"), j, buckets) for v in VALUES]
        vec = F.hash_categorical(VALUES, f"C{j}", buckets).tolist()
        assert ref == doc == vec


def test_hash_vectorised_equals_reference_on_arrow_layouts():
    rng = np.random.default_rng(3)
    hexes = [f"{int(x):08x}" for x in rng.integers(0, 2 ** 32, 3000)]
    values = [("" if i % 5 == 0 else h) for i, h in enumerate(hexes)]
    ref = np.array([F.hash_value(v, 12) for v in values])
    for arr in (pa.array(values, pa.string()), pa.array([v.encode() for v in values], pa.binary()),
                pa.array(values, pa.large_string())):
        np.testing.assert_array_equal(F.hash_categorical(arr, 12), ref)
        np.testing.assert_array_equal(F.hash_categorical(arr.slice(17, 100), 12), ref[17:117])
    chunked = pa.chunked_array([pa.array(values[:1000]), pa.array(values[1000:] + ["odd-length"])])
    got = F.hash_categorical(chunked, 12)
    np.testing.assert_array_equal(got[:-1], ref)
    assert got[-1] == F.hash_value("odd-length", 12)
    with_nulls = pa.array(["68fd1e64", None, ""])
    assert F.hash_categorical(with_nulls, 3).tolist() == [F.hash_value("68fd1e64", 3), 2, 2]


def test_hash_range_reserved_empty_ids_and_column_salts():
    rng = np.random.default_rng(4)
    values = [f"{int(x):08x}" for x in rng.integers(0, 2 ** 32, 20000)]
    buckets = 1009
    per_col = []
    for j in range(1, F.NUM_SPARSE + 1):
        ids = F.hash_categorical(values, j, buckets)
        assert ids.dtype == np.int64
        assert ids.min() >= F.NUM_SPARSE and ids.max() < buckets
        assert F.hash_value("", j, buckets) == j - 1 and F.hash_value(None, j, buckets) == j - 1
        per_col.append(ids)
        # buckets are used evenly: no bucket gets more than 3x its fair share
        counts = np.bincount(ids, minlength=buckets)[F.NUM_SPARSE:]
        assert counts.max() < 3 * len(values) / (buckets - F.NUM_SPARSE)
    # the same value lands on different ids in different columns (salted per column)
    same = np.mean(per_col[0] == per_col[1])
    assert same < 0.01


def test_hash_golden_ids():
    """Pinned ids: changing them silently would invalidate every trained model's embeddings."""
    assert F.hash_value("68fd1e64", "C1") == F.hash_categorical(["68fd1e64"], 1)[0]
    golden = {(v, j): F.hash_value(v, j) for v in ("68fd1e64", "80e26c9b", "abc") for j in (1, 26)}
    assert golden == {("68fd1e64", 1): 833707, ("68fd1e64", 26): 980459, ("80e26c9b", 1): 490110,
                      ("80e26c9b", 26): 242474, ("abc", 1): 674932, ("abc", 26): 242272}


def test_hash_identical_across_processes_with_different_pythonhashseed():
    code = ("import json, sys\nfrom ctr_model import features as F\n"
            "vals = json.loads(sys.argv[1])\n"
            "print(json.dumps({'vec': [F.hash_categorical(vals, j).tolist() for j in (1, 9, 26)],"
            " 'ref': [[F.hash_value(v, j) for v in vals] for j in (1, 9, 26)],"
            " 'builtin': hash('68fd1e64')}))\n")
    results = []
    for seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(VALUES)], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        results.append(json.loads(proc.stdout))
    assert results[0]["builtin"] != results[1]["builtin"]  # the salt really differed
    assert results[0]["vec"] == results[1]["vec"] == results[0]["ref"] == results[1]["ref"]
    here = [F.hash_categorical(VALUES, j).tolist() for j in (1, 9, 26)]
    assert here == results[0]["vec"]


def test_hash_buckets_validation():
    for bad in (0, 26, -5, 1.5, True):
        with pytest.raises(ValueError, match="hash_buckets"):
            F.hash_value("68fd1e64", 1, bad)
    with pytest.raises(ValueError, match="column"):
        F.hash_value("68fd1e64", "C27")


def test_transform_line_kaggle_format():
    line = ("1\t0\t-1\t\t2\t1457\t\t1\t11\t\t1\t0\t\t2\t05db9164\t38a947a1\t\t\t25c83c98\t"
            "7e0ccccf\t3f4ec687\t0b153874\ta73ee510\t3b08e48b\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n")
    label, dense, sparse = F.transform_line(line)
    assert label == 1 and dense.dtype == np.float32 and sparse.dtype == np.int64
    assert dense[1] == 0.0 and dense[2] == 0.0 and dense[4] == np.float32(np.log1p(1457))
    assert sparse[0] == F.hash_value("05db9164", 1)
    assert sparse[2] == 2 and sparse[25] == 25  # empty -> reserved per-column ids
    with pytest.raises(F.BadRow, match="wrong field count"):
        F.transform_line("1\t2\t3")
    with pytest.raises(F.BadRow, match="label"):
        F.transform_line("2" + line[1:])
    with pytest.raises(F.BadRow, match="I3"):
        F.transform_line(line.replace("\t-1\t\t", "\t-1\tabc\t", 1))


def _write_split(tmp_path, doc, shards=True):
    d = tmp_path / "train"
    d.mkdir()
    (d / F.SCHEMA_FILE).write_text(json.dumps(doc))
    if shards:
        (d / "part-00000.parquet").write_bytes(b"")
    return d


def test_check_split_schema_accepts_matching_data(tmp_path):
    doc = {"schema_version": F.SCHEMA_VERSION, "hash_buckets": 1000, "columns": list(F.RAW_COLUMNS),
           "rows": 3}
    d = _write_split(tmp_path, doc)
    assert F.check_split_schema(str(d), expected_buckets=1000) == doc
    assert F.read_split_schema(str(d)) == doc
    assert F.shard_files(str(d)) == [str(d / "part-00000.parquet")]


@pytest.mark.parametrize("change, expected_buckets, needle", [
    ({"schema_version": 0}, None, "schema_version 0 found, this code expects 1"),
    ({"columns": ["label"]}, None, "columns"),
    ({}, 77, "hash_buckets 1000 found, expected 77"),
])
def test_check_split_schema_refuses_mismatches(tmp_path, change, expected_buckets, needle):
    doc = {"schema_version": F.SCHEMA_VERSION, "hash_buckets": 1000, "columns": list(F.RAW_COLUMNS),
           "rows": 3, **change}
    d = _write_split(tmp_path, doc)
    with pytest.raises(F.SchemaMismatch) as err:
        F.check_split_schema(str(d), expected_buckets=expected_buckets)
    msg = str(err.value)
    assert needle in msg and str(d) in msg and "prep" in msg


def test_check_split_schema_missing_file_and_missing_shards(tmp_path):
    with pytest.raises(F.SchemaMismatch, match="no schema.json.*ctr-volcano prep"):
        F.check_split_schema(str(tmp_path))
    doc = {"schema_version": F.SCHEMA_VERSION, "hash_buckets": 1000, "columns": list(F.RAW_COLUMNS),
           "rows": 0}
    d = _write_split(tmp_path, doc, shards=False)
    with pytest.raises(F.SchemaMismatch, match="no part-"):
        F.check_split_schema(str(d))
    assert issubclass(F.SchemaMismatch, ValueError)
