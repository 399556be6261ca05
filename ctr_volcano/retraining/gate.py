"""Champion/challenger gate: publish a retrained model only if it is not worse than the serving one.

A fixed ``min_auc`` cannot tell whether today's model is better than yesterday's: AUC moves with the
data. So both models are scored on the **same** test split (today's, which neither trained on) with
the exact evaluation of :mod:`ctr_volcano.evaluation.evaluate`, and the challenger is published only if

* its AUC >= the champion's AUC - ``tolerance`` (a small allowance for noise on a finite split), and
* its AUC >= ``min_auc`` (a floor that also decides the very first run, when there is no champion), and
* the day's data validation (:mod:`ctr_volcano.validation`) did not warn, unless ``allow_warnings``
  (a ``fail`` never gets here: the run stops before training).

:func:`decide` is the rule alone; :func:`compare` scores both models and applies it.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from ctr_model.atomic import write_json
from ctr_model.defaults import DEFAULT_SCORE_BATCH
from ctr_volcano.errors import BadInput

__all__ = ["GateDecision", "decide", "compare", "render_markdown"]


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
    """

    publish: bool
    reason: str
    challenger_auc: float
    champion_auc: Optional[float]
    min_auc: float
    tolerance: float
    data_verdict: str = "pass"
    allow_warnings: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def decide(challenger_auc: float, champion_auc: Optional[float], min_auc: float,
           tolerance: float, data_verdict: str = "pass", allow_warnings: bool = False,
           data_findings: str = "") -> GateDecision:
    """Apply the rule (see the module docstring). ``data_findings``: the validation's warnings, quoted
    in the reason when they hold the model back.

    Raises:
        BadInput: ``min_auc`` outside [0, 1], ``tolerance`` outside [0, 0.5], or a ``fail`` data
            verdict (the run should have stopped before training).
    """
    if not 0.0 <= min_auc <= 1.0:
        raise BadInput("min_auc", min_auc, "use an AUC floor in [0, 1], e.g. 0.7")
    if not 0.0 <= tolerance <= 0.5:
        raise BadInput("tolerance", tolerance, "use an AUC allowance in [0, 0.5], e.g. 0.002")
    c = float(challenger_auc)
    if c < min_auc:
        publish, reason = False, f"challenger AUC {c:.4f} < min_auc {min_auc:.4f}"
    elif champion_auc is None:
        publish, reason = True, f"no champion yet and challenger AUC {c:.4f} >= min_auc {min_auc:.4f}"
    elif c >= champion_auc - tolerance:
        publish, reason = True, (f"challenger AUC {c:.4f} >= champion AUC {champion_auc:.4f} - "
                                 f"tolerance {tolerance:g} on the same split")
    else:
        publish, reason = False, (f"challenger AUC {c:.4f} < champion AUC {champion_auc:.4f} - "
                                  f"tolerance {tolerance:g} on the same split")
    if data_verdict == "fail":
        raise BadInput("data_verdict", data_verdict, "a day that failed validation is never trained or promoted")
    if publish and data_verdict == "warn" and not allow_warnings:
        publish, reason = False, (f"data validation warned ({data_findings or 'see the validation report'}); "
                                  f"set allow_warnings to promote such a day ({reason})")
    return GateDecision(publish=publish, reason=reason, challenger_auc=c,
                        champion_auc=None if champion_auc is None else float(champion_auc),
                        min_auc=float(min_auc), tolerance=float(tolerance), data_verdict=data_verdict,
                        allow_warnings=bool(allow_warnings))


def compare(challenger_dir: str, champion_dir: Optional[str], test_data: str, out_dir: str, *,
            min_auc: float, tolerance: float, batch_size: int = DEFAULT_SCORE_BATCH,
            validation: Optional[Dict[str, Any]] = None, allow_warnings: bool = False) -> Dict[str, Any]:
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

    Returns:
        ``{"decision": {...}, "challenger": metrics, "champion": metrics or None}`` (scalar metrics).
    """
    from ctr_volcano.evaluation.evaluate import evaluate

    decide(0.5, None, min_auc, tolerance)       # refuse bad thresholds before scoring anything

    def scalars(metrics: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}

    challenger = scalars(evaluate(challenger_dir, test_data, os.path.join(out_dir, "challenger"),
                                  batch_size=batch_size))
    champion = None
    if champion_dir is not None:
        if not os.path.isdir(champion_dir):
            raise BadInput("champion", champion_dir, "pass the champion's model directory or None")
        champion = scalars(evaluate(champion_dir, test_data, os.path.join(out_dir, "champion"),
                                    batch_size=batch_size))
    verdict = (validation or {}).get("verdict", "skipped")
    warnings = "; ".join(f["line"] for f in (validation or {}).get("findings", []) if f.get("severity") == "warn")
    decision = decide(challenger["auc"], champion["auc"] if champion else None, min_auc, tolerance,
                      data_verdict=verdict, allow_warnings=allow_warnings, data_findings=warnings)
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
