"""Champion/challenger gate: publish a retrained model only if it is not worse than the serving one.

A fixed ``min_auc`` cannot tell whether today's model is better than yesterday's: AUC moves with the
data. So both models are scored on the **same** test split (today's, which neither trained on) with
the exact evaluation of :mod:`ctr_volcano.evaluation.evaluate`, and the challenger is published only if

* its AUC >= the champion's AUC - ``tolerance`` (a small allowance for noise on a finite split), and
* its AUC >= ``min_auc`` (a floor that also decides the very first run, when there is no champion), and
* the day's data validation (:mod:`ctr_volcano.validation`) did not warn, unless ``allow_warnings``
  (a ``fail`` never gets here: the run stops before training).

A multi-task model (``esmm``, ``mmoe``) is gated on one task: its first (the click) unless ``task``
names another label of the feature spec, whose AUC over impressions both models are then compared on
(:func:`check_gate_task` refuses an unknown task before any run).

:func:`decide` is the rule alone; :func:`compare` scores both models and applies it.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from ctr_model.atomic import write_json
from ctr_model.defaults import DEFAULT_SCORE_BATCH
from ctr_volcano.errors import BadInput

__all__ = ["GateDecision", "decide", "compare", "render_markdown", "check_gate_task", "task_auc"]


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict.

    Attributes:
        publish: whether the challenger becomes the champion.
        reason: one sentence with the numbers that decided it.
        challenger_auc: the challenger's AUC on the split.
        champion_auc: the champion's AUC on the same split; ``None`` on the first run.
        min_auc: the floor.
        tolerance: how far below the champion the challenger may be.
        data_verdict: the data validation's verdict (``pass``, ``warn``, ``skipped``).
        allow_warnings: whether a ``warn`` verdict may still be promoted.
        task: the task both AUCs are of (``""``: the model's first, or only, task).
    """

    publish: bool
    reason: str
    challenger_auc: float
    champion_auc: Optional[float]
    min_auc: float
    tolerance: float
    data_verdict: str = "pass"
    allow_warnings: bool = False
    task: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def decide(challenger_auc: float, champion_auc: Optional[float], min_auc: float,
           tolerance: float, data_verdict: str = "pass", allow_warnings: bool = False,
           data_findings: str = "", task: str = "") -> GateDecision:
    """Apply the rule (see the module docstring). ``data_findings``: the validation's warnings, quoted
    in the reason when they hold the model back; ``task``: the task the AUCs are of, named in the reason.

    Raises:
        BadInput: ``min_auc`` outside [0, 1], ``tolerance`` outside [0, 0.5], or a ``fail`` data
            verdict (the run should have stopped before training).
    """
    if not 0.0 <= min_auc <= 1.0:
        raise BadInput("min_auc", min_auc, "use an AUC floor in [0, 1], e.g. 0.7")
    if not 0.0 <= tolerance <= 0.5:
        raise BadInput("tolerance", tolerance, "use an AUC allowance in [0, 0.5], e.g. 0.002")
    c = float(challenger_auc)
    auc = f"{task} AUC" if task else "AUC"
    if c < min_auc:
        publish, reason = False, f"challenger {auc} {c:.4f} < min_auc {min_auc:.4f}"
    elif champion_auc is None:
        publish, reason = True, f"no champion yet and challenger {auc} {c:.4f} >= min_auc {min_auc:.4f}"
    elif c >= champion_auc - tolerance:
        publish, reason = True, (f"challenger {auc} {c:.4f} >= champion {auc} {champion_auc:.4f} - "
                                 f"tolerance {tolerance:g} on the same split")
    else:
        publish, reason = False, (f"challenger {auc} {c:.4f} < champion {auc} {champion_auc:.4f} - "
                                  f"tolerance {tolerance:g} on the same split")
    if data_verdict == "fail":
        raise BadInput("data_verdict", data_verdict, "a day that failed validation is never trained or promoted")
    if publish and data_verdict == "warn" and not allow_warnings:
        publish, reason = False, (f"data validation warned ({data_findings or 'see the validation report'}); "
                                  f"set allow_warnings to promote such a day ({reason})")
    return GateDecision(publish=publish, reason=reason, challenger_auc=c,
                        champion_auc=None if champion_auc is None else float(champion_auc),
                        min_auc=float(min_auc), tolerance=float(tolerance), data_verdict=data_verdict,
                        allow_warnings=bool(allow_warnings), task=task)


def check_gate_task(feature_spec: Any, task: str) -> None:
    """``task`` is ``""`` or a label of the feature spec (a JSON text, a path, or empty for Criteo).

    Raises:
        BadInput: naming ``gate_task``, the labels there are, and the fix.
    """
    from ctr_volcano.data.spec_input import read_feature_spec

    if not task:
        return
    spec = read_feature_spec(feature_spec)
    labels = ("label",) if spec is None or spec.is_criteo else spec.task_labels
    if task not in labels:
        raise BadInput("gate_task", task, f"gate on a label of the feature spec ({', '.join(labels)}), or "
                                          f"leave it empty for the first")


def task_auc(metrics: Dict[str, Any], task: str, model_dir: str) -> float:
    """The AUC ``evaluate`` reported for ``task`` (``""``: the first task's, ``metrics["auc"]``).

    Raises:
        BadInput: the model has no such task (a single-task champion gated on a later task).
    """
    if not task:
        return float(metrics["auc"])
    tasks = metrics.get("tasks") or {}
    if not tasks and task == _label(model_dir):     # a single-task model: its one label
        return float(metrics["auc"])
    if task not in tasks:
        raise BadInput("gate_task", task, f"the model {model_dir} has no task {task!r} (its tasks: "
                                          f"{', '.join(tasks) or 'one'}): gate on its first task, or retrain "
                                          f"without warm start")
    return float(tasks[task]["auc"])


def _label(model_dir: str) -> str:
    """The label column a model was trained on (its ``model_meta.json`` feature spec; Criteo's ``label``)."""
    import json

    from ctr_model.infer import MODEL_META

    try:
        with open(os.path.join(model_dir, MODEL_META), encoding="utf-8") as fh:
            spec = json.load(fh).get("feature_spec") or {}
    except (OSError, ValueError):
        return ""
    return str(spec.get("label", "label"))


def compare(challenger_dir: str, champion_dir: Optional[str], test_data: str, out_dir: str, *,
            min_auc: float, tolerance: float, batch_size: int = DEFAULT_SCORE_BATCH,
            validation: Optional[Dict[str, Any]] = None, allow_warnings: bool = False,
            task: str = "") -> Dict[str, Any]:
    """Score both models on ``test_data`` and decide; writes ``out_dir/gate.json``.

    Args:
        challenger_dir: the newly trained model.
        champion_dir: the serving model, or ``None`` on the first run.
        test_data: the test split both are scored on.
        out_dir: gets ``challenger/`` and ``champion/`` (each ``metrics.json`` + ``report.html``)
            and ``gate.json``.
        min_auc, tolerance, allow_warnings: see :func:`decide`.
        batch_size: rows per scoring batch.
        validation: the day's ``validation.json`` (its verdict and findings), if it was validated.
        task: the task to gate on (``""``: the first); its AUC over impressions is compared.

    Returns:
        ``{"decision": {...}, "challenger": metrics, "champion": metrics or None}`` (scalar metrics).
    """
    from ctr_volcano.evaluation.evaluate import evaluate

    decide(0.5, None, min_auc, tolerance)       # refuse bad thresholds before scoring anything

    def scalars(metrics: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}

    full = evaluate(challenger_dir, test_data, os.path.join(out_dir, "challenger"), batch_size=batch_size)
    challenger, challenger_auc = scalars(full), task_auc(full, task, challenger_dir)
    champion, champion_auc = None, None
    if champion_dir is not None:
        if not os.path.isdir(champion_dir):
            raise BadInput("champion", champion_dir, "pass the champion's model directory or None")
        full = evaluate(champion_dir, test_data, os.path.join(out_dir, "champion"), batch_size=batch_size)
        champion, champion_auc = scalars(full), task_auc(full, task, champion_dir)
    verdict = (validation or {}).get("verdict", "skipped")
    warnings = "; ".join(f["line"] for f in (validation or {}).get("findings", []) if f.get("severity") == "warn")
    decision = decide(challenger_auc, champion_auc, min_auc, tolerance, data_verdict=verdict,
                      allow_warnings=allow_warnings, data_findings=warnings, task=task)
    result = {"decision": decision.to_dict(), "challenger": challenger, "champion": champion,
              "validation": {"verdict": verdict, "findings": [f["line"] for f in (validation or {}).get("findings", [])]}}
    write_json(os.path.join(out_dir, "gate.json"), result, sort_keys=True)
    return result


def render_markdown(result: Dict[str, Any], challenger_label: str = "challenger",
                    champion_label: str = "champion") -> str:
    """The gate's report for the KFP UI: the verdict, the reason and both models' metrics."""
    d = result["decision"]
    rows = ["| metric | " + challenger_label + " | " + champion_label + " |", "|---|---|---|"]
    champ = result.get("champion") or {}

    def fmt(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    for key in ("auc", "logloss", "rows", "positive_rate", "mean_prediction"):
        rows.append(f"| {key} | {fmt(result['challenger'].get(key))} | {fmt(champ.get(key, '-'))} |")
    verdict = "PUBLISHED (new champion)" if d["publish"] else "REFUSED (champion unchanged)"
    data = (result.get("validation") or {}).get("verdict", d.get("data_verdict", "skipped"))
    return (f"# Champion/challenger gate: {verdict}\n\n{d['reason']}.\n\n"
            f"min_auc {d['min_auc']:g}, tolerance {d['tolerance']:g}, data validation {data}"
            f"{' (warnings allowed)' if d.get('allow_warnings') else ''}\n\n" + "\n".join(rows) + "\n")
