"""``reader: auto``: the in-memory reader while a trainer's rows fit in half its memory limit, the
stream reader beyond; the limit read from the process's cgroup (v2, v1) or the machine."""
from __future__ import annotations

import pytest

from ctr_model.config import TrainConfig
from ctr_model.reader_choice import INMEMORY_BYTES_PER_ROW, MEMORY_SHARE, choose_reader, memory_limit

GIB = 1 << 30


def test_auto_is_the_default():
    assert TrainConfig().reader == "auto"


@pytest.mark.parametrize("rows, limit, reader", [
    (100_000, 2 * GIB, "inmemory"),
    (int(2 * GIB * MEMORY_SHARE) // INMEMORY_BYTES_PER_ROW, 2 * GIB, "inmemory"),       # just fits
    (int(2 * GIB * MEMORY_SHARE) // INMEMORY_BYTES_PER_ROW + 1, 2 * GIB, "stream"),     # one row more
    (20_250_000, 16 * GIB, "stream"),        # a trainer's share of the 45M-line Criteo-size run
    (0, 1, "inmemory"),
])
def test_the_reader_follows_the_rows_memory_needs(rows, limit, reader):
    chosen, why = choose_reader(rows, limit)
    assert chosen == reader and f"{rows} rows" in why and f"{limit >> 20} MiB" in why


def _cgroup(tmp_path, v2=None, v1=None):
    root = tmp_path / "cgroup"
    root.mkdir()
    if v2 is not None:
        (root / "memory.max").write_text(v2 + "\n")
    if v1 is not None:
        (root / "memory").mkdir()
        (root / "memory" / "memory.limit_in_bytes").write_text(v1 + "\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:        1000 kB\n")
    return str(root), str(meminfo)


@pytest.mark.parametrize("v2, v1, limit", [
    ("2147483648", None, 2 * GIB),                         # a pod's limit, cgroup v2
    (None, "4294967296", 4 * GIB),                         # cgroup v1
    ("max", None, 24000000 * 1024),                        # v2 without a limit: the machine's memory
    (None, "9223372036854771712", 24000000 * 1024),        # v1 "no limit"
    (None, None, 24000000 * 1024),
])
def test_the_memory_limit_is_the_cgroup_s_or_the_machine_s(tmp_path, v2, v1, limit):
    assert memory_limit(*_cgroup(tmp_path, v2, v1)) == limit


def test_this_process_has_a_memory_limit():
    assert memory_limit() > 64 << 20
