"""The ``train`` verb's argument handling (no gang is started: every case fails at the boundary)."""
from __future__ import annotations

from ctr_model.synthetic import write_planted_prep
from ctr_volcano.app.cli.main import main


def test_missing_data_dir_is_a_clear_error(tmp_path, capsys):
    rc = main(["train", "--data", str(tmp_path / "nope"), "--model-out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--data=" in err and "ctr-volcano prep" in err


def test_bad_hyper_parameter_names_the_flag(tmp_path, capsys):
    write_planted_prep(str(tmp_path / "p"), train_rows=40, test_rows=10, shards=2)
    rc = main(["train", "--data", str(tmp_path / "p"), "--model-out", str(tmp_path / "m"), "--epochs", "0"])
    assert rc == 2
    assert "--epochs=0" in capsys.readouterr().err


def test_more_trainers_than_shards_is_refused(tmp_path, capsys):
    write_planted_prep(str(tmp_path / "p"), train_rows=40, test_rows=10, shards=2)
    rc = main(["train", "--data", str(tmp_path / "p"), "--model-out", str(tmp_path / "m"),
               "--trainers", "3"])
    assert rc == 2
    assert "trainers=3" in capsys.readouterr().err
