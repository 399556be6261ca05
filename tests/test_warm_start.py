"""Warm start from an exported model: real local gangs load it through Paddle's PS load path.

The refusals are checked twice: at the boundary (``train_local``: bad input before any process
starts) and in the pure check the trainers run themselves.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from ctr_model.features import SCHEMA_VERSION
from ctr_model.warm_start import WARM_START_DIR, WarmStartError, check_compatible, read_init_model
from ctr_volcano.errors import BadInput
from ctr_volcano.training.local.backend import train_local
from tools.planted_prep import write_planted_prep

SMALL = {"fc_sizes": [32, 16], "embedding_dim": 4, "batch_size": 128, "learning_rate": 0.01,
         "progress_secs": 2.0, "sparse_shards": 4}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("planted")
    write_planted_prep(str(d), train_rows=12_000, test_rows=3_000, shards=2, seed=5)
    return str(d)


@pytest.fixture(scope="module")
def first(data, tmp_path_factory):
    """A cold-started model (1 epoch) exported with its warm-start checkpoint."""
    model = str(tmp_path_factory.mktemp("first") / "model")
    result = train_local(data, model, {**SMALL, "epochs": 1}, pservers=2, trainers=1,
                         max_retry=0, job_id="ws-first", log=lambda m: None,
                         workdir=str(tmp_path_factory.mktemp("first-work")))
    return model, result


@pytest.mark.slow
def test_export_carries_a_loadable_checkpoint(first):
    model, _ = first
    init = read_init_model(model)
    assert init.pservers == 2
    assert os.path.exists(os.path.join(model, WARM_START_DIR, "_COMPLETE"))
    assert os.listdir(os.path.join(model, WARM_START_DIR, "000")), "sparse table missing"


@pytest.mark.slow
def test_warm_start_continues_the_model(data, first, tmp_path):
    model, cold = first
    lines = []
    warm = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 1}, pservers=2, trainers=1,
                       max_retry=0, job_id="ws-warm", log=lines.append, init_model=model,
                       workdir=str(tmp_path / "work"))
    assert warm.metrics["init_model"] == os.path.abspath(model)
    # the trainer log says where it started from
    with open(os.path.join(os.path.dirname(warm.output_dir), "gang", "attempt-1", "trainer-0.log")) as fh:
        log_text = fh.read()
    assert f"warm start from {os.path.abspath(model)}" in log_text
    cold_e1, warm_e1 = cold.metrics["epochs"][0], warm.metrics["epochs"][0]
    # the same first epoch over the same data starts from a trained model: lower loss, higher AUC
    assert warm_e1["loss"] < cold_e1["loss"] - 0.01, (warm_e1, cold_e1)
    assert warm_e1["auc_trainer0"] > cold_e1["auc_trainer0"] + 0.01, (warm_e1, cold_e1)


@pytest.mark.slow
def test_mismatched_shape_is_refused_before_the_gang(data, first, tmp_path):
    model, _ = first
    with pytest.raises(BadInput) as err:
        train_local(data, str(tmp_path / "m"), {**SMALL, "embedding_dim": 8}, pservers=2, trainers=1,
                    init_model=model)
    assert "embedding_dim is 4 but this run's is 8" in str(err.value)
    with pytest.raises(BadInput) as err:
        train_local(data, str(tmp_path / "m"), SMALL, pservers=1, trainers=1, init_model=model)
    assert "pservers is 2 but this run's is 1" in str(err.value)
    assert not os.path.exists(tmp_path / "m"), "refused runs must not start"


@pytest.mark.slow
def test_the_train_command_warm_starts_and_refuses_a_mismatch_in_one_line(data, first, tmp_path, capsys):
    """``ctr-volcano train --init-model``: the component's ``init_model`` from the command line."""
    from ctr_volcano.app.cli.main import main

    model, _ = first
    base = ["train", "--data", data, "--pservers", "2", "--trainers", "1", "--epochs", "1", "--max-retry", "0",
            "--batch-size", "128", "--config", str(tmp_path / "small.json")]
    (tmp_path / "small.json").write_text(json.dumps({k: v for k, v in SMALL.items()
                                                      if k not in ("batch_size", "learning_rate")}))
    assert main(base + ["--model-out", str(tmp_path / "bad"), "--init-model", model, "--pservers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pservers is 2 but this run's is 1" in err, err
    assert not (tmp_path / "bad").exists()
    assert main(base + ["--model-out", str(tmp_path / "warm"), "--init-model", model]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["init_model"] == os.path.abspath(model) and summary["test"]["auc"] > 0.6, summary


def _meta(**over):
    cfg = {"embedding_dim": 4, "fc_sizes": [32, 16], "hash_buckets": 1000}
    meta = {"schema_version": SCHEMA_VERSION, "hash_buckets": 1000, "config": cfg, "pservers": 2}
    meta.update(over)
    return meta


def _model(tmp_path, meta, ckpt_pservers=2):
    d = tmp_path / "init"
    (d / WARM_START_DIR).mkdir(parents=True)
    (d / "model_meta.json").write_text(json.dumps(meta))
    (d / WARM_START_DIR / "meta.json").write_text(json.dumps({"pservers": ckpt_pservers}))
    return read_init_model(str(d))


@pytest.mark.parametrize("field,old,new", [
    ("schema_version", SCHEMA_VERSION + 1, None),
    ("hash_buckets", 2000, None),
    ("fc_sizes", [64], None),
])
def test_check_compatible_names_both_values(tmp_path, field, old, new):
    meta = _meta()
    if field == "fc_sizes":
        meta["config"]["fc_sizes"] = old
    else:
        meta[field] = old
    init = _model(tmp_path, meta)
    config = {"embedding_dim": 4, "fc_sizes": [32, 16], "hash_buckets": 1000}
    with pytest.raises(WarmStartError) as err:
        check_compatible(init, config, 2, SCHEMA_VERSION)
    here = {"schema_version": SCHEMA_VERSION, "hash_buckets": 1000, "fc_sizes": [32, 16]}[field]
    assert f"its {field} is {old!r} but this run's is {here!r}" in str(err.value)


def test_compatible_model_passes_and_missing_checkpoint_is_refused(tmp_path):
    init = _model(tmp_path, _meta())
    check_compatible(init, {"embedding_dim": 4, "fc_sizes": [32, 16], "hash_buckets": 1000}, 2,
                     SCHEMA_VERSION)
    shutil.rmtree(tmp_path / "init" / WARM_START_DIR)
    with pytest.raises(WarmStartError, match="no warm_start/meta.json"):
        read_init_model(str(tmp_path / "init"))
