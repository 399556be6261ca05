"""Broken days of Criteo TSV, planted on purpose: what validation must catch before a model trains on them.

Each kind is a bug that happens upstream of a CTR pipeline: a logging change that empties a column, a
re-keyed id space (every id new), a unit change (ms -> s), a changed click definition, a half-lost
day. :func:`plant` rewrites a day's files with one of them, so a team can drill its thresholds
(``ctr-volcano gen-data --bad-day``) and the tests can show each is caught.
"""
from __future__ import annotations

import gzip
import os
from typing import Callable, Dict, List, Optional

import numpy as np

from ctr_model.features import DENSE_COLUMNS, RAW_COLUMNS, SPARSE_COLUMNS
from ctr_volcano.errors import BadInput

__all__ = ["KINDS", "plant", "plant_in_place", "column_for", "parse_bad_day"]

#: What each kind does, and the column it takes by default.
KINDS: Dict[str, str] = {
    "empty-column": "every value of a column removed (default I5)",
    "rekey": "every id of a categorical column replaced by a new one (default C3)",
    "unit-x1000": "every value of a dense column multiplied by 1000 (default I6)",
    "label-x2": "the click rate doubled: non-clicks turned into clicks at random",
    "rows-10pct": "only every tenth line kept",
}
_DEFAULT_COLUMN = {"empty-column": "I5", "rekey": "C3", "unit-x1000": "I6"}


def _lines(path: str) -> List[bytes]:
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return fh.read().splitlines()


def _field_editor(kind: str, column: str, rng: np.random.Generator, rate: float) -> Callable[[List[bytes]], Optional[List[bytes]]]:
    index = RAW_COLUMNS.index(column) if column else -1

    def edit(fields: List[bytes]) -> Optional[List[bytes]]:
        if kind == "empty-column":
            fields[index] = b""
        elif kind == "rekey" and fields[index]:
            fields[index] = b"%08x" % (int(fields[index], 16) * 0x9E3779B1 + 0x7F4A7C15 & 0xFFFFFFFF)
        elif kind == "unit-x1000" and fields[index]:
            fields[index] = b"%d" % (int(fields[index]) * 1000)
        elif kind == "label-x2" and fields[0] == b"0" and rng.random() < rate / (1.0 - rate):
            fields[0] = b"1"
        return fields
    return edit


def column_for(kind: str, column: str = "") -> str:
    """The column ``kind`` is planted in (``column``, or the kind's default; ``""`` for a kind of
    whole rows).

    Raises:
        BadInput: an unknown kind, or a column of the wrong kind for it.
    """
    if kind not in KINDS:
        raise BadInput("bad_day", kind, f"use one of {', '.join(KINDS)}")
    column = column or _DEFAULT_COLUMN.get(kind, "")
    wanted = {"rekey": SPARSE_COLUMNS, "unit-x1000": DENSE_COLUMNS, "empty-column": RAW_COLUMNS[1:]}.get(kind)
    if wanted is not None and column not in wanted:
        raise BadInput("bad_day", f"{kind}:{column}", f"{kind} takes a column of {wanted[0]}..{wanted[-1]}")
    if wanted is None and column:
        raise BadInput("bad_day", f"{kind}:{column}", f"{kind} takes no column")
    return column


def plant_in_place(day_dir: str, kind: str, column: str = "", seed: int = 0) -> Dict[str, object]:
    """:func:`plant` into ``day_dir`` itself: its TSV files are replaced by the planted ones (written
    plain); other files (``oracle.json``) stay."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix=".planting-", dir=day_dir) as tmp:
        result = plant(day_dir, tmp, kind, column, seed)
        for name in os.listdir(day_dir):
            if name.endswith((".tsv", ".tsv.gz", ".txt")):
                os.remove(os.path.join(day_dir, name))
        for name in os.listdir(tmp):
            shutil.move(os.path.join(tmp, name), os.path.join(day_dir, name))
    return result


def plant(src_dir: str, out_dir: str, kind: str, column: str = "", seed: int = 0) -> Dict[str, object]:
    """Write ``src_dir``'s Criteo TSV files (plain or gzip) into ``out_dir`` (plain, same names without
    ``.gz``) with the bug ``kind`` planted; other files (``oracle.json``) are not copied.

    Returns:
        ``{"kind", "column", "rows_in", "rows_out"}``.

    Raises:
        BadInput: an unknown kind, or a column of the wrong kind for it.
    """
    column = column_for(kind, column)
    names = sorted(n for n in os.listdir(src_dir) if n.endswith((".tsv", ".tsv.gz", ".txt")))
    texts = {n: _lines(os.path.join(src_dir, n)) for n in names}
    labels = [line.split(b"\t", 1)[0] for lines in texts.values() for line in lines]
    rate = sum(x == b"1" for x in labels) / max(len(labels), 1)
    edit = _field_editor(kind, column, np.random.default_rng([seed, 0xBAD]), rate)
    os.makedirs(out_dir, exist_ok=True)
    rows_in = rows_out = 0
    for name, lines in texts.items():
        kept = lines[::10] if kind == "rows-10pct" else lines
        out = [b"\t".join(edit(line.split(b"\t"))) for line in kept]   # type: ignore[arg-type]
        with open(os.path.join(out_dir, name[:-3] if name.endswith(".gz") else name), "wb") as fh:
            fh.write(b"\n".join(out) + (b"\n" if out else b""))
        rows_in, rows_out = rows_in + len(lines), rows_out + len(out)
    return {"kind": kind, "column": column, "rows_in": rows_in, "rows_out": rows_out}


def parse_bad_day(text: str) -> Dict[str, str]:
    """``DATE:KIND[:COLUMN]`` (``--bad-day``) as ``{"date", "kind", "column"}``.

    Raises:
        BadInput: not in that form, or an unknown kind.
    """
    import datetime as dt

    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[1] not in KINDS:
        raise BadInput("--bad-day", text, f"use DATE:KIND[:COLUMN] with KIND one of {', '.join(KINDS)}, "
                                          f"e.g. 2026-01-05:rekey:C3")
    try:
        dt.date.fromisoformat(parts[0])
    except ValueError:
        raise BadInput("--bad-day", text, "start with an ISO date, e.g. 2026-01-05:rekey:C3") from None
    try:
        column = column_for(parts[1], parts[2] if len(parts) == 3 else "")
    except BadInput as exc:
        raise BadInput("--bad-day", text, exc.fix) from None
    return {"date": parts[0], "kind": parts[1], "column": column}
