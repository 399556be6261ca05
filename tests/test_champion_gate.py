"""Champion/challenger gate: the rule, and both models scored on the same real split."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from ctr_volcano.errors import BadInput
from ctr_volcano.retraining.gate import compare, decide, render_markdown
from ctr_volcano.training.local.backend import train_local
from tools.planted_prep import write_planted_prep


@pytest.mark.parametrize("challenger,champion,publish,words", [
    (0.71, None, True, "no champion yet"),
    (0.69, None, False, "< min_auc"),
    (0.749, 0.75, True, ">= champion AUC 0.7500 - tolerance"),
    (0.747, 0.75, False, "< champion AUC 0.7500 - tolerance"),
    (0.80, 0.75, True, ">= champion"),
    (0.69, 0.60, False, "< min_auc"),        # better than a bad champion is not enough
])
def test_decide(challenger, champion, publish, words):
    d = decide(challenger, champion, min_auc=0.7, tolerance=0.002)
    assert d.publish is publish and words in d.reason


@pytest.mark.parametrize("kw,field", [({"min_auc": 1.5}, "min_auc"), ({"tolerance": -0.1}, "tolerance")])
def test_decide_refuses_bad_thresholds(kw, field):
    args = {"min_auc": 0.7, "tolerance": 0.0, **kw}
    with pytest.raises(BadInput) as err:
        decide(0.8, None, **args)
    assert err.value.field == field


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    write_planted_prep(str(root / "data"), train_rows=8_000, test_rows=2_000, shards=1, seed=3)
    cfg = {"fc_sizes": [16], "embedding_dim": 4, "batch_size": 64, "learning_rate": 0.01, "epochs": 1,
           "sparse_shards": 2}
    train_local(str(root / "data"), str(root / "good"), cfg, pservers=1, trainers=1, max_retry=0,
                job_id="gate-good", log=lambda m: None, workdir=str(root / "work"))
    # a broken challenger: the same model with its output layer zeroed scores every row alike
    shutil.copytree(root / "good", root / "broken")
    dense = dict(np.load(root / "good" / "dense.npz"))
    dense["out.w"] = np.zeros_like(dense["out.w"])
    np.savez(root / "broken" / "dense.npz", **dense)
    return root


@pytest.mark.slow
def test_compare_scores_both_on_the_same_split(trained, tmp_path):
    root = trained
    result = compare(str(root / "broken"), str(root / "good"), str(root / "data"), str(tmp_path),
                     min_auc=0.5, tolerance=0.002)
    d = result["decision"]
    assert not d["publish"] and d["champion_auc"] > 0.6 and d["challenger_auc"] == pytest.approx(0.5)
    assert result["challenger"]["rows"] == result["champion"]["rows"] == 2_000
    assert json.loads((tmp_path / "gate.json").read_text())["decision"] == d
    assert os.path.isfile(tmp_path / "champion" / "report.html")
    md = render_markdown(result)
    assert "REFUSED (champion unchanged)" in md and "| auc | 0.5000 |" in md
    # the good model against itself passes; first run (no champion) is decided by min_auc alone
    same = compare(str(root / "good"), str(root / "good"), str(root / "data"), str(tmp_path / "s"),
                   min_auc=0.5, tolerance=0.0)
    assert same["decision"]["publish"] and same["decision"]["reason"].startswith("challenger AUC")
    first = compare(str(root / "good"), None, str(root / "data"), str(tmp_path / "f"), min_auc=0.99,
                    tolerance=0.0)
    assert not first["decision"]["publish"] and first["champion"] is None


def test_decide_names_the_task_it_gates_on():
    d = decide(0.71, 0.75, min_auc=0.7, tolerance=0.002, task="purchase")
    assert not d.publish and d.task == "purchase"
    assert d.reason == "challenger purchase AUC 0.7100 < champion purchase AUC 0.7500 - tolerance 0.002 on the same split"


@pytest.mark.parametrize("spec,task,ok", [
    ("", "", True), ("", "label", True), ("", "purchase", False),
    (json.dumps({"format": "csv", "header": True, "labels": ["click", "purchase"],
                 "depends_on": {"purchase": "click"}, "categorical": [{"name": "ad"}]}), "purchase", True),
    (json.dumps({"format": "csv", "header": True, "labels": ["click", "purchase"],
                 "categorical": [{"name": "ad"}]}), "buy", False),
])
def test_an_unknown_gate_task_is_refused_before_any_run(spec, task, ok):
    from ctr_volcano.retraining.gate import check_gate_task

    if ok:
        check_gate_task(spec, task)
        return
    with pytest.raises(BadInput) as err:
        check_gate_task(spec, task)
    assert err.value.field == "gate_task" and "gate on a label of the feature spec" in str(err.value)


@pytest.mark.slow
def test_a_single_task_model_gates_on_its_label_and_refuses_another(trained, tmp_path):
    root = trained
    same = compare(str(root / "good"), str(root / "good"), str(root / "data"), str(tmp_path / "s"),
                   min_auc=0.5, tolerance=0.0, task="label")
    assert same["decision"]["publish"] and same["decision"]["reason"].startswith("challenger label AUC")
    with pytest.raises(BadInput, match="has no task 'purchase'"):
        compare(str(root / "good"), None, str(root / "data"), str(tmp_path / "p"), min_auc=0.5, tolerance=0.0,
                task="purchase")
