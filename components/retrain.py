"""KFP components of recurring retraining: data window, champion lookup, champion/challenger gate,
registration.

Thin adapters over :mod:`ctr_volcano.retraining.window`, :mod:`ctr_volcano.retraining.registry` and
:mod:`ctr_volcano.retraining.gate`, each tested on its own with real data. Choices forced by KFP:

* The gate returns its verdict as a parameter and the registration step takes it as an argument
  (``promote=gate.outputs["Output"]``) instead of sitting under ``dsl.If``: every version is
  registered (refused ones with the reason), and ``kfp.local``'s silently-false conditions on named
  outputs of multi-output tasks cannot skip a promotion.
* ``register_model`` returns whether its version became the champion, as its only output: steps that
  use the new champion sit under ``dsl.If`` on it, a condition ``kfp.local`` does evaluate.
* ``find_champion`` always writes its Model output; with no champion yet it is an empty directory
  with ``metadata["found"] = False``, which ``train_ctr`` reads as "cold start" and the gate as "first
  run". That sentinel stops at these component boundaries.
* Every Metrics output gets a JSON file (``kfp.local`` counts an artifact without a file as a cache
  miss).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from ctr_volcano.images import component_image

__all__ = ["resolve_data_window", "find_champion", "champion_challenger_gate", "register_model"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
def resolve_data_window(
    data_uri: str,
    raw_data: Output[Dataset],
    run_date: str = "",
    schedule_time: str = "",
    create_time: str = "",
    window_days: int = 1,
    lag_days: int = 0,
):
    """Resolve the run's data window from its date and copy those days' raw files into one Dataset.

    Args:
        data_uri: raw data location, with an optional {date} template, e.g. /mnt/ctr/clicks/day={date}.
        raw_data: the window's files, named <date>-<file>, plus window.json (prep reads the files).
        run_date: YYYY-MM-DD; empty uses the run's scheduled time, then its create time, then today (UTC).
        schedule_time: the run's scheduled time (pass dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER).
        create_time: the run's create time (pass dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER).
        window_days: number of consecutive days read, ending at the run date minus lag_days.
        lag_days: days between the run date and the window's last day (1 for a nightly run on yesterday's data).
    """
    import logging

    from ctr_model.logs import setup_logging
    from ctr_volcano.retraining.window import copy_window, resolve_window

    setup_logging()
    window = resolve_window(data_uri, run_date=run_date, schedule_time=schedule_time,
                            create_time=create_time, window_days=window_days, lag_days=lag_days)
    files = copy_window(window, raw_data.path)
    raw_data.metadata.update({"run_date": window.run_date.isoformat(), "date_source": window.date_source,
                              "dates": [d.isoformat() for d in window.dates], "files": len(files)})
    logging.info("resolve_data_window: run date %s (from %s), days %s: %d file(s)",
                 window.run_date, window.date_source, ", ".join(d.isoformat() for d in window.dates),
                 len(files))


@dsl.component(base_image=component_image(), install_kfp_package=False)
def find_champion(registry: str, model_name: str, champion: Output[Model]):
    """Fetch the registry's current champion (the model to warm-start from and to beat).

    Args:
        registry: the model registry: a directory (a mounted volume on a cluster) or an s3:// prefix.
        model_name: the model's name in the registry.
        champion: the champion's model directory, with metadata version and found=True; with no
            champion yet an empty directory with found=False (train cold, publish if >= min_auc).
    """
    import logging
    import os

    from ctr_model.logs import setup_logging
    from ctr_volcano.retraining.registry import ModelRegistry

    setup_logging()
    reg = ModelRegistry(registry, model_name)
    found = reg.champion()
    os.makedirs(champion.path, exist_ok=True)
    if found is None:
        champion.metadata.update({"found": False, "version": ""})
        logging.info("find_champion: %s has no champion for %s yet: cold start", registry, model_name)
        return
    reg.download(found, champion.path)
    champion.metadata.update({"found": True, "version": found.version,
                              "auc": found.meta.get("metrics", {}).get("challenger_auc", -1.0)})
    logging.info("find_champion: champion of %s is version %s (%s)", model_name, found.version,
                 found.model_uri)


@dsl.component(base_image=component_image(), install_kfp_package=False)
def champion_challenger_gate(
    challenger: Input[Model],
    champion: Input[Model],
    test_data: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[Markdown],
    validation: Input[Metrics] = None,
    min_auc: float = 0.7,
    tolerance: float = 0.002,
    allow_warnings: bool = False,
    gate_task: str = "",
) -> bool:
    """Score the champion and the challenger on the same test split; publish only a model that is not worse.

    Args:
        challenger: the model trained by this run.
        champion: the current champion from find_champion (found=False on the first run).
        test_data: this run's test split (neither model trained on it).
        metrics: challenger_auc, champion_auc (-1 without a champion), publish (1/0) and the logloss of both.
        report: the verdict, its reason and both models' metrics.
        validation: the day's data validation (validate_ctr_data's metrics); a warn verdict is not promoted
            unless allow_warnings.
        min_auc: the AUC floor; also decides the first run.
        tolerance: how far below the champion's AUC the challenger may be and still be published.
        allow_warnings: promote a challenger even if the day's data validation warned.
        gate_task: the label whose AUC the gate compares for a multi-task model; empty: the first.

    Returns:
        True when the challenger should become the champion (register_model's promote).
    """
    import json
    import logging
    import os
    import tempfile

    from ctr_model.logs import setup_logging
    from ctr_volcano.retraining.gate import compare, render_markdown

    setup_logging()
    has_champion = bool(champion.metadata.get("found", True))
    checked = None
    if validation is not None and os.path.isfile(validation.path):
        with open(validation.path) as fh:
            checked = json.load(fh)
    with tempfile.TemporaryDirectory(prefix="ctr-gate-") as tmp:
        result = compare(challenger.path, champion.path if has_champion else None, test_data.path, tmp,
                         min_auc=min_auc, tolerance=tolerance, validation=checked, allow_warnings=allow_warnings,
                         task=gate_task)
    d = result["decision"]
    champ = result["champion"] or {}
    scalars = {"challenger_auc": d["challenger_auc"],
               "champion_auc": d["champion_auc"] if d["champion_auc"] is not None else -1.0,
               "publish": 1.0 if d["publish"] else 0.0,
               "challenger_logloss": result["challenger"]["logloss"],
               "champion_logloss": champ.get("logloss", -1.0), "rows": result["challenger"]["rows"]}
    for key, value in scalars.items():
        metrics.log_metric(key, value)
    os.makedirs(os.path.dirname(metrics.path) or ".", exist_ok=True)
    with open(metrics.path, "w") as fh:
        json.dump({**result, "champion_version": champion.metadata.get("version", "")}, fh, indent=2)
    with open(report.path, "w") as fh:
        fh.write(render_markdown(result, champion_label="champion "
                                 + (champion.metadata.get("version") or "(none)")))
    logging.info("champion_challenger_gate: %s: %s", "PUBLISH" if d["publish"] else "REFUSE", d["reason"])
    return bool(d["publish"])


@dsl.component(base_image=component_image(), install_kfp_package=False)
def register_model(
    model: Input[Model],
    champion: Input[Model],
    gate_metrics: Input[Metrics],
    raw_data: Input[Dataset],
    registry: str,
    model_name: str,
    version: str,
    promote: bool,
) -> bool:
    """Register the trained model as a new version and, if the gate passed it, make it the champion.

    Args:
        model: the model trained by this run.
        champion: the champion it was compared with (and, unless warm_start=False, continued).
        gate_metrics: the gate's metrics (both AUCs, the decision and its reason, the data validation's
            verdict and findings).
        raw_data: the run's data window (its metadata is recorded).
        registry: the model registry (directory or s3:// prefix).
        model_name: the model's name in the registry.
        version: the version id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER: the KFP run id).
        promote: the gate's verdict; True moves the champion pointer to this version.

    Returns:
        True when this version became the champion (the condition of the pipeline's steps that use
        the new champion, e.g. scoring the day's candidates).
    """
    import json
    import logging

    from ctr_model.logs import setup_logging
    from ctr_volcano.retraining.registry import ModelRegistry

    setup_logging()
    with open(gate_metrics.path) as fh:
        gate = json.load(fh)
    reg = ModelRegistry(registry, model_name)
    parent = model.metadata.get("warm_start_from") or None     # set by train_ctr when it warm-started
    window = {k: raw_data.metadata.get(k) for k in ("run_date", "date_source", "dates")}
    metrics = {"challenger_auc": gate["decision"]["challenger_auc"],
               "champion_auc": gate["decision"]["champion_auc"],
               "test_rows": gate["challenger"]["rows"],
               "champion_version": champion.metadata.get("version") or None}
    reg.register(model.path, version, metrics=metrics, window=window, parent=parent,
                 decision=gate["decision"], validation=gate.get("validation"))
    if promote:
        pointer = reg.promote(version)
        logging.info("register_model: %s is the champion of %s (was %s)", version, model_name,
                     pointer["previous"])
        return True
    logging.info("register_model: %s registered, not promoted (%s); champion stays %s", version,
                 gate["decision"]["reason"], champion.metadata.get("version") or "none")
    return False
