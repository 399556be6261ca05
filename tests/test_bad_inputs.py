"""Bad inputs are refused up front, with one line naming the field, the value and the fix.

Each test here was written against a defect found by trying the product as a new user would: the
error came only after the long work, or not at all.
"""
from __future__ import annotations

import json
import time

import pytest

from ctr_volcano.errors import BadInput
from ctr_volcano.training.local.backend import train_local
from tools.planted_prep import write_planted_prep


@pytest.fixture(scope="module")
def prep_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("prep")
    write_planted_prep(str(d), train_rows=200, test_rows=50, shards=2)
    return d


def _copy_with_test_schema_version(prep_dir, tmp_path, version):
    import shutil

    dst = tmp_path / "prep"
    shutil.copytree(prep_dir, dst)
    schema = dst / "test" / "schema.json"
    doc = json.loads(schema.read_text())
    doc["schema_version"] = version
    schema.write_text(json.dumps(doc))
    return dst


def test_train_refuses_a_bad_test_split_before_training(prep_dir, tmp_path):
    data = _copy_with_test_schema_version(prep_dir, tmp_path, 7)
    t0 = time.time()
    with pytest.raises(BadInput, match=r"test.*schema_version"):
        train_local(str(data), str(tmp_path / "model"), workdir=str(tmp_path / "work"), log=lambda m: None)
    assert time.time() - t0 < 10
    assert not (tmp_path / "work" / "gang").exists(), "a gang was started for unusable data"


# ---------------------------------------------------------------------------------------------
# prep

def _sample_lines(sample_dir, n):
    import gzip

    with gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt") as fh:
        return [next(fh).rstrip("\n") for _ in range(n)]


def test_failed_reprep_leaves_no_stale_stats_and_no_empty_split_dirs(sample_dir, tmp_path):
    from ctr_volcano.data.prep import PrepConfig, prep

    good = tmp_path / "good.tsv"
    good.write_text("\n".join(_sample_lines(sample_dir, 200)) + "\n")
    out = tmp_path / "out"
    prep([str(good)], str(out), PrepConfig(shards=2, test_shards=1))
    assert (out / "stats.json").is_file()
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(["1\t2\t3"] * 50 + _sample_lines(sample_dir, 10)) + "\n")
    with pytest.raises(BadInput, match="max_bad_fraction"):
        prep([str(bad)], str(out), PrepConfig(shards=2, test_shards=1))
    assert not (out / "stats.json").exists(), "stats.json of the previous run describes deleted shards"
    assert not (out / "train").exists() and not (out / "test").exists()


def test_a_ten_megabyte_categorical_value_is_accepted(sample_dir, tmp_path):
    from ctr_volcano.data.prep import PrepConfig, prep

    lines = _sample_lines(sample_dir, 20)
    fields = lines[7].split("\t")
    fields[20] = "x" * (10 << 20)
    lines[7] = "\t".join(fields)
    raw = tmp_path / "long.tsv"
    raw.write_text("\n".join(lines) + "\n")
    stats = prep([str(raw)], str(tmp_path / "out"), PrepConfig(max_bad_fraction=0.0, shards=1, test_shards=1))
    assert stats["rows_rejected"] == 0 and stats["rows_train"] + stats["rows_test"] == 20


def test_a_line_longer_than_the_block_names_the_limit(sample_dir, tmp_path):
    from ctr_volcano.data.prep import PrepConfig, prep

    lines = _sample_lines(sample_dir, 5)
    fields = lines[2].split("\t")
    fields[20] = "x" * (3 << 20)
    lines[2] = "\t".join(fields)
    raw = tmp_path / "long.tsv"
    raw.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput, match=r"long.tsv:3.*block.*--block-mb"):
        prep([str(raw)], str(tmp_path / "out"), PrepConfig(block_bytes=1 << 20))


def test_a_header_line_is_named_as_such(sample_dir, tmp_path):
    from ctr_model.features import RAW_COLUMNS
    from ctr_volcano.data.prep import PrepConfig, prep

    raw = tmp_path / "with_header.tsv"
    raw.write_text("\n".join(["\t".join(RAW_COLUMNS)] + _sample_lines(sample_dir, 50)) + "\n")
    with pytest.raises(BadInput, match=r"with_header.tsv:1.*header"):
        prep([str(raw)], str(tmp_path / "out"), PrepConfig(max_bad_fraction=0.0))


# ---------------------------------------------------------------------------------------------
# outputs, validation gaps, leaks and flag names (the CLI's one-line errors)

def _cli(capsys, *argv):
    from ctr_volcano.app.cli.main import main

    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def test_unwritable_model_out_is_refused_before_training(prep_dir, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, err = _cli(capsys, "train", "--data", str(prep_dir), "--model-out", str(blocker / "model"),
                   "--workdir", str(tmp_path / "work"))
    assert rc == 2 and err.startswith("ctr-volcano train: error: --model-out=") and len(err.splitlines()) == 1
    assert not (tmp_path / "work" / "gang").exists()


def test_unwritable_evaluate_out_is_refused_before_scoring(tmp_path, capsys):
    from tests.test_evaluate import _write_split

    _write_split(tmp_path / "prep" / "test")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, err = _cli(capsys, "evaluate", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "prep"),
                   "--out", str(blocker / "out"))
    assert rc == 2 and err.startswith("ctr-volcano evaluate: error: --out=") and len(err.splitlines()) == 1


def test_evaluate_refuses_batch_size_zero(tmp_path, capsys):
    rc, err = _cli(capsys, "evaluate", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"),
                   "--out", str(tmp_path / "o"), "--batch-size", "0")
    assert rc == 2 and "--batch-size=0" in err


def _fake_model(model_dir, schema_version=1, dense_bytes=None):
    import numpy as np

    from ctr_model.features import NUM_DENSE, NUM_SPARSE

    model_dir.mkdir(parents=True)
    dim, fc = 2, [3]
    width = NUM_DENSE + NUM_SPARSE * dim
    dense = {"fc0.w": np.zeros((width, 3), np.float32), "fc0.b": np.zeros(3, np.float32),
             "out.w": np.zeros((3, 2), np.float32), "out.b": np.zeros(2, np.float32)}
    np.savez(model_dir / "dense.npz", **dense)
    if dense_bytes is not None:
        (model_dir / "dense.npz").write_bytes(dense_bytes)
    np.savez(model_dir / "sparse.npz", keys=np.zeros(0, np.uint64), rows=np.zeros((0, dim), np.float32))
    (model_dir / "model_meta.json").write_text(json.dumps(
        {"schema_version": schema_version, "hash_buckets": 1000,
         "config": {"embedding_dim": dim, "fc_sizes": fc}}))
    return model_dir


def test_a_model_of_another_schema_version_is_refused(tmp_path):
    from ctr_model.infer import ModelError, load_model

    load_model(str(_fake_model(tmp_path / "ok")))
    with pytest.raises(ModelError, match=r"schema_version 7.*retrain"):
        load_model(str(_fake_model(tmp_path / "v7", schema_version=7)))


def test_a_corrupt_npz_is_named(tmp_path):
    from ctr_model.infer import ModelError, load_model

    model = _fake_model(tmp_path / "m", dense_bytes=b"PK\x03\x04 not a zip at all")
    with pytest.raises(ModelError, match=r"dense\.npz': unreadable"):
        load_model(str(model))


@pytest.mark.parametrize("argv, flag", [
    (["--ttl", "-5"], "--ttl=-5"),
    (["--trainer-memory", "0"], "--trainer-memory"),
    (["--gpus", "-1"], "--gpus=-1"),
    (["--max-retry", "-1"], "--max-retry=-1"),
])
def test_render_job_refuses_and_names_the_flag(argv, flag, capsys):
    rc, err = _cli(capsys, "render-job", "--namespace", "ml", "--image", "reg.local/t:1", "--pvc-name", "c", *argv)
    assert rc == 2 and flag in err and len(err.splitlines()) == 1, err


def test_render_job_keeps_the_job_with_ttl_minus_one(capsys):
    from ctr_volcano.app.cli.main import main

    assert main(["render-job", "--namespace", "ml", "--image", "reg.local/t:1", "--pvc-name", "c", "--ttl", "-1"]) == 0
    assert "ttlSecondsAfterFinished" not in capsys.readouterr().out


def test_gpus_on_pservers_are_refused():
    from ctr_volcano.training.volcano.spec import Resources, TrainJobSpec

    with pytest.raises(BadInput, match="pserver_resources.gpu"):
        TrainJobSpec(name="ctr-x", namespace="ml", image="reg.local/t:1", data_dir="/d", output_dir="/o",
                     pserver_resources=Resources(gpu=1))


@pytest.mark.parametrize("argv, flag", [
    (["--trainers", "0"], "--trainers=0"),
    (["--max-retry", "-1"], "--max-retry=-1"),
    (["--lr", "-1"], "--lr=-1"),
])
def test_refused_train_names_the_flag_and_leaves_no_temp_dir(argv, flag, prep_dir, tmp_path, capsys,
                                                             monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    rc, err = _cli(capsys, "train", "--data", str(prep_dir), "--model-out", str(tmp_path / "m"), *argv)
    assert rc == 2 and flag in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("ctr-train-*"))


def test_render_job_without_a_hand_off_is_refused_like_the_launcher_refuses_it(capsys):
    """render-job builds the Job through the launcher's own path (StepParams -> build_spec), so a
    Job the launcher would refuse (no claim, no object store) is refused here too, naming the flag."""
    rc, err = _cli(capsys, "render-job", "--namespace", "ml", "--image", "reg.local/t:1")
    assert rc == 2 and "--pvc-name" in err and "artifact_store='s3'" in err and len(err.splitlines()) == 1


@pytest.fixture
def without_paddle(monkeypatch):
    """This process as the base install sees it: ``paddle`` cannot be found."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "paddle" else real(name, *a))


def test_local_training_without_paddle_names_the_extra_before_any_work(without_paddle, tmp_path, capsys):
    rc, err = _cli(capsys, "train", "--data", str(tmp_path / "nope"), "--model-out", str(tmp_path / "m"))
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "--backend='local'" in err and "pip install 'ctr-volcano[train]'" in err
    assert not (tmp_path / "m").exists()   # refused before the data was even looked at


def test_run_and_backfill_without_paddle_name_the_extra(without_paddle, tmp_path, capsys):
    rc, err = _cli(capsys, "run", "--workdir", str(tmp_path / "w"))
    assert rc == 2 and "pip install 'ctr-volcano[train]'" in err and len(err.splitlines()) == 1
    rc, err = _cli(capsys, "run", "--days", "2", "--start-date", "2026-01-01", "--data", str(tmp_path / "day={date}"),
                   "--workdir", str(tmp_path / "w"))
    assert rc == 2 and "pip install 'ctr-volcano[train]'" in err
    assert not (tmp_path / "w" / "summary.json").exists()
