"""Validation with its files: read the profiles, resolve the thresholds, decide, write
``validation.json`` and ``validation.html``, and refuse a failed day in one line.

This is what the ``validate_ctr_data`` component, ``ctr-volcano validate`` and the back-fill call;
the rule itself is :func:`.checks.decide`.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Mapping, Optional

from ctr_model.atomic import write_json, write_text
from ctr_model.validation_spec import Thresholds, check_section
from ctr_volcano.data.profile import DataProfile, profile_path_of, read_profile
from ctr_volcano.errors import BadInput
from ctr_volcano.validation.checks import decide
from ctr_volcano.validation.report import render_html

__all__ = ["VALIDATION_FILE", "REPORT_FILE", "thresholds_for", "validate_profiles", "judge", "refuse_failed",
           "read_result", "reference_of", "validate_step", "write_outputs", "check_params", "check_submitted_params"]

logger = logging.getLogger(__name__)

VALIDATION_FILE = "validation.json"
REPORT_FILE = "validation.html"


def _override(value: Any) -> Optional[Mapping[str, Any]]:
    """The run's threshold override: ``None``/``""``, a JSON text, a file (JSON or YAML), or a mapping."""
    if value is None or isinstance(value, Mapping):
        return value
    text = str(value).strip()
    if not text:
        return None
    try:
        if not text.startswith("{"):
            if not os.path.isfile(text):
                raise BadInput("validation_thresholds", text, "give the thresholds as JSON (the shape of the spec's "
                                                              "validation: section) or the path of such a file")
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        try:
            return json.loads(text)
        except ValueError:
            import yaml

            return yaml.safe_load(text)
    except (ValueError, ImportError) as exc:
        raise BadInput("validation_thresholds", text[:80], f"not JSON or YAML ({str(exc)[:100]}); use the shape "
                                                           f"of the spec's validation: section") from None


def thresholds_for(spec: Any, override: Any = None) -> Thresholds:
    """The thresholds in force: the defaults, the feature spec's ``validation:`` section, then the run's
    ``override`` (JSON text, a file, or a mapping), checked against the spec's features.

    Raises:
        BadInput: an override that is not a valid section, every problem in one line.
    """
    from ctr_model.feature_spec import criteo_spec

    spec = spec if spec is not None else criteo_spec()
    extra = _override(override)
    problems = check_section(extra, [d.name for d in spec.dense], [c.name for c in spec.categorical],
                             where="validation_thresholds")
    if problems:
        raise BadInput("validation_thresholds", extra, "; ".join(f"{k}={v!r}: {fix}" for k, v, fix in problems))
    return Thresholds(spec.validation or None, extra)


def check_params(feature_spec: Any, thresholds: Any = None, baseline: Any = "") -> None:
    """A run's validation parameters checked up front, before prep (``ctr-volcano run``, the back-fill):
    the feature spec's ``validation:`` section, the run's ``validation_thresholds`` against the spec's
    features, and that a ``validation_baseline`` holds a profile. What the validation step would refuse
    after prep, refused in a second.

    Raises:
        BadInput: naming ``feature_spec``, ``validation_thresholds`` or ``validation_baseline``.
    """
    from ctr_volcano.data.spec_input import read_feature_spec

    thresholds_for(read_feature_spec(feature_spec), thresholds)
    if baseline:
        try:
            profile_path_of(str(baseline))
        except BadInput as exc:
            raise BadInput("validation_baseline", baseline, exc.fix) from None


def check_submitted_params(params: Mapping[str, Any]) -> None:
    """The part of :func:`check_params` a run submitted to a cluster can have checked here, before the
    upload: ``validation_thresholds`` given as JSON, against the spec's features when the spec is JSON
    or a file here too, else its statistics and levels alone (a spec or thresholds file on the claim,
    and ``validation_baseline``, are read by the step).

    Raises:
        BadInput: naming ``validation_thresholds`` or ``feature_spec``.
    """
    from ctr_volcano.data.spec_input import read_feature_spec

    text = str(params.get("validation_thresholds") or "").strip()
    if not text.startswith("{"):
        return
    spec_value = str(params.get("feature_spec") or "").strip()
    if not spec_value or spec_value.startswith("{") or os.path.isfile(spec_value):
        thresholds_for(read_feature_spec(spec_value), text)
        return
    extra = _override(text)
    section = {k: v for k, v in extra.items() if k != "features"} if isinstance(extra, Mapping) else extra
    problems = check_section(section, [], [], where="validation_thresholds")
    if problems:
        raise BadInput("validation_thresholds", extra, "; ".join(f"{k}={v!r}: {fix}" for k, v, fix in problems))


def judge(day: DataProfile, day_doc: Mapping[str, Any], reference: Optional[DataProfile],
          reference_doc: Optional[Mapping[str, Any]], thresholds: Thresholds, *, day_path: str,
          reference_path: Optional[str], serving: bool = False) -> Dict[str, Any]:
    """The verdict on two loaded profiles as the ``validation.json`` document."""
    verdict = decide(day, reference, thresholds, day_spec=day_doc.get("feature_spec"),
                     reference_spec=(reference_doc or {}).get("feature_spec"), with_label=not serving,
                     with_rows=not serving)
    result = verdict.to_dict()
    result.update(summary=verdict.summary(), thresholds=thresholds.to_dict(),
                  data={"path": day_path, "rows": day.rows, "label_rate": day.label_rate},
                  reference={"path": reference_path, "rows": reference.rows if reference else None,
                             "label_rate": reference.label_rate if reference else None})
    return result


def validate_profiles(data: str, reference: Optional[str], thresholds: Thresholds,
                      out_dir: Optional[str] = None) -> Dict[str, Any]:
    """Validate the profile at ``data`` against the one at ``reference`` (each a profile.json, a prep
    output or split directory, or an exported model; ``None``: no reference yet).

    Returns:
        The ``validation.json`` document (also written to ``out_dir`` with ``validation.html``).

    Raises:
        BadInput: no profile at either path.
    """
    day, day_doc = read_profile(data)
    ref, ref_doc = read_profile(reference) if reference else (None, None)
    result = judge(day, day_doc, ref, ref_doc, thresholds, day_path=profile_path_of(data),
                   reference_path=profile_path_of(reference) if reference else None)
    if out_dir:
        write_outputs(result, out_dir)
    return result


def write_outputs(result: Mapping[str, Any], out_dir: str) -> None:
    """``validation.json`` and ``validation.html`` into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, VALIDATION_FILE), result)
    write_text(os.path.join(out_dir, REPORT_FILE), render_html(result))


def refuse_failed(result: Mapping[str, Any], what: str) -> None:
    """Raise, in one line, if the verdict is ``fail``: every failure, then what to do.

    Raises:
        BadInput: field ``data``, value ``what`` (the day, the file), the failures and the fix.
    """
    if result["verdict"] != "fail":
        return
    failures = [f["line"] for f in result["findings"] if f["severity"] == "fail"]
    raise BadInput("data", what, "data validation failed: " + "; ".join(failures) + ". Fix the day's data "
                   "upstream, or, if the change is real, set validation_thresholds (docs/validation.md)")


def reference_of(champion: Optional[str], baseline: str = "") -> Optional[str]:
    """The reference a pipeline step validates against: the pinned ``baseline`` if given, else the
    champion model's training profile, else none (the first run, or a champion exported before
    profiles existed: logged, not an error).

    Raises:
        BadInput: a ``baseline`` with no profile.
    """
    if baseline:
        profile_path_of(baseline)     # refuses a baseline that has none, naming it
        return baseline
    if not champion:
        return None
    try:
        profile_path_of(champion)
    except BadInput as exc:
        logger.warning("validation: the champion has no training profile (%s); checking the schema only", exc.fix)
        return None
    return champion


def validate_step(data: str, *, champion: Optional[str], baseline: str, feature_spec: str, thresholds: str,
                  what: str) -> Dict[str, Any]:
    """What a pipeline's validation step does: the thresholds from the spec and the run, the
    reference (:func:`reference_of`), the verdict; a ``fail`` raises in one line.

    Raises:
        BadInput: a bad spec, override or baseline; or the verdict is ``fail`` (:func:`refuse_failed`).
    """
    from ctr_volcano.data.spec_input import read_feature_spec

    levels = thresholds_for(read_feature_spec(feature_spec), thresholds)
    reference = reference_of(champion, baseline)
    result = validate_profiles(data, reference, levels)
    logger.info("validation of %s against %s: %s", what, reference or "no reference", result["summary"])
    return result


def read_result(path: str) -> Dict[str, Any]:
    """A ``validation.json`` (or the directory holding it)."""
    if os.path.isdir(path):
        path = os.path.join(path, VALIDATION_FILE)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
