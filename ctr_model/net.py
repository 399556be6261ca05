"""The CTR network as a Paddle static program: the feeds, the sparse lookups, the loss and the AUC.

26 categorical slots share one embedding table (held on the pservers in PS mode); a feature spec's
slots get one table per distinct ``embedding_dim`` (:mod:`ctr_model.sparse_tables`); the dense inputs
come as one variable, and a spec without dense features has none (nor a dense slot in the data). What sits between the lookups and the 2-way softmax is the model family's
(``TrainConfig.model``, :mod:`ctr_model.models`): the DNN by default. The parameter names are fixed
(``SparseFeatFactors``, ``out.w``, ``out.b`` and the family's) so the exported model can be rebuilt in
one process without Paddle (:mod:`ctr_model.infer`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ctr_model.config import TrainConfig
from ctr_model.feature_spec import FeatureSpec
from ctr_model.features import NUM_DENSE, SPARSE_COLUMNS
from ctr_model.models import family
from ctr_model.sparse_tables import EMBEDDING_NAME, SparseTable, sparse_tables

__all__ = ["EMBEDDING_NAME", "net_tables", "DENSE_INPUT", "LABEL_INPUT", "Net", "build_net", "slot_layout",
           "dense_param_names", "fix_proto_shadowing", "make_optimizer", "PADDLE_FLAGS", "prepare_paddle"]

DENSE_INPUT = "dense_input"
LABEL_INPUT = "label"


#: Paddle flags parameter-server mode needs, read by Paddle from the environment once, when it is
#: first imported. Paddle 3 builds static programs in PIR by default, where ``sparse_embedding``
#: fails (``bool(Tensor) is not supported in static graph mode``) and fleet's PS passes rewrite only
#: the legacy program; PaddleRec turns PIR off in PS mode for Paddle 3.0 the same way. Paddle 2.6
#: knows the flag and has it off already.
PADDLE_FLAGS = {"FLAGS_enable_pir_api": "0"}


def prepare_paddle() -> None:
    """Set :data:`PADDLE_FLAGS`, import Paddle and put its ``proto`` package first.

    Call it before anything imports Paddle in a process that builds PS programs.

    Raises:
        RuntimeError: Paddle was imported already with PIR on (the flags come too late).
    """
    import os
    import sys

    os.environ.update(PADDLE_FLAGS)
    already = "paddle" in sys.modules
    fix_proto_shadowing()
    if already:
        import paddle.base.framework as framework

        if framework.get_flags("FLAGS_enable_pir_api")["FLAGS_enable_pir_api"]:
            raise RuntimeError("Paddle was imported with PIR on before ctr_model.net.prepare_paddle(): "
                               "call it before the first `import paddle`, or set FLAGS_enable_pir_api=0 "
                               "in the environment")


def fix_proto_shadowing() -> None:
    """Make Paddle's generated ``proto`` package win over proto-plus's top-level ``proto``.

    ``paddle/base/trainer_desc.py`` *appends* its own directory to ``sys.path`` and then imports
    ``from proto import trainer_desc_pb2``; with kfp installed, proto-plus's ``proto`` is found first
    and ``train_from_dataset`` fails. Putting Paddle's directory first fixes it.
    """
    import os
    import sys

    import paddle.base

    base = os.path.dirname(paddle.base.__file__)
    if sys.path[:1] != [base]:
        sys.path.insert(0, base)
    loaded = sys.modules.get("proto")
    if loaded is not None and not (getattr(loaded, "__file__", "") or "").startswith(base):
        # proto-plus was imported already (e.g. by a library); drop it so Paddle's package loads.
        for name in [n for n in sys.modules if n == "proto" or n.startswith("proto.")]:
            del sys.modules[name]


def dense_param_names(config: TrainConfig, features: Optional[FeatureSpec] = None) -> List[str]:
    """Names of the model family's dense parameters (what trainer 0 exports) on ``features``
    (``None``: Criteo)."""
    slots, n_dense = slot_layout(features)
    return family(config.model).dense_names(config, n_dense, len(slots))


@dataclass
class Net:
    """Handles to the built program's variables."""

    label: object
    sparse_inputs: list
    dense_input: Optional[object]       # None: a spec without dense features
    predict: object
    loss: object
    auc: object
    auc_states: list
    example_loss: object = None

    @property
    def feed_vars(self) -> list:
        """Variables in the MultiSlot order of the data files: label, C1..C26, dense (if any)."""
        return [self.label] + list(self.sparse_inputs) + ([self.dense_input] if self.dense_input is not None else [])


def slot_layout(features: Optional[FeatureSpec]) -> Tuple[List[Tuple[str, Optional[str]]], int]:
    """``([(slot name, pooling or None), ...], dense width)``: the network's input slots for a
    feature spec, in the slot files' order. Criteo (``None``) keeps its names ``C1..C26``; a spec's
    slots are ``cat0, cat1, ..`` (a feature may be called ``label``), multi-valued ones pooled."""
    if features is None or features.is_criteo:
        return [(name, None) for name in SPARSE_COLUMNS], NUM_DENSE
    return ([(f"cat{k}", c.pooling if c.multivalued else None) for k, c in enumerate(features.categorical)],
            len(features.dense))


def net_tables(config: TrainConfig, features: Optional[FeatureSpec]) -> List[SparseTable]:
    """The sparse tables the network of ``config`` on ``features`` looks its slots up in."""
    return sparse_tables(features, config.embedding_dim)


def _lookup(ids, table: SparseTable, attr, config: TrainConfig, ps_mode: bool):
    import paddle

    width = family(config.model).table_width(table.dim)
    if ps_mode:
        return paddle.static.nn.sparse_embedding(input=ids, size=[config.hash_buckets, width], param_attr=attr)
    return paddle.static.nn.embedding(input=ids, size=[config.hash_buckets, width], is_sparse=True,
                                      param_attr=attr)


def build_net(config: TrainConfig, ps_mode: bool, features: Optional[FeatureSpec] = None) -> Net:
    """Build the network into the current default main/startup programs.

    Args:
        config: the model family and its sizes.
        ps_mode: ``True`` puts the embedding on the pservers (``sparse_embedding``); ``False``
            builds an ordinary local embedding of ``hash_buckets`` rows (single-process training).
        features: the data's feature spec (``None``: Criteo). Categorical features of one
            ``embedding_dim`` share a table, as Criteo's 26 do (their ids are salted per feature),
            one table per distinct dim (:func:`net_tables`); a multi-valued feature's variable-length
            slot is pooled (``sum``/``mean``) with ``sequence_pool``. A spec without dense features
            has no dense input (the family gets ``None``), one without categorical features no slot.
    """
    import paddle

    slots, n_dense = slot_layout(features)
    label = paddle.static.data(name=LABEL_INPUT, shape=[-1, 1], dtype="int64")
    sparse = [paddle.static.data(name=name, shape=[-1, 1], dtype="int64", lod_level=1)
              for name, _ in slots]
    dense = paddle.static.data(name=DENSE_INPUT, shape=[-1, n_dense], dtype="float32") if n_dense else None
    fam = family(config.model)
    tables = net_tables(config, features)
    table_of = {slot: t for t in tables for slot in t.slots}
    attrs = {t.name: paddle.ParamAttr(name=t.name, initializer=paddle.nn.initializer.Uniform(-0.01, 0.01))
             for t in tables}
    embs = []
    for slot, (ids, (_, pooling)) in enumerate(zip(sparse, slots)):
        table = table_of[slot]
        width = fam.table_width(table.dim)
        emb = _lookup(ids, table, attrs[table.name], config, ps_mode)
        if pooling is not None:         # a multi-valued feature: its ids' rows pooled into one
            emb = paddle.static.nn.sequence_pool(input=emb, pool_type="sum" if pooling == "sum" else "average")
        embs.append(paddle.reshape(emb, shape=[-1, width]))
    logits = fam.build(embs, dense, config)
    predict = paddle.nn.functional.softmax(logits)
    example_loss = paddle.nn.functional.cross_entropy(
        input=predict, label=label, reduction="none", use_softmax=False)
    loss = paddle.mean(example_loss)
    auc, _batch_auc, states = paddle.static.auc(input=predict, label=label, num_thresholds=2**12,
                                                slide_steps=0)
    return Net(label=label, sparse_inputs=sparse, dense_input=dense, predict=predict, loss=loss,
               auc=auc, auc_states=list(states), example_loss=example_loss)


def make_optimizer(config: TrainConfig):
    """The optimizer named by the config (Adam uses lazy sparse updates, as PaddleRec does)."""
    import paddle

    if config.optimizer != "adam":  # pragma: no cover - TrainConfig refuses others
        raise ValueError(f"optimizer {config.optimizer!r} is not supported")
    return paddle.optimizer.Adam(learning_rate=config.learning_rate, lazy_mode=True)
