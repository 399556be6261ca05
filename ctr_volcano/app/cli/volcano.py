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

from ctr_model.defaults import DEFAULT_GLOO_PORT, DEFAULT_PS_PORT
from ctr_volcano.app.cli.step_flags import add_step_arguments

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


def _run_dirs(args: argparse.Namespace, params: Any, name: str) -> Tuple[str, str]:
    """The data and output directories (or URIs) the launcher would hand this Job's pods: the same
    derivation from the data and the hand-off (:func:`~ctr_volcano.training.volcano.handoff.run_paths`,
    :func:`~ctr_volcano.training.volcano.objectstore.run_uris`), ``--data-dir``/``--output-dir`` over it."""
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.volcano.handoff import run_paths
    from ctr_volcano.training.volcano.objectstore import run_uris

    if params.artifact_store == "s3":
        if not (args.data or params.s3_root):
            raise BadInput("--data", args.data, "with --artifact-store s3 the run directory goes to the data's "
                                                "bucket: pass --data s3://BUCKET/PREFIX (the prep output), or "
                                                "--s3-root s3://BUCKET/PREFIX")
        _, data_dir, output_dir = run_uris(args.data, name, params.s3_root)
    else:
        _, data_dir, output_dir = run_paths(params.handoff_dir, name, args.data)
    return args.data_dir or data_dir, args.output_dir or output_dir


def _spec_from_args(args: argparse.Namespace) -> Any:
    """The launcher's :class:`TrainJobSpec` for these flags (built as the launcher builds it,
    :func:`~ctr_volcano.training.volcano.backend.build_spec`), plus the fields only ``render-job`` sets."""
    from dataclasses import replace

    from ctr_volcano.app.cli.step_flags import params_from_args
    from ctr_volcano.training.volcano.backend import build_spec, job_name_of

    params = params_from_args(args, backend="volcano")
    name = job_name_of(params)
    spec = build_spec(params, *_run_dirs(args, params, name), name=name)
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
                    "field Volcano's webhook would default set explicitly: exactly what `ctr-volcano train "
                    "--backend volcano` submits for the same flags.")
    _add_job_flags(p)
    _add_pod_flags(p)
    p.set_defaults(func=render_job)
    _register_rbac(subparsers)


def _add_job_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``render-job``: the training step's (derived from its declaration, as ``train``'s),
    where the data is, and the Job-only ones."""
    add_step_arguments(p, "render-job")
    p.add_argument("--data", default=None, metavar="PREP_DIR_OR_URI",
                   help="the training data as `train --data` takes it: a prep output directory (on the claim it "
                        "is used in place, else copied to the run directory) or, with --artifact-store s3, its "
                        "s3:// URI (the run directory then goes to its bucket)")
    p.add_argument("--data-dir", default=None,
                   help="override: the data dir (pvc) or URI (s3) in the pods (default: derived from --data as the "
                        "launcher derives it)")
    p.add_argument("--output-dir", default=None,
                   help="override: the output dir (pvc) or URI (s3) in the pods (default: <mount or s3 root>/"
                        "ctr-runs/<job>/output)")
    p.add_argument("--ps-port", type=int, default=DEFAULT_PS_PORT, help="pserver port (default: %(default)s)")
    p.add_argument("--gloo-port", type=int, default=DEFAULT_GLOO_PORT,
                   help="Gloo rendezvous port (default: %(default)s)")
    p.add_argument("--shm-size", default=None, help="in-memory /dev/shm size, e.g. 1Gi")
    p.add_argument("--disable-network-policy", action="store_true",
                   help="ask Volcano's svc plugin not to create its same-job-only NetworkPolicy")
    p.add_argument("--check-crd", default=None, metavar="CRD_YAML",
                   help="also validate against this Volcano CRD file (batch.volcano.sh_jobs.yaml)")
    p.add_argument("--output", "-o", default="yaml", choices=("yaml", "json"))


def _add_pod_flags(p: argparse.ArgumentParser) -> None:
    """The pods' per-role resources, scheduling, image and environment flags of ``render-job`` (what a
    KFP task's TaskConfig sets for the launcher)."""
    p.add_argument("--pserver-cpu", default=None, help="CPU request of pservers (overrides --cpu)")
    p.add_argument("--pserver-memory", default=None, help="memory of pservers (overrides --memory)")
    p.add_argument("--trainer-cpu", default=None, help="CPU request of trainers (overrides --cpu)")
    p.add_argument("--trainer-memory", default=None, help="memory of trainers (overrides --memory)")
    p.add_argument("--node-selector", action="append", metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--tolerations", default=None, metavar="JSON", help="JSON list of toleration objects")
    p.add_argument("--affinity", default=None, metavar="JSON", help="JSON affinity object")
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
