"""The preps a user could write instead of ours, in polars and in duckdb, and the agreement check.

Each peer does what :func:`ctr_volcano.data.prep.prep` does to well-formed Criteo TSV, written the way
its engine is meant to be used, in one streaming pass over the input:

* label -> int8; ``I1..I13`` -> ``float32(log1p(max(x, 0)))``, empty -> 0;
* ``C1..C26`` -> the stable hash of :mod:`ctr_model.features` (version 1): ``j - 1`` for an empty
  value, else ``26 + mix64(key(v) ^ salt(j)) % (B - 26)``;
* the split stratified by label, as in prep (:class:`ctr_volcano.data.prep.StratifiedSplit`): the
  ``k``-th line with label ``y`` (0-based, in input order) goes to test iff
  ``floor((k + 1) f + o_y) > floor(k f + o_y)``, ``o_y = (mix64(2 seed + y + 0x53504C4954) >> 11) /
  2**53``, in float64;
* Parquet (snappy) under ``out/train`` and ``out/test``.

What the peers leave out, on purpose (an afternoon's code does): bad-line reporting (a malformed
line makes polars and duckdb fail the whole query), ``stats.json``, ``schema.json`` and the fixed
shard count. How far each engine gets with the hash:

* polars (2.1) expresses everything with native expressions except FNV-1a over values that are not
  exactly 8 bytes: a sequential fold over a value's bytes has no vectorised expression (it needs a
  Python UDF). Every Criteo value is 8 hex digits, so the polars peer hashes the 8-byte branch
  natively (``bin.reinterpret`` as little-endian u64; u64 arithmetic wraps) and leaves any other
  non-empty value **null** -- never a wrong id -- so the agreement check catches such input.
* duckdb (2.0) expresses the whole spec as SQL macros: 64-bit wrapping products via ``UHUGEINT``,
  the little-endian key by byte-swapping ``BLOB::BIT::UBIGINT``, FNV-1a over other lengths with
  ``list_reduce`` (``CASE`` evaluates it only for those rows). It has no ``log1p``;
  ``ln(1 + x)`` is exact in its argument for integers below 2**53 and agreed bit for bit after the
  float32 rounding on every row checked (the agreement check is what says so). Its CSV reader has
  no line number, so the line comes from ``row_number() OVER ()``, which duckdb streams in input
  order.

The split's ``k`` (the line's rank among the lines with its label) is where the engines differ:

* polars derives it from one running sum, which its streaming engine evaluates in order: with
  ``c`` the clicks up to and including line ``r``, a click's ``k`` is ``c - 1`` and a non-click's is
  ``r - c`` (``pl.col(label).cum_sum()``; a window ``int_range(len()).over(label)`` would say the
  same but is not streamed).
* duckdb says it as SQL does: ``row_number() OVER (PARTITION BY label ORDER BY line) - 1``. The
  partitioned window materialises the rows (duckdb sorts them per label, spilling to disk when
  memory runs short), where the old per-line coin needed no state.

:func:`compare_outputs` is the row-for-row check: per split, the rows whose XOR of the 26 ids is
``0 mod sample_mod`` (all rows for ``sample_mod=1``) are sorted on all 40 columns and compared value
for value (same ids, same float32 bits), after checking the two outputs' row counts and schemas.
"""
from __future__ import annotations

import glob
import os
import shutil
from typing import Any, Dict, List, Optional, Sequence

from ctr_model.features import DENSE_COLUMNS, LABEL, NUM_SPARSE, RAW_COLUMNS, SPARSE_COLUMNS, arrow_schema, column_salt

__all__ = ["polars_prep", "duckdb_prep", "compare_outputs", "sampled", "split_files", "SPLITS", "main"]

SPLITS = ("train", "test")

_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SPLIT_SALT_BASE = 0x53504C4954                 # ASCII "SPLIT", as in ctr_volcano.data.prep
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def _mix64_py(z: int) -> int:
    m = (1 << 64) - 1
    z &= m
    z = ((z ^ (z >> 30)) * _MIX1) & m
    z = ((z ^ (z >> 27)) * _MIX2) & m
    return z ^ (z >> 31)


def _split_offset(seed: int, label: int) -> float:
    """``o_y`` of the stratified split: a float64 in [0, 1) from the seed and the label."""
    return (_mix64_py(2 * int(seed) + label + _SPLIT_SALT_BASE) >> 11) / float(1 << 53)


def _fresh_dirs(out_dir: str) -> Dict[str, str]:
    dirs = {s: os.path.join(out_dir, s) for s in SPLITS}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    return dirs


def split_files(split_dir: str) -> List[str]:
    """Parquet files under a split directory (any depth, sorted)."""
    return sorted(glob.glob(os.path.join(split_dir, "**", "*.parquet"), recursive=True))


# ---------------------------------------------------------------------------------------------
# polars


def polars_prep(inputs: Sequence[str], out_dir: str, hash_buckets: int, seed: int = 42,
                test_fraction: float = 0.1) -> None:
    """Prep ``inputs`` with one polars streaming query into ``out_dir/{train,test}/*.parquet``."""
    import polars as pl

    u64 = pl.UInt64

    def mix64(z: "pl.Expr") -> "pl.Expr":
        # u64 arithmetic wraps in polars; ``// 2**k`` is ``>> k`` for unsigned integers.
        z = (z ^ (z // 2 ** 30)) * pl.lit(_MIX1, u64)
        z = (z ^ (z // 2 ** 27)) * pl.lit(_MIX2, u64)
        return z ^ (z // 2 ** 31)

    schema = {LABEL: pl.Int64, **{c: pl.Int64 for c in DENSE_COLUMNS},
              **{c: pl.String for c in SPARSE_COLUMNS}}
    lf = pl.scan_csv(list(inputs), has_header=False, separator="\t", quote_char=None,
                     schema=schema, row_index_name="_line")
    columns = [pl.col(LABEL).cast(pl.Int8)]
    columns += [pl.col(c).fill_null(0).clip(lower_bound=0).cast(pl.Float64).log1p()
                .cast(pl.Float32) for c in DENSE_COLUMNS]
    for j, c in enumerate(SPARSE_COLUMNS, start=1):
        key = pl.col(c).cast(pl.Binary).bin.reinterpret(dtype=u64, endianness="little")
        ids = mix64(key ^ pl.lit(column_salt(j), u64)) % (hash_buckets - NUM_SPARSE) + NUM_SPARSE
        columns.append(pl.when(pl.col(c).is_null()).then(pl.lit(j - 1, pl.Int64))
                       .otherwise(ids.cast(pl.Int64)).alias(c))
    clicks = pl.col(LABEL).cum_sum()  # clicks up to and including this line
    click = pl.col(LABEL) == 1
    k = pl.when(click).then(clicks - 1).otherwise(pl.col("_line") - clicks).cast(pl.Float64)
    o = pl.when(click).then(pl.lit(_split_offset(seed, 1))).otherwise(pl.lit(_split_offset(seed, 0)))
    f = float(test_fraction)
    is_test = ((k + 1) * f + o).floor() > (k * f + o).floor()
    out = lf.select(*columns, is_test.alias("_test"))
    dirs = _fresh_dirs(out_dir)
    sinks = [out.filter(pl.col("_test") == (split == "test")).drop("_test")
             .sink_parquet(os.path.join(dirs[split], "part-00000.parquet"), compression="snappy",
                           lazy=True)
             for split in SPLITS]
    pl.collect_all(sinks, engine="streaming")  # one scan of the CSV feeds both sinks


# ---------------------------------------------------------------------------------------------
# duckdb


def _duckdb_macros() -> List[str]:
    m64 = "18446744073709551615::UHUGEINT"
    mul = "((({a})::UHUGEINT * {b}::UHUGEINT) & " + m64 + ")::UBIGINT"
    bswap = " | ".join(f"(((x >> {8 * k}) & 255::UBIGINT) << {56 - 8 * k})" for k in range(8))
    fnv = (f"list_reduce(list_transform(range(octet_length(b)), lambda i: "
           f"('0x' || substr(hex(b), 2 * i + 1, 2))::UBIGINT), "
           f"lambda h, c: {mul.format(a='xor(h, c)', b=_FNV_PRIME)}, {_FNV_OFFSET}::UBIGINT)")
    return [
        f"CREATE OR REPLACE MACRO mulwrap(a, b) AS {mul.format(a='a', b='b')}",
        f"CREATE OR REPLACE MACRO bswap64(x) AS {bswap}",
        # key(v): the 8 bytes as a little-endian integer, else FNV-1a over the bytes
        f"CREATE OR REPLACE MACRO ckey(b) AS CASE WHEN octet_length(b) = 8 "
        f"THEN bswap64(b::BIT::UBIGINT) ELSE {fnv} END",
    ]


def _duckdb_query(inputs: Sequence[str], hash_buckets: int, seed: int,
                  test_fraction: float) -> str:
    """One SELECT in stages: a macro argument used twice is expanded twice, so each step of mix64
    (which reads its input twice) gets its own CTE, or the key would be computed 8 times."""
    types = {LABEL: "BIGINT", **{c: "BIGINT" for c in DENSE_COLUMNS},
             **{c: "VARCHAR" for c in SPARSE_COLUMNS}}
    cols = ", ".join(f"'{k}': '{v}'" for k, v in types.items())
    files = ", ".join("'" + p.replace("'", "''") + "'" for p in inputs)
    keep = ", ".join((LABEL,) + DENSE_COLUMNS)

    def stage(expr: str, line: str) -> str:
        return ", ".join([keep] + [expr.format(c=c) + f" AS {c}" for c in SPARSE_COLUMNS]
                         + [line])

    salts = ", ".join(
        [keep] + [f"xor(ckey(encode({c})), {column_salt(j)}::UBIGINT) AS {c}"
                  for j, c in enumerate(SPARSE_COLUMNS, start=1)]
        + ["_line"])
    dense = [f"ln(1 + greatest(coalesce({c}, 0), 0)::DOUBLE)::FLOAT AS {c}" for c in DENSE_COLUMNS]
    ids = [f"coalesce(({NUM_SPARSE} + xor({c}, {c} >> 31) % {hash_buckets - NUM_SPARSE}::UBIGINT)"
           f"::BIGINT, {j - 1}) AS {c}" for j, c in enumerate(SPARSE_COLUMNS, start=1)]
    mix1 = stage("mulwrap(xor({c}, {c} >> 30), " + str(_MIX1) + "::UBIGINT)", "_line")
    mix2 = stage("mulwrap(xor({c}, {c} >> 27), " + str(_MIX2) + "::UBIGINT)", "_line")
    f = f"'{float(test_fraction)!r}'::DOUBLE"  # through a string: a bare literal is a DECIMAL
    o = (f"CASE WHEN {LABEL} = 1 THEN '{_split_offset(seed, 1)!r}'::DOUBLE "
         f"ELSE '{_split_offset(seed, 0)!r}'::DOUBLE END")
    split = (f"CASE WHEN floor((_k + 1) * {f} + {o}) > floor(_k * {f} + {o}) "
             f"THEN 'test' ELSE 'train' END AS split")
    return (
        f"WITH raw AS (SELECT *, (row_number() OVER () - 1)::UBIGINT AS _line FROM read_csv("
        f"[{files}], delim = '\t', header = false, quote = '', escape = '', "
        f"auto_detect = false, columns = {{{cols}}})), "
        f"k AS (SELECT {salts} FROM raw), "
        f"a AS (SELECT {mix1} FROM k), "
        f"b AS (SELECT {mix2} FROM a), "
        f"s AS (SELECT *, (row_number() OVER (PARTITION BY {LABEL} ORDER BY _line) - 1)::DOUBLE "
        f"AS _k FROM b) "
        f"SELECT {LABEL}::TINYINT AS {LABEL}, {', '.join(dense + ids)}, {split} FROM s")


def duckdb_prep(inputs: Sequence[str], out_dir: str, hash_buckets: int, seed: int = 42,
                test_fraction: float = 0.1, threads: int = 0) -> None:
    """Prep ``inputs`` with one duckdb ``COPY ... PARTITION_BY`` into ``out_dir/{train,test}``.

    Args:
        threads: duckdb worker threads (0: duckdb's default, all cores).
    """
    import duckdb

    con = duckdb.connect()
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    tmp = os.path.join(out_dir, "_partitions")
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        for macro in _duckdb_macros():
            con.execute(macro)
        query = _duckdb_query(inputs, hash_buckets, seed, test_fraction)
        con.execute(f"COPY ({query}) TO '{tmp}' (FORMAT parquet, COMPRESSION snappy, "
                    f"PARTITION_BY (split))")
    finally:
        con.close()
    for s in SPLITS:  # duckdb writes hive directories split=train/, split=test/
        src = os.path.join(tmp, f"split={s}")
        if os.path.isdir(src):
            os.replace(src, os.path.join(out_dir, s))
        else:
            os.makedirs(os.path.join(out_dir, s))
    shutil.rmtree(tmp)


# ---------------------------------------------------------------------------------------------
# agreement


def sampled(table: Any, id_columns: Sequence[str], sample_mod: int) -> Any:
    """The rows of ``table`` whose XOR of the integer ``id_columns`` is 0 mod ``sample_mod`` (a power
    of two; 1 or no columns: every row). A function of the values, so a peer that hashes
    differently samples other rows."""
    import pyarrow.compute as pc

    if sample_mod <= 1 or not id_columns:
        return table
    key = table.column(id_columns[0])
    for name in id_columns[1:]:
        key = pc.bit_wise_xor(key, table.column(name))
    return table.filter(pc.equal(pc.bit_wise_and(key, sample_mod - 1), 0))


def _sample(split_dir: str, sample_mod: int):
    """The split's rows whose XOR of the 26 ids is 0 mod ``sample_mod``, sorted on all columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts, rows = [], 0
    for path in split_files(split_dir):
        pf = pq.ParquetFile(path)
        for batch in pf.iter_batches(batch_size=1 << 16, columns=list(RAW_COLUMNS)):
            rows += batch.num_rows
            parts.append(sampled(pa.Table.from_batches([batch]), SPARSE_COLUMNS, sample_mod))
    if not parts:
        return rows, None
    table = pa.concat_tables(parts)
    return rows, table.sort_by([(c, "ascending") for c in RAW_COLUMNS])


def compare_outputs(ours_dir: str, peer_dir: str, sample_mod: int = 1) -> Dict[str, Any]:
    """Check a peer's output against ours row for row on a sample.

    Args:
        ours_dir, peer_dir: directories holding ``train/`` and ``test/`` Parquet files.
        sample_mod: a power of two; rows whose XOR of the 26 ids is 0 modulo it are compared
            (1: every row). The sample is a function of the row's values, so a peer that hashes
            differently samples other rows and fails the check.

    Returns:
        ``{"ok": bool, "rows_checked": n, "problems": [one line each]}``.
    """
    if sample_mod < 1 or sample_mod & (sample_mod - 1):
        raise ValueError(f"sample_mod={sample_mod}: use a power of two (1 compares every row)")
    expected = arrow_schema()
    problems: List[str] = []
    checked = 0
    for split in SPLITS:
        a_rows, a = _sample(os.path.join(ours_dir, split), sample_mod)
        b_rows, b = _sample(os.path.join(peer_dir, split), sample_mod)
        if a_rows != b_rows:
            problems.append(f"{split}: {a_rows} rows in ours, {b_rows} in the peer's")
        if a is None or b is None:
            if (a is None) != (b is None):
                problems.append(f"{split}: one side has no rows")
            continue
        if not b.schema.equals(expected):
            problems.append(f"{split}: peer schema differs: "
                            f"{[(f.name, str(f.type)) for f in b.schema if f not in expected]}")
            continue
        if a.num_rows != b.num_rows:
            problems.append(f"{split}: {a.num_rows} sampled rows in ours, {b.num_rows} in the "
                            f"peer's (its ids or its split differ)")
            continue
        checked += a.num_rows
        for name in RAW_COLUMNS:
            x, y = a.column(name), b.column(name)
            if not x.equals(y):
                import numpy as np

                xv = x.to_numpy(zero_copy_only=False)
                yv = y.to_numpy(zero_copy_only=False)
                same = (xv.view(np.uint32) == yv.view(np.uint32)) if xv.dtype == np.float32 \
                    else (xv == yv)
                bad = np.flatnonzero(~same) if len(same) else []
                first = int(bad[0]) if len(bad) else 0
                problems.append(f"{split}: column {name} differs in {len(bad)} of {a.num_rows} "
                                f"sorted rows (first at {first}: ours {xv[first]!r}, "
                                f"peer {yv[first]!r})")
                break
    return {"ok": not problems, "rows_checked": checked, "problems": problems}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python bench/prep_peers.py {polars,duckdb} OUT INPUT... [--hash-buckets B]``: run one
    peer and print its own seconds (imports excluded), for the benchmark's child processes."""
    import argparse
    import time

    from ctr_model.features import DEFAULT_HASH_BUCKETS

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("engine", choices=("polars", "duckdb"))
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--hash-buckets", type=int, default=DEFAULT_HASH_BUCKETS)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--test-fraction", type=float, default=0.1)
    args = ap.parse_args(argv)
    run = polars_prep if args.engine == "polars" else duckdb_prep
    __import__(args.engine)  # import time is not the peer's work (prep's children exclude it too)
    start = time.monotonic()
    run(args.inputs, args.out, args.hash_buckets, args.seed, args.test_fraction)
    print(time.monotonic() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
