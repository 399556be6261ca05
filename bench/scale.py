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

Each point also records the reader (``--reader``; ``stream`` pipes the Parquet shards to the trainers
with no slot-text copy), the seconds of each stage (gen-data, prep, train, evaluate), the Parquet
size and the disk the training added at its peak (checkpoints, model, a reader's local copy: the
filesystem's used bytes sampled every second), and the command that made it. ``--rows`` measures
other row counts at the default buckets; ``--merge`` keeps the committed points of another reader
or row count beside the new ones, so ``scale.md`` shows both.

Last line: ``RESULT points=N superlinear=NAMES|none`` (with ``--rows``, also the largest point's
``trainer_rss_ratio`` to the point at 4M lines of the same reader, its ``disk_ratio`` and
``ex_s_ratio``).

Usage: ``python bench/scale.py [--quick] [--epochs 1] [--vocab-scale 100] [--workdir /tmp/ctr_scale]
[--out DIR] [--rows 4000000,45000000 --reader stream --merge]``
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
import threading
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
#: Columns shown when a point has them (points measured before they existed show "-").
EXTRA = [("reader", "reader"), ("shards", "train shards"), ("pipe_rss_mb", "pipe peak RSS MB"), ("gen_s", "gen-data s"), ("prep_s", "prep s"), ("eval_s", "eval s"),
         ("parquet_mb", "Parquet MB"), ("train_disk_mb", "train disk peak MB"), ("disk_ratio", "disk / Parquet")]


class DiskPeak:
    """The most bytes the filesystem of ``path`` had in use beyond its use at the start, sampled
    every second in a thread while the ``with`` block runs."""

    def __init__(self, path: str):
        self.path, self.peak = path, 0
        self._stop = threading.Event()

    def _used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def __enter__(self) -> "DiskPeak":
        self._start = self._used()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, self._used() - self._start)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def measure(rows: int, buckets: int, epochs: int, workdir: str,
            vocab_scale: int = 1, reader: str = "inmemory", shard_rows: int = 0) -> Dict[str, Any]:
    """All figures of one point (see the module docstring)."""
    from ctr_model.data import resolve_split
    from ctr_model.infer import evaluate_files, load_model

    t = time.monotonic()
    raw = make_raw(workdir, rows, vocab_scale=vocab_scale)
    gen_s = _gen_seconds(raw, time.monotonic() - t)
    point_dir = os.path.join(workdir, f"point-{rows}-{buckets}")
    shutil.rmtree(point_dir, ignore_errors=True)
    os.makedirs(point_dir)
    data = os.path.join(point_dir, "data")
    shards = shard_count(rows, shard_rows)
    prep = prep_child(raw, data, buckets, shards)
    parquet_mb = dir_mb(data)
    with DiskPeak(point_dir) as disk:
        run = run_probed_gang(data, point_dir, {"epochs": epochs, "progress_secs": 30.0, "reader": reader})
    tp = throughput(run)
    test = resolve_split(data, "test")
    t = time.monotonic()
    scorer = load_model(run["model_dir"])
    result = evaluate_files(scorer, list(test.files))
    eval_s = time.monotonic() - t
    # the stream reader's pipes inherit the trainer's role variables: the program tells them apart
    pipes = [p for p in run["probes"] if p.get("program") == "slot_stream.py"]
    rss = {role: max((p["peak_rss_mb"] for p in run["probes"] if p["role"] == role and p not in pipes),
                     default=0.0) for role in ("PSERVER", "TRAINER")}
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
        "reader": reader, "shards": shards, "pipe_rss_mb": max((p["peak_rss_mb"] for p in pipes), default=0.0),
        "gen_s": gen_s, "prep_s": prep["seconds"], "eval_s": eval_s,
        "parquet_mb": parquet_mb, "train_disk_mb": disk.peak / 1e6,
        "disk_ratio": (parquet_mb + disk.peak / 1e6) / parquet_mb,
        "command": "python " + " ".join(["bench/scale.py"] + sys.argv[1:]),
    }
    shutil.rmtree(point_dir, ignore_errors=True)
    return point


def shard_count(rows: int, shard_rows: int) -> int:
    """Train shards for ``rows`` lines: prep's default 8, or with ``shard_rows`` enough multiples of 8
    that a shard holds at most about that many lines (so a stream reader's pipe, which holds one
    shard, stays the same size as the rows grow)."""
    if shard_rows <= 0:
        return 8
    return 8 * max(1, math.ceil(rows / (8 * shard_rows)))


def _gen_seconds(raw: str, took: float) -> float:
    """gen-data's seconds for ``raw``: measured now, or recorded when the cached file was made."""
    record = os.path.join(os.path.dirname(raw), "gen_seconds.json")
    if took > 1.0 or not os.path.exists(record):
        with open(record, "w") as fh:
            json.dump({"seconds": took}, fh)
        return took
    with open(record) as fh:
        return float(json.load(fh)["seconds"])


def superlinear(points: List[Dict[str, Any]], tolerance: float) -> List[str]:
    """One line per (column, step between row counts at the default buckets, one reader) that grows
    too fast."""
    flags = []
    for reader in sorted({p.get("reader", "inmemory") for p in points}):
        flags += _superlinear([p for p in points if p.get("reader", "inmemory") == reader], tolerance,
                              "" if reader == "inmemory" else f" ({reader} reader)")
    return flags


def _superlinear(points: List[Dict[str, Any]], tolerance: float, tag: str) -> List[str]:
    series = sorted((p for p in points if p["buckets"] == DEFAULT_BUCKETS), key=lambda p: p["rows"])
    flags = []
    for a, b in zip(series, series[1:]):
        work = math.log(b["rows"] / a["rows"])
        for key, label, kind in COLUMNS:
            if a[key] <= 0 or b[key] <= 0:
                continue
            slope = math.log(b[key] / a[key]) / work
            if kind == "cost" and slope > 1 + tolerance:
                flags.append(f"{label}{tag}: x{b[key] / a[key]:.2f} for x{b['rows'] / a['rows']:.0f} "
                             f"rows ({a['rows']} -> {b['rows']}), log-log slope {slope:.2f}")
            if kind == "rate" and b[key] / a[key] < 1 - tolerance:
                flags.append(f"{label}{tag}: falls to {b[key] / a[key]:.2f}x from {a['rows']} to "
                             f"{b['rows']} rows (cost per row grows faster than linearly)")
    return flags


def table(points: List[Dict[str, Any]], flags: List[str], header: str) -> str:
    lines = [header, "",
             "| lines | buckets | " + " | ".join(label for _, label, _ in COLUMNS)
             + " | sparse keys | test AUC | load 1m | " + " | ".join(label for _, label in EXTRA) + " |",
             "|" + "---|" * (len(COLUMNS) + 5 + len(EXTRA))]
    for p in points:
        cells = [f"{p['rows']:,}", f"{p['buckets']:,}"]
        cells += [_cell(p[key]) for key, _, _ in COLUMNS]
        cells += [f"{p['sparse_keys']:,}", f"{p['test_auc']:.4f}", f"{p['loadavg_1m']:.0f}"]
        cells += [_cell(p.get(key, "inmemory" if key == "reader" else "-")) for key, _ in EXTRA]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Growing faster than linearly:" if flags else
              "Nothing grows faster than linearly (within the tolerance)."]
    lines += [f"- {f}" for f in flags]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def plot(points: List[Dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    readers = sorted({p.get("reader", "inmemory") for p in points})
    other = [p for p in points if p["buckets"] != DEFAULT_BUCKETS]
    panels = [("seconds", [("train_wall_s", "train wall")]),
              ("rate", [("prep_mb_s", "prep MB/s"), ("e2e_ex_s", "train ex/s e2e"),
                        ("train_ex_s", "train ex/s phase"), ("eval_rows_s", "eval rows/s")]),
              ("peak RSS MB", [("prep_rss_mb", "prep"), ("pserver_rss_mb", "pserver"),
                               ("trainer_rss_mb", "trainer")]),
              ("MB", [("model_mb", "exported model")])]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (ylabel, keys) in zip(axes.ravel(), panels):
        for reader, style in zip(readers, ("o-", "^--", "v:")):
            series = sorted((p for p in points if p["buckets"] == DEFAULT_BUCKETS
                             and p.get("reader", "inmemory") == reader), key=lambda p: p["rows"])
            tag = "" if len(readers) == 1 else f" ({reader})"
            for key, label in keys:
                line, = ax.plot([p["rows"] for p in series], [p[key] for p in series], style,
                                label=label + tag)
                for p in (o for o in other if o.get("reader", "inmemory") == reader):
                    ax.plot([p["rows"]], [p[key]], "s", mfc="none", color=line.get_color(),
                            label=f"{label}{tag}, {p['buckets']:,} buckets")
            if ylabel == "seconds" and series:  # a line through the first point: linear growth
                p0 = series[0]
                xs = [p["rows"] for p in series]
                ax.plot(xs, [p0["train_wall_s"] * x / p0["rows"] for x in xs], ":", color="grey",
                        label="linear from the first point" + tag)
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
    ap.add_argument("--rows", help="comma-separated line counts at the default buckets, instead of the "
                                   "standard points (e.g. 4000000,45000000)")
    ap.add_argument("--reader", choices=("inmemory", "stream"), default="inmemory",
                    help="the trainers' reader (default inmemory)")
    ap.add_argument("--shard-rows", type=int, default=0, metavar="N",
                    help="train shards of at most about N lines each, in multiples of 8 (default 0: "
                         "prep's 8 shards whatever the rows)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the points of scale.json in --out that this run does not measure again")
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

    wanted = ([(int(r), DEFAULT_BUCKETS) for r in args.rows.split(",")] if args.rows
              else QUICK_POINTS if args.quick else FULL_POINTS)
    points = _kept(os.path.join(out, "scale.json"), wanted, args.reader) if args.merge else []
    for rows, buckets in wanted:
        print(f"point: {rows} lines, {buckets} buckets, {args.reader} reader ...", flush=True)
        p = measure(rows, buckets, args.epochs, args.workdir, args.vocab_scale, args.reader, args.shard_rows)
        points.append(p)
        print("  " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in p.items()), flush=True)
    points.sort(key=lambda p: (p.get("reader", "inmemory") != "inmemory", p["buckets"], p["rows"]))
    flags = superlinear(points, args.tolerance)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    what = "QUICK smoke run (one point)" if args.quick else "bench/scale.py"
    header = (f"Measured by `{what}` on {stamp}: {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, {args.epochs} epoch(s), 2 pservers x 2 trainers; "
              f"lines from `gen-data --vocab-scale {args.vocab_scale}` "
              f"(vocabularies {args.vocab_scale}x the standard, up to "
              f"{3000 * args.vocab_scale:,} values per column); "
              f"1-minute load average at each point in the last column.")
    kept_header = _kept_header(os.path.join(out, "scale.json")) if args.merge and any(
        "command" not in p for p in points) else ""
    if kept_header:
        header += f" Points with no stage seconds were kept from an earlier run: {kept_header}"
    with open(os.path.join(out, "scale.md"), "w") as fh:
        fh.write(table(points, flags, header))
    with open(os.path.join(out, "scale.json"), "w") as fh:
        json.dump({"header": header, "vocab_scale": args.vocab_scale, "points": points,
                   "superlinear": flags, **({"kept_header": kept_header} if kept_header else {})}, fh, indent=1)
    plot(points, os.path.join(out, "scale.png"),
         f"{what}, {stamp}: {args.epochs} epoch(s), 2 pservers x 2 trainers, "
         f"gen-data --vocab-scale {args.vocab_scale}, {os.cpu_count()} cores, 1-min load "
         f"{min(p['loadavg_1m'] for p in points):.0f}-{max(p['loadavg_1m'] for p in points):.0f}")
    print(table(points, flags, header))
    print(f"wrote {os.path.join(out, 'scale.md')}, scale.json and scale.png")
    names = sorted({f.split(":")[0].replace(" ", "_") for f in flags})
    print(f"RESULT points={len(points)} superlinear={','.join(names) or 'none'}{_largest(points, args.reader)}")
    return 0


def _kept(path: str, wanted: List[Any], reader: str) -> List[Dict[str, Any]]:
    """The committed points this run does not measure again (another reader or row count)."""
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [p for p in json.load(fh)["points"]
                if (p["rows"], p["buckets"], p.get("reader", "inmemory")) not in
                {(r, b, reader) for r, b in wanted}]


def _kept_header(path: str) -> str:
    """The earliest header recorded in ``path`` (the run the command-less points come from)."""
    with open(path) as fh:
        doc = json.load(fh)
    return doc.get("kept_header") or doc["header"]


def _largest(points: List[Dict[str, Any]], reader: str) -> str:
    """The largest point of ``reader`` against its 4M-line point: trainer RSS, ex/s, disk."""
    mine = sorted((p for p in points if p.get("reader", "inmemory") == reader and p["buckets"] == DEFAULT_BUCKETS),
                  key=lambda p: p["rows"])
    base = [p for p in mine if p["rows"] == 4_000_000]
    if not base or mine[-1]["rows"] <= 4_000_000:
        return ""
    big, base4 = mine[-1], base[0]
    return (f" rows={big['rows']} trainer_rss_ratio={big['trainer_rss_mb'] / base4['trainer_rss_mb']:.3f}"
            f" ex_s_ratio={big['train_ex_s'] / base4['train_ex_s']:.3f}"
            f" disk_ratio={big.get('disk_ratio', float('nan')):.3f}"
            f" pserver_rss_mb={big['pserver_rss_mb']:.0f}")


if __name__ == "__main__":
    sys.exit(main())
