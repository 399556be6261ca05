"""The Volcano backend: check the inputs, hand the data over, run the gang as a Volcano Job, copy the
model out.

The pieces below it stay independent of the step: the typed spec (:mod:`.spec`), the pure Job builder
(:mod:`.manifest`), the thin client (:mod:`.client`), the launcher (:mod:`.launcher`) and the two
hand-offs (:mod:`.handoff`: a shared claim; :mod:`.objectstore`: the object store).
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Dict, Optional, Tuple

from ctr_volcano.errors import BadInput
from ctr_volcano.training.api import TrainResult
from ctr_volcano.training.checks import check_init_model, check_train_data
from ctr_volcano.training.params import StepParams, checked_train_config, train_config_of

logger = logging.getLogger(__name__)

__all__ = ["VolcanoBackend", "build_spec", "job_name_of", "check_claims", "run_owner_references"]


def job_name_of(params: StepParams) -> str:
    """The Job's name: ``job_name``, else derived from the run id (``run_id``, ``$KFP_RUN_ID``, else an
    ad-hoc one) and ``task_name``; ``render-job`` names its Job the same way."""
    from ctr_volcano.training.volcano.names import job_name_for

    if params.job_name:
        return params.job_name
    run_id = params.run_id or os.environ.get("KFP_RUN_ID") or f"adhoc-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:6]}"
    return job_name_for(run_id, params.task_name)


def build_spec(params: StepParams, data_dir: str, output_dir: str, name: Optional[str] = None,
               init_model: Optional[str] = None) -> Any:
    """The :class:`~ctr_volcano.training.volcano.spec.TrainJobSpec` for ``params`` (pod-side paths)."""
    from ctr_volcano.images import trainer_image
    from ctr_volcano.training.volcano.client import in_cluster_namespace
    from ctr_volcano.training.volcano.spec import PvcVolume, TrainJobSpec, role_resources

    task = params.task_config
    pserver_resources, trainer_resources = role_resources(task, cpu=params.cpu, memory=params.memory,
                                                          gpus=params.gpus)
    same_mount = any(task.claim_of(str(m["name"])) == params.pvc_name and m["mountPath"] == params.pvc_mount_path
                     for m in task.volume_mounts)
    explicit = (PvcVolume(params.pvc_name, params.pvc_mount_path),) if params.pvc_name and not same_mount else ()
    return TrainJobSpec(
        name=name or job_name_of(params),
        namespace=params.namespace or in_cluster_namespace(),
        image=params.image or trainer_image(),
        data_dir=data_dir, output_dir=output_dir,
        pservers=params.pservers, trainers=params.trainers,
        train_config=train_config_of(params),
        pserver_resources=pserver_resources,
        trainer_resources=trainer_resources,
        queue=params.queue, priority_class=params.priority_class, max_retry=params.max_retry,
        network_topology=params.network_topology, highest_tier_allowed=params.highest_tier_allowed,
        ttl_seconds_after_finished=params.ttl_seconds_after_finished,
        schedule_timeout_s=params.schedule_timeout_s, stall_timeout_s=params.stall_timeout_s,
        service_account=params.service_account,
        volumes=explicit if params.artifact_store == "pvc" else (),
        node_selector=dict(task.node_selector), tolerations=task.tolerations, affinity=task.affinity,
        env_vars=task.env, extra_volumes=task.volumes, extra_volume_mounts=task.volume_mounts,
        object_store=params.object_store() if params.artifact_store == "s3" else None,
        run_id=params.run_id, task_name=params.task_name, init_model=init_model)


def check_claims(client: Any, params: StepParams) -> None:
    """Refuse, before any copy or submit, claims the gang cannot share across nodes (see
    :func:`~ctr_volcano.training.task_config.check_claim_access`): every claim the gang would mount
    must exist, and the hand-off claim must be ReadWriteMany."""
    from ctr_volcano.training.task_config import check_claim_access
    from ctr_volcano.training.volcano.client import in_cluster_namespace

    namespace = params.namespace or in_cluster_namespace()
    _, handoff_claim = params.handoff_volume or (None, None)
    claims = ([params.pvc_name] if params.pvc_name else []) + list(params.task_config.claims())
    for claim in dict.fromkeys(claims):
        found = client.get_pvc(namespace, claim)
        if found is None:
            raise BadInput("volumes", claim, f"no PersistentVolumeClaim {claim!r} in namespace "
                                             f"{namespace!r}; create it or fix the name")
        check_claim_access(found, writes=claim == handoff_claim)


def _check_before_submit(data_path: str, params: StepParams, init_model: Optional[str] = None,
                         client: Any = None) -> None:
    """The local backend's boundary checks, done before a gang is scheduled (fail in seconds, not minutes).

    ``client`` (a :class:`ctr_model.store.Store`) when ``data_path`` is an ``s3://`` URI.
    """
    config = checked_train_config(train_config_of(params))
    data = check_train_data(data_path, params.trainers, client=client,
                            model=config.get("model", "dnn"))
    if init_model:
        check_init_model(init_model, config, params.pservers, data.hash_buckets or None, data.features)


def run_owner_references(client: Any, namespace: str, *, pod_name: Optional[str] = None,
                         log: Callable[[str], None] = logger.info) -> tuple:
    """The KFP run's Argo Workflow, as an ownerReference for the Job, if this step runs in a pod.

    Argo makes every step pod a dependent of its Workflow; making the Volcano Job one too means that
    deleting the KFP run garbage-collects the gang even if this process never saw a SIGTERM. Every
    attempt of the step shares the Workflow, so a retried step does not orphan or kill the Job.
    Best effort: outside a pod, in another namespace, or without the rights, returns ``()``.

    Args:
        client: a :class:`~ctr_volcano.training.volcano.client.KubeClient`.
        namespace: the Job's namespace (owner and dependent must share it).
        pod_name: this step's pod; default ``$KFP_POD_NAME``, else ``$HOSTNAME`` inside a pod.
        log: progress sink (default: this module's logger).
    """
    from ctr_volcano.errors import CtrVolcanoError

    if pod_name is None:
        pod_name = os.environ.get("KFP_POD_NAME") or (
            os.environ.get("HOSTNAME") if os.environ.get("KUBERNETES_SERVICE_HOST") else None)
    if not pod_name:
        return ()
    try:
        pod = client.get_pod(namespace, pod_name)
    except CtrVolcanoError as exc:
        log(f"[volcano] cannot read this step's pod {namespace}/{pod_name} ({exc}); the Job gets no owner")
        return ()
    if pod is None:
        return ()
    expected_uid = os.environ.get("KFP_POD_UID")
    if expected_uid and (pod.get("metadata") or {}).get("uid") != expected_uid:
        return ()
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith("argoproj.io/"):
            return ({k: ref[k] for k in ("apiVersion", "kind", "name", "uid")},)
    return ()


class VolcanoBackend:
    """The :class:`~ctr_volcano.training.api.TrainingBackend` that runs the gang as a Volcano Job.

    Args:
        client: a ready :class:`~ctr_volcano.training.volcano.client.KubeClient`; default: one built from
            ``params.kubeconfig``/in-cluster config for each run (and closed after it).
    """

    def __init__(self, client: Any = None) -> None:
        self.client = client

    def train(self, data_path: str, model_dir: str, params: StepParams, *,
              on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
              log: Callable[[str], None] = logger.info, init_model: Optional[str] = None) -> TrainResult:
        """Check the inputs, hand the data over, run the Job and copy the model out (see
        ``TrainingBackend.train``); the model keeps the training data's profile when ``data_path`` is a
        local directory that has one."""
        from ctr_volcano.data.profile import attach_to_model

        result = _train_volcano(data_path, model_dir, params, on_identity=on_identity, log=log,
                                client=self.client, init_model=init_model)
        attach_to_model(data_path, model_dir)
        return result


def _open_store_run(data_path: str, params: StepParams, name: str, init_model: Optional[str],
                    log: Callable[[str], None]) -> Tuple[Any, Any]:
    """The object-store hand-off: this step's client and the run's URIs, the data checked there."""
    from ctr_model.store import Store
    from ctr_volcano.training.volcano.objectstore import prepare_store_run

    if init_model:
        raise BadInput("init_model", init_model, "warm start reads the init model from a volume every "
                                                 "pserver mounts: use the PVC or run-workspace hand-off")
    obj = params.object_store()
    # this step signs with its own environment's keys (KFP: the same Secret as env), and reaches
    # the store at s3_step_endpoint when that differs from the pods' endpoint
    store = Store(params.step_store_config())   # a StoreError names the parameter at fault
    if params.s3_step_endpoint:
        log(f"[volcano] object store: this step uses {params.s3_step_endpoint}, the pods {obj.endpoint}")
    store_run = prepare_store_run(store, data_path, name, params.s3_root, log=log)
    _check_before_submit(store_run.data_uri, params, client=store)
    log(f"[volcano] object store: data {store_run.data_uri}, output {store_run.output_uri} (credentials "
        f"from Secret {obj.secret})")
    return store, store_run


def _launch(client: Any, params: StepParams, name: str, dirs: Tuple[str, str, Optional[str]], *,
            on_identity: Optional[Callable[[Dict[str, Any]], None]], log: Callable[[str], None]) -> TrainResult:
    """Build the Job for ``dirs`` (data, output, init model as the pods see them) and run it."""
    from ctr_volcano.training.volcano.launcher import VolcanoLauncher

    data_dir, output_dir, init_dir = dirs
    spec = build_spec(params, data_dir, output_dir, name=name, init_model=init_dir)
    owners = run_owner_references(client, spec.namespace, log=log)
    if owners:
        spec = replace(spec, owner_references=owners)
        log(f"[volcano] the Job is owned by {owners[0]['kind']} {owners[0]['name']}: deleting the "
            "KFP run deletes the gang")
    launcher = VolcanoLauncher(client, spec, log=log, poll_s=params.poll_s,
                               explain_every_s=params.explain_every_s, on_identity=on_identity)
    return launcher.run()


def _train_volcano(data_path: str, model_dir: str, params: StepParams, *,
                   on_identity: Optional[Callable[[Dict[str, Any]], None]], log: Callable[[str], None],
                   client: Any, init_model: Optional[str]) -> TrainResult:
    from ctr_volcano.training.volcano.client import KubeClient
    from ctr_volcano.training.volcano.handoff import copy_model_out, prepare_run_dir

    name = job_name_of(params)
    store_run = store = None
    if params.artifact_store == "s3":
        store, store_run = _open_store_run(data_path, params, name, init_model, log)
    else:
        _check_before_submit(data_path, params, init_model)
    own_client = client is None
    if own_client:
        client = KubeClient.auto(params.kubeconfig, params.context)
    try:
        check_claims(client, params)
        if store_run is not None:
            dirs: Tuple[str, str, Optional[str]] = (store_run.data_uri, store_run.output_uri, None)
        else:
            run_dirs = prepare_run_dir(params.handoff_dir, name, data_path, init_model=init_model)
            log(f"[volcano] run directory {run_dirs.root} (data {'copied' if run_dirs.copied else 'reused'}"
                + (f"; warm start from {run_dirs.init_model}" if run_dirs.init_model else "") + ")")
            dirs = (run_dirs.data_dir, run_dirs.output_dir, run_dirs.init_model)
        result = _launch(client, params, name, dirs, on_identity=on_identity, log=log)
    finally:
        if own_client:
            client.close()
    if store_run is not None:
        from ctr_volcano.training.volcano.objectstore import cleanup_run, collect_model

        metrics = collect_model(store, store_run, model_dir)
        cleanup_run(store, store_run)
        log(f"[volcano] model copied from {store_run.output_uri}/model; deleted {store_run.root}")
        return replace(result, model_dir=model_dir, metrics=metrics or result.metrics)
    copy_model_out(dirs[1], model_dir)
    return replace(result, model_dir=model_dir)
