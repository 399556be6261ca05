"""``python -m ctr_model.train [--config FILE]``: the one entrypoint of every training pod.

The boundary of the role: it reads the contract and the config (refusing to run half-configured),
opens the outputs, runs the pserver or the trainer, and ends the process with the exit code of its
error's family (:func:`ctr_model.errors.exit_code_of`): 0 success, 2 bad input (the contract, the
config, the data, a taken port, a full volume: the gang does not restart), 75 an outage that outlived
its retries (the object store), 1 any other failure (the gang restarts up to ``max_retry``).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Tuple

from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.config import TrainConfig
from ctr_model.contract import PSERVER, RoleSpec, paddle_env, parse_role_env
from ctr_model.errors import BadInput
from ctr_model.logs import setup_logging
from ctr_model.pid1 import supervise_if_pid1
from ctr_model.space import is_enospc
from ctr_model.train.exits import exit_with, report
from ctr_model.train.scratch import enter_scratch, full_elsewhere, leave_scratch

__all__ = ["main"]


def _read_config(path: Optional[str], spec: RoleSpec) -> Tuple[TrainConfig, bool]:
    """The training config (``--config FILE``, else ``CTR_TRAIN_CONFIG``) and whether it names
    ``hash_buckets`` (otherwise they follow the data)."""
    text = spec.train_config_json
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise BadInput("--config", path, f"cannot read it ({exc.strerror or exc}): pass a readable "
                                             f"TrainConfig JSON file") from None
    return TrainConfig.from_json(text), '"hash_buckets"' in text


def _check_reachable(output_dir: str) -> None:
    """Fail at once, naming the directory, when this role's user cannot reach the shared output
    directory (a mount under a directory it cannot traverse): a restart cannot fix that."""
    from ctr_model.reach import blocker_of_process

    blocker = blocker_of_process(output_dir)
    if blocker is not None:
        raise BadInput("CTR_OUTPUT_DIR", output_dir, f"unreachable: {blocker.describe(os.getuid())}; mount the "
                                                     f"shared volume where this user can reach it, or fix that "
                                                     f"directory's permissions")


def _run(spec: RoleSpec, config: TrainConfig, explicit_buckets: bool) -> None:
    """Open the outputs and run the role (the pod's working directory a scratch of its own when the
    data or the outputs are in a store)."""
    from ctr_model.net import prepare_paddle
    from ctr_model.train.pserver import run_pserver
    from ctr_model.train.trainer import run_trainer

    scratch = enter_scratch(spec)
    try:
        ws = wsp.open_workspace(spec.output_dir, store=spec.store)
        if not s3.is_uri(spec.output_dir):
            _check_reachable(spec.output_dir)
        os.environ.update(paddle_env(spec))
        prepare_paddle()
        if spec.role == PSERVER:
            run_pserver(spec, config, ws)
        else:
            run_trainer(spec, config, ws, explicit_buckets)
    finally:
        leave_scratch(scratch)


def main(argv: Optional[List[str]] = None) -> int:
    """Run this pod's role; returns the exit code (see the module docstring)."""
    setup_logging()
    supervised = supervise_if_pid1("ctr_model.train", sys.argv[1:] if argv is None else argv)
    if supervised is not None:
        return supervised
    parser = argparse.ArgumentParser(prog="python -m ctr_model.train",
                                     description="CTR parameter-server role (pserver or trainer).")
    parser.add_argument("--config", help="TrainConfig JSON file (default: $CTR_TRAIN_CONFIG)")
    args = parser.parse_args(argv)
    spec: Optional[RoleSpec] = None
    try:
        spec = parse_role_env()
        config, explicit_buckets = _read_config(args.config, spec)
        _run(spec, config, explicit_buckets)
    except Exception as exc:
        if spec is not None and isinstance(exc, OSError) and is_enospc(exc) and not isinstance(exc, BadInput):
            exc = full_elsewhere(exc, spec.output_dir)   # a restart fills the volume again
        return report(spec.name if spec is not None else "role", exc)
    return 0


if __name__ == "__main__":
    exit_with(main())
