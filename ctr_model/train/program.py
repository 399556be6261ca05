"""The Paddle program both roles build: fleet, network, optimizer; the features it is shaped by.

A pserver and a trainer must build the same program (the tables and the dense layers' widths), so
both take the network's shape from the data's feature spec (:func:`data_features`,
:func:`with_features`) and build it here.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.config import ConfigError, TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.data import resolve_split, trainable_features
from ctr_model.feature_spec import FeatureSpec
from ctr_model.train.peers import wait_for_peers

__all__ = ["build", "pull_dense", "data_features", "with_features", "with_tasks", "LOSS_SUM"]

#: Persistable accumulator of the summed loss, read by the progress thread.
LOSS_SUM = "ctr_loss_sum"


def build(config: TrainConfig, spec: Optional[RoleSpec] = None,
          features: Optional[FeatureSpec] = None) -> Tuple[Any, Any]:
    """Fleet, network and optimizer: ``(fleet, net)``. A trainer (``spec``) first waits for the
    pservers' endpoints itself (:func:`~ctr_model.train.peers.wait_for_peers`) where Paddle would poll
    them every 3 s: pserver 0's Gloo rendezvous server before ``fleet.init``, the pservers before
    ``minimize``.

    Raises:
        PeersUnreachable: a trainer's pservers did not accept connections within the wait.
    """
    import paddle
    import paddle.distributed.fleet as fleet

    from ctr_model.net import build_net, make_optimizer, net_tables

    paddle.enable_static()
    paddle.seed(config.seed)
    paddle.static.default_main_program().random_seed = config.seed
    paddle.static.default_startup_program().random_seed = config.seed
    if spec is not None:
        wait_for_peers(spec, "pserver 0's rendezvous server", [f"{spec.pserver_hosts[0]}:{spec.gloo_port}"])
    fleet.init(is_collective=False)
    net = build_net(config, ps_mode=True, features=features)
    loss_sum = paddle.static.create_global_var(shape=[1], value=0.0, dtype="float32",
                                               persistable=True, name=LOSS_SUM)
    paddle.assign(loss_sum + paddle.sum(net.example_loss), output=loss_sum)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    # fewer, larger sparse-table files per pserver (Paddle's default of 1000 makes saving slow)
    for sparse_table in net_tables(config, features):
        table = strategy.sparse_table_configs.add()
        table.table_name = sparse_table.name
        table.shard_num = config.sparse_shards
    optimizer = fleet.distributed_optimizer(make_optimizer(config), strategy)
    if spec is not None:
        wait_for_peers(spec, "the pservers", spec.ps_endpoints())
    optimizer.minimize(net.loss)
    return fleet, net


def pull_dense(fleet: Any) -> None:
    """Copy the pservers' current dense parameters into this trainer (after loading a checkpoint,
    before exporting)."""
    from paddle.distributed.ps.utils.public import get_the_one_recv_context, get_the_one_send_context

    rt = fleet.fleet._runtime_handle
    dense_map = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
    send_ctx = get_the_one_send_context(rt.context, split_dense_table=rt.is_heter_ps_mode,
                                        ep_list=rt.endpoints)
    rt._pull_all_dense(rt.scopes, send_ctx, dense_map)


def data_features(spec: RoleSpec) -> Optional[FeatureSpec]:
    """A pserver's view of the data's feature spec, which shapes the program it serves (the dense
    layers' widths): read from the training split's ``schema.json``, on a volume or in the store
    (only that file is read there)."""
    if s3.is_uri(spec.data_dir):
        assert spec.store is not None   # the contract reads the store's settings for s3:// data
        src, _, schema = wsp.remote_split(s3.Store(spec.store), spec.data_dir, "train")
        return trainable_features(schema, src)
    return resolve_split(spec.data_dir, "train").features


def with_features(config: TrainConfig, features: Optional[FeatureSpec]) -> TrainConfig:
    """The config with the spec's first embedding width (that of the first sparse table, the only one
    when every feature has the same), on pservers and trainers alike.

    Raises:
        ConfigError: the model family cannot mix the spec's widths (``deepfm``), naming a feature.
    """
    config = with_tasks(config, features)
    if features is None or not features.categorical:
        return config
    from ctr_model.sparse_tables import mixed_dims_refusal, sparse_tables
    from ctr_model.spec_crosses import crosses_refusal

    refusal = (crosses_refusal(config.model, features.crosses)
               or mixed_dims_refusal(config.model, sparse_tables(features, config.embedding_dim)))
    if refusal:
        raise ConfigError("model", config.model, refusal)
    if config.model == "wide_deep":     # the crosses are its last slots, read by the wide part only
        config = config.replace(model_config={**config.model_config, "crosses": len(features.crosses)})
    return config.replace(embedding_dim=features.categorical[0].embedding_dim)


def with_tasks(config: TrainConfig, features: Optional[FeatureSpec]) -> TrainConfig:
    """The config of a multi-task family with ``model_config.tasks`` the spec's number of labels; a
    family that cannot train the data's labels refused (one line: the model, why, the fix).

    Raises:
        ConfigError: a single-task family on several labels, or a multi-task family on labels it
            cannot train (one label, a task without the parent it needs, more than it takes).
    """
    from ctr_model.models import family
    from ctr_model.models.multitask import tasks_refusal
    from ctr_model.net import task_labels

    labels = task_labels(features)
    refusal = tasks_refusal(config.model, labels, features.parents if features else {})
    if refusal:
        raise ConfigError("model", config.model, refusal)
    if family(config.model).tasks is None:
        return config
    return config.replace(model_config={**config.model_config, "tasks": len(labels)})
