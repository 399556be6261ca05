"""The feature schema shared by prep, training, evaluation and serving.

Prep writes Parquet with exactly these columns; training and evaluation refuse data whose
``schema.json`` carries another :data:`SCHEMA_VERSION`. The transforms themselves (dense
normalisation, stable categorical hashing) live here too, so they are identical everywhere.
"""
from __future__ import annotations

__all__ = [
    "SCHEMA_VERSION", "LABEL", "NUM_DENSE", "NUM_SPARSE", "DENSE_COLUMNS", "SPARSE_COLUMNS",
    "RAW_COLUMNS", "DEFAULT_HASH_BUCKETS", "SCHEMA_FILE",
]

#: Bump whenever the columns, dtypes or transforms change.
SCHEMA_VERSION = 1

LABEL = "label"                                          # int8, 0/1
NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_COLUMNS = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))   # float32, transformed
SPARSE_COLUMNS = tuple(f"C{i}" for i in range(1, NUM_SPARSE + 1))  # int64 hashed ids in [0, buckets)
RAW_COLUMNS = (LABEL,) + DENSE_COLUMNS + SPARSE_COLUMNS          # the 40 TSV fields, in order

DEFAULT_HASH_BUCKETS = 1_000_001

#: Written by prep into every split directory (``train/``, ``test/``) next to the Parquet shards:
#: ``{"schema_version": 1, "hash_buckets": N, "columns": [...], "rows": n}``.
SCHEMA_FILE = "schema.json"
