"""Training progress: the counters of the running epoch, and the thread that logs them.

The progress lines are the trainers' heartbeat: both backends' stall watchdogs fail a gang whose
trainer log gains no line for ``stall_timeout_s``. So the thread's own failures are surfaced, not
swallowed:

* every failed read of the counters is counted (:attr:`Progress.errors`, recorded per epoch in the
  trainer's progress file and so in ``metrics.json``);
* the first failure of a run of them is logged as a warning with its cause, and the recovery with
  the number of reads that failed; the failures in between are not logged, so a trainer that cannot
  report progress stays silent for the watchdog instead of looking alive;
* reads failing for :data:`GIVE_UP_TICKS` ticks in a row (60 s at the default ``progress_secs``
  of 10, well within the default ``stall_timeout_s`` of 300) mean progress cannot be reported at all:
  the thread fails the role itself (``on_fatal``: exit 1, a failure the gang restarts from its last
  checkpoint), naming the cause, rather than leave the watchdog to kill it later as "no progress".
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Tuple

from ctr_model.contract import RoleSpec
from ctr_model.errors import JobFailed
from ctr_model.logs import human_seconds
from ctr_model.train import log, say

__all__ = ["Progress", "ProgressLost", "GIVE_UP_TICKS", "read_stats", "reset_stats", "auc_from_stats"]

#: Consecutive ticks whose read failed after which the role fails (see the module docstring).
GIVE_UP_TICKS = 6


class ProgressLost(JobFailed):
    """The trainer could not read its own progress for :data:`GIVE_UP_TICKS` ticks in a row."""

    def __init__(self, spec: RoleSpec, failures: int, seconds: float, cause: BaseException):
        super().__init__(spec.job_id, "Failed",
                         f"could not read the training progress for {seconds:.0f}s ({failures} reads in a row "
                         f"failed, the last with {type(cause).__name__}: {cause}); the stall watchdog would "
                         f"see no progress either, so the role fails now", role=spec.name)


def auc_from_stats(stat_pos: Any, stat_neg: Any) -> float:
    """AUC from Paddle's ``auc`` op histograms (positives/negatives per score bucket)."""
    import numpy as np

    pos = np.asarray(stat_pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(stat_neg, dtype=np.float64).reshape(-1)
    tot_pos, tot_neg = pos.sum(), neg.sum()
    if tot_pos == 0 or tot_neg == 0:
        return float("nan")
    # walk from the highest bucket down; trapezoids under the ROC curve
    pos_c = np.cumsum(pos[::-1])
    neg_c = np.cumsum(neg[::-1])
    prev_pos = np.concatenate([[0.0], pos_c[:-1]])
    prev_neg = np.concatenate([[0.0], neg_c[:-1]])
    area = ((neg_c - prev_neg) * (pos_c + prev_pos) / 2.0).sum()
    return float(area / (tot_pos * tot_neg))


def read_stats(scope: Any, names: Dict[str, str]) -> Tuple[float, float, Any, Any]:
    """``(examples, summed loss, positives histogram, negatives histogram)`` of the running epoch,
    from the persistable variables ``names["pos"]``, ``names["neg"]`` and ``names["loss"]``."""
    import numpy as np

    pos = np.array(scope.find_var(names["pos"]).get_tensor())
    neg = np.array(scope.find_var(names["neg"]).get_tensor())
    loss = float(np.array(scope.find_var(names["loss"]).get_tensor()).sum())
    return float(pos.sum() + neg.sum()), loss, pos, neg


def reset_stats(scope: Any, names: List[str]) -> None:
    """Zero the epoch's counters (the AUC states and the loss sum) before an epoch."""
    import numpy as np
    import paddle

    for name in names:
        tensor = scope.find_var(name).get_tensor()
        tensor.set(np.zeros_like(np.array(tensor)), paddle.CPUPlace())


class Progress(threading.Thread):
    """Logs examples/s, loss, AUC and an ETA every ``secs`` while the examples count moves.

    Args:
        spec: the trainer.
        read: returns the counters (:func:`read_stats` of the training scope).
        secs: seconds between ticks (``TrainConfig.progress_secs``).
        on_fatal: called from this thread with :class:`ProgressLost` once reads failed for
            :data:`GIVE_UP_TICKS` ticks in a row; it must end the role (the trainer passes
            :func:`ctr_model.train.exits.fail_now`). The thread stops after calling it.
    """

    def __init__(self, spec: RoleSpec, read: Callable[[], Tuple[float, float, Any, Any]], secs: float,
                 on_fatal: Callable[[BaseException], Any]):
        super().__init__(daemon=True, name=f"{spec.name}-progress")
        self.spec, self.read, self.secs, self.on_fatal = spec, read, secs, on_fatal
        self.stop_event = threading.Event()
        self.epoch = 0
        self.t0 = time.time()
        self.rows_per_epoch = 0     # this trainer's rows: with last_epoch, drives the ETA
        self.last_epoch = 0
        self.errors = 0             # failed reads, in all
        self._failing = 0           # failed reads in a row

    def run(self) -> None:
        last = -1.0
        while not self.stop_event.wait(self.secs):
            try:
                n, loss, pos, neg = self.read()
            except Exception as exc:   # counted, logged and bounded: see the module docstring
                if self._failed(exc):
                    return
                continue
            self._recovered()
            if n == last or n == 0:
                continue
            last = n
            self._log_line(n, loss, pos, neg)

    def _failed(self, exc: BaseException) -> bool:
        """Count a failed read; ``True`` once the role was failed (the thread ends)."""
        self.errors += 1
        self._failing += 1
        if self._failing == 1:
            log.warning(f"{self.spec.name}: cannot read the training progress ({type(exc).__name__}: {exc}); "
                        f"counting the failures, giving up after {GIVE_UP_TICKS} in a row")
        if self._failing < GIVE_UP_TICKS:
            return False
        self.on_fatal(ProgressLost(self.spec, self._failing, self._failing * self.secs, exc))
        return True

    def _recovered(self) -> None:
        if self._failing:
            log.warning(f"{self.spec.name}: reading the training progress works again after "
                        f"{self._failing} failed read(s)")
            self._failing = 0

    def _log_line(self, n: float, loss: float, pos: Any, neg: Any) -> None:
        dt = max(time.time() - self.t0, 1e-9)
        eta = ""
        if self.rows_per_epoch:
            left = (self.last_epoch - self.epoch) * self.rows_per_epoch + max(self.rows_per_epoch - n, 0)
            eta = f", ETA {human_seconds(left / (n / dt))}"
        say(self.spec, f"epoch {self.epoch}/{self.last_epoch}: {int(n)} of {self.rows_per_epoch} examples, "
                       f"{n / dt:.0f} ex/s, loss {loss / n:.4f}, auc {auc_from_stats(pos, neg):.4f}{eta}")
