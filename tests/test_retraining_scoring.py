"""Scoring the day's candidates after a promotion, for real, through kfp.local (issue 37).

Three one-day back-fills (``ctr-volcano run --days 1``) of the retraining pipeline on a tiny Avazu-like
day (tests/scoring_fixtures.py's spec: an ``id`` column the model ignores): a run that promotes its
model with ``--score-data-uri`` scores the day's candidates with it, ids kept; a run the gate refuses
(``min_auc=0.99``) scores nothing, and so does a promoted run without ``--score-data-uri``.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.scoring_fixtures import SPEC, candidates, write_csv

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DATE = "2026-01-01"
TRAIN_ROWS, CANDIDATE_ROWS = 1200, 300
PARAMS = ["pservers=1", "trainers=1", "shards=1", "epochs=1", f"hash_buckets={SPEC['hash_buckets']}",
          "feature_spec=" + json.dumps(SPEC), "score_keep_columns=id"]


def _run(root: Path, name: str, extra: list, registry: Path) -> Path:
    """``ctr-volcano run --days 1`` in a fresh process into ``root/name``; its workdir (with its output in
    ``cli.out``)."""
    work = root / name
    args = ["run", "--days", "1", "--data", str(root / "days") + "/day={date}", "--start-date", DATE,
            "--workdir", str(work), "--registry", str(registry)] + extra
    args += [a for p in PARAMS for a in ("-p", p)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main"] + args, cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-4000:]
    (work / "cli.out").write_bytes(proc.stdout)
    return work


def _scores(work: Path) -> list:
    """The scoring step's output directories of every run in ``work``, wherever kfp.local put them."""
    return sorted(str(p.parent) for p in work.glob("runs/*/outputs/**/score-ctr/scores/scores.json"))


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrain-score")
    day = candidates(TRAIN_ROWS, seed=5)
    day = {"click": [str(v) for v in np.random.default_rng(1).binomial(1, 0.25, TRAIN_ROWS)], **day}
    (root / "days" / f"day={DATE}").mkdir(parents=True)
    write_csv(root / "days" / f"day={DATE}" / "part-00000.csv", day)
    (root / "candidates" / f"day={DATE}").mkdir(parents=True)
    write_csv(root / "candidates" / f"day={DATE}" / "part-00000.csv", candidates(CANDIDATE_ROWS, seed=7))
    return root


def test_a_promoted_run_scores_the_candidates_and_a_refused_one_does_not(days):
    import pyarrow as pa
    import pyarrow.parquet as pq

    registry = days / "registry"
    uri = ["--score-data-uri", str(days / "candidates") + "/day={date}"]
    # min_auc=0: the first run is promoted whatever the (random) labels taught it
    work = _run(days, "promoted", uri + ["-p", "min_auc=0"], registry)
    (day,) = json.loads((work / "backfill.json").read_text())["days"]
    assert day["published"], day
    (out,) = _scores(work)
    assert day["scores"] == str(out)
    assert f"{DATE}: candidates scored with it into {out}" in (work / "cli.out").read_text()
    out = Path(out)
    doc = json.loads((out / "scores.json").read_text())
    assert doc["rows_in"] == CANDIDATE_ROWS == doc["rows_scored"]
    table = pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("part-*.parquet")))
    assert table.column_names == ["id", "probability"]
    assert table.column("id").to_pylist() == candidates(CANDIDATE_ROWS, seed=7)["id"]
    probs = np.asarray(table.column("probability").to_pylist())
    assert ((probs > 0) & (probs < 1)).all()
    # scored with the model this run registered and promoted
    from ctr_volcano.retraining.registry import ModelRegistry

    champion = ModelRegistry(str(registry), "ctr-dnn").champion()
    assert champion.version == day["version"]
    onnx = (Path(champion.model_uri) / "model.onnx").read_bytes()
    assert doc["model"]["sha256"] == hashlib.sha256(onnx).hexdigest()

    # the gate refuses (min_auc above anything random labels reach): the same candidates stay unscored
    work = _run(days, "refused", uri + ["-p", "min_auc=0.99"], registry)
    (day,) = json.loads((work / "backfill.json").read_text())["days"]
    assert not day["published"] and "< min_auc 0.99" in day["reason"], day
    assert _scores(work) == [] and day["scores"] is None
    assert not list(work.glob("runs/*/outputs/*/resolve-data-window-2"))     # no candidates copied either
    assert ModelRegistry(str(registry), "ctr-dnn").champion().version == champion.version


def test_without_a_score_data_uri_a_promoted_run_scores_nothing(days):
    work = _run(days, "unscored", ["-p", "min_auc=0"], days / "registry-2")
    (day,) = json.loads((work / "backfill.json").read_text())["days"]
    assert day["published"], day
    assert _scores(work) == [] and day["scores"] is None
    assert not list(work.glob("runs/*/outputs/*/resolve-data-window-2"))
