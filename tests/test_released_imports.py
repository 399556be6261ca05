"""Pipeline versions uploaded from release 0.1.0 keep running against the current package (no
``from __future__ import annotations`` here: KFP reads the pipeline's annotations as types).

A KFP pipeline version embeds each component's source (with imports such as ``from
ctr_volcano.volcano.step import StepParams``) and runs it in whatever component image its tag names.
``tests/released/0.1.0/`` holds that release's compiled component YAML as uploaded; these tests
import what it imports and run its prep -> train -> evaluate chain through ``kfp.local`` on this
package, so a move that breaks an uploaded version fails here (see ``ctr_volcano.compat``).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Set

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RELEASED = REPO / "tests" / "released" / "0.1.0"


def _sources(path: Path):
    """The Python sources embedded in a compiled component (its executor's command)."""
    doc = yaml.safe_load(path.read_text())
    for executor in doc["deploymentSpec"]["executors"].values():
        for part in executor["container"].get("command", []) + executor["container"].get("args", []):
            if "def " in part:
                yield part


def released_imports() -> Dict[str, Set[str]]:
    """``module -> names`` that 0.1.0's components import from this project."""
    found: Dict[str, Set[str]] = {}
    for path in sorted(RELEASED.glob("*.yaml")):
        for source in _sources(path):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("ctr_", "components")):
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
    return found


def test_the_released_yaml_is_read():
    found = released_imports()
    assert len(list(RELEASED.glob("*.yaml"))) == 9
    assert found["ctr_volcano.volcano.step"] == {"StepParams", "run_training_step"}
    assert "ctr_volcano.prep" in found and "ctr_volcano.retraining.window" not in found


def test_every_released_import_resolves_in_a_fresh_interpreter():
    code = ("import importlib, json, sys, warnings\n"
            "warnings.simplefilter('error', DeprecationWarning)\n"
            "found = json.loads(sys.argv[1]); bad = []; warned = set()\n"
            "for module, names in found.items():\n"
            "    try:\n"
            "        mod = importlib.import_module(module)\n"
            "    except DeprecationWarning:\n"
            "        warned.add(module)\n"
            "        with warnings.catch_warnings():\n"
            "            warnings.simplefilter('ignore')\n"
            "            mod = importlib.import_module(module)\n"
            "    bad += [f'{module}.{n}' for n in names if not hasattr(mod, n)]\n"
            "print(json.dumps({'bad': bad, 'warned': sorted(warned)}))\n")
    found = {m: sorted(n) for m, n in released_imports().items()}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(found)], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bad"] == []
    from ctr_volcano.compat import RELEASED_MODULES

    # every moved module warns, and the table names exactly the released modules that moved
    assert set(result["warned"]) == {m for m in found if m in RELEASED_MODULES}
    assert {m for m in RELEASED_MODULES if RELEASED_MODULES[m]} == set(result["warned"])


def test_an_alias_is_the_new_module_itself():
    import warnings

    import ctr_volcano.training.step as step

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ctr_volcano.volcano.step import StepParams, run_training_step
    assert run_training_step is step.run_training_step and StepParams is step.StepParams
    assert step.__spec__.name == "ctr_volcano.training.step"   # the alias did not rename the module


@pytest.mark.slow
def test_the_released_components_run_on_this_package(sample_dir, tmp_path):
    """0.1.0's prep -> train (local gang) -> evaluate YAML, run by kfp.local on the current code."""
    from kfp import components, dsl, local
    from kfp.dsl import Dataset

    prep = components.load_component_from_file(str(RELEASED / "prepare_ctr_data.yaml"))
    train = components.load_component_from_file(str(RELEASED / "train_ctr.yaml"))
    evaluate = components.load_component_from_file(str(RELEASED / "evaluate_ctr.yaml"))

    @dsl.pipeline(name="released-0-1-0")
    def released(raw_uri: str) -> float:
        raw = dsl.importer(artifact_uri=raw_uri, artifact_class=Dataset, reimport=False)
        p = prep(raw_data=raw.output, hash_buckets=10007, shards=2)
        t = train(train_data=p.outputs["train_data"], backend="local", pservers=1, trainers=1, epochs=1,
                  batch_size=256)
        return evaluate(model=t.outputs["model"], test_data=p.outputs["test_data"]).outputs["Output"]

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "outputs"),
               workspace_root=str(tmp_path / "workspace"))
    auc = released(raw_uri=str(sample_dir)).output
    assert 0.7 < auc < 0.8
