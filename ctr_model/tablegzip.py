"""The compression level of the pservers' table files.

Paddle's pservers write every table file of a checkpoint (``part-*.gz``) through the ``gzip``
program found on ``PATH``, at gzip's default level 6. For 407k sparse keys (16 shards of 9.8 MB of
text) that took 9 s per checkpoint on 2 cores, as long as half an epoch of 1M rows; at level 1 one
shard compresses in 0.21 s instead of 0.68 s and comes out 16% larger (docs/performance.md). A
pserver therefore puts a ``gzip`` of its own first on its ``PATH``: a two-line script that runs the
real one with ``-LEVEL`` (decompression ignores the level, so loading is unchanged).
"""
from __future__ import annotations

import os
import shlex
import shutil
from typing import Optional

__all__ = ["TABLE_GZIP_LEVEL", "use_fast_gzip"]

#: gzip level of the pservers' table files.
TABLE_GZIP_LEVEL = 1


def use_fast_gzip(bin_dir: str, level: int = TABLE_GZIP_LEVEL) -> Optional[str]:
    """Write ``bin_dir/gzip`` (runs the real gzip at ``level``) and put ``bin_dir`` first on this
    process's ``PATH``; returns the real gzip's path, or ``None`` (nothing changed) without one."""
    real = shutil.which("gzip")
    if real is None or os.path.dirname(os.path.abspath(real)) == os.path.abspath(bin_dir):
        return None
    os.makedirs(bin_dir, exist_ok=True)
    script = os.path.join(bin_dir, "gzip")
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(f'#!/bin/sh\nexec {shlex.quote(real)} -{int(level)} "$@"\n')
    os.chmod(script, 0o755)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return real
