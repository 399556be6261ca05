"""CLI verbs of the Volcano area: ``render-job`` (print the Job YAML) and ``rbac`` (print the Role).

``render-job`` is for kubectl users and reviews: the exact manifest the launcher would submit, from
the same builder. ``--check-crd`` additionally validates it against a Volcano CRD file. Heavy imports
stay inside the handlers.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Tuple

from ctr_volcano.training.params import PVC_MOUNT_PATH

__all__ = ["register", "render_job", "print_rbac", "parse_key_values"]


def parse_key_values(items: List[str], flag: str) -> Dict[str, str]:
    """``["k=v", ...]`` -> dict; names ``flag`` in the error."""
    from ctr_volcano.errors import BadInput

    out: Dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(flag, item, "write KEY=VALUE")
        out[key] = value
    return out


def _json_list(text: str, flag: str) -> List[Any]:
    from ctr_volcano.errors import BadInput

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadInput(flag, text, f"give a JSON list ({exc})") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise BadInput(flag, text, "give a JSON list of objects")
    return value


def _secret_envs(items: List[str]) -> Tuple[Any, ...]:
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.store_access import SecretEnv

    out = []
    for item in items or []:
        name, sep, ref = item.partition("=")
        secret, sep2, key = ref.partition(":")
        if not (sep and sep2):
            raise BadInput("--secret-env", item, "write NAME=SECRET:KEY, e.g. AWS_ACCESS_KEY_ID=s3-creds:access-key")
        out.append(SecretEnv(name=name, secret=secret, key=key))
    return tuple(out)


def _resources(role: str, cpu: str, memory: str, gpus: int) -> Any:
    """One role's :class:`Resources`; an error names the flag that set the bad value."""
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.volcano.spec import Resources

    try:
        return Resources(cpu=cpu, memory=memory, gpu=gpus)
    except BadInput as exc:
        flag = "--gpus" if exc.field == "gpu" else f"--{role}-{exc.field} (or --{exc.field})"
        raise BadInput(flag, exc.value, exc.fix) from None


def _params_from_args(args: argparse.Namespace) -> Any:
    """The step's parameters of a ``render-job`` command line: the Job is built exactly as the
    launcher builds it (:func:`~ctr_volcano.training.volcano.backend.build_spec`)."""
    from ctr_volcano.training.params import StepParams
    from ctr_volcano.training.volcano.names import job_name_for

    return StepParams(
        backend="volcano", pservers=args.pservers, trainers=args.trainers, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.lr, max_retry=args.max_retry,
        namespace=args.namespace, image=args.image, queue=args.queue, priority_class=args.priority_class or None,
        artifact_store=args.artifact_store, pvc_name=args.pvc_name, pvc_mount_path=args.pvc_mount_path,
        schedule_timeout_s=args.schedule_timeout, run_id=args.run_id, task_name=args.task_name,
        job_name=args.name or job_name_for(args.run_id or "manual", args.task_name),
        service_account=args.service_account, cpu=args.cpu, memory=args.memory, gpus=args.gpus,
        ttl_seconds_after_finished=None if args.ttl == -1 else args.ttl, s3_endpoint=args.s3_endpoint,
        s3_secret=args.s3_secret, s3_region=args.s3_region, s3_root=args.s3_root)


def _run_root(args: argparse.Namespace, params: Any) -> str:
    """Where the launcher would put this Job's run directory (on the claim, or in the store)."""
    from ctr_volcano.training.volcano.handoff import RUNS_DIR
    from ctr_volcano.training.volcano.objectstore import RUNS_PREFIX

    if args.artifact_store == "s3":
        return f"{(args.s3_root or 's3://mlpipeline/' + RUNS_PREFIX).rstrip('/')}/{params.job_name}"
    return f"{args.pvc_mount_path.rstrip('/')}/{RUNS_DIR}/{params.job_name}"


def _spec_from_args(args: argparse.Namespace) -> Any:
    """The launcher's :class:`TrainJobSpec` for these flags, plus the fields only ``render-job`` sets."""
    from dataclasses import replace

    from ctr_volcano.training.volcano.backend import build_spec

    params = _params_from_args(args)
    root = _run_root(args, params)
    spec = build_spec(params, args.data_dir or f"{root}/data", args.output_dir or f"{root}/output")
    return replace(
        spec,
        pserver_resources=_resources("pserver", args.pserver_cpu or args.cpu, args.pserver_memory or args.memory, 0),
        trainer_resources=_resources("trainer", args.trainer_cpu or args.cpu, args.trainer_memory or args.memory,
                                     args.gpus),
        node_selector=parse_key_values(args.node_selector, "--node-selector"),
        tolerations=tuple(_json_list(args.tolerations, "--tolerations")) if args.tolerations else (),
        affinity=json.loads(args.affinity) if args.affinity else None,
        image_pull_secrets=tuple(args.image_pull_secret or ()), image_pull_policy=args.image_pull_policy,
        env_from_secrets=_secret_envs(args.secret_env), env=parse_key_values(args.env, "--env"),
        labels=parse_key_values(args.label, "--label"), ps_port=args.ps_port, gloo_port=args.gloo_port,
        disable_network_policy=args.disable_network_policy, shm_size=args.shm_size)


def render_job(args: argparse.Namespace) -> int:
    """Handler of ``render-job``."""
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.volcano.manifest import build_job, check_job, to_yaml, validate_against_crd

    job = build_job(_spec_from_args(args))
    check_job(job)
    if args.check_crd:
        problems = validate_against_crd(job, args.check_crd)
        if problems:
            raise BadInput("--check-crd", args.check_crd, "the Job does not match the CRD schema: "
                           + "; ".join(problems))
    sys.stdout.write(json.dumps(job, indent=2) + "\n" if args.output == "json" else to_yaml(job))
    return 0


def print_rbac(args: argparse.Namespace) -> int:
    """Handler of ``rbac``."""
    from ctr_volcano.training.volcano.manifest import to_yaml
    from ctr_volcano.training.volcano.rbac import build_rbac

    docs = build_rbac(args.namespace, args.service_account, name=args.name,
                      create_service_account=not args.existing_service_account)
    sys.stdout.write(to_yaml(docs))
    return 0


def register(subparsers: Any) -> None:
    """Add ``render-job`` and ``rbac`` to the ``ctr-volcano`` command line."""
    p = subparsers.add_parser(
        "render-job", help="print the Volcano Job the launcher would submit (YAML)",
        description="Print the batch.volcano.sh/v1alpha1 Job for a pserver/trainer gang, with every "
                    "field Volcano's webhook would default set explicitly.")
    _add_job_flags(p)
    _add_pod_flags(p)
    p.set_defaults(func=render_job)
    _register_rbac(subparsers)


def _add_job_flags(p: argparse.ArgumentParser) -> None:
    """The Job's identity, gang, hand-off and training flags of ``render-job``."""
    p.add_argument("--name", default=None, help="Job name (default: derived from --run-id/--task-name)")
    p.add_argument("--run-id", default=None, help="KFP run id (names the Job, labels it)")
    p.add_argument("--task-name", default="train-ctr", help="KFP task name (default: %(default)s)")
    p.add_argument("--namespace", required=True, help="namespace of the Job")
    p.add_argument("--image", default=None, help="trainer image (default: ctr_volcano.images.trainer_image())")
    p.add_argument("--pservers", type=int, default=2, help="parameter servers (default: %(default)s)")
    p.add_argument("--trainers", type=int, default=2, help="trainers (default: %(default)s)")
    p.add_argument("--queue", default="default", help="Volcano queue (default: %(default)s)")
    p.add_argument("--priority-class", default=None, help="PriorityClass name")
    p.add_argument("--max-retry", type=int, default=2, help="gang restarts after a failure (default: %(default)s)")
    p.add_argument("--ttl", type=int, default=3600, help="ttlSecondsAfterFinished; -1 omits it")
    p.add_argument("--schedule-timeout", type=int, default=600, help="launcher's Pending timeout (seconds)")
    p.add_argument("--pvc-name", default=None, help="shared RWX PVC mounted in every pod")
    p.add_argument("--pvc-mount-path", default=PVC_MOUNT_PATH, help="its mount path (default: %(default)s)")
    p.add_argument("--artifact-store", choices=("pvc", "s3"), default="pvc",
                   help="pvc: data and outputs on --pvc-name; s3: s3:// URIs, credentials from "
                        "--s3-secret by reference, a scratch emptyDir per pod (default: %(default)s)")
    p.add_argument("--s3-endpoint", default=None, metavar="URL",
                   help="s3: the S3 API as the pods reach it (default: KFP's "
                        "http://minio-service.kubeflow:9000)")
    p.add_argument("--s3-secret", default=None, metavar="SECRET",
                   help="s3: Secret with keys accesskey/secretkey (default: KFP's mlpipeline-minio-artifact)")
    p.add_argument("--s3-region", default="us-east-1", help="s3: signing region (default: %(default)s)")
    p.add_argument("--s3-root", default=None, metavar="S3_URI",
                   help="s3: where run directories go (default: s3://mlpipeline/ctr-runs)")
    p.add_argument("--data-dir", default=None,
                   help="data dir (pvc) or URI (s3) in the pods (default: <mount or s3 root>/ctr-runs/<job>/data)")
    p.add_argument("--output-dir", default=None,
                   help="output dir (pvc) or URI (s3) in the pods (default: <mount or s3 root>/ctr-runs/<job>/output)")
    p.add_argument("--epochs", type=int, default=2, help="training epochs (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=512, help="batch size (default: %(default)s)")
    p.add_argument("--lr", type=float, default=0.001, help="learning rate (default: %(default)s)")
    p.add_argument("--ps-port", type=int, default=36001, help="pserver port (default: %(default)s)")
    p.add_argument("--gloo-port", type=int, default=36100, help="Gloo rendezvous port (default: %(default)s)")
    p.add_argument("--shm-size", default=None, help="in-memory /dev/shm size, e.g. 1Gi")
    p.add_argument("--disable-network-policy", action="store_true",
                   help="ask Volcano's svc plugin not to create its same-job-only NetworkPolicy")
    p.add_argument("--check-crd", default=None, metavar="CRD_YAML",
                   help="also validate against this Volcano CRD file (batch.volcano.sh_jobs.yaml)")
    p.add_argument("--output", "-o", default="yaml", choices=("yaml", "json"))


def _add_pod_flags(p: argparse.ArgumentParser) -> None:
    """The pods' resources, scheduling, image and environment flags of ``render-job``."""
    p.add_argument("--cpu", default="1", help="CPU request per pod (default: %(default)s)")
    p.add_argument("--memory", default="2Gi", help="memory request/limit per pod (default: %(default)s)")
    p.add_argument("--pserver-cpu", default=None, help="CPU request of pservers (overrides --cpu)")
    p.add_argument("--pserver-memory", default=None, help="memory of pservers (overrides --memory)")
    p.add_argument("--trainer-cpu", default=None, help="CPU request of trainers (overrides --cpu)")
    p.add_argument("--trainer-memory", default=None, help="memory of trainers (overrides --memory)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs per trainer (default: %(default)s)")
    p.add_argument("--node-selector", action="append", metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--tolerations", default=None, metavar="JSON", help="JSON list of toleration objects")
    p.add_argument("--affinity", default=None, metavar="JSON", help="JSON affinity object")
    p.add_argument("--service-account", default=None, help="service account of the pods")
    p.add_argument("--image-pull-secret", action="append", metavar="NAME", help="repeatable")
    p.add_argument("--image-pull-policy", default=None, choices=("Always", "IfNotPresent", "Never"))
    p.add_argument("--secret-env", action="append", metavar="NAME=SECRET:KEY", help="env var from a Secret; repeatable")
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="extra env var; repeatable")
    p.add_argument("--label", action="append", metavar="KEY=VALUE", help="extra label; repeatable")


def _register_rbac(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "rbac", help="print the launcher's namespaced ServiceAccount, Role and RoleBinding (YAML)",
        description="Print the RBAC the launcher needs: exactly the verbs it uses, nothing cluster-wide.")
    r.add_argument("--namespace", required=True, help="namespace of the KFP steps and the Volcano Jobs")
    r.add_argument("--service-account", default="ctr-volcano-launcher",
                   help="the step pods' service account (KFP: pipeline-runner) (default: %(default)s)")
    r.add_argument("--existing-service-account", action="store_true",
                   help="bind an existing service account instead of creating it")
    r.add_argument("--name", default="ctr-volcano-launcher", help="Role/RoleBinding name")
    r.set_defaults(func=print_rbac)
