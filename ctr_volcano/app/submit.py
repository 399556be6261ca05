"""Upload a pipeline to a KFP API server and start a run or a recurring run (``ctr-volcano submit``).

Why versions named after a content hash: submitting unchanged code reuses the version already on the
server, and every run in the UI links to the exact spec it ran. Every failed call becomes one line that
names the step and quotes the server's reason.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import tempfile
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from ctr_volcano.app.catalogue import PIPELINES, check_param_names, pipeline_func
from ctr_volcano.errors import BadInput, TransientError
from ctr_volcano.training.task_config import MIN_KFP_BACKEND

__all__ = ["submit", "check_kfp_host", "default_submit_pipeline", "LEGACY_KFP_HINT"]


def _check_cron(expr: str) -> None:
    fields = expr.split()
    if len(fields) != 6:
        raise BadInput("--cron", expr, "KFP cron expressions have 6 fields, seconds first: "
                                       "'0 0 2 * * *' runs every day at 02:00")


def _upload(client: Any, package: str, namespace: Optional[str], pipeline: str = "training"
            ) -> Tuple[str, str, str]:
    """Upload the package as a pipeline version, idempotently; returns (pipeline id, version id, version name).

    The version is named after the package's content hash, so submitting unchanged code reuses the
    version already on the server and every run in the UI links to the exact spec it ran. Both
    variants (default and ``--legacy-kfp``) are versions of the one pipeline of that name.
    """
    import hashlib

    with open(package, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    name, description = pipeline_func(pipeline).name, PIPELINES[pipeline][2]
    version_name = f"{name}-{digest}"
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        created = client.upload_pipeline(package, pipeline_name=name, namespace=namespace,
                                         description=description)
        pipeline_id = created.pipeline_id
    by_name = json.dumps({"predicates": [{"operation": 1, "key": "display_name", "stringValue": version_name}]})
    found = client.list_pipeline_versions(pipeline_id, page_size=1, filter=by_name).pipeline_versions or []
    if found:
        return pipeline_id, found[0].pipeline_version_id, version_name
    version = client.upload_pipeline_version(package, version_name, pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id, version_name


def default_submit_pipeline(cron: Optional[str]) -> str:
    """What ``submit`` runs when not told: the retraining pipeline on a schedule, else training."""
    return "retraining" if cron is not None else "training"


def _server_reason(status: Optional[int], reason: Any, body: Any) -> str:
    """The KFP API server's own words for a failed call: its JSON ``error_message``/``message``, else
    the HTTP status line, on one line."""
    text = ""
    if body:
        raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        try:
            doc = json.loads(raw)
            text = str(doc.get("error_message") or doc.get("message") or "") if isinstance(doc, dict) else ""
        except ValueError:
            text = raw if len(raw) < 300 else raw[:300] + "..."
    text = " ".join((text or str(reason or "")).split())
    return f"HTTP {status}: {text}" if status else text


#: Appended to the server's reason when it refuses a package that needs KFP >= 2.15.
LEGACY_KFP_HINT = (f"this package needs a KFP backend >= {MIN_KFP_BACKEND} (TaskConfig); for older backends "
                   "submit with --legacy-kfp")


def _needs_task_config(package: str) -> bool:
    """Whether a compiled pipeline package uses what KFP backends before 2.15 refuse at upload: a
    component with a ``TASK_CONFIG`` parameter or ``taskConfigPassthroughs``."""
    import yaml

    with open(package) as f:
        spec = next(yaml.safe_load_all(f))
    components = (spec.get("components") or {}).values()
    return any(c.get("taskConfigPassthroughs") or any(
        p.get("parameterType") == "TASK_CONFIG"
        for p in ((c.get("inputDefinitions") or {}).get("parameters") or {}).values())
        for c in components)


@contextlib.contextmanager
def _kfp_call(host: str, what: str, hint: str = "") -> Iterator[None]:
    """Turn a failed ``kfp.Client`` call into one line naming the step and the server's reason.

    An HTTP answer (the server refused the request) is :class:`BadInput`, with ``hint`` after the
    server's reason when the server called the request invalid (HTTP 400 or 500, its answer to an
    ``InvalidInputError``); no answer at all (the server went away mid-submit) is
    :class:`TransientError`.
    """
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as exc:
        reason = _server_reason(exc.status, exc.reason, exc.body)
        if hint and exc.status in (400, 500):
            reason += f"; {hint}"
        raise BadInput(what, host, f"the KFP API server refused it: {reason}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise TransientError(f"{what}: the KFP API server at {host} stopped answering "
                             f"({' '.join(str(exc).split())}); retry when it is back") from None


def check_kfp_host(host: str, timeout_s: float = 10.0) -> None:
    """Fail fast, in one line, unless ``host`` answers KFP's ``/apis/v2beta1/healthz``.

    ``kfp.Client`` probes the same endpoint when it is created, but retries a wrong answer five
    times five seconds apart and then raises a bare ``TimeoutError``.

    Raises:
        BadInput: no server at ``host``, or a server that is not a KFP API (names what it answered).
    """
    import urllib.error
    import urllib.request

    if not re.match(r"https?://[^/]+", host):
        raise BadInput("--host", host, "give the KFP API's URL, e.g. http://localhost:8080")
    url = host.rstrip("/") + "/apis/v2beta1/healthz"
    fix_forward = ("start the KFP API or its port-forward (`kubectl -n kubeflow port-forward "
                   "svc/ml-pipeline-ui 8080:80`), or fix the URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read(65536)
    except urllib.error.HTTPError as exc:
        reason = _server_reason(exc.code, exc.reason, exc.read(2048))
        raise BadInput("--host", host, f"not a KFP API endpoint: GET /apis/v2beta1/healthz answered "
                                       f"{reason}; point --host at the KFP UI or ml-pipeline service") from None
    except (urllib.error.URLError, OSError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise BadInput("--host", host, f"no KFP API answers there ({cause}); {fix_forward}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise BadInput("--host", host, "not a KFP API endpoint: /apis/v2beta1/healthz did not answer "
                                       "JSON; point --host at the KFP UI or ml-pipeline service")


def submit(host: str, *, experiment: str = "ctr-volcano", run_name: Optional[str] = None,
           cron: Optional[str] = None, max_concurrency: int = 1,
           params: Optional[Mapping[str, Any]] = None, namespace: Optional[str] = None,
           service_account: Optional[str] = None, client: Any = None,
           pipeline: Optional[str] = None, legacy: bool = False) -> Dict[str, Any]:
    """Upload a pipeline to a KFP API server and run it once, or schedule a recurring run.

    The pipeline is compiled from the installed code into a temporary file, uploaded as a version of
    the pipeline of the same name (named after its content hash; reused if already there), and the
    run or recurring run references that version, so the UI shows exactly what ran. A schedule runs
    the retraining pipeline by default (new days, warm start, champion/challenger gate): a schedule
    of the training pipeline would retrain from scratch on the same data every time.

    Args:
        host: KFP API endpoint, e.g. ``http://localhost:8080`` (``kubectl port-forward`` to ml-pipeline-ui).
        experiment: experiment to file the run under (created if missing).
        run_name: display name; defaults to ``ctr-training-<UTC time>``.
        cron: 6-field cron expression (seconds first); schedules a recurring run instead of one run.
        max_concurrency: recurring runs allowed at once.
        params: pipeline arguments overriding the defaults.
        namespace: multi-user deployments: the profile namespace.
        service_account: the run's service account (needs RBAC for Volcano Jobs); default pipeline-runner.
        client: an existing ``kfp.Client`` (tests); by default one is made for ``host``.
        pipeline: ``training`` or ``retraining``; default ``retraining`` with ``cron``, else ``training``.
        legacy: upload the variant for KFP backends older than 2.15 (no ``TaskConfig``, no run
            workspace; what ``compile --legacy-kfp`` writes). A server that refuses the default
            package as invalid gets a hint saying so.

    Returns:
        ``{"kind": "run"|"recurring_run", "pipeline", "id", "experiment_id", "pipeline_id",
        "version_id", "version_name", "url"}``.

    Raises:
        BadInput: a bad flag, validation threshold or scoring parameter (before any request), no KFP API at ``host``, or
            a request the server refused (the message names the step and quotes the server's reason).
        TransientError: the server stopped answering in the middle of the submit.
    """
    from kfp import Client

    from ctr_volcano.app.compile import compile_package

    pipeline = pipeline or default_submit_pipeline(cron)
    func = pipeline_func(pipeline, legacy)
    if cron is not None:
        _check_cron(cron)
    if max_concurrency < 1:
        raise BadInput("--max-concurrency", max_concurrency, "allow at least 1 concurrent run")
    check_param_names(list(params or {}), pipeline, legacy, field="params")
    from ctr_volcano.validation.validate import check_submitted_params

    check_submitted_params(dict(params or {}))
    if pipeline == "retraining":
        from ctr_volcano.retraining.gate import check_gate_task
        from ctr_volcano.retraining.window import check_scoring_params

        check_scoring_params(dict(params or {}))
        check_gate_task((params or {}).get("feature_spec", ""), (params or {}).get("gate_task", ""))
    name = run_name or f"ctr-{pipeline}-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if client is None:
        check_kfp_host(host)
        with _kfp_call(host, "connect"):
            client = Client(host=host, namespace=namespace or "kubeflow")
    with tempfile.TemporaryDirectory(prefix="ctr-submit-") as tmp:
        package = os.path.join(tmp, f"{PIPELINES[pipeline][1]}.yaml")
        compile_package(func, package, legacy)
        hint = LEGACY_KFP_HINT if _needs_task_config(package) else ""
        with _kfp_call(host, "upload", hint):
            pipeline_id, version_id, version_name = _upload(client, package, namespace, pipeline)
    with _kfp_call(host, "experiment"):
        exp_id = client.create_experiment(name=experiment, namespace=namespace).experiment_id
    base = host.rstrip("/")
    common = {"pipeline": pipeline, "experiment_id": exp_id, "pipeline_id": pipeline_id,
              "version_id": version_id, "version_name": version_name}
    if cron is None:
        with _kfp_call(host, "run"):
            res = client.run_pipeline(experiment_id=exp_id, job_name=name, pipeline_id=pipeline_id,
                                      version_id=version_id, params=dict(params or {}),
                                      service_account=service_account)
        return {"kind": "run", "id": res.run_id, **common, "url": f"{base}/#/runs/details/{res.run_id}"}
    with _kfp_call(host, "recurring run"):
        rec = client.create_recurring_run(
            experiment_id=exp_id, job_name=name, cron_expression=cron, max_concurrency=max_concurrency,
            no_catchup=True, params=dict(params or {}), pipeline_id=pipeline_id, version_id=version_id,
            service_account=service_account)
    return {"kind": "recurring_run", "id": rec.recurring_run_id, **common,
            "url": f"{base}/#/recurringrun/details/{rec.recurring_run_id}"}
