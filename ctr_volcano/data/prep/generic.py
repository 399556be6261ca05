"""Prep for a feature spec's own layout (csv, tsv, parquet), vectorised, every row accounted for.

Why a path of its own: the Criteo path (:mod:`ctr_volcano.data.prep`) is tuned for one fixed layout
(typed parsing, shared-memory lanes) and keeps its measured speed untouched. Here pyarrow reads
every column as text (CSV/TSV, streamed in blocks; gzip by file name) or as stored (Parquet, by
row group), and numpy does the rest a whole batch at a time: no Python per row. Every file's
columns are checked against the spec before anything is written. A record with a wrong field count
(pyarrow's invalid-row handler), an empty line, a label other than 0/1 (``0.0``/``1.0`` are 0/1), an
unparsable number or a fraction under ``transform: criteo`` (:mod:`ctr_model.transforms` parses) is
rejected and counted by reason, like the Criteo path's. ``standardize`` statistics need the whole
input: a first pass computes them over the rows that will be kept.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ctr_model.feature_spec import DenseFeature, FeatureSpec
from ctr_model.transforms import (
    categorical_column,
    cross_columns,
    dense_column,
    dense_reject,
    multivalued_column,
    output_schema,
    parse_dense_column,
    parse_label_column,
)
from ctr_volcano.data.prep.config import PrepConfig
from ctr_volcano.data.prep.split import ShardSet, StratifiedSplit
from ctr_volcano.data.prep.stats import Accumulator, write_outputs
from ctr_volcano.data.profile.profile import spec_piece
from ctr_volcano.errors import BadInput

__all__ = ["prep_spec", "file_columns", "check_files", "check_compression", "listed", "closest", "record_lines"]

logger = logging.getLogger(__name__)

_BATCH_ROWS = 1 << 16


def _np(array: Any) -> np.ndarray:
    """An arrow array as numpy (``np.asarray`` would import pandas, a second per process)."""
    if hasattr(array, "combine_chunks"):
        array = array.combine_chunks()
    return array.to_numpy(zero_copy_only=False)


def _stream(path: str) -> Any:
    import pyarrow as pa

    return pa.input_stream(path, compression="gzip" if path.endswith(".gz") else None)


def _csv_options(spec: FeatureSpec, names: Sequence[str], bad: Optional[list] = None) -> Tuple:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def handler(row: Any) -> str:
        if bad is not None:
            bad.append((row.number, f"wrong field count: {row.actual_columns} fields, expected "
                        f"{row.expected_columns}", (row.text or "").encode("utf-8", "replace")))
        return "skip"

    read = pacsv.ReadOptions(column_names=None if spec.header else list(names),
                             use_threads=False, block_size=8 << 20)
    parse = pacsv.ParseOptions(delimiter=spec.delimiter, quote_char='"' if spec.format == "csv" else False,
                               ignore_empty_lines=False, invalid_row_handler=handler)
    used = _used_columns(spec)
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=[""],
                                   strings_can_be_null=True, include_columns=used)
    return read, parse, convert


def _used_columns(spec: FeatureSpec) -> List[str]:
    return list(spec.output_columns)


def file_columns(spec: FeatureSpec, path: str) -> List[str]:
    """The column names of one input file: its header, its Parquet schema, or the spec's columns.

    Raises:
        BadInput: an unreadable file.
    """
    try:
        if spec.format == "parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        if not spec.header:
            return list(spec.columns)
        return _header(spec, path)
    except (OSError, ValueError) as exc:
        raise BadInput("input", path, f"cannot read it as {spec.format} ({str(exc)[:160]}); "
                       f"check the file and the spec's format/delimiter") from None


_GZIP_MAGIC = b"\x1f\x8b"


def check_compression(spec: FeatureSpec, path: str) -> None:
    """Refuse a file whose name and compression disagree: the csv/tsv reader picks gzip by the name.

    Raises:
        BadInput: a gzip file not named ``.gz`` (pyarrow would read it as text), a ``.gz`` file that is
            not gzip, or a gzip file given as Parquet.
    """
    try:
        with open(path, "rb") as fh:
            gzipped = fh.read(2) == _GZIP_MAGIC
    except OSError as exc:
        raise BadInput("input", path, f"cannot open the file ({exc}); check the path and its permissions") from None
    if spec.format == "parquet" and gzipped:
        raise BadInput("input", path, "this file is gzip-compressed, not Parquet; decompress it (gunzip)")
    if spec.format != "parquet" and gzipped and not path.endswith(".gz"):
        raise BadInput("input", path, f"this file is gzip-compressed; name it .gz ({os.path.basename(path)}.gz) "
                                      "or decompress it (gunzip)")
    if spec.format != "parquet" and path.endswith(".gz") and not gzipped:
        raise BadInput("input", path, "this file is named .gz but is not gzip-compressed; drop the .gz from "
                                      "its name")


def listed(names: Sequence[str], limit: int = 20) -> str:
    """``names`` joined, cut at ``limit`` with a count of the rest (a list never stops silently)."""
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def closest(name: str, names: Sequence[str]) -> str:
    """``"did you mean 'x'? "`` for the name in ``names`` closest to ``name`` (``""`` if none is close)."""
    import difflib

    match = difflib.get_close_matches(name, list(names), n=1)
    return f"did you mean {match[0]!r}? " if match else ""


def _header(spec: FeatureSpec, path: str) -> List[str]:
    """The names on a csv/tsv file's first line, parsed as pyarrow parses the file (quotes
    included) but from that line alone: opening a reader would parse a whole first block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with _stream(path) as stream:
        line = b""
        while not line.endswith(b"\n"):
            chunk = stream.read(1 << 16)
            if not chunk:
                break
            line += chunk
            if b"\n" in chunk:
                line = line[:line.index(b"\n") + 1]
    read, parse, _ = _csv_options(spec, [])
    return list(pacsv.read_csv(pa.py_buffer(line), read_options=read, parse_options=parse).column_names)


def check_files(spec: FeatureSpec, files: Sequence[str]) -> None:
    """Refuse, before anything is written, a file whose columns do not match the spec.

    Raises:
        BadInput: naming the file, the column and the fix.
    """
    roles = set(spec.output_columns) | set(spec.ignore)
    for path in files:
        check_compression(spec, path)
        names = file_columns(spec, path)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            at = [k + 1 for k, n in enumerate(names) if n == twice[0]]
            raise BadInput("input", path, f"its columns name {twice[0]!r} {len(at)} times (columns "
                                          f"{', '.join(map(str, at))}): which one is meant is unclear; rename "
                                          f"the others")
        for name in spec.output_columns:
            if name not in names:
                what = "label" if name in spec.task_labels else "feature"
                raise BadInput("feature_spec", name, f"{path} has no {what} column {name!r} ({closest(name, names)}"
                               f"its columns: {listed(names)}); fix the name in the spec")
        extra = [n for n in names if n not in roles]
        if extra:
            raise BadInput("feature_spec", extra[0], f"{path} has column {extra[0]!r} that the spec "
                           f"does not name; add it to ignore, or make it a feature")
        if spec.format == "parquet":
            _check_parquet_types(spec, path)


def _check_parquet_types(spec: FeatureSpec, path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    for name in list(spec.task_labels) + [d.name for d in spec.dense]:
        if not _stored_as(schema.field(name).type, "number"):
            what = "a label is 0/1" if name in spec.task_labels else "a dense feature is a number"
            raise BadInput("feature_spec", name, f"{path}: column {name!r} is {schema.field(name).type}; "
                           f"{what} (or its text): store it as one (a time as its epoch seconds, say), "
                           f"or list it under ignore")
    for c in spec.categorical:
        is_list = pa.types.is_list(schema.field(c.name).type) or pa.types.is_large_list(
            schema.field(c.name).type)
        if c.multivalued and not is_list:
            raise BadInput("feature_spec", c.name, f"{path}: column {c.name!r} is "
                           f"{schema.field(c.name).type}, not a list; store it as a Parquet list "
                           f"column or set multivalued: false")
        if is_list and not c.multivalued:
            raise BadInput("feature_spec", c.name, f"{path}: column {c.name!r} is a list; set "
                           f"multivalued: true for it")
        if not _stored_as(schema.field(c.name).type.value_type if is_list else schema.field(c.name).type, "id"):
            raise BadInput("feature_spec", c.name, f"{path}: column {c.name!r} is {schema.field(c.name).type}; "
                           f"a categorical feature's ids are text, integers, floats or booleans: store it "
                           f"as one of those, or list it under ignore")


def _stored_as(kind: Any, role: str) -> bool:
    """Whether a Parquet column of arrow type ``kind`` (a dictionary: its values') can hold a ``role``:
    ``"number"`` (a label, a dense feature: numbers, booleans or their text) or ``"id"`` (text,
    bytes, integers, floats or booleans)."""
    import pyarrow as pa

    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    common = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
              pa.types.is_large_string, pa.types.is_null)
    extra = (pa.types.is_decimal,) if role == "number" else (pa.types.is_binary, pa.types.is_large_binary)
    return any(test(kind) for test in common + extra)


def _batches(spec: FeatureSpec, path: str, columns: Optional[Sequence[str]] = None
             ) -> Iterator[Tuple[Any, list]]:
    """(table of ``columns`` (default: the used ones), wrong-field-count rejects since the last
    batch) per batch."""
    columns = list(columns or _used_columns(spec))
    if spec.format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS, columns=columns):
            yield pa.Table.from_batches([batch]), []
        return
    import pyarrow.csv as pacsv

    bad: list = []
    read, parse, convert = _csv_options(spec, file_columns(spec, path), bad)
    convert.include_columns = columns
    with pacsv.open_csv(_stream(path), read_options=read, parse_options=parse,
                        convert_options=convert) as reader:
        for batch in reader:
            import pyarrow as pa

            rejects, bad[:] = list(bad), []
            yield pa.Table.from_batches([batch]), rejects
    if bad:
        yield None, list(bad)


def _clean(spec: FeatureSpec, table: Any, with_label: bool = True
           ) -> Tuple[np.ndarray, list, Dict[str, np.ndarray], np.ndarray]:
    """(keep mask, [(row, category, detail)], raw dense columns, labels ``[n, tasks]``) of one
    batch; without the labels (candidates to score) they are all 0 and not checked."""
    import pyarrow.compute as pc

    n = table.num_rows
    keep = np.ones(n, dtype=bool)
    reasons: list = []
    all_null = np.ones(n, dtype=bool)
    for name in table.column_names:   # a line that is all empty (its label too)
        all_null &= _np(pc.is_null(table.column(name)))
    if len(spec.output_columns) > 1 and all_null.any():
        reasons += [(int(i), "empty line", "empty line") for i in np.flatnonzero(all_null)]
        keep &= ~all_null
    if with_label:
        label, ok = _labels(spec, table, reasons, keep)
    else:
        label, ok = np.zeros((n, len(spec.task_labels)), dtype=np.int8), np.ones(n, dtype=bool)
    keep &= ok
    raw: Dict[str, np.ndarray] = {}
    for d in spec.dense:
        raw[d.name], ok = parse_dense_column(d, table.column(d.name))
        for i in np.flatnonzero(keep & ~ok):
            category, detail = dense_reject(d, table.column(d.name)[int(i)].as_py())
            reasons.append((int(i), category, detail))
        keep &= ok
    return keep, reasons, raw, label


def _labels(spec: FeatureSpec, table: Any, reasons: list, keep: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(labels int8 ``[n, tasks]``, ok) of a batch: every label 0/1, and a task that depends on
    another (``depends_on``) 1 only where its parent is 1 (else the row is a reject with its reason)."""
    names = spec.task_labels
    labels = np.zeros((table.num_rows, len(names)), dtype=np.int8)
    ok_all = np.ones(table.num_rows, dtype=bool)
    for k, name in enumerate(names):
        labels[:, k], ok = parse_label_column(table.column(name))
        for i in np.flatnonzero(keep & ok_all & ~ok):
            value = table.column(name)[int(i)].as_py()
            what = "label" if len(names) == 1 else f"label {name}"
            reasons.append((int(i), "label not 0/1", f"{what} not 0/1 (nor 0.0/1.0, false/true): {str(value)[:40]!r}"))
        ok_all &= ok
    for task, parent in spec.depends_on:
        t, p = names.index(task), names.index(parent)
        orphan = (labels[:, t] == 1) & (labels[:, p] == 0)
        for i in np.flatnonzero(keep & ok_all & orphan):
            reasons.append((int(i), "task without its parent", f"{task}=1 where {parent}=0: {task} is "
                            f"counted only after {parent} (depends_on)"))
        ok_all &= ~orphan
    return labels, ok_all


def _transform(spec: FeatureSpec, table: Any, keep: np.ndarray, raw: Dict[str, np.ndarray],
               label: np.ndarray) -> Tuple[Any, np.ndarray]:
    """The kept rows in prep's output schema, and per-feature missing counts."""
    import pyarrow as pa

    mask = pa.array(keep)
    missing = np.zeros(len(spec.dense) + len(spec.categorical), dtype=np.int64)
    cols: List[Any] = [pa.array(label[keep, k]) for k in range(label.shape[1])]
    for k, d in enumerate(spec.dense):
        x = raw[d.name][keep]
        missing[k] = int(np.count_nonzero(np.isnan(x)))
        cols.append(pa.array(dense_column(d, x)))
    for k, c in enumerate(spec.categorical):
        column = table.column(c.name).filter(mask)
        if c.multivalued:
            ids = multivalued_column(spec, c, column)
            first = ids.values.to_numpy()[ids.offsets.to_numpy()[:-1]] if len(ids) else np.zeros(0)
            missing[len(spec.dense) + k] = int(np.count_nonzero(first == k))
        else:
            ids = categorical_column(spec, c, column)
            missing[len(spec.dense) + k] = int(np.count_nonzero(ids == k))
        cols.append(ids if isinstance(ids, pa.Array) else pa.array(ids))
    if spec.crosses:
        ids_of = {c.name: col for c, col in zip(spec.categorical, cols[-len(spec.categorical):])}
        cols += [pa.array(x) for x in cross_columns(spec, {n: c.to_numpy() for n, c in ids_of.items()
                                                            if n in spec.cross_features})]
    return pa.Table.from_arrays(cols, schema=output_schema(spec)), missing


def _line_numbers(spec: FeatureSpec, rows: np.ndarray, skipped: List[int]) -> np.ndarray:
    """Physical line numbers of parsed records ``rows`` (0-based, per file) given the sorted line
    numbers pyarrow skipped so far (a record is one line: quoted newlines are not counted)."""
    return record_lines(rows, skipped, bool(spec.header), spec.format == "parquet")


def record_lines(rows: np.ndarray, skipped: List[int], header: bool, parquet: bool) -> np.ndarray:
    """Physical line numbers (1-based) of records ``rows`` (0-based) of a text read that began with
    a header line when ``header``, given the sorted line numbers the reader skipped so far; a
    Parquet row's number is its index + 1."""
    base = rows + 1 + (1 if header else 0)
    if parquet:
        return rows + 1
    lines = base.copy()
    sk = np.asarray(skipped, dtype=np.int64)
    for _ in range(len(skipped) + 1):
        new = base + np.searchsorted(sk, lines, side="right")
        if np.array_equal(new, lines):
            break
        lines = new
    return lines


def _standardized(spec: FeatureSpec, files: Sequence[str]) -> FeatureSpec:
    """The spec with every ``standardize`` feature's missing mean/std computed over the kept rows."""
    todo = [d for d in spec.dense if d.transform == "standardize" and (d.mean is None or d.std is None)]
    if not todo:
        return spec
    sums = {d.name: np.zeros(3) for d in todo}   # count, sum, sum of squares (after fill)
    # Which rows are kept depends on the label and the dense values only: a line whose features
    # are all empty has an empty label, a reject either way. So this pass converts those alone.
    columns = list(spec.task_labels) + [d.name for d in spec.dense]
    for path in files:
        for table, _ in _batches(spec, path, columns):
            if table is None:
                continue
            keep, _, raw, _ = _clean(spec, table)
            for d in todo:
                x = raw[d.name][keep]
                x = np.where(np.isnan(x), float(d.fill), x)
                sums[d.name] += (x.size, float(x.sum()), float(np.dot(x, x)))
    dense = []
    for d in spec.dense:
        if d in todo:
            count, total, squares = sums[d.name]
            mean = total / count if count else 0.0
            var = max(squares / count - mean * mean, 0.0) if count else 0.0
            std = float(np.sqrt(var)) if var > 1e-24 else 1.0
            d = DenseFeature(d.name, d.transform, d.fill, float(mean), std)
        dense.append(d)
    logger.info("prep: standardize statistics %s",
                {d.name: (round(d.mean or 0.0, 6), round(d.std or 0.0, 6)) for d in dense if d in todo or
                 d.transform == "standardize"})
    return spec.with_dense(dense)


def _id_space(spec: FeatureSpec) -> int:
    """The ``hash_buckets`` of ``schema.json``: every feature's ids are below it (the trainer's one
    shared table)."""
    return max([c.hash_buckets for c in spec.slot_features] or [spec.hash_buckets])


def prep_spec(files: Sequence[str], train_dir: str, test_dir: str, config: PrepConfig,
              spec: FeatureSpec, stats_path: Optional[str] = None) -> Dict[str, Any]:
    """Prep ``files`` (already resolved) in ``spec``'s layout into the two split directories.

    Raises:
        BadInput: a file that does not match the spec, no rows, or too many rejects.
    """
    started = time.monotonic()
    check_files(spec, files)
    spec = _standardized(spec, files)
    schema = output_schema(spec)
    train = ShardSet(train_dir, config.shards, config.compression, schema)
    test = ShardSet(test_dir, config.test_shards, config.compression, schema)
    acc = Accumulator(config, [d.name for d in spec.dense] + [c.name for c in spec.categorical],
                      hash_buckets=_id_space(spec), spec=spec)
    splitter = StratifiedSplit(config.seed, config.test_fraction)
    ok = False
    try:
        for path in files:
            _prep_file(spec, path, acc, splitter, train, test)
        train.close()
        test.close()
        if acc.rows_in == 0:
            raise BadInput("input", list(files), "no rows found: the input files are empty")
        stats = write_outputs(acc, train, test, time.monotonic() - started, _id_space(spec), spec.to_dict(),
                              stats_path, feature_spec=spec.to_dict(), workers=1)
        ok = True
        return stats
    finally:
        if not ok:
            train.remove()
            test.remove()


def _prep_file(spec: FeatureSpec, path: str, acc: Accumulator, splitter: StratifiedSplit,
               train: ShardSet, test: ShardSet) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    records, skipped = 0, []
    for table, bad in _batches(spec, path):
        skipped += sorted(int(b[0]) for b in bad if b[0] is not None)
        rejects = [(int(b[0] or 0), "wrong field count", b[1], b[2]) for b in bad]
        if table is not None:
            keep, reasons, raw, label = _clean(spec, table)
            rows = np.array([r[0] for r in reasons], dtype=np.int64)
            lines = _line_numbers(spec, records + rows, sorted(skipped))
            rejects += [(int(line), cat, detail, b"") for line, (_, cat, detail) in zip(lines, reasons)]
            out, missing = _transform(spec, table, keep, raw, label)
            if acc.config.profile and out.num_rows:
                acc.add_profile(spec_piece(spec, {d.name: raw[d.name][keep] for d in spec.dense}, out))
            records += table.num_rows
        acc.add_rejects(path, 0, sorted(rejects, key=lambda r: r[0]),
                        len(bad) + (table.num_rows if table is not None else 0))
        if table is None or not out.num_rows:
            continue
        mask = pa.array(splitter.is_test(out.column(0).to_numpy()))
        test_part, train_part = out.filter(mask), out.filter(pc.invert(mask))
        acc.add_good(missing, train_part, test_part)
        for shards, part in ((train, train_part), (test, test_part)):
            if part.num_rows:
                shards.write(part)
    acc.inputs.append({"path": path, "lines": records + len(skipped), "bytes": os.path.getsize(path)})
