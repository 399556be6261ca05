"""Installs where users are: the base package in a notebook's venv, and the package on Python 3.13.

Why: ML engineers compose pipelines in notebooks whose environments already have numpy 2, a current
pyarrow and kfp. ``pip install ctr-volcano`` (the base: no Paddle) must change none of them, import
no Paddle, compile the committed YAML exactly, and prep and evaluate there; training there names the
extra to install. Each test builds fresh virtual environments from the package registries (marker
``install``: minutes, and the network), from the source tree as a user's ``pip install`` would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
#: What a current notebook image already holds before the user installs ctr-volcano.
NOTEBOOK = ["numpy>=2", "pyarrow>=26", "kfp==2.17.3"]
#: The interpreters tried besides this one (pyenv's, where the machine image has them).
PY313 = Path.home() / ".pyenv" / "versions" / "3.13.0" / "bin" / "python3"
#: A short smoke subset of the default tier that needs no Paddle (it runs on the base install).
SMOKE = ["tests/test_pipeline_compile.py", "tests/test_prep.py", "tests/test_evaluate.py",
         "tests/test_volcano_manifest.py", "tests/test_window.py", "tests/test_champion_gate.py",
         "tests/test_cli_pipeline.py"]

pytestmark = [pytest.mark.install, pytest.mark.timeout(1800)]


def _run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1500, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env(venv: Path) -> Dict[str, str]:
    """This process's environment, minus its own venv: the child sees only ``venv``."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    ours = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours]
    env["PATH"] = os.pathsep.join([str(venv / "bin")] + path)
    return env


def make_venv(python: Path, where: Path) -> SimpleNamespace:
    """A fresh venv (no system site-packages: nothing but what it installs)."""
    _run([python, "-m", "venv", where])
    env = _clean_env(where)
    return SimpleNamespace(root=where, python=where / "bin" / "python", bin=where / "bin", env=env)


def pip(venv: SimpleNamespace, *args: str) -> None:
    _run([venv.python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args], env=venv.env)


def versions(venv: SimpleNamespace) -> Dict[str, str]:
    out = _run([venv.python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
               env=venv.env).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """A notebook-like venv (numpy 2, pyarrow >= 26, kfp 2.17.3), then the base package into it."""
    venv = make_venv(Path(sys.executable), tmp_path_factory.mktemp("notebook") / "venv")
    pip(venv, *NOTEBOOK)
    venv.before = versions(venv)
    pip(venv, str(REPO))
    venv.after = versions(venv)
    return venv


def test_the_base_install_changes_nothing_the_notebook_had(notebook):
    assert int(notebook.before["numpy"].split(".")[0]) >= 2 and int(notebook.before["pyarrow"].split(".")[0]) >= 26
    changed = {name: (v, notebook.after.get(name)) for name, v in notebook.before.items()
               if notebook.after.get(name) != v}
    assert changed == {}, f"pip install ctr-volcano changed the notebook's packages: {changed}"
    assert "paddlepaddle" not in notebook.after and "ctr-volcano" in notebook.after


def test_the_sdk_imports_no_paddle(notebook):
    code = ("import importlib, importlib.util, json, sys\n"
            "for m in ('ctr_volcano.app.cli.main', 'components.train', 'components.data_prep', "
            "'components.evaluate', 'pipelines.ctr_training_pipeline', 'pipelines.ctr_retraining_pipeline', "
            "'ctr_volcano.data.prep', 'ctr_volcano.evaluation.evaluate', 'ctr_volcano.training.step', "
            "'ctr_model.infer'): importlib.import_module(m)\n"
            "print(json.dumps([importlib.util.find_spec('paddle') is None, "
            "sorted(m for m in sys.modules if m.split('.')[0] == 'paddle')]))\n")
    absent, loaded = json.loads(_run([notebook.python, "-c", code], env=notebook.env, cwd="/").stdout)
    assert absent and loaded == []


def test_compile_there_reproduces_the_committed_yaml(notebook, tmp_path):
    _run([notebook.bin / "ctr-volcano", "compile", "--out-dir", tmp_path], env=notebook.env, cwd=tmp_path)
    from ctr_volcano.app.compile import compiled_files

    for rel in compiled_files():
        want = list(yaml.safe_load_all((REPO / rel).read_text()))
        got = list(yaml.safe_load_all((tmp_path / Path(rel).name).read_text()))
        assert got == want, f"{rel}: the base install compiles something else than the committed YAML"


def test_prep_and_evaluate_run_there_and_training_names_the_extra(notebook, tmp_path):
    """gen-data, prep and evaluate on the notebook's numpy 2 and pyarrow; the model they score is
    trained in this (training) environment on that prep output."""
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    cli = notebook.bin / "ctr-volcano"
    _run([cli, "gen-data", "--rows", "60000", "--seed", "5", "--out", tmp_path / "raw"], env=notebook.env)
    _run([cli, "prep", "--input", tmp_path / "raw", "--out", tmp_path / "prep", "--hash-buckets", "10007",
          "--shards", "2"], env=notebook.env)
    train_local(str(tmp_path / "prep"), str(tmp_path / "model"), dict(SMALL, epochs=3), pservers=1, trainers=1,
                workdir=str(tmp_path / "work"))
    _run([cli, "evaluate", "--model", tmp_path / "model", "--data", tmp_path / "prep", "--out", tmp_path / "eval"],
         env=notebook.env)
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    oracle = json.loads((tmp_path / "raw" / "oracle.json").read_text())["auc"]
    assert 0.65 < metrics["auc"] <= oracle + 0.01 and metrics["rows"] > 5000   # it learned
    here = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "evaluate", "--model", tmp_path / "model",
                           "--data", tmp_path / "prep", "--out", tmp_path / "eval-here"], capture_output=True)
    assert here.returncode == 0
    assert json.loads((tmp_path / "eval-here" / "metrics.json").read_text())["auc"] == pytest.approx(metrics["auc"], abs=1e-6)
    train = subprocess.run([cli, "train", "--data", tmp_path / "prep", "--model-out", tmp_path / "m2"],
                           env=notebook.env, capture_output=True, text=True)
    assert train.returncode == 2 and len(train.stderr.strip().splitlines()) == 1, train.stderr
    assert "pip install 'ctr-volcano[train]'" in train.stderr


@pytest.mark.skipif(not PY313.exists(), reason=f"no Python 3.13 here ({PY313} is missing)")
def test_python_3_13_base_install_and_a_smoke_subset(tmp_path):
    venv = make_venv(PY313, tmp_path / "venv313")
    pip(venv, "-e", str(REPO), "pytest==9.2.0", "pytest-timeout==2.4.0", "scikit-learn", "pandas")
    proc = subprocess.run([venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                           "not slow and not cluster and not install", *SMOKE], cwd=REPO, env=venv.env,
                          capture_output=True, text=True, timeout=1500)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    assert proc.returncode == 0 and " passed" in tail and "failed" not in tail, proc.stdout[-4000:] + proc.stderr[-2000:]
