"""Which reader ``reader: auto`` (the default) gives a trainer: ``inmemory`` while its rows fit in
memory, ``stream`` beyond.

Why memory decides and not speed: the in-memory reader holds a trainer's rows as parsed records,
about :data:`INMEMORY_BYTES_PER_ROW` each on top of the trainer's own ~600 MB (measured by
``bench/scale.py``: 1,105 MB at 450k rows per trainer, 2,463 MB at 1.8M), so its memory grows with
the data until the pod is killed; the stream reader's stays flat in rows (a trainer's RSS is flat
through the epochs; only trainer 0's export grows, with the sparse keys, not the rows). Speed does
not argue for streaming small data: at 60k lines the stream reader ran at 0.45x the in-memory rate
(it starts a pipe per shard in every epoch), at 1M lines the two ran at about the same rate, at
4M lines at 0.89x (it parses the slot text in every epoch; ``bench/reader.py``, docs/performance.md). So a trainer takes ``inmemory`` until its share of rows
would fill :data:`MEMORY_SHARE` of its memory limit, and ``stream`` above.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

__all__ = ["INMEMORY_BYTES_PER_ROW", "MEMORY_SHARE", "choose_reader", "memory_limit"]

#: The in-memory reader's cost per row (Criteo layout: 13 dense + 26 sparse slots), measured.
INMEMORY_BYTES_PER_ROW = 1100
#: The share of the trainer's memory limit its in-memory rows may take (the rest: Paddle, the
#: program, the communicator's buffers, the export).
MEMORY_SHARE = 0.5


def choose_reader(rows: int, limit_bytes: int) -> Tuple[str, str]:
    """``(reader, why)`` for a trainer with ``rows`` rows and ``limit_bytes`` of memory. Pure."""
    need = rows * INMEMORY_BYTES_PER_ROW
    budget = int(limit_bytes * MEMORY_SHARE)
    if need <= budget:
        return "inmemory", (f"{rows} rows take about {need >> 20} MiB in memory, within "
                            f"{MEMORY_SHARE:.0%} of the {limit_bytes >> 20} MiB limit")
    return "stream", (f"{rows} rows would take about {need >> 20} MiB in memory, more than "
                      f"{MEMORY_SHARE:.0%} of the {limit_bytes >> 20} MiB limit")


def memory_limit(cgroup_root: str = "/sys/fs/cgroup", meminfo: str = "/proc/meminfo") -> int:
    """This process's memory limit in bytes: its cgroup's (v2 ``memory.max``, v1
    ``memory/memory.limit_in_bytes``) if it sets one, else the machine's memory."""
    for path in (os.path.join(cgroup_root, "memory.max"),
                 os.path.join(cgroup_root, "memory", "memory.limit_in_bytes")):
        value = _read_int(path)
        if value is not None and value < (1 << 60):   # v1 says "no limit" as a huge number
            return value
    with open(meminfo) as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no MemTotal in {meminfo}")


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None     # v2 says "max" for no limit
