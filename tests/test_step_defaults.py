"""One default per setting, whichever door the user comes in by.

The training step's parameters are declared once (``StepParams``, the trainer's own in
``TrainConfig``); the CLI flags of ``train`` and ``render-job``, the ``train_ctr`` component and both
pipelines are derived from that declaration. These tests read each entry point as its user meets it
(the parsed command line, the signature KFP compiled, the source KFP ships) and compare *every*
default with the step's: a field added, renamed or given another default in one place only fails here.
The pipelines' ``backend`` and ``pvc_name`` defaults target a cluster; they are declared beside the
field (``metadata["pipeline_default"]``) and compared with that declaration.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

from ctr_model.config import TrainConfig
from ctr_model.defaults import DEFAULT_GLOO_PORT, DEFAULT_PS_PORT, DEFAULT_SCORE_BATCH
from ctr_volcano.app.cli.main import build_parser
from ctr_volcano.app.cli.step_flags import params_from_args
from ctr_volcano.training.params import (
    DEFAULT_SCHEDULE_TIMEOUT_S,
    DEFAULT_TTL_S,
    StepParams,
    kfp_parameters,
    step_fields,
)

REPO = Path(__file__).resolve().parents[1]


def differences(got: StepParams, want: StepParams) -> List[str]:
    """``field: got != want`` for every field whose value differs."""
    return [f"{f.name}: {getattr(got, f.name)!r} != {getattr(want, f.name)!r}" for f in step_fields()
            if getattr(got, f.name) != getattr(want, f.name)]


def _step_inputs(spec_inputs: Dict[str, Any]) -> Dict[str, Any]:
    """The step parameters among a compiled component's/pipeline's inputs, with their defaults."""
    step = {p.name for p in kfp_parameters()}
    return {name: spec.default for name, spec in spec_inputs.items() if name in step}


def _pipeline_defaults(taken: Dict[str, Any]) -> Dict[str, Any]:
    """The pipelines' declared defaults (``metadata["pipeline_default"]``) of the parameters ``taken``."""
    return {f.name: f.metadata["pipeline_default"] for f in step_fields()
            if "pipeline_default" in f.metadata and f.name in taken}


def test_the_trainers_settings_are_trainconfigs():
    step, trainer = StepParams(), TrainConfig()
    assert (step.epochs, step.batch_size, step.learning_rate, step.model_family) == \
        (trainer.epochs, trainer.batch_size, trainer.learning_rate, trainer.model)
    assert step.model_config is None and "model_config" not in dict(step.config)   # the family's defaults


def test_the_cli_takes_the_steps_defaults():
    train = build_parser().parse_args(["train", "--data", "d", "--model-out", "m"])
    assert differences(params_from_args(train), StepParams()) == []
    render = build_parser().parse_args(["render-job", "--pvc-name", "claim"])
    assert differences(params_from_args(render, backend="volcano"),
                       StepParams(backend="volcano", pvc_name="claim")) == []


def test_the_component_takes_the_steps_defaults():
    from components.train import train_ctr

    compiled = _step_inputs(train_ctr.component_spec.inputs)
    assert len(compiled) == len(kfp_parameters()) >= 30
    assert differences(StepParams.from_component(**compiled), StepParams()) == []


@pytest.mark.parametrize("module, names", [
    ("pipelines.ctr_training_pipeline", ("ctr_training_pipeline", "ctr_training_pipeline_legacy")),
    ("pipelines.ctr_retraining_pipeline", ("ctr_retraining_pipeline", "ctr_retraining_pipeline_legacy",
                                           "ctr_retraining_pipeline_local")),
])
def test_both_pipelines_take_the_steps_defaults(module, names):
    import importlib

    for name in names:
        pipeline = getattr(importlib.import_module(module), name)
        compiled = _step_inputs(pipeline.component_spec.inputs)
        assert {"backend", "epochs", "batch_size", "learning_rate", "model_family", "cpu"} <= set(compiled), name
        declared = _pipeline_defaults(compiled)
        assert compiled["backend"] == declared.pop("backend") == "volcano", name
        # compared on the local backend: a Volcano StepParams also checks its hand-off volume
        got = StepParams.from_component(**{**compiled, "backend": "local"})
        assert differences(got, dataclasses.replace(StepParams(), **declared)) == [], name


def test_the_shipped_source_spells_the_same_defaults():
    """What the component image runs is the YAML's source: its defaults are the compiled ones."""
    doc = yaml.safe_load((REPO / "components" / "train_ctr.yaml").read_text())
    inputs = doc["root"]["inputDefinitions"]["parameters"]
    command = doc["deploymentSpec"]["executors"]["exec-train-ctr"]["container"]["command"]
    source = next(part for part in command if "def train_ctr(" in part)
    func = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "train_ctr")
    shipped = dict(zip([a.arg for a in func.args.args][-len(func.args.defaults):],
                       [ast.literal_eval(d) for d in func.args.defaults]))
    for name, spec in inputs.items():
        if "defaultValue" in spec:
            assert shipped[name] == spec["defaultValue"], name
    for p in kfp_parameters():   # and every description survived into KFP's UI text
        assert inputs[p.name]["description"] == p.doc, p.name


def test_a_default_that_differs_is_named():
    """The check itself: one entry point's default changed is reported by field."""
    train = build_parser().parse_args(["train", "--data", "d", "--model-out", "m", "--pservers", "7", "--ttl", "-1"])
    assert differences(params_from_args(train), StepParams()) == [
        "pservers: 7 != 2", f"ttl_seconds_after_finished: None != {DEFAULT_TTL_S}"]


def test_ports_timeouts_ttl_and_batch_are_named_once():
    """The Job spec, the pods' contract, the prep fan-out and render-job share the named values."""
    import inspect

    from components.evaluate import evaluate_ctr
    from ctr_model.contract import GangContract
    from ctr_volcano.evaluation.evaluate import evaluate
    from ctr_volcano.retraining.gate import compare
    from ctr_volcano.training.volcano.prep_job import PrepPods
    from ctr_volcano.training.volcano.spec import TrainJobSpec

    spec = {f.name: f.default for f in dataclasses.fields(TrainJobSpec)}
    contract = {f.name: f.default for f in dataclasses.fields(GangContract)}
    render = build_parser().parse_args(["render-job"])
    assert spec["ps_port"] == contract["ps_port"] == render.ps_port == DEFAULT_PS_PORT
    assert spec["gloo_port"] == contract["gloo_port"] == render.gloo_port == DEFAULT_GLOO_PORT
    assert spec["schedule_timeout_s"] == PrepPods.__dataclass_fields__["schedule_timeout_s"].default \
        == StepParams().schedule_timeout_s == DEFAULT_SCHEDULE_TIMEOUT_S
    assert spec["ttl_seconds_after_finished"] == StepParams().ttl_seconds_after_finished == DEFAULT_TTL_S
    for default in (evaluate_ctr.component_spec.inputs["batch_size"].default,
                    inspect.signature(evaluate).parameters["batch_size"].default,
                    inspect.signature(compare).parameters["batch_size"].default,
                    build_parser().parse_args(["evaluate", "--model", "m", "--data", "d", "--out", "o"]).batch_size):
        assert default == DEFAULT_SCORE_BATCH


def test_no_package_module_spells_those_values_again():
    """``grep`` as a test: the values named above appear as literals only where they are named."""
    named = {r"\b36001\b": "ctr_model/defaults.py", r"\b36100\b": "ctr_model/defaults.py",
             r"\b8192\b": "ctr_model/defaults.py",
             r"(ttl\w*|--ttl)[^\n]*\b3600\b": "ctr_volcano/training/params.py",
             r"schedule_timeout\w*[^\n=]*=[^\n]*\b600\b": "ctr_volcano/training/params.py"}
    for package in ("ctr_model", "ctr_volcano", "components", "pipelines"):
        for path in (REPO / package).rglob("*.py"):
            rel = str(path.relative_to(REPO))
            text = path.read_text()
            for pattern, home in named.items():
                if rel != home:
                    assert not re.search(pattern, text), f"{rel} spells {pattern} again: import it from {home}"


def test_shipped_spells_literals_and_refuses_what_kfp_cannot_ship():
    """The generator under the component: names become literals, extra parameters join the
    signature, the docstring and the body's dict; a default KFP cannot ship is refused."""
    import inspect
    from types import SimpleNamespace

    from components.signature import shipped, with_args

    extra = [SimpleNamespace(name="depth", type=int, default=3, doc="how deep.")]

    def probe(a: str = REPO.name, **more):
        """Probe.

        Args:
            a: the first.
        """
        return a, more

    func = shipped(probe, extra=extra)
    source = inspect.getsource(func)
    assert f"a: str = {REPO.name!r}," in source and "depth: int = 3," in source and "REPO" not in source
    assert "depth: how deep." in inspect.getdoc(func) and func(depth=4) == (REPO.name, {"depth": 4})

    def bad(a: tuple = (1,)):
        """Bad.

        Args:
            a: a tuple.
        """

    with pytest.raises(TypeError, match="not a literal KFP can ship"):
        shipped(bad)
    doc = "Doc.\n\nArgs:\n    a: one.\n    b: two\n        more.\n\nReturns:\n    x."
    assert with_args(doc, [("c", "three.")], after="a") == \
        "Doc.\n\nArgs:\n    a: one.\n    c: three.\n    b: two\n        more.\n\nReturns:\n    x."
