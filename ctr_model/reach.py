"""Can a (non-root) user reach a directory: the first directory on its path that stops them.

Why: the gang's pods run as a non-root UID, and a shared directory (a claim's host directory, a
mount under someone's home) is only usable when every directory above it lets that UID through
(the execute bit) and the last one lets it write. Without a check, the pservers die later on
``PermissionError: [Errno 13]`` with a traceback, and Volcano restarts a gang that cannot get
better. One pure walk over ``stat`` results answers it up front, for ``ctr-volcano minicluster up``
(before anything starts) and for each role when it opens its output directory (exit code 2, one
line naming the directory).
"""
from __future__ import annotations

import os
import stat as st
from dataclasses import dataclass
from typing import Callable, Collection, Optional, Tuple

__all__ = ["Blocker", "first_blocker", "blocker_of_process"]


@dataclass(frozen=True)
class Blocker:
    """The directory that stops the user, and why.

    Attributes:
        path: the directory.
        mode: its permission bits.
        owner: its owner's UID.
        group: its group's GID.
        needs: ``"traverse"`` (execute) or ``"write"`` (write and execute).
    """

    path: str
    mode: int
    owner: int
    group: int
    needs: str

    def describe(self, uid: int) -> str:
        """One line: which directory, its mode and owner, and what the user lacks."""
        return (f"{self.path} (mode {self.mode:04o}, owner {self.owner}:{self.group}) does not let "
                f"uid {uid} {self.needs}")


def _allowed(mode: int, owner: int, group: int, uid: int, gids: Collection[int], bits: int) -> bool:
    """POSIX permission check: owner bits if uid owns it, else group bits if in its group, else other."""
    if uid == 0:
        return True
    if uid == owner:
        have = (mode >> 6) & 7
    elif group in gids:
        have = (mode >> 3) & 7
    else:
        have = mode & 7
    return have & bits == bits


def first_blocker(path: str, uid: int, gids: Collection[int], *, write: bool = True,
                  stat: Callable[[str], os.stat_result] = os.stat) -> Optional[Blocker]:
    """The first directory on the absolute ``path`` that ``uid`` (in groups ``gids``) cannot pass.

    Every existing directory from ``/`` down must allow traversal; with ``write``, the deepest
    existing one (where ``path`` or its missing parents would be created) must also allow writing.
    Missing components end the walk. Returns ``None`` when the user gets through.
    """
    parts = [p for p in os.path.normpath(path).split(os.sep) if p]
    deepest: Optional[Tuple[str, os.stat_result]] = None
    chain = [os.sep] + [os.path.join(os.sep, *parts[:i + 1]) for i in range(len(parts))]
    for current in chain:
        try:
            info = stat(current)
        except FileNotFoundError:
            break
        if not st.S_ISDIR(info.st_mode):
            break
        deepest = (current, info)
        if not _allowed(info.st_mode, info.st_uid, info.st_gid, uid, gids, 1):
            return Blocker(current, st.S_IMODE(info.st_mode), info.st_uid, info.st_gid, "traverse")
    if write and deepest is not None:
        where, info = deepest
        if not _allowed(info.st_mode, info.st_uid, info.st_gid, uid, gids, 3):
            return Blocker(where, st.S_IMODE(info.st_mode), info.st_uid, info.st_gid, "write")
    return None


def blocker_of_process(path: str, write: bool = True) -> Optional[Blocker]:
    """:func:`first_blocker` for this process's own UID and groups."""
    gids = {os.getgid(), *os.getgroups()}
    return first_blocker(path, os.getuid(), gids, write=write)
