"""Which files of a build context a Dockerfile's ``.dockerignore`` lets through, as Docker decides.

Why: an image's cache key must change exactly when what the build can ``COPY`` changes, and no more
(a test run writes ``__pycache__`` everywhere; ``.venv`` is gigabytes). So the key hashes the files
this module admits, with the rules of Docker's own matcher (``moby/patternmatcher``): patterns are
cleaned paths relative to the context (a leading ``/`` and a trailing ``/`` mean nothing), ``*``
and ``?`` stay inside one path segment, ``**`` spans any number of segments (none included), a
pattern matches a path when it matches the path or one of its parent directories, ``!`` re-admits,
and the last matching line wins. ``Dockerfile.X.dockerignore`` beside ``Dockerfile.X`` takes
precedence over the context's ``.dockerignore`` (BuildKit and buildah both read it).

Stdlib only.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator, List, Optional, Pattern, Tuple

__all__ = ["ignore_file_for", "read_patterns", "compile_pattern", "excluded", "admitted_files"]


def ignore_file_for(dockerfile: Path, context: Path) -> Optional[Path]:
    """``<dockerfile>.dockerignore`` if it exists, else the context's ``.dockerignore``, else None."""
    own = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if own.is_file():
        return own
    shared = context / ".dockerignore"
    return shared if shared.is_file() else None


def read_patterns(path: Optional[Path]) -> List[Tuple[bool, str]]:
    """``(negated, cleaned pattern)`` per non-comment line of an ignore file (none for ``None``)."""
    if path is None:
        return []
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negated else line).lstrip("/")
        if pattern in ("", "."):
            continue
        out.append((negated, pattern))
    return out


def compile_pattern(pattern: str) -> Pattern[str]:
    """A regular expression matching the paths ``pattern`` matches (not yet its parents' rule)."""
    out, i = "^", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + "$")


def excluded(rel: str, rules: List[Tuple[bool, Pattern[str]]]) -> bool:
    """Whether the context path ``rel`` is left out: the last rule matching it or a parent wins."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    verdict = False
    for negated, regex in rules:
        if any(regex.match(c) for c in candidates):
            verdict = not negated
    return verdict


def admitted_files(context: Path, ignore_file: Optional[Path]) -> Iterator[str]:
    """Every regular file or symlink of ``context`` the ignore file lets through, as sorted relative
    paths. A directory whose every possible content is excluded is not walked (``.git``, ``.venv``):
    that holds when it is excluded and no ``!`` rule could re-admit something below it."""
    rules = [(neg, compile_pattern(p)) for neg, p in read_patterns(ignore_file)]
    negations = [p for neg, p in read_patterns(ignore_file) if neg]
    for root, dirs, files in os.walk(context):
        rel_root = os.path.relpath(root, context)
        prefix = "" if rel_root == "." else rel_root + "/"
        dirs[:] = sorted(d for d in dirs if not (excluded(prefix + d, rules) and not any(
            n.startswith(prefix + d + "/") or "*" in n or "?" in n for n in negations)))
        for name in sorted(files):
            if not excluded(prefix + name, rules):
                yield prefix + name
