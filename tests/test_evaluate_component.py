"""The gate and publish components' own logic, called in-process (``python_func``)."""
from __future__ import annotations

import json

import pytest
from kfp import dsl

from components.evaluate import check_auc_gate, publish_model


@pytest.mark.parametrize("auc,min_auc,expect", [(0.75, 0.7, True), (0.7, 0.7, True), (0.69, 0.7, False),
                                                (0.5, 0.0, True), (0.99, 1.0, False)])
def test_gate(auc, min_auc, expect, capsys):
    assert check_auc_gate.python_func(auc=auc, min_auc=min_auc) is expect
    assert ("PASSED" if expect else "BLOCKED") in capsys.readouterr().err   # the log line


def test_gate_refuses_a_threshold_outside_0_1():
    from ctr_volcano.errors import BadInput, exit_code_of

    with pytest.raises(BadInput, match="min_auc=1.5: use an AUC threshold in") as info:
        check_auc_gate.python_func(auc=0.8, min_auc=1.5)
    assert info.value.field == "min_auc" and exit_code_of(info.value) == 2


def test_publish_copies_the_model_and_marks_it_approved(tmp_path):
    src = tmp_path / "model"
    (src / "000").mkdir(parents=True)
    (src / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
    (src / "000" / "part-0.gz").write_bytes(b"\x1f\x8b")
    out = dsl.Model(uri=str(tmp_path / "published"))
    publish_model.python_func(model=dsl.Model(uri=str(src)), auc=0.8, min_auc=0.7, published_model=out)
    assert json.loads((tmp_path / "published" / "model_meta.json").read_text()) == {"schema_version": 1}
    assert (tmp_path / "published" / "000" / "part-0.gz").read_bytes() == b"\x1f\x8b"
    assert out.metadata == {"approved": True, "auc": 0.8, "min_auc": 0.7, "inference_service": False}  # local
