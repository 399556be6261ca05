"""The training gang's roles: ``python -m ctr_model.train [--config FILE]`` is the one entrypoint of
every pod, pserver or trainer, on Volcano and in the local gang alike (:mod:`.__main__`).

The pod's role, index and peers come only from Volcano's contract (``VC_TASK_INDEX`` and the svc
plugin's host lists) plus the product's ``CTR_*`` variables; :func:`ctr_model.contract.parse_role_env`
reads and validates every variable the role uses, in one place, and
:func:`ctr_model.contract.paddle_env` derives Paddle's, so Paddle never silently falls back to a local
single worker.

One module per job (measured facts about Paddle 2.6 and 3.0 PS mode behind each step are in the
project notes):

* :mod:`.__main__` -- the boundary: parse the contract and the config, open the outputs, run the
  role, end the process with the exit code of its error's family (:mod:`.exits`).
* :mod:`.pserver` -- the pserver role: checks its port is free (Paddle would exit 0 silently), serves
  until trainer 0 stops it, and fails if it was stopped any other way.
* :mod:`.trainer` -- the trainer role: checks its inputs, converts its whole Parquet shards while Paddle
  starts (:mod:`.dataset`), trains (:mod:`.epochs`), exports (:mod:`.export`), writes the metrics
  (:mod:`.metrics`), and trainer 0 stops the pservers after a barrier.
* :mod:`.program` -- the Paddle program both roles build (fleet, network, optimizer).
* :mod:`.peers` -- finding the gang's peers: host names that resolve, ports that accept.
* :mod:`.epochs` -- the epoch loop, through the C++ dataset (the only path that refreshes dense
  weights in async mode), with :mod:`.progress` (the log lines the stall watchdogs read).
* :mod:`.checkpoints` -- resuming, deciding and writing the collective per-epoch checkpoints.
* :mod:`.export` -- trainer 0's export of the final checkpoint as the model.
* :mod:`.scratch` -- each role's local disk: the slot-text cache, the scratch directory of
  object-store runs, a full disk in one line.

Outputs go through a :mod:`ctr_model.workspace`: a shared directory, or with ``s3://`` locations
(:mod:`ctr_model.store`) each role's own scratch directory, from which trainers download their own
shards and every role uploads what it wrote; pservers fetch the checkpoint to resume from before
serving and upload their tables when trainer 0 asks.

Every module logs to the one logger ``ctr_model.train`` (:data:`log`): the local gang forwards its
lines to the step log, and they are the heartbeat both backends' stall watchdogs read.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctr_model.contract import RoleSpec

__all__ = ["log", "say", "MODEL_DIR", "METRICS_FILE", "MODEL_META", "DENSE_FILE"]

#: The exported model, under the gang's output directory.
MODEL_DIR = "model"
#: Trainer 0's summary of the run, under the output directory.
METRICS_FILE = "metrics.json"
#: The model's metadata, in :data:`MODEL_DIR`.
MODEL_META = "model_meta.json"
#: The dense parameters, in :data:`MODEL_DIR`.
DENSE_FILE = "dense.npz"

#: The role's logger (one name for every module: see the module docstring).
log = logging.getLogger("ctr_model.train")


def say(spec: "RoleSpec", msg: str) -> None:
    """Log ``msg`` as this role's (``trainer-0: ...``)."""
    log.info("%s: %s", spec.name, msg)
