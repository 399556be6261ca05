"""The scorer's input: files in the model's own spec format cut into prep's fan-out units, each read
as raw text batches with the line number of every record.

A unit is what :func:`ctr_volcano.data.prep.fanout.plan_units` cuts (a block of a plain file, at
line ends; a gzip file whole), or a Parquet file whole, so the units never depend on the number of
workers. A plain block is read by byte range: only the file's first block holds a CSV header, the
others are parsed with the header's names. Line numbers are per block here (1-based, the header
line counted); the merge adds the lines of the file's blocks before (:mod:`.run`).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ctr_model.feature_spec import FeatureSpec
from ctr_volcano.data.prep.fanout import plan_units
from ctr_volcano.data.prep.generic import _csv_options, _stream, check_compression, closest, file_columns, listed
from ctr_volcano.errors import BadInput

__all__ = ["BLOCK_BYTES", "BATCH_BYTES", "plan", "check_inputs", "feature_columns", "input_columns", "unit_batches",
           "block_lines"]

#: The byte size of a plain file's unit (prep's default block): a worker holds one unit's bytes.
BLOCK_BYTES = 32 << 20
#: pyarrow's CSV block: the rows of one scoring batch (bounded memory whatever the input's size).
BATCH_BYTES = 1 << 20


def feature_columns(spec: FeatureSpec) -> List[str]:
    """The raw columns the model reads, in the spec's order (the label is optional)."""
    return [d.name for d in spec.dense] + [c.name for c in spec.categorical]


def input_columns(spec: FeatureSpec, path: str) -> List[str]:
    """The columns of one file to score: its header or Parquet schema; without a header (Criteo TSV,
    a spec's ``columns``), the spec's columns, less the labels when most of the file's first lines have
    as many fields as the features alone (Criteo's Kaggle ``test.txt``: 39 fields, no label)."""
    names = file_columns(spec, path)
    if spec.header or spec.format == "parquet":
        return names
    features = [n for n in names if n not in spec.task_labels]
    return features if _usual_fields(spec, path) == len(features) < len(names) else names


def _usual_fields(spec: FeatureSpec, path: str, lines: int = 100) -> int:
    """The most common field count of the first ``lines`` non-empty lines of a header-less file (0
    when it has none): one malformed first line does not decide how the file is read."""
    import csv
    from collections import Counter

    with _stream(path) as stream:
        head = stream.read(1 << 20)
    text = head.decode("utf-8", "replace").splitlines()[:-1 if len(head) == 1 << 20 else None]
    rows = csv.reader([t for t in text if t.strip()][:lines], delimiter=spec.delimiter,
                      quoting=csv.QUOTE_MINIMAL if spec.format == "csv" else csv.QUOTE_NONE)
    counts = Counter(len(row) for row in rows)
    return counts.most_common(1)[0][0] if counts else 0


def check_inputs(spec: FeatureSpec, files: Sequence[str], keep: Sequence[str]) -> Dict[str, bool]:
    """Refuse, before any work, a file without a feature column or a ``--keep`` column; returns
    ``{file: has every task's label column}``.

    Raises:
        BadInput: naming the file, the column and the fix.
    """
    has_label: Dict[str, bool] = {}
    for path in files:
        check_compression(spec, path)
        names = input_columns(spec, path)
        for name in feature_columns(spec):
            if name not in names:
                raise BadInput("input", path, f"has no column {name!r}, a feature of the model's spec "
                                              f"({closest(name, names)}its columns: {listed(names)}); score "
                                              f"files in the layout the model was trained on")
        for name in keep:
            if name not in names:
                raise BadInput("--keep", name, f"{path} has no column {name!r} ({closest(name, names)}its "
                                               f"columns: {listed(names)}); keep only columns every input has")
        has_label[path] = all(label in names for label in spec.task_labels)
    return has_label


def plan(spec: FeatureSpec, files: Sequence[str], block_bytes: int = BLOCK_BYTES) -> List[Dict[str, Any]]:
    """The units, in input order: prep's fan-out units for csv/tsv/criteo files, one per Parquet file.

    Raises:
        BadInput: a line longer than a block.
    """
    if spec.format == "parquet":
        return [{"file": i, "whole": True} for i in range(len(files))]
    units = plan_units(files, block_bytes)
    for unit in units:
        if unit.get("end", 0) < 0:
            raise BadInput("input", files[unit["file"]], f"a line at byte {unit['start']} is longer than "
                                                         f"{block_bytes >> 20} MiB: check the file's format")
    return units


def _unit_bytes(path: str, unit: Dict[str, Any]) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, unit["end"] - unit["start"], unit["start"])
    finally:
        os.close(fd)


def block_lines(data: bytes) -> int:
    """Physical lines in a block of text."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _header_here(spec: FeatureSpec, unit: Dict[str, Any]) -> bool:
    return bool(spec.header) and spec.format != "parquet" and (unit.get("gzip") or unit.get("start") == 0)


def unit_batches(spec: FeatureSpec, path: str, unit: Dict[str, Any], columns: Sequence[str],
                 with_label: bool) -> Iterator[Tuple[Optional[Any], list, bool]]:
    """``(table of columns, wrong-field-count rows [(line, detail, text)], header here)`` per batch
    of one unit; ``table`` is None for a last batch of rejects alone. Lines are the unit's.
    ``with_label``: what :func:`check_inputs` found for the file (a header-less file without it is
    read without the label's field)."""
    import pyarrow as pa

    header = bool(_header_here(spec, unit))
    if spec.format == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 16, columns=list(columns)):
            yield pa.Table.from_batches([batch]), [], False
        return
    import pyarrow.csv as pacsv

    bad: list = []
    names = file_columns(spec, path)
    if not spec.header and not with_label:
        names = [n for n in names if n not in spec.task_labels]
    read, parse, convert = _csv_options(spec, names, bad)
    read = pacsv.ReadOptions(column_names=None if header else list(names), use_threads=False,
                             block_size=BATCH_BYTES)
    convert.include_columns = list(columns)
    if unit.get("gzip"):
        source = _stream(path)
    else:
        data = _unit_bytes(path, unit)
        if not data.strip(b"\r\n") or (header and block_lines(data) <= 1):
            return
        source = pa.BufferReader(data)
    with pacsv.open_csv(source, read_options=read, parse_options=parse, convert_options=convert) as reader:
        for batch in reader:
            rejects, bad[:] = list(bad), []
            yield pa.Table.from_batches([batch]), rejects, header
    if bad:
        yield None, list(bad), header
