"""The CTR network as a Paddle static program: the feeds, the sparse lookups, the loss and the AUC.

26 categorical slots share one embedding table (held on the pservers in PS mode); a feature spec's
slots get one table per distinct ``embedding_dim`` (:mod:`ctr_model.sparse_tables`); the dense inputs
come as one variable, and a spec without dense features has none (nor a dense slot in the data). What sits between the lookups and the 2-way softmax is the model family's
(``TrainConfig.model``, :mod:`ctr_model.models`): the DNN by default. The parameter names are fixed
(``SparseFeatFactors``, ``out.w``, ``out.b`` and the family's) so the exported model can be rebuilt in
one process without Paddle (:mod:`ctr_model.infer`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ctr_model.config import TrainConfig
from ctr_model.feature_spec import FeatureSpec
from ctr_model.features import NUM_DENSE, SPARSE_COLUMNS
from ctr_model.models import family
from ctr_model.models.attention import attention_slots, param_names, pool
from ctr_model.sparse_tables import EMBEDDING_NAME, SparseTable, sparse_tables
from ctr_model.spec_attention import ATTENTION

__all__ = ["EMBEDDING_NAME", "net_tables", "DENSE_INPUT", "LABEL_INPUT", "Net", "build_net", "slot_layout",
           "dense_param_names", "label_input", "task_labels", "fix_proto_shadowing", "make_optimizer", "PADDLE_FLAGS", "prepare_paddle"]

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
    return family(config.model).dense_names(config, n_dense, len(slots)) + param_names(features)


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
    task_labels: list = field(default_factory=list)   # the labels of the tasks after the first
    task_probs: list = field(default_factory=list)    # a multi-task family's probability per task

    @property
    def feed_vars(self) -> list:
        """Variables in the MultiSlot order of the data files: the labels, C1..C26, dense (if any)."""
        return [self.label] + list(self.task_labels) + list(self.sparse_inputs) + \
            ([self.dense_input] if self.dense_input is not None else [])


def slot_layout(features: Optional[FeatureSpec]) -> Tuple[List[Tuple[str, Optional[str]]], int]:
    """``([(slot name, pooling or None), ...], dense width)``: the network's input slots for a
    feature spec, in the slot files' order. Criteo (``None``) keeps its names ``C1..C26``; a spec's
    slots are ``cat0, cat1, ..`` (a feature may be called ``label``), multi-valued ones pooled, the
    crosses' last (:attr:`~ctr_model.feature_spec.FeatureSpec.slot_features`)."""
    if features is None or features.is_criteo:
        return [(name, None) for name in SPARSE_COLUMNS], NUM_DENSE
    return ([(f"cat{k}", c.pooling if c.multivalued else None) for k, c in enumerate(features.slot_features)],
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
            slot is pooled (``sum``/``mean``) with ``sequence_pool``, or by target attention against
            its query's row (:mod:`ctr_model.models.attention`). A spec without dense features
            has no dense input (the family gets ``None``), one without categorical features no slot.
    """
    import paddle

    slots, n_dense = slot_layout(features)
    labels = [paddle.static.data(name=label_input(k), shape=[-1, 1], dtype="int64")
              for k in range(len(task_labels(features)))]
    sparse = [paddle.static.data(name=name, shape=[-1, 1], dtype="int64", lod_level=1)
              for name, _ in slots]
    dense = paddle.static.data(name=DENSE_INPUT, shape=[-1, n_dense], dtype="float32") if n_dense else None
    fam = family(config.model)
    tables = net_tables(config, features)
    table_of = {slot: t for t in tables for slot in t.slots}
    attrs = {t.name: paddle.ParamAttr(name=t.name, initializer=paddle.nn.initializer.Uniform(-0.01, 0.01))
             for t in tables}
    embs: List[Any] = []
    items: Dict[int, Any] = {}
    for slot, (ids, (_, pooling)) in enumerate(zip(sparse, slots)):
        table = table_of[slot]
        width = fam.table_width(table.dim)
        emb = _lookup(ids, table, attrs[table.name], config, ps_mode)
        if pooling == ATTENTION:        # pooled below, once its query's row is there
            items[slot] = paddle.reshape(emb, shape=[-1, width])    # one row per item, its LoD kept
            embs.append(None)
            continue
        if pooling is not None:         # a multi-valued feature: its ids' rows pooled into one
            emb = paddle.static.nn.sequence_pool(input=emb, pool_type="sum" if pooling == "sum" else "average")
        embs.append(paddle.reshape(emb, shape=[-1, width]))
    for att in attention_slots(features):
        embs[att.slot] = paddle.reshape(pool(items[att.slot], embs[att.query_slot], att),
                                        shape=[-1, int(embs[att.query_slot].shape[1])])
    predict, example_loss, task_probs = _head(fam, fam.build(embs, dense, config), labels, features)
    loss = paddle.mean(example_loss)
    auc, _batch_auc, states = paddle.static.auc(input=predict, label=labels[0], num_thresholds=2**12,
                                                slide_steps=0)
    return Net(label=labels[0], sparse_inputs=sparse, dense_input=dense, predict=predict, loss=loss,
               auc=auc, auc_states=list(states), example_loss=example_loss, task_labels=labels[1:],
               task_probs=task_probs)


def _head(fam, out, labels, features: Optional[FeatureSpec]):
    """``(2-way prediction of the first task, per-row loss, impression probability per task)``: the
    softmax and its cross entropy for a single-task family's logits; a multi-task family's per-task
    probabilities composed and trained by :func:`ctr_model.models.multitask.task_losses`."""
    import paddle

    if fam.tasks is None:
        predict = paddle.nn.functional.softmax(out)
        example_loss = paddle.nn.functional.cross_entropy(input=predict, label=labels[0], reduction="none",
                                                          use_softmax=False)
        return predict, example_loss, [predict]
    from ctr_model.models.multitask import parent_index, task_losses

    names = task_labels(features)
    probs, example_loss = task_losses(out, labels, parent_index(names, features.parents if features else {}),
                                      fam.tasks.loss)
    return paddle.concat([1.0 - probs[0], probs[0]], axis=1), example_loss, probs


def label_input(k: int) -> str:
    """The feed name of task ``k``'s label (the first task's is :data:`LABEL_INPUT`)."""
    return LABEL_INPUT if k == 0 else f"{LABEL_INPUT}_{k}"


def task_labels(features: Optional[FeatureSpec]) -> Tuple[str, ...]:
    """The label columns of the data, one per task (Criteo's one ``label``)."""
    return ("label",) if features is None or features.is_criteo else features.task_labels


def make_optimizer(config: TrainConfig):
    """The optimizer named by the config (Adam uses lazy sparse updates, as PaddleRec does)."""
    import paddle

    if config.optimizer != "adam":  # pragma: no cover - TrainConfig refuses others
        raise ValueError(f"optimizer {config.optimizer!r} is not supported")
    return paddle.optimizer.Adam(learning_rate=config.learning_rate, lazy_mode=True)
