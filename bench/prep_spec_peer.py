"""The prep a user could write in polars for a feature spec's own layout, and its agreement check.

``bench/prep.py --spec`` times ours (:mod:`ctr_volcano.data.prep.generic`) against this on the same
non-Criteo spec, a CSV with a header, string ids, a multi-valued column and every dense transform.
The peer does what ours does to well-formed input, as polars streaming queries:

* the label -> int8; each dense feature's transform (:mod:`ctr_model.transforms`): ``criteo`` and
  ``log1p`` as ``float32(log1p(max(x, 0)))`` (empty -> 0 or ``fill``), ``standardize`` with mean
  and std over the filled column (a first pass, as ours), ``none`` as ``float32(x)``;
* each categorical feature ``k`` of ``n``: ``k - 1`` for an empty value, else ``n + mix64(key(v) ^
  salt(k)) % (B_k - n)`` (the hash of :mod:`ctr_model.features`); a multi-valued field split on
  its separator, empty items dropped, the first ``max_length`` kept, an empty list -> ``[k - 1]``;
* the label-stratified split of :mod:`bench.prep_peers` (one running sum of the labels).

The hash's ``key(v)`` is the value's 8 bytes read little-endian when it has exactly 8, else FNV-1a
over its bytes. Polars has no native fold over a string's bytes, so the peer spells FNV-1a out:
byte ``i`` comes from the value's hex text (``str.encode("hex")``, two digits parsed base 16), and
for each length ``l`` up to the longest value (found by the first pass) one unrolled chain of ``l``
steps; ``when(len == l)`` picks the value's own. That costs ``O(L^2)`` expressions per column for
values of up to ``L`` bytes: fine for ids of a dozen bytes, which is what click logs carry. What it
leaves out (an afternoon's code does): reject counting, ``stats.json`` and ``schema.json``, the
fixed shard count.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from prep_peers import SPLITS, _fresh_dirs, _split_offset, sampled, split_files  # a sibling: bench/ is on sys.path

from ctr_model.feature_spec import CategoricalFeature, FeatureSpec
from ctr_model.features import column_salt_int
from ctr_model.transforms import output_schema

__all__ = ["polars_spec_prep", "compare_spec_outputs", "BENCH_SPEC", "main"]

#: The bench's non-Criteo layout: a CSV with a header, string ids of 6-9 bytes, a multi-valued
#: column, every dense transform but ``none``, a column to ignore (the spec the tests train on).
BENCH_SPEC = {"format": "csv", "header": True, "label": "clicked",
              "dense": [{"name": "price", "transform": "log1p"}, {"name": "age", "transform": "standardize"},
                        {"name": "visits", "transform": "criteo"}],
              "categorical": [{"name": "user", "hash_buckets": 100003},
                              {"name": "items", "multivalued": True, "pooling": "mean", "separator": "|"},
                              {"name": "site"}],
              "ignore": ["other"]}

_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def _hashed(lf: Any, name: str, slot: int, slots: int, buckets: int, longest: int) -> Any:
    """``lf`` with the string column ``name`` replaced by its ids (values of <= ``longest`` bytes).

    Each step is its own ``with_columns`` over named columns: an expression that uses its input
    twice (every ``mix64`` step, every FNV step's ``when``) would otherwise copy that input's whole
    tree, and polars evaluates each copy."""
    import polars as pl

    u64, col = pl.UInt64, pl.col
    lf = lf.with_columns(_s=col(name).str.len_bytes(), _x=col(name).str.encode("hex"),
                         _h=pl.lit(_FNV_OFFSET, u64))
    for i in range(longest):  # FNV-1a over the bytes, one byte a step, for values shorter than i
        byte = col("_x").str.slice(2 * i, 2).str.to_integer(base=16, strict=False).cast(u64)
        lf = lf.with_columns(_h=pl.when(col("_s") > i).then((col("_h") ^ byte) * pl.lit(_FNV_PRIME, u64))
                             .otherwise(col("_h")))
    eight = col(name).cast(pl.Binary).bin.reinterpret(dtype=u64, endianness="little")
    lf = lf.with_columns(_h=pl.when(col("_s") == 8).then(eight).otherwise(col("_h"))
                         ^ pl.lit(column_salt_int(slot), u64))
    for shift, mult in ((30, _MIX1), (27, _MIX2), (31, None)):  # mix64; u64 products wrap
        mixed = col("_h") ^ (col("_h") // 2 ** shift)
        lf = lf.with_columns(_h=mixed * pl.lit(mult, u64) if mult else mixed)
    ids = (col("_h") % (buckets - slots) + slots).cast(pl.Int64)
    empty = col(name).is_null() | (col("_s") == 0)
    return lf.with_columns(pl.when(empty).then(pl.lit(slot - 1, pl.Int64)).otherwise(ids).alias(name)) \
        .drop("_s", "_x", "_h")


def _items(spec: FeatureSpec, c: CategoricalFeature) -> Any:
    """A multi-valued field's non-empty items, the first ``max_length``."""
    import polars as pl

    return pl.col(c.name).str.split(c.separator).list.eval(
        pl.element().filter(pl.element().str.len_bytes() > 0)).list.head(int(c.max_length))


def _first_pass(lf: Any, spec: FeatureSpec) -> Dict[str, float]:
    """Standardize sums and each categorical feature's longest value in bytes, in one scan."""
    import polars as pl

    aggs: List[Any] = []
    for d in spec.dense:
        if d.transform == "standardize":
            x = pl.col(d.name).fill_null(float(d.fill))
            aggs += [x.count().alias(f"n:{d.name}"), x.sum().alias(f"s:{d.name}"),
                     (x * x).sum().alias(f"q:{d.name}")]
    for c in spec.categorical:
        size = (_items(spec, c).list.eval(pl.element().str.len_bytes()).list.max() if c.multivalued
                else pl.col(c.name).str.len_bytes())
        aggs.append(size.max().alias(f"L:{c.name}"))
    return lf.select(aggs).collect(engine="streaming").row(0, named=True)


def _dense(spec: FeatureSpec, first: Dict[str, float]) -> List[Any]:
    import polars as pl

    out = []
    for d in spec.dense:
        if d.transform in ("criteo", "log1p"):
            fill = 0.0 if d.transform == "criteo" else float(d.fill)
            x = pl.col(d.name).fill_null(fill).clip(lower_bound=0.0).log1p()
        elif d.transform == "standardize":
            n, total, squares = (first[f"{k}:{d.name}"] for k in "nsq")
            mean = total / n if n else 0.0
            var = max(squares / n - mean * mean, 0.0) if n else 0.0
            std = float(np.sqrt(var)) if var > 1e-24 else 1.0
            x = (pl.col(d.name).fill_null(float(d.fill)) - mean) / std
        else:
            x = pl.col(d.name).fill_null(float(d.fill))
        out.append(x.cast(pl.Float32).alias(d.name))
    return out


def _list_ids(lf: Any, spec: FeatureSpec, c: CategoricalFeature, longest: int) -> Any:
    """``(_line, ids)`` of a multi-valued feature: its items exploded to rows, hashed as a column,
    gathered back per line (``list.eval`` of the same hash costs several times the CPU in polars
    2.1). An empty or null list explodes to one null item (asked for: polars 2.1 drops an empty
    list's row by default), which hashes to the empty id."""
    import polars as pl

    k, n = spec.categorical.index(c) + 1, len(spec.categorical)
    items = lf.select("_line", _items(spec, c).alias(c.name)).explode(c.name, empty_as_null=True,
                                                                             keep_nulls=True)
    return (_hashed(items, c.name, k, n, int(c.hash_buckets), longest)
            .group_by("_line", maintain_order=True).agg(pl.col(c.name)))


def polars_spec_prep(spec: FeatureSpec, inputs: Sequence[str], out_dir: str, seed: int = 42,
                     test_fraction: float = 0.1) -> None:
    """Prep csv/tsv ``inputs`` in ``spec``'s layout into ``out_dir/{train,test}/*.parquet``."""
    import polars as pl

    if spec.format not in ("csv", "tsv") or not spec.header:
        raise ValueError(f"the polars peer reads csv/tsv with a header, not {spec.format!r}")
    types = {spec.label: pl.Int64, **{d.name: pl.Float64 for d in spec.dense},
             **{c.name: pl.String for c in spec.categorical}, **{n: pl.String for n in spec.ignore}}
    lf = pl.scan_csv(list(inputs), has_header=True, separator=spec.delimiter, schema=types,
                     quote_char='"' if spec.format == "csv" else None, row_index_name="_line")
    first = _first_pass(lf, spec)
    label = pl.col(spec.label)
    clicks = label.cum_sum()  # clicks up to and including this line
    click = label == 1
    k = pl.when(click).then(clicks - 1).otherwise(pl.col("_line") - clicks).cast(pl.Float64)
    o = pl.when(click).then(pl.lit(_split_offset(seed, 1))).otherwise(pl.lit(_split_offset(seed, 0)))
    f = float(test_fraction)
    is_test = ((k + 1) * f + o).floor() > (k * f + o).floor()
    singles = [c for c in spec.categorical if not c.multivalued]
    out = lf.select("_line", label.cast(pl.Int8), *_dense(spec, first), *(c.name for c in singles),
                    is_test.alias("_test"))
    for k, c in enumerate(spec.categorical, start=1):
        longest = int(first[f"L:{c.name}"] or 0)
        if c.multivalued:
            out = out.join(_list_ids(lf, spec, c, longest), on="_line", how="left", maintain_order="left")
        else:
            out = _hashed(out, c.name, k, len(spec.categorical), int(c.hash_buckets), longest)
    out = out.select(*output_schema(spec).names, "_test")
    dirs = _fresh_dirs(out_dir)
    sinks = [out.filter(pl.col("_test") == (split == "test")).drop("_test")
             .sink_parquet(os.path.join(dirs[split], "part-00000.parquet"), compression="snappy", lazy=True)
             for split in SPLITS]
    pl.collect_all(sinks, engine="streaming")  # one scan of the CSV feeds both sinks


def _sample(spec: FeatureSpec, split_dir: str, sample_mod: int):
    """The split's rows whose XOR of the single-valued ids is 0 mod ``sample_mod``, sorted on every
    column (a list column through a key of its values: pyarrow cannot sort on lists)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    singles = [c.name for c in spec.categorical if not c.multivalued]
    names = output_schema(spec).names
    parts, rows = [], 0
    for path in split_files(split_dir):
        table = pq.read_table(path, columns=names)
        rows += table.num_rows
        parts.append(sampled(table, singles, sample_mod))
    if not parts:
        return rows, None
    table = pa.concat_tables(parts)
    lists = [c.name for c in spec.categorical if c.multivalued]
    for name in lists:   # a sort key for each list: rows equal on every other column do occur
        table = table.append_column(f"_key_{name}", pa.array(_list_key(table.column(name))))
    keys = [spec.label] + [d.name for d in spec.dense] + singles + [f"_key_{n}" for n in lists]
    return rows, table.sort_by([(n, "ascending") for n in keys]).drop_columns([f"_key_{n}" for n in lists])


def _list_key(column: Any) -> np.ndarray:
    """A uint64 per row of a ``list<int64>`` column that differs between different lists (almost
    surely): each id times an odd multiplier of its position, summed with wrap-around."""
    import pyarrow.compute as pc

    column = column.combine_chunks()
    values = pc.list_flatten(column).to_numpy().astype(np.uint64)
    parents = pc.list_parent_indices(column).to_numpy()
    offsets = column.offsets.to_numpy()
    position = np.arange(values.size) - offsets[parents]
    weights = (position.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    key = np.zeros(len(column), dtype=np.uint64)
    np.add.at(key, parents, values * weights)
    return key


def _plain(arrow_type: Any) -> str:
    return str(arrow_type).replace("large_list<element:", "list<item:")


def compare_spec_outputs(spec: FeatureSpec, ours_dir: str, peer_dir: str,
                         sample_mod: int = 1) -> Dict[str, Any]:
    """:func:`bench.prep_peers.compare_outputs` for a spec's output: per split, the same row count,
    the spec's output schema, and the sampled rows equal value for value (float32 bits included).

    Returns:
        ``{"ok": bool, "rows_checked": n, "problems": [one line each]}``.
    """
    if sample_mod < 1 or sample_mod & (sample_mod - 1):
        raise ValueError(f"sample_mod={sample_mod}: use a power of two (1 compares every row)")
    expected = output_schema(spec)
    problems: List[str] = []
    checked = 0
    for split in SPLITS:
        a_rows, a = _sample(spec, os.path.join(ours_dir, split), sample_mod)
        b_rows, b = _sample(spec, os.path.join(peer_dir, split), sample_mod)
        if a_rows != b_rows:
            problems.append(f"{split}: {a_rows} rows in ours, {b_rows} in the peer's")
        if a is None or b is None:
            if (a is None) != (b is None):
                problems.append(f"{split}: one side has no rows")
            continue
        if [_plain(t) for t in b.schema.types] != [_plain(t) for t in expected.types]:
            problems.append(f"{split}: peer schema {b.schema.types} is not {expected.types}")
            continue
        b = b.cast(expected)  # polars writes large_list where prep writes list: the same values
        if a.num_rows != b.num_rows:
            problems.append(f"{split}: {a.num_rows} sampled rows in ours, {b.num_rows} in the peer's")
            continue
        checked += a.num_rows
        for name in expected.names:
            x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
            if not x.equals(y):  # float32 equal as values (no NaN in prep's output)
                bad = next(i for i in range(len(x)) if x[i] != y[i])
                problems.append(f"{split}: column {name} differs (first at sorted row {bad}: ours "
                                f"{x[bad]}, peer {y[bad]})")
                break
    return {"ok": not problems, "rows_checked": checked, "problems": problems}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python bench/prep_spec_peer.py SPEC.json OUT INPUT...``: run the peer and print its own
    seconds (imports excluded), for the benchmark's child processes."""
    import argparse
    import json
    import time

    from ctr_model.feature_spec import spec_from_dict

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--test-fraction", type=float, default=0.1)
    args = ap.parse_args(argv)
    with open(args.spec, encoding="utf-8") as fh:
        spec = spec_from_dict(json.load(fh))
    __import__("polars")  # import time is not the peer's work
    start = time.monotonic()
    polars_spec_prep(spec, args.inputs, args.out, args.seed, args.test_fraction)
    print(time.monotonic() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
