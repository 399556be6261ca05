"""Both backends' checks of the training inputs, made before any gang starts (seconds, not hours).

The training data must exist with this code's schema and enough shards for the trainers; an init
model must be one this run can continue (schema, hash buckets, network shape, pservers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ctr_volcano.errors import BadInput

__all__ = ["TrainData", "check_train_data", "check_init_model"]


@dataclass(frozen=True)
class TrainData:
    """The training split as the boundary checks found it.

    Attributes:
        where: the split's path or ``s3://`` URI.
        shards: how many Parquet shards it has.
        hash_buckets: the buckets prep hashed it into (0 for data in a store: the trainers read it).
        features: its feature spec (a :class:`ctr_model.feature_spec.FeatureSpec`; ``None``: the
            Criteo layout, or data in a store).
    """

    where: str
    shards: int
    hash_buckets: int
    features: Any = None


def check_train_data(data_path: str, trainers: int, *, client: Any = None, model: str = "dnn") -> TrainData:
    """Both backends' checks of the training data, made before any gang starts (seconds, not hours).

    The ``train`` split must exist with this code's schema and at least ``trainers`` shards; a local
    ``test`` split (scored after training) must match it; a local split's feature spec must suit the
    model family (``deepfm`` cannot mix ``embedding_dim`` values).

    Args:
        data_path: a prep output (or its train split); an ``s3://`` URI needs ``client``.
        trainers: the gang's trainers (each takes whole shards).
        client: a :class:`ctr_model.store.Store` when ``data_path`` is in the object store.
        model: the run's model family (``TrainConfig.model``).

    Raises:
        BadInput: ``ctr_model``'s own, as they are: naming ``data`` (missing, unreadable or
            mismatched data: ``DataError``, ``SchemaMismatch``), the store's URI (``StoreError``),
            ``trainers`` (too few shards) or ``config.model`` (a family that cannot train the spec's
            embedding dims).
        TransientError: the object store stayed unreachable (``StoreUnreachable``).
    """
    from ctr_model.data import check_enough_shards, check_test_split, resolve_split, trainable_features

    if client is not None:
        from ctr_model.workspace import remote_split

        where, shards, schema = remote_split(client, data_path, "train")
        trainable_features(schema, where)   # a spec the trainer cannot train fails here, not in the gang
        found = TrainData(where=where, shards=len(shards), hash_buckets=0)
    else:
        split = resolve_split(data_path, "train")
        check_test_split(data_path, split)   # scored after training: a bad one must fail before it
        found = TrainData(where=split.path, shards=len(split.files), hash_buckets=split.hash_buckets,
                          features=split.features)
        _check_dims(model, split.features)
    check_enough_shards(found.where, found.shards, trainers)
    return found


def _check_dims(model: str, features: Any) -> None:
    from ctr_model.sparse_tables import mixed_dims_refusal, sparse_tables
    from ctr_model.spec_crosses import crosses_refusal

    refusal = None if features is None else crosses_refusal(model, features.crosses)
    refusal = refusal or mixed_dims_refusal(model, sparse_tables(features, 1))
    if refusal is None and features is not None and not features.is_criteo:
        from ctr_model.models.multitask import tasks_refusal

        refusal = tasks_refusal(model, features.task_labels, features.parents)
    if refusal:
        raise BadInput("config.model", model, refusal)


def check_init_model(init_model: str, config: Mapping[str, Any], pservers: int,
                     data_hash_buckets: Optional[int], features: Any = None) -> None:
    """Refuse, as bad input (``WarmStartError``, naming ``init_model``), an init model the run
    described by ``config`` cannot continue.

    ``hash_buckets`` follows the data when the config leaves it out, and ``embedding_dim`` the first
    sparse table's of the data's feature spec, as in the trainers; ``features``
    (:attr:`TrainData.features`, ``None``: Criteo) is compared feature by feature.
    """
    from ctr_model.config import TrainConfig
    from ctr_model.features import SCHEMA_VERSION
    from ctr_model.sparse_tables import sparse_tables
    from ctr_model.warm_start import check_compatible, read_init_model

    full = TrainConfig.from_dict(config).to_dict()
    if "hash_buckets" not in config and data_hash_buckets:
        full["hash_buckets"] = data_hash_buckets
    full["embedding_dim"] = sparse_tables(features, full["embedding_dim"])[0].dim
    if full["model"] == "wide_deep":     # its crosses come from the spec, as in the trainers
        full["model_config"] = {**full["model_config"], "crosses": len(getattr(features, "crosses", ()))}
    check_compatible(read_init_model(init_model), full, pservers, SCHEMA_VERSION,
                     features.to_dict() if features is not None else None)
