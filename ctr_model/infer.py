"""Single-process scoring of an exported model: no pservers, no fleet, no Paddle.

The exported ``model/`` directory holds what the parameter-server run wrote (``dnn_plugin/`` dense
files and the pservers' sparse-table text shards ``000/part-*.gz``) plus what trainer 0 adds at export:
``dense.npz`` (the dense parameters pulled from the pservers), ``sparse.npz`` (the sparse table as
sorted keys + embedding rows, parsed once from the text shards) and ``model_meta.json`` (which names
the model family and its config). The network is small, and each family
(:mod:`ctr_model.models`) carries its forward pass in numpy: evaluation and serving need neither
Paddle nor a cluster. Ids never seen in training score with a zero embedding,
as the pservers' tiny random initialisation would, almost.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.feature_spec import FeatureSpec, spec_from_dict
from ctr_model.features import SCHEMA_VERSION
from ctr_model.metrics import auc, logloss  # re-exported: part of this API
from ctr_model.models import family

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ModelError", "Scorer", "load_model", "read_sparse_table", "write_sparse_npz",
           "evaluate_files", "auc", "logloss", "MODEL_META", "DENSE_FILE", "SPARSE_FILE"]

MODEL_META = "model_meta.json"
DENSE_FILE = "dense.npz"
SPARSE_FILE = "sparse.npz"
#: Column of ``embed_w`` and first column of ``embedx_w`` in a SparseAdamSGDRule text line
#: (``key slot unseen_days delta_score show click embed_w m v beta1pow beta2pow embedx_w...``).
_EMBED_W_COL = 6
_EMBEDX_COL = 11


class ModelError(ValueError):
    """The model directory is incomplete or not ours; names the path and the fix."""


def read_sparse_table(model_dir: str, dim: int):
    """Parse the pservers' sparse-table shards into ``(sorted keys uint64, rows float32[n, dim])``.

    Read with pyarrow's CSV reader, not pandas: this runs in trainer 0 at export time, inside the
    trainer image, which holds paddle, numpy and pyarrow only (dockerfiles/Dockerfile.trainer).
    """
    import numpy as np
    import pyarrow as pa
    from pyarrow import csv

    files = sorted(glob.glob(os.path.join(model_dir, "000", "part-*")))
    if not files:
        raise ModelError(f"{model_dir}/000/ has no sparse-table shards: pass a model exported by "
                         f"ctr-volcano train (its sparse.npz) or a checkpoint directory")
    cols = [0, _EMBED_W_COL] + list(range(_EMBEDX_COL, _EMBEDX_COL + dim - 1))
    names = [f"f{c}" for c in cols]
    keys, rows = [], []
    for path in files:
        if os.path.getsize(path) <= 20:        # empty gzip member
            continue
        with pa.input_stream(path, compression="gzip") as stream:
            try:
                table = csv.read_csv(
                    stream,
                    read_options=csv.ReadOptions(autogenerate_column_names=True),
                    parse_options=csv.ParseOptions(delimiter=" "),
                    convert_options=csv.ConvertOptions(
                        include_columns=names,
                        column_types={n: (pa.uint64() if n == "f0" else pa.float32()) for n in names}))
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" in str(exc):
                    continue
                raise
        if table.num_rows == 0:
            continue
        keys.append(table.column("f0").to_numpy())
        rows.append(np.stack([table.column(n).to_numpy() for n in names[1:]], axis=1))
    if not keys:
        return np.zeros(0, dtype=np.uint64), np.zeros((0, dim), dtype=np.float32)
    k = np.concatenate(keys)
    r = np.concatenate(rows)
    order = np.argsort(k, kind="stable")
    return k[order], r[order]


def write_sparse_npz(model_dir: str, dim: int, table_dir: Optional[str] = None) -> int:
    """Parse the pservers' text shards (under ``table_dir``, a checkpoint, or else ``model_dir``) once
    and store them as ``model_dir/sparse.npz``; returns the number of keys."""
    import numpy as np

    keys, rows = read_sparse_table(table_dir or model_dir, dim)
    np.savez(os.path.join(model_dir, SPARSE_FILE), keys=keys, rows=rows)
    return int(len(keys))


@dataclass
class Scorer:
    """An exported CTR model in memory.

    Attributes:
        meta: ``model_meta.json`` (schema_version, hash_buckets, config).
        keys: sorted sparse keys (hashed ids seen in training).
        rows: their embedding rows (the sparse table's width: the family's ``table_width``).
        params: the dense parameters by name (float32).
        config: the training config the model was trained with (family, sizes).
    """

    meta: Dict[str, Any]
    keys: "np.ndarray"
    rows: "np.ndarray"
    params: Dict[str, "np.ndarray"]
    config: TrainConfig

    @property
    def embedding_dim(self) -> int:
        """Width of a sparse-table row."""
        return family(self.config.model).table_width(self.config.embedding_dim)

    @property
    def features(self) -> Optional[FeatureSpec]:
        """The feature spec the model was trained on (``None``: the Criteo layout)."""
        doc = self.meta.get("feature_spec")
        return None if doc is None else spec_from_dict(doc)

    def _columns_wanted(self) -> Tuple[str, List[str]]:
        """(label column, feature columns in the network's order: dense, then categorical)."""
        from ctr_model.features import DENSE_COLUMNS, LABEL, SPARSE_COLUMNS

        spec = self.features
        if spec is None:
            return LABEL, list(DENSE_COLUMNS + SPARSE_COLUMNS)
        return spec.label, [d.name for d in spec.dense] + [c.name for c in spec.categorical]

    def _spec_inputs(self, table, spec: FeatureSpec):
        """(dense [n, d], pooled embeddings [n, k * dim]) of a table in a spec's layout."""
        import numpy as np
        import pyarrow as pa

        if not isinstance(table, (pa.Table, pa.RecordBatch)):
            table = pa.table(table)
        missing = [c for c in self._columns_wanted()[1] if c not in table.schema.names]
        if missing:
            raise ModelError(f"input lacks feature columns {missing[:5]}: score the output of "
                             f"`ctr-volcano prep` with the model's feature spec")
        dense = np.stack([table.column(d.name).to_numpy(zero_copy_only=False).astype(np.float32)
                          for d in spec.dense], axis=1)
        n, pooled = table.num_rows, []
        for c in spec.categorical:
            col = table.column(c.name)
            col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
            if not c.multivalued:
                pooled.append(self._lookup(col.to_numpy(zero_copy_only=False).astype(np.uint64)))
                continue
            offsets = col.offsets.to_numpy().astype(np.int64)
            flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint64)
            rows = self._lookup(flat[offsets[0]:offsets[-1]])
            sums = np.add.reduceat(rows, offsets[:-1] - offsets[0], axis=0) if n else rows[:0]
            if c.pooling == "mean":
                sums = sums / np.diff(offsets)[:, None].astype(np.float32)
            pooled.append(sums.astype(np.float32))
        return dense, (np.concatenate(pooled, axis=1) if pooled else np.zeros((n, 0), np.float32))

    def _lookup(self, flat):
        """Embedding rows of ids (the zero row for ids not seen in training)."""
        import numpy as np

        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, flat), len(self.keys) - 1)
            pos[self.keys[pos] != flat] = len(self.keys)
        else:
            pos = np.zeros(flat.size, dtype=np.int64)
        return self._rows_and_zero()[pos]

    def _features(self, table):
        import numpy as np

        from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS

        cols = _columns(table)
        missing = [c for c in DENSE_COLUMNS + SPARSE_COLUMNS if c not in cols]
        if missing:
            raise ModelError(f"input lacks feature columns {missing[:5]}: score the output of "
                             f"`ctr-volcano prep` (columns {DENSE_COLUMNS[0]}.. and {SPARSE_COLUMNS[0]}..)")
        dense = np.stack([np.asarray(cols[c], dtype=np.float32) for c in DENSE_COLUMNS], axis=1)
        ids = np.stack([np.asarray(cols[c]).astype(np.uint64) for c in SPARSE_COLUMNS], axis=1)
        return dense, ids

    def predict(self, table) -> "np.ndarray":
        """Click probabilities (float64) for a pyarrow Table, pandas DataFrame or dict of columns.

        The network runs in float32, as Paddle trained and serves it (twice the speed of float64 on
        the matrix products, which are most of the work); only the final sigmoid is float64.
        """
        import numpy as np

        spec = self.features
        if spec is not None:
            dense, emb = self._spec_inputs(table, spec)     # pooled per feature
        else:
            dense, ids = self._features(table)
            emb = self._lookup(ids.reshape(-1))                  # unseen id: the zero row
        emb = emb.reshape(len(dense), -1, self.embedding_dim)
        logits = family(self.config.model).logits(self.params, emb, dense, self.config)
        margin = logits[:, 1].astype(np.float64) - logits[:, 0]
        return 1.0 / (1.0 + np.exp(-margin))

    def _rows_and_zero(self) -> "np.ndarray":
        """The embedding rows (float32) with one zero row appended for ids not seen in training."""
        import numpy as np

        cached = self.__dict__.get("_rows_zero")
        if cached is None:
            cached = np.concatenate([np.asarray(self.rows, dtype=np.float32).reshape(-1, self.embedding_dim),
                                     np.zeros((1, self.embedding_dim), dtype=np.float32)])
            self.__dict__["_rows_zero"] = cached
        return cached

    def predict_files(self, paths: Sequence[str], batch_size: int = 65536
                      ) -> Iterator[Tuple[Optional["np.ndarray"], "np.ndarray"]]:
        """Stream Parquet files; yields ``(labels or None, probabilities)`` per batch."""
        import numpy as np
        import pyarrow.parquet as pq

        label, columns = self._columns_wanted()
        for path in paths:
            pf = pq.ParquetFile(path)
            names = set(pf.schema_arrow.names)
            wanted = ([label] if label in names else []) + columns
            for batch in pf.iter_batches(batch_size=batch_size, columns=[c for c in wanted if c in names]):
                labels = (np.asarray(batch.column(label).to_numpy(zero_copy_only=False))
                          if label in names else None)
                yield labels, self.predict(batch)


def _columns(table) -> Dict[str, object]:
    if hasattr(table, "column_names") and hasattr(table, "column"):   # pyarrow Table / RecordBatch
        return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    if hasattr(table, "columns") and hasattr(table, "__getitem__"):     # pandas DataFrame
        return {str(c): table[c].to_numpy() for c in table.columns}
    if isinstance(table, dict):
        return table
    raise ModelError(f"cannot score a {type(table).__name__}: pass a pyarrow Table, a pandas "
                     f"DataFrame or a dict of columns")


def _load_npz(path: str, names: Sequence[str]) -> Dict[str, "np.ndarray"]:
    """The named arrays of an ``.npz`` file, read whole; a damaged file is a :class:`ModelError` naming it."""
    import zipfile

    import numpy as np

    try:
        with np.load(path) as data:
            return {name: data[name] for name in names}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelError(f"{path} is unreadable ({type(exc).__name__}: {exc}): the model directory is "
                         f"damaged; copy it again or re-run training") from None


def load_model(model_dir: str) -> Scorer:
    """Rebuild an exported model in this process.

    Raises:
        ModelError: the directory lacks ``model_meta.json``/``dense.npz`` or the sparse table.
    """
    import numpy as np

    meta_path = os.path.join(model_dir, MODEL_META)
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
    except FileNotFoundError:
        raise ModelError(f"{meta_path} not found: pass the model/ directory written by "
                         f"ctr-volcano train") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(f"{meta_path}: schema_version {meta.get('schema_version')!r}, but this version "
                         f"of ctr-volcano reads {SCHEMA_VERSION}: retrain the model with this version")
    try:
        config = TrainConfig.from_dict(meta["config"])
    except (ConfigError, KeyError) as exc:
        raise ModelError(f"{meta_path}: its config is not one this version reads ({exc}): retrain the "
                         f"model with this version") from None
    fam = family(config.model)
    dim = fam.table_width(config.embedding_dim)
    dense_path = os.path.join(model_dir, DENSE_FILE)
    if not os.path.exists(dense_path):
        raise ModelError(f"{dense_path} missing: the export did not finish; re-run training")
    from ctr_model.features import NUM_DENSE, SPARSE_COLUMNS

    names = fam.dense_names(config, NUM_DENSE, len(SPARSE_COLUMNS))
    params = {k: v.astype(np.float32) for k, v in _load_npz(dense_path, names).items()}
    sparse_path = os.path.join(model_dir, SPARSE_FILE)
    if os.path.exists(sparse_path):
        data = _load_npz(sparse_path, ["keys", "rows"])
        keys, rows = data["keys"], data["rows"]
    else:
        keys, rows = read_sparse_table(model_dir, dim)
    return Scorer(meta=meta, keys=keys, rows=rows.astype(np.float32), params=params, config=config)


def evaluate_files(scorer: Scorer, paths: Sequence[str], batch_size: int = 65536) -> dict:
    """AUC, logloss, rows and CTR of a model on labelled Parquet files."""
    import numpy as np

    ys, ps = [], []
    for labels, probs in scorer.predict_files(paths, batch_size=batch_size):
        if labels is None:
            raise ModelError("evaluation data has no label column")
        ys.append(labels)
        ps.append(probs)
    y = np.concatenate(ys) if ys else np.zeros(0)
    p = np.concatenate(ps) if ps else np.zeros(0)
    return {"auc": auc(y, p), "logloss": logloss(y, p) if y.size else float("nan"),
            "rows": int(y.size), "ctr": float(y.mean()) if y.size else float("nan")}
