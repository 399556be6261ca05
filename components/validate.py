"""KFP component ``validate_ctr_data``: a prepped day's profile against a reference, before training.

A thin adapter over :func:`ctr_volcano.validation.validate.validate_step` (tested on its own with real
prepped data). Choices forced by KFP:

* The verdict travels as the Metrics artifact's file (the whole ``validation.json``), which the gate
  reads (``warn``: no promotion without ``allow_warnings``) and the registry records; no ``dsl.If``
  on an output (``kfp.local`` silently skips conditions on named outputs of multi-output tasks).
* ``fail`` fails the step with the findings in its one-line error (a ``BadInput``: ``ctr-volcano run``
  exits 2); the training step runs after this one, so it never starts.
* ``enabled=False`` (the training pipeline's default) writes a ``skipped`` verdict at once, so the
  step can sit in the graph before training whatever the run asks for (a task cannot depend on one
  inside a ``dsl.If``).
"""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from ctr_volcano.images import component_image

__all__ = ["validate_ctr_data"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
def validate_ctr_data(
    data: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[HTML],
    champion: Input[Model] = None,
    window: Input[Dataset] = None,
    feature_spec: str = "",
    validation_thresholds: str = "",
    validation_baseline: str = "",
    enabled: bool = True,
):
    """Compare the prepped data's profile with a reference; fail before training on a broken day.

    Checks the schema, the row count, the label rate and, per feature, the missing rate, the drift of
    its distribution (Jensen-Shannon for dense, L-infinity for categorical features) and the share of
    rows with ids the reference never saw (docs/validation.md).

    Args:
        data: the prepped train split (its profile.json describes both splits).
        metrics: verdict (0 pass, 1 warn, 2 fail), finding counts and each statistic's largest value;
            the file holds the whole validation.json.
        report: the verdict, one line per finding and every feature's statistics.
        champion: the reference by default: the champion's training profile (find_champion; none on
            the first run).
        window: the run's data window (names the days in the error).
        feature_spec: the data's feature spec (JSON or a path); its validation: section sets the
            thresholds.
        validation_thresholds: thresholds for this run as JSON, over the spec's (the shape of its
            validation: section), e.g. {"js_divergence": 0.5}.
        validation_baseline: a pinned reference instead of the champion: a profile.json, a prep
            output or an exported model (a path the step can read).
        enabled: False skips the validation (verdict "skipped").
    """
    import json
    import logging
    import os

    from ctr_model.logs import setup_logging
    from ctr_volcano.validation.report import metric_scalars, render_html
    from ctr_volcano.validation.validate import refuse_failed, validate_step

    setup_logging()
    os.makedirs(os.path.dirname(metrics.path) or ".", exist_ok=True)
    if not enabled:
        result = {"verdict": "skipped", "findings": [], "statistics": {}, "summary": "validation off"}
        with open(metrics.path, "w") as fh:
            json.dump(result, fh, indent=2)
        with open(report.path, "w") as fh:
            fh.write("<html><body><h1>Data validation: off</h1></body></html>\n")
        metrics.log_metric("verdict", -1.0)
        logging.info("validate_ctr_data: off (enabled=False)")
        return
    has_champion = champion is not None and bool(champion.metadata.get("found", True))
    dates = (window.metadata.get("dates") if window is not None else None) or []
    what = ", ".join(dates) or data.uri
    result = validate_step(data.path, champion=champion.path if has_champion else None,
                           baseline=validation_baseline, feature_spec=feature_spec,
                           thresholds=validation_thresholds, what=what)
    result["champion_version"] = champion.metadata.get("version", "") if has_champion else ""
    with open(metrics.path, "w") as fh:
        json.dump(result, fh, indent=2)
    with open(report.path, "w") as fh:
        fh.write(render_html(result))
    for key, value in metric_scalars(result).items():
        metrics.log_metric(key, value)
    logging.info("validate_ctr_data: %s", result["summary"])
    refuse_failed(result, what)
