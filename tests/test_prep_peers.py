"""The benchmark's peers (polars, duckdb) agree with our prep row for row, and the check can fail.

``bench/prep.py`` compares ours with each peer on a sample of a >= 1 GB file; this runs the same
peers and the same check on a few thousand rows, so neither can rot between benchmark runs. Both
engines express prep's label-stratified split natively (polars with a running sum of the labels,
duckdb with a window partitioned by label), so the check compares every row of both splits.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.prep_peers import compare_outputs, duckdb_prep, polars_prep, split_files
from ctr_model.features import hash_value
from ctr_volcano.data import synthetic as datagen
from ctr_volcano.data.prep import PrepConfig, prep

BUCKETS = 5003

# Valid Criteo lines the generator does not write: negatives, empty fields, trailing empties.
EDGE_LINES = [
    "1\t\t-1\t\t\t12\t\t0\t0\t0\t\t0\t\t\t05db9164\t38a947a1\t\t\t25c83c98\t7e0ccccf\t"
    "3f4ec687\t0b153874\ta73ee510\t3b08e48b\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "0\t\t-2\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "1\t0\t-3\t9223372036854775807\t1\t4\t1\t1\t1\t1\t0\t1\t0\t1\t8cf07265\t\t\t\t\t\t\t"
    "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
]


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
    """3,000 generated lines with the edge lines spread through them (one plain TSV file)."""
    d = tmp_path_factory.mktemp("raw")
    datagen.generate(str(d), rows=3000, seed=5, oracle_rows=20_000)
    path = str(d / "part-00000.tsv")
    with open(path) as fh:
        lines = fh.read().splitlines()
    for k, line in enumerate(EDGE_LINES):
        lines.insert(500 + 900 * k, line)
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def ours(criteo_file, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ours"))
    # 64 KiB blocks: the split's per-label counts carry across ~7 blocks, as on a large input.
    stats = prep([criteo_file], out, PrepConfig(hash_buckets=BUCKETS, seed=7, test_fraction=0.2,
                                                block_bytes=1 << 16))
    assert stats["rows_rejected"] == 0 and stats["rows_test"] > 400
    assert os.path.getsize(criteo_file) > 6 * (1 << 16)
    return out


@pytest.mark.parametrize("peer", [polars_prep, duckdb_prep], ids=["polars", "duckdb"])
def test_peer_agrees_with_ours_on_every_row(peer, criteo_file, ours, tmp_path):
    out = str(tmp_path / "peer")
    peer([criteo_file], out, BUCKETS, seed=7, test_fraction=0.2)
    check = compare_outputs(ours, out, sample_mod=1)
    assert check["problems"] == []
    assert check["ok"] and check["rows_checked"] == 3000 + len(EDGE_LINES)
    sampled = compare_outputs(ours, out, sample_mod=8)  # the bench's sampled form
    assert sampled["ok"] and 0 < sampled["rows_checked"] < 3000


def test_check_catches_one_float_one_ulp_off(criteo_file, ours, tmp_path):
    out = str(tmp_path / "peer")
    polars_prep([criteo_file], out, BUCKETS, seed=7, test_fraction=0.2)
    path = split_files(os.path.join(out, "train"))[0]
    table = pq.read_table(path)
    i5 = table.column("I5").to_numpy().copy()
    i5[1234] = np.nextafter(i5[1234], np.float32(np.inf))
    pq.write_table(table.set_column(table.schema.get_field_index("I5"), "I5", [i5]), path)
    check = compare_outputs(ours, out, sample_mod=1)
    assert not check["ok"]
    assert any("column I5 differs in 1 of" in p for p in check["problems"]), check["problems"]


def test_check_catches_another_split_or_bucket_count(criteo_file, ours, tmp_path):
    # Another seed: the stratified split keeps each split's size (to a row per label), so the check
    # must see that other rows went to test, by their values.
    polars_prep([criteo_file], str(tmp_path / "seed"), BUCKETS, seed=8, test_fraction=0.2)
    check = compare_outputs(ours, str(tmp_path / "seed"))
    assert not check["ok"]
    assert any(p.startswith("train: column") and "differs" in p for p in check["problems"]), \
        check["problems"]
    duckdb_prep([criteo_file], str(tmp_path / "fraction"), BUCKETS, seed=7, test_fraction=0.25)
    check = compare_outputs(ours, str(tmp_path / "fraction"))
    assert not check["ok"] and any("rows in ours" in p for p in check["problems"])
    duckdb_prep([criteo_file], str(tmp_path / "buckets"), BUCKETS + 2, seed=7, test_fraction=0.2)
    check = compare_outputs(ours, str(tmp_path / "buckets"))
    assert not check["ok"] and any("differs" in p for p in check["problems"])


def test_values_not_8_bytes_duckdb_hashes_them_polars_leaves_null(tmp_path):
    """The spec's FNV-1a branch: duckdb expresses it; polars cannot, and writes null, not a wrong
    id (the documented limit of the polars peer, which the agreement check then reports)."""
    odd = ["abc", "0a1b2c3d4e", "h\u00e9llo", "x"]
    fields = ["1"] + ["3"] * 13 + [odd[j % len(odd)] for j in range(26)]
    raw = tmp_path / "odd.tsv"
    raw.write_text(("\t".join(fields) + "\n") * 40)
    ours_dir, duck_dir, pol_dir = (str(tmp_path / n) for n in ("ours", "duck", "pol"))
    prep([str(raw)], ours_dir, PrepConfig(hash_buckets=BUCKETS, seed=7, test_fraction=0.2))
    duckdb_prep([str(raw)], duck_dir, BUCKETS, seed=7, test_fraction=0.2)
    assert compare_outputs(ours_dir, duck_dir)["ok"]
    row = pq.read_table(split_files(os.path.join(duck_dir, "train"))[0]).slice(0, 1).to_pylist()[0]
    assert row["C3"] == hash_value(odd[2], 3, BUCKETS)
    polars_prep([str(raw)], pol_dir, BUCKETS, seed=7, test_fraction=0.2)
    assert pq.read_table(split_files(os.path.join(pol_dir, "train"))[0]).column("C1").null_count
    assert not compare_outputs(ours_dir, pol_dir)["ok"]
