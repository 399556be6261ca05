"""Parse a piece of Criteo TSV with pyarrow's CSV reader, reject bad lines by reason, and transform.

The fast path parses a whole piece at once; a piece pyarrow cannot parse as-is goes through a careful
path that checks field counts line by line and bisects the rest with the same parser, so every bad
line is rejected with its reason and every good line is kept. :func:`transform` applies
:mod:`ctr_model.features` (the code training, evaluation and serving use).
"""
from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

import numpy as np

from ctr_model.features import DENSE_COLUMNS, LABEL, RAW_COLUMNS, SPARSE_COLUMNS, hash_categorical

__all__ = ["parse_block", "transform", "looks_like_header"]


_PARSE_OPTS = None


def _csv_options():
    global _PARSE_OPTS
    if _PARSE_OPTS is None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        types = {LABEL: pa.int64()}
        types.update({c: pa.int64() for c in DENSE_COLUMNS})
        types.update({c: pa.binary() for c in SPARSE_COLUMNS})
        _PARSE_OPTS = (
            pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=True,
                              block_size=4 << 20),
            pacsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False,
                               escape_char=False, newlines_in_values=False,
                               ignore_empty_lines=False),
            pacsv.ConvertOptions(column_types=types, check_utf8=False, null_values=[""],
                                 strings_can_be_null=False, quoted_strings_can_be_null=False,
                                 include_columns=list(RAW_COLUMNS)),
        )
    return _PARSE_OPTS


def _read(text: bytes, use_threads: bool = False):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read_opts, parse_opts, convert_opts = _csv_options()
    if not use_threads:  # one lane per worker: Arrow's 1 MiB parse blocks, no thread hand-offs
        read_opts = pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=False)
    try:
        return pacsv.read_csv(pa.py_buffer(text), read_options=read_opts,
                              parse_options=parse_opts, convert_options=convert_opts)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc):
            raise
    # A line longer than Arrow's parse block (a huge categorical value): parse the text as one block.
    one_block = pacsv.ReadOptions(column_names=list(RAW_COLUMNS), use_threads=False,
                                  block_size=len(text) + 1)
    return pacsv.read_csv(pa.py_buffer(text), read_options=one_block,
                          parse_options=parse_opts, convert_options=convert_opts)


_COLUMN_RE = re.compile(r"column #(\d+)")
_VALUE_RE = re.compile(r"invalid value '(.*)'", re.S)


def _reason_from_error(msg: str) -> Tuple[str, str]:
    """(category, detail) of a pyarrow CSV error on a single line."""
    col = _COLUMN_RE.search(msg)
    val = _VALUE_RE.search(msg)
    value = repr(val.group(1)[:40]) if val else "?"
    if col is not None and int(col.group(1)) == 0:
        return "label not 0/1", f"label not 0/1: {value}"
    if col is not None and 1 <= int(col.group(1)) <= len(DENSE_COLUMNS):
        name = RAW_COLUMNS[int(col.group(1))]
        return "non-integer in integer column", f"non-integer in integer column {name}: {value}"
    if "Expected" in msg and "columns" in msg:
        return "wrong field count", msg.strip().splitlines()[0][:120]
    return "wrong field count", f"unparseable line: {msg.strip().splitlines()[0][:120]}"


def parse_block(text: bytes, n_lines: int
                 ) -> Tuple[Any, np.ndarray, List[Tuple[int, str, str, bytes]]]:
    """Parse a block of ``n_lines`` whole lines; returns (table, row line indices, rejects)."""
    import pyarrow as pa

    try:
        table = _read(text)
        if table.num_rows == n_lines:
            return _check_labels(table, np.arange(n_lines, dtype=np.int64), [], text_lines=None,
                                 text=text)
    except pa.ArrowInvalid:
        pass
    return _parse_careful(text)


def _parse_careful(text: bytes):
    import pyarrow as pa

    lines = text.split(b"\n")
    if text.endswith(b"\n"):
        lines.pop()
    rejects: List[Tuple[int, str, str, bytes]] = []
    good_idx: List[int] = []
    good_lines: List[bytes] = []
    expected_tabs = len(RAW_COLUMNS) - 1
    for i, line in enumerate(lines):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            rejects.append((i, "empty line", "empty line", line))
        elif b"\r" in line:
            rejects.append((i, "carriage return inside line",
                            "carriage return inside line", line))
        elif line.count(b"\t") != expected_tabs:
            fields = line.count(b"\t") + 1
            rejects.append((i, "wrong field count", f"wrong field count: {fields} fields, "
                            f"expected {len(RAW_COLUMNS)}", line))
        else:
            good_idx.append(i)
            good_lines.append(line)
    tables: List[Any] = []
    rows: List[np.ndarray] = []
    idx_all = np.asarray(good_idx, dtype=np.int64)
    stack = [(0, len(good_lines))]
    while stack:  # bisect until each failing piece is a single line
        lo, hi = stack.pop()
        if lo >= hi:
            continue
        try:
            table = _read(b"\n".join(good_lines[lo:hi]) + b"\n")
            if table.num_rows != hi - lo:
                raise pa.ArrowInvalid("row count mismatch")
            tables.append(table)
            rows.append(idx_all[lo:hi])
        except pa.ArrowInvalid as exc:
            if hi - lo == 1:
                category, detail = _reason_from_error(str(exc))
                rejects.append((int(idx_all[lo]), category, detail, good_lines[lo]))
            else:
                mid = (lo + hi) // 2
                stack.append((mid, hi))
                stack.append((lo, mid))
    if not tables:
        return None, np.zeros(0, dtype=np.int64), sorted(rejects)
    order = np.argsort([r[0] for r in rows], kind="stable")
    table = pa.concat_tables([tables[k] for k in order])
    row_idx = np.concatenate([rows[k] for k in order])
    return _check_labels(table, row_idx, rejects, text_lines=lines, text=None)


def _check_labels(table, row_idx: np.ndarray, rejects, text_lines, text):
    """Reject rows whose label is empty or not 0/1 (pyarrow parsed it as any int64)."""
    label = table.column(0)
    if label.null_count == 0:
        lab = label.to_numpy()
        bad = (lab != 0) & (lab != 1)
    else:
        lab = label.to_numpy(zero_copy_only=False)
        bad = ~((lab == 0) | (lab == 1))
    if bad.any():
        import pyarrow as pa

        lines = text_lines if text_lines is not None else text.split(b"\n")
        for pos in np.flatnonzero(bad):
            i = int(row_idx[pos])
            line = lines[i][:-1] if lines[i].endswith(b"\r") else lines[i]
            if not line:  # pyarrow reads an empty line as a row of nulls when nothing else fails
                rejects = rejects + [(i, "empty line", "empty line", line)]
                continue
            value = line.split(b"\t", 1)[0].decode("utf-8", "replace")
            rejects = rejects + [(i, "label not 0/1", f"label not 0/1: {value[:40]!r}", line)]
        keep = ~bad
        table = table.filter(pa.array(keep))
        row_idx = row_idx[keep]
    return table, row_idx, sorted(rejects)


def transform(table, hash_buckets: int, dense_sketches: Optional[List[Any]] = None) -> Tuple[Any, np.ndarray]:
    """Raw-typed table -> output table (schema of ctr_model.features.arrow_schema()), and
    per-column missing counts (13 dense + 26 categorical). With ``dense_sketches`` (a list), the
    dense columns' profile sketches are appended to it, from the arrays the transform computes."""
    import pyarrow as pa

    from ctr_volcano.data.profile.sketches import DenseSketch

    missing = np.zeros(len(RAW_COLUMNS) - 1, dtype=np.int64)
    cols = [pa.array(table.column(0).to_numpy(zero_copy_only=False).astype(np.int8))]
    for j, name in enumerate(DENSE_COLUMNS):
        col = table.column(1 + j)
        missing[j] = col.null_count
        # int64, or float64 with NaN for the empty fields (pyarrow's int->double rounds as numpy's
        # astype does); fmax(x, 0) maps NaN and negatives to 0 in one pass, and max(x, 0) in
        # float64 is float64(max(x, 0)) exactly.
        raw = col.to_numpy(zero_copy_only=False)
        f = np.fmax(raw, 0.0)
        sketch = None if dense_sketches is None else DenseSketch.of_integers(raw, f, col.null_count)
        np.log1p(f, out=f)
        f32 = f.astype(np.float32)
        if sketch is not None:
            dense_sketches.append(sketch.add_bins(f32))   # type: ignore[union-attr]
        cols.append(pa.array(f32))
    for c, name in enumerate(SPARSE_COLUMNS):
        ids = hash_categorical(table.column(1 + len(DENSE_COLUMNS) + c), c + 1, hash_buckets)
        missing[len(DENSE_COLUMNS) + c] = int(np.count_nonzero(ids == c))
        cols.append(pa.array(ids))
    return pa.Table.from_arrays(cols, names=list(RAW_COLUMNS)), missing


def looks_like_header(line: bytes) -> bool:
    """A file's first line whose label field is a word (``label``, ``click``): column names."""
    label = line.split(b"\t", 1)[0].strip()
    return bool(label) and label.isalpha()
