"""Each role's local disk: the trainers' slot-text cache, the scratch directory of object-store runs,
and a full disk outside the guarded writes told in one line.

Where they go is the contract's (``CTR_CACHE_DIR``, ``CTR_SCRATCH_DIR``: :class:`RoleSpec`'s
``cache_dir`` and ``scratch_dir``); on Volcano both are the pod's emptyDir, in the local gang the
attempt's directory, which the gang removes even when a role was killed.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional

from ctr_model import store as s3
from ctr_model.contract import RoleSpec
from ctr_model.errors import BadInput
from ctr_model.space import free_bytes, is_enospc

__all__ = ["cache_dir", "enter_scratch", "leave_scratch", "full_elsewhere"]


def cache_dir(spec: RoleSpec) -> str:
    """This process's own directory under the role's cache (removed when the role is done)."""
    return os.path.join(spec.cache_dir, f"{spec.job_id}-{spec.name}-{os.getpid()}")


def enter_scratch(spec: RoleSpec) -> Optional[str]:
    """With data or outputs in the store, a scratch directory of the role's own as its working
    directory (returned, for :func:`leave_scratch`): the relative paths Paddle passes between roles
    then land on each role's own disk (see ctr_model.workspace). ``None`` with a shared volume.

    Raises:
        BadInput: the scratch directory cannot be made (``CTR_SCRATCH_DIR``).
    """
    if not (s3.is_uri(spec.output_dir) or s3.is_uri(spec.data_dir)):
        return None
    try:
        os.makedirs(spec.scratch_dir, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=f"{spec.job_id}-{spec.name}-", dir=spec.scratch_dir)
    except OSError as exc:
        if is_enospc(exc):
            raise
        raise BadInput("CTR_SCRATCH_DIR", spec.scratch_dir, f"cannot make the role's scratch directory there "
                                                            f"({exc.strerror or exc}): give it a writable "
                                                            f"directory") from None
    os.chdir(scratch)
    return scratch


def leave_scratch(scratch: Optional[str]) -> None:
    """Leave and remove the directory :func:`enter_scratch` made (nothing without one)."""
    if scratch is not None:
        os.chdir("/")
        shutil.rmtree(scratch, ignore_errors=True)


def full_elsewhere(exc: OSError, output_dir: str) -> BadInput:
    """An ENOSPC outside the guarded writes (a log, Paddle's own files) as bad input in one line: a
    restarted gang would fill the volume again."""
    room = "" if s3.is_uri(output_dir) else f"; {free_bytes(output_dir)} bytes free in {output_dir}"
    return BadInput("path", exc.filename or output_dir,
                    f"no space left on device ({exc}){room}: free space on that volume or give it more room")
