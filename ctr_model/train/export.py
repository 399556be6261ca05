"""Trainer 0's export of the final checkpoint as the model: ``OUTPUT/model/``.

The dense arrays are pulled from the pservers, the sparse tables parsed from the checkpoint's shards
(every trainer has just written it together, so the pservers need not write the tables a second
time, as ``save_inference_model`` made them: 8-11 s for 400k keys, docs/performance.md), the
checkpoint itself is copied for warm starts, the output bias calibrated, and a serving graph written
where the family has one; then the model is published.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Optional, Sequence, Tuple

from ctr_model import checkpoint as ckpt
from ctr_model import workspace as wsp
from ctr_model.atomic import write_json
from ctr_model.config import TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.errors import JobFailed
from ctr_model.feature_spec import FeatureSpec
from ctr_model.space import one_line_if_full
from ctr_model.train import DENSE_FILE, MODEL_DIR, MODEL_META, say
from ctr_model.train.program import pull_dense
from ctr_model.warm_start import export_checkpoint

__all__ = ["export", "model_meta"]


def export(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, fleet: Any,
           train_files: Sequence[str], features: Optional[FeatureSpec] = None) -> None:
    """Trainer 0: write and publish ``model/`` from the newest complete checkpoint (the others return).

    ``train_files``: local training shards for the calibration.

    Raises:
        NoSpace: the model did not fit (no half model is left behind).
        JobFailed: there is no complete checkpoint to export from.
    """
    if spec.index != 0:
        return
    last = ckpt.latest_complete(ws.root)
    if last is None:
        raise JobFailed(spec.job_id, "Failed", f"no complete checkpoint under {ws.location} to export from",
                        role=spec.name)
    ws.fetch(os.path.relpath(last.path, ws.root))    # with a store: the pservers' shards of it
    model_dir = ws.local(MODEL_DIR)
    shutil.rmtree(model_dir, ignore_errors=True)
    if isinstance(ws, wsp.StoreWorkspace):
        ws.remove(MODEL_DIR)
    # a full volume: one line naming the model directory, and no half model left to collect
    with one_line_if_full(model_dir, cleanup=lambda: shutil.rmtree(model_dir, ignore_errors=True)):
        os.makedirs(model_dir)
        _write_export(spec, config, fleet, last, model_dir, train_files, features)
    ws.publish(MODEL_DIR)


def _write_export(spec: RoleSpec, config: TrainConfig, fleet: Any, last: ckpt.Checkpoint, model_dir: str,
                  train_files: Sequence[str], features: Optional[FeatureSpec]) -> None:
    import numpy as np
    import paddle

    from ctr_model.net import dense_param_names

    pull_dense(fleet)
    scope = paddle.static.global_scope()
    arrays: Dict[str, Any] = {name: np.array(scope.find_var(name).get_tensor())
                              for name in dense_param_names(config, features)}
    np.savez(os.path.join(model_dir, DENSE_FILE), **arrays)
    keys, tables = _export_sparse(config, features, fleet, model_dir, last.path)
    export_checkpoint(last.path, model_dir)   # what a later run warm-starts from
    say(spec, f"exported {model_dir} ({keys} sparse keys in {len(tables)} table(s), from "
              f"{os.path.basename(last.path)})")
    meta = model_meta(spec, config)
    meta["sparse_tables"] = tables
    if features is not None:
        meta["feature_spec"] = features.to_dict()   # the scorer's and warm start's layout
    write_json(os.path.join(model_dir, MODEL_META), meta, indent=1, sort_keys=True)
    from ctr_model.calibrate import calibrate_export
    from ctr_model.calibrate_tasks import calibrate_tasks

    several = features is not None and len(features.task_labels) > 1   # one output bias per task
    meta["calibration"] = (calibrate_tasks if several else calibrate_export)(model_dir, train_files)
    write_json(os.path.join(model_dir, MODEL_META), meta, indent=1, sort_keys=True)
    say(spec, f"calibrated the output bias on the training split: {meta['calibration']}")
    _export_onnx(spec, model_dir)


def _export_onnx(spec: RoleSpec, model_dir: str) -> None:
    """``model.onnx`` and the Triton repository, what a serving stack loads; a family the graph does
    not cover keeps its Paddle export only (logged)."""
    from ctr_model.onnx_export import NotServable, export_onnx

    try:
        served = export_onnx(model_dir)
        say(spec, f"wrote {model_dir}/model.onnx ({served['sparse_keys']} keys) and the Triton repository")
    except NotServable as exc:
        say(spec, f"no ONNX export: {exc}")


def _export_sparse(config: TrainConfig, features: Optional[FeatureSpec], fleet: Any, model_dir: str,
                   checkpoint: str) -> Tuple[int, list]:
    """Write ``sparse.npz`` from the checkpoint's shards of every sparse table; returns ``(keys,
    the tables as model_meta.json records them)``, each with Paddle's ``table_id`` (its directory)."""
    from paddle.distributed.ps.utils.public import get_the_one_send_context

    from ctr_model.infer import write_sparse_npz
    from ctr_model.models import family
    from ctr_model.net import net_tables

    rt = fleet.fleet._runtime_handle
    send_ctx = get_the_one_send_context(rt.context, split_dense_table=rt.is_heter_ps_mode, ep_list=rt.endpoints)
    param_of = rt.context["grad_name_to_param_name"]
    ids = {param_of[c.origin_varnames()[0]]: c.table_id() for c in send_ctx.values() if c.is_sparse()}
    tables = net_tables(config, features)
    fam = family(config.model)
    keys = write_sparse_npz(model_dir, [fam.table_width(t.dim) for t in tables], table_dir=checkpoint,
                            table_ids=[ids[t.name] for t in tables])
    return keys, [dict(t.to_dict(), table_id=ids[t.name]) for t in tables]


def model_meta(spec: RoleSpec, config: TrainConfig) -> Dict[str, Any]:
    """``model_meta.json``'s fields known before the export (the tables, the spec and the
    calibration are added as they are written)."""
    from ctr_model.features import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "hash_buckets": config.hash_buckets,
            "config": config.to_dict(), "format": "ctr-dnn-ps-v1", "pservers": spec.pservers,
            "trainers": spec.trainers, "job_id": spec.job_id}
