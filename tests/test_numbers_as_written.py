"""Numbers as users' tools write them: pandas writes an integer column with missing values as
floats (``260.0``), some exporters write labels as ``1.0`` and counts as ``1e3``. Under a feature
spec prep reads them as their integers (one implementation, :mod:`ctr_model.transforms`, which the
server imports too), a genuinely fractional value under ``transform: criteo`` is a reject that says
to use ``log1p``/``standardize``, and every hint speaks of the spec's layout, never of Criteo TSV."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model.feature_spec import spec_from_dict
from ctr_model.features import BadRow
from ctr_model.transforms import dense_value, parse_dense_column, parse_label_column

SPEC = {"format": "csv", "header": True, "label": "click", "hash_buckets": 1000,
        "dense": [{"name": "visits", "transform": "criteo"}, {"name": "price", "transform": "log1p"}],
        "categorical": [{"name": "site_id"}]}
VISITS = spec_from_dict(SPEC).dense[0]


def _rows(n=400, seed=5):
    rng = np.random.default_rng(seed)
    visits = [None if i % 7 == 0 else int(v) for i, v in enumerate(rng.integers(-3, 5000, n))]
    return [(int(rng.integers(0, 2)), v, f"{rng.random() * 9:.3f}", f"{int(rng.integers(0, 2**32)):08x}")
            for v in visits]


def _write(path, rows, as_float):
    """The rows as a CSV with a header; ``as_float``: labels and counts written as pandas writes a
    float column (``1.0``, ``260.0``; a few counts as ``2.6e2``)."""
    def count(i, v):
        if v is None:
            return ""
        if not as_float:
            return str(v)
        return f"{v:.1e}" if i % 5 == 0 and v == float(f"{v:.1e}") else f"{float(v)!r}"

    lines = ["click,visits,price,site_id"] + [
        f"{float(y) if as_float else y},{count(i, v)},{p},{s}" for i, (y, v, p, s) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def _prepped(out):
    return pa.concat_tables([pq.read_table(os.path.join(out, split, f))
                             for split in ("train", "test")
                             for f in sorted(os.listdir(os.path.join(out, split))) if f.endswith(".parquet")])


def test_integral_floats_and_float_labels_prep_as_their_integers(tmp_path):
    from ctr_volcano.app.cli.main import main

    rows = _rows()
    _write(tmp_path / "ints.csv", rows, as_float=False)
    _write(tmp_path / "floats.csv", rows, as_float=True)
    text = (tmp_path / "floats.csv").read_text()
    assert "\n1.0," in text and "\n0.0," in text                # labels written as floats
    assert any(line.split(",")[1].endswith(".0") for line in text.splitlines()[1:])
    assert any("e+" in line.split(",")[1] for line in text.splitlines()[1:])
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    for name in ("ints", "floats"):
        assert main(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / f"{name}.csv"),
                     "--out", str(tmp_path / name), "--shards", "1", "--test-shards", "1",
                     "--max-bad-fraction", "0"]) == 0
    floats, ints = _prepped(tmp_path / "floats"), _prepped(tmp_path / "ints")
    assert floats.num_rows == ints.num_rows == len(rows)       # not one row rejected
    assert floats.equals(ints)
    assert sorted(floats.column("click").to_pylist()) == sorted(r[0] for r in rows)


def test_parquet_float_counts_are_their_integers_and_fractions_are_refused():
    col = pa.array([260.0, None, 0.0, 1e3, -2.0, 2.5])
    values, ok = parse_dense_column(VISITS, col)
    assert ok.tolist() == [True, True, True, True, True, False]
    assert values[:5].tolist()[0] == 260.0 and math.isnan(values[1])
    labels, ok = parse_label_column(pa.array(["1.0", "0.0", "1", " 0 ", "2", "", "0.5", "1e0"]))
    assert ok.tolist() == [True, True, True, True, False, False, False, True]
    assert labels[ok].tolist() == [1, 0, 1, 0, 1]
    labels, ok = parse_label_column(pa.array([1.0, 0.0, None, 0.3]))
    assert ok.tolist() == [True, True, False, False] and labels[:2].tolist() == [1, 0]
    labels, ok = parse_label_column(pa.array(["True", "False", " true ", "FALSE", "yes", None, "1"]))
    assert ok.tolist() == [True, True, True, True, False, False, True] and labels.tolist()[:5] == [1, 0, 1, 0, 0]
    labels, ok = parse_label_column(pa.array([True, False, None]))       # a Parquet bool column
    assert ok.tolist() == [True, True, False] and labels[:2].tolist() == [1, 0]


def test_a_csv_pandas_wrote_from_a_bool_label_preps_as_its_parquet(tmp_path):
    """pandas writes a bool click column to CSV as ``True``/``False`` and to Parquet as a bool: both prep
    to the same rows, none rejected."""
    import pandas as pd

    from ctr_volcano.app.cli.main import main

    rows = _rows()
    frame = pd.DataFrame({"click": [bool(r[0]) for r in rows], "visits": [r[1] for r in rows],
                          "price": [r[2] for r in rows], "site_id": [r[3] for r in rows]})
    frame.to_csv(tmp_path / "log.csv", index=False)
    assert (tmp_path / "log.csv").read_text().splitlines()[1].split(",")[0] in ("True", "False")
    frame.to_parquet(tmp_path / "log.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    (tmp_path / "spec_pq.json").write_text(json.dumps({**{k: v for k, v in SPEC.items() if k != "header"},
                                                       "format": "parquet"}))
    for spec, name in (("spec.json", "log.csv"), ("spec_pq.json", "log.parquet")):
        assert main(["prep", "--feature-spec", str(tmp_path / spec), "--input", str(tmp_path / name),
                     "--out", str(tmp_path / name.replace(".", "-")), "--shards", "1", "--test-shards", "1",
                     "--max-bad-fraction", "0"]) == 0
    from_csv, from_parquet = _prepped(tmp_path / "log-csv"), _prepped(tmp_path / "log-parquet")
    assert from_csv.num_rows == from_parquet.num_rows == len(rows)
    assert from_csv.column("click").to_pylist() == from_parquet.column("click").to_pylist()
    assert sorted(from_csv.column("click").to_pylist()) == sorted(r[0] for r in rows)


def test_a_parquet_id_column_pandas_stored_as_float_has_the_integer_ids(tmp_path):
    """pandas stores an integer id column with gaps as float64 (``1005.0``, NaN): its ids are the
    integer column's (a gap the empty id), in prep, in the per-value reference form and for a
    request sending the integers; other floats hash as their shortest text."""
    import pyarrow.parquet as pq

    from ctr_model.transforms import categorical_column, categorical_ids
    from ctr_volcano.app.cli.main import main

    spec = spec_from_dict({"format": "parquet", "label": "click", "hash_buckets": 1000,
                           "categorical": [{"name": "site_id"}, {"name": "tags", "multivalued": True}]})
    site, tags = spec.categorical
    ints = [1005, None, 7, 1005, 123456789, None]
    floats = pa.array([None if v is None else float(v) for v in ints[:-1]] + [float("nan")])
    assert floats.type == pa.float64()
    expected = categorical_column(spec, site, pa.array(ints, pa.int64()))
    assert categorical_column(spec, site, floats).tolist() == expected.tolist()
    assert [categorical_ids(spec, site, v)[0] for v in [1005.0, None, 7.0, np.float32(1005), 123456789.0,
                                                        float("nan")]] == expected.tolist()
    assert expected[1] == expected[5] == 0                                   # empty: slot 1's id
    assert categorical_ids(spec, site, 0.5) == categorical_ids(spec, site, "0.5")
    assert categorical_column(spec, site, pa.array([0.5])).tolist() == categorical_ids(spec, site, "0.5")
    # pandas' category dtype (a Parquet dictionary column) is its values; a bool column is 1/0
    as_text = pa.array(["a", None, "b", "a"])
    assert categorical_column(spec, site, as_text.dictionary_encode()).tolist() == \
        categorical_column(spec, site, as_text).tolist()
    assert categorical_column(spec, site, pa.array([True, False, None])).tolist() == \
        [categorical_ids(spec, site, v)[0] for v in (1, 0, None)] == \
        [categorical_ids(spec, site, v)[0] for v in (True, False, None)]
    n = 200
    rng = np.random.default_rng(3)
    site_ids = [None if i % 9 == 0 else int(v) for i, v in enumerate(rng.integers(1000, 1010, n))]
    tag_ids = [[float(t) for t in rng.integers(0, 50, 3)] for _ in range(n)]
    labels = rng.integers(0, 2, n).astype(np.int8)
    pq.write_table(pa.table({"click": labels, "site_id": pa.array(site_ids, pa.int64()),
                             "tags": pa.array([[int(t) for t in r] for r in tag_ids], pa.list_(pa.int64()))}),
                   tmp_path / "ints.parquet")
    pq.write_table(pa.table({"click": labels, "site_id": pa.array([np.nan if v is None else float(v) for v in site_ids]),
                             "tags": pa.array(tag_ids, pa.list_(pa.float64()))}), tmp_path / "floats.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    for name in ("ints", "floats"):
        assert main(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / f"{name}.parquet"),
                     "--out", str(tmp_path / name), "--shards", "1", "--test-shards", "1",
                     "--max-bad-fraction", "0"]) == 0
    assert _prepped(tmp_path / "floats").equals(_prepped(tmp_path / "ints"))


@pytest.mark.parametrize("raw,integer", [("260.0", "260"), ("1e3", "1000"), (b"0.0", "0"), (" 7.00 ", "7"),
                                         (260.0, "260"), (np.float32(3.0), "3"), ("-4.0", "-4"), ("", "")])
def test_reference_form_reads_integral_floats_as_integers(raw, integer):
    assert dense_value(VISITS, raw) == dense_value(VISITS, integer)


def test_a_fraction_under_criteo_names_log1p_and_standardize():
    for raw in ("2.5", 2.5, b"0.1"):
        with pytest.raises(BadRow, match=r"not an integer: .*give this column transform log1p \(or standardize\)"):
            dense_value(VISITS, raw)
    with pytest.raises(BadRow, match="not a number"):
        dense_value(VISITS, "abc")


def test_hints_under_a_csv_spec_speak_of_its_layout_not_criteo_tsv(tmp_path, capsys):
    from ctr_volcano.app.cli.main import main

    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    rc = main(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / "missing.csv"),
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "Criteo" not in err and "give a CSV file with a header, comma-separated (plain or .gz)" in err
    bad = ["click,visits,price,site_id"] + [f"0,{i}.5,1,s" for i in range(30)]
    (tmp_path / "bad.csv").write_text("\n".join(bad) + "\n")
    rc = main(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / "bad.csv"),
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "Criteo" not in err, err
    assert "transform log1p (or standardize)" in err
    assert "is this a CSV file with a header, comma-separated (label 'click' and 3 feature columns" in err
    rc = main(["prep", "--input", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "out")])
    assert rc == 2 and "give a Criteo TSV file" in capsys.readouterr().err     # without a spec: Criteo's


def test_a_missing_data_path_under_a_spec_in_a_local_run_speaks_of_the_spec(tmp_path):
    from ctr_volcano.app.local_run import run_local
    from ctr_volcano.errors import BadInput

    with pytest.raises(BadInput, match="a file or directory in the feature spec's layout") as info:
        run_local(str(tmp_path / "missing.csv"), str(tmp_path / "w"), {"feature_spec": json.dumps(SPEC)})
    assert "Criteo" not in str(info.value)
    with pytest.raises(BadInput, match="of Criteo TSV"):
        run_local(str(tmp_path / "missing.tsv"), str(tmp_path / "w"))
