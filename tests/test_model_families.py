"""Model families (``TrainConfig.model``): each family's numpy forward pass is the Paddle program it
builds, its ``model_config`` is validated once, and on a real gang every family trains, exports, and
its exported scorer reproduces the gang's own test AUC."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.infer import auc, load_model
from ctr_model.models import FAMILIES
from ctr_model.warm_start import WarmStart, WarmStartError, check_compatible

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Builds the family's program in one process (local embedding), runs it on random rows and scores
#: the same rows with the family's numpy forward pass from the program's own parameters.
_PARITY = r"""
import json, sys
from ctr_model.net import prepare_paddle
prepare_paddle()
import numpy as np, paddle
from ctr_model.config import TrainConfig
from ctr_model.features import NUM_DENSE, SPARSE_COLUMNS
from ctr_model.infer import Scorer
from ctr_model.net import EMBEDDING_NAME, build_net, dense_param_names
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    net = build_net(cfg, ps_mode=False)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
scope = paddle.static.global_scope()
rng = np.random.default_rng(0)
for name in dense_param_names(cfg):     # move off the zero biases so every term is exercised
    t = scope.find_var(name).get_tensor()
    t.set(np.asarray(t) + rng.normal(0, 0.1, np.asarray(t).shape).astype("float32"), paddle.CPUPlace())
table = scope.find_var(EMBEDDING_NAME).get_tensor()
table.set(rng.normal(0, 0.3, np.asarray(table).shape).astype("float32"), paddle.CPUPlace())
n = 64
ids = rng.integers(0, cfg.hash_buckets, size=(n, len(SPARSE_COLUMNS)))
dense = rng.normal(0, 1, size=(n, NUM_DENSE)).astype("float32")
feed = {"label": np.zeros((n, 1), "int64"), "dense_input": dense}
for j, name in enumerate(SPARSE_COLUMNS):
    feed[name] = paddle.base.create_lod_tensor(ids[:, j:j + 1].astype("int64"), [[1] * n], paddle.CPUPlace())
(pred,) = exe.run(main, feed=feed, fetch_list=[net.predict], return_numpy=False)
pred = np.asarray(pred)
params = {k: np.asarray(scope.find_var(k).get_tensor()) for k in dense_param_names(cfg)}
scorer = Scorer(meta={"config": cfg.to_dict()}, keys=np.arange(cfg.hash_buckets, dtype=np.uint64),
                rows=np.asarray(table), params=params, config=cfg)
cols = {"I%d" % (i + 1): dense[:, i] for i in range(NUM_DENSE)}
cols.update({name: ids[:, j] for j, name in enumerate(SPARSE_COLUMNS)})
mine = scorer.predict(cols)
print(json.dumps({"max_diff": float(np.abs(mine - pred[:, 1]).max()), "spread": float(pred[:, 1].std())}))
"""


@pytest.mark.parametrize("model,model_config", [("dnn", {}), ("wide_deep", {}), ("deepfm", {}),
                                                ("dcn_v2", {}), ("dcn_v2", {"low_rank": 3, "cross_layers": 2})])
def test_numpy_scorer_is_the_paddle_program(model, model_config):
    cfg = {"model": model, "model_config": model_config, "embedding_dim": 4, "fc_sizes": [8, 4],
           "hash_buckets": 500}
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-c", _PARITY, json.dumps(cfg)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["spread"] > 1e-3, result          # the predictions differ between rows
    assert result["max_diff"] < 2e-5, result


def test_model_config_is_validated_once_naming_the_key_and_the_fix():
    assert TrainConfig().model == "dnn" and TrainConfig().model_config == {}
    assert TrainConfig(model="dcn_v2").model_config == {"cross_layers": 1, "low_rank": 32}
    cases = [({"model": "xdeepfm"}, "config.model='xdeepfm': use one of dnn, wide_deep, deepfm, dcn_v2, esmm, mmoe"),
             ({"model": "dcn_v2", "model_config": {"cross_layer": 2}},
              "config.model_config.cross_layer=2: not a key of model 'dcn_v2'; its keys are: "
              "cross_layers (default 1), low_rank (default 32)"),
             ({"model": "dcn_v2", "model_config": {"cross_layers": 0}},
              "config.model_config.cross_layers=0: use an integer in 1..16"),
             ({"model": "deepfm", "model_config": "x"}, "config.model_config='x': pass a JSON object")]
    for data, message in cases:
        with pytest.raises(ConfigError) as exc:
            TrainConfig.from_dict(data)
        assert str(exc.value).startswith(message), str(exc.value)
    again = TrainConfig.from_dict(json.loads(json.dumps(TrainConfig(model="dcn_v2").to_dict())))
    assert again == TrainConfig(model="dcn_v2")


def test_warm_start_from_another_family_or_shape_is_refused_in_one_line():
    old = TrainConfig(model="deepfm").to_dict()
    init = WarmStart(model_dir="/m", checkpoint="/m/warm_start", pservers=1,
                     meta={"schema_version": 1, "hash_buckets": old["hash_buckets"], "config": old})
    with pytest.raises(WarmStartError) as exc:
        check_compatible(init, TrainConfig(model="dcn_v2").to_dict(), 1, 1)
    assert str(exc.value) == ("init_model='/m': cannot warm-start from it: its model is 'deepfm' but this run's is "
                              "'dcn_v2'; warm-start from a model of the same family or train from scratch")
    dcn = TrainConfig(model="dcn_v2").to_dict()
    init = WarmStart(model_dir="/m", checkpoint="/m/warm_start", pservers=1,
                     meta={"schema_version": 1, "hash_buckets": dcn["hash_buckets"], "config": dcn})
    with pytest.raises(WarmStartError, match="its model_config is .*'cross_layers': 1.* but this run's "
                                             "is .*'cross_layers': 2"):
        check_compatible(init, TrainConfig(model="dcn_v2", model_config={"cross_layers": 2}).to_dict(), 1, 1)
    legacy = {k: v for k, v in TrainConfig().to_dict().items() if k not in ("model", "model_config")}
    check_compatible(WarmStart("/m", "/m/w", {"schema_version": 1, "hash_buckets": legacy["hash_buckets"],
                                              "config": legacy}, 1), TrainConfig().to_dict(), 1, 1)


def test_every_family_is_listed():
    assert FAMILIES == ("dnn", "wide_deep", "deepfm", "dcn_v2", "esmm", "mmoe")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from tests.gang_helpers import write_small_planted

    return write_small_planted(tmp_path_factory.mktemp("planted"))


@pytest.fixture
def job_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("famtest", grace_s=10, poll_s=0.2)


def _test_files(data: str):
    return sorted(os.path.join(data, "test", f) for f in os.listdir(os.path.join(data, "test"))
                  if f.endswith(".parquet"))


@pytest.mark.slow
@pytest.mark.parametrize("model,model_config", [("wide_deep", {}), ("deepfm", {}),
                                                ("dcn_v2", {"cross_layers": 2, "low_rank": 8})])
def test_family_trains_on_a_gang_and_its_export_reproduces_the_gang_auc(planted, job_id, tmp_path,
                                                                        model, model_config):
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    data, oracle = planted
    config = {**SMALL, "epochs": 2, "model": model, "model_config": model_config}
    result = train_local(data, str(tmp_path / "model"), config, pservers=2, trainers=2, max_retry=0,
                         workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None)
    assert result.metrics["epochs"][0]["examples"] == 16_000
    scorer = load_model(result.model_dir)
    assert scorer.meta["config"]["model"] == model
    assert scorer.meta["config"]["model_config"] == TrainConfig.from_dict(config).model_config
    ys, ps = zip(*scorer.predict_files(_test_files(data), batch_size=1000))
    test_auc = auc(np.concatenate(ys), np.concatenate(ps))
    assert test_auc == pytest.approx(result.metrics["test"]["auc"], abs=1e-5)
    assert test_auc > 0.7, f"{model} did not learn: test AUC {test_auc:.3f} (oracle {oracle:.3f})"


@pytest.mark.slow
def test_cli_trains_the_family_it_is_given(planted, tmp_path, capsys):
    from ctr_volcano.app.cli.main import main

    data, _ = planted
    config = tmp_path / "small.json"
    from tests.gang_helpers import SMALL

    config.write_text(json.dumps(SMALL))
    rc = main(["train", "--data", data, "--model-out", str(tmp_path / "m"), "--pservers", "1",
               "--trainers", "1", "--epochs", "1", "--config", str(config), "--model", "dcn_v2",
               "--model-config", '{"cross_layers": 2, "low_rank": 0}', "--workdir", str(tmp_path / "w")])
    assert rc == 0, capsys.readouterr().err[-2000:]
    meta = json.loads((tmp_path / "m" / "model_meta.json").read_text())
    assert meta["config"]["model"] == "dcn_v2"
    assert meta["config"]["model_config"] == {"cross_layers": 2, "low_rank": 0}
    assert sorted(np.load(tmp_path / "m" / "dense.npz").files)[:4] == ["cross0.b", "cross0.w", "cross1.b", "cross1.w"]


@pytest.mark.slow
@pytest.mark.parametrize("model,model_config", [("wide_deep", {}), ("deepfm", {}), ("dcn_v2", {"low_rank": 4})])
def test_family_resumes_after_a_killed_trainer(planted, job_id, tmp_path, model, model_config):
    import threading

    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL, kill_when_checkpointed

    data, _ = planted
    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "trainer", 1, box))
    killer.start()
    config = {**SMALL, "epochs": 3, "model": model, "model_config": model_config}
    result = train_local(data, str(tmp_path / "model"), config, max_retry=1, workdir=workdir,
                         job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box and result.attempts == 2
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    scorer = load_model(result.model_dir)
    ys, ps = zip(*scorer.predict_files(_test_files(data), batch_size=1000))
    assert auc(np.concatenate(ys), np.concatenate(ps)) == pytest.approx(result.metrics["test"]["auc"], abs=1e-5)
    assert result.metrics["test"]["auc"] > 0.7


@pytest.mark.slow
def test_warm_start_continues_a_family_and_refuses_another(planted, tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    data, _ = planted
    deepfm = {**SMALL, "epochs": 1, "model": "deepfm"}
    first = train_local(data, str(tmp_path / "first"), deepfm, pservers=1, trainers=1, max_retry=0,
                        job_id="fam-first", log=lambda m: None, workdir=str(tmp_path / "w1"))
    warm = train_local(data, str(tmp_path / "warm"), deepfm, pservers=1, trainers=1, max_retry=0,
                       job_id="fam-warm", log=lambda m: None, workdir=str(tmp_path / "w2"),
                       init_model=first.model_dir)
    cold_e1, warm_e1 = first.metrics["epochs"][0], warm.metrics["epochs"][0]
    assert warm_e1["loss"] < cold_e1["loss"] - 0.01, (warm_e1, cold_e1)
    for other in ({"model": "dcn_v2"}, {"model": "wide_deep"}):
        with pytest.raises(BadInput) as err:
            train_local(data, str(tmp_path / "m"), {**deepfm, **other}, pservers=1, trainers=1,
                        init_model=first.model_dir)
        assert len(str(err.value).splitlines()) == 1
        assert f"its model is 'deepfm' but this run's is '{other['model']}'" in str(err.value)
    assert not os.path.exists(tmp_path / "m"), "refused runs must not start"


@pytest.mark.slow
def test_champion_gate_compares_models_of_different_families(planted, tmp_path):
    from ctr_volcano.retraining.gate import compare
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    data, _ = planted
    dirs = {}
    for model in ("dnn", "dcn_v2"):
        dirs[model] = train_local(data, str(tmp_path / model), {**SMALL, "epochs": 1, "model": model},
                                  pservers=1, trainers=1, max_retry=0, job_id=f"fam-gate-{model}",
                                  log=lambda m: None, workdir=str(tmp_path / f"w-{model}")).model_dir
    result = compare(dirs["dcn_v2"], dirs["dnn"], data, str(tmp_path / "gate"), min_auc=0.5, tolerance=0.5)
    assert result["challenger"]["rows"] == result["champion"]["rows"] == 4_000
    own = {m: load_model(d) for m, d in dirs.items()}
    for role, model in (("challenger", "dcn_v2"), ("champion", "dnn")):
        ys, ps = zip(*own[model].predict_files(_test_files(data)))
        assert result[role]["auc"] == pytest.approx(auc(np.concatenate(ys), np.concatenate(ps)), abs=1e-6)
    assert result["decision"]["publish"]
