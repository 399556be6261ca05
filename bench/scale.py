"""How the whole cost grows with rows and hash buckets: prep, training, pservers, model, evaluation.

For each point (generated lines x hash buckets; default 250k / 1M / 4M lines at 1,000,001
buckets, and 10,000,001 buckets at 1M lines) it measures, each step alone on the same data:

* prep: ``ctr_volcano.data.prep.prep`` in a fresh interpreter, MB/s of input and its peak RSS;
* training: ``train_local`` with 2 pservers x 2 trainers (the production entrypoint), wall time of
  the whole call, end-to-end examples/s and training-phase examples/s (as ``bench/train.py``),
  and the peak RSS of the pservers and trainers (``bench/probe/sitecustomize.py``);
* the exported model's size on disk;
* evaluation: ``ctr_model.infer`` loading the model and scoring the test split, rows/s.

Growth is checked between consecutive row counts: a cost (seconds, RSS, size) whose log-log slope
exceeds ``1 + --tolerance`` is flagged as growing faster than linearly, and so is a throughput
that falls by more than that share. Writes ``scale.md`` (the table and the flags) and
``scale.png`` (the plot) into ``--out`` (default ``docs/`` of this repository; with ``--quick`` the
workdir, so a smoke run never replaces the committed figures).

The lines come from ``gen-data --vocab-scale 100`` by default: vocabularies 100 times the
standard ones (up to 300,000 values per column), so the sparse table, pserver memory, checkpoints
and the model grow with the rows as on real Criteo; at ``--vocab-scale 1`` they stop growing at
~32k keys and the sparse side cannot show superlinear growth. The scale is in the header of
``scale.md`` / ``scale.json`` and in each point.

Last line: ``RESULT points=N superlinear=NAMES|none``.

Usage: ``python bench/scale.py [--quick] [--epochs 1] [--vocab-scale 100] [--workdir /tmp/ctr_scale]
[--out DIR]``
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import sys
import time
from typing import Any, Dict, List

from gang_probe import dir_mb, make_raw, prep_child, run_probed_gang, throughput

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BUCKETS = 1_000_001
FULL_POINTS = [(250_000, DEFAULT_BUCKETS), (1_000_000, DEFAULT_BUCKETS),
               (4_000_000, DEFAULT_BUCKETS), (1_000_000, 10_000_001)]
QUICK_POINTS = [(250_000, DEFAULT_BUCKETS)]

#: (key, label, kind): kind "cost" grows with the work, "rate" should stay flat.
COLUMNS = [
    ("prep_mb_s", "prep MB/s", "rate"),
    ("prep_rss_mb", "prep peak RSS MB", "cost"),
    ("train_wall_s", "train wall s", "cost"),
    ("e2e_ex_s", "train ex/s (end to end)", "rate"),
    ("train_ex_s", "train ex/s (training phase)", "rate"),
    ("pserver_rss_mb", "pserver peak RSS MB", "cost"),
    ("trainer_rss_mb", "trainer peak RSS MB", "cost"),
    ("model_mb", "model MB", "cost"),
    ("eval_rows_s", "eval rows/s", "rate"),
]


def measure(rows: int, buckets: int, epochs: int, workdir: str,
            vocab_scale: int = 1) -> Dict[str, Any]:
    """All figures of one point (see the module docstring)."""
    from ctr_model.data import resolve_split
    from ctr_model.infer import evaluate_files, load_model

    raw = make_raw(workdir, rows, vocab_scale=vocab_scale)
    point_dir = os.path.join(workdir, f"point-{rows}-{buckets}")
    shutil.rmtree(point_dir, ignore_errors=True)
    os.makedirs(point_dir)
    data = os.path.join(point_dir, "data")
    prep = prep_child(raw, data, buckets)
    run = run_probed_gang(data, point_dir, {"epochs": epochs, "progress_secs": 30.0})
    tp = throughput(run)
    test = resolve_split(data, "test")
    t = time.monotonic()
    scorer = load_model(run["model_dir"])
    result = evaluate_files(scorer, list(test.files))
    eval_s = time.monotonic() - t
    rss = {role: max((p["peak_rss_mb"] for p in run["probes"] if p["role"] == role), default=0.0)
           for role in ("PSERVER", "TRAINER")}
    point = {
        "rows": rows, "buckets": buckets, "epochs": epochs, "vocab_scale": vocab_scale,
        "raw_mb": os.path.getsize(raw) / 1e6,
        "prep_mb_s": prep["mb_per_s"], "prep_rss_mb": prep["peak_rss_mb"],
        "train_wall_s": run["wall_s"], "e2e_ex_s": tp["e2e_ex_per_s"],
        "train_ex_s": tp["train_ex_per_s"],
        "pserver_rss_mb": rss["PSERVER"], "trainer_rss_mb": rss["TRAINER"],
        "model_mb": dir_mb(run["model_dir"]), "sparse_keys": int(len(scorer.keys)),
        "eval_rows_s": result["rows"] / eval_s, "test_auc": result["auc"],
        "loadavg_1m": os.getloadavg()[0],
    }
    shutil.rmtree(point_dir, ignore_errors=True)
    return point


def superlinear(points: List[Dict[str, Any]], tolerance: float) -> List[str]:
    """One line per (column, step between row counts at the default buckets) that grows too fast."""
    series = sorted((p for p in points if p["buckets"] == DEFAULT_BUCKETS), key=lambda p: p["rows"])
    flags = []
    for a, b in zip(series, series[1:]):
        work = math.log(b["rows"] / a["rows"])
        for key, label, kind in COLUMNS:
            if a[key] <= 0 or b[key] <= 0:
                continue
            slope = math.log(b[key] / a[key]) / work
            if kind == "cost" and slope > 1 + tolerance:
                flags.append(f"{label}: x{b[key] / a[key]:.2f} for x{b['rows'] / a['rows']:.0f} "
                             f"rows ({a['rows']} -> {b['rows']}), log-log slope {slope:.2f}")
            if kind == "rate" and b[key] / a[key] < 1 - tolerance:
                flags.append(f"{label}: falls to {b[key] / a[key]:.2f}x from {a['rows']} to "
                             f"{b['rows']} rows (cost per row grows faster than linearly)")
    return flags


def table(points: List[Dict[str, Any]], flags: List[str], header: str) -> str:
    lines = [header, "",
             "| lines | buckets | " + " | ".join(label for _, label, _ in COLUMNS)
             + " | sparse keys | test AUC | load 1m |",
             "|" + "---|" * (len(COLUMNS) + 5)]
    for p in points:
        cells = [f"{p['rows']:,}", f"{p['buckets']:,}"]
        cells += [f"{p[key]:,.0f}" if p[key] >= 100 else f"{p[key]:.1f}" for key, _, _ in COLUMNS]
        cells += [f"{p['sparse_keys']:,}", f"{p['test_auc']:.4f}", f"{p['loadavg_1m']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Growing faster than linearly:" if flags else
              "Nothing grows faster than linearly (within the tolerance)."]
    lines += [f"- {f}" for f in flags]
    return "\n".join(lines) + "\n"


def plot(points: List[Dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    series = sorted((p for p in points if p["buckets"] == DEFAULT_BUCKETS), key=lambda p: p["rows"])
    other = [p for p in points if p["buckets"] != DEFAULT_BUCKETS]
    panels = [("seconds", [("train_wall_s", "train wall")]),
              ("rate", [("prep_mb_s", "prep MB/s"), ("e2e_ex_s", "train ex/s e2e"),
                        ("train_ex_s", "train ex/s phase"), ("eval_rows_s", "eval rows/s")]),
              ("peak RSS MB", [("prep_rss_mb", "prep"), ("pserver_rss_mb", "pserver"),
                               ("trainer_rss_mb", "trainer")]),
              ("MB", [("model_mb", "exported model")])]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (ylabel, keys) in zip(axes.ravel(), panels):
        for key, label in keys:
            line, = ax.plot([p["rows"] for p in series], [p[key] for p in series], "o-",
                            label=label)
            for p in other:
                ax.plot([p["rows"]], [p[key]], "s", mfc="none", color=line.get_color(),
                        label=f"{label}, {p['buckets']:,} buckets")
        if ylabel == "seconds" and series:  # a line through the first point: linear growth
            p0 = series[0]
            xs = [p["rows"] for p in series]
            ax.plot(xs, [p0["train_wall_s"] * x / p0["rows"] for x in xs], ":", color="grey",
                    label="linear from the first point")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("generated lines")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smallest point only (a smoke run)")
    ap.add_argument("--epochs", type=int, default=1, help="training epochs per point (default 1)")
    ap.add_argument("--workdir", default="/tmp/ctr_scale", help="scratch dir (raw data cached)")
    ap.add_argument("--out", help="where scale.md and scale.png go (default docs/, or the "
                                  "workdir with --quick)")
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="slack before a growth is flagged (default 0.15)")
    ap.add_argument("--vocab-scale", type=int, default=100, metavar="K",
                    help="gen-data --vocab-scale of the lines (default 100: a sparse table that "
                         "grows with the rows; 1: the standard vocabularies, ~32k keys at most)")
    args = ap.parse_args(argv)
    from ctr_volcano.data.synthetic import MAX_VOCAB_SCALE

    if not 1 <= args.vocab_scale <= MAX_VOCAB_SCALE:
        ap.error(f"--vocab-scale={args.vocab_scale}: use an integer in 1..{MAX_VOCAB_SCALE}, e.g. 100")
    out = args.out or (args.workdir if args.quick else os.path.join(REPO, "docs"))
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(out, exist_ok=True)

    points = []
    for rows, buckets in (QUICK_POINTS if args.quick else FULL_POINTS):
        print(f"point: {rows} lines, {buckets} buckets ...", flush=True)
        p = measure(rows, buckets, args.epochs, args.workdir, args.vocab_scale)
        points.append(p)
        print("  " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in p.items()), flush=True)
    flags = superlinear(points, args.tolerance)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    what = "QUICK smoke run (one point)" if args.quick else "bench/scale.py"
    header = (f"Measured by `{what}` on {stamp}: {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, {args.epochs} epoch(s), 2 pservers x 2 trainers; "
              f"lines from `gen-data --vocab-scale {args.vocab_scale}` "
              f"(vocabularies {args.vocab_scale}x the standard, up to "
              f"{3000 * args.vocab_scale:,} values per column); "
              f"1-minute load average at each point in the last column.")
    with open(os.path.join(out, "scale.md"), "w") as fh:
        fh.write(table(points, flags, header))
    with open(os.path.join(out, "scale.json"), "w") as fh:
        json.dump({"header": header, "vocab_scale": args.vocab_scale, "points": points,
                   "superlinear": flags}, fh, indent=1)
    plot(points, os.path.join(out, "scale.png"),
         f"{what}, {stamp}: {args.epochs} epoch(s), 2 pservers x 2 trainers, "
         f"gen-data --vocab-scale {args.vocab_scale}, {os.cpu_count()} cores, 1-min load "
         f"{min(p['loadavg_1m'] for p in points):.0f}-{max(p['loadavg_1m'] for p in points):.0f}")
    print(table(points, flags, header))
    print(f"wrote {os.path.join(out, 'scale.md')}, scale.json and scale.png")
    names = sorted({f.split(":")[0].replace(" ", "_") for f in flags})
    print(f"RESULT points={len(points)} superlinear={','.join(names) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
