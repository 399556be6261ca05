"""A back-fill through kfp.local that meets broken days: ``ctr-volcano gen-data --days 7 --bad-day ...`` then
``ctr-volcano run --days 7 --keep-going``, the real retraining pipeline per day (window -> prep ->
champion -> validate -> warm-started local PS gang -> gate -> registry).

Days 1 and 2 are good: they pass validation and train. Days 3 to 7 each hold one of the five planted
bugs. Day 3's (I5 emptied) is set to warn only, by the run's ``validation_thresholds``: it trains, is
registered with its verdict, and is not promoted. Days 4 to 7 must be refused by the validation step,
before training, with the right finding in its one line, and leave the registry as it was (no version,
the champion unchanged)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctr_volcano.retraining.registry import ModelRegistry

REPO = Path(__file__).resolve().parents[1]
PARAMS = ["pservers=1", "trainers=1", "shards=2", "epochs=2", "learning_rate=0.003", "min_auc=0.55",
          "tolerance=0.002", 'validation_thresholds={"features": {"I5": {"missing_rate_jump": {"warn": 0.05, "fail": null}}}}']
#: Day -> (the planted bug, the feature and statistic its refusal must name).
BAD = {"2026-01-03": ("empty-column", "I5", "missing_rate_jump"), "2026-01-04": ("rekey", "C3", "new_id_rate"),
       "2026-01-05": ("unit-x1000", "I6", "js_divergence"), "2026-01-06": ("label-x2", "(label)", "label_rate_shift"),
       "2026-01-07": ("rows-10pct", "(rows)", "rows_drop")}


def _cli(args, log_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main"] + args, cwd=REPO, env=env,
                              stdout=fh, stderr=subprocess.STDOUT, timeout=1800)
    return proc.returncode, open(log_path, errors="replace").read()


@pytest.mark.slow
def test_a_backfill_refuses_each_broken_day_before_training(tmp_path):
    days = tmp_path / "days"
    rc, log = _cli(["gen-data", "--rows", "20000", "--days", "7", "--drift", "0.1", "--seed", "3", "--out", str(days),
                    "--oracle-rows", "2000"] + [a for d, (kind, _, _) in BAD.items() for a in ("--bad-day", f"{d}:{kind}")],
                   tmp_path / "gen.log")
    assert rc == 0, log[-3000:]
    work = tmp_path / "work"
    rc, log = _cli(["run", "--days", "7", "--keep-going", "--data", str(days) + "/day={date}", "--start-date",
                    "2026-01-01", "--workdir", str(work)] + [a for p in PARAMS for a in ("-p", p)],
                   tmp_path / "backfill.log")
    assert rc == 2, log[-4000:]                       # some day was refused
    summary = json.loads((work / "backfill.json").read_text())
    good, warned, bad = summary["days"][:2], summary["days"][2], summary["days"][3:]
    assert [d["validation"]["verdict"] for d in good] == ["pass", "pass"], good
    assert good[0]["published"] and good[1]["version"]
    registry = ModelRegistry(summary["registry"], summary["model_name"])
    champion = registry.champion().version
    # the warned day trained and was registered with its verdict, but not promoted
    assert warned["validation"]["verdict"] == "warn" and warned["version"] and not warned["published"], warned
    assert any("I5: missing_rate_jump" in line for line in warned["validation"]["findings"]), warned
    if warned["challenger_auc"] >= warned["champion_auc"] - 0.002:      # AUC alone would have promoted it
        assert "data validation warned (I5: missing_rate_jump" in warned["reason"], warned
    assert registry.get(warned["version"]).meta["validation"]["verdict"] == "warn"
    assert champion == (good[1]["version"] if good[1]["published"] else good[0]["version"]) == summary["champion"]
    assert len(registry.versions()) == 3
    for day in bad:
        kind, feature, statistic = BAD[day["run_date"]]
        assert day["refused_by"] == "validate-ctr-data" and not day["published"] and day["version"] is None, day
        assert f"{feature}: {statistic}" in day["error"] and "data validation failed" in day["error"], (kind, day)
        assert "\n" not in day["error"]
        assert f"{day['run_date']}: REFUSED: " in log
    # no training step ran on a refused day: its run log ends at the validation step
    runs = sorted((work / "runs").iterdir())
    assert len(runs) == 7
    for run in runs[3:]:
        text = (run / "run.log").read_text(errors="replace")
        assert "validate-ctr-data" in text and "step train-ctr" not in text, run
