"""Compile the pipelines and components to the YAML the repository commits (``ctr-volcano compile``).

The committed YAML is what users upload; a golden test recompiles and compares it
(tests/test_pipeline_compile.py). ``legacy`` writes the variants for KFP backends older than 2.15.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from ctr_volcano.app.catalogue import PIPELINES, SOURCE_ROOT, pipeline_func
from ctr_volcano.errors import BadInput
from ctr_volcano.training.task_config import MIN_KFP_BACKEND

__all__ = ["compiled_files", "compile_all"]


def compiled_files(legacy: bool = False) -> Dict[str, Any]:
    """Map each committed YAML (path relative to the source tree) to the pipeline/component it compiles.

    Args:
        legacy: the variants for KFP backends older than 2.15 instead (no TaskConfig, no run
            workspace; see :mod:`pipelines.legacy_kfp`); they are not committed.
    """
    from components.data_prep import prepare_ctr_data
    from components.evaluate import check_auc_gate, evaluate_ctr, publish_model
    from components.retrain import champion_challenger_gate, find_champion, register_model, resolve_data_window
    from components.score import score_ctr
    from components.train import train_ctr
    from components.validate import validate_ctr_data
    from pipelines.legacy_kfp import without_task_config

    train = without_task_config(train_ctr) if legacy else train_ctr
    out: Dict[str, Any] = {f"pipelines/{PIPELINES[p][1]}.yaml": pipeline_func(p, legacy) for p in PIPELINES}
    for comp in (prepare_ctr_data, train, evaluate_ctr, check_auc_gate, publish_model,
                 resolve_data_window, find_champion, validate_ctr_data, champion_challenger_gate, register_model,
                 score_ctr):
        out[f"components/{comp.python_func.__name__}.yaml"] = comp
    return out


def compile_all(out_dir: Optional[str] = None, legacy: bool = False) -> List[str]:
    """Compile the pipeline and every component to YAML.

    Args:
        out_dir: write every file flat into this directory; by default each goes next to its source
            (``pipelines/*.yaml``, ``components/*.yaml``), i.e. regenerates the committed files.
        legacy: compile for KFP backends older than 2.15 (explicit parameters and a named PVC, no
            TaskConfig, no run workspace); needs ``out_dir`` (the committed files are the default YAML).

    Returns:
        The paths written.
    """

    root = SOURCE_ROOT
    if legacy and out_dir is None:
        raise BadInput("--out-dir", None, "--legacy-kfp writes a second set of YAML: pass --out-dir DIR "
                                          f"(the committed files are for KFP backends >= {MIN_KFP_BACKEND})")
    if out_dir is None and not (root / "setup.py").is_file():
        raise BadInput("--out-dir", None, f"{root} is an installed copy, not a source tree: pass --out-dir DIR")
    written = []
    for rel, func in compiled_files(legacy).items():
        dst = Path(out_dir) / Path(rel).name if out_dir else root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        compile_package(func, str(dst), legacy)
        written.append(str(dst))
    return written


def compile_package(func: Any, path: str, legacy: bool) -> None:
    """Compile ``func`` (a pipeline or component) to the YAML package ``path``; for ``legacy``
    backends (< 2.15) without the platform fields they refuse (:mod:`pipelines.legacy_kfp`)."""
    from kfp import compiler

    from pipelines.legacy_kfp import drop_fields_old_backends_refuse

    compiler.Compiler().compile(func, path)
    if legacy:
        drop_fields_old_backends_refuse(path)
