"""KFP component for batch scoring: raw candidates to Parquet shards of probabilities with the chosen
columns kept.

A thin adapter over :func:`ctr_volcano.scoring.score` (tested there on real data): the model
artifact (an exported model directory, from a training run's ``model`` output, an importer or the
registry's champion) and the candidates (a file or a directory in the model's spec format) in, the
output directory (``part-*.parquet``, ``scores.json``, ``rejects.jsonl``) out as a Dataset, its
counts as Metrics (with a file at the Metrics path: ``kfp.local`` never caches an artifact without
one).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from ctr_volcano.images import component_image

__all__ = ["score_ctr"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
def score_ctr(
    model: Input[Model],
    candidates: Input[Dataset],
    scores: Output[Dataset],
    summary: Output[Metrics],
    keep_columns: str = "",
    fanout: int = 1,
    pvc_name: str = "",
    pvc_mount_path: str = "/mnt/ctr",
    namespace: str = "",
    image: str = "",
    queue: str = "default",
    cpu: str = "1",
    memory: str = "2Gi",
):
    """Score raw candidate rows with a trained model: Parquet shards of probabilities, the chosen columns kept.

    Args:
        model: the exported model directory (a training run's model, an imported one or the registry's champion).
        candidates: raw rows in the model's feature-spec layout (a file or a directory; plain or .gz); the label column is optional (when present, scores.json also has AUC and log loss).
        scores: the output directory: part-*.parquet (the keep_columns, then probability and, for a multi-task model, probability_<task> per later task, in input order), scores.json (rows in, scored, rejected by reason, the model's sha256 and spec, the inputs) and rejects.jsonl (file and line of each refused row).
        summary: rows_in, rows_scored, rows_rejected (and auc, logloss with a label).
        keep_columns: comma-separated input columns copied into the output beside probability, e.g. id.
        fanout: workers over the input's units (0 or 1: one): a Volcano Job of N scoring pods on the claim pvc_name when it is set, else N processes in this step. The shards are the same for every value.
        pvc_name: with fanout: a ReadWriteMany PVC this step mounts at pvc_mount_path and the scoring pods mount too; the input is read there if it is on it, else copied there.
        pvc_mount_path: where this step and the scoring pods mount pvc_name.
        namespace: the scoring pods' namespace; empty means this step's.
        image: the scoring pods' image; empty means the release's component image.
        queue: the Volcano queue of the scoring pods.
        cpu: CPU request and limit of each scoring pod.
        memory: memory request and limit of each scoring pod.
    """
    import json
    import logging

    from ctr_model.logs import setup_logging
    from ctr_volcano.scoring import ScoreArgs, score

    setup_logging()
    keep = tuple(c for c in keep_columns.split(",") if c.strip())
    args = ScoreArgs(model=model.path, inputs=(candidates.path,), out=scores.path, keep=keep, workers=max(1, fanout))
    if fanout > 0 and pvc_name:
        from ctr_volcano.scoring.volcano import score_step_pods

        doc = score_step_pods(args, pvc_name=pvc_name, pvc_mount_path=pvc_mount_path, namespace=namespace,
                              image=image, queue=queue, cpu=cpu, memory=memory)
    else:
        doc = score(args)
    for key in ("rows_in", "rows_scored", "rows_rejected"):
        summary.log_metric(key, doc[key])
    for key, value in doc.get("metrics", {}).items():
        summary.log_metric(key, value)
    scores.metadata.update({"rows": doc["rows_scored"], "model_sha256": doc["model"]["sha256"],
                            "keep_columns": list(keep)})
    with open(summary.path, "w") as fh:
        json.dump({k: doc[k] for k in ("rows_in", "rows_scored", "rows_rejected", "rejected_by_reason")},
                  fh, indent=2, sort_keys=True)
    logging.getLogger("components.score_ctr").info("scored %d of %d rows (%d rejected) into %s",
                                                   doc["rows_scored"], doc["rows_in"], doc["rows_rejected"],
                                                   scores.uri)
