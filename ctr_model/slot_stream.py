"""The ``stream`` reader's pipe command: one Parquet shard on stdin, its MultiSlot text on stdout.

Why: the ``inmemory`` and ``queue`` readers convert each trainer's shards to slot text on local
disk before the first epoch (a second copy of the data, larger than the Parquet), and ``inmemory``
then holds every row in memory (about 1 KB per row). With ``stream`` Paddle's ``QueueDataset``
pipes each shard through this command as it reads it (``cat shard | python -m
ctr_model.slot_stream ...``): nothing is written to disk, and a trainer holds at most one shard per
reader thread, whatever the number of rows.

Shuffling is by shard order (the trainer permutes its shards every epoch) plus the rows of each
shard, permuted here with a seed of the epoch and the shard: a buffer bounded by the shard size.

A bad shard must not become a silently short epoch: Paddle reads whatever a failed pipe wrote.
So the command writes its error (field, value and fix, as JSON) into ``--errors DIR`` (one file per
process) before it exits with its family's code (:func:`ctr_model.errors.exit_code_of`), and the
trainer, after each epoch, fails on any such error and on an example count that differs from the
shards' row count (:func:`check_epoch`).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import sys
import zlib
from typing import List, Optional, Sequence

from ctr_model.errors import BadInput, exit_code_of

__all__ = ["pipe_command", "epoch_order", "check_epoch", "main"]


def pipe_command(hash_buckets: int, errors_dir: str, *, spec_file: Optional[str], seed: int,
                 epoch: int, shuffle: bool) -> str:
    """The shell command Paddle runs for each shard of epoch ``epoch``."""
    # the trainer may have changed directory: the pipe imports this package from where it is
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    argv = ["env", f"PYTHONPATH={path}", sys.executable, "-m", "ctr_model.slot_stream",
            "--hash-buckets", str(hash_buckets),
            "--errors", errors_dir, "--seed", str(seed), "--epoch", str(epoch)]
    if spec_file:
        argv += ["--spec", spec_file]
    if shuffle:
        argv.append("--shuffle")
    return " ".join(shlex.quote(a) for a in argv)


def epoch_order(files: Sequence[str], seed: int, epoch: int, shuffle: bool) -> List[str]:
    """This trainer's shards in the order epoch ``epoch`` reads them."""
    ordered = sorted(files)
    if not shuffle:
        return ordered
    import numpy as np

    rng = np.random.default_rng([seed, epoch])
    return [ordered[i] for i in rng.permutation(len(ordered))]


def check_epoch(errors_dir: str, examples: int, rows: int, epoch: int) -> None:
    """After epoch ``epoch``: raise :class:`ctr_model.data.DataError` with the pipe's own field, value
    and fix if a shard failed, or naming both counts if the epoch saw other than ``rows`` examples."""
    from ctr_model.data import DataError

    for path in sorted(glob.glob(os.path.join(errors_dir, "*.err"))):
        with open(path, encoding="utf-8") as fh:
            error = json.load(fh)
        raise DataError(error["field"], error["value"], error["fix"])
    if examples != rows:
        raise DataError("data", f"epoch {epoch}", f"read {examples} examples of this trainer's {rows} rows: a "
                                                  f"shard was cut short while streamed; re-run `ctr-volcano "
                                                  f"prep` if a shard is damaged")


def _stream(args: argparse.Namespace) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctr_model.data import slot_columns, slot_tables, write_slots
    from ctr_model.feature_spec import load_spec

    spec = load_spec(args.spec) if args.spec else None
    data = sys.stdin.buffer.read()
    where = f"a streamed shard ({len(data)} bytes)"
    shard_key = zlib.crc32(data[-4096:])
    table = pq.read_table(pa.BufferReader(data))
    del data    # the shard's bytes, no longer needed once decoded (the pipe holds one shard)
    table = table.select(slot_columns(where, table.schema.names, spec))
    if args.shuffle and table.num_rows > 1:
        rng = np.random.default_rng([args.seed, args.epoch, shard_key])
        table = table.take(pa.array(rng.permutation(table.num_rows)))
    out = sys.stdout.buffer
    write_slots(out, slot_tables(table.to_batches(max_chunksize=65_536), where, args.hash_buckets, spec))
    out.flush()
    return table.num_rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctr_model.slot_stream",
                                     description="Parquet shard on stdin -> MultiSlot text on stdout.")
    parser.add_argument("--hash-buckets", type=int, required=True)
    parser.add_argument("--errors", required=True, help="directory for the one-line error of a bad shard")
    parser.add_argument("--spec", help="the data's feature spec (JSON file); none: the Criteo layout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epoch", type=int, default=1)
    parser.add_argument("--shuffle", action="store_true")
    args = parser.parse_args(argv)
    try:
        _stream(args)
    except Exception as exc:    # any failure must reach the trainer, not end the epoch early
        _report(args.errors, exc)
        return exit_code_of(exc)
    return 0


def _report(errors_dir: str, exc: Exception) -> None:
    """Leave ``exc`` for :func:`check_epoch` as the field, the value and the fix (an error of no
    family is the streamed shard's, with its type and message as the fix)."""
    if isinstance(exc, BadInput):
        error = {"field": exc.field, "value": json.loads(json.dumps(exc.value, default=str)), "fix": exc.fix}
    else:
        error = {"field": "data", "value": "a streamed shard",
                 "fix": f"{type(exc).__name__}: {exc}".replace("\n", " ")}
    os.makedirs(errors_dir, exist_ok=True)
    with open(os.path.join(errors_dir, f"{os.getpid()}.err"), "w", encoding="utf-8") as fh:
        json.dump(error, fh)


if __name__ == "__main__":
    sys.exit(main())
