"""Per-epoch checkpoints in the output directory (shared, or a role's local copy of a store prefix).

Layout: ``OUTPUT/checkpoints/epoch-N/`` holds the pservers' tables (written by each pserver, so the
directory must be shared) and ``meta.json``; the ``_COMPLETE`` marker is written last, by trainer 0,
after every table is on disk. A restarted gang resumes from the newest complete checkpoint and
ignores (then overwrites) an incomplete one.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import List, Optional

from ctr_model.atomic import write_json

__all__ = ["COMPLETE_MARKER", "NETWORK_KEYS", "Checkpoint", "checkpoint_root", "epoch_dir", "latest_complete",
           "mark_complete", "prune", "resume_refusal"]

COMPLETE_MARKER = "_COMPLETE"
#: The config keys that shape the network's parameters: a checkpoint resumes only under the same values
#: (a gang once resumed one of ``fc_sizes`` [32, 16] under [64, 32] and exported a constant model).
NETWORK_KEYS = ("model", "model_config", "fc_sizes", "embedding_dim", "hash_buckets")
_EPOCH_RE = re.compile(r"^epoch-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint."""

    epoch: int
    path: str
    meta: dict


def resume_refusal(checkpoint: "Checkpoint", config: dict, pservers: int) -> Optional[str]:
    """``None``, or why this run cannot resume ``checkpoint`` (written by another number of pservers,
    or under another network: a :data:`NETWORK_KEYS` value differs), naming the value and the fix.

    Args:
        config: this run's complete training config (``TrainConfig.to_dict()``).
    """
    meta = checkpoint.meta
    if meta.get("pservers") != pservers:
        return (f"checkpoint {checkpoint.path} was written by {meta.get('pservers')} pservers; use that "
                f"many or a fresh output dir")
    written = meta.get("config") or {}
    for key in NETWORK_KEYS:
        if key in written and written[key] != config.get(key):
            return (f"checkpoint {checkpoint.path} was written with {key} {written[key]!r}, this run has "
                    f"{config.get(key)!r}: resume with the same network, or give a fresh output dir "
                    f"(workdir) to train this one")
    return None


def checkpoint_root(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def epoch_dir(output_dir: str, epoch: int) -> str:
    return os.path.join(checkpoint_root(output_dir), f"epoch-{epoch}")


def latest_complete(output_dir: str) -> Optional[Checkpoint]:
    """The newest checkpoint whose marker exists, or ``None``."""
    root = checkpoint_root(output_dir)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return None
    best: Optional[Checkpoint] = None
    for name in names:
        match = _EPOCH_RE.match(name)
        path = os.path.join(root, name)
        marker = os.path.join(path, COMPLETE_MARKER)
        if not match or not os.path.exists(marker):
            continue
        epoch = int(match.group(1))
        if best is None or epoch > best.epoch:
            try:
                with open(os.path.join(path, "meta.json"), encoding="utf-8") as fh:
                    meta = json.load(fh)
            except (OSError, ValueError):
                continue
            best = Checkpoint(epoch=epoch, path=path, meta=meta)
    return best


def mark_complete(path: str, meta: dict) -> None:
    """Write ``meta.json`` and then the marker (atomically, in that order)."""
    write_json(os.path.join(path, "meta.json"), meta, indent=1, sort_keys=True)
    with open(os.path.join(path, COMPLETE_MARKER), "w", encoding="utf-8") as fh:
        fh.write("ok\n")


def prune(output_dir: str, keep: int) -> List[str]:
    """Delete all but the newest ``keep`` complete checkpoints (and incomplete older ones).

    Returns:
        The deleted directories' names (``epoch-N``), so a copy elsewhere can be pruned alike.
    """
    root = checkpoint_root(output_dir)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    epochs = sorted((int(m.group(1)), n) for n in names if (m := _EPOCH_RE.match(n)))
    complete = [e for e, n in epochs if os.path.exists(os.path.join(root, n, COMPLETE_MARKER))]
    keep_set = set(complete[-keep:])
    newest = complete[-1] if complete else -1
    removed = []
    for epoch, name in epochs:
        if epoch not in keep_set and epoch < newest:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
    return removed
