"""The whole pipeline, for real, through ``kfp.local``: ``ctr-volcano run`` on the committed sample.

One run of the installed console script -- the Quick start's main job, only with the gate opened --
does prep -> 2x2 Paddle parameter-server gang -> evaluate -> gate -> publish (about 40 s; the gang's
start-up dominates, so a smaller sample would not be faster but would learn nothing). The other
tests reuse its outputs (the real model and test split) to check the evaluation against
scikit-learn, the ``evaluate`` verb, and the AUC gate both ways.
"""

import glob
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

pytestmark = pytest.mark.slow

TINY_ROWS = 4000


def _tiny_raw(sample_dir: Path, out: Path, rows: int = TINY_ROWS) -> Path:
    """The first ``rows`` lines of the committed sample, as one TSV file."""
    files = sorted(p for p in sample_dir.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p.suffix in (".tsv", ".txt", ".gz", ".csv"))
    assert files, f"no raw files under {sample_dir}"
    out.mkdir(parents=True, exist_ok=True)
    dst = out / "tiny.tsv"
    n = 0
    with open(dst, "wb") as w:
        for f in files:
            opener = gzip.open if f.suffix == ".gz" else open
            with opener(f, "rb") as r:
                for line in r:
                    w.write(line)
                    n += 1
                    if n >= rows:
                        return dst
    return dst


def _our_processes(marker: str):
    """PIDs whose command line mentions ``marker`` (the run's directory)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.fixture(autouse=True)
def _task_tmpdir(tmp_path, monkeypatch):
    """kfp.local writes each task's component source to ``$(mktemp -d)`` and never removes it: keep
    those under the test's tmp_path (these in-process runs train nothing, so path length is no issue)."""
    scratch = tmp_path / "tasktmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, sample_dir):
    tmp = tmp_path_factory.mktemp("run")
    workdir = tmp / "workdir"
    exe = shutil.which("ctr-volcano") or "ctr-volcano"
    proc = subprocess.run([exe, "run", "--workdir", str(workdir), "-p", "min_auc=0.0"],
                          capture_output=True, text=True, timeout=600, cwd=tmp)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    summary = json.loads((workdir / "summary.json").read_text())
    return {"summary": summary, "workdir": workdir, "stdout": proc.stdout, "stderr": proc.stderr}


def _task_dir(summary, task):
    (d,) = glob.glob(os.path.join(summary["run_dir"], "outputs", "*", task))
    return Path(d)


def test_run_writes_a_sane_summary(local_run):
    s = local_run["summary"]
    # The sample comes from a planted model whose own AUC is 0.775 (data/sample/oracle.json) and whose
    # log loss on the test split's 20,000 rows is 0.4658; the demo's settings gave AUC 0.766 and log
    # loss 0.4723-0.4728 in five runs (docs/training.md). A model that learned nothing scores ~0.5
    # and the prior's log loss is 0.563.
    assert 0.74 < s["auc"] < 0.80, s["auc"]
    assert 0.4658 < s["logloss"] < 0.4658 + 0.015, s["logloss"]
    assert s["rows"] == 20_000 and 0.15 < s["positive_rate"] < 0.35
    metrics = json.loads(Path(s["metrics"]).read_text())
    assert abs(metrics["mean_prediction"] - metrics["positive_rate"]) < 0.01, metrics   # calibrated
    assert s["params"]["backend"] == "local" and s["data"].endswith("data/sample")
    model, report = Path(s["model"]), Path(s["report"])
    assert model.is_dir() and (model / "model_meta.json").is_file()
    assert report.is_file() and report.read_text().count("<svg") == 2
    assert Path(s["metrics"]).is_file()
    # metrics.json names the files it describes where they are now, not in the run's temp dirs
    assert metrics["report"] == s["report"] and metrics["model_dir"] == s["model"]
    assert f"AUC {s['auc']:.4f}" in local_run["stdout"]
    # quiet: the summary, a line per step and where the log is; kfp's output and warnings are in the log
    printed = (local_run["stdout"] + local_run["stderr"]).splitlines()
    assert len(printed) <= 12 and "Warning" not in "\n".join(printed), printed
    log = Path(s["run_dir"]) / "run.log"
    assert str(log) in local_run["stderr"] and "Executing task 'train-ctr'" in log.read_text()
    # kfp.local removed the run's workspace; no process of the run outlives it
    assert not (Path(s["run_dir"]) / "workspace").exists()
    assert _our_processes(s["run_dir"]) == []


def test_run_gate_passed_and_published(local_run):
    s = local_run["summary"]
    assert s["passed_gate"] is True and s["min_auc"] == 0.0
    published = _task_dir(s, "publish-model") / "published_model"
    assert (published / "model_meta.json").is_file()
    out = json.loads((_task_dir(s, "publish-model") / "executor_output.json").read_text())
    meta = out["artifacts"]["published_model"]["artifacts"][0]["metadata"]
    assert meta["approved"] is True and meta["auc"] == pytest.approx(s["auc"])


def test_pipeline_auc_matches_sklearn_on_the_real_model(local_run):
    from sklearn.metrics import log_loss, roc_auc_score

    from ctr_model.infer import load_model

    s = local_run["summary"]
    test_split = _task_dir(s, "prepare-ctr-data") / "test_data"
    scorer = load_model(s["model"])
    ys, ps = [], []
    for y, p in scorer.predict_files(sorted(map(str, test_split.glob("part-*.parquet"))), batch_size=500):
        ys.append(y)
        ps.append(p)
    y, p = np.concatenate(ys), np.concatenate(ps)
    assert y.size == s["rows"]
    assert s["auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-6)
    assert s["logloss"] == pytest.approx(log_loss(y, p), abs=1e-6)


def test_evaluate_verb_reproduces_the_pipeline_metrics(local_run, tmp_path):
    from ctr_volcano.app.cli import main as cli

    s = local_run["summary"]
    test_split = _task_dir(s, "prepare-ctr-data") / "test_data"
    assert cli.main(["evaluate", "--model", s["model"], "--data", str(test_split),
                     "--out", str(tmp_path / "same")]) == 0
    m = json.loads((tmp_path / "same" / "metrics.json").read_text())
    assert m["auc"] == pytest.approx(s["auc"], abs=1e-12) and m["rows"] == s["rows"]
    assert (tmp_path / "same" / "report.html").is_file()
    # another batch size: float32 matrix products round differently per batch shape (the scorer is
    # within 6e-8 of float64, docs/performance.md), so the AUC agrees to that, not to the last bit
    assert cli.main(["evaluate", "--model", s["model"], "--data", str(test_split),
                     "--out", str(tmp_path / "other"), "--batch-size", "333"]) == 0
    other = json.loads((tmp_path / "other" / "metrics.json").read_text())
    assert other["auc"] == pytest.approx(s["auc"], abs=1e-6) and other["rows"] == s["rows"]


def test_gate_runs_publish_only_when_auc_clears_min_auc(local_run, tmp_path):
    """The gate under kfp.local, both ways, with the real model and split (no training).

    The components are loaded from the committed YAML files, as users who load components from files
    do, so this also runs those files for real.
    """
    from kfp import components, dsl, local

    repo = Path(__file__).resolve().parents[1]
    evaluate_ctr, check_auc_gate, publish_model = (
        components.load_component_from_file(str(repo / "components" / f"{name}.yaml"))
        for name in ("evaluate_ctr", "check_auc_gate", "publish_model"))

    s = local_run["summary"]
    test_split = str(_task_dir(s, "prepare-ctr-data") / "test_data")

    Out = NamedTuple("Out", [("auc", float), ("passed", bool)])

    @dsl.pipeline(name="gate-check")
    def gate_check(model_uri: str, data_uri: str, min_auc: float) -> Out:
        model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
        data = dsl.importer(artifact_uri=data_uri, artifact_class=dsl.Dataset)
        ev = evaluate_ctr(model=model.output, test_data=data.output)
        gate = check_auc_gate(auc=ev.outputs["Output"], min_auc=min_auc)
        with dsl.If(gate.output == True):  # noqa: E712
            publish_model(model=model.output, auc=ev.outputs["Output"], min_auc=min_auc)
        return Out(auc=ev.outputs["Output"], passed=gate.output)

    for min_auc, expect in ((0.0, True), (1.0, False)):
        root = tmp_path / f"min_auc_{min_auc}"
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "outputs"),
                   workspace_root=str(root / "workspace"))
        res = gate_check(model_uri=s["model"], data_uri=test_split, min_auc=min_auc)
        assert res.outputs["passed"] is expect
        assert res.outputs["auc"] == pytest.approx(s["auc"], abs=1e-12)
        published = glob.glob(str(root / "outputs" / "*" / "publish-model" / "published_model"))
        assert bool(published) is expect, (min_auc, published)


def test_evaluate_step_is_cached_by_kfp_local(local_run, tmp_path):
    """evaluate_ctr writes files at its Metrics/ClassificationMetrics paths, so kfp.local can cache it."""
    from kfp import dsl, local

    from components.evaluate import evaluate_ctr

    s = local_run["summary"]
    test_split = str(_task_dir(s, "prepare-ctr-data") / "test_data")

    @dsl.pipeline(name="cache-check")
    def cache_check(model_uri: str, data_uri: str) -> float:
        model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
        data = dsl.importer(artifact_uri=data_uri, artifact_class=dsl.Dataset)
        return evaluate_ctr(model=model.output, test_data=data.output).outputs["Output"]

    aucs = []
    for i in range(2):
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "outputs"),
                   workspace_root=str(tmp_path / f"workspace{i}"), enable_caching=True,
                   cache_root=str(tmp_path / "cache"))
        aucs.append(cache_check(model_uri=s["model"], data_uri=test_split).output)
    assert aucs[0] == aucs[1] == pytest.approx(s["auc"], abs=1e-12)
    executed = glob.glob(str(tmp_path / "outputs" / "*" / "evaluate-ctr" / "executor_output.json"))
    assert len(executed) == 1, executed  # the second run was served from the cache


def test_evaluate_component_outputs_for_the_ui(local_run, tmp_path):
    """What the KFP UI reads: scalar metrics, ROC points, a 2x2 confusion matrix, an HTML file."""
    from kfp import dsl

    from components.evaluate import evaluate_ctr

    s = local_run["summary"]
    test_split = str(_task_dir(s, "prepare-ctr-data") / "test_data")
    metrics, roc = dsl.Metrics(uri=str(tmp_path / "m")), dsl.ClassificationMetrics(uri=str(tmp_path / "c"))
    report = dsl.HTML(uri=str(tmp_path / "r.html"))
    auc = evaluate_ctr.python_func(model=dsl.Model(uri=s["model"]), test_data=dsl.Dataset(uri=test_split),
                                   metrics=metrics, classification=roc, report=report, threshold=0.3)
    assert auc == pytest.approx(s["auc"], abs=1e-12)
    assert set(metrics.metadata) == {"auc", "logloss", "rows", "positive_rate", "mean_prediction", "accuracy"}
    assert json.loads((tmp_path / "m").read_text())["auc"] == auc  # a file at the path: cacheable
    points = roc.metadata["confidenceMetrics"]
    assert 2 < len(points) <= 201
    assert {"confidenceThreshold", "recall", "falsePositiveRate"} <= set(points[0])
    cm = roc.metadata["confusionMatrix"]
    assert [a["displayName"] for a in cm["annotationSpecs"]] == ["no click", "click"]
    assert sum(sum(r["row"]) for r in cm["rows"]) == s["rows"]
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_the_run_scratch_dir_reaches_the_steps_and_this_process_keeps_its_tmpdir(tmp_path):
    import threading

    from ctr_volcano.app.local_run import run_in_kfp_local

    before = os.environ.get("TMPDIR")
    samples, done = set(), threading.Event()

    def sample():   # what any other thread of this process sees while the run goes on
        while not done.wait(0.005):
            samples.add(os.environ.get("TMPDIR"))

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        outputs, _ = run_in_kfp_local("tests.tmpdir_pipeline:tmpdir_pipeline", {}, tmp_path / "run")
    finally:
        done.set()
        watcher.join()
    seen = outputs.outputs["Output"]
    assert os.path.basename(seen).startswith("ctr-run-"), seen
    assert samples == {before} and os.environ.get("TMPDIR") == before
    assert not os.path.exists(seen), "the scratch dir of a successful run is removed"
