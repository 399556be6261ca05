"""Run, compile and submit the CTR training pipeline: the cores behind ``ctr-volcano run/compile/submit``.

Why a wrapper around ``kfp.local`` at all: kfp 2.17.3's local runner deletes its ``workspace_root``
after every pipeline run and keeps outputs only under an opaque timestamped directory. So
:func:`run_local` gives each run a fresh workspace and pipeline root under ``WORKDIR/runs/<run>``,
copies what users want (model, report, metrics) to stable places in ``WORKDIR``, and writes
``WORKDIR/summary.json`` -- the file scripts and CI read.

Components run with ``SubprocessRunner(use_venv=False)``: in this Python environment, offline, with the
installed package, so a local run exercises exactly the code that the component image ships.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ctr_model.atomic import write_json
from ctr_volcano.errors import BadInput, CtrVolcanoError, Interrupted, TransientError

__all__ = [
    "LOCAL_OVERRIDES", "RUN_MARKER_ENV", "LocalRunFailed", "signal_processes", "stop_run_processes",
    "default_sample_dir", "pipeline_parameters", "parse_params", "run_local", "run_in_kfp_local", "LocalRunOutputs",
    "compile_all", "compiled_files", "check_kfp_host", "submit", "PIPELINES", "pipeline_func",
    "default_submit_pipeline", "LEGACY_KFP_HINT",
]

#: What ``ctr-volcano run`` changes from the pipeline's (cluster-oriented) defaults: train with local
#: processes, in batches of 32 for one epoch. On the committed 200k-line sample that gave log loss
#: 0.0066-0.0070 above the generating model's in 5 of 5 runs (64 x 1: 0.0074-0.0087; 64 x 3 and
#: 64 x 2 overfit: 0.0126 and 0.0085; the cluster default 512 rows makes too few steps on a sample);
#: docs/training.md, "Calibration and the demo".
LOCAL_OVERRIDES: Dict[str, Any] = {"backend": "local", "batch_size": 32, "epochs": 1}


class LocalRunFailed(CtrVolcanoError):
    """A ``kfp.local`` pipeline run ended in failure; the message says where its task logs are."""


def default_sample_dir() -> Path:
    """The committed Criteo-format sample, ``data/sample`` next to the package (editable installs)."""
    return Path(__file__).resolve().parents[1] / "data" / "sample"


#: The pipelines ``submit`` knows: name -> (module, function, description shown in the KFP UI). Each
#: module also defines ``<function>_legacy``, the variant for KFP backends older than 2.15.
PIPELINES: Dict[str, Tuple[str, str, str]] = {
    "training": ("pipelines.ctr_training_pipeline", "ctr_training_pipeline",
                 "CTR training: prep, PaddlePaddle parameter-server training on Volcano, evaluation, AUC gate"),
    "retraining": ("pipelines.ctr_retraining_pipeline", "ctr_retraining_pipeline",
                   "CTR recurring retraining: data window by run date, warm start from the registry's "
                   "champion, champion/challenger gate, registry"),
}


def pipeline_func(pipeline: str = "training", legacy: bool = False) -> Any:
    """The ``@dsl.pipeline`` object named ``pipeline`` (a key of :data:`PIPELINES`).

    Args:
        pipeline: ``training`` or ``retraining``.
        legacy: the variant for KFP backends older than 2.15 (no ``TaskConfig``, no run workspace).
    """
    import importlib

    if pipeline not in PIPELINES:
        raise BadInput("--pipeline", pipeline, f"use one of {', '.join(PIPELINES)}")
    module, name, _ = PIPELINES[pipeline]
    return getattr(importlib.import_module(module), name + ("_legacy" if legacy else ""))


def pipeline_parameters(pipeline: str = "training", legacy: bool = False) -> Dict[str, Any]:
    """A pipeline's parameters and their defaults (the default training pipeline's by default)."""
    sig = inspect.signature(pipeline_func(pipeline, legacy).pipeline_func)
    return {name: p.default for name, p in sig.parameters.items()}


def _unknown_param(key: str, pipeline: str, legacy: bool, known: Mapping[str, Any]) -> str:
    """The fix for a parameter the chosen pipeline lacks, naming the variant that has it, if any."""
    if not legacy and key in pipeline_parameters(pipeline, legacy=True):
        return (f"only the {pipeline} pipeline for KFP backends < 2.15 (--legacy-kfp) takes it; the "
                f"default one uses the run workspace")
    return f"not a parameter of the {pipeline} pipeline; known: {', '.join(sorted(known))}"


def parse_params(pairs: Sequence[str], pipeline: str = "training", legacy: bool = False) -> Dict[str, Any]:
    """Turn ``KEY=VALUE`` strings into typed pipeline arguments (typed like the parameter's default).

    Args:
        pairs: the ``KEY=VALUE`` strings.
        pipeline: whose parameters: ``training`` or ``retraining``.
        legacy: check against the variant for KFP backends older than 2.15.

    Raises:
        BadInput: unknown parameter, missing ``=``, or a value that does not parse as the parameter's type.
    """
    known = pipeline_parameters(pipeline, legacy)
    out: Dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep:
            raise BadInput("--param", pair, "write KEY=VALUE, e.g. --param epochs=3")
        if key not in known:
            raise BadInput("--param", key, _unknown_param(key, pipeline, legacy, known))
        default = known[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1")
            elif isinstance(default, int):
                value = int(raw)
            elif isinstance(default, float):
                value = float(raw)
            else:
                value = raw
        except ValueError:
            raise BadInput("--param", pair, f"{key} takes a {type(default).__name__} "
                                            f"(default {default!r})") from None
        out[key] = value
    return out


#: Every process a local run starts (kfp's executors, the training gang) inherits this variable, set
#: to the run's id, so an interrupted run can find and stop all of them.
RUN_MARKER_ENV = "CTRVOLCANO_RUN_ID"


@contextlib.contextmanager
def _stop_run_on_signal(run_id: str) -> Iterator[Dict[str, int]]:
    """SIGINT/SIGTERM to this process: SIGTERM the run's processes at once, then unwind.

    ``kfp.local`` waits for each executor subprocess; a signal sent to this PID alone (``kill PID``,
    a supervisor, a notebook kernel restart) would otherwise leave the executor and its training
    gang running. The mapping yielded records the signal received.
    """
    caught: Dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def handler(signum: int, _frame: object) -> None:
        if "signum" in caught:
            return              # already stopping
        caught["signum"] = signum
        signal_processes(run_id, signal.SIGTERM)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def signal_processes(run_id: str, sig: int) -> List[int]:
    """Send ``sig`` to every live process of run ``run_id`` except this one; returns their PIDs."""
    from ctr_volcano.local_gang import processes_with_env

    pids = [pid for pid in processes_with_env(f"{RUN_MARKER_ENV}={run_id}") if pid != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return pids


def stop_run_processes(run_id: str, grace_s: float = 30.0) -> List[int]:
    """Stop every process of run ``run_id``: SIGTERM, up to ``grace_s`` to exit, then SIGKILL.

    The grace period lets the training step tear its gang down itself. Returns the PIDs still alive
    at the end (none expected).
    """
    deadline = time.monotonic() + grace_s
    while signal_processes(run_id, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.5)
    deadline = time.monotonic() + 5.0
    while signal_processes(run_id, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.2)
    return signal_processes(run_id, 0)


def _fresh_run_dir(workdir: Path) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    runs = workdir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=runs))


def _replace(src: str, dst: Path) -> None:
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    elif dst.exists() or dst.is_symlink():
        dst.unlink()
    if os.path.isdir(src):
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


class LocalRunOutputs:
    """A finished ``kfp.local`` run's pipeline outputs: ``outputs[name]`` is a parameter's value, or
    an object with the artifact's ``path``."""

    def __init__(self, outputs: Mapping[str, Any]):
        self.outputs: Dict[str, Any] = {
            name: SimpleNamespace(path=value["path"]) if isinstance(value, dict) and "path" in value else value
            for name, value in outputs.items()}


def run_in_kfp_local(pipeline: str, args: Mapping[str, Any], run_dir: Path) -> Tuple[LocalRunOutputs, float]:
    """Run the pipeline ``pipeline`` through ``kfp.local`` with its outputs under ``run_dir/outputs``.

    The run happens in a child interpreter whose environment, inherited by the kfp executors and the
    training gang, carries the run's scratch directory (``TMPDIR``) and its marker
    (:data:`RUN_MARKER_ENV`); this process's own environment is left alone.

    Args:
        pipeline: ``"module:attribute"`` of the ``@dsl.pipeline`` object.
        args: the pipeline's arguments (JSON values).
        run_dir: receives ``outputs/`` (every task's outputs) and the run's request and result files.

    Returns:
        The pipeline's outputs and the seconds the run took.

    Raises:
        LocalRunFailed: a task failed (the message names it and where its outputs are).
        Interrupted: SIGINT/SIGTERM; every process of the run was stopped first.
    """
    # The steps' scratch files (kfp's per-task component sources, the training gang's logs and
    # checkpoints) go to one short-pathed directory per run (sockets live there too, and AF_UNIX
    # paths are limited to 108 bytes): removed after a successful run, kept after a failed one.
    scratch = tempfile.mkdtemp(prefix="ctr-run-")
    run_id = uuid.uuid4().hex
    run_dir.mkdir(parents=True, exist_ok=True)
    request, result_path = run_dir / "request.json", run_dir / "result.json"
    write_json(str(request), {"pipeline": pipeline, "args": dict(args), "run_dir": str(run_dir),
                              "result": str(result_path)})
    env = {**os.environ, "TMPDIR": scratch, RUN_MARKER_ENV: run_id}
    started = time.monotonic()
    caught: Dict[str, int] = {}
    try:
        with _stop_run_on_signal(run_id) as caught:
            child = subprocess.Popen([sys.executable, "-m", "ctr_volcano.pipeline_run", str(request)], env=env)
            code = child.wait()
    except KeyboardInterrupt:
        left = stop_run_processes(run_id)
        shutil.rmtree(scratch, ignore_errors=True)
        what = (f"run {run_id} stopped; task outputs so far under {run_dir / 'outputs'}"
                + (f"; could not stop PIDs {left}" if left else ""))
        raise Interrupted(caught.get("signum", signal.SIGINT), what) from None
    finally:
        if os.path.isdir(scratch) and not os.listdir(scratch):
            os.rmdir(scratch)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if code != 0 or "outputs" not in result:
        msg = result.get("error") or f"the kfp.local run exited with code {code}"
        kept = f", scratch files (gang logs) under {scratch}" if os.path.isdir(scratch) else ""
        raise LocalRunFailed(f"{msg}. The failed task's error is in the log above; task outputs are "
                             f"under {run_dir / 'outputs'}{kept}")
    shutil.rmtree(scratch, ignore_errors=True)
    return LocalRunOutputs(result["outputs"]), time.monotonic() - started


def _kfp_local_child(request_path: str) -> int:
    """The child of :func:`run_in_kfp_local`: run the requested pipeline, write its outputs (or its
    error) to the request's ``result`` file; exit 0 on success."""
    import importlib
    import logging

    from kfp import local

    from ctr_model.logs import setup_logging

    setup_logging(logging.INFO)
    with open(request_path, encoding="utf-8") as fh:
        request = json.load(fh)
    module, _, attribute = request["pipeline"].partition(":")
    pipeline = getattr(importlib.import_module(module), attribute)
    run_dir = Path(request["run_dir"])
    # kfp.local rmtree()s workspace_root when the run ends: give it its own throwaway directory.
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(run_dir / "outputs"),
               workspace_root=str(run_dir / "workspace"), raise_on_error=True, enable_caching=False)
    try:
        with warnings.catch_warnings():
            # Running the component image's steps in this environment is the point of `run`.
            warnings.filterwarnings("ignore", message=r"You may be attemping to run a task that uses custom",
                                    category=RuntimeWarning)
            task = pipeline(**request["args"])
    except RuntimeError as exc:
        write_json(request["result"], {"error": re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).rstrip(".")})
        return 1
    except KeyboardInterrupt:   # Ctrl-C reaches the whole process group; the parent reports it
        return 130
    outputs = {name: {"path": value.path} if hasattr(value, "path") else value
               for name, value in task.outputs.items()}
    write_json(request["result"], {"outputs": outputs})
    return 0


def run_local(data: Optional[str] = None, workdir: str = "workdir",
              params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Run the whole training pipeline on this machine through ``kfp.local`` and summarize it.

    Args:
        data: raw Criteo TSV file or directory; defaults to the committed sample (``data/sample``).
        workdir: receives ``summary.json``, ``model/``, ``report.html``, ``metrics.json`` and
            ``runs/<run>/outputs/`` (every task's outputs and executor logs, kept for inspection).
        params: pipeline arguments overriding the defaults and :data:`LOCAL_OVERRIDES`.

    Returns:
        The summary written to ``WORKDIR/summary.json``: ``auc``, ``logloss``, ``model``, ``report``
        (absolute paths), ``passed_gate``, ``min_auc``, ``rows``, ``positive_rate``, ``seconds``,
        ``run_dir``, ``data`` and the ``params`` used.

    Raises:
        BadInput: missing data or an unknown parameter.
        LocalRunFailed: a task failed (the message names the task and the run directory).
    """
    data_path = Path(data) if data else default_sample_dir()
    if not data_path.exists():
        fix = ("pass --data PATH (a Criteo TSV file or directory)" if data else
               "the sample ships with the source tree; from an installed wheel pass --data PATH")
        raise BadInput("data", str(data_path), fix)
    known = pipeline_parameters()
    args: Dict[str, Any] = dict(LOCAL_OVERRIDES)
    for key, value in dict(params or {}).items():
        if key not in known:
            raise BadInput("params", key, f"not a pipeline parameter; known: {', '.join(sorted(known))}")
        args[key] = value
    args["data_uri"] = str(data_path.resolve())

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run_dir = _fresh_run_dir(work)
    task, seconds = run_in_kfp_local("pipelines.ctr_training_pipeline:ctr_training_pipeline", args, run_dir)
    summary = _summarize(task.outputs, work, {**known, **args}, run_dir, seconds)
    write_json(str(work / "summary.json"), summary, sort_keys=True)
    return summary


def _summarize(outs: Mapping[str, Any], work: Path, params: Dict[str, Any], run_dir: Path,
               seconds: float) -> Dict[str, Any]:
    """Copy model, report and metrics to their stable places in ``work``; the run's summary."""
    model_dst, report_dst, metrics_dst = work / "model", work / "report.html", work / "metrics.json"
    _replace(outs["model"].path, model_dst)
    _replace(outs["report"].path, report_dst)
    _replace(outs["metrics"].path, metrics_dst)
    with open(metrics_dst) as f:
        scalars = json.load(f)
    return {
        "auc": float(outs["auc"]),
        "logloss": float(scalars["logloss"]),
        "rows": int(scalars["rows"]),
        "positive_rate": float(scalars["positive_rate"]),
        "passed_gate": bool(outs["passed"]),
        "min_auc": float(params["min_auc"]),
        "model": str(model_dst),
        "report": str(report_dst),
        "metrics": str(metrics_dst),
        "data": params["data_uri"],
        "run_dir": str(run_dir),
        "seconds": round(seconds, 1),
        "params": params,
    }


# ----------------------------------------------------------------------------------------------
# compile


def compiled_files(legacy: bool = False) -> Dict[str, Any]:
    """Map each committed YAML (path relative to the source tree) to the pipeline/component it compiles.

    Args:
        legacy: the variants for KFP backends older than 2.15 instead (no TaskConfig, no run
            workspace; see :mod:`ctr_volcano.legacy_kfp`); they are not committed.
    """
    from components.data_prep import prepare_ctr_data
    from components.evaluate import check_auc_gate, evaluate_ctr, publish_model
    from components.retrain import champion_challenger_gate, find_champion, register_model, resolve_data_window
    from components.train import train_ctr
    from ctr_volcano.legacy_kfp import without_task_config

    train = without_task_config(train_ctr) if legacy else train_ctr
    out: Dict[str, Any] = {f"pipelines/{PIPELINES[p][1]}.yaml": pipeline_func(p, legacy) for p in PIPELINES}
    for comp in (prepare_ctr_data, train, evaluate_ctr, check_auc_gate, publish_model,
                 resolve_data_window, find_champion, champion_challenger_gate, register_model):
        out[f"components/{comp.python_func.__name__}.yaml"] = comp
    return out


def compile_all(out_dir: Optional[str] = None, legacy: bool = False) -> List[str]:
    """Compile the pipeline and every component to YAML.

    Args:
        out_dir: write every file flat into this directory; by default each goes next to its source
            (``pipelines/*.yaml``, ``components/*.yaml``), i.e. regenerates the committed files.
        legacy: compile for KFP backends older than 2.15 (explicit parameters and a named PVC, no
            TaskConfig, no run workspace); needs ``out_dir`` (the committed files are the default YAML).

    Returns:
        The paths written.
    """
    from kfp import compiler

    root = Path(__file__).resolve().parents[1]
    if legacy and out_dir is None:
        raise BadInput("--out-dir", None, "--legacy-kfp writes a second set of YAML: pass --out-dir DIR "
                                          "(the committed files are for KFP backends >= 2.15)")
    if out_dir is None and not (root / "setup.py").is_file():
        raise BadInput("--out-dir", None, f"{root} is an installed copy, not a source tree: pass --out-dir DIR")
    written = []
    for rel, func in compiled_files(legacy).items():
        dst = Path(out_dir) / Path(rel).name if out_dir else root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(func, str(dst))
        written.append(str(dst))
    return written


# ----------------------------------------------------------------------------------------------
# submit


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
LEGACY_KFP_HINT = ("this package needs a KFP backend >= 2.15 (TaskConfig); for older backends "
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
        BadInput: a bad flag (before any request), no KFP API at ``host``, or a request the server
            refused (the message names the step and quotes the server's reason).
        TransientError: the server stopped answering in the middle of the submit.
    """
    from kfp import Client, compiler

    pipeline = pipeline or default_submit_pipeline(cron)
    func = pipeline_func(pipeline, legacy)
    if cron is not None:
        _check_cron(cron)
    if max_concurrency < 1:
        raise BadInput("--max-concurrency", max_concurrency, "allow at least 1 concurrent run")
    known = pipeline_parameters(pipeline, legacy)
    for key in dict(params or {}):
        if key not in known:
            raise BadInput("params", key, _unknown_param(key, pipeline, legacy, known))
    name = run_name or f"ctr-{pipeline}-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if client is None:
        check_kfp_host(host)
        with _kfp_call(host, "connect"):
            client = Client(host=host, namespace=namespace or "kubeflow")
    with tempfile.TemporaryDirectory(prefix="ctr-submit-") as tmp:
        package = os.path.join(tmp, f"{PIPELINES[pipeline][1]}.yaml")
        compiler.Compiler().compile(func, package)
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


if __name__ == "__main__":  # the child interpreter of run_in_kfp_local
    sys.exit(_kfp_local_child(sys.argv[1]))
