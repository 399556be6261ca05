"""``ctr-volcano gen-data`` and ``ctr-volcano prep``: the data verbs.

Thin adapters: parse flags, build the validated config, call :mod:`ctr_volcano.data.synthetic` or
:mod:`ctr_volcano.data.prep`, print a short summary. Heavy imports happen inside the handlers so the
CLI starts fast.
"""
from __future__ import annotations

import argparse
import json
import sys

from ctr_model.defaults import DEFAULT_HASH_BUCKETS

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``gen-data`` and ``prep`` to the CLI."""
    _register_gen_data(subparsers)
    _register_prep(subparsers)


def _register_gen_data(subparsers) -> None:
    g = subparsers.add_parser(
        "gen-data", help="write synthetic Criteo-format TSV from a planted model (+ oracle.json)",
        description="Write Criteo-format TSV files DIR/part-*.tsv drawn from a planted logistic "
                    "model, and DIR/oracle.json with that model's own AUC/logloss on a fresh "
                    "sample (the best any learner can do). Deterministic for a given seed.")
    g.add_argument("--rows", type=int, required=True, help="number of lines to write")
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--seed", type=int, default=0, help="planted model and rows (default 0)")
    g.add_argument("--files", type=int, default=1, help="number of files (default 1)")
    g.add_argument("--gzip", type=int, default=0, metavar="LEVEL",
                   help="write .tsv.gz at this gzip level 1-9 (default 0: plain TSV)")
    g.add_argument("--oracle-rows", type=int, default=400_000,
                   help="rows of the fresh sample the oracle is measured on (default 400000)")
    g.add_argument("--vocab-scale", type=int, default=1, metavar="K",
                   help="multiply every categorical column's vocabulary size by K (1-1000; default "
                        "1: at most 3,000 values per column), so the distinct ids seen keep growing "
                        "with --rows, as on real Criteo")
    g.add_argument("--interactions", type=int, default=0, metavar="K",
                   help="plant K pairwise interactions between categorical columns (0-100; default "
                        "0: the linear model, today's bytes), so models that learn interactions "
                        "have something to find; the oracle includes them")
    g.add_argument("--days", type=int, default=None, metavar="N",
                   help="write N daily partitions OUT/day=YYYY-MM-DD/ of --rows lines each, from a "
                        "planted model that drifts from day to day (per-day oracle.json)")
    g.add_argument("--drift", type=float, default=0.3, metavar="X",
                   help="with --days: share of the planted weights' variance replaced per day "
                        "(default 0.3)")
    g.add_argument("--start-date", default="2026-01-01", metavar="YYYY-MM-DD",
                   help="with --days: the first day (default 2026-01-01)")
    g.add_argument("--feature-spec", default="", metavar="FILE",
                   help="write files in this feature spec's layout (csv/tsv/parquet, a planted "
                        "model over its features) instead of Criteo TSV (docs/features.md)")
    g.add_argument("--bad-day", action="append", default=[], metavar="DATE:KIND[:COLUMN]",
                   help="with --days: plant a broken day that data validation must catch (repeatable); KIND "
                        "one of empty-column, rekey, unit-x1000, label-x2, rows-10pct, e.g. "
                        "2026-01-05:unit-x1000:I6 (docs/validation.md)")
    g.set_defaults(func=_gen_data)


def _register_prep(subparsers) -> None:
    p = subparsers.add_parser(
        "prep", help="raw click logs (Criteo TSV or a feature spec's layout) -> hashed Parquet shards + stats.json",
        description="Stream raw click logs (files, globs, directories; gzip as .gz) in Criteo TSV, or in "
                    "the layout a feature spec declares (CSV/TSV/Parquet, named columns, multi-valued "
                    "features: --feature-spec, docs/features.md), into OUT/train/part-*.parquet, "
                    "OUT/test/part-*.parquet (each with schema.json) and OUT/stats.json. Bad lines are "
                    "counted and reported with file and line; above --max-bad-fraction prep fails.")
    p.add_argument("--input", nargs="+", required=True, metavar="PATH",
                   help="input files, globs or directories, in Criteo TSV or the --feature-spec layout")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--hash-buckets", type=int, default=DEFAULT_HASH_BUCKETS,
                   help="hash buckets for the categorical ids (default %(default)s)")
    p.add_argument("--test-fraction", type=float, default=0.1,
                   help="share of lines in the test split (default 0.1)")
    p.add_argument("--shards", type=int, default=8, help="train shards (default 8)")
    p.add_argument("--test-shards", type=int, default=2, help="test shards (default 2)")
    p.add_argument("--max-bad-fraction", type=float, default=0.001,
                   help="fail if more than this share of lines is rejected (default 0.001)")
    p.add_argument("--seed", type=int, default=42, help="train/test split seed (default 42)")
    p.add_argument("--block-mb", type=int, default=32,
                   help="MiB of text parsed at a time; memory is a few times this (default 32)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="processes parsing and transforming in parallel (default 0: the cores "
                        "available); the output does not depend on it")
    p.add_argument("--feature-spec", default="", metavar="FILE",
                   help="the input's layout: a YAML/JSON feature spec file, or the spec as JSON "
                        "(default: Criteo TSV; see docs/features.md)")
    p.add_argument("--fanout", type=int, default=None, metavar="N",
                   help="fan prep out to N worker processes per phase, as a cluster's prep pods "
                        "run it (Criteo TSV; docs/scale.md); the output is the same for every N")
    p.add_argument("--json", action="store_true", help="print the full stats as JSON")
    p.set_defaults(func=_prep)


def _gen_data(args: argparse.Namespace) -> int:
    from ctr_volcano.data.spec_input import read_feature_spec
    from ctr_volcano.data.synthetic import generate

    spec = read_feature_spec(args.feature_spec)
    if spec is not None and not spec.is_criteo:
        if args.bad_day:
            from ctr_volcano.errors import BadInput

            raise BadInput("--bad-day", args.bad_day[0], "bad days are planted in Criteo TSV days; drop "
                                                         "--feature-spec")
        return _gen_spec_data(args, spec)

    if args.days is not None:
        from ctr_volcano.data.daily import generate_days
        from ctr_volcano.errors import BadInput

        if args.interactions:
            raise BadInput("interactions", args.interactions,
                           "leave it at 0 with --days (the drifting daily model is linear)")

        bad = _bad_days(args)
        for day in generate_days(args.out, days=args.days, rows=args.rows, drift=args.drift,
                                 seed=args.seed, start_date=args.start_date, files=args.files,
                                 gzip_level=args.gzip, oracle_rows=args.oracle_rows,
                                 vocab_scale=args.vocab_scale):
            print(f"{day['date']}: {args.rows} rows; oracle auc={day['auc']} "
                  f"(day-0 model: {day['day0_model_auc']}) positive_rate={day['positive_rate']}")
        _plant_bad_days(args.out, bad, args.seed)
        return 0
    if args.bad_day:
        from ctr_volcano.errors import BadInput

        raise BadInput("--bad-day", args.bad_day[0], "plant bad days among daily partitions: add --days N")

    oracle = generate(args.out, rows=args.rows, seed=args.seed, files=args.files,
                      gzip_level=args.gzip, oracle_rows=args.oracle_rows,
                      vocab_scale=args.vocab_scale, interactions=args.interactions)
    print(f"wrote {args.rows} rows in {len(oracle['files'])} file(s) to {args.out}; "
          f"oracle auc={oracle['auc']} logloss={oracle['logloss']} "
          f"positive_rate={oracle['positive_rate']} (see {args.out}/oracle.json)")
    return 0


def _bad_days(args: argparse.Namespace) -> list:
    """The ``--bad-day`` flags, checked before anything is written: each a date among the days."""
    import datetime as dt

    from ctr_volcano.data.bad_days import parse_bad_day
    from ctr_volcano.errors import BadInput

    bad = [parse_bad_day(text) for text in args.bad_day]
    try:
        first = dt.date.fromisoformat(args.start_date)
    except ValueError:
        return bad      # generate_days names --start-date
    dates = {(first + dt.timedelta(days=k)).isoformat() for k in range(max(args.days, 0))}
    for text, b in zip(args.bad_day, bad):
        if b["date"] not in dates:
            raise BadInput("--bad-day", text, f"use a date among the {args.days} days from {args.start_date}")
    return bad


def _plant_bad_days(out: str, bad: list, seed: int) -> None:
    import os

    from ctr_volcano.data.bad_days import plant_in_place

    for b in bad:
        done = plant_in_place(os.path.join(out, f"day={b['date']}"), b["kind"], b["column"], seed=seed)
        print(f"{b['date']}: planted {b['kind']}{':' + b['column'] if b['column'] else ''} "
              f"({done['rows_out']} of {done['rows_in']} rows kept)")


def _gen_spec_data(args: argparse.Namespace, spec) -> int:
    from ctr_volcano.data.synthetic_spec import generate_spec
    from ctr_volcano.errors import BadInput

    if args.days is not None or args.gzip or args.vocab_scale != 1:
        raise BadInput("--feature-spec", args.feature_spec, "--days, --gzip and --vocab-scale "
                       "apply to the Criteo generator only; drop them")
    oracle = generate_spec(args.out, spec, rows=args.rows, seed=args.seed, files=args.files,
                           oracle_rows=min(args.oracle_rows, 400_000))
    print(f"wrote {args.rows} {spec.format} rows in {len(oracle['files'])} file(s) to {args.out}; "
          f"oracle auc={oracle['auc']} logloss={oracle['logloss']} "
          f"positive_rate={oracle['positive_rate']} (see {args.out}/oracle.json)")
    return 0


def _prep_fanout(args: argparse.Namespace, config, spec):
    from ctr_volcano.data.prep.fanout import prep_fanout
    from ctr_volcano.errors import BadInput

    if args.fanout < 1:
        raise BadInput("--fanout", args.fanout, "give the worker processes to fan out to (1 or more), "
                       "or leave the flag out for the one-process prep")
    return prep_fanout(args.input, args.out, config, workers=args.fanout, spec=spec)


def _prep(args: argparse.Namespace) -> int:
    from ctr_volcano.data.prep import PrepConfig, prep
    from ctr_volcano.data.spec_input import read_feature_spec
    from ctr_volcano.errors import BadInput

    if args.block_mb < 1:
        raise BadInput("--block-mb", args.block_mb, "use a positive number of MiB, e.g. 32")
    if not 0 <= args.workers <= 1024:
        raise BadInput("--workers", args.workers, "use 0 (the cores available) or a number of "
                       "processes from 1 to 1024")
    config = PrepConfig(hash_buckets=args.hash_buckets, test_fraction=args.test_fraction,
                        shards=args.shards, test_shards=args.test_shards,
                        max_bad_fraction=args.max_bad_fraction, seed=args.seed,
                        block_bytes=args.block_mb << 20, workers=args.workers)
    spec = read_feature_spec(args.feature_spec)
    if args.fanout is not None:
        stats = _prep_fanout(args, config, spec)
    else:
        stats = prep(args.input, args.out, config, spec=spec)
    if args.json:
        json.dump(stats, sys.stdout, indent=2)
        print()
        return 0
    print(f"rows_in={stats['rows_in']} rows_train={stats['rows_train']} "
          f"rows_test={stats['rows_test']} rows_rejected={stats['rows_rejected']} "
          f"positive_rate={stats['positive_rate']:.4f} in {stats['seconds']:.1f}s "
          f"({stats['input_mb_per_s']} MB/s, {stats['workers']} workers) -> {args.out}")
    for ex in stats["rejected_examples"][:3]:
        print(f"  rejected {ex['file']}:{ex['line']}: {ex['reason']}")
    return 0
