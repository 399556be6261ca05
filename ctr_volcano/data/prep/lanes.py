"""Where prep's pieces are parsed and transformed: a thread of this process plus forked worker processes.

Each lane reads its piece (plain files: by byte range), parses, rejects and transforms it; the forked
lanes hand their tables back through shared memory (:class:`Slots`). The caller takes the results
back in input order, so the output never depends on the number of lanes.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Tuple

import numpy as np

from ctr_volcano.data.prep.parse import parse_block, transform
from ctr_volcano.data.profile.profile import criteo_piece

__all__ = ["Lanes", "Slots", "SketchLater", "available_cores", "finish_profile", "keep_freed_memory", "use_slots"]


class SketchLater:
    """A piece profile the thread lane leaves to the caller's thread (:func:`finish_profile`): the
    transform's dense sketches, the 26 id sketches still to make. With one worker the lane is the
    critical path; this way it parses the next piece (Arrow, without the GIL) while the caller
    sketches this one's ids, instead of after (bench/prep.py: the profile's cost at one worker
    0.155-0.189 of the time without it, 0.063-0.081 so; docs/validation.md)."""

    __slots__ = ("dense",)

    def __init__(self, dense: list) -> None:
        self.dense = dense


def finish_profile(result: Tuple[int, list, Any, Optional[np.ndarray], Any]
                   ) -> Tuple[int, list, Any, Optional[np.ndarray], Any]:
    """A lane's result with its piece profile made, where the lane left it (:class:`SketchLater`)."""
    lines, rejects, out, missing, piece = result
    if isinstance(piece, SketchLater):
        assert missing is not None      # a piece with rows has its missing counts
        piece = criteo_piece(out, missing, piece.dense)
    return lines, rejects, out, missing, piece


def _work(path: str, start: int, end: int, text: Optional[bytes], hash_buckets: int, profile: bool = True,
          slot: Optional[int] = None, later: bool = False) -> Tuple[int, list, Any, Optional[np.ndarray], Any]:
    """One piece, in a worker: read (plain files), parse, reject, transform, profile.

    Returns ``(lines, rejects with piece-relative line indices, output, missing, profile)``; the
    output is a table, ``None`` (no good line), or ``("slot", slot, size)`` when it was written into
    the shared :class:`Slots` (a forked worker with a slot, and the table fits); the profile is the
    piece's :class:`~ctr_volcano.data.profile.DataProfile` (``None`` without ``profile`` or rows),
    or with ``later`` a :class:`SketchLater` for the caller.
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
    table, _, rejects = parse_block(text, n_lines)
    del text
    if table is None or not table.num_rows:
        return n_lines, rejects, None, None, None
    dense: Optional[list] = [] if profile else None
    out, missing = transform(table, hash_buckets, dense)
    if dense is None:
        piece = None
    else:
        piece = SketchLater(dense) if later else criteo_piece(out, missing, dense)
    if slot is not None and _SLOTS is not None:
        size = _SLOTS.put(slot, out)
        if size >= 0:
            return n_lines, rejects, ("slot", slot, size), missing, piece
    return n_lines, rejects, out, missing, piece


def _work_on(args: Tuple[str, int, int, Optional[bytes], int, bool], slot: Optional[int], later: bool = False
             ) -> Tuple[int, list, Any, Optional[np.ndarray], Any]:
    """:func:`_work` on a piece's ``(path, start, end, text, hash_buckets, profile)``."""
    path, start, end, text, hash_buckets, profile = args
    return _work(path, start, end, text, hash_buckets, profile, slot, later)


class Slots:
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


_SLOTS: Optional["Slots"] = None     # set before the workers are forked, so they inherit it


def use_slots(slots: Optional["Slots"]) -> None:
    """Make ``slots`` the shared memory the workers forked from now on write into (``None``: none)."""
    global _SLOTS
    _SLOTS = slots


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


class Lanes:
    """Where :func:`_work` runs: one thread of this process, plus ``workers - 1`` forked processes,
    taking the pieces in turn.

    The thread lane needs no transport, so one worker costs what a single-process prep costs and
    each further worker adds a core. Forked, not spawned: a spawned or fork-server child re-runs
    the caller's ``__main__`` script, which breaks any script without a ``__main__`` guard. The
    pool is forked at the first submit, before this module's threads start; Arrow re-creates its
    own thread pools in a forked child. The processes read plain files themselves, so only byte
    ranges go to them and only the transformed columns come back (through :class:`Slots`).
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

    def submit(self, slots: "Optional[Slots]", *args: Any) -> Tuple[Future, Optional[int]]:
        """Run ``_work(*args)`` on the next lane in turn; a process lane gets a slot if one is
        free. Returns the future and the slot, which the caller gives back; every result goes
        through :func:`finish_profile`."""
        self.turn = (self.turn + 1) % self.workers
        if self.pool is None or self.turn == 0:
            # one worker: the thread lane is the critical path, the caller's thread sketches the ids
            # (with forked lanes beside it, that thread is the busy one: measured slower)
            return self.thread.submit(_work_on, args, None, self.pool is None), None
        slot = slots.free.pop() if slots is not None and slots.free else None
        return self.pool.submit(_work_on, args, slot), slot

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.thread.shutdown(wait=True, cancel_futures=True)


def _worker_init() -> None:
    """In a forked worker: keep freed memory for the next piece (see :func:`keep_freed_memory`),
    and use Arrow's jemalloc pool where the wheel has it (the default mimalloc returned each
    piece's pages to the OS: about twice the system time on the same work)."""
    import pyarrow as pa

    keep_freed_memory()
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowException):
        pass


_MALLOC_TUNED = False


def keep_freed_memory() -> None:
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
