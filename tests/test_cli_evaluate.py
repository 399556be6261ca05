"""``ctr-volcano evaluate``: flags and one-line errors (the happy path on a real model is in
test_pipeline_local.py)."""
from __future__ import annotations

import pytest

from ctr_volcano.app.cli import main as cli
from tests.test_evaluate import _write_split


def test_evaluate_verb_is_registered_with_its_flags(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--model", "--data", "--out", "--threshold", "--batch-size"):
        assert flag in out


@pytest.mark.parametrize("case,field", [("no-data", "data"), ("no-model", "model"), ("empty-model", "model")])
def test_evaluate_verb_errors_are_one_line(tmp_path, capsys, case, field):
    data = tmp_path / "prep"
    if case != "no-data":
        _write_split(data / "test")
    model = tmp_path / "model"
    if case == "empty-model":
        model.mkdir()
    rc = cli.main(["evaluate", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"ctr-volcano evaluate: error: --{field}=") and "Traceback" not in err
    assert not (tmp_path / "out" / "metrics.json").exists()
