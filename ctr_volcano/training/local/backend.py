"""The local backend: the embedded default of ``ctr-volcano train`` and ``train_ctr``.

:func:`train_local` validates the inputs once, runs a supervised pserver/trainer gang of real processes
(:mod:`ctr_volcano.training.local.gang`) that executes the production pod entrypoint, and copies the exported
model to ``model_dir``. Checkpoints stay in ``output_dir`` (under ``workdir``), so calling it again with
the same ``workdir`` resumes from the last complete epoch.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Union

from ctr_volcano.errors import BadInput, TrainingJobFailed
from ctr_volcano.training.api import TrainResult, role_error
from ctr_volcano.training.checks import check_init_model, check_train_data
from ctr_volcano.training.params import (
    DEFAULT_STALL_TIMEOUT_S,
    StepParams,
    checked_train_config,
    local_store_env,
    train_config_of,
)
from ctr_volcano.util.deps import require
from ctr_volcano.util.outputs import room_for, writable_dir

if TYPE_CHECKING:
    from ctr_model.config import TrainConfig

__all__ = ["LocalBackend", "train_local"]

logger = logging.getLogger(__name__)


class LocalBackend:
    """The :class:`~ctr_volcano.training.api.TrainingBackend` that runs the gang as local processes."""

    def train(self, data_path: str, model_dir: str, params: StepParams, *,
              on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
              log: Callable[[str], None] = logger.info, init_model: Optional[str] = None) -> TrainResult:
        """:func:`train_local` with the step's parameters (see ``TrainingBackend.train``)."""
        if on_identity:
            on_identity({"backend": "local", "pservers": params.pservers, "trainers": params.trainers})
        return train_local(data_path, model_dir, train_config_of(params), pservers=params.pservers,
                           trainers=params.trainers, max_retry=params.max_retry,
                           stall_timeout_s=params.stall_timeout_s, log=log, init_model=init_model,
                           workdir=params.workdir, output_dir=params.output_uri,
                           store_env=local_store_env(params))


def _config_dict(config: Any) -> Dict[str, Any]:
    from ctr_model.config import TrainConfig

    if config is None:
        return {}
    if isinstance(config, TrainConfig):
        return config.to_dict()
    if isinstance(config, Mapping):
        return checked_train_config(config)          # validate now, at the boundary
    raise BadInput("config", config, "pass a TrainConfig, a dict of its fields, or None")


def train_local(data_dir: str, model_dir: str,
                config: Union["TrainConfig", Mapping[str, Any], None] = None,
                *, pservers: int = 2, trainers: int = 2, max_retry: int = 2,
                stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S, workdir: Optional[str] = None,
                log: Optional[Callable[[str], None]] = None, job_id: str = "ctr-local",
                init_model: Optional[str] = None, output_dir: Optional[str] = None,
                store_env: Optional[Mapping[str, str]] = None) -> TrainResult:
    """Train the CTR DNN with ``pservers`` x ``trainers`` local processes and export it.

    Args:
        data_dir: a prep output dir (with ``train/``, optionally ``test/``) or a split dir.
        model_dir: where the exported model is copied (created; existing files are replaced).
        config: training config (``TrainConfig`` or dict); ``hash_buckets`` follows the data if unset.
        pservers: parameter-server processes.
        trainers: trainer processes (each takes whole Parquet shards).
        max_retry: whole-gang restarts after a failure (each resumes from the last checkpoint).
        stall_timeout_s: a trainer silent for this long fails the attempt.
        workdir: keeps logs and the shared output (checkpoints) there, so a later call with the same
            workdir resumes. By default a temp dir, removed after a success (the model and its metrics
            are in ``model_dir`` by then) and kept after a failure (its gang logs say why).
        log: progress sink (default: this module's logger).
        job_id: gang name used in logs and errors.
        init_model: an exported model to warm-start from (:mod:`ctr_model.warm_start`); checked
            against this run's schema, hash buckets, network shape and pservers before the gang starts.
        output_dir: an ``s3://`` prefix for checkpoints, model and metrics instead of
            ``workdir/output`` (a later call with the same prefix resumes from the store).
        store_env: the object store's variables (``CTR_S3_ENDPOINT``, ``AWS_ACCESS_KEY_ID``, ...,
            see :mod:`ctr_model.store`) for ``s3://`` data or output; default: this process's.

    Returns:
        :class:`TrainResult`. The exported model keeps the training data's profile
        (``data_profile.json``, named in ``model_meta.json``) when ``data_dir`` is a local directory
        that has one (prep writes it into the train split).

    Raises:
        BadInput: bad data dir, config, gang size or an init model this run cannot continue; a role
            refused its input (exited 2: :class:`~ctr_volcano.training.api.RoleRefused`).
        TransientError: a role gave up on an outage (exited 75: ``RoleOutage``) in every attempt.
        TrainingJobFailed: the gang failed ``max_retry + 1`` times (role, exit code, log tail).
    """
    from ctr_model import store as s3
    from ctr_volcano.data.profile import attach_to_model
    from ctr_volcano.training.local.gang import GangSpec, LocalGang

    require("paddle", "backend", "local", "the local backend runs the Paddle gang on this machine "
                                          "(or train with backend volcano)")
    log = log or logger.info
    cfg = _config_dict(config)
    env = dict(os.environ if store_env is None else store_env)
    client = _store_client(os.fspath(data_dir), output_dir, env)
    if not s3.is_uri(os.fspath(data_dir)):
        data_dir = os.path.abspath(os.fspath(data_dir))
    data = check_train_data(data_dir, trainers, model=cfg.get("model", "dnn"),
                            client=client if s3.is_uri(data_dir) else None)
    hash_buckets = data.hash_buckets
    _check_output_prefix(output_dir, client)
    if "hash_buckets" in cfg and hash_buckets and cfg["hash_buckets"] != hash_buckets:
        raise BadInput("config.hash_buckets", cfg["hash_buckets"],
                       f"the data was hashed into {hash_buckets} buckets; drop the field or use that")
    if init_model:
        init_model = os.path.abspath(os.fspath(init_model))
        check_init_model(init_model, cfg, pservers, hash_buckets or None, data.features)
    model_dir = writable_dir("model_dir", model_dir)
    own_workdir = not workdir
    workdir = os.path.abspath(workdir) if workdir else tempfile.mkdtemp(prefix="ctr-train-")
    in_store = bool(output_dir)
    if not output_dir:
        output_dir = os.path.join(workdir, "output")
        os.makedirs(output_dir, exist_ok=True)
    store_vars = {k: v for k, v in env.items() if k.startswith(("CTR_S3_", "AWS_"))} if client else {}
    try:
        spec = GangSpec(job_id=job_id, pservers=pservers, trainers=trainers, data_dir=data_dir,
                        output_dir=output_dir, workdir=os.path.join(workdir, "gang"), train_config=cfg,
                        max_retry=max_retry, stall_timeout_s=stall_timeout_s, init_model=init_model or None,
                        extra_env=store_vars)
    except BadInput:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        result = LocalGang(spec, log=log).run()   # a failure keeps the temp dir: its gang logs tell why
    except TrainingJobFailed as exc:   # a role's exit 2 or 75 in its family, as on Volcano
        raise role_error(exc) from None
    metrics = _copy_model_out(output_dir, model_dir, client if in_store else None)
    if not s3.is_uri(data_dir):
        attach_to_model(data_dir, model_dir)    # the training data's profile, for validation against it
    if own_workdir:
        # nobody can resume from a temp dir, and the model and metrics are out: leave nothing behind
        shutil.rmtree(workdir, ignore_errors=True)
        output_dir = output_dir if in_store else None
    metrics["attempts"] = result.attempts
    metrics["wall_seconds"] = round(result.seconds, 2)
    log(f"trained in {result.seconds:.1f}s ({result.attempts} attempt(s)); model in {model_dir}"
        + (f"; test auc {metrics['test']['auc']:.4f}" if "test" in metrics else ""))
    return TrainResult(model_dir=model_dir, metrics=metrics, output_dir=output_dir,
                       attempts=result.attempts)


def _store_client(data_dir: str, output_dir: Optional[str], env: Mapping[str, str]) -> Any:
    """The object-store client for ``s3://`` data or output (``None`` when neither is in a store)."""
    from ctr_model import store as s3

    if not (s3.is_uri(data_dir) or (output_dir and s3.is_uri(output_dir))):
        return None
    return s3.Store(s3.StoreConfig.from_env(env))   # a StoreError names the variable at fault


def _check_output_prefix(output_dir: Optional[str], client: Any) -> None:
    """An explicit ``output_dir`` must be an ``s3://`` prefix in a bucket that exists."""
    from ctr_model import store as s3

    if output_dir is None:
        return
    if not s3.is_uri(output_dir):
        raise BadInput("output_dir", output_dir, "pass an s3://BUCKET/PREFIX URI, or use workdir "
                                                 "for a local output")
    client.check_bucket(output_dir, field="output_dir")


def _copy_model_out(output_dir: str, model_dir: str, client: Any) -> Dict[str, Any]:
    """Replace ``model_dir``'s contents by the gang's exported model; returns its ``metrics.json``.

    ``client`` when ``output_dir`` is an ``s3://`` prefix, else ``None``.
    """
    from ctr_model import store as s3
    from ctr_model.space import copy_tree

    for name in os.listdir(model_dir):
        path = os.path.join(model_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if client is not None:
        with room_for("model_dir", model_dir):
            client.download(s3.join(output_dir, "model"), model_dir)
        return dict(json.loads((client.read_bytes(s3.join(output_dir, "metrics.json")) or b"{}").decode()))
    with room_for("model_dir", model_dir):
        copy_tree(os.path.join(output_dir, "model"), model_dir, dirs_exist_ok=True)
    with open(os.path.join(output_dir, "metrics.json"), encoding="utf-8") as fh:
        return dict(json.load(fh))
