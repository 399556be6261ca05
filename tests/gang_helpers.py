"""What the tests that run a real local gang share: the small model config, the 16k-row planted prep
and a job id whose processes must all be gone once the test is over."""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Tuple

from ctr_model.checkpoint import COMPLETE_MARKER, epoch_dir
from ctr_volcano.training.local.gang import processes_with_env
from tools.planted_prep import write_planted_prep

__all__ = ["SMALL", "job_processes", "parent_pid", "write_small_planted", "gang_job_id",
           "kill_when_checkpointed"]

#: A model small enough to learn the planted data in seconds on two cores.
#: Learning rate 0.005: at 0.01 a 2x2 gang under load diverged (epoch loss 0.79-1.29, test AUC 0.447 once in CI), docs/training.md.
#: Checkpoints after every epoch (``checkpoint_secs`` 0), which the kill-and-resume tests rely on.
SMALL = {"fc_sizes": [32, 16], "embedding_dim": 4, "batch_size": 128, "learning_rate": 0.005,
         "progress_secs": 2.0, "sparse_shards": 4, "checkpoint_secs": 0}


def job_processes(job_id: str, *extra: str) -> List[int]:
    """Live processes of gang ``job_id`` (``CTR_JOB_ID``), narrowed by more ``NAME=value`` items."""
    return processes_with_env(f"CTR_JOB_ID={job_id}", *extra)


def parent_pid(pid: int) -> int:
    """The parent of ``pid`` (``-1`` once it is gone): the roles' own processes, not gloo's helpers."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return -1


def write_small_planted(directory: Path) -> Tuple[str, float]:
    """16k training + 4k test planted rows in 4 shards; returns the prep dir and the oracle's test AUC."""
    oracle = write_planted_prep(str(directory), train_rows=16_000, test_rows=4_000, shards=4, seed=11)
    return str(directory), oracle["oracle_test_auc"]


def gang_job_id(prefix: str, grace_s: float, poll_s: float) -> Iterator[str]:
    """For a fixture (``yield from``): a fresh job id; afterwards, no process of it may be left once
    ``grace_s`` seconds have passed."""
    jid = f"{prefix}-{uuid.uuid4().hex[:8]}"
    yield jid
    deadline = time.time() + grace_s
    while job_processes(jid) and time.time() < deadline:
        time.sleep(poll_s)
    assert job_processes(jid) == [], "processes of the gang were left behind"


def kill_when_checkpointed(output_dir: str, job_id: str, role: str, index: int, box: dict) -> None:
    """SIGKILL the role process ``role``-``index`` of gang ``job_id`` once epoch 1's checkpoint is
    complete under ``output_dir``; records ``killed_at`` in ``box`` (for a thread)."""
    marker = os.path.join(epoch_dir(output_dir, 1), COMPLETE_MARKER)
    deadline = time.time() + 240
    while time.time() < deadline:
        if os.path.exists(marker):
            pids = job_processes(job_id, f"CTR_ROLE={role}", f"VC_TASK_INDEX={index}")
            # the role process itself (its helpers, e.g. gloo's manager, are its children)
            pids = [p for p in pids if open(f"/proc/{p}/cmdline", "rb").read().find(b"ctr_model.train") >= 0]
            roots = [p for p in pids if parent_pid(p) not in pids]
            if roots:
                os.kill(roots[0], signal.SIGKILL)
                box["killed_at"] = time.time()
                return
        time.sleep(0.05)
