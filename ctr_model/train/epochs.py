"""The epoch loop: train through Paddle's C++ dataset, record the epoch, checkpoint when due.

``train_from_dataset`` is the only path that refreshes the dense weights in async PS mode. Every
epoch starts from zeroed counters; :class:`~ctr_model.train.progress.Progress` logs them while it
runs, and the epoch's record (examples, seconds, loss, AUC, the start-up costs once, the progress
thread's failed reads) goes to this trainer's progress file before the checkpoint.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ctr_model import workspace as wsp
from ctr_model.config import TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.train import say
from ctr_model.train.checkpoints import checkpoint_due, save_checkpoint
from ctr_model.train.dataset import Stream
from ctr_model.train.exits import fail_now
from ctr_model.train.metrics import load_history, save_history
from ctr_model.train.program import LOSS_SUM
from ctr_model.train.progress import Progress, auc_from_stats, read_stats, reset_stats

__all__ = ["Session", "run_epochs"]


@dataclass
class Session:
    """What the epochs run on: Paddle's fleet, executor, program and network, and the data.

    Attributes:
        fleet: ``paddle.distributed.fleet``, initialised as a worker.
        exe: the static-graph executor.
        program: the main program (after ``minimize``: fleet swapped it).
        net: the network (:class:`ctr_model.net.Net`).
        dataset: the Paddle dataset of this trainer's shards.
        rows: this trainer's rows per epoch.
        timings: the start-up costs (``convert``, ``convert_wait``, ``load`` seconds).
        stream: the ``stream`` reader's set-up, or ``None``.
    """

    fleet: Any
    exe: Any
    program: Any
    net: Any
    dataset: Any
    rows: int
    timings: Dict[str, float]
    stream: Optional[Stream] = None


def run_epochs(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, s: Session, start_epoch: int) -> None:
    """Epochs ``start_epoch + 1 .. config.epochs``: train, record the epoch's metrics in this
    trainer's progress file, checkpoint when trainer 0 says one is due."""
    import paddle

    scope = paddle.static.global_scope()
    names = {"pos": s.net.auc_states[2].name, "neg": s.net.auc_states[3].name, "loss": LOSS_SUM}
    progress = Progress(spec, lambda: read_stats(scope, names), config.progress_secs,
                        on_fatal=lambda exc: fail_now(spec, exc))
    progress.rows_per_epoch, progress.last_epoch = s.rows, config.epochs
    progress.start()
    history = load_history(ws, spec, start_epoch)
    last_checkpoint = time.time()
    try:
        for epoch in range(start_epoch + 1, config.epochs + 1):
            record = _train_epoch(spec, config, s, scope, names, progress, epoch,
                                  first=epoch == start_epoch + 1)
            history.append(record)
            save_history(ws, spec, history)
            # the save is collective: every trainer follows trainer 0's decision
            if checkpoint_due(spec, config, ws, epoch, last_checkpoint):
                save_checkpoint(spec, config, ws, s.fleet, s.exe, epoch)
                last_checkpoint = time.time()
    finally:
        progress.stop_event.set()


def _train_epoch(spec: RoleSpec, config: TrainConfig, s: Session, scope: Any, names: Dict[str, str],
                 progress: Progress, epoch: int, first: bool) -> Dict[str, Any]:
    """Train one epoch; returns its record (the start-up costs in the ``first`` epoch only)."""
    if config.reader == "inmemory" and config.shuffle:
        s.dataset.local_shuffle()
    if s.stream is not None:
        s.stream.before(s.dataset, epoch)
    reset_stats(scope, _stat_names(s.net))
    errors_before = progress.errors
    progress.epoch, progress.t0 = epoch, time.time()
    t = time.time()
    s.exe.train_from_dataset(program=s.program, dataset=s.dataset, thread=config.threads,
                             debug=False, fetch_list=[s.net.loss, s.net.auc],
                             fetch_info=["loss", "auc"], print_period=config.print_every)
    seconds = time.time() - t
    n, loss, pos, neg = read_stats(scope, names)
    if s.stream is not None:
        s.stream.after(int(n), epoch)
    startup = {k: round(v, 3) if first else 0.0 for k, v in s.timings.items()}
    record = {"epoch": epoch, "examples": int(n), "seconds": round(seconds, 3),
              "start_time": round(t, 3), "end_time": round(t + seconds, 3),
              "examples_per_sec": round(n / max(seconds, 1e-9), 1),
              "loss": loss / n if n else None, "auc": auc_from_stats(pos, neg),
              "convert_seconds": startup["convert"], "convert_wait_seconds": startup["convert_wait"],
              "load_seconds": startup["load"], "progress_errors": progress.errors - errors_before}
    say(spec, f"epoch {epoch} done: {int(n)} examples in {seconds:.1f}s "
              f"({record['examples_per_sec']:.0f} ex/s), loss {record['loss'] or float('nan'):.4f}, "
              f"auc {record['auc']:.4f}")
    return record


def _stat_names(net: Any) -> List[str]:
    return [v.name for v in net.auc_states] + [LOSS_SUM]
