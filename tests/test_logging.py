"""One log format across the CLI, the components and the pods, and progress lines on long work."""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

from ctr_model.logs import Progress, human_seconds

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d (INFO|ERROR|WARNING|DEBUG) +[\w.]+: .+$")


def test_progress_lines_give_rates_and_eta(caplog):
    log = logging.getLogger("test.progress")
    with caplog.at_level(logging.INFO, logger="test.progress"):
        p = Progress(log, "prep", total_bytes=4_000_000, every_s=0.0)
        p.update(rows=1000, nbytes=1_000_000)
        p.done()
    first, last = (r.getMessage() for r in caplog.records)
    assert re.fullmatch(r"prep: 1,000 rows, 1\.0 of 4\.0 MB \(25%\), [\d,]+ rows/s, [\d.]+ MB/s, ETA \w+", first)
    assert last.startswith("prep: 1,000 rows, 1.0 of 4.0 MB, ") and last.endswith(" done")
    assert human_seconds(95) == "1m35s" and human_seconds(4000) == "1h06m"


def test_cli_and_pod_entrypoint_log_in_one_format(sample_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTR_", "VC_"))}
    cli = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "gen-data", "--rows", "2000", "--out",
                          str(tmp_path / "raw"), "--oracle-rows", "1000"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert cli.returncode == 0, cli.stderr
    cli_lines = [ln for ln in cli.stderr.splitlines() if ln.strip()]
    assert any("ctr_volcano.data.synthetic: gen-data: 2,000 rows" in ln for ln in cli_lines), cli_lines
    pod = subprocess.run([sys.executable, "-m", "ctr_model.train"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert pod.returncode == 2
    pod_lines = [ln for ln in pod.stderr.splitlines() if ln.strip()]
    assert pod_lines and "error:" in pod_lines[-1]
    for line in cli_lines + pod_lines:
        assert LINE.match(line), line
