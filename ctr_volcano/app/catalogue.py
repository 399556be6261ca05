"""The pipelines this package ships, and their parameters as users type them.

Why one module: ``run``, ``compile`` and ``submit`` all name a pipeline, read its parameters and
check ``KEY=VALUE`` pairs; the three verbs share one list and one check, so a typo gets the same
answer from each.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence, Tuple

from ctr_volcano.errors import BadInput
from ctr_volcano.training.task_config import MIN_KFP_BACKEND

__all__ = ["PIPELINES", "SOURCE_ROOT", "default_sample_dir", "pipeline_func", "pipeline_parameters",
           "check_param_names", "parse_params"]

#: The source tree this package was imported from (an editable install's checkout).
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def default_sample_dir() -> Path:
    """The committed Criteo-format sample, ``data/sample`` in the source tree (editable installs)."""
    return SOURCE_ROOT / "data" / "sample"


#: The pipelines ``submit`` knows: name -> (module, function, description shown in the KFP UI). Each
#: module also defines ``<function>_legacy``, the variant for KFP backends older than 2.15.
PIPELINES: Dict[str, Tuple[str, str, str]] = {
    "training": ("pipelines.ctr_training_pipeline", "ctr_training_pipeline",
                 "CTR training: prep, PaddlePaddle parameter-server training on Volcano, evaluation, AUC gate"),
    "retraining": ("pipelines.ctr_retraining_pipeline", "ctr_retraining_pipeline",
                   "CTR recurring retraining: data window by run date, warm start from the registry's "
                   "champion, champion/challenger gate, registry"),
    "scoring": ("pipelines.ctr_scoring_pipeline", "ctr_scoring_pipeline",
                "CTR batch scoring: raw candidates to Parquet shards of probabilities, ids kept, with a model "
                "artifact or the registry's champion"),
}


def pipeline_func(pipeline: str = "training", legacy: bool = False) -> Any:
    """The ``@dsl.pipeline`` object named ``pipeline`` (a key of :data:`PIPELINES`).

    Args:
        pipeline: ``training`` or ``retraining``.
        legacy: the variant for KFP backends older than 2.15 (no ``TaskConfig``, no run workspace).
    """
    import importlib

    if pipeline not in PIPELINES:
        raise BadInput("--pipeline", pipeline, f"use one of {', '.join(PIPELINES)}")
    module, name, _ = PIPELINES[pipeline]
    return getattr(importlib.import_module(module), name + ("_legacy" if legacy else ""))


def pipeline_parameters(pipeline: str = "training", legacy: bool = False) -> Dict[str, Any]:
    """A pipeline's parameters and their defaults (the default training pipeline's by default)."""
    sig = inspect.signature(pipeline_func(pipeline, legacy).pipeline_func)
    return {name: p.default for name, p in sig.parameters.items()}


def _unknown_param(key: str, pipeline: str, legacy: bool, known: Mapping[str, Any]) -> str:
    """The fix for a parameter the chosen pipeline lacks, naming the variant that has it, if any."""
    if not legacy and key in pipeline_parameters(pipeline, legacy=True):
        return (f"only the {pipeline} pipeline for KFP backends < {MIN_KFP_BACKEND} (--legacy-kfp) takes it; the "
                f"default one uses the run workspace")
    return f"not a parameter of the {pipeline} pipeline; known: {', '.join(sorted(known))}"


def check_param_names(keys: Sequence[str], pipeline: str = "training", legacy: bool = False,
                      field: str = "--param") -> Dict[str, Any]:
    """Refuse a key the pipeline does not take (naming the variant that has it, if any); returns
    the pipeline's parameters and their defaults."""
    known = pipeline_parameters(pipeline, legacy)
    for key in keys:
        if key not in known:
            raise BadInput(field, key, _unknown_param(key, pipeline, legacy, known))
    return known


def parse_params(pairs: Sequence[str], pipeline: str = "training", legacy: bool = False) -> Dict[str, Any]:
    """Turn ``KEY=VALUE`` strings into typed pipeline arguments (typed like the parameter's default).

    Args:
        pairs: the ``KEY=VALUE`` strings.
        pipeline: whose parameters: ``training`` or ``retraining``.
        legacy: check against the variant for KFP backends older than 2.15.

    Raises:
        BadInput: unknown parameter, missing ``=``, or a value that does not parse as the parameter's type.
    """
    for pair in pairs:
        if "=" not in pair:
            raise BadInput("--param", pair, "write KEY=VALUE, e.g. --param epochs=3")
    known = check_param_names([p.partition("=")[0].strip() for p in pairs], pipeline, legacy)
    out: Dict[str, Any] = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        key = key.strip()
        default = known[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1")
            elif isinstance(default, int):
                value = int(raw)
            elif isinstance(default, float):
                value = float(raw)
            else:
                value = raw
        except ValueError:
            raise BadInput("--param", pair, f"{key} takes a {type(default).__name__} "
                                            f"(default {default!r})") from None
        out[key] = value
    return out
