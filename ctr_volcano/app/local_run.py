"""Run a pipeline on this machine through ``kfp.local``: the core behind ``ctr-volcano run``.

Why a wrapper around ``kfp.local`` at all: kfp 2.17.3's local runner deletes its ``workspace_root``
after every pipeline run and keeps outputs only under an opaque timestamped directory. So
:func:`run_local` gives each run a fresh workspace and pipeline root under ``WORKDIR/runs/<run>``,
copies what users want (model, report, metrics) to stable places in ``WORKDIR``, and writes
``WORKDIR/summary.json`` -- the file scripts and CI read.

Components run with ``SubprocessRunner(use_venv=False)``: in this Python environment, offline, with the
installed package, so a local run exercises exactly the code that the component image ships. The run
happens in a child interpreter; SIGINT/SIGTERM to this process stops every process of the run. Its
output goes to ``RUN_DIR/run.log`` (:mod:`ctr_volcano.app.run_log`), not to the terminal (``verbose``
echoes it): a failed step ends the run with that step's own one-line error, naming the log.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
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
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ctr_model.atomic import write_json
from ctr_volcano.app.catalogue import check_param_names, default_sample_dir
from ctr_volcano.app.run_log import LOG_FILE, LocalRunFailed, RunLog, echo_stream, step_error
from ctr_volcano.errors import BadInput, Interrupted
from ctr_volcano.util.deps import require

logger = logging.getLogger(__name__)

__all__ = ["LOCAL_OVERRIDES", "RUN_MARKER_ENV", "LocalRunFailed", "signal_processes", "stop_run_processes",
           "run_local", "run_in_kfp_local", "LocalRunOutputs", "fresh_run_dir", "check_inputs"]

#: What ``ctr-volcano run`` changes from the pipeline's (cluster-oriented) defaults: train with local
#: processes, in batches of 32 for one epoch. On the committed 200k-line sample that gave log loss
#: 0.0066-0.0070 above the generating model's in 5 of 5 runs (64 x 1: 0.0074-0.0087; 64 x 3 and
#: 64 x 2 overfit: 0.0126 and 0.0085; the cluster default 512 rows makes too few steps on a sample);
#: docs/training.md, "Calibration and the demo".
LOCAL_OVERRIDES: Dict[str, Any] = {"backend": "local", "batch_size": 32, "epochs": 1}


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
    from ctr_volcano.training.local.gang import processes_with_env

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


def fresh_run_dir(workdir: Path) -> Path:
    """A new, unique ``WORKDIR/runs/<UTC time>-<random>`` directory for one pipeline run."""
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


def run_in_kfp_local(pipeline: str, args: Mapping[str, Any], run_dir: Path,
                     verbose: bool = False) -> Tuple[LocalRunOutputs, float]:
    """Run the pipeline ``pipeline`` through ``kfp.local`` with its outputs under ``run_dir/outputs``.

    The run happens in a child interpreter whose environment, inherited by the kfp executors and the
    training gang, carries the run's scratch directory (``TMPDIR``) and its marker
    (:data:`RUN_MARKER_ENV`); this process's own environment is left alone. Everything the run prints
    goes to ``run_dir/run.log``; this process logs one line per finished step.

    Args:
        pipeline: ``"module:attribute"`` of the ``@dsl.pipeline`` object.
        args: the pipeline's arguments (JSON values).
        run_dir: receives ``outputs/`` (every task's outputs), ``run.log`` and the run's request and
            result files.
        verbose: also echo the run's output to stderr, as it comes.

    Returns:
        The pipeline's outputs and the seconds the run took.

    Raises:
        BadInput: a step refused its input (:class:`~ctr_volcano.app.run_log.StepBadInput`: the
            step's own line, naming the log).
        TransientError: a step gave up on an outage.
        LocalRunFailed: a step (or the run) failed otherwise.
        Interrupted: SIGINT/SIGTERM; every process of the run was stopped first.
    """
    # The steps' scratch files (kfp's per-task component sources, the training gang's logs and
    # checkpoints) go to one short-pathed directory per run (sockets live there too, and AF_UNIX
    # paths are limited to 108 bytes): removed after a successful run, kept after a failed one.
    scratch = tempfile.mkdtemp(prefix="ctr-run-")
    run_id = uuid.uuid4().hex
    run_dir.mkdir(parents=True, exist_ok=True)
    request, result_path, log_path = run_dir / "request.json", run_dir / "result.json", run_dir / LOG_FILE
    write_json(str(request), {"pipeline": pipeline, "args": dict(args), "run_dir": str(run_dir),
                              "result": str(result_path)})
    env = {**os.environ, "TMPDIR": scratch, RUN_MARKER_ENV: run_id, "PYTHONUNBUFFERED": "1"}
    logger.info("running %s through kfp.local; its log: %s", pipeline.rpartition(":")[2], log_path)
    started = time.monotonic()
    caught: Dict[str, int] = {}
    log = RunLog(log_path, echo_stream(verbose))
    try:
        with _stop_run_on_signal(run_id) as caught:
            child = subprocess.Popen([sys.executable, "-m", "ctr_volcano.app.local_run", str(request)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            log.follow(child.stdout)   # type: ignore[arg-type]
            code = child.wait()
    except KeyboardInterrupt:
        left = stop_run_processes(run_id)
        shutil.rmtree(scratch, ignore_errors=True)
        what = (f"run {run_id} stopped; task outputs so far under {run_dir / 'outputs'}, its log {log_path}"
                + (f"; could not stop PIDs {left}" if left else ""))
        raise Interrupted(caught.get("signum", signal.SIGINT), what) from None
    finally:
        log.join(timeout=10.0)
        if os.path.isdir(scratch) and not os.listdir(scratch):
            os.rmdir(scratch)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if code != 0 or "outputs" not in result:
        raise _failure(result.get("error") or f"the kfp.local run exited with code {code}", log_path, scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    return LocalRunOutputs(result["outputs"]), time.monotonic() - started


def _failure(error: str, log_path: Path, scratch: str) -> Exception:
    """The failed run's error (the failed step's own, :func:`~ctr_volcano.app.run_log.step_error`);
    the kept scratch directory is named at the end of the log."""
    if os.path.isdir(scratch):
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"\nctr-volcano: the run failed: {error}\nctr-volcano: scratch files (gang logs) "
                     f"kept under {scratch}\n")
    task = re.search(r"Inner task failed: '([^']+)'", error)
    return step_error(log_path, task.group(1) if task else None, error)


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
              params: Optional[Mapping[str, Any]] = None, verbose: bool = False) -> Dict[str, Any]:
    """Run the whole training pipeline on this machine through ``kfp.local`` and summarize it.

    Args:
        data: raw click logs, a file or directory (Criteo TSV, or the layout the ``feature_spec``
            parameter declares); defaults to the committed sample (``data/sample``).
        workdir: receives ``summary.json``, ``model/``, ``report.html``, ``metrics.json`` and
            ``runs/<run>/outputs/`` (every task's outputs and executor logs, kept for inspection).
        params: pipeline arguments overriding the defaults and :data:`LOCAL_OVERRIDES`.
        verbose: echo the run's output (kfp's, every step's) to stderr; it always goes to
            ``runs/<run>/run.log``.

    Returns:
        The summary written to ``WORKDIR/summary.json``: ``auc``, ``logloss``, ``model``, ``report``
        (absolute paths), ``passed_gate``, ``min_auc``, ``rows``, ``positive_rate``, ``seconds``,
        ``run_dir``, ``data`` and the ``params`` used.

    Raises:
        BadInput: missing or bad data, a bad feature spec, validation threshold or baseline, or an
            unknown parameter (before any step runs), or a step refused its input (its own line, naming the run's log).
        LocalRunFailed: a step failed otherwise (its error's first line, naming the run's log).
    """
    from ctr_volcano.validation.validate import check_params

    data_path = Path(data) if data else default_sample_dir()
    if not data_path.exists():
        layout = "in the feature spec's layout" if (params or {}).get("feature_spec") else "of Criteo TSV"
        fix = (f"no such file or directory; give a file or directory {layout}" if data else
               "the sample ships with the source tree; from an installed wheel pass --data PATH")
        raise BadInput("data", str(data_path), fix)
    known = check_param_names(list(params or {}), field="params")
    args: Dict[str, Any] = {**LOCAL_OVERRIDES, **dict(params or {})}
    if args["backend"] == "local":
        require("paddle", "backend", "local", "ctr-volcano run trains with the local backend, a Paddle "
                                              "gang on this machine")
    check_inputs(data_path, args.get("feature_spec", known["feature_spec"]))
    check_params(args.get("feature_spec", known["feature_spec"]), args.get("validation_thresholds"),
                 args.get("validation_baseline", ""))
    args["data_uri"] = str(data_path.resolve())

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run_dir = fresh_run_dir(work)
    task, seconds = run_in_kfp_local("pipelines.ctr_training_pipeline:ctr_training_pipeline", args, run_dir,
                                     verbose=verbose)
    summary = _summarize(task.outputs, work, {**known, **args}, run_dir, seconds)
    write_json(str(work / "summary.json"), summary, sort_keys=True)
    return summary


def check_inputs(data: Path, feature_spec: Any) -> None:
    """The prep step's up-front checks, here, before ``kfp.local`` starts: the feature spec, the input
    files (their names and compression, a spec's columns). A bad input fails in a second, in one line,
    as ``ctr-volcano prep`` fails on it.

    Raises:
        BadInput: naming ``feature_spec`` or ``data`` (the file), the value and the fix.
    """
    from ctr_volcano.data.prep import check_inputs as check_prep_inputs
    from ctr_volcano.data.spec_input import read_feature_spec

    spec = read_feature_spec(feature_spec)
    try:
        check_prep_inputs([str(data)], spec)
    except BadInput as exc:
        if exc.field != "input":
            raise
        raise BadInput("data", exc.value, exc.fix) from None


def _summarize(outs: Mapping[str, Any], work: Path, params: Dict[str, Any], run_dir: Path,
               seconds: float) -> Dict[str, Any]:
    """Copy model, report and metrics to their stable places in ``work``; the run's summary."""
    model_dst, report_dst, metrics_dst = work / "model", work / "report.html", work / "metrics.json"
    _replace(outs["model"].path, model_dst)
    _replace(outs["report"].path, report_dst)
    _replace(outs["metrics"].path, metrics_dst)
    with open(metrics_dst) as f:
        scalars = json.load(f)
    # the step recorded where its outputs were in the run; name their stable copies instead
    scalars.update(report=str(report_dst), model_dir=str(model_dst))
    write_json(str(metrics_dst), scalars, sort_keys=True)
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


if __name__ == "__main__":  # the child interpreter of run_in_kfp_local
    sys.exit(_kfp_local_child(sys.argv[1]))
