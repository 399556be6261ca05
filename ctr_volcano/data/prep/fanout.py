"""Prep fanned out over N workers -- processes on this machine, the pods of a Volcano Job on a
cluster (:mod:`.cluster`) -- writing the same shards, byte for byte, whatever N.

Why three phases and not N independent preps: a block's train/test split
(:class:`~.split.StratifiedSplit`) and the shard slices its rows go to depend on the label counts
and the rows of every block before it, so a worker that saw only its share of the input could not
place a row. So:

1. **parse** (N workers): the input is cut into units that do not depend on N -- each block of a
   plain file (the byte ranges at line ends the one-process prep cuts) and each gzip file whole (it
   can only be read from its start) -- and worker ``i`` takes the units ``u % N == i``. Each block's
   good rows (parsed, rejected and transformed by the code :func:`~ctr_volcano.data.prep.prep` runs)
   go to an Arrow file, its lines, rejects and missing counts to a JSON file, in a work directory
   every worker sees.
2. **merge** (one process): the blocks' counts in input order: line numbers, rejects by reason,
   the rejected share checked (so a bad input fails before any shard is written), and, from each
   block's label column alone, the label and row counts before it.
3. **write** (N workers): worker ``i`` writes shard ``j`` of the train-then-test shard list when
   ``j % N == i``, taking from every block, in input order, the rows the merge placed in it.

One process then writes both ``schema.json`` files and ``stats.json``, and removes the work
directory. The shards hold the rows, values and order of :func:`~ctr_volcano.data.prep.prep`'s.
Criteo TSV only: a feature spec's prep runs in one process.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ctr_model.atomic import write_json
from ctr_model.feature_spec import FeatureSpec, criteo_spec
from ctr_model.features import LABEL, RAW_COLUMNS
from ctr_volcano.data.prep.config import STATS_FILE, PrepConfig
from ctr_volcano.data.prep.inputs import (
    _blocks,
    _plain_blocks,
    _plain_pieces,
    _text_pieces,
    long_line_error,
    piece_bytes,
    resolve_inputs,
)
from ctr_volcano.data.prep.lanes import _work
from ctr_volcano.data.prep.split import StratifiedSplit, clear_split
from ctr_volcano.data.prep.stats import Accumulator, write_outputs
from ctr_volcano.data.profile.profile import DataProfile
from ctr_volcano.errors import BadInput

__all__ = ["prep_fanout", "prep_fanout_splits", "plan_units", "parse_share", "merge", "write_share", "Runner",
           "LocalRunner", "FanoutFailed", "WORK_DIR"]

logger = logging.getLogger(__name__)

#: The work directory's name inside the output directory (removed at the end).
WORK_DIR = ".fanout"
_PLAN, _MERGED = "plan.json", "merged.json"


class FanoutFailed(RuntimeError):
    """A worker failed for a reason that is not the input's (its last log line is in the message)."""


class Runner(Protocol):
    """Runs one phase on ``count`` workers, worker ``i`` as ``python -m ctr_volcano.data.prep.fanout
    PHASE --work WORK --index i --count N``; returns when all have exited 0.

    ``shared_dirs``: the workers run as another user (a pod's UID), so the directories they write in
    are made world-writable (not every volume type honours ``fsGroup``).

    Raises:
        BadInput: a worker refused the input (re-raised as the worker raised it).
        FanoutFailed: a worker failed otherwise.
    """

    shared_dirs: bool

    def run(self, phase: str, work: str, count: int) -> None: ...


def plan_units(files: Sequence[str], block_bytes: int) -> List[Dict[str, Any]]:
    """The units of work, in input order: ``{"file": i, "start": s, "end": e}`` for each block of a
    plain file (``end`` -1: a line longer than a block starts at ``start``), ``{"file": i, "gzip":
    true}`` for a gzip file. Only the bytes around each cut are read."""
    units: List[Dict[str, Any]] = []
    for i, path in enumerate(files):
        try:
            with open(path, "rb") as fh:
                if fh.read(2) == b"\x1f\x8b":
                    units.append({"file": i, "gzip": True})
                    continue
                for start, end in _plain_blocks(fh.fileno(), block_bytes):
                    units.append({"file": i, "start": start, "end": end})
                    if end < 0:
                        break
        except OSError as exc:
            raise BadInput("input", path, f"cannot open the file ({exc}); check the path and its "
                                          f"permissions") from None
    return units


_Piece = Tuple[str, int, int, Optional[bytes]]


def _unit_blocks(path: str, unit: Dict[str, Any], block_bytes: int) -> Iterator[List[_Piece]]:
    """Each block of a unit as the pieces :func:`~.lanes._work` takes."""
    size = piece_bytes(block_bytes)
    if unit.get("gzip"):
        for _, text, _ in _blocks(path, block_bytes):
            yield [(path, 0, 0, piece) for piece in _text_pieces(text, size)]
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        ranges = _plain_pieces(fd, unit["start"], unit["end"], size)
    finally:
        os.close(fd)
    yield [(path, lo, hi, None) for lo, hi in ranges]


def _block_name(unit: int, block: int) -> str:
    return f"u{unit:06d}-b{block:05d}"


def parse_share(work: str, index: int, count: int) -> None:
    """Phase 1 for worker ``index`` of ``count``: parse its units into the work directory."""
    import pyarrow as pa

    plan = _read(work, _PLAN)
    config = PrepConfig(**plan["config"])
    for u, unit in enumerate(plan["units"]):
        if u % count != index or unit.get("end", 0) < 0:
            continue
        path = plan["files"][unit["file"]]
        blocks = 0
        for pieces in _unit_blocks(path, unit, config.block_bytes):
            lines, rejects, tables, profiles = 0, [], [], []  # type: Tuple[int, List[list], List[Any], List[Any]]
            missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
            for piece_path, lo, hi, text in pieces:
                n, piece_rejects, table, piece_missing, piece = _work(piece_path, lo, hi, text, config.hash_buckets,
                                                                      config.profile)
                rejects.extend([lines + i, category, detail, line[:4096].decode("latin-1")]
                               for i, category, detail, line in piece_rejects)
                if table is not None and piece_missing is not None:
                    tables.append(table)
                    missing += piece_missing
                if piece is not None:
                    profiles.append(piece)
                lines += n
            name = _block_name(u, blocks)
            rows = 0
            if tables:
                table = pa.concat_tables(tables)
                rows = table.num_rows
                with pa.OSFile(os.path.join(work, name + ".arrow"), "wb") as sink, \
                        pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
            # the block's profile, merged from its pieces as the one-process prep merges them
            profile = DataProfile.merged(profiles).to_state() if profiles else None
            write_json(os.path.join(work, name + ".json"),
                       {"lines": lines, "rows": rows, "rejects": rejects, "missing": missing.tolist(),
                        "profile": profile}, indent=0)
            blocks += 1
        write_json(os.path.join(work, f"u{u:06d}.done"), {"blocks": blocks})
    logger.info("fan-out parse: worker %d of %d done", index, count)


def _labels(work: str, name: str) -> np.ndarray:
    import pyarrow as pa

    with pa.memory_map(os.path.join(work, name + ".arrow")) as source:
        return pa.ipc.open_file(source).read_all().column(LABEL).to_numpy()


def merge(work: str) -> Accumulator:
    """Phase 2: every block's counts in input order into one :class:`~.stats.Accumulator`, each
    block's place (labels and split rows before it) into ``merged.json``.

    Raises:
        BadInput: a line longer than a block, too many bad lines, or no line at all.
    """
    plan = _read(work, _PLAN)
    config = PrepConfig(**plan["config"])
    acc = Accumulator(config)
    splitter = StratifiedSplit(config.seed, config.test_fraction)
    placed: List[Dict[str, Any]] = []
    by_file: Dict[int, List[int]] = {}
    for u, unit in enumerate(plan["units"]):
        by_file.setdefault(unit["file"], []).append(u)
    for i, path in enumerate(plan["files"]):
        file_lines = 0
        for u in by_file.get(i, []):
            if plan["units"][u].get("end", 0) < 0:
                raise long_line_error(f"{path}:{file_lines + 1}", config.block_bytes)
            for b in range(_read(work, f"u{u:06d}.done")["blocks"]):
                name = _block_name(u, b)
                meta = _read(work, name + ".json")
                rejects = [(j, cat, detail, text.encode("latin-1")) for j, cat, detail, text in meta["rejects"]]
                acc.add_rejects(path, file_lines + 1, rejects, meta["lines"])
                file_lines += meta["lines"]
                acc.rows_in_before += meta["lines"]
                if meta["rows"]:
                    placed.append(_place(work, name, splitter, acc, meta))
                if meta.get("profile"):
                    acc.add_profile(DataProfile.from_state(meta["profile"]))
        acc.inputs.append({"path": path, "lines": file_lines, "bytes": os.path.getsize(path)})
    if acc.rows_in == 0:
        raise BadInput("input", plan["files"], "no lines found: the input files are empty")
    acc.check_bad_fraction()
    write_json(os.path.join(work, _MERGED), {"blocks": placed})
    return acc


def _place(work: str, name: str, splitter: StratifiedSplit, acc: Accumulator,
           meta: Dict[str, Any]) -> Dict[str, Any]:
    labels = _labels(work, name)
    place = {"name": name, "seen": list(splitter.seen),
             "train_before": acc.rows_train, "test_before": acc.rows_test}
    mask = splitter.is_test(labels)
    n_test = int(mask.sum())
    pos_test = int(labels[mask].sum())
    acc.rows_test += n_test
    acc.rows_train += labels.size - n_test
    acc.pos_test += pos_test
    acc.pos_train += int(labels.sum()) - pos_test
    acc.missing += np.asarray(meta["missing"], dtype=np.int64)
    return place


def _targets(config: PrepConfig) -> List[Tuple[str, int]]:
    return [("train", s) for s in range(config.shards)] + [("test", s) for s in range(config.test_shards)]


def _shard_path(splits: Dict[str, str], split: str, shard: int) -> str:
    return os.path.join(splits[split], f"part-{shard:05d}.parquet")


def write_share(work: str, index: int, count: int) -> None:
    """Phase 3 for worker ``index`` of ``count``: write its shards from every block, in input order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctr_model.features import arrow_schema

    plan = _read(work, _PLAN)
    config = PrepConfig(**plan["config"])
    mine = _targets(config)[index::count]
    if not mine:
        return
    counts = {"train": config.shards, "test": config.test_shards}
    writers = {t: pq.ParquetWriter(_shard_path(plan["splits"], *t), arrow_schema(),
                                   compression=config.compression) for t in mine}
    try:
        for place in _read(work, _MERGED)["blocks"]:
            with pa.memory_map(os.path.join(work, place["name"] + ".arrow")) as source:
                table = pa.ipc.open_file(source).read_all()
                splitter = StratifiedSplit(config.seed, config.test_fraction)
                splitter.seen = list(place["seen"])
                mask = splitter.is_test(table.column(LABEL).to_numpy())
                rows = {"test": np.flatnonzero(mask), "train": np.flatnonzero(~mask)}
                for split, shard in mine:
                    lo, size = _slice(place[f"{split}_before"], rows[split].size, counts[split], shard)
                    if size:
                        writers[(split, shard)].write_table(table.take(rows[split][lo:lo + size]))
    finally:
        for writer in writers.values():
            writer.close()
    logger.info("fan-out write: worker %d of %d wrote %d shards", index, count, len(mine))


def _slice(before: int, n: int, k: int, shard: int) -> Tuple[int, int]:
    """Where shard ``shard`` of ``k`` takes its slice of a block's ``n`` rows, ``before`` rows having
    gone out before: the contiguous slices :meth:`~.split.ShardSet.write` cuts."""
    after = before + n

    def size(s: int) -> int:
        return (after + k - 1 - s) // k - (before + k - 1 - s) // k
    return sum(size(s) for s in range(shard)), size(shard)


class _Written:
    """A split's shards as :func:`~.stats.write_outputs` reads them (a directory, files and rows)."""

    def __init__(self, split_dir: str, count: int, total: int):
        self.dir = split_dir
        self.rows = [(total + count - 1 - s) // count for s in range(count)]

    def files(self) -> List[Dict[str, Any]]:
        return [{"name": f"part-{s:05d}.parquet", "rows": r} for s, r in enumerate(self.rows)]


class LocalRunner:
    """The workers as processes of this machine (``python -m ctr_volcano.data.prep.fanout``)."""

    shared_dirs = False

    def run(self, phase: str, work: str, count: int) -> None:
        procs = [subprocess.Popen([sys.executable, "-m", __name__, phase, "--work", work,
                                   "--index", str(i), "--count", str(count)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for i in range(count)]
        tails = [p.communicate()[1].decode("utf-8", "replace").strip().splitlines() for p in procs]
        for i, (proc, tail) in enumerate(zip(procs, tails)):
            if proc.returncode:
                raise_worker_error(work, phase, i, proc.returncode, tail[-1] if tail else "")


def raise_worker_error(work: str, phase: str, index: int, code: int, last_line: str) -> None:
    """The error a failed worker left: its :class:`BadInput` as it raised it, else :class:`FanoutFailed`."""
    path = os.path.join(work, f"error-{phase}-{index}.json")
    if os.path.exists(path):
        err = _read(work, os.path.basename(path))
        raise BadInput(err["field"], err["value"], err["fix"])
    raise FanoutFailed(f"prep {phase} worker {index} exited {code}: {last_line}")


def prep_fanout(inputs: Sequence[str], out_dir: str, config: Optional[PrepConfig] = None,
                workers: int = 2, runner: Optional[Runner] = None, spec: Optional[FeatureSpec] = None
                ) -> Dict[str, Any]:
    """Prep ``inputs`` into ``out_dir/{train,test}`` and ``out_dir/stats.json`` with ``workers``
    workers per phase; the output is the same for every ``workers``. See :func:`prep_fanout_splits`."""
    out_dir = os.path.abspath(out_dir)
    return prep_fanout_splits(inputs, os.path.join(out_dir, "train"), os.path.join(out_dir, "test"), config,
                              workers=workers, runner=runner, spec=spec,
                              stats_path=os.path.join(out_dir, STATS_FILE), work=os.path.join(out_dir, WORK_DIR))


def prep_fanout_splits(inputs: Sequence[str], train_dir: str, test_dir: str, config: Optional[PrepConfig] = None,
                       *, workers: int = 2, runner: Optional[Runner] = None, spec: Optional[FeatureSpec] = None,
                       stats_path: Optional[str] = None, work: Optional[str] = None) -> Dict[str, Any]:
    """Like :func:`prep_fanout`, with the two split directories, the stats file and the work
    directory (default: ``.fanout`` beside ``train_dir``) named explicitly.

    Args:
        inputs: files (plain or gzip), globs or directories, as for :func:`~ctr_volcano.data.prep.prep`.
        train_dir, test_dir: the split directories; every worker must see them, the work directory
            and the inputs at the same paths.
        config: prep's settings (``config.workers`` is not used: each worker is one process).
        workers: processes (or pods) per phase.
        runner: runs the phases; :class:`LocalRunner` by default.
        spec: the input's layout; only Criteo TSV (``None`` or the ``criteo`` format) fans out.

    Raises:
        BadInput: bad settings or input, one line, before any shard is written.
        FanoutFailed: a worker failed for another reason.
    """
    config = config if config is not None else PrepConfig()
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 1024:
        raise BadInput("workers", workers, "use an integer in [1, 1024]: the prep workers to fan out to")
    if spec is not None and not spec.is_criteo:
        raise BadInput("fanout", workers, "the fanned-out prep reads Criteo TSV; prep a feature spec's "
                                          "data in one process (its workers parallelise it)")
    started = time.monotonic()
    files = resolve_inputs(inputs)
    splits = {"train": os.path.abspath(train_dir), "test": os.path.abspath(test_dir)}
    work = os.path.abspath(work or os.path.join(os.path.dirname(splits["train"]), WORK_DIR))
    runner = runner if runner is not None else LocalRunner()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    _clear_splits(splits, stats_path)
    if runner.shared_dirs:
        for d in (work, *splits.values()):
            os.chmod(d, 0o777)
    try:
        write_json(os.path.join(work, _PLAN), {"files": [os.path.abspath(f) for f in files],
                                               "units": plan_units(files, config.block_bytes),
                                               "config": asdict(config), "splits": splits})
        runner.run("parse", work, workers)
        acc = merge(work)
        runner.run("write", work, workers)
        train = _Written(splits["train"], config.shards, acc.rows_train)
        test = _Written(splits["test"], config.test_shards, acc.rows_test)
        return write_outputs(acc, train, test, time.monotonic() - started, config.hash_buckets,
                             criteo_spec(config.hash_buckets).to_dict(), stats_path, workers=workers, fanout=True)
    except BaseException:
        _clear_splits(splits, stats_path)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _clear_splits(splits: Dict[str, str], stats_path: Optional[str]) -> None:
    """Both split directories, empty of an earlier prep's output (stale shards would be read as data)."""
    for split_dir in splits.values():
        clear_split(split_dir)
    if stats_path and os.path.exists(stats_path):
        os.remove(stats_path)


def _read(work: str, name: str) -> Any:
    with open(os.path.join(work, name)) as fh:
        return json.load(fh)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """A worker: ``python -m ctr_volcano.data.prep.fanout {parse,write} --work W --index I --count N``
    (``--index`` defaults to Volcano's ``VC_TASK_INDEX``). A refused input exits 2 with its one line
    (also left in the work directory for the coordinator)."""
    from ctr_model.logs import setup_logging

    parser = argparse.ArgumentParser(prog="python -m ctr_volcano.data.prep.fanout")
    parser.add_argument("phase", choices=("parse", "write"))
    parser.add_argument("--work", required=True)
    parser.add_argument("--index", type=int, default=int(os.environ.get("VC_TASK_INDEX", "-1")))
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    if not 0 <= args.index < args.count:
        logger.error("--index=%d: give the worker's index in [0, %d) (or set VC_TASK_INDEX)",
                     args.index, args.count)
        return 2
    try:
        (parse_share if args.phase == "parse" else write_share)(args.work, args.index, args.count)
    except BadInput as exc:
        write_json(os.path.join(args.work, f"error-{args.phase}-{args.index}.json"),
                   {"field": exc.field, "value": json.loads(json.dumps(exc.value, default=str)),
                    "fix": exc.fix})
        logger.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
