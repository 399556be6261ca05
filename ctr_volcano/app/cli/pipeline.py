"""``ctr-volcano compile | run | submit``: the pipeline as files, on this machine, and on a cluster.

The handlers only parse flags and print; the work is in :mod:`ctr_volcano.app.catalogue`, :mod:`~ctr_volcano.app.local_run`, :mod:`~ctr_volcano.app.compile` and :mod:`~ctr_volcano.app.submit`.
"""
from __future__ import annotations

import argparse
import json
import sys

from ctr_volcano.training.params import DEFAULT_PVC_NAME
from ctr_volcano.training.task_config import MIN_KFP_BACKEND

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``compile``, ``run`` and ``submit`` to the ``ctr-volcano`` command line."""
    _register_compile(subparsers)
    _register_run(subparsers)
    _register_submit(subparsers)


def _register_compile(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="compile the pipeline and the components to KFP YAML",
        description="Compile pipelines/ctr_training_pipeline.yaml and components/*.yaml from the "
                    "installed code. Without --out-dir the committed files are regenerated in place. "
                    f"They need a KFP backend >= {MIN_KFP_BACKEND} (TaskConfig passthroughs, run workspace); "
                    "--legacy-kfp compiles for older backends (explicit parameters, a named PVC).")
    p.add_argument("--out-dir", metavar="DIR", default=None,
                   help="write all YAML files into DIR instead of next to their sources")
    p.add_argument("--legacy-kfp", action="store_true",
                   help=f"compile for KFP backends older than {MIN_KFP_BACKEND}: no TaskConfig, no run workspace; the "
                        "training step takes cpu/memory/pvc_name as parameters (needs --out-dir)")
    p.set_defaults(func=_compile)


def _register_run(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="run the whole pipeline locally through kfp.local; write WORKDIR/summary.json",
        description="Run prep -> train -> evaluate -> AUC gate -> publish on this machine through "
                    "kfp.local (SubprocessRunner, no containers), training with the local backend "
                    "(a real pserver/trainer gang as processes). Writes WORKDIR/summary.json, "
                    "WORKDIR/model/, WORKDIR/report.html and WORKDIR/metrics.json. Quiet: one line per "
                    "step; the run's output goes to WORKDIR/runs/<run>/run.log, and a failed step ends "
                    "the run with its own one-line error, naming that file.")
    p.add_argument("--data", metavar="PATH", default=None,
                   help="raw click logs, a file or a directory: Criteo TSV (plain or .gz), or the layout "
                        "-p feature_spec=... declares (CSV/TSV/Parquet, docs/features.md) (default: the "
                        "committed sample data/sample)")
    p.add_argument("--workdir", metavar="DIR", default="workdir", help="output directory (default ./workdir)")
    p.add_argument("--days", metavar="N", type=int, default=None,
                   help="back-fill: run the retraining pipeline for N consecutive run dates from "
                        "--start-date (--data is then a template such as 'DIR/day={date}'); "
                        "writes WORKDIR/backfill.json")
    p.add_argument("--start-date", metavar="YYYY-MM-DD", default=None,
                   help="with --days: the first run date")
    p.add_argument("--registry", metavar="DIR", default=None,
                   help="with --days: the model registry directory (default WORKDIR/registry)")
    p.add_argument("--score-data-uri", metavar="PATH", default=None,
                   help="with --days: candidates to score with each day's newly promoted model, a template "
                        "such as 'DIR/day={date}' (-p score_keep_columns=id keeps their ids); a day "
                        "that promotes nothing scores nothing")
    p.add_argument("--keep-going", action="store_true",
                   help="with --days: after a day a step refused (a failed data validation, a bad file), "
                        "record it and run the next day, as a schedule would; exit 2 at the end if any was")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="echo the run's whole output (kfp's, every step's) here too; it always goes to "
                        "WORKDIR/runs/<run>/run.log")
    _add_param_flag(p)
    p.set_defaults(func=_run)


def _register_submit(subparsers) -> None:
    p = subparsers.add_parser(
        "submit", help="run the pipeline on a KFP cluster, once or on a cron schedule",
        description="Compile the pipeline and submit it through kfp.Client: one run now, or with "
                    "--cron a recurring run (e.g. nightly retraining). The default package needs a "
                    f"KFP backend >= {MIN_KFP_BACKEND}; --legacy-kfp submits the variant for older backends.")
    p.add_argument("--host", required=True, metavar="URL",
                   help="KFP API endpoint, e.g. http://localhost:8080 after "
                        "`kubectl -n kubeflow port-forward svc/ml-pipeline-ui 8080:80`")
    p.add_argument("--experiment", default="ctr-volcano", help="experiment name (created if missing)")
    p.add_argument("--run-name", default=None, help="run display name (default ctr-training-<time>)")
    p.add_argument("--cron", "--schedule", dest="cron", metavar="EXPR", default=None,
                   help="6-field cron (seconds first), e.g. '0 0 2 * * *' for 02:00 daily: "
                        "creates a recurring run of the retraining pipeline instead of a single run")
    p.add_argument("--pipeline", choices=("training", "retraining"), default=None,
                   help="which pipeline to submit (default: retraining with --cron, else training)")
    p.add_argument("--max-concurrency", metavar="N", type=int, default=1,
                   help="with --cron: how many scheduled runs may overlap (default 1)")
    p.add_argument("--namespace", default=None, help="multi-user KFP: your profile namespace")
    p.add_argument("--service-account", default=None,
                   help="service account of the run's pods (default pipeline-runner)")
    p.add_argument("--legacy-kfp", action="store_true",
                   help=f"for KFP backends older than {MIN_KFP_BACKEND} (2.14 refuses the default package at upload): "
                        "submit what `compile --legacy-kfp` writes, no TaskConfig, no run workspace; the "
                        f"training pipeline then takes -p pvc_name=CLAIM (default {DEFAULT_PVC_NAME})")
    _add_param_flag(p)
    p.set_defaults(func=_submit)


def _add_param_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--param", metavar="KEY=VALUE", action="append", default=[],
                   help="set a pipeline parameter (repeatable), e.g. -p epochs=3 -p min_auc=0.75")


def _compile(args: argparse.Namespace) -> int:
    from ctr_volcano.app.compile import compile_all

    for path in compile_all(args.out_dir, legacy=args.legacy_kfp):
        print(f"wrote {path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from ctr_volcano.app.catalogue import parse_params
    from ctr_volcano.app.local_run import run_local

    if args.days is not None:
        return _backfill(args)
    for flag, value in (("--start-date", args.start_date), ("--registry", args.registry),
                        ("--keep-going", args.keep_going or None), ("--score-data-uri", args.score_data_uri)):
        if value is not None:
            from ctr_volcano.errors import BadInput

            raise BadInput(flag, value, "only used with --days N (a back-fill of the retraining pipeline)")

    summary = run_local(args.data, args.workdir, parse_params(args.param), verbose=args.verbose)
    gate = "passed" if summary["passed_gate"] else "BLOCKED"
    print(f"AUC {summary['auc']:.4f}  log loss {summary['logloss']:.4f}  on {summary['rows']} test rows  "
          f"(gate min_auc {summary['min_auc']:g}: {gate})  in {summary['seconds']:.0f} s")
    print(f"model  {summary['model']}\nreport {summary['report']}\n"
          f"summary {args.workdir.rstrip('/')}/summary.json")
    return 0


def _backfill(args: argparse.Namespace) -> int:
    import logging

    from ctr_volcano.app.backfill import run_backfill
    from ctr_volcano.app.catalogue import parse_params
    from ctr_volcano.errors import BadInput

    if not args.data or not args.start_date:
        raise BadInput("--data" if not args.data else "--start-date", args.data or args.start_date,
                       "a back-fill needs --data 'DIR/day={date}' and --start-date YYYY-MM-DD")
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def show(day: dict) -> None:
        if day.get("refused_by"):
            print(f"{day['run_date']}: REFUSED: {day['error']}", flush=True)
            return
        champ = "-" if day["champion_auc"] is None else f"{day['champion_auc']:.4f}"
        print(f"{day['run_date']}: version {day['version']} "
              f"{'PUBLISHED' if day['published'] else 'refused'}: challenger AUC "
              f"{day['challenger_auc']:.4f}, champion AUC {champ} (warm start from "
              f"{day['parent'] or 'nothing'}; data {day['validation'].get('verdict', '-')})", flush=True)
        if day.get("scores"):
            print(f"{day['run_date']}: candidates scored with it into {day['scores']}", flush=True)

    summary = run_backfill(args.data, args.start_date, args.days, args.workdir, args.registry,
                           parse_params(args.param, "retraining"), on_day=show, verbose=args.verbose,
                           keep_going=args.keep_going, score_data_uri=args.score_data_uri or "")
    refused = [d["run_date"] for d in summary["days"] if d.get("refused_by")]
    print(f"champion {summary['champion']} in {summary['registry']}/{summary['model_name']}\n"
          f"summary {args.workdir.rstrip('/')}/backfill.json")
    if refused:
        print(f"refused days: {', '.join(refused)}", file=sys.stderr)
        return 2
    return 0


def _submit(args: argparse.Namespace) -> int:
    from ctr_volcano.app.catalogue import parse_params
    from ctr_volcano.app.submit import default_submit_pipeline, submit

    pipeline = args.pipeline or default_submit_pipeline(args.cron)
    res = submit(args.host, experiment=args.experiment, run_name=args.run_name, cron=args.cron,
                 max_concurrency=args.max_concurrency,
                 params=parse_params(args.param, pipeline, args.legacy_kfp), namespace=args.namespace,
                 service_account=args.service_account, pipeline=pipeline, legacy=args.legacy_kfp)
    print(json.dumps(res, indent=2))
    return 0
