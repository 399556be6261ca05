"""Benchmark: warm start from yesterday's model vs cold start on a new day of drifting data.

Generates two consecutive days with ``ctr_volcano.data.daily`` (planted model drifting by
``--drift``), preps both with the pipeline's defaults, trains day 1 from scratch for ``--epochs`` E,
then on day 2:

* cold: from scratch for E epochs -> ``auc_cold`` (exact test AUC on day 2's test split);
* warm: warm-started from the day-1 model (its pservers load its checkpoint) for k = 1..E epochs,
  one run per k -> ``auc_warm`` (k = E) and K, the smallest k whose AUC reaches ``auc_cold``.

All runs use the local backend (real pserver/trainer processes, the production entrypoint) with the
same config and gang. The last line is
``RESULT auc_warm=... auc_cold=... epochs=E epochs_to_match=K`` (``K=none`` if warm start never
reaches cold start's AUC within E epochs).

Usage: ``python bench/retrain.py [--rows 200000] [--epochs 3] [--drift 0.3] [--workdir /tmp/ctr_bench_retrain]``
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time

_log = logging.getLogger("bench.retrain")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per day (default 200000)")
    parser.add_argument("--epochs", type=int, default=3, help="E: epochs of every run (default 3)")
    parser.add_argument("--drift", type=float, default=0.3, help="planted drift per day (default 0.3)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    parser.add_argument("--pservers", type=int, default=2)
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--workdir", default="/tmp/ctr_bench_retrain")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

    import datetime as dt

    from ctr_volcano.data.daily import day_dir, generate_days
    from ctr_volcano.data.prep import PrepConfig, prep
    from ctr_volcano.training.local.backend import train_local

    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    days = generate_days(os.path.join(work, "raw"), days=2, rows=args.rows, drift=args.drift,
                         seed=args.seed, oracle_rows=100_000)
    shards = max(2, args.trainers)
    prepped = []
    for day in days:
        out = os.path.join(work, "prep", day["date"])
        prep([day_dir(os.path.join(work, "raw"), dt.date.fromisoformat(day["date"]))], out,
             PrepConfig(shards=shards))
        prepped.append(out)
    config = {"batch_size": args.batch_size, "learning_rate": args.learning_rate,
              "progress_secs": 30.0}

    def train(data: str, name: str, epochs: int, init=None) -> float:
        t = time.monotonic()
        result = train_local(data, os.path.join(work, "models", name), {**config, "epochs": epochs},
                             pservers=args.pservers, trainers=args.trainers, max_retry=0,
                             job_id=f"bench-{name}", log=lambda m: None, init_model=init,
                             workdir=os.path.join(work, "gangs", name))
        auc = float(result.metrics["test"]["auc"])
        _log.info("%s: %d epoch(s)%s: test AUC %.4f (%.0fs)", name, epochs,
                  " warm" if init else " cold", auc, time.monotonic() - t)
        return auc

    E = args.epochs
    train(prepped[0], "day1", E)
    day1 = os.path.join(work, "models", "day1")
    auc_cold = train(prepped[1], "day2-cold", E)
    warm = {k: train(prepped[1], f"day2-warm-{k}", k, init=day1) for k in range(1, E + 1)}
    k_match = next((k for k in sorted(warm) if warm[k] >= auc_cold), None)
    _log.info("oracle AUC day 2: %.4f; day-1 planted model on day 2: %.4f", days[1]["auc"],
              days[1]["day0_model_auc"])
    print(f"RESULT auc_warm={warm[E]:.4f} auc_cold={auc_cold:.4f} epochs={E} "
          f"epochs_to_match={k_match if k_match is not None else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
