"""The ``train`` verb's argument handling (no gang is started: every case fails at the boundary)."""
from __future__ import annotations

from ctr_volcano.app.cli.main import main
from tools.planted_prep import write_planted_prep


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


def test_bad_model_or_model_config_is_refused_in_one_line(tmp_path, capsys):
    write_planted_prep(str(tmp_path / "p"), train_rows=40, test_rows=10, shards=2)
    base = ["train", "--data", str(tmp_path / "p"), "--model-out", str(tmp_path / "m")]
    cases = [(["--model", "dcn_v2", "--model-config", '{"cross_layers": 0}'],
              "config.model_config.cross_layers=0: use an integer in 1..16"),
             (["--model", "deepfm", "--model-config", '{"cross_layers": 2}'],
              "config.model_config.cross_layers=2: not a key of model 'deepfm'"),
             (["--model-config", "{nope"], "--model-config='{nope': not valid JSON")]
    for extra, message in cases:
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "m").exists()


def test_component_parameters_reach_the_training_config():
    import pytest

    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.params import StepParams, train_config_of

    params = StepParams.from_component(model_family="dcn_v2", model_config='{"low_rank": 8}')
    assert train_config_of(params)["model"] == "dcn_v2"
    assert train_config_of(params)["model_config"] == {"low_rank": 8}
    unset = StepParams.from_component(model_family="", model_config="", config={"model": "deepfm"})
    assert train_config_of(unset)["model"] == "deepfm" and "model_config" not in train_config_of(unset)
    with pytest.raises(BadInput, match=r"model_config='\[1\]': pass a JSON object"):
        StepParams.from_component(model_config="[1]")
