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
import glob
import logging
import math
import os
import re
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ctr_model.atomic import write_json
from ctr_model.checks import is_int
from ctr_model.features import (
    DEFAULT_HASH_BUCKETS,
    DENSE_COLUMNS,
    LABEL,
    NUM_SPARSE,
    RAW_COLUMNS,
    SCHEMA_FILE,
    SCHEMA_VERSION,
    SPARSE_COLUMNS,
    _mix64_int,
    hash_categorical,
    validate_hash_buckets,
    write_split_schema,
)
from ctr_model.logs import Progress
from ctr_volcano.errors import BadInput

__all__ = ["PrepConfig", "prep", "prep_splits", "resolve_inputs", "StratifiedSplit",
           "available_cores", "AUTO_WORKERS_MAX", "STATS_FILE", "REASONS"]

STATS_FILE = "stats.json"

logger = logging.getLogger(__name__)

#: Reason categories counted in ``stats["rejected_by_reason"]``.
REASONS = ("wrong field count", "non-integer in integer column", "label not 0/1", "empty line",
           "carriage return inside line")

#: Cap of ``workers=0``: this process splits and writes every block itself (about a quarter of
#: the single-core work), so beyond ~4 workers it is the bottleneck and more only cost memory.
AUTO_WORKERS_MAX = 8

_INPUT_SUFFIXES = (".tsv", ".txt", ".csv", ".gz", ".tsv.gz", ".txt.gz")
_SPLIT_SALT_BASE = 0x53504C4954                 # ASCII "SPLIT"


@dataclass(frozen=True)
class PrepConfig:
    """How to prep. Validated once on construction (raises :class:`BadInput`).

    Attributes:
        hash_buckets: ids per categorical column space; 1,000,001 matches PaddleRec's CTR-DNN.
        test_fraction: share of lines sent to the test split, in (0, 1).
        shards: train shards; trainers take whole files, so use a multiple of the trainer count.
        test_shards: test shards (evaluation reads them all).
        max_bad_fraction: prep fails if rejected lines exceed this share of all lines.
        seed: selects the train/test split.
        block_bytes: text split and written at a time (each block's train rows go to the shards
            as contiguous slices, so the shard layout depends on it; the lanes parse it in pieces
            of up to 4 MiB); memory use is a few times this.
        max_examples: rejected lines kept verbatim (truncated) in ``stats.json``.
        compression: Parquet codec.
        workers: processes parsing and transforming pieces of the blocks in parallel; 0 means the
            cores available to this process (its CPU affinity, capped by a cgroup CPU quota), at
            most :data:`AUTO_WORKERS_MAX`. The output does not depend on it; memory grows by about
            60 MB per worker (measured: 282 MB at 1, 759 MB at 8). Plain input of at most two
            pieces (8 MiB by default) runs in one lane whatever this says.
    """

    hash_buckets: int = DEFAULT_HASH_BUCKETS
    test_fraction: float = 0.1
    shards: int = 8
    test_shards: int = 2
    max_bad_fraction: float = 0.001
    seed: int = 42
    block_bytes: int = 32 << 20
    max_examples: int = 10
    compression: str = "snappy"
    workers: int = 0

    def __post_init__(self) -> None:
        try:
            validate_hash_buckets(self.hash_buckets)
        except ValueError:
            raise BadInput("hash_buckets", self.hash_buckets,
                           f"use an integer >= {NUM_SPARSE + 1} (ids 0..{NUM_SPARSE - 1} are the "
                           f"per-column empty ids); the default is {DEFAULT_HASH_BUCKETS}") from None
        if not _is_number(self.test_fraction) or not 0.0 < float(self.test_fraction) < 1.0:
            raise BadInput("test_fraction", self.test_fraction, "use a number between 0 and 1, "
                           "e.g. 0.1")
        if not _is_number(self.max_bad_fraction) or not 0.0 <= float(self.max_bad_fraction) <= 1.0:
            raise BadInput("max_bad_fraction", self.max_bad_fraction,
                           "use a number between 0 and 1, e.g. 0.001")
        for name, lo, hi in (("shards", 1, 4096), ("test_shards", 1, 4096), ("seed", 0, 2 ** 63),
                             ("block_bytes", 1 << 16, 1 << 31), ("max_examples", 0, 10000),
                             ("workers", 0, 1024)):
            value = getattr(self, name)
            if not is_int(value, lo, hi):
                raise BadInput(name, value, f"use an integer in [{lo}, {hi}]")
        if self.compression not in ("snappy", "zstd", "gzip", "lz4", "none"):
            raise BadInput("compression", self.compression, "use snappy, zstd, gzip, lz4 or none")


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating)) \
        and math.isfinite(float(x))


# ---------------------------------------------------------------------------------------------
# inputs


def resolve_inputs(inputs: Sequence[str]) -> List[str]:
    """Expand files, globs and directories into an ordered list of input files.

    A directory contributes its regular files named ``*.tsv``, ``*.txt``, ``*.csv``, ``*.gz`` or
    with no extension (like Criteo's ``day_0``), sorted by name, not recursing; hidden files and
    other extensions (``oracle.json``, ``README.md``) are skipped.

    Raises:
        BadInput: for no inputs, a missing path, a glob or directory matching no file.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    if not inputs:
        raise BadInput("input", list(inputs), "give at least one file, glob or directory")
    files: List[str] = []
    for item in inputs:
        item = os.fspath(item)
        if any(ch in item for ch in "*?["):
            matches = sorted(p for p in glob.glob(item) if os.path.isfile(p))
            if not matches:
                raise BadInput("input", item, "the glob matches no file; check the pattern")
            files.extend(matches)
        elif os.path.isdir(item):
            names = sorted(n for n in os.listdir(item) if not n.startswith(".")
                           and os.path.isfile(os.path.join(item, n))
                           and (n.endswith(_INPUT_SUFFIXES) or "." not in n))
            if not names:
                raise BadInput("input", item, "the directory holds no .tsv/.txt/.csv/.gz file")
            files.extend(os.path.join(item, n) for n in names)
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise BadInput("input", item, "no such file or directory; give a Criteo TSV file, "
                           "a .gz file, a glob or a directory")
    return files


def _open(path: str):
    import pyarrow as pa

    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        return pa.input_stream(path, compression="gzip" if magic == b"\x1f\x8b" else None)
    except OSError as exc:
        raise BadInput("input", path, f"cannot open the file ({exc}); check the path and its "
                       f"permissions") from None


def _blocks(path: str, block_bytes: int) -> Iterator[Tuple[int, bytes, int]]:
    """Yield ``(first_line_number, text, lines)`` with whole lines; line numbers are 1-based."""
    line_no = 1
    pending = b""
    stream = _open(path)
    try:
        while True:
            try:
                chunk = stream.read(block_bytes)
            except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid/OSError
                raise BadInput("input", path, f"cannot read the data ({exc}); if it is gzip, "
                               f"check it is complete (gzip -t) or re-download it") from None
            if not chunk:
                break
            data = pending + chunk if pending else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                if len(pending) > block_bytes:
                    raise BadInput("input", f"{path}:{line_no}",
                                   f"line longer than the block size ({block_bytes >> 20} MiB): raise "
                                   f"--block-mb above the longest line, or check this is a Criteo TSV "
                                   f"file (40 tab-separated fields per line)")
                continue
            block, pending = data[:cut + 1], data[cut + 1:]
            n_lines = block.count(b"\n")
            yield line_no, block, n_lines
            line_no += n_lines
        if pending:
            yield line_no, pending, 1
    finally:
        stream.close()


def _last_newline(fd: int, lo: int, hi: int) -> int:
    """Offset of the last ``\n`` in bytes ``[lo, hi)`` of ``fd``, or -1; reads backwards."""
    pos = hi
    while pos > lo:
        n = min(1 << 16, pos - lo)
        i = os.pread(fd, n, pos - n).rfind(b"\n")
        if i >= 0:
            return pos - n + i
        pos -= n
    return -1


def _plain_blocks(fd: int, block_bytes: int) -> Iterator[Tuple[int, int]]:
    """Byte ranges ``[start, end)`` of the blocks :func:`_blocks` yields for a plain file, found by
    reading only around each cut (so workers can read the blocks themselves). ``end`` is -1 for a
    line longer than ``block_bytes`` starting at ``start`` (the caller reports it in order)."""
    size = os.fstat(fd).st_size
    start = read_end = 0
    while read_end < size:
        chunk_start, read_end = read_end, min(read_end + block_bytes, size)
        cut = _last_newline(fd, max(start, chunk_start), read_end)
        if cut < 0:
            if read_end - start > block_bytes:
                yield start, -1
                return
            continue
        yield start, cut + 1
        start = cut + 1
    if start < size:
        yield start, size


def _piece_bytes(block_bytes: int) -> int:
    """Size of the pieces a block is cut into for the workers (they never change the output)."""
    return min(4 << 20, max(16 << 10, block_bytes // 8))


def _plain_pieces(fd: int, start: int, end: int, piece_bytes: int) -> List[Tuple[int, int]]:
    """Cut the block ``[start, end)`` at line ends into ranges of about ``piece_bytes``."""
    pieces, lo = [], start
    for target in range(start + piece_bytes, end, piece_bytes):
        if target <= lo:
            continue
        cut = _last_newline(fd, lo, target)
        if cut >= 0:
            pieces.append((lo, cut + 1))
            lo = cut + 1
    pieces.append((lo, end))
    return pieces


def _text_pieces(text: bytes, piece_bytes: int) -> List[bytes]:
    """Cut an in-memory block (decompressed gzip) at line ends into pieces of about ``piece_bytes``."""
    pieces, lo = [], 0
    for target in range(piece_bytes, len(text), piece_bytes):
        cut = text.rfind(b"\n", lo, target)
        if cut >= 0:
            pieces.append(text[lo:cut + 1])
            lo = cut + 1
    pieces.append(text[lo:] if lo else text)
    return pieces


# Jobs, in input order: a piece of a block (the last piece of each block says so), the end of a
# file, or an error to raise when the work before it is done (so errors come in input order).
_Job = Tuple[Any, ...]


def _jobs(files: Sequence[str], block_bytes: int) -> Iterator[_Job]:
    piece_bytes = _piece_bytes(block_bytes)
    for path in files:
        try:
            with open(path, "rb") as fh:
                gzipped = fh.read(2) == b"\x1f\x8b"
            if gzipped:  # decompressed here, in order; the workers get the text
                for _, text, _ in _blocks(path, block_bytes):
                    pieces = _text_pieces(text, piece_bytes)
                    for k, piece in enumerate(pieces):
                        yield ("piece", path, k == len(pieces) - 1, len(piece), (path, 0, 0, piece))
            else:
                fd = os.open(path, os.O_RDONLY)
                try:
                    for start, end in _plain_blocks(fd, block_bytes):
                        if end < 0:
                            yield ("long line", path)
                            break
                        ranges = _plain_pieces(fd, start, end, piece_bytes)
                        for k, (lo, hi) in enumerate(ranges):
                            yield ("piece", path, k == len(ranges) - 1, hi - lo, (path, lo, hi, None))
                finally:
                    os.close(fd)
        except BadInput as exc:
            yield ("error", path, exc)
            return
        except OSError as exc:
            yield ("error", path, BadInput("input", path, f"cannot open the file ({exc}); check "
                                           f"the path and its permissions"))
            return
        yield ("end", path)


def _work(path: str, start: int, end: int, text: Optional[bytes], hash_buckets: int,
          slot: Optional[int] = None) -> Tuple[int, list, Any, Optional[np.ndarray]]:
    """One piece, in a worker: read (plain files), parse, reject, transform.

    Returns ``(lines, rejects with piece-relative line indices, output, missing)``; the output is
    a table, ``None`` (no good line), or ``("slot", slot, size)`` when it was written into the
    shared :class:`_Slots` (a forked worker with a slot, and the table fits).
    """
    if text is None:
        fd = os.open(path, os.O_RDONLY)
        try:
            parts, pos = [], start
            while pos < end:
                got = os.pread(fd, end - pos, pos)
                if not got:
                    break
                parts.append(got)
                pos += len(got)
        finally:
            os.close(fd)
        text = parts[0] if len(parts) == 1 else b"".join(parts)
    newlines = int(np.count_nonzero(np.frombuffer(text, dtype=np.uint8) == 10))  # 3x bytes.count
    n_lines = newlines + (0 if text.endswith(b"\n") else 1)
    table, _, rejects = _parse_block(text, n_lines)
    del text
    if table is None or not table.num_rows:
        return n_lines, rejects, None, None
    out, missing = _transform(table, hash_buckets)
    if slot is not None and _SLOTS is not None:
        size = _SLOTS.put(slot, out)
        if size >= 0:
            return n_lines, rejects, ("slot", slot, size), missing
    return n_lines, rejects, out, missing


def _work_on(args: Tuple[str, int, int, Optional[bytes], int], slot: Optional[int]
             ) -> Tuple[int, list, Any, Optional[np.ndarray]]:
    """:func:`_work` on a piece's ``(path, start, end, text, hash_buckets)``."""
    path, start, end, text, hash_buckets = args
    return _work(path, start, end, text, hash_buckets, slot)


class _Slots:
    """Shared memory the forked workers write their output tables into (Arrow IPC), one slot per
    piece in flight. The columns then cross once, where returning the table would pickle, pipe and
    unpickle it (four copies, each into fresh pages). A table too big for its slot (lines much
    shorter than Criteo's) is returned the ordinary way."""

    def __init__(self, count: int, size: int):
        import mmap

        self.size = size
        self.mem = mmap.mmap(-1, count * size)   # MAP_SHARED | MAP_ANONYMOUS: forks share it
        self.free = list(range(count))

    def put(self, slot: int, table) -> int:
        """In a worker: write ``table`` into ``slot``; its size, or -1 if it does not fit."""
        import pyarrow as pa

        if table.nbytes + (1 << 16) > self.size:
            return -1
        view = memoryview(self.mem)[slot * self.size:(slot + 1) * self.size]
        try:
            sink = pa.FixedSizeBufferWriter(pa.py_buffer(view))
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            size = sink.tell()
            sink.close()
            return size
        except (pa.ArrowException, OSError):
            return -1
        finally:
            sink = None
            try:
                view.release()
            except BufferError:   # still exported by a pyarrow object; the collector frees it
                pass

    def take(self, slot: int, size: int):
        """In this process: copy the table out of ``slot`` and free the slot."""
        import pyarrow as pa

        data = self.mem[slot * self.size:slot * self.size + size]
        self.free.append(slot)
        return pa.ipc.open_stream(data).read_all()


_SLOTS: Optional[_Slots] = None     # set before the workers are forked, so they inherit it


def available_cores() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (a pod's limit)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = None
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:         # cgroup v2: "max 100000" or "200000 100000"
            limit, period = fh.read().split()[:2]
            if limit != "max":
                quota = int(limit) / int(period)
    except (OSError, ValueError):
        try:
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as fh:   # cgroup v1
                q = int(fh.read())
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as fh:
                if q > 0:
                    quota = q / int(fh.read())
        except (OSError, ValueError):
            pass
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


# ---------------------------------------------------------------------------------------------
# parsing


_PARSE_OPTS = None


def _csv_options():
    global _PARSE_OPTS
    if _PARSE_OPTS is None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        types = {LABEL: pa.int64()}
        types.update({c: pa.int64() for c in DENSE_COLUMNS})
        types.update({c: pa.binary() for c in SPARSE_COLUMNS})
        _PARSE_OPTS = (
            pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=True,
                              block_size=4 << 20),
            pacsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False,
                               escape_char=False, newlines_in_values=False,
                               ignore_empty_lines=False),
            pacsv.ConvertOptions(column_types=types, check_utf8=False, null_values=[""],
                                 strings_can_be_null=False, quoted_strings_can_be_null=False,
                                 include_columns=list(RAW_COLUMNS)),
        )
    return _PARSE_OPTS


def _read(text: bytes, use_threads: bool = False):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read_opts, parse_opts, convert_opts = _csv_options()
    if not use_threads:  # one lane per worker: Arrow's 1 MiB parse blocks, no thread hand-offs
        read_opts = pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=False)
    try:
        return pacsv.read_csv(pa.py_buffer(text), read_options=read_opts,
                              parse_options=parse_opts, convert_options=convert_opts)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc):
            raise
    # A line longer than Arrow's parse block (a huge categorical value): parse the text as one block.
    one_block = pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=False,
                                  block_size=len(text) + 1)
    return pacsv.read_csv(pa.py_buffer(text), read_options=one_block,
                          parse_options=parse_opts, convert_options=convert_opts)


_COLUMN_RE = re.compile(r"column #(\d+)")
_VALUE_RE = re.compile(r"invalid value '(.*)'", re.S)


def _reason_from_error(msg: str) -> Tuple[str, str]:
    """(category, detail) of a pyarrow CSV error on a single line."""
    col = _COLUMN_RE.search(msg)
    val = _VALUE_RE.search(msg)
    value = repr(val.group(1)[:40]) if val else "?"
    if col is not None and int(col.group(1)) == 0:
        return "label not 0/1", f"label not 0/1: {value}"
    if col is not None and 1 <= int(col.group(1)) <= len(DENSE_COLUMNS):
        name = RAW_COLUMNS[int(col.group(1))]
        return "non-integer in integer column", f"non-integer in integer column {name}: {value}"
    if "Expected" in msg and "columns" in msg:
        return "wrong field count", msg.strip().splitlines()[0][:120]
    return "wrong field count", f"unparseable line: {msg.strip().splitlines()[0][:120]}"


def _parse_block(text: bytes, n_lines: int
                 ) -> Tuple[Any, np.ndarray, List[Tuple[int, str, str, bytes]]]:
    """Parse a block of ``n_lines`` whole lines; returns (table, row line indices, rejects)."""
    import pyarrow as pa

    try:
        table = _read(text)
        if table.num_rows == n_lines:
            return _check_labels(table, np.arange(n_lines, dtype=np.int64), [], text_lines=None,
                                 text=text)
    except pa.ArrowInvalid:
        pass
    return _parse_careful(text)


def _parse_careful(text: bytes):
    import pyarrow as pa

    lines = text.split(b"\n")
    if text.endswith(b"\n"):
        lines.pop()
    rejects: List[Tuple[int, str, str, bytes]] = []
    good_idx: List[int] = []
    good_lines: List[bytes] = []
    expected_tabs = len(RAW_COLUMNS) - 1
    for i, line in enumerate(lines):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            rejects.append((i, "empty line", "empty line", line))
        elif b"\r" in line:
            rejects.append((i, "carriage return inside line",
                            "carriage return inside line", line))
        elif line.count(b"\t") != expected_tabs:
            fields = line.count(b"\t") + 1
            rejects.append((i, "wrong field count", f"wrong field count: {fields} fields, "
                            f"expected {len(RAW_COLUMNS)}", line))
        else:
            good_idx.append(i)
            good_lines.append(line)
    tables: List[Any] = []
    rows: List[np.ndarray] = []
    idx_all = np.asarray(good_idx, dtype=np.int64)
    stack = [(0, len(good_lines))]
    while stack:  # bisect until each failing piece is a single line
        lo, hi = stack.pop()
        if lo >= hi:
            continue
        try:
            table = _read(b"\n".join(good_lines[lo:hi]) + b"\n")
            if table.num_rows != hi - lo:
                raise pa.ArrowInvalid("row count mismatch")
            tables.append(table)
            rows.append(idx_all[lo:hi])
        except pa.ArrowInvalid as exc:
            if hi - lo == 1:
                category, detail = _reason_from_error(str(exc))
                rejects.append((int(idx_all[lo]), category, detail, good_lines[lo]))
            else:
                mid = (lo + hi) // 2
                stack.append((mid, hi))
                stack.append((lo, mid))
    if not tables:
        return None, np.zeros(0, dtype=np.int64), sorted(rejects)
    order = np.argsort([r[0] for r in rows], kind="stable")
    table = pa.concat_tables([tables[k] for k in order])
    row_idx = np.concatenate([rows[k] for k in order])
    return _check_labels(table, row_idx, rejects, text_lines=lines, text=None)


def _check_labels(table, row_idx: np.ndarray, rejects, text_lines, text):
    """Reject rows whose label is empty or not 0/1 (pyarrow parsed it as any int64)."""
    label = table.column(0)
    if label.null_count == 0:
        lab = label.to_numpy()
        bad = (lab != 0) & (lab != 1)
    else:
        lab = label.to_numpy(zero_copy_only=False)
        bad = ~((lab == 0) | (lab == 1))
    if bad.any():
        import pyarrow as pa

        lines = text_lines if text_lines is not None else text.split(b"\n")
        for pos in np.flatnonzero(bad):
            i = int(row_idx[pos])
            line = lines[i][:-1] if lines[i].endswith(b"\r") else lines[i]
            if not line:  # pyarrow reads an empty line as a row of nulls when nothing else fails
                rejects = rejects + [(i, "empty line", "empty line", line)]
                continue
            value = line.split(b"\t", 1)[0].decode("utf-8", "replace")
            rejects = rejects + [(i, "label not 0/1", f"label not 0/1: {value[:40]!r}", line)]
        keep = ~bad
        table = table.filter(pa.array(keep))
        row_idx = row_idx[keep]
    return table, row_idx, sorted(rejects)


# ---------------------------------------------------------------------------------------------
# transform and split


class StratifiedSplit:
    """Which rows go to the test split: exactly ``test_fraction`` of the clicks and of the non-clicks.

    Rows of each label are counted in input order; the ``k``-th row of a label goes to the test split
    when ``floor((k + 1) f + o) > floor(k f + o)``, with a per-label offset ``o`` in [0, 1) drawn from
    the seed. So each label's test share is ``f`` to within one row, in every prefix of the input, and
    the test split's click rate equals the data's. Why not an independent coin per row: on a small
    input the test click rate then wanders by sqrt(p(1-p)/n) -- 0.9 percentage points on the 2,300
    test rows of the committed sample, which drew 23.6% against 25.2% in training, more than the
    calibration error being measured. Deterministic for a seed and the input order; feed blocks in
    order.
    """

    def __init__(self, seed: int, test_fraction: float):
        self.fraction = float(test_fraction)
        self.offsets = [(_mix64_int(int(seed) * 2 + label + _SPLIT_SALT_BASE) >> 11) / float(1 << 53)
                        for label in (0, 1)]
        self.seen = [0, 0]

    def is_test(self, labels: np.ndarray) -> np.ndarray:
        """Boolean mask over the next rows, given their labels (0/1) in input order."""
        labels = np.asarray(labels)
        mask = np.zeros(labels.shape[0], dtype=bool)
        for label in (0, 1):
            rows = np.flatnonzero(labels == label)
            k = self.seen[label] + np.arange(rows.size, dtype=np.float64)
            o = self.offsets[label]
            mask[rows] = np.floor((k + 1) * self.fraction + o) > np.floor(k * self.fraction + o)
            self.seen[label] += rows.size
        return mask


def _transform(table, hash_buckets: int) -> Tuple[Any, np.ndarray]:
    """Raw-typed table -> output table (schema of ctr_model.features.arrow_schema()), and
    per-column missing counts (13 dense + 26 categorical)."""
    import pyarrow as pa

    missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
    cols = [pa.array(table.column(0).to_numpy(zero_copy_only=False).astype(np.int8))]
    for j, name in enumerate(DENSE_COLUMNS):
        col = table.column(1 + j)
        missing[j] = col.null_count
        # int64, or float64 with NaN for the empty fields (pyarrow's int->double rounds as numpy's
        # astype does); fmax(x, 0) maps NaN and negatives to 0 in one pass, and max(x, 0) in
        # float64 is float64(max(x, 0)) exactly.
        f = np.fmax(col.to_numpy(zero_copy_only=False), 0.0)
        np.log1p(f, out=f)
        cols.append(pa.array(f.astype(np.float32)))
    for c, name in enumerate(SPARSE_COLUMNS):
        ids = hash_categorical(table.column(1 + len(DENSE_COLUMNS) + c), c + 1, hash_buckets)
        missing[len(DENSE_COLUMNS) + c] = int(np.count_nonzero(ids == c))
        cols.append(pa.array(ids))
    return pa.Table.from_arrays(cols, names=list(RAW_COLUMNS)), missing


# ---------------------------------------------------------------------------------------------
# writing


class _ShardSet:
    """``count`` Parquet writers in one split directory, fed contiguous slices of each block."""

    def __init__(self, split_dir: str, count: int, compression: str):
        import pyarrow.parquet as pq

        from ctr_model.features import arrow_schema

        os.makedirs(split_dir, exist_ok=True)
        for name in os.listdir(split_dir):  # stale shards of an earlier run would be read too
            if (name.startswith("part-") and name.endswith(".parquet")) or name == SCHEMA_FILE:
                os.remove(os.path.join(split_dir, name))
        self.dir = split_dir
        self.paths = [os.path.join(split_dir, f"part-{k:05d}.parquet") for k in range(count)]
        self.rows = [0] * count
        self.writers = [pq.ParquetWriter(p, arrow_schema(), compression=compression)
                        for p in self.paths]

    def write(self, table, pool: Optional[ThreadPoolExecutor] = None) -> List[Future]:
        """Append the block's rows; with ``pool``, the shards encode in parallel (Parquet encoding
        releases the GIL) and the futures are returned for the caller to wait on."""
        # Shard s ends up with as many rows as round-robin would give it (so sizes never differ
        # by more than one), but each block's rows go out as k contiguous slices.
        k = len(self.writers)
        before, after = sum(self.rows), sum(self.rows) + table.num_rows
        lo = 0
        futures = []
        for s in range(k):
            size = (after + k - 1 - s) // k - (before + k - 1 - s) // k
            if size:
                if pool is None:
                    self.writers[s].write_table(table.slice(lo, size))
                else:
                    futures.append(pool.submit(self.writers[s].write_table, table.slice(lo, size)))
                self.rows[s] += size
                lo += size
        return futures

    def close(self) -> None:
        for w in self.writers:
            w.close()

    def remove(self) -> None:
        """Delete what this set wrote, and its directory if nothing else is left in it."""
        self.close()
        for p in self.paths:
            if os.path.exists(p):
                os.remove(p)
        for name in (SCHEMA_FILE, SCHEMA_FILE + ".tmp"):
            if os.path.exists(os.path.join(self.dir, name)):
                os.remove(os.path.join(self.dir, name))
        if not os.listdir(self.dir):
            os.rmdir(self.dir)

    def files(self) -> List[Dict[str, Any]]:
        return [{"name": os.path.basename(p), "rows": r} for p, r in zip(self.paths, self.rows)]


# ---------------------------------------------------------------------------------------------
# the pipeline


def prep(inputs: Sequence[str], out_dir: str, config: Optional[PrepConfig] = None
         ) -> Dict[str, Any]:
    """Prep raw Criteo TSV into ``out_dir/train``, ``out_dir/test`` and ``out_dir/stats.json``.

    Args:
        inputs: files (plain or gzip), globs or directories, read in the given order.
        out_dir: output directory (created; earlier shards in its split dirs are replaced).
        config: settings; defaults to :class:`PrepConfig()`.

    Returns:
        The stats dict (also written to ``out_dir/stats.json``).

    Raises:
        BadInput: missing/empty/unreadable input, or too many bad lines (naming file, line, reason).
    """
    os.makedirs(out_dir, exist_ok=True)
    return prep_splits(inputs, os.path.join(out_dir, "train"), os.path.join(out_dir, "test"),
                       config, stats_path=os.path.join(out_dir, STATS_FILE))


def prep_splits(inputs: Sequence[str], train_dir: str, test_dir: str,
                config: Optional[PrepConfig] = None, stats_path: Optional[str] = None
                ) -> Dict[str, Any]:
    """Like :func:`prep`, with the two split directories (and the stats file) named explicitly.

    Each split directory gets ``part-NNNNN.parquet`` shards and, last, ``schema.json``.
    """
    config = config if config is not None else PrepConfig()
    if not isinstance(config, PrepConfig):
        raise BadInput("config", config, "pass a ctr_volcano.prep.PrepConfig")
    files = resolve_inputs(inputs)
    started = time.monotonic()
    if stats_path and os.path.exists(stats_path):
        os.remove(stats_path)   # it describes the shards the writers below replace
    plain = not any(f.endswith(".gz") for f in files)   # gzip: the text size is known only at the end
    total_bytes = sum(os.path.getsize(f) for f in files)
    workers = config.workers or min(available_cores(), AUTO_WORKERS_MAX)
    if plain and total_bytes <= 2 * _piece_bytes(config.block_bytes):
        workers = 1     # starting processes would cost more than the work
    train = _ShardSet(train_dir, config.shards, config.compression)
    test = _ShardSet(test_dir, config.test_shards, config.compression)
    acc = _Accumulator(config)
    progress = Progress(logger, "prep", total_bytes=total_bytes if plain else None)
    ok = False
    try:
        _run(files, config, workers, acc, train, test, progress)
        train.close()
        test.close()
        if acc.rows_in == 0:
            raise BadInput("input", files, "no lines found: the input files are empty")
        acc.check_bad_fraction()
        stats = acc.stats(train, test, time.monotonic() - started)
        stats["workers"] = workers
        progress.done()
        write_split_schema(train_dir, config.hash_buckets, acc.rows_train, train.files())
        write_split_schema(test_dir, config.hash_buckets, acc.rows_test, test.files())
        if stats_path:
            write_json(stats_path, stats)
        ok = True
        return stats
    finally:
        if not ok:
            train.remove()
            test.remove()


class _Lanes:
    """Where :func:`_work` runs: one thread of this process, plus ``workers - 1`` forked processes,
    taking the pieces in turn.

    The thread lane needs no transport, so one worker costs what a single-process prep costs and
    each further worker adds a core. Forked, not spawned: a spawned or fork-server child re-runs
    the caller's ``__main__`` script, which breaks any script without a ``__main__`` guard. The
    pool is forked at the first submit, before this module's threads start; Arrow re-creates its
    own thread pools in a forked child. The processes read plain files themselves, so only byte
    ranges go to them and only the transformed columns come back (through :class:`_Slots`).
    """

    def __init__(self, workers: int):
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prep-work")
        self.pool = None
        self.turn = 0
        self.workers = workers
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=workers - 1, initializer=_worker_init,
                                            mp_context=multiprocessing.get_context("fork"))

    def submit(self, slots: "Optional[_Slots]", *args: Any) -> Tuple[Future, Optional[int]]:
        """Run ``_work(*args)`` on the next lane in turn; a process lane gets a slot if one is
        free. Returns the future and the slot, which the caller gives back."""
        self.turn = (self.turn + 1) % self.workers
        if self.pool is None or self.turn == 0:
            return self.thread.submit(_work_on, args, None), None
        slot = slots.free.pop() if slots is not None and slots.free else None
        return self.pool.submit(_work_on, args, slot), slot

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.thread.shutdown(wait=True, cancel_futures=True)


def _worker_init() -> None:
    """In a forked worker: keep freed memory for the next piece (see :func:`_keep_freed_memory`),
    and use Arrow's jemalloc pool where the wheel has it (the default mimalloc returned each
    piece's pages to the OS: about twice the system time on the same work)."""
    import pyarrow as pa

    _keep_freed_memory()
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowException):
        pass


_MALLOC_TUNED = False


def _keep_freed_memory() -> None:
    """Raise glibc's mmap and trim thresholds (32 MiB, 128 MiB), once per process.

    Numpy's column arrays (~140 KB per piece and column) and the text of a piece are above glibc's
    initial 128 KiB mmap threshold, so each was mapped and unmapped again, and every page faulted
    in afresh: 66k page faults for 30 pieces of 4 MiB, against 600 with these thresholds (and a
    third less CPU time). Process-wide and harmless elsewhere: freed heap memory up to 128 MiB is
    kept for reuse instead of going back to the OS at once. A no-op off glibc.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 32 << 20)       # M_MMAP_THRESHOLD
    mallopt(-1, 128 << 20)      # M_TRIM_THRESHOLD


def _run(files: Sequence[str], config: PrepConfig, workers: int, acc: "_Accumulator",
         train: _ShardSet, test: _ShardSet, progress: Progress) -> None:
    """Feed the pieces to the workers, a bounded window ahead, and take their results back in
    input order: rejects and counts per block, then split and write each block (in a thread, while
    the workers go on). The output depends on the blocks (``block_bytes``), never on ``workers``."""
    global _SLOTS
    _keep_freed_memory()
    splitter = StratifiedSplit(config.seed, config.test_fraction)   # blocks reach it in input order
    window_size = 2 * workers + 2       # pieces in flight: bounds memory whatever the core count
    jobs = _jobs(files, config.block_bytes)
    window: Deque[Tuple[_Job, Optional[Future], Optional[int]]] = deque()
    slots = _SLOTS = (_Slots(window_size, _piece_bytes(config.block_bytes) * 3 // 2 + (1 << 20))
                      if workers > 1 else None)
    if slots is not None:
        gc.freeze()     # the workers' collector then leaves the inherited heap alone (no copy-on-write)
    lanes = _Lanes(workers)
    try:
        # With several workers the one writer would become the bottleneck past ~4 of them (the
        # split and Parquet encoding are a quarter of the single-core work): the shards of a
        # block are encoded in parallel.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prep-write") as writer, \
                ThreadPoolExecutor(max_workers=max(1, min(workers, 8)),
                                   thread_name_prefix="prep-shard") as shard_pool:
            def fill() -> None:
                while len(window) < window_size:
                    job = next(jobs, None)
                    if job is None:
                        return
                    future, slot = None, None
                    if job[0] == "piece":
                        future, slot = lanes.submit(slots, *job[4], config.hash_buckets)
                    window.append((job, future, slot))

            pending: Optional[Future] = None
            file_lines = 0
            parts: List[Tuple[int, list, Any, Optional[np.ndarray]]] = []
            fill()
            while window:
                job, future, slot = window.popleft()
                kind, path = job[0], job[1]
                if kind == "error":
                    raise job[2]
                if kind == "long line":
                    raise BadInput("input", f"{path}:{file_lines + 1}",
                                   f"line longer than the block size ({config.block_bytes >> 20} "
                                   f"MiB): raise --block-mb above the longest line, or check this "
                                   f"is a Criteo TSV file (40 tab-separated fields per line)")
                if kind == "end":
                    acc.inputs.append({"path": path, "lines": file_lines,
                                       "bytes": os.path.getsize(path)})
                    file_lines = 0
                    fill()
                    continue
                assert future is not None
                result = future.result()
                if slots is not None and slot is not None:
                    if isinstance(result[2], tuple):
                        result = (result[0], result[1], slots.take(*result[2][1:]), result[3])
                    else:   # no good line, or the table did not fit: the slot was not used
                        slots.free.append(slot)
                fill()
                parts.append(result)
                progress.update(rows=result[0], nbytes=job[3])
                if not job[2]:      # not the block's last piece yet
                    continue
                n_lines, tables = 0, []
                rejects: List[Tuple[Any, ...]] = []
                missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
                for lines, piece_rejects, table, piece_missing in parts:
                    rejects.extend((n_lines + i, *rest) for i, *rest in piece_rejects)
                    if table is not None and piece_missing is not None:
                        tables.append(table)
                        missing += piece_missing
                    n_lines += lines
                parts = []
                acc.add_rejects(path, file_lines + 1, rejects, n_lines)
                file_lines += n_lines
                acc.rows_in_before += n_lines
                if pending is not None:
                    pending.result()
                    pending = None
                if tables:
                    import pyarrow as pa

                    pending = writer.submit(_split_and_write, pa.concat_tables(tables), missing,
                                            splitter, acc, train, test,
                                            shard_pool if workers > 1 else None)
            if pending is not None:
                pending.result()
    finally:
        lanes.shutdown()
        _SLOTS = None
        if slots is not None:
            slots.mem.close()
            gc.unfreeze()


def _split_and_write(out, missing: np.ndarray, splitter: StratifiedSplit, acc: "_Accumulator",
                     train: _ShardSet, test: _ShardSet,
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


def _looks_like_header(line: bytes) -> bool:
    """A file's first line whose label field is a word (``label``, ``click``): column names."""
    label = line.split(b"\t", 1)[0].strip()
    return bool(label) and label.isalpha()


class _Accumulator:
    """Counts, rejects and per-column statistics over the whole run."""

    def __init__(self, config: PrepConfig):
        self.config = config
        self.rows_in_before = 0        # lines of all blocks seen so far (global line index base)
        self.rows_in = 0
        self.rows_train = 0
        self.rows_test = 0
        self.rows_rejected = 0
        self.pos_train = 0
        self.pos_test = 0
        self.missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
        self.by_reason: Dict[str, int] = {}
        self.examples: List[Dict[str, Any]] = []
        self.inputs: List[Dict[str, Any]] = []

    def add_rejects(self, path: str, first_line: int, rejects, n_lines: int) -> None:
        self.rows_in += n_lines
        self.rows_rejected += len(rejects)
        for i, category, detail, text in rejects:
            if first_line + i == 1 and _looks_like_header(text):
                detail = ("a header line (column names); Criteo TSV files have none: remove it "
                          f"(e.g. tail -n +2), first fields {text[:40].decode('utf-8', 'replace')!r}")
            self.by_reason[category] = self.by_reason.get(category, 0) + 1
            if len(self.examples) < self.config.max_examples:
                self.examples.append({"file": path, "line": first_line + i, "reason": detail,
                                      "text": text[:200].decode("utf-8", "replace")})
        if n_lines >= 1000 and len(rejects) > n_lines // 2 and rejects:
            i, _, detail, _ = rejects[0]
            raise BadInput("input", f"{path}:{first_line + i}",
                           f"{len(rejects)} of {n_lines} lines in this block are bad "
                           f"(first: {detail}); is this a Criteo TSV file (label, 13 integer "
                           f"and 26 categorical fields, tab-separated)?")

    def add_good(self, missing: np.ndarray, train_part, test_part) -> None:
        import pyarrow.compute as pc

        self.missing += missing
        self.rows_train += train_part.num_rows
        self.rows_test += test_part.num_rows
        if train_part.num_rows:
            self.pos_train += int(pc.sum(train_part.column(0).cast("int64")).as_py() or 0)
        if test_part.num_rows:
            self.pos_test += int(pc.sum(test_part.column(0).cast("int64")).as_py() or 0)

    def check_bad_fraction(self) -> None:
        frac = self.rows_rejected / self.rows_in
        if self.rows_rejected and frac > self.config.max_bad_fraction:
            first = self.examples[0] if self.examples else {"file": "?", "line": "?",
                                                            "reason": "?"}
            raise BadInput(
                "max_bad_fraction", self.config.max_bad_fraction,
                f"{self.rows_rejected} of {self.rows_in} lines ({frac:.4%}) were rejected; "
                f"first at {first['file']}:{first['line']}: {first['reason']}. Fix the input, "
                f"or raise --max-bad-fraction to accept it"
                + ("; most lines are bad: is this a Criteo TSV file (label, 13 integer and 26 "
                   "categorical fields, tab-separated)?" if frac > 0.5 else ""))

    def stats(self, train: _ShardSet, test: _ShardSet, seconds: float) -> Dict[str, Any]:
        good = self.rows_train + self.rows_test
        if self.rows_in != good + self.rows_rejected:  # a bug, never bad input
            raise RuntimeError(f"row accounting broke: rows_in={self.rows_in} != train "
                               f"{self.rows_train} + test {self.rows_test} + rejected "
                               f"{self.rows_rejected}")
        total_bytes = sum(i["bytes"] for i in self.inputs)
        return {
            "schema_version": SCHEMA_VERSION,
            "hash_buckets": self.config.hash_buckets,
            "rows_in": self.rows_in,
            "rows_train": self.rows_train,
            "rows_test": self.rows_test,
            "rows_rejected": self.rows_rejected,
            "rejected_fraction": self.rows_rejected / self.rows_in if self.rows_in else 0.0,
            "rejected_by_reason": dict(sorted(self.by_reason.items())),
            "rejected_examples": self.examples,
            "positive_rate": (self.pos_train + self.pos_test) / good if good else 0.0,
            "positive_rate_train": self.pos_train / self.rows_train if self.rows_train else 0.0,
            "positive_rate_test": self.pos_test / self.rows_test if self.rows_test else 0.0,
            "missing_rate": {name: (int(m) / good if good else 0.0)
                             for name, m in zip(RAW_COLUMNS[1:], self.missing)},
            "train_files": train.files(),
            "test_files": test.files(),
            "inputs": self.inputs,
            "config": asdict(self.config),
            "seconds": round(seconds, 3),
            "input_mb_per_s": round(total_bytes / 1e6 / seconds, 2) if seconds > 0 else None,
        }
