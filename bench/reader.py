"""The trainer's readers side by side on the same data: ``inmemory`` (the default) against ``stream``.

Both train the same prepped data with ``train_local`` (2 pservers x 2 trainers, the production
entrypoint, 1 epoch by default), each alone, in this run. Per reader:

* the trainers' peak RSS (their own processes; for ``stream`` also the peak of the pipe processes
  that convert one shard each, which run beside the trainer in its pod);
* the slot text each reader writes to the trainers' local disk before the first epoch (measured by
  converting the training shards as ``inmemory`` does; ``stream`` writes none);
* training-phase and end-to-end examples/s, wall time, and the test AUC of the exported model.

Ratios are stream / inmemory of the same run. Last line: ``RESULT rows=N trainer_rss_ratio=...
ex_s_ratio=... e2e_ex_s_ratio=... slot_copy_mb=... auc_inmemory=... auc_stream=...``.

Usage: ``python bench/reader.py [--rows 1000000] [--epochs 1] [--workdir /tmp/ctr_reader]``
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any, Dict

from gang_probe import dir_mb, make_raw, prep_child, run_probed_gang, throughput

BUCKETS = 1_000_001


def slot_copy_mb(data: str) -> float:
    """What the ``inmemory``/``queue`` readers write before the first epoch: every training shard as
    slot text (the trainers together)."""
    from ctr_model.data import convert_shards, resolve_split

    split = resolve_split(data, "train")
    out = tempfile.mkdtemp(prefix="slots-")
    try:
        convert_shards(list(split.files), out, split.hash_buckets, split.features)
        return dir_mb(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def measure(data: str, workdir: str, reader: str, epochs: int) -> Dict[str, Any]:
    from ctr_model.data import resolve_split
    from ctr_model.infer import evaluate_files, load_model

    run = run_probed_gang(data, os.path.join(workdir, reader), {"epochs": epochs, "reader": reader,
                                                                 "progress_secs": 30.0})
    trainers = [p for p in run["probes"] if p["role"] == "TRAINER"]
    pipes = [p for p in trainers if p.get("program") == "slot_stream.py"]
    roles = [p for p in trainers if p not in pipes]
    tp = throughput(run)
    result = evaluate_files(load_model(run["model_dir"]), list(resolve_split(data, "test").files))
    return {"trainer_rss_mb": max(p["peak_rss_mb"] for p in roles),
            "pipe_rss_mb": max((p["peak_rss_mb"] for p in pipes), default=0.0), "pipes": len(pipes),
            "pserver_rss_mb": max(p["peak_rss_mb"] for p in run["probes"] if p["role"] == "PSERVER"),
            "train_ex_s": tp["train_ex_per_s"], "e2e_ex_s": tp["e2e_ex_per_s"], "wall_s": run["wall_s"],
            "auc": result["auc"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="generated lines (default 1,000,000)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--vocab-scale", type=int, default=100, metavar="K")
    ap.add_argument("--workdir", default="/tmp/ctr_reader")
    args = ap.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    raw = make_raw(args.workdir, args.rows, vocab_scale=args.vocab_scale)
    data = os.path.join(args.workdir, f"data-{args.rows}")
    prep_child(raw, data, BUCKETS)
    copy_mb, parquet_mb = slot_copy_mb(data), dir_mb(os.path.join(data, "train"))
    seen = {reader: measure(data, args.workdir, reader, args.epochs) for reader in ("inmemory", "stream")}
    print(f"{args.rows:,} lines, {args.epochs} epoch(s), 2x2; training Parquet {parquet_mb:.1f} MB, "
          f"its slot text {copy_mb:.1f} MB")
    print("| reader | trainer peak RSS MB | pipe peak RSS MB (count) | pserver peak RSS MB | train ex/s | "
          "e2e ex/s | wall s | slot text on disk MB | test AUC |")
    print("|---|---|---|---|---|---|---|---|---|")
    for reader, m in seen.items():
        disk = 0.0 if reader == "stream" else copy_mb
        print(f"| {reader} | {m['trainer_rss_mb']:.0f} | {m['pipe_rss_mb']:.0f} ({m['pipes']}) | "
              f"{m['pserver_rss_mb']:.0f} | {m['train_ex_s']:.0f} | {m['e2e_ex_s']:.0f} | {m['wall_s']:.1f} | "
              f"{disk:.1f} | {m['auc']:.4f} |")
    a, b = seen["inmemory"], seen["stream"]
    print(f"RESULT rows={args.rows} trainer_rss_ratio={b['trainer_rss_mb'] / a['trainer_rss_mb']:.3f} "
          f"ex_s_ratio={b['train_ex_s'] / a['train_ex_s']:.3f} e2e_ex_s_ratio={b['e2e_ex_s'] / a['e2e_ex_s']:.3f} "
          f"slot_copy_mb={copy_mb:.1f} parquet_mb={parquet_mb:.1f} auc_inmemory={a['auc']:.4f} "
          f"auc_stream={b['auc']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
