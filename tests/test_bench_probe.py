"""The benchmarks' per-process probe (``bench/probe/sitecustomize.py``) records a child's times,
role and peak RSS, profiles it on request, and does nothing unless asked."""
from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys

from bench.gang_probe import PROBE_DIR

CHILD = ("import os; os.environ['TRAINING_ROLE'] = 'PSERVER'; x = bytearray(64 << 20); "
         "x[::4096] = b'1' * len(x[::4096])")


def _run(tmp_path, **env):
    path = os.pathsep.join([PROBE_DIR, os.environ.get("PYTHONPATH", "")])
    full = {**os.environ, "PYTHONPATH": path, **env}
    subprocess.run([sys.executable, "-c", CHILD], env=full, check=True, timeout=60)
    return sorted(os.listdir(tmp_path))


def test_probe_records_times_role_and_peak_rss(tmp_path):
    names = _run(tmp_path, BENCH_PROBE_DIR=str(tmp_path), BENCH_PROBE_PROFILE="1")
    assert len(names) == 2 and names[0].endswith(".json") and names[1].endswith(".prof"), names
    probe = json.loads((tmp_path / names[0]).read_text())
    assert probe["role"] == "PSERVER"
    assert probe["spawn_time"] <= probe["site_time"] <= probe["exit_time"]
    assert probe["peak_rss_mb"] > 64  # the child touched 64 MiB
    assert pstats.Stats(str(tmp_path / names[1])).total_calls > 0


def test_probe_is_inert_without_its_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_PROBE")}
    env["PYTHONPATH"] = os.pathsep.join([PROBE_DIR, os.environ.get("PYTHONPATH", "")])
    code = "import sitecustomize; print(sitecustomize.__file__, hasattr(sitecustomize, '_probe'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                         text=True, cwd=tmp_path, timeout=60)
    path, armed = out.stdout.split()
    assert path.startswith(PROBE_DIR) and armed == "False"
    assert out.stderr == "" and os.listdir(tmp_path) == []
