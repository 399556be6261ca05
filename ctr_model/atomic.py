"""Files that appear whole or not at all: write aside in the same directory, then rename over.

A reader (another role, a resumed attempt, the step that collects outputs) never sees half a file,
and a crash leaves the previous version in place. Standard library only: the trainer image and the
component image both use it.
"""
from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["write_text", "write_json"]


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (its directory must exist)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str, data: Any, *, indent: int = 2, sort_keys: bool = False) -> None:
    """Write ``data`` as JSON (and a final newline) to ``path`` atomically; ``default=str`` for the rest."""
    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys, default=str) + "\n")
