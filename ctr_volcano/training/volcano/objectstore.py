"""Data and model hand-off through the object store (the Volcano backend's no-volume mode).

Why: many clusters have no ReadWriteMany storage, but every KFP install has an object store, and the
step's input artifact already lives there. In this mode the step gives the gang the input artifact's
URI (KFP's ``minio://`` form mapped to ``s3://`` on the same endpoint) and a run-scoped output prefix
``<root>/<job>/output``; the gang's pods read and write them with credentials taken from a Secret by
reference (see :class:`~ctr_volcano.training.store_access.ObjectStore`); after success the step copies
``output/model`` into its KFP Model output and deletes the run-scoped objects.

A step given a local data directory instead (the CLI) uploads it once to ``<root>/<job>/data``
(marked complete last, so a re-attached step reuses it).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from ctr_volcano.errors import BadInput
from ctr_volcano.util.outputs import room_for

logger = logging.getLogger(__name__)

__all__ = ["StoreRun", "to_s3_uri", "default_root", "prepare_store_run", "collect_model",
           "cleanup_run", "RUNS_PREFIX", "run_uris"]

#: Prefix (inside the bucket) of the run-scoped directories.
RUNS_PREFIX = "ctr-runs"
_DONE = ".ctr-upload-complete"


@dataclass(frozen=True)
class StoreRun:
    """The URIs of one run in the store.

    Attributes:
        root: ``<root>/<job>``: everything of this run (deleted on success).
        data_uri: the prep output the trainers read (the input artifact, or an upload under root).
        output_uri: where the gang writes ``model/``, ``metrics.json`` and ``checkpoints/``.
        uploaded: whether this call uploaded the data.
    """

    root: str
    data_uri: str
    output_uri: str
    uploaded: bool


def to_s3_uri(uri: str, field: str = "train_data") -> str:
    """KFP artifact URIs on an S3-compatible store as ``s3://`` (``minio://b/k`` -> ``s3://b/k``)."""
    for scheme in ("minio://", "s3://"):
        if uri.startswith(scheme):
            rest = uri[len(scheme):].strip("/")
            if rest:
                return "s3://" + rest
    raise BadInput(field, uri, "in object-store mode pass an s3:// or minio:// URI (the artifact's "
                               ".uri), or a local directory to upload")


def default_root(data_uri: str) -> str:
    """``s3://<the data's bucket>/ctr-runs``: run directories live beside KFP's own artifacts."""
    bucket = data_uri[len("s3://"):].split("/", 1)[0]
    return f"s3://{bucket}/{RUNS_PREFIX}"


def run_uris(data: Optional[str], job_name: str, root: Optional[str] = None) -> Tuple[str, str, str]:
    """``(run root, data URI, output URI)`` of job ``job_name`` in the store (nothing is touched).

    Args:
        data: the prep output's ``s3://``/``minio://`` URI (read in place), or a local directory (or
            ``None``), which is uploaded under the run root.
        job_name: the Volcano Job name (one run directory per job).
        root: where run directories go; default :func:`default_root` of the data (required when the
            data is local).
    """
    from ctr_model import store as s3

    local = not (data and (data.startswith("s3://") or data.startswith("minio://")))
    if local and not root:
        raise BadInput("s3_root", root, "with local data give an s3://BUCKET/PREFIX to upload it to")
    data = None if local else to_s3_uri(str(data))
    root = (root or default_root(str(data))).rstrip("/")
    if not s3.is_uri(root):
        raise BadInput("s3_root", root, "use an s3://BUCKET/PREFIX URI")
    run_root = s3.join(root, job_name)
    return run_root, s3.join(run_root, "data") if local else str(data), s3.join(run_root, "output")


def prepare_store_run(client, data: str, job_name: str, root: Optional[str] = None,
                      log: Callable[[str], None] = logger.info) -> StoreRun:
    """Check the input in the store (or upload a local prep dir) and derive the run's URIs.

    Args:
        client: a :class:`ctr_model.store.Store` signed with the step's credentials.
        data: the input artifact's URI (``s3://``/``minio://``) or a local prep directory.
        job_name: the Volcano Job name (one run directory per job).
        root: where run directories go; default :func:`default_root` of the data (or required when
            the data is local).

    Raises:
        BadInput: naming the field, the URI and the fix (unreachable store, wrong credentials,
            missing bucket/prefix, not a prep output, too few shards are checked by the caller).
    """
    from ctr_model import store as s3

    local = not (data.startswith("s3://") or data.startswith("minio://"))
    if local and not os.path.isdir(data):
        raise BadInput("train_data", data, "pass the data-prep output directory or its s3:// URI")
    run_root, data_uri, output_uri = run_uris(data, job_name, root)
    try:
        client.check_bucket(run_root)
        uploaded = False
        if local:
            if client.read_bytes(s3.join(data_uri, _DONE)) is None:
                client.upload(data, data_uri)
                client.write_bytes(s3.join(data_uri, _DONE), json.dumps({"from": data}).encode())
                uploaded = True
                log(f"[volcano] uploaded {data} to {data_uri}")
        else:
            client.check_prefix(data_uri)
    except s3.StoreError as exc:
        raise BadInput("train_data" if not local else "s3_root", data if not local else root,
                       str(exc)) from None
    return StoreRun(root=run_root, data_uri=data_uri, output_uri=output_uri, uploaded=uploaded)


def collect_model(client, run: StoreRun, model_dir: str) -> dict:
    """Copy ``output/model`` into the step's Model output; returns the gang's ``metrics.json``."""
    from ctr_model import store as s3

    model_uri = s3.join(run.output_uri, "model")
    if not client.exists(model_uri):
        raise BadInput("output_uri", run.output_uri, "the gang wrote no model/ here; check the trainer-0 log")
    os.makedirs(model_dir, exist_ok=True)
    with room_for("model_dir", model_dir):   # the store knows the model's size: NoSpace names it
        client.download(model_uri, model_dir)
    raw = client.read_bytes(s3.join(run.output_uri, "metrics.json"))
    return json.loads(raw.decode()) if raw else {}


def cleanup_run(client, run: StoreRun) -> None:
    """Delete the run's objects (checkpoints, coordination files, uploaded data, model copy)."""
    client.delete(run.root)
