"""Output directories checked before the work that fills them.

An unwritable output found only after an hour of training loses the hour; every verb that writes a
directory calls :func:`writable_dir` at its boundary, before any long work starts.
"""
from __future__ import annotations

import os
import tempfile

from ctr_volcano.errors import BadInput

__all__ = ["writable_dir"]


def writable_dir(field: str, path: str) -> str:
    """Create ``path`` if needed and prove a file can be written in it; returns its absolute path.

    Args:
        field: the flag or parameter that named the directory (for the error message).
        path: the directory.

    Raises:
        BadInput: the directory cannot be created or written (names ``field``, ``path`` and why).
    """
    path = os.path.abspath(os.fspath(path))
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise BadInput(field, path, f"cannot write there ({exc.strerror or exc}): choose a writable "
                                    f"directory") from None
    return path
