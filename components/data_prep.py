"""KFP component ``prepare_ctr_data``: raw Criteo TSV -> train/test Parquet splits + stats.

A thin adapter over :func:`ctr_volcano.data.prep.prep_splits` (tested on its own with real data): it
turns the KFP parameters into a validated :class:`~ctr_volcano.data.prep.PrepConfig`, points the two
output Datasets at the split directories, and copies the headline counts into the Metrics
artifact. The full stats document is written to the Metrics file too, which also keeps
``kfp.local``'s cache working (it treats an artifact with no file as a cache miss).

Top-level imports are stdlib + kfp + our light modules; prep's heavy imports (numpy, pyarrow) happen
inside the function, in the component image.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from ctr_volcano.images import component_image

__all__ = ["prepare_ctr_data"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
def prepare_ctr_data(
    raw_data: Input[Dataset],
    train_data: Output[Dataset],
    test_data: Output[Dataset],
    stats: Output[Metrics],
    hash_buckets: int = 1000001,   # a literal: KFP runs the function source alone (ctr_model.defaults)
    test_fraction: float = 0.1,
    shards: int = 8,
    max_bad_fraction: float = 0.001,
    seed: int = 42,
    workers: int = 0,
    feature_spec: str = "",
    fanout: int = 0,
    pvc_name: str = "",
    pvc_mount_path: str = "/mnt/ctr",
    namespace: str = "",
    image: str = "",
    queue: str = "default",
    cpu: str = "1",
    memory: str = "2Gi",
):
    """Prepare click logs for training: stable hashing, normalisation, split.

    Bad lines (wrong field count, non-integer in an integer column, label not 0/1) are counted and
    reported with file and line number; the step fails if they exceed ``max_bad_fraction``.

    Args:
        raw_data: a Criteo TSV file (plain or .gz) or a directory of them.
        train_data: output directory of ``part-NNNNN.parquet`` shards plus ``schema.json``.
        test_data: output directory laid out like ``train_data``.
        stats: rows in/train/test/rejected and the positive rate; the file holds the full stats
            (rejected examples, per-column missing rates).
        hash_buckets: number of categorical ids (ids 0..25 mean "empty", one per column).
        test_fraction: share of lines sent to the test split (deterministic for a seed).
        shards: number of train shards; trainers take whole files, so a multiple of the trainers.
        max_bad_fraction: the step fails if more than this share of lines is rejected.
        seed: selects the train/test split.
        workers: processes parsing and transforming in parallel; 0 means the CPUs the step may use
            (its CPU limit if one is set, else the node's), at most 8. The output does not depend
            on it; each worker adds about 60 MB of memory (760 MB in all at 8).
        feature_spec: the raw data's layout as a JSON feature spec (CSV/TSV/Parquet, named
            columns, multi-valued features; docs/features.md); empty means Criteo TSV.
        fanout: 0 preps in this step alone; N > 0 fans prep out to N workers per phase (Criteo
            TSV; docs/scale.md): a Volcano Job of N prep pods on the claim pvc_name when it is set,
            else N processes in this step. The output is the same for every value.
        pvc_name: with fanout: a ReadWriteMany PVC this step mounts at pvc_mount_path and the prep
            pods mount too; the input is read there if it is on it, else copied there.
        pvc_mount_path: where this step and the prep pods mount pvc_name.
        namespace: the prep pods' namespace; empty means this step's.
        image: the prep pods' image; empty means the release's component image.
        queue: the Volcano queue of the prep pods.
        cpu: CPU request and limit of each prep pod.
        memory: memory request and limit of each prep pod.
    """
    import json
    import os

    from ctr_model.logs import setup_logging
    from ctr_volcano.data.prep import PrepConfig, prep_splits
    from ctr_volcano.data.spec_input import read_feature_spec

    setup_logging()
    spec = read_feature_spec(feature_spec)   # every bad key in one line, before any work

    config = PrepConfig(hash_buckets=int(hash_buckets), test_fraction=float(test_fraction),
                        shards=int(shards), max_bad_fraction=float(max_bad_fraction),
                        seed=int(seed), workers=int(workers))
    os.makedirs(os.path.dirname(stats.path) or ".", exist_ok=True)
    if int(fanout) > 0 and pvc_name:
        from ctr_volcano.training.volcano.prep_job import prep_step_pods

        result = prep_step_pods(raw_data.path, train_data.path, test_data.path, config, int(fanout), spec=spec,
                                pvc_name=pvc_name, pvc_mount_path=pvc_mount_path, namespace=namespace,
                                image=image, queue=queue, cpu=cpu, memory=memory)
    elif int(fanout) > 0:
        from ctr_volcano.data.prep.fanout import prep_fanout_splits

        result = prep_fanout_splits([raw_data.path], train_data.path, test_data.path, config,
                                    workers=int(fanout), spec=spec)
    else:
        result = prep_splits([raw_data.path], train_data.path, test_data.path, config, spec=spec)
    window_file = os.path.join(raw_data.path, "window.json")   # written by resolve_data_window
    if os.path.isfile(window_file):
        with open(window_file) as fh:
            result["window"] = json.load(fh)
    with open(stats.path, "w") as fh:
        json.dump(result, fh, indent=2)
    for key in ("rows_in", "rows_train", "rows_test", "rows_rejected", "positive_rate",
                "rejected_fraction"):
        stats.log_metric(key, result[key])
    for artifact, rows in ((train_data, result["rows_train"]), (test_data, result["rows_test"])):
        artifact.metadata.update({"rows": rows, "hash_buckets": result["hash_buckets"],
                                  "schema_version": result["schema_version"],
                                  "format": "parquet shards + schema.json"})
