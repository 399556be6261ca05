"""The training stack on two Paddle versions, in one run on the same data (issue 27).

Each ``--stack NAME=PYTHON`` is an interpreter whose environment has this checkout installed with one
Paddle stack (say ``p2`` = paddlepaddle 2.6.2 + numpy 1.26, ``p3`` = 3.0.0 + numpy 2); the first is
the baseline. The data is generated and prepped once, by this interpreter, so both stacks train on
the same bytes. Then, ``--repeat`` rounds, the stacks alternating which goes first in a round:

- **quality and end-to-end time**: ``ctr-volcano train`` (2 pservers x 2 trainers, the local backend,
  ``--epochs`` passes) under the stack, wall time from the command's start to its exit, then
  ``ctr-volcano evaluate`` of its model by this interpreter (the same scorer for both): test AUC
  beside the generating model's (the oracle's) AUC;
- **throughput**: ``bench/train.py --repeat 1`` under the stack, on its own planted data of
  ``--throughput-rows``: the gang's training-phase examples/s and its ratio to a bare Paddle PS loop
  on the same rows (``ratio_bare``), both measured by that stack.

Per stack the best round counts (the box is shared; the least disturbed round is the one that says
what the stack can do) and every round is printed for the spread. Last line::

    RESULT auc_<a>=... auc_<b>=... oracle_auc=... ex_per_s_ratio=b/a ratio_bare_<a>=... ratio_bare_<b>=... e2e_ratio=b/a

``ex_per_s_ratio`` is the second stack's best training-phase examples/s over the first's;
``e2e_ratio`` the second's best end-to-end train wall time over the first's (below 1: faster).

Usage: python bench/paddle_versions.py --stack p2=/path/venv-p2/bin/python --stack p3=.venv/bin/python
       [--rows 1000000] [--epochs 3] [--throughput-rows 300000] [--repeat 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = ["-m", "ctr_volcano.app.cli.main"]


def _run(python: str, args: List[str], timeout: float = 3600) -> str:
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run([python, *args], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{python} {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


def _prepare(work: str, rows: int) -> Tuple[str, float]:
    """Generated rows (seed 7, 4 files) prepped once; returns the prep directory and the oracle AUC."""
    raw, prep = os.path.join(work, "raw"), os.path.join(work, "prep")
    _run(sys.executable, [*CLI, "gen-data", "--rows", str(rows), "--out", raw, "--seed", "7", "--files", "4"])
    _run(sys.executable, [*CLI, "prep", "--input", raw, "--out", prep])
    with open(os.path.join(raw, "oracle.json"), encoding="utf-8") as fh:
        return prep, float(json.load(fh)["auc"])


def _quality(python: str, prep: str, epochs: int, wd: str) -> Dict[str, float]:
    model = os.path.join(wd, "model")
    started = time.monotonic()
    _run(python, [*CLI, "train", "--data", prep, "--model-out", model, "--epochs", str(epochs),
                  "--workdir", os.path.join(wd, "work")])
    seconds = time.monotonic() - started
    _run(sys.executable, [*CLI, "evaluate", "--model", model, "--data", prep, "--out", os.path.join(wd, "eval")])
    with open(os.path.join(wd, "eval", "metrics.json"), encoding="utf-8") as fh:
        metrics = json.load(fh)
    return {"auc": float(metrics["auc"]), "train_s": seconds}


def _throughput(python: str, rows: int) -> Dict[str, float]:
    out = _run(python, [os.path.join(REPO, "bench", "train.py"), "--rows", str(rows), "--repeat", "1"])
    result = [line for line in out.splitlines() if line.startswith("RESULT ")][-1]
    fields = dict(kv.split("=", 1) for kv in result.split()[1:])
    return {"ex_per_s": float(fields["ex_per_s"]), "ratio_bare": float(fields["ratio_bare"])}


def _version(python: str) -> str:
    return _run(python, ["-c", "import numpy, paddle; print(f'paddle {paddle.__version__}, numpy {numpy.__version__}')"]).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stack", action="append", required=True, metavar="NAME=PYTHON")
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated rows for the quality run")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--throughput-rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    stacks = dict(s.split("=", 1) for s in args.stack)
    if len(stacks) != 2:
        parser.error("give exactly two --stack NAME=PYTHON (the first is the baseline)")
    for name, python in stacks.items():
        print(f"stack {name}: {python}: {_version(python)}", flush=True)
    work = tempfile.mkdtemp(prefix="ctr-bench-versions-")
    prep, oracle = _prepare(work, args.rows)
    print(f"data: {args.rows} generated rows, prepped once; oracle AUC {oracle:.5f}", flush=True)
    rounds: Dict[str, List[Dict[str, float]]] = {name: [] for name in stacks}
    names = list(stacks)
    for rep in range(args.repeat):
        for name in names if rep % 2 == 0 else names[::-1]:
            r = _quality(stacks[name], prep, args.epochs, os.path.join(work, f"{name}-{rep}"))
            r.update(_throughput(stacks[name], args.throughput_rows))
            rounds[name].append(r)
            print(f"round {rep + 1} {name}: test AUC {r['auc']:.5f}, train {r['train_s']:.1f}s end to end, "
                  f"{r['ex_per_s']:.0f} ex/s in the training phase, ratio_bare {r['ratio_bare']:.3f}", flush=True)
    return _report(names, rounds, oracle, work)


def _report(names: List[str], rounds: Dict[str, List[Dict[str, float]]], oracle: float, work: str) -> int:
    import shutil

    a, b = names
    best = {n: {"auc": max(r["auc"] for r in rounds[n]), "train_s": min(r["train_s"] for r in rounds[n]),
                "ex_per_s": max(r["ex_per_s"] for r in rounds[n]),
                "ratio_bare": max(r["ratio_bare"] for r in rounds[n])} for n in names}
    for n in names:
        spread = {k: (min(r[k] for r in rounds[n]), max(r[k] for r in rounds[n])) for k in rounds[n][0]}
        print(f"{n}: " + ", ".join(f"{k} {lo:.4g}..{hi:.4g}" for k, (lo, hi) in spread.items()))
    shutil.rmtree(work, ignore_errors=True)
    print(f"RESULT auc_{a}={best[a]['auc']:.5f} auc_{b}={best[b]['auc']:.5f} oracle_auc={oracle:.5f} "
          f"ex_per_s_ratio={best[b]['ex_per_s'] / best[a]['ex_per_s']:.3f} "
          f"ratio_bare_{a}={best[a]['ratio_bare']:.3f} ratio_bare_{b}={best[b]['ratio_bare']:.3f} "
          f"e2e_ratio={best[b]['train_s'] / best[a]['train_s']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
