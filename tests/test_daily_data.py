"""Drifting daily partitions: layout, determinism, and drift a stale model measurably suffers from."""
from __future__ import annotations

import json
import os

import pytest

from ctr_volcano.app.cli.main import main
from ctr_volcano.data.daily import drifted_models, generate_days
from ctr_volcano.errors import BadInput


def test_days_drift_and_a_stale_model_loses_auc(tmp_path):
    days = generate_days(str(tmp_path), days=3, rows=500, drift=0.5, seed=3, oracle_rows=40_000)
    assert [d["date"] for d in days] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    for d in days:
        part = tmp_path / f"day={d['date']}"
        assert (part / "part-00000.tsv").is_file()
        assert json.loads((part / "oracle.json").read_text())["day0_model_auc"] == d["day0_model_auc"]
        assert 0.2 < d["positive_rate"] < 0.3
    # on day 0 the stale model is the truth; afterwards it falls behind the day's own model
    assert days[0]["day0_model_auc"] == days[0]["auc"]
    assert days[1]["auc"] - days[1]["day0_model_auc"] > 0.03
    assert days[2]["auc"] - days[2]["day0_model_auc"] > days[1]["auc"] - days[1]["day0_model_auc"]
    # the days hold different rows
    first = (tmp_path / "day=2026-01-01" / "part-00000.tsv").read_bytes()
    assert first != (tmp_path / "day=2026-01-02" / "part-00000.tsv").read_bytes()


def test_no_drift_keeps_the_model_and_same_seed_same_bytes(tmp_path):
    a, b = drifted_models(4, 2, 0.0)
    assert all((x == y).all() for x, y in zip(a.sparse_weight, b.sparse_weight))
    generate_days(str(tmp_path / "a"), days=2, rows=300, drift=0.2, seed=9, oracle_rows=2000)
    generate_days(str(tmp_path / "b"), days=2, rows=300, drift=0.2, seed=9, oracle_rows=2000)
    for day in ("day=2026-01-01", "day=2026-01-02"):
        assert (tmp_path / "a" / day / "part-00000.tsv").read_bytes() == \
            (tmp_path / "b" / day / "part-00000.tsv").read_bytes()


def test_days_keep_the_vocab_scale(tmp_path):
    days = generate_days(str(tmp_path), days=2, rows=200, drift=0.3, seed=2, oracle_rows=2000,
                         vocab_scale=3)
    assert [d["vocab_scale"] for d in days] == [3, 3]
    assert [len(v) for v in drifted_models(2, 2, 0.3, vocab_scale=3)[1].vocab][:2] == [3000, 1500]


@pytest.mark.parametrize("kw,field", [({"days": 0}, "days"), ({"drift": 1.0}, "drift"),
                                      ({"start_date": "01/02/2026"}, "start_date"),
                                      ({"vocab_scale": 0}, "vocab_scale")])
def test_bad_arguments_are_refused(tmp_path, kw, field):
    args = {"days": 2, "rows": 10, "drift": 0.1, **kw}
    with pytest.raises(BadInput, match=field):
        generate_days(str(tmp_path), **args)
    assert not os.listdir(tmp_path)


def test_cli_gen_data_days(tmp_path, capsys):
    rc = main(["gen-data", "--rows", "200", "--out", str(tmp_path), "--days", "2", "--drift", "0.4",
               "--start-date", "2026-03-30", "--oracle-rows", "2000"])
    assert rc == 0
    assert sorted(os.listdir(tmp_path)) == ["day=2026-03-30", "day=2026-03-31"]
    assert "2026-03-31: 200 rows" in capsys.readouterr().out
    assert main(["gen-data", "--rows", "5", "--out", str(tmp_path / "x"), "--days", "2",
                 "--drift", "-0.1"]) == 2
