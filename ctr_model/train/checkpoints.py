"""The gang's collective checkpoints: resume from the newest complete one (or warm-start), decide
when the next is due, write it.

The layout is :mod:`ctr_model.checkpoint`'s. ``save_persistables`` is collective (a barrier, every
pserver writes its part of every table, a barrier), so trainer 0 decides whether one is due and the
other trainers follow its decision; trainer 0 alone writes the markers, the ``_COMPLETE`` one last.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Any, Optional

from ctr_model import checkpoint as ckpt
from ctr_model import workspace as wsp
from ctr_model.config import TrainConfig
from ctr_model.contract import PSERVER, RoleSpec
from ctr_model.errors import BadInput
from ctr_model.space import one_line_if_full
from ctr_model.train import say
from ctr_model.train.program import pull_dense
from ctr_model.warm_start import WarmStart

__all__ = ["sync_checkpoints", "restore", "checkpoint_due", "save_checkpoint"]


def sync_checkpoints(ws: wsp.Workspace) -> Optional[ckpt.Checkpoint]:
    """The newest complete checkpoint; from a store, its markers are fetched first."""
    if isinstance(ws, wsp.StoreWorkspace):
        root = os.path.relpath(ckpt.checkpoint_root(ws.root), ws.root)
        for name in ws.list(root):
            for leaf in ("meta.json", ckpt.COMPLETE_MARKER):
                ws.fetch(f"{root}/{name}/{leaf}")
    return ckpt.latest_complete(ws.root)


def restore(spec: RoleSpec, ws: wsp.Workspace, fleet: Any, init: Optional[WarmStart], config: TrainConfig) -> int:
    """Load the newest complete checkpoint (resume) or else the init model (warm start) into the
    pservers; returns the epoch training continues after (0 for a fresh run).

    Raises:
        BadInput: the checkpoint was written by another number of pservers or under another network
            (:func:`ctr_model.checkpoint.resume_refusal`).
    """
    resume = sync_checkpoints(ws)
    if resume is not None:
        refusal = ckpt.resume_refusal(resume, config.to_dict(), spec.pservers)
        if refusal:
            raise BadInput("checkpoint", resume.path, refusal)
        fleet.load_model(resume.path, mode=0)
        pull_dense(fleet)
        say(spec, f"resumed from {resume.path} (epoch {resume.epoch})")
        return resume.epoch
    if init is not None:
        # Paddle's PS load path: trainer 0 asks every pserver to load its shards of both tables
        fleet.load_model(init.checkpoint, mode=0)
        pull_dense(fleet)
        say(spec, f"warm start from {init.model_dir} (job {init.meta.get('job_id')}, "
                  f"checkpoint {init.checkpoint})")
    return 0


def checkpoint_due(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, epoch: int,
                   since: float, poll_s: float = 0.1) -> bool:
    """Whether the gang checkpoints after ``epoch``: always after the last epoch or with
    ``checkpoint_secs`` 0, else when trainer 0 has trained ``checkpoint_secs`` since the last one.
    Trainer 0 decides and writes the decision where the others wait for it, under this attempt's
    pserver-0 nonce (a previous attempt's decisions are never read)."""
    if epoch >= config.epochs or config.checkpoint_secs == 0:
        return True
    nonce = ws.read_text(f"{wsp.GANG_DIR}/{PSERVER}-0.nonce") or "none"
    rel = f"{wsp.GANG_DIR}/checkpoint-{nonce}-epoch-{epoch}"
    if spec.index == 0:
        due = time.time() - since >= config.checkpoint_secs
        ws.write_text(rel, "yes" if due else "no")
        if not due:
            say(spec, f"no checkpoint after epoch {epoch}: the last was {time.time() - since:.0f}s ago "
                      f"(checkpoint_secs {config.checkpoint_secs:g})")
        return due
    while True:
        decision = ws.read_text(rel)
        if decision in ("yes", "no"):
            return decision == "yes"
        time.sleep(poll_s)


def save_checkpoint(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, fleet: Any, exe: Any,
                    epoch: int) -> None:
    """Every trainer: the collective save of epoch ``epoch``; trainer 0 then gathers the pservers'
    tables (from a store), marks the checkpoint complete and prunes old ones.

    Raises:
        NoSpace: the markers did not fit (the pservers' tables did).
    """
    path = ckpt.epoch_dir(ws.root, epoch)
    rel = os.path.relpath(path, ws.root)
    if spec.index == 0:
        shutil.rmtree(path, ignore_errors=True)   # an incomplete one from a failed attempt
        if isinstance(ws, wsp.StoreWorkspace):
            ws.remove(rel)
        os.makedirs(path, exist_ok=True)
    t = time.time()
    fleet.save_persistables(exe, path)            # collective: barrier, pservers write, barrier
    if spec.index != 0:
        return
    ws.request_publish(rel, [f"{PSERVER}-{i}" for i in range(spec.pservers)], spec.publish_timeout_s)
    with one_line_if_full(path):   # the pservers' tables fitted; the markers may not
        ckpt.mark_complete(path, {"epoch": epoch, "pservers": spec.pservers,
                                  "trainers": spec.trainers, "config": config.to_dict(),
                                  "job_id": spec.job_id, "time": time.time()})
    ws.publish(f"{rel}/meta.json")
    ws.publish(f"{rel}/{ckpt.COMPLETE_MARKER}")   # last: the checkpoint is complete
    for name in ckpt.prune(ws.root, config.keep_checkpoints):
        ws.remove(os.path.relpath(os.path.join(ckpt.checkpoint_root(ws.root), name), ws.root))
    say(spec, f"checkpoint {ws.location}/{rel} written in {time.time() - t:.1f}s")
