"""Streaming Criteo TSV -> stably hashed, normalised Parquet shards, with every row accounted for.

Criteo files are large (GBs to TBs, often gzipped), so prep never holds more than a few blocks of
text. It cuts the input into ``block_bytes`` blocks at line ends (plain files by byte range,
gzip files as they are decompressed) and each block into ~4 MiB pieces. ``workers`` lanes (a thread
of this process and ``workers - 1`` forked processes) take the pieces in turn: read, parse with
pyarrow's CSV reader, reject, transform with vectorised numpy (:mod:`ctr_model.features`, the same
code training, evaluation and serving use). This process takes the results back in input order,
reassembles each block, splits it and writes it from a writer thread while the lanes go on, so the
output never depends on ``workers``. A piece that pyarrow cannot parse as-is (a wrong field count,
a non-integer in an integer column, a stray carriage return) goes through a careful path that
checks field counts line by line and bisects the rest with the same parser, so every bad line is
rejected with its exact file, line number and reason and every good line is kept.
``rows_in == rows_train + rows_test + rows_rejected`` holds for every input.

Split: stratified by label (:class:`StratifiedSplit`): the ``k``-th kept line with label ``y``
(0-based, in input order) goes to test iff ``floor((k + 1) f + o_y) > floor(k f + o_y)``, with ``f``
the test fraction and ``o_y`` in [0, 1) from the seed, so the split depends only on the seed and the
sequence of labels, and each split's click rate is the data's.
Shards: each block's train rows are cut into ``shards`` contiguous slices, slice ``k`` appended to
``part-0000k.parquet``, sized so shard row counts never differ by more than one.
"""
from __future__ import annotations

import gc
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ctr_model.feature_spec import FeatureSpec, criteo_spec
from ctr_model.features import LABEL, RAW_COLUMNS
from ctr_model.logs import Progress
from ctr_volcano.data.prep.config import AUTO_WORKERS_MAX, STATS_FILE, PrepConfig
from ctr_volcano.data.prep.generic import check_files, prep_spec
from ctr_volcano.data.prep.inputs import Job, jobs, long_line_error, piece_bytes, resolve_inputs
from ctr_volcano.data.prep.lanes import Lanes, Slots, available_cores, finish_profile, keep_freed_memory, use_slots
from ctr_volcano.data.prep.split import ShardSet, StratifiedSplit
from ctr_volcano.data.prep.stats import Accumulator, write_outputs
from ctr_volcano.data.profile.profile import DataProfile
from ctr_volcano.errors import BadInput

__all__ = ["PrepConfig", "prep", "prep_splits", "check_inputs", "resolve_inputs", "StratifiedSplit",
           "available_cores", "AUTO_WORKERS_MAX", "STATS_FILE"]

logger = logging.getLogger(__name__)

#: One piece's result: ``(lines, rejects with piece-relative line indices, table or None, missing,
#: profile or None)``.
_Result = Tuple[int, list, Any, Optional[np.ndarray], Any]


def prep(inputs: Sequence[str], out_dir: str, config: Optional[PrepConfig] = None,
         spec: Optional[FeatureSpec] = None) -> Dict[str, Any]:
    """Prep raw Criteo TSV into ``out_dir/train``, ``out_dir/test`` and ``out_dir/stats.json``.

    Args:
        inputs: files (plain or gzip), globs or directories, read in the given order.
        out_dir: output directory (created; earlier shards in its split dirs are replaced).
        config: settings; defaults to :class:`PrepConfig()`.
        spec: the input's layout; ``None`` or the ``criteo`` format is Criteo TSV (with
            ``config.hash_buckets``), anything else goes through :mod:`.generic`.

    Returns:
        The stats dict (also written to ``out_dir/stats.json``).

    Raises:
        BadInput: missing/empty/unreadable input, or too many bad lines (naming file, line, reason).
    """
    check_inputs(inputs, spec)   # a bad input leaves no output directory behind
    os.makedirs(out_dir, exist_ok=True)
    return prep_splits(inputs, os.path.join(out_dir, "train"), os.path.join(out_dir, "test"),
                       config, stats_path=os.path.join(out_dir, STATS_FILE), spec=spec)


def check_inputs(inputs: Sequence[str], spec: Optional[FeatureSpec] = None) -> List[str]:
    """The input files, resolved and checked as prep checks them before reading a row: each exists;
    in a spec's own layout, each file's name says its compression and its columns match the spec.

    Raises:
        BadInput: naming the file (field ``input``) or the spec, and the fix.
    """
    files = resolve_inputs(inputs, spec)
    if spec is not None and not spec.is_criteo:
        check_files(spec, files)
    return files


def prep_splits(inputs: Sequence[str], train_dir: str, test_dir: str,
                config: Optional[PrepConfig] = None, stats_path: Optional[str] = None,
                spec: Optional[FeatureSpec] = None) -> Dict[str, Any]:
    """Like :func:`prep`, with the two split directories (and the stats file) named explicitly.

    Each split directory gets ``part-NNNNN.parquet`` shards and, last, ``schema.json``.
    """
    config = config if config is not None else PrepConfig()
    if not isinstance(config, PrepConfig):
        raise BadInput("config", config, "pass a ctr_volcano.data.prep.PrepConfig")
    files = resolve_inputs(inputs, spec)
    if stats_path and os.path.exists(stats_path):
        os.remove(stats_path)   # it describes the shards the writers below replace
    if spec is not None and not spec.is_criteo:
        return prep_spec(files, train_dir, test_dir, config, spec, stats_path)
    return _prep_criteo(files, train_dir, test_dir, config, stats_path)


def _prep_criteo(files: Sequence[str], train_dir: str, test_dir: str, config: PrepConfig,
                 stats_path: Optional[str]) -> Dict[str, Any]:
    started = time.monotonic()
    plain = not any(f.endswith(".gz") for f in files)   # gzip: the text size is known only at the end
    total_bytes = sum(os.path.getsize(f) for f in files)
    workers = config.workers or min(available_cores(), AUTO_WORKERS_MAX)
    if plain and total_bytes <= 2 * piece_bytes(config.block_bytes):
        workers = 1     # starting processes would cost more than the work
    train = ShardSet(train_dir, config.shards, config.compression)
    test = ShardSet(test_dir, config.test_shards, config.compression)
    acc = Accumulator(config)
    progress = Progress(logger, "prep", total_bytes=total_bytes if plain else None)
    ok = False
    try:
        _Feeder(config, workers, acc, train, test, progress).run(files)
        train.close()
        test.close()
        if acc.rows_in == 0:
            raise BadInput("input", files, "no lines found: the input files are empty")
        progress.done()
        stats = write_outputs(acc, train, test, time.monotonic() - started, config.hash_buckets,
                              criteo_spec(config.hash_buckets).to_dict(), stats_path, workers=workers)
        ok = True
        return stats
    finally:
        if not ok:
            train.remove()
            test.remove()


class _Feeder:
    """Feed the pieces to the lanes, a bounded window ahead, and take their results back in input
    order: rejects and counts per block, then split and write each block (in a thread, while the
    lanes go on). The output depends on the blocks (``block_bytes``), never on ``workers``."""

    def __init__(self, config: PrepConfig, workers: int, acc: Accumulator, train: ShardSet,
                 test: ShardSet, progress: Progress) -> None:
        self.config, self.workers, self.acc, self.progress = config, workers, acc, progress
        self.train, self.test = train, test
        self.splitter = StratifiedSplit(config.seed, config.test_fraction)  # blocks reach it in order
        self.window_size = 2 * workers + 2      # pieces in flight: bounds memory whatever the cores
        self.window: Deque[Tuple[Job, Optional[Future], Optional[int]]] = deque()
        self.slots = (Slots(self.window_size, piece_bytes(config.block_bytes) * 3 // 2 + (1 << 20))
                      if workers > 1 else None)
        self.parts: List[_Result] = []      # the current block's pieces so far
        self.file_lines = 0                 # lines of the current file before the current block
        self.pending: Optional[Future] = None

    def run(self, files: Sequence[str]) -> None:
        """Prep ``files`` into the shard sets."""
        keep_freed_memory()
        use_slots(self.slots)
        if self.slots is not None:
            gc.freeze()     # the workers' collector then leaves the inherited heap alone (no copy-on-write)
        lanes = Lanes(self.workers)
        try:
            # With several workers the one writer would become the bottleneck past ~4 of them (the
            # split and Parquet encoding are a quarter of the single-core work): the shards of a
            # block are encoded in parallel.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prep-write") as writer, \
                    ThreadPoolExecutor(max_workers=max(1, min(self.workers, 8)),
                                       thread_name_prefix="prep-shard") as shard_pool:
                self._drain(jobs(files, self.config.block_bytes), lanes, writer,
                            shard_pool if self.workers > 1 else None)
        finally:
            lanes.shutdown()
            use_slots(None)
            if self.slots is not None:
                self.slots.mem.close()
                gc.unfreeze()

    def _fill(self, pending_jobs: Any, lanes: Lanes) -> None:
        while len(self.window) < self.window_size:
            job = next(pending_jobs, None)
            if job is None:
                return
            future, slot = None, None
            if job.kind == "piece":
                future, slot = lanes.submit(self.slots, *job.work, self.config.hash_buckets, self.config.profile)
            self.window.append((job, future, slot))

    def _drain(self, pending_jobs: Any, lanes: Lanes, writer: ThreadPoolExecutor,
               shard_pool: Optional[ThreadPoolExecutor]) -> None:
        self._fill(pending_jobs, lanes)
        while self.window:
            job, future, slot = self.window.popleft()
            if job.kind == "error":
                raise job.work
            if job.kind == "long line":
                raise long_line_error(f"{job.path}:{self.file_lines + 1}", self.config.block_bytes)
            if job.kind == "end":
                self.acc.inputs.append({"path": job.path, "lines": self.file_lines,
                                        "bytes": os.path.getsize(job.path)})
                self.file_lines = 0
                self._fill(pending_jobs, lanes)
                continue
            assert future is not None
            result = self._take(future.result(), slot)
            self._fill(pending_jobs, lanes)
            self.parts.append(finish_profile(result))   # while the lanes go on with the next pieces
            self.progress.update(rows=result[0], nbytes=job.nbytes)
            if job.last:
                self._end_block(job.path, writer, shard_pool)
        if self.pending is not None:
            self.pending.result()

    def _take(self, result: _Result, slot: Optional[int]) -> _Result:
        """The piece's table out of its shared-memory slot (if it went through one); frees the slot."""
        if self.slots is None or slot is None:
            return result
        if isinstance(result[2], tuple):
            return result[0], result[1], self.slots.take(*result[2][1:]), result[3], result[4]
        self.slots.free.append(slot)    # no good line, or the table did not fit: the slot was unused
        return result

    def _end_block(self, path: str, writer: ThreadPoolExecutor,
                   shard_pool: Optional[ThreadPoolExecutor]) -> None:
        """Count the block's rejects and lines, then hand its good rows to the writer thread."""
        n_lines, tables = 0, []
        rejects: List[Tuple[Any, ...]] = []
        missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
        pieces = []
        for lines, piece_rejects, table, piece_missing, piece in self.parts:
            rejects.extend((n_lines + i, *rest) for i, *rest in piece_rejects)
            if table is not None and piece_missing is not None:
                tables.append(table)
                missing += piece_missing
            if piece is not None:
                pieces.append(piece)
            n_lines += lines
        self.parts = []
        if pieces:
            self.acc.add_profile(DataProfile.merged(pieces))
        self.acc.add_rejects(path, self.file_lines + 1, rejects, n_lines)
        self.file_lines += n_lines
        self.acc.rows_in_before += n_lines
        if self.pending is not None:
            self.pending.result()
            self.pending = None
        if tables:
            import pyarrow as pa

            self.pending = writer.submit(_split_and_write, pa.concat_tables(tables), missing,
                                         self.splitter, self.acc, self.train, self.test, shard_pool)


def _split_and_write(out, missing: np.ndarray, splitter: StratifiedSplit, acc: Accumulator,
                     train: ShardSet, test: ShardSet,
                     pool: Optional[ThreadPoolExecutor] = None) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pa.array(splitter.is_test(out.column(LABEL).to_numpy()))
    test_part = out.filter(mask)
    train_part = out.filter(pc.invert(mask))
    acc.add_good(missing, train_part, test_part)
    futures = []
    if train_part.num_rows:
        futures += train.write(train_part, pool)
    if test_part.num_rows:
        futures += test.write(test_part, pool)
    for future in futures:      # every shard's slice is written before the next block's
        future.result()
