"""Output directories checked before the work that fills them.

An unwritable output found only after an hour of training loses the hour; every verb that writes a
directory calls :func:`writable_dir` at its boundary, before any long work starts.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Union

from ctr_volcano.errors import BadInput, VolumeFull

__all__ = ["writable_dir", "room_for"]


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


@contextmanager
def room_for(field: str, path: str, needed: Union[int, Callable[[], int], None] = None, *,
             cleanup: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Run a block that writes ``path``; a full volume becomes :class:`VolumeFull` naming ``field``.

    Args:
        field: the parameter or flag that named the destination.
        path: what the block writes.
        needed: its bytes (or a function computing them); see :func:`ctr_model.space.one_line_if_full`.
        cleanup: removes the block's half-written output before the free space is measured.
    """
    from ctr_model.space import NoSpace, one_line_if_full

    try:
        with one_line_if_full(path, needed, cleanup=cleanup):
            yield
    except NoSpace as exc:
        raise VolumeFull(field, exc.path, exc.needed, exc.free, exc.at_least) from None
