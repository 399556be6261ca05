"""Single-process scoring of an exported model: no pservers, no fleet, no Paddle.

The exported ``model/`` directory holds what the parameter-server run wrote (``dnn_plugin/`` dense
files and the pservers' sparse-table text shards ``000/part-*.gz``) plus what trainer 0 adds at export:
``dense.npz`` (the dense parameters pulled from the pservers), ``sparse.npz`` (each sparse table as
sorted keys + embedding rows, parsed once from the text shards: ``keys``/``rows`` the first table's,
``keys_<k>``/``rows_<k>`` table ``k``'s) and ``model_meta.json`` (which names the model family, its
config and, under ``sparse_tables``, which features each table holds: one table per distinct
``embedding_dim``, :mod:`ctr_model.sparse_tables`). The network is small, and each family
(:mod:`ctr_model.models`) carries its forward pass in numpy: evaluation and serving need neither
Paddle nor a cluster. Ids never seen in training score with a zero embedding,
as the pservers' tiny random initialisation would, almost.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.errors import BadInput
from ctr_model.feature_spec import FeatureSpec, spec_from_dict
from ctr_model.features import SCHEMA_VERSION
from ctr_model.metrics import auc, logloss  # re-exported: part of this API
from ctr_model.models import family
from ctr_model.models.attention import attention_slots, np_pool, param_names
from ctr_model.sparse_tables import SparseTable, tables_from_meta
from ctr_model.spec_attention import ATTENTION

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ModelError", "Scorer", "load_model", "read_sparse_table", "write_sparse_npz", "npz_names",
           "evaluate_files", "auc", "logloss", "MODEL_META", "DENSE_FILE", "SPARSE_FILE"]

MODEL_META = "model_meta.json"
DENSE_FILE = "dense.npz"
SPARSE_FILE = "sparse.npz"
#: Column of ``embed_w`` and first column of ``embedx_w`` in a SparseAdamSGDRule text line
#: (``key slot unseen_days delta_score show click embed_w m v beta1pow beta2pow embedx_w...``).
_EMBED_W_COL = 6
_EMBEDX_COL = 11


class ModelError(BadInput):
    """The model directory is incomplete or not ours, or the input cannot be scored: bad input naming
    the field (``model``, or ``data`` for the input), the path and the fix."""


def npz_names(k: int) -> Tuple[str, str]:
    """The names of table ``k``'s keys and rows in ``sparse.npz`` (the first table's as before tables
    were several)."""
    return ("keys", "rows") if k == 0 else (f"keys_{k}", f"rows_{k}")


def read_sparse_table(model_dir: str, dim: int, table_id: int = 0):
    """Parse the pservers' shards of sparse table ``table_id`` (the directory ``%03d`` Paddle saves it
    in) into ``(sorted keys uint64, rows float32[n, dim])``.

    Read with pyarrow's CSV reader, not pandas: this runs in trainer 0 at export time, inside the
    trainer image, which holds paddle, numpy and pyarrow only (dockerfiles/Dockerfile.trainer).
    """
    import numpy as np
    import pyarrow as pa
    from pyarrow import csv

    files = sorted(glob.glob(os.path.join(model_dir, f"{table_id:03d}", "part-*")))
    if not files:
        raise ModelError("model", model_dir, f"{table_id:03d}/ has no sparse-table shards: pass a model exported "
                                             f"by ctr-volcano train (its sparse.npz) or a checkpoint directory")
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


def write_sparse_npz(model_dir: str, dim: int | Sequence[int], table_dir: Optional[str] = None,
                     table_ids: Optional[Sequence[int]] = None) -> int:
    """Parse the pservers' text shards (under ``table_dir``, a checkpoint, or else ``model_dir``) once
    and store them as ``model_dir/sparse.npz``; returns the number of keys of all tables.

    Args:
        dim: the row width of the one table, or of each table in order.
        table_ids: Paddle's id of each table (its shard directory); default ``0, 1, ..``.
    """
    import numpy as np

    widths = [dim] if isinstance(dim, int) else list(dim)
    ids = list(table_ids) if table_ids is not None else list(range(len(widths)))
    arrays: Dict[str, Any] = {}
    if not widths:      # no categorical feature: the one empty table a model without tables reads
        arrays["keys"], arrays["rows"] = np.zeros(0, dtype=np.uint64), np.zeros((0, 1), dtype=np.float32)
    for k, (width, table_id) in enumerate(zip(widths, ids)):
        key_name, row_name = npz_names(k)
        arrays[key_name], arrays[row_name] = read_sparse_table(table_dir or model_dir, width, table_id)
    np.savez(os.path.join(model_dir, SPARSE_FILE), **arrays)
    return sum(int(len(arrays[npz_names(k)[0]])) for k in range(len(widths)))


@dataclass
class Scorer:
    """An exported CTR model in memory.

    Attributes:
        meta: ``model_meta.json`` (schema_version, hash_buckets, config, sparse_tables).
        keys: the first sparse table's sorted keys (hashed ids seen in training).
        rows: their embedding rows (the table's width: the family's ``table_width``).
        params: the dense parameters by name (float32).
        config: the training config the model was trained with (family, sizes).
        extra_tables: ``(keys, rows)`` of the other sparse tables, in ``meta["sparse_tables"]``'s
            order (a spec whose categorical features have several ``embedding_dim`` values).
    """

    meta: Dict[str, Any]
    keys: "np.ndarray"
    rows: "np.ndarray"
    params: Dict[str, "np.ndarray"]
    config: TrainConfig
    extra_tables: Tuple[Tuple["np.ndarray", "np.ndarray"], ...] = ()

    @property
    def embedding_dim(self) -> int:
        """Width of a row of the first sparse table."""
        return family(self.config.model).table_width(self.config.embedding_dim)

    @property
    def features(self) -> Optional[FeatureSpec]:
        """The feature spec the model was trained on (``None``: the Criteo layout)."""
        doc = self.meta.get("feature_spec")
        return None if doc is None else spec_from_dict(doc)

    @property
    def tables(self) -> List[SparseTable]:
        """The sparse tables and the slots each serves (one table for a model exported before
        ``sparse_tables`` was recorded)."""
        return _meta_tables(self.meta, self.config)

    def _columns_wanted(self) -> Tuple[str, List[str]]:
        """(label column, feature columns in the network's order: dense, then categorical)."""
        from ctr_model.features import DENSE_COLUMNS, LABEL, SPARSE_COLUMNS

        spec = self.features
        if spec is None:
            return LABEL, list(DENSE_COLUMNS + SPARSE_COLUMNS)
        return spec.label, [d.name for d in spec.dense] + [c.name for c in spec.slot_features]

    def _spec_inputs(self, table, spec: FeatureSpec):
        """(dense [n, d], one pooled embedding [n, width] per categorical feature) of a table in a
        spec's layout."""
        import numpy as np
        import pyarrow as pa

        if not isinstance(table, (pa.Table, pa.RecordBatch)):
            table = pa.table(table)
        missing = [c for c in self._columns_wanted()[1] if c not in table.schema.names]
        if missing:
            raise ModelError("data", missing[:5], "the input lacks these feature columns: score the output "
                                                  "of `ctr-volcano prep` with the model's feature spec")
        n, pooled = table.num_rows, []
        dense = np.stack([table.column(d.name).to_numpy(zero_copy_only=False).astype(np.float32)
                          for d in spec.dense], axis=1) if spec.dense else np.zeros((n, 0), np.float32)
        table_of = {slot: k for k, t in enumerate(self.tables) for slot in t.slots}
        items = {}
        for slot, c in enumerate(spec.slot_features):   # the crosses' columns last, as prep writes them
            col = table.column(c.name)
            col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
            if not c.multivalued:
                pooled.append(self._lookup(col.to_numpy(zero_copy_only=False).astype(np.uint64), table_of[slot]))
                continue
            offsets = col.offsets.to_numpy().astype(np.int64)
            flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint64)
            rows = self._lookup(flat[offsets[0]:offsets[-1]], table_of[slot])
            if c.pooling == ATTENTION:       # pooled below, once its query's row is there
                items[slot] = (rows, offsets)
                pooled.append(None)
                continue
            sums = np.add.reduceat(rows, offsets[:-1] - offsets[0], axis=0) if n else rows[:0]
            if c.pooling == "mean":
                sums = sums / np.diff(offsets)[:, None].astype(np.float32)
            pooled.append(sums.astype(np.float32))
        for att in attention_slots(spec):
            pooled[att.slot] = np_pool(self.params, *items[att.slot], pooled[att.query_slot], att)
        return dense, pooled

    def table_arrays(self, k: int) -> Tuple["np.ndarray", "np.ndarray"]:
        """``(keys, rows)`` of sparse table ``k``."""
        return (self.keys, self.rows) if k == 0 else self.extra_tables[k - 1]

    def _lookup(self, flat, k: int = 0):
        """Embedding rows of ids in table ``k`` (the zero row for ids not seen in training)."""
        import numpy as np

        keys = self.table_arrays(k)[0]
        if len(keys):
            pos = np.minimum(np.searchsorted(keys, flat), len(keys) - 1)
            pos[keys[pos] != flat] = len(keys)
        else:
            pos = np.zeros(flat.size, dtype=np.int64)
        return self.rows_and_zero(k)[pos]

    def _features(self, table):
        import numpy as np

        from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS

        cols = _columns(table)
        missing = [c for c in DENSE_COLUMNS + SPARSE_COLUMNS if c not in cols]
        if missing:
            raise ModelError("data", missing[:5], f"the input lacks these feature columns: score the output of "
                                                  f"`ctr-volcano prep` (columns {DENSE_COLUMNS[0]}.. and "
                                                  f"{SPARSE_COLUMNS[0]}..)")
        dense = np.stack([np.asarray(cols[c], dtype=np.float32) for c in DENSE_COLUMNS], axis=1)
        ids = np.stack([np.asarray(cols[c]).astype(np.uint64) for c in SPARSE_COLUMNS], axis=1)
        return dense, ids

    def predict_tasks(self, table) -> "np.ndarray":
        """``[n, tasks]`` probabilities (float64), one column per task (:attr:`task_names`), each the
        probability of its label's 1 on an impression: for a task that depends on another (a
        conversion after a click) the product with its parent's (pCTCVR = pCTR x pCVR)."""
        import numpy as np

        spec = self.features
        if spec is not None:
            dense, embs = self._spec_inputs(table, spec)     # pooled per feature
        else:
            dense, ids = self._features(table)
            emb = self._lookup(ids.reshape(-1)).reshape(len(dense), ids.shape[1], -1)  # unseen id: the zero row
            embs = [emb[:, i] for i in range(ids.shape[1])]
        fam = family(self.config.model)
        logits = fam.logits(self.params, embs, dense, self.config)
        if fam.tasks is not None:      # conditional probabilities per task -> over impressions
            from ctr_model.models.multitask import np_impression_probs, parent_index

            return np_impression_probs(logits, parent_index(self.task_names, self.parents))
        margin = logits[:, 1].astype(np.float64) - logits[:, 0]
        return (1.0 / (1.0 + np.exp(-margin)))[:, None]

    def predict(self, table) -> "np.ndarray":
        """Click probabilities (float64) for a pyarrow Table, pandas DataFrame or dict of columns (a
        multi-task model's first task's: :meth:`predict_tasks` has every task's).

        The network runs in float32, as Paddle trained and serves it (twice the speed of float64 on
        the matrix products, which are most of the work); only the final sigmoid is float64.
        """
        return self.predict_tasks(table)[:, 0]

    @property
    def task_names(self) -> Tuple[str, ...]:
        """The label of each task, in the order of :meth:`predict_tasks`' columns."""
        spec = self.features
        return ("label",) if spec is None else spec.task_labels

    @property
    def parents(self) -> Dict[str, str]:
        """``{task: parent}``: the tasks observed only after their parent's 1 (the spec's ``depends_on``)."""
        spec = self.features
        return {} if spec is None else spec.parents

    def rows_and_zero(self, k: int = 0) -> "np.ndarray":
        """Table ``k``'s embedding rows (float32) with one zero row appended for ids not seen in training."""
        import numpy as np

        cache = self.__dict__.setdefault("_rows_zero", {})
        if k not in cache:
            width = family(self.config.model).table_width(self.tables[k].dim)
            cache[k] = np.concatenate([np.asarray(self.table_arrays(k)[1], dtype=np.float32).reshape(-1, width),
                                       np.zeros((1, width), dtype=np.float32)])
        return cache[k]

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
    raise ModelError("data", type(table).__name__, "cannot score this type: pass a pyarrow Table, a pandas "
                                                   "DataFrame or a dict of columns")


def _load_npz(path: str, names: Sequence[str]) -> Dict[str, "np.ndarray"]:
    """The named arrays of an ``.npz`` file, read whole; a damaged file is a :class:`ModelError` naming it."""
    import zipfile

    import numpy as np

    try:
        with np.load(path) as data:
            return {name: data[name] for name in names}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelError("model", path, f"unreadable ({type(exc).__name__}: {exc}): the model directory is "
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
        raise ModelError("model", model_dir, f"no {MODEL_META}: pass the model/ directory written by "
                                             f"ctr-volcano train") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ModelError("model", model_dir, f"{MODEL_META} has schema_version {meta.get('schema_version')!r}, "
                                             f"but this version of ctr-volcano reads {SCHEMA_VERSION}: "
                                             f"retrain the model with this version")
    try:
        config = TrainConfig.from_dict(meta["config"])
    except (ConfigError, KeyError) as exc:
        raise ModelError("model", model_dir, f"the config in {MODEL_META} is not one this version reads "
                                             f"({exc}): retrain the model with this version") from None
    fam = family(config.model)
    dense_path = os.path.join(model_dir, DENSE_FILE)
    if not os.path.exists(dense_path):
        raise ModelError("model", model_dir, f"no {DENSE_FILE}: the export did not finish; re-run training")
    from ctr_model.features import NUM_DENSE, SPARSE_COLUMNS

    spec = None if meta.get("feature_spec") is None else spec_from_dict(meta["feature_spec"])
    names = (fam.dense_names(config, NUM_DENSE, len(SPARSE_COLUMNS)) if spec is None
             else fam.dense_names(config, len(spec.dense), len(spec.slot_features)) + param_names(spec))
    params = {k: v.astype(np.float32) for k, v in _load_npz(dense_path, names).items()}
    tables = [_load_table(model_dir, meta, k, fam.table_width(t.dim))
              for k, t in enumerate(_meta_tables(meta, config))]
    return Scorer(meta=meta, keys=tables[0][0], rows=tables[0][1], params=params, config=config,
                  extra_tables=tuple(tables[1:]))


def _meta_tables(meta: Mapping[str, Any], config: TrainConfig) -> List[SparseTable]:
    from ctr_model.features import SPARSE_COLUMNS

    doc = meta.get("feature_spec")
    names = SPARSE_COLUMNS if doc is None else tuple(c.name for c in spec_from_dict(doc).slot_features)
    return tables_from_meta(meta, names, config.embedding_dim)


def _load_table(model_dir: str, meta: Mapping[str, Any], k: int, width: int):
    """``(keys, rows float32)`` of table ``k``: from ``sparse.npz``, or else parsed from the shards
    (``meta["sparse_tables"][k]["table_id"]`` names Paddle's directory of them)."""
    import numpy as np

    sparse_path = os.path.join(model_dir, SPARSE_FILE)
    if os.path.exists(sparse_path):
        data = _load_npz(sparse_path, list(npz_names(k)))
        keys, rows = (data[name] for name in npz_names(k))
    else:
        recorded = meta.get("sparse_tables") or [{}]
        keys, rows = read_sparse_table(model_dir, width, int(recorded[k].get("table_id", k)))
    return keys, rows.astype(np.float32)


def evaluate_files(scorer: Scorer, paths: Sequence[str], batch_size: int = 65536) -> dict:
    """AUC, logloss, rows and CTR of a model on labelled Parquet files (a multi-task model's first
    task's, and every task's under ``tasks``: :func:`ctr_model.task_metrics.evaluate_tasks`), with
    the constant predictor's log loss (always the files' click rate) and the normalized entropy
    (logloss / it)."""
    import numpy as np

    if len(scorer.task_names) > 1:
        from ctr_model.task_metrics import evaluate_tasks

        return evaluate_tasks(scorer, paths, batch_size)
    ys, ps = [], []
    for labels, probs in scorer.predict_files(paths, batch_size=batch_size):
        if labels is None:
            raise ModelError("data", list(paths)[:3], "the evaluation data has no label column: score "
                                                      "labelled data (the output of `ctr-volcano prep`)")
        ys.append(labels)
        ps.append(probs)
    y = np.concatenate(ys) if ys else np.zeros(0)
    p = np.concatenate(ps) if ps else np.zeros(0)
    model = logloss(y, p) if y.size else float("nan")
    constant = logloss(y, np.full(y.size, y.mean())) if y.size else float("nan")
    return {"auc": auc(y, p), "logloss": model, "constant_logloss": constant,
            "normalized_entropy": model / constant if constant > 0 else float("nan"),
            "rows": int(y.size), "ctr": float(y.mean()) if y.size else float("nan")}
