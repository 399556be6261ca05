"""Prep by a feature spec: CSV with a header, TSV without one (gzip), Parquet with a list column;
every row accounted for by reason; values equal the reference transforms; the Criteo preset's
tables are today's (a pinned digest of the committed sample's prep)."""
from __future__ import annotations

import gzip
import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model import features as F
from ctr_model.feature_spec import criteo_spec, spec_from_dict, split_spec
from ctr_model.transforms import categorical_ids, dense_value
from ctr_volcano.app.cli.main import main
from ctr_volcano.data.prep import PrepConfig, prep
from ctr_volcano.errors import BadInput

#: sha256 over the committed sample's prepped tables (schema + column buffers), computed with the
#: code before feature specs existed (commit 8357e7c) and unchanged since.
SAMPLE_DIGEST = "d5223e3d888f5bf157ef6cefc99485ec8e40876e461f190f77f82026f079841a"

SPEC = {"label": "clicked",
        "dense": [{"name": "price", "transform": "log1p", "fill": 1.0},
                  {"name": "age", "transform": "standardize"},
                  {"name": "visits", "transform": "criteo"}],
        "categorical": [{"name": "user", "hash_buckets": 1000},
                        {"name": "items", "multivalued": True, "separator": "|", "max_length": 3,
                         "hash_buckets": 5000}],
        "ignore": ["other"]}
COLUMNS = ["clicked", "price", "age", "visits", "user", "items", "other"]


def _rows(n=3000, seed=3):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        items = [f"i{k}" for k in rng.integers(0, 80, rng.integers(0, 6))]
        price = "" if i % 17 == 0 else f"{rng.random() * 20:.3f}"
        rows.append([str(int(rng.integers(0, 2))), price, str(int(rng.integers(18, 80))),
                     str(int(rng.integers(-2, 40))), f"u{int(rng.integers(0, 200))}", items, "x"])
    return rows


def _csv_line(row, delimiter=","):
    return delimiter.join(row[:5] + ["|".join(row[5]), row[6]])


def _digest(out):
    h = hashlib.sha256()
    for split in ("train", "test"):
        for name in sorted(os.listdir(os.path.join(out, split))):
            if name.endswith(".parquet"):
                t = pq.read_table(os.path.join(out, split, name))
                h.update(name.encode())
                h.update(str(t.schema).encode())
                for col in t.columns:
                    h.update(col.combine_chunks().to_numpy().tobytes())
    return h.hexdigest()


def _table(out, split="train"):
    return pa.concat_tables([pq.read_table(os.path.join(out, split, n))
                             for n in sorted(os.listdir(os.path.join(out, split))) if n.endswith(".parquet")])


def test_criteo_preset_tables_are_todays(sample_dir, tmp_path):
    config = PrepConfig(hash_buckets=100_003, seed=5, shards=2, test_shards=1)
    prep([str(sample_dir)], str(tmp_path / "a"), config)
    prep([str(sample_dir)], str(tmp_path / "b"), config, spec=criteo_spec(100_003))
    assert _digest(str(tmp_path / "a")) == _digest(str(tmp_path / "b")) == SAMPLE_DIGEST
    doc = F.check_split_schema(str(tmp_path / "a" / "train"), 100_003)
    assert split_spec(doc) == criteo_spec(100_003)
    assert split_spec({"hash_buckets": 1000}) == criteo_spec(1000), "old data reads as Criteo"


def test_csv_with_header_rejects_by_reason_and_matches_the_reference(tmp_path):
    rows = _rows()
    bad = ["2,1,1,1,u,i,x", "1,abc,1,1,u,i,x", "1,1,1,1.5,u,i,x", "1,2", "", "1,inf,1,1,u,i,x",
           "0,1,NaN,1,u,i,x"]  # arrow's cast reads inf/NaN: prep's fast number path must not
    (tmp_path / "a.csv").write_text(",".join(COLUMNS) + "\n" + "\n".join(
        [_csv_line(r) for r in rows[:1000]] + bad + [_csv_line(r) for r in rows[1000:]]) + "\n")
    spec = spec_from_dict(dict(SPEC, format="csv", header=True))
    stats = prep([str(tmp_path / "a.csv")], str(tmp_path / "out"),
                 PrepConfig(shards=2, test_shards=1, max_bad_fraction=0.01), spec=spec)
    assert stats["rows_in"] == len(rows) + len(bad)
    assert stats["rows_train"] + stats["rows_test"] == len(rows)
    assert stats["rejected_by_reason"] == {"empty line": 1, "label not 0/1": 1, "fraction under transform criteo": 1,
                                           "non-number in dense column": 3, "wrong field count": 1}
    lines = {e["line"]: e["reason"] for e in stats["rejected_examples"]}
    assert lines[1002] == "label not 0/1 (nor 0.0/1.0, false/true): '2'" and "price: 'abc'" in lines[1003]
    assert lines[1004] == ("dense column visits: not an integer: '1.5'; transform criteo takes counts: give this "
                           "column transform log1p (or standardize) in the feature spec")
    assert "wrong field count" in lines[1005]
    assert "price: 'inf'" in lines[1007] and "age: 'NaN'" in lines[1008]
    written = split_spec(F.check_split_schema(str(tmp_path / "out" / "train"), any_spec=True))
    age = written.dense[1]
    ages = np.array([float(r[2]) for r in rows])
    assert age.mean == pytest.approx(ages.mean()) and age.std == pytest.approx(ages.std())
    _assert_reference(written, rows, str(tmp_path / "out"))


def _assert_reference(spec, rows, out):
    """Every kept row, recomputed one value at a time with the reference transforms."""
    table = pa.concat_tables([_table(out, "train"), _table(out, "test")]).to_pylist()
    got = sorted(tuple(json.dumps(v) for v in r.values()) for r in table)
    expected = []
    for r in rows:
        values = [int(r[0])] + [dense_value(d, r[1 + k]) for k, d in enumerate(spec.dense)]
        values.append(categorical_ids(spec, spec.categorical[0], r[4])[0])
        values.append(categorical_ids(spec, spec.categorical[1], r[5]))
        expected.append(tuple(json.dumps(v) for v in values))
    assert got == sorted(expected)


def test_tsv_without_header_gzip_and_parquet_list_column_give_the_same_tables(tmp_path):
    rows = _rows(1500, seed=9)
    with gzip.open(tmp_path / "a.tsv.gz", "wt") as fh:
        fh.write("\n".join(_csv_line(r, "\t") for r in rows) + "\n")
    tsv = spec_from_dict(dict(SPEC, format="tsv", columns=COLUMNS))
    prep([str(tmp_path / "a.tsv.gz")], str(tmp_path / "tsv"), PrepConfig(shards=1, test_shards=1), spec=tsv)
    columns = list(zip(*rows))
    pq.write_table(pa.table({
        "clicked": pa.array([int(v) for v in columns[0]], pa.int64()),
        "price": pa.array([float(v) if v else None for v in columns[1]]),
        "age": pa.array([float(v) for v in columns[2]]), "visits": pa.array([int(v) for v in columns[3]]),
        "user": pa.array(columns[4]), "items": pa.array(list(columns[5]), pa.list_(pa.string())),
        "other": pa.array(columns[6])}), tmp_path / "a.parquet", row_group_size=500)
    par = spec_from_dict(dict(SPEC, format="parquet"))
    prep([str(tmp_path / "a.parquet")], str(tmp_path / "pq"), PrepConfig(shards=1, test_shards=1), spec=par)
    assert _table(str(tmp_path / "tsv")).equals(_table(str(tmp_path / "pq")))
    assert _table(str(tmp_path / "pq")).schema.field("items").type == pa.list_(pa.int64())
    _assert_reference(split_spec(F.check_split_schema(str(tmp_path / "pq" / "train"), any_spec=True)), rows,
                      str(tmp_path / "pq"))


def test_files_that_do_not_match_the_spec_are_refused_before_writing(tmp_path):
    (tmp_path / "a.csv").write_text("click,price,age,visits,user,items,other\n1,1,1,1,u,i,x\n")
    spec = spec_from_dict(dict(SPEC, format="csv", header=True))
    with pytest.raises(BadInput, match="has no label column 'clicked'"):
        prep([str(tmp_path / "a.csv")], str(tmp_path / "out"), spec=spec)
    assert not (tmp_path / "out" / "train").exists()
    (tmp_path / "b.csv").write_text(",".join(COLUMNS + ["extra"]) + "\n1,1,1,1,u,i,x,y\n")
    with pytest.raises(BadInput, match="'extra' that the spec does not name; add it to ignore"):
        prep([str(tmp_path / "b.csv")], str(tmp_path / "out"), spec=spec)
    (tmp_path / "twice.csv").write_text(",".join(COLUMNS + ["user"]) + "\n1,1,1,1,u,i,x,v\n")
    with pytest.raises(BadInput, match=r"its columns name 'user' 2 times \(columns 5, 8\)"):
        prep([str(tmp_path / "twice.csv")], str(tmp_path / "out"), spec=spec)
    pq.write_table(pa.table({"clicked": [1], "price": [1.0], "age": [1.0], "visits": [1], "user": ["u"],
                             "items": ["i"], "other": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(BadInput, match="not a list; store it as a Parquet list"):
        prep([str(tmp_path / "c.parquet")], str(tmp_path / "out"), spec=spec_from_dict(dict(SPEC, format="parquet")))
    import datetime

    pq.write_table(pa.table({"clicked": [1], "price": [1.0], "age": [1.0], "visits": [1],
                             "user": [datetime.datetime(2026, 1, 1)], "items": [["i"]], "other": ["x"]}),
                   tmp_path / "d.parquet")
    with pytest.raises(BadInput, match=r"column 'user' is timestamp\[us\]; a categorical feature's ids are text"):
        prep([str(tmp_path / "d.parquet")], str(tmp_path / "out"), spec=spec_from_dict(dict(SPEC, format="parquet")))
    pq.write_table(pa.table({"clicked": [1], "price": [datetime.datetime(2026, 1, 1)], "age": [1.0], "visits": [1],
                             "user": ["u"], "items": [["i"]], "other": ["x"]}), tmp_path / "e.parquet")
    with pytest.raises(BadInput, match=r"column 'price' is timestamp\[us\]; a dense feature is a number"):
        prep([str(tmp_path / "e.parquet")], str(tmp_path / "out"), spec=spec_from_dict(dict(SPEC, format="parquet")))
    assert not (tmp_path / "out" / "train").exists()


def test_cli_prep_feature_spec(tmp_path, capsys):
    rows = _rows(200)
    (tmp_path / "a.csv").write_text(",".join(COLUMNS) + "\n" + "\n".join(_csv_line(r) for r in rows) + "\n")
    (tmp_path / "spec.json").write_text(json.dumps(dict(SPEC, format="csv", header=True)))
    assert main(["prep", "--input", str(tmp_path / "a.csv"), "--out", str(tmp_path / "out"),
                 "--feature-spec", str(tmp_path / "spec.json"), "--shards", "1", "--test-shards", "1"]) == 0
    assert "rows_in=200" in capsys.readouterr().out
    bad = json.dumps({"format": "csv", "header": True, "label": "clicked", "colour": 1,
                      "dense": [{"name": "price", "transform": "sqrt"}]})
    assert main(["prep", "--input", str(tmp_path / "a.csv"), "--out", str(tmp_path / "o2"),
                 "--feature-spec", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctr-volcano prep: error: --feature-spec=") and "2 problem(s)" in err
    assert "colour=1: unknown key" in err and "dense[0].transform='sqrt'" in err
    assert err.count("\n") == 1 and not (tmp_path / "o2").exists()


@pytest.mark.parametrize("layout", [
    {"format": "csv", "header": True},
    {"format": "tsv", "columns": COLUMNS},
    {"format": "parquet"},
])
def test_gen_data_feature_spec_writes_the_layout_prep_reads(tmp_path, capsys, layout):
    (tmp_path / "spec.json").write_text(json.dumps(dict(SPEC, **layout)))
    args = ["gen-data", "--rows", "3000", "--files", "2", "--out", str(tmp_path / "raw"),
            "--feature-spec", str(tmp_path / "spec.json"), "--oracle-rows", "20000", "--seed", "4"]
    assert main(args) == 0
    assert "oracle auc=" in capsys.readouterr().out
    oracle = json.loads((tmp_path / "raw" / "oracle.json").read_text())
    assert 0.72 < oracle["auc"] < 0.92 and 0.18 < oracle["positive_rate"] < 0.32
    assert spec_from_dict(oracle["feature_spec"]) == spec_from_dict(dict(SPEC, **layout))
    assert main(args[:-4] + ["--out", str(tmp_path / "again"), "--feature-spec", str(tmp_path / "spec.json"),
                             "--oracle-rows", "20000", "--seed", "4"]) == 0
    for name in oracle["files"]:
        assert (tmp_path / "raw" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert main(["prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                 "--feature-spec", str(tmp_path / "spec.json"), "--shards", "2", "--test-shards", "1"]) == 0
    out = capsys.readouterr().out
    assert "rows_in=3000" in out and "rows_rejected=0" in out
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["rows_rejected"] == 0 and 0.02 < stats["missing_rate"]["price"] < 0.09
    items = _table(str(tmp_path / "out")).column("items").to_pylist()
    assert max(len(ids) for ids in items) == 3 and min(len(ids) for ids in items) == 1
    with pytest.raises(F.SchemaMismatch, match="read the Criteo layout only so far"):
        F.check_split_schema(str(tmp_path / "out" / "train"))   # the trainer's and evaluation's check
