"""Inputs on the object store, brought here before scoring.

``ctr-volcano score --input s3://bucket/candidates/day=2026-12-06/`` (or one object, or KFP's
``minio://``) reads the store the ``CTR_S3_*`` variables and the AWS keys name, as training does
(:mod:`ctr_model.store`). Each remote input is checked first (reachable bucket, something under the
URI: a one-line error naming ``--input`` otherwise), then downloaded under the output directory and
read as a local file or directory is; the rejects and ``scores.json`` name each row's object by its
URI, not by the copy. The copies go when the run ends.
"""
from __future__ import annotations

import logging
import os
from typing import Dict, List, Sequence, Tuple

__all__ = ["REMOTE_SCHEMES", "STAGE_DIR", "is_remote", "stage_inputs"]

logger = logging.getLogger(__name__)

#: Input URIs read from the object store.
REMOTE_SCHEMES = ("s3://", "minio://")
#: The copies of remote inputs, under the output directory while the run lasts.
STAGE_DIR = ".inputs"


def is_remote(item: str) -> bool:
    return str(item).startswith(REMOTE_SCHEMES)


def stage_inputs(inputs: Sequence[str], scratch: str) -> Tuple[List[str], Dict[str, str]]:
    """``(inputs with each remote one replaced by its local copy under scratch, {copied file: its
    URI})``; local inputs pass through unchanged.

    Raises:
        StoreError: naming ``--input``: refused credentials, no such bucket, nothing under the URI.
        StoreUnreachable: the store stayed unreachable through the retries.
    """
    from ctr_model.store import Store, StoreConfig

    local: List[str] = []
    origin: Dict[str, str] = {}
    store = None
    for k, item in enumerate(inputs):
        if not is_remote(item):
            local.append(item)
            continue
        uri = "s3://" + str(item).split("://", 1)[1]      # as written (the errors name it), minio:// as s3://
        store = store or Store(StoreConfig.from_env())
        store.check_prefix(uri, field="--input")
        dst = os.path.join(scratch, str(k), uri.rstrip("/").rsplit("/", 1)[-1])
        store.download(uri, dst)
        local.append(dst)
        copied = _origins(dst, str(item))
        origin.update(copied)
        logger.info("downloaded %s (%d file(s)) to %s", item, len(copied), dst)
    return local, origin


def _files(path: str) -> List[str]:
    if os.path.isfile(path):
        return [path]
    return sorted(os.path.join(d, n) for d, _, names in os.walk(path) for n in names)


def _origins(dst: str, uri: str) -> Dict[str, str]:
    """Each downloaded file's URI: the object's own, or the prefix's plus its path below it."""
    if os.path.isfile(dst):
        return {dst: uri}
    base = uri.rstrip("/")
    return {f: f"{base}/{os.path.relpath(f, dst)}" for f in _files(dst)}
