"""KFP components for the last steps of the CTR pipeline: evaluate, gate on AUC, publish.

Thin adapters over :func:`ctr_volcano.evaluation.evaluate.evaluate`; everything they compute is tested there with
real data. Why three components and not one: ``dsl.If`` must condition on the *only* output of a task.
Under ``kfp.local`` (kfp 2.17.3) a condition on a named output of a multi-output task is silently
false, so the gate is its own single-output component (``check_auc_gate -> bool``) and the pipeline
writes ``with dsl.If(gate.output == True): publish_model(...)``, which behaves the same on a cluster.

Every Metrics/ClassificationMetrics output also gets a small JSON file at its path: ``kfp.local``
counts an artifact with no file as a cache miss, so without it these steps would never be cached.
"""

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components.signature import shipped
from ctr_model.defaults import DEFAULT_SCORE_BATCH
from ctr_volcano.images import component_image

__all__ = ["evaluate_ctr", "check_auc_gate", "publish_model"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
@shipped   # DEFAULT_SCORE_BATCH as a literal: KFP runs the source alone
def evaluate_ctr(
    model: Input[Model],
    test_data: Input[Dataset],
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    report: Output[HTML],
    threshold: float = 0.5,
    batch_size: int = DEFAULT_SCORE_BATCH,
) -> float:
    """Score the held-out split with the trained model and report exact AUC, log loss and calibration.

    Args:
        model: the exported model directory from the training step.
        test_data: the test split from the data-prep step (Parquet shards + schema.json).
        metrics: scalar metrics (auc, logloss, rows, positive_rate, mean_prediction, accuracy).
        classification: ROC curve and the confusion matrix at `threshold`, for the KFP UI.
        report: an HTML page with the ROC and calibration plots and per-decile calibration table.
        threshold: probability at or above which an impression counts as a predicted click (confusion matrix only).
        batch_size: rows scored per batch; lower it if the evaluation pod runs out of memory.

    Returns:
        The exact test AUC, as this step's single parameter output (feed it to `check_auc_gate`).
    """
    import json
    import logging
    import shutil
    import tempfile

    from ctr_model.logs import setup_logging
    from ctr_volcano.evaluation.evaluate import evaluate

    setup_logging()

    with tempfile.TemporaryDirectory(prefix="ctr-eval-") as tmp:
        result = evaluate(model.path, test_data.path, tmp, threshold=threshold, batch_size=batch_size)
        shutil.copyfile(result["report"], report.path)
    result["report"] = report.path      # where the report lives now (the temp dir is gone)
    for key in ("auc", "logloss", "rows", "positive_rate", "mean_prediction", "accuracy"):
        metrics.log_metric(key, result[key])
    roc = result["roc"]
    classification.log_roc_curve([p["fpr"] for p in roc], [p["tpr"] for p in roc],
                                 [p["threshold"] for p in roc])
    cm = result["confusion_matrix"]
    classification.log_confusion_matrix(["no click", "click"], [[cm["tn"], cm["fp"]], [cm["fn"], cm["tp"]]])
    scalars = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    with open(metrics.path, "w") as f:
        json.dump(scalars, f, indent=2, sort_keys=True)
    with open(classification.path, "w") as f:
        json.dump({"roc": roc, "confusion_matrix": cm, "calibration": result["calibration"]}, f, indent=2)
    logging.getLogger("components.evaluate_ctr").info("AUC %.6f, log loss %.6f on %d rows", result["auc"],
                                           result["logloss"], result["rows"])
    return float(result["auc"])


@dsl.component(base_image=component_image(), install_kfp_package=False)
def check_auc_gate(auc: float, min_auc: float = 0.7) -> bool:
    """Quality gate: pass the model only if its test AUC reaches `min_auc`.

    Args:
        auc: the test AUC from `evaluate_ctr`.
        min_auc: the lowest acceptable test AUC; 0 lets every model through, 1 blocks all.

    Returns:
        True when `auc >= min_auc`. This is the task's only output, so `dsl.If(gate.output == True)`
        works on a cluster and under kfp.local alike.
    """
    import logging

    from ctr_model.logs import setup_logging
    from ctr_volcano.errors import BadInput

    setup_logging()
    if not 0.0 <= min_auc <= 1.0:
        raise BadInput("min_auc", min_auc, "use an AUC threshold in [0, 1], e.g. 0.7")
    passed = auc >= min_auc
    logging.getLogger("components.check_auc_gate").info(
        f"AUC {auc:.6f} {'>=' if passed else '<'} min_auc {min_auc:.6f}: "
        f"{'PASSED' if passed else 'BLOCKED (the model is not published)'}")
    return passed


@dsl.component(base_image=component_image(), install_kfp_package=False)
def publish_model(model: Input[Model], auc: float, min_auc: float, published_model: Output[Model]):
    """Publish a model that passed the quality gate: copy it to a new Model artifact marked approved.

    Args:
        model: the trained model directory.
        auc: its test AUC (recorded in the artifact's metadata).
        min_auc: the gate it passed (recorded too).
        published_model: the approved copy; its metadata says `approved: true` with the AUC, so model
            registries and downstream serving steps can select it. It carries model.onnx and the
            Triton repository serving/ctr/ (written at export) and, on an object store,
            inference_service.yaml: the KServe InferenceService that serves it (docs/serving.md).
    """
    import logging
    import os
    import shutil

    from ctr_model.logs import setup_logging

    setup_logging()
    if os.path.isdir(model.path):
        shutil.copytree(model.path, published_model.path)
    else:
        shutil.copyfile(model.path, published_model.path)
    published_model.metadata.update({"approved": True, "auc": float(auc), "min_auc": float(min_auc)})
    log = logging.getLogger("components.publish_model")
    log.info(f"published {published_model.uri} (AUC {auc:.6f} >= {min_auc:.6f})")
    if os.path.isdir(published_model.path):   # model.onnx and serving/ came with it; add the manifest
        from ctr_volcano.serving.inference_service import write_beside

        manifest = write_beside(published_model.path, published_model.uri)
        published_model.metadata["inference_service"] = manifest is not None
        log.info(f"wrote {manifest}" if manifest else "no inference_service.yaml: the artifact is local")
