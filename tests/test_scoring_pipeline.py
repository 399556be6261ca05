"""``ctr_scoring_pipeline`` for real under ``kfp.local`` (SubprocessRunner, no venv): the candidates
through ``dsl.importer``, the model as an artifact or as the registry's champion, ``score_ctr``
writing the same shards as the library run directly on the same file."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kfp import local

from ctr_volcano.retraining.registry import ModelRegistry
from ctr_volcano.scoring import ScoreArgs, score
from pipelines.ctr_scoring_pipeline import ctr_scoring_pipeline
from tests.scoring_fixtures import avazu_model, candidates, write_csv

pytestmark = pytest.mark.slow       # whole kfp.local pipeline runs

ROWS = 1200


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    root = tmp_path_factory.mktemp("avazu-kfp")
    cols = candidates(ROWS, seed=9)
    return cols, write_csv(root / "candidates.csv", cols), avazu_model(root, cols)


def _run(root: Path, **params) -> Path:
    """Run the pipeline; the scoring task's output directory (the one scores.json under the run)."""
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "outputs"),
               workspace_root=str(root / "workspace"))
    ctr_scoring_pipeline(**params)
    (found,) = list((root / "outputs").rglob("scores.json"))
    return found.parent


def _shards(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])


def test_the_pipeline_scores_with_a_model_artifact(day, tmp_path):
    cols, csv, model = day
    out = _run(tmp_path / "run", data_uri=str(csv), model_uri=model, keep_columns="id", fanout=2)
    direct = tmp_path / "direct"
    score(ScoreArgs(model=model, inputs=(str(csv),), out=str(direct), keep=("id",)))
    assert _shards(out).equals(_shards(direct))
    assert _shards(out).column("id").to_pylist() == cols["id"]
    doc = json.loads((out / "scores.json").read_text())
    assert (doc["rows_in"], doc["rows_scored"], doc["workers"]) == (ROWS, ROWS, 2)


def test_the_pipeline_scores_with_the_registrys_champion(day, tmp_path):
    cols, csv, model = day
    registry = tmp_path / "registry"
    reg = ModelRegistry(str(registry), "avazu")
    reg.register(model, "v1", metrics={"challenger_auc": 0.7})
    reg.promote("v1")
    out = _run(tmp_path / "run", data_uri=str(csv), registry=str(registry), model_name="avazu",
               keep_columns="id,site_id")
    direct = tmp_path / "direct"
    score(ScoreArgs(model=model, inputs=(str(csv),), out=str(direct), keep=("id", "site_id")))
    assert _shards(out).equals(_shards(direct))
    assert json.loads((out / "scores.json").read_text())["model"]["sha256"] == \
        json.loads((direct / "scores.json").read_text())["model"]["sha256"]
