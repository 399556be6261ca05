"""Three days of recurring retraining through kfp.local, on drifting synthetic days.

One back-fill (``ctr-volcano run --days 3``) runs the real retraining pipeline per day: window ->
prep -> champion -> warm-started local PS gang -> gate -> registry. Then a deliberately broken
challenger (its training lines' labels and features decoupled) is run for day 3 and must be refused.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctr_volcano.data.daily import generate_days
from ctr_volcano.data.prep import PrepConfig, StratifiedSplit, prep
from ctr_volcano.evaluation.evaluate import evaluate
from ctr_volcano.retraining.registry import ModelRegistry

REPO = Path(__file__).resolve().parents[1]
DATES = ["2026-01-01", "2026-01-02", "2026-01-03"]
PARAMS = ["pservers=1", "trainers=1", "shards=2", "epochs=2", "learning_rate=0.003",
          "min_auc=0.55", "tolerance=0.002"]


def _cli_params():
    return [a for p in PARAMS for a in ("-p", p)]


def _run_cli(args, log_path):
    """``ctr-volcano run -v ARGS`` in a fresh process, as a user runs it; its whole log (``-v``: the
    steps' too) goes to ``log_path``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", args[0], "-v"] + args[1:],
                              cwd=REPO, env=env,
                              stdout=fh, stderr=subprocess.STDOUT, timeout=1500)
    return proc.returncode, open(log_path, errors="replace").read()


@pytest.fixture(scope="module")
def backfill(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrain")
    days = generate_days(str(root / "days"), days=3, rows=20_000, drift=0.5, seed=3, oracle_rows=20_000)
    work = root / "work"
    rc, log = _run_cli(["run", "--days", "3", "--data", str(root / "days") + "/day={date}",
                        "--start-date", DATES[0], "--workdir", str(work)] + _cli_params(),
                       root / "backfill.log")
    assert rc == 0, log[-4000:]
    summary = json.loads((work / "backfill.json").read_text())
    return root, work, summary, days, log


def _day3_test_split(root, tmp, day_dir=None):
    """Day 3's test split exactly as the pipeline's prep made it (same config as its defaults)."""
    out = tmp / "day3-prep"
    prep([str(day_dir or root / "days" / f"day={DATES[2]}")], str(out),
         PrepConfig(hash_buckets=1000001, test_fraction=0.1, shards=2, seed=42))
    return str(out / "test")


def _split_rows(split_dir):
    """Every row of a prepped split, as sorted tuples."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(pq.read_table(p) for p in sorted(Path(split_dir).glob("*.parquet")))
    return sorted(map(tuple, zip(*(table.column(c).to_pylist() for c in table.column_names))))


@pytest.mark.slow
def test_three_days_warm_start_from_the_champion(backfill):
    _, work, summary, _, log = backfill
    d1, d2, d3 = summary["days"]
    assert [d["run_date"] for d in summary["days"]] == DATES
    assert d1["published"] and d1["parent"] is None and d1["champion"] is None
    assert d1["champion_auc"] is None
    # day 2 and 3 continue the champion of the day before, and say so
    assert d2["parent"] == d1["version"] and d3["parent"] == (d2["version"] if d2["published"]
                                                              else d1["version"])
    reg = ModelRegistry(summary["registry"], "ctr-dnn")
    v3 = reg.get(d3["version"])
    assert v3.meta["parent"] == d3["parent"] and v3.meta["window"]["dates"] == [DATES[2]]
    assert v3.meta["window"]["date_source"] == "run_date"
    # the train step's log says from which version it starts; day 1 starts cold
    assert "train_ctr: no champion to warm-start from: cold start" in log
    for day in (d2, d3):
        assert f"train_ctr: warm start from version {day['parent']}" in log
    # and the gang was handed the champion (the trainers' metrics name the model they loaded)
    inits = [json.loads(p.read_text()).get("init_model") for p in _step_files(work, "train-ctr", "metrics")]
    assert inits[0] is None and all(i and i.endswith("find-champion/champion") for i in inits[1:])
    # prep's stats record the resolved window and the files it read
    stats = [json.loads(p.read_text()) for p in _step_files(work, "prepare-ctr-data", "stats")]
    assert [s["window"]["dates"] for s in stats] == [[d] for d in DATES]
    assert [os.path.basename(i["path"]) for i in stats[2]["inputs"]] == [f"{DATES[2]}-part-00000.tsv"]


def _step_files(work, task, output):
    """One step's output file of each day's run, in run order."""
    for run in sorted(os.listdir(work / "runs")):
        base = work / "runs" / run / "outputs"
        for pipe in os.listdir(base):
            path = base / pipe / task / output
            if path.exists():
                yield path


@pytest.mark.slow
def test_final_champion_beats_day_one_kept_stale(backfill, tmp_path):
    root, _, summary, days, _ = backfill
    reg = ModelRegistry(summary["registry"], "ctr-dnn")
    split = _day3_test_split(root, tmp_path)
    champion = reg.champion()
    stale = reg.get(summary["days"][0]["version"])
    champ_auc = evaluate(champion.model_uri, split, str(tmp_path / "c"))["auc"]
    stale_auc = evaluate(stale.model_uri, split, str(tmp_path / "s"))["auc"]
    # the gate scored the champion on this very split
    assert champ_auc == pytest.approx(champion.meta["metrics"]["challenger_auc"], abs=1e-9)
    assert champ_auc > stale_auc + 0.02, (champ_auc, stale_auc, days[2])


@pytest.mark.slow
def test_broken_challenger_is_refused_and_the_champion_stays(backfill, tmp_path):
    root, work, summary, _, _ = backfill
    reg = ModelRegistry(summary["registry"], "ctr-dnn")
    before = reg.champion()
    # Day 3 again, with the training lines' labels decoupled from their features (test lines
    # intact). Prep's split is stratified by label, so which lines are test depends on the label
    # sequence: shuffling labels would move the test split. Shuffling the features of the training
    # lines among themselves, each label left where it is, decouples them the same way and keeps
    # the label sequence, so prep sends the very same lines to test.
    src = root / "days" / f"day={DATES[2]}" / "part-00000.tsv"
    lines = src.read_bytes().splitlines(keepends=True)
    labels = np.array([int(line[:1]) for line in lines])
    is_test = StratifiedSplit(42, 0.1).is_test(labels)
    train_idx = np.flatnonzero(~is_test)
    features = [lines[i][1:] for i in train_idx]
    rng = np.random.default_rng(0)
    for i, j in zip(train_idx, rng.permutation(len(train_idx))):
        lines[i] = lines[i][:1] + features[j]
    broken = tmp_path / "broken" / f"day={DATES[2]}"
    broken.mkdir(parents=True)
    (broken / "part-00000.tsv").write_bytes(b"".join(lines))
    assert sum(a != b for a, b in zip(lines, src.read_bytes().splitlines(keepends=True))) \
        > 0.8 * len(train_idx)
    # the premise: prep makes the same test split of the broken day as of the real one
    assert _split_rows(_day3_test_split(root, tmp_path / "real")) \
        == _split_rows(_day3_test_split(root, tmp_path / "brk", broken))
    # trained from scratch (warm_start=false), so it is the shuffled labels alone that it learned;
    # min_auc=0 lets it past the floor, so it is the comparison with the champion that refuses it
    rc, log = _run_cli(["run", "--days", "1", "--data", str(tmp_path / "broken") + "/day={date}",
                        "--start-date", DATES[2], "--workdir", str(work / "broken"),
                        "--registry", summary["registry"]] + _cli_params()
                       + ["-p", "warm_start=false", "-p", "min_auc=0"], tmp_path / "broken.log")
    assert rc == 0, log[-4000:]
    assert "train_ctr: warm_start=False: cold start (init_model ignored)" in log
    (day,) = json.loads((work / "broken" / "backfill.json").read_text())["days"]
    assert day["champion"] == before.version and day["parent"] is None
    assert not day["published"], day
    assert "< champion AUC" in day["reason"]
    after = reg.champion()
    assert after.version == before.version
    refused = reg.get(day["version"])
    assert refused.meta["decision"]["publish"] is False
    shutil.rmtree(work / "broken", ignore_errors=True)
