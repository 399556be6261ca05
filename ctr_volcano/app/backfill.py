"""Back-fill: run the retraining pipeline through ``kfp.local`` once per day, oldest first.

This is ``ctr-volcano run --days N``: what a recurring schedule would have done over ``N`` days, on
this machine, with the same pipeline a cluster runs (``run_date`` set per run instead of the
scheduled time). Each day continues the registry's champion, so the days must run in order, and each
gets its own ``kfp.local`` session (it deletes its workspace after every run).
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ctr_model.atomic import write_json
from ctr_volcano.errors import BadInput
from ctr_volcano.util.deps import require

__all__ = ["run_backfill", "BACKFILL_FILE"]

BACKFILL_FILE = "backfill.json"
_log = logging.getLogger(__name__)


def run_backfill(data_uri: str, start_date: str, days: int, workdir: str = "workdir",
                 registry: Optional[str] = None, params: Optional[Mapping[str, Any]] = None,
                 on_day: Optional[Callable[[Dict[str, Any]], None]] = None, verbose: bool = False,
                 keep_going: bool = False, score_data_uri: str = "") -> Dict[str, Any]:
    """Run the retraining pipeline for ``days`` consecutive run dates starting at ``start_date``.

    Args:
        data_uri: raw data with a ``{date}`` template, e.g. ``data/days/day={date}``.
        start_date: the first run date, ``YYYY-MM-DD``.
        days: how many run dates.
        workdir: gets ``runs/<run>/outputs`` per day and ``backfill.json``.
        registry: the model registry directory; default ``WORKDIR/registry``.
        params: other pipeline arguments (over :data:`ctr_volcano.app.local_run.LOCAL_OVERRIDES`).
        on_day: called with each day's record as soon as the day is done.
        verbose: echo each run's output to stderr (it always goes to its ``run.log``).
        keep_going: a day a step refused (a failed data validation, a bad file) is recorded with its
            error (``refused_by``, ``error``) and the next day runs, as a schedule's next run would.
        score_data_uri: candidates with a ``{date}`` template, e.g. ``data/candidates/day={date}``: a day
            whose model is promoted scores that day's candidates with it (the pipeline's
            ``score_data_uri``, made absolute like ``data_uri``); empty scores nothing.

    Returns:
        The summary written to ``WORKDIR/backfill.json``: ``registry``, ``model_name``, ``champion``
        (the final champion's version) and ``days``: per day ``run_date``, ``version``,
        ``published``, ``challenger_auc``, ``champion_auc``, ``champion`` (the version it was
        compared with), ``parent`` (the version it was warm-started from), ``reason``, ``validation``
        (the data validation's verdict and findings), ``scores`` (the scored candidates' directory, or
        None), ``seconds``; a refused day (``keep_going``)
        has ``refused_by`` (the step) and ``error`` instead of the gate's figures.

    Raises:
        BadInput: bad dates, counts or parameters (before any run).
        BadInput, TransientError, LocalRunFailed: a day's run failed, as
            :func:`~ctr_volcano.app.local_run.run_in_kfp_local` reports it (the days before it stay
            registered); with ``keep_going``, only what is not a refused input.
    """
    from ctr_volcano.retraining.registry import ModelRegistry

    first, args, known = _checked(data_uri, start_date, days, params, score_data_uri)
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    registry = os.path.abspath(registry) if registry else str(work / "registry")
    local_uri = _absolute(data_uri)
    if score_data_uri:
        args["score_data_uri"] = _absolute(score_data_uri)
    model_name = args.get("model_name", known["model_name"])
    reg = ModelRegistry(registry, model_name)
    records: List[Dict[str, Any]] = []
    for k in range(days):
        run_date = (first + _dt.timedelta(days=k)).isoformat()
        _log.info("back-fill %d/%d: run date %s", k + 1, days, run_date)
        day_args = {**args, "data_uri": local_uri, "registry": registry, "run_date": run_date}
        record = _run_day(reg, work, day_args, verbose, keep_going)
        records.append(record)
        if on_day:
            on_day(record)
    champion = reg.champion()
    summary = {"registry": registry, "model_name": model_name,
               "champion": champion.version if champion else None, "days": records,
               "params": args, "data_uri": local_uri}
    write_json(str(work / BACKFILL_FILE), summary, sort_keys=True)
    return summary


def _run_day(reg: Any, work: Path, args: Dict[str, Any], verbose: bool, keep_going: bool) -> Dict[str, Any]:
    """One run date through kfp.local: its record (see :func:`run_backfill`)."""
    from ctr_volcano.app.local_run import fresh_run_dir, run_in_kfp_local
    from ctr_volcano.app.run_log import StepBadInput

    before = {v.version for v in reg.versions()}
    run_dir = fresh_run_dir(work)
    try:
        task, seconds = run_in_kfp_local("pipelines.ctr_retraining_pipeline:ctr_retraining_pipeline_local",
                                         args, run_dir, verbose=verbose)
    except StepBadInput as exc:
        if not keep_going:
            raise
        return {"run_date": args["run_date"], "version": None, "published": False, "refused_by": exc.task,
                "error": str(exc), "validation": {"verdict": "fail" if exc.task == "validate-ctr-data" else "-"}}
    with open(task.outputs["gate_metrics"].path) as fh:
        gate = json.load(fh)
    new = [v for v in reg.versions() if v.version not in before]
    return {"run_date": args["run_date"], "version": new[-1].version if new else None,
            "published": bool(task.outputs["published"]),
            "challenger_auc": gate["decision"]["challenger_auc"],
            "champion_auc": gate["decision"]["champion_auc"],
            "champion": gate.get("champion_version") or None,
            "parent": new[-1].meta.get("parent") if new else None,
            "reason": gate["decision"]["reason"], "validation": gate.get("validation") or {},
            "scores": _scores_dir(run_dir), "seconds": round(seconds, 1)}


def _absolute(uri: str) -> str:
    """A local path made absolute (kfp.local runs each step in its own directory); a URI as it is."""
    return uri if "://" in uri else os.path.abspath(uri)


def _scores_dir(run_dir: Path) -> Optional[str]:
    """Where the run scored the day's candidates (``score_data_uri`` set and the model promoted), else None."""
    found = sorted(run_dir.glob("outputs/*/score-ctr/scores/scores.json"))
    return str(found[0].parent) if found else None


def _checked(data_uri: str, start_date: str, days: int, params: Optional[Mapping[str, Any]],
             score_data_uri: str = "") -> Tuple[_dt.date, Dict[str, Any], Dict[str, Any]]:
    """The first run date, the pipeline's arguments and its parameters' defaults, every input checked
    before any run: dates, counts, parameter names, the feature spec, the validation thresholds and
    baseline, the data template, the scoring parameters."""
    from ctr_volcano.app.catalogue import check_param_names
    from ctr_volcano.app.local_run import LOCAL_OVERRIDES
    from ctr_volcano.data.spec_input import read_feature_spec
    from ctr_volcano.retraining.gate import check_gate_task
    from ctr_volcano.retraining.window import check_scoring_params, resolve_window
    from ctr_volcano.validation.validate import check_params

    try:
        first = _dt.date.fromisoformat(start_date)
    except (TypeError, ValueError):
        raise BadInput("--start-date", start_date, "use an ISO date, e.g. 2026-01-01") from None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
        raise BadInput("--days", days, "use an integer in 1..366")
    known = check_param_names(list(params or {}), "retraining", field="params")
    args: Dict[str, Any] = {k: v for k, v in LOCAL_OVERRIDES.items() if k in known}
    for key, value in dict(params or {}).items():
        if key in ("run_date", "data_uri", "registry", "score_data_uri"):
            raise BadInput("params", key, "set by run --days itself (use --start-date, --data, --registry, "
                                          "--score-data-uri)")
        args[key] = value
    check_scoring_params({**args, "score_data_uri": score_data_uri})
    if args.get("backend") == "local":
        require("paddle", "backend", "local", "a back-fill trains with the local backend, a Paddle gang "
                                              "on this machine")
    read_feature_spec(args.get("feature_spec"))   # a typo fails now, not in day 1's prep step
    check_gate_task(args.get("feature_spec"), args.get("gate_task", ""))     # nor in its gate
    check_params(args.get("feature_spec"), args.get("validation_thresholds"),   # not in day 1's validation
                 args.get("validation_baseline", ""))
    window_days = int(args.get("window_days", 1))
    window = resolve_window(data_uri, run_date=first.isoformat(), window_days=window_days)  # bad template
    if days > 1 and window.sources == resolve_window(
            data_uri, run_date=(first + _dt.timedelta(days=1)).isoformat(), window_days=window_days).sources:
        raise BadInput("--data", data_uri, "every day would read the same data: put a {date} template "
                                           "in it, e.g. DIR/day={date}")
    return first, args, known
