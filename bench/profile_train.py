"""Where the end-to-end training time goes: one probed, profiled 2x2 local gang on a small run.

Generates ``--rows`` Criteo lines with ``gen-data``, preps them (8 train shards), trains with the
product's own ``train_local`` (2 pservers x 2 trainers, the production entrypoint) while
``bench/probe/sitecustomize.py`` records each role process's spawn/exit time and peak RSS and
cProfiles its main thread. It then splits trainer 0's wall time into phases:

* ``spawn``: ``train_local`` called -> trainer 0 process created (validation, gang set-up);
* ``import paddle``: the entrypoint's first Paddle import;
* ``program build``: ``_build`` (fleet init, network, ``minimize``), of which ``wait for
  pservers``: Paddle's ``wait_server_ready``, which polls the pservers every 3 s;
* ``init_worker``, ``conversion wait`` + ``load into memory`` (Parquet -> slot text runs in a
  background thread from start-up on; what is left when training wants it),
* ``training``: the epochs' ``train_from_dataset``; ``checkpoints``: every epoch's
  ``save_persistables``; ``export``: trainer 0's export from the final checkpoint (dense pull,
  sparse-table parse, warm-start copy); ``calibration``: scoring training rows for the output-bias
  shift; ``test evaluation``: ``_write_metrics``;
* ``other`` (barriers, stats resets, exit) and ``teardown`` (trainer 0 exit -> ``train_local``
  returned: the gang's shutdown and the model copy).

Afterwards, in this process and unprofiled, it re-times the pieces that can run alone: the
Parquet -> slot conversion of all train shards (one thread), the sparse-table parse of the
exported model, and the evaluation of the test split. cProfile slows Python-heavy code (not the
C++ of Paddle and Arrow, where most of the time is); the same run without it is ``bench/train.py``.

Last line: ``RESULT e2e_ex_per_s=... train_ex_per_s=... e2e_ratio=... startup_s=... ...``.

Usage: ``python bench/profile_train.py [--rows 150000] [--epochs 2] [--workdir /tmp/ctr_profile]
[--json OUT.json]``
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pstats
import sys
import time
from typing import Any, Dict, Tuple

from gang_probe import dir_mb, make_raw, prep_child, run_probed_gang, throughput, trainer_probe

HASH_BUCKETS = 1_000_001


def _cum(stats: pstats.Stats, funcname: str, path_part: str = "") -> Tuple[float, int]:
    """(cumulative seconds, calls) of the profiled function(s) named ``funcname`` (a built-in
    such as ``<built-in method paddle.base.libpaddle.save_all_model>`` matches its last part)."""
    total, calls = 0.0, 0
    for (filename, _, name), (_, nc, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        if (name == funcname or name.endswith(f".{funcname}>")) and path_part in filename + name:
            total += ct
            calls += nc
    return total, calls


def breakdown(run: Dict[str, Any]) -> Dict[str, Any]:
    """Phases of trainer 0 (seconds) from its probe, its profile and ``metrics.json``."""
    probe = trainer_probe(run, 0)
    if probe is None:
        raise SystemExit(f"trainer 0 wrote no probe in {run['probe_dir']}")
    stats = pstats.Stats(os.path.join(run["probe_dir"], f"{probe['pid']}.prof"))
    hist = run["metrics"]["per_trainer"]["0"]
    first = min(hist, key=lambda r: r["epoch"])
    phases = {
        "spawn": probe["spawn_time"] - run["t_call"],
        "import paddle": _cum(stats, "fix_proto_shadowing", "ctr_model")[0],
        "program build": _cum(stats, "_build", "ctr_model")[0],
        "init_worker": _cum(stats, "init_worker", "fleet.py")[0],
        "conversion wait": first.get("convert_wait_seconds", 0.0),
        "load into memory": first.get("load_seconds", 0.0),
        "training": sum(r["seconds"] for r in hist),
        "checkpoints": _cum(stats, "_save_checkpoint", "ctr_model")[0],
        "export": _cum(stats, "_export", "ctr_model")[0] - _cum(stats, "calibrate_export", "ctr_model")[0],
        "calibration": _cum(stats, "calibrate_export", "ctr_model")[0],
        "test evaluation": _cum(stats, "_write_metrics", "ctr_model")[0],
    }
    trainer_wall = probe["exit_time"] - probe["spawn_time"]
    phases["other"] = trainer_wall - sum(v for k, v in phases.items() if k != "spawn")
    phases["teardown"] = run["t_return"] - probe["exit_time"]
    detail = {
        "wait_server_ready (inside program build)": _cum(stats, "wait_server_ready")[0],
        "our 50 ms polls for the rendezvous and the pservers": _cum(stats, "wait_for_endpoints",
                                                                    "ctr_model")[0],
        "minimize (inside program build)": _cum(stats, "minimize", "fleet.py")[0],
        "sparse-table parse (inside export)": _cum(stats, "write_sparse_npz", "ctr_model")[0],
        "checkpoint calls": _cum(stats, "_save_checkpoint", "ctr_model")[1],
        "pservers write the checkpoint (inside checkpoints)": _cum(stats, "save_all_model")[0],
        "pservers write the sparse table (inside export; 0 since export reads the checkpoint)":
            _cum(stats, "save_one_model")[0],
        "gloo barriers (all: epoch-end skew, checkpoints, export)":
            _cum(stats, "barrier", "libpaddle")[0],
        "time.sleep, all (Paddle's wait_server_ready sleeps 3 s at a time)": _cum(stats, "sleep", "time.")[0],
        "conversion in background (s)": first.get("convert_seconds", 0.0),
        "trainer 0 wall (s)": trainer_wall,
    }
    return {"phases": phases, "detail": detail}




def retime_pieces(data: str, model_dir: str, embedding_dim: int, workdir: str) -> Dict[str, float]:
    """The separable pieces, alone in this process (no profiler, no gang running)."""
    from ctr_model.data import convert_shards, resolve_split
    from ctr_model.infer import evaluate_files, load_model, read_sparse_table
    from ctr_model.warm_start import WARM_START_DIR

    split = resolve_split(data, "train")
    t = time.monotonic()
    converted = convert_shards(split.files, os.path.join(workdir, "slots"), HASH_BUCKETS)
    convert_s = time.monotonic() - t
    rows = sum(r for _, r in converted)
    t = time.monotonic()
    table_dir = os.path.join(model_dir, WARM_START_DIR)     # the final checkpoint the export read
    keys, _ = read_sparse_table(table_dir, embedding_dim)
    parse_s = time.monotonic() - t
    test = resolve_split(data, "test")
    t = time.monotonic()
    scorer = load_model(model_dir)
    load_s = time.monotonic() - t
    t = time.monotonic()
    result = evaluate_files(scorer, list(test.files))
    eval_s = time.monotonic() - t
    text_mb = sum(os.path.getsize(p) for p in glob.glob(os.path.join(table_dir, "000", "part-*")))
    return {"convert_rows_per_s": rows / convert_s, "convert_s": convert_s,
            "slot_text_mb": dir_mb(os.path.join(workdir, "slots")),
            "sparse_parse_s": parse_s, "sparse_keys": int(len(keys)),
            "sparse_text_mb": text_mb / 1e6, "model_load_s": load_s,
            "eval_rows_per_s": result["rows"] / eval_s, "eval_s": eval_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=150_000, help="generated lines (default 150000)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    ap.add_argument("--workdir", default="/tmp/ctr_profile", help="scratch dir (raw data cached)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    os.makedirs(args.workdir, exist_ok=True)
    raw = make_raw(args.workdir, args.rows)
    data = os.path.join(args.workdir, "data")
    prep_info = prep_child(raw, data, HASH_BUCKETS)
    print(f"prep: {prep_info['rows_train']} train rows, {prep_info['mb_per_s']:.1f} MB/s",
          flush=True)
    config = {"epochs": args.epochs, "progress_secs": 10.0}
    run = run_probed_gang(data, args.workdir, config, profile=True)
    tp = throughput(run)
    parts = breakdown(run)
    embedding_dim = run["metrics"]["config"]["embedding_dim"]
    pieces = retime_pieces(data, run["model_dir"], embedding_dim, args.workdir)
    sizes = {"checkpoint_mb": dir_mb(os.path.join(run["output_dir"], "checkpoints")),
             "model_mb": dir_mb(run["model_dir"])}

    wall = run["wall_s"]
    print(f"\ntrain_local wall {wall:.1f} s for {tp['examples']} examples "
          f"({args.epochs} epochs): {tp['e2e_ex_per_s']:.0f} ex/s end to end, "
          f"{tp['train_ex_per_s']:.0f} ex/s in the training phase")
    print(f"{'phase (trainer 0)':42s} {'s':>7s} {'% wall':>7s}")
    for name, s in parts["phases"].items():
        print(f"{name:42s} {s:7.2f} {100 * s / wall:6.1f}%")
    for name, v in parts["detail"].items():
        print(f"  {name:40s} {v:7.2f}")
    for name, v in pieces.items():
        print(f"  alone: {name:33s} {v:9.2f}")
    for name, v in sizes.items():
        print(f"  size: {name:34s} {v:9.2f}")
    for p in run["probes"]:
        who = f"{p['role'].lower()}-{p.get('trainer_id') or p.get('port')}"
        print(f"  peak RSS {who:31s} {p['peak_rss_mb']:9.0f} MB")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": args.rows, "epochs": args.epochs, "wall_s": wall, **tp,
                       "prep": prep_info, **parts, "alone": pieces, "sizes": sizes,
                       "probes": run["probes"], "loadavg": os.getloadavg()}, fh, indent=1)
    ph = parts["phases"]
    startup = ph["spawn"] + ph["import paddle"] + ph["program build"] + ph["init_worker"]
    print(f"RESULT e2e_ex_per_s={tp['e2e_ex_per_s']:.0f} train_ex_per_s={tp['train_ex_per_s']:.0f} "
          f"e2e_ratio={tp['e2e_ex_per_s'] / tp['train_ex_per_s']:.3f} startup_s={startup:.1f} "
          f"checkpoint_s={ph['checkpoints']:.1f} export_s={ph['export']:.1f} "
          f"calibration_s={ph['calibration']:.1f} eval_s={ph['test evaluation']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
