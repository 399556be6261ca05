"""A full volume (ENOSPC) as one line naming the path, the bytes to write and the bytes free.

Why: an ``OSError: [Errno 28] No space left on device`` from deep inside a copy, NumPy or pyarrow
names neither the volume nor how much room the write needed, so nobody can tell whether to free a
few files or to ask for a volume ten times larger. Every write of the hand-off (checkpoint markers,
the export, the step's copies, the registry) runs inside :func:`one_line_if_full`, the one place
that turns ENOSPC into :class:`NoSpace`. Standard library only (and :mod:`ctr_model.errors`): the trainer image and the
component image both use it.
"""
from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Union

from ctr_model.errors import BadInput, VolumeFull

__all__ = ["NoSpace", "is_enospc", "tree_bytes", "free_bytes", "one_line_if_full", "copy_tree"]


class NoSpace(VolumeFull, OSError):
    """ENOSPC on ``path``: ``needed`` bytes to write (at least, with ``at_least``), ``free`` free.

    A :class:`~ctr_model.errors.VolumeFull` (bad input: a retry fills the volume again) naming the
    field ``path``, and an ``OSError`` with ``errno.ENOSPC``, so handlers of ``OSError`` keep working.
    """

    def __init__(self, path: str, needed: int, free: int, *, at_least: bool = False):
        self.path, self.at_least = path, at_least
        VolumeFull.__init__(self, "path", path, needed, free, at_least)
        self.errno, self.strerror, self.filename = errno.ENOSPC, BadInput.__str__(self), path

    def __str__(self) -> str:
        return BadInput.__str__(self)


def is_enospc(exc: BaseException) -> bool:
    """Whether ``exc`` is a full device (pyarrow raises a plain ``OSError`` saying ``[errno 28]``)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno == errno.ENOSPC or f"[errno {errno.ENOSPC}]" in str(exc).lower()


def tree_bytes(path: str, *, allocated: bool = False) -> int:
    """Bytes in the regular files at ``path`` (a file or a directory tree); 0 when it is missing.

    ``allocated``: the blocks they take on disk (what they cost the volume) instead of their sizes.
    """
    def size(st: os.stat_result) -> int:
        return st.st_blocks * 512 if allocated else st.st_size

    if os.path.isfile(path):
        return size(os.lstat(path))
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += size(os.lstat(os.path.join(root, name)))
            except FileNotFoundError:
                pass
    return total


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path`` (or its
    nearest existing parent)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


@contextmanager
def one_line_if_full(path: str, needed: Union[int, Callable[[], int], None] = None, *,
                     cleanup: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Turn ENOSPC raised inside the block into :class:`NoSpace` for ``path``.

    Args:
        path: what the block writes (named in the message; its filesystem is measured).
        needed: the bytes the block writes, or a function computing them after the failure; ``None``:
            unknown, so the message gives a lower bound: the blocks the block had filled under
            ``path`` plus the bytes still free when it failed.
        cleanup: removes the block's half-written output; called before the free space is measured.
    """
    try:
        yield
    except OSError as exc:
        if not is_enospc(exc):
            raise
        if isinstance(exc, NoSpace) and cleanup is None:
            raise
        known: Optional[int] = needed() if callable(needed) else needed
        if isinstance(exc, NoSpace):
            known = exc.needed if known is None else known
        # unknown: what the block wrote plus the room it still had (not enough) is a lower bound
        amount = tree_bytes(path, allocated=True) + free_bytes(path) if known is None else known
        if cleanup is not None:
            cleanup()
        raise NoSpace(path, amount, free_bytes(path), at_least=known is None) from None


def copy_tree(src: str, dst: str, *, dirs_exist_ok: bool = False) -> str:
    """``shutil.copytree(src, dst)``, failing with :class:`NoSpace` (the source's size) when full.

    When the volume fills, the half copy is removed (``dst`` itself, or with ``dirs_exist_ok`` the
    entries named as ``src``'s), so none is left and the free space reported is the volume's
    without it.
    """
    with one_line_if_full(dst, lambda: tree_bytes(src),
                          cleanup=lambda: _remove_copy(src, dst, whole=not dirs_exist_ok)):
        shutil.copytree(src, dst, dirs_exist_ok=dirs_exist_ok)
    return dst


def _remove_copy(src: str, dst: str, *, whole: bool) -> None:
    if whole:
        shutil.rmtree(dst, ignore_errors=True)
        return
    for name in os.listdir(src):
        path = os.path.join(dst, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
