"""The ONNX graph of every family on every kind of feature spec, against the numpy scorer, without
training: models with random parameters (every term away from zero) scored on random prepped rows
with seen, unseen and negative ids. The trained models of each family and layout are checked the same
way on their whole test split in tests/test_serving_families.py."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ctr_model.feature_spec import spec_from_dict
from ctr_model.infer import Scorer
from ctr_model.onnx_export import NotServable, OnnxTooLarge, build_graph, write_repository
from ctr_model.onnx_inputs import PAD_ID, feeds, layout_of, padded
from tests.onnx_models import random_scorer

ROWS = 300
#: The kinds of spec: (name, spec document, families that can take it).
SPECS = {
    "criteo": {"format": "criteo", "hash_buckets": 5000},
    "mixed": {"format": "parquet", "label": "y", "hash_buckets": 5000, "embedding_dim": 3,
              "dense": [{"name": "a", "transform": "none"}, {"name": "b", "transform": "none"}],
              "categorical": [{"name": "u", "embedding_dim": 5}, {"name": "s"},
                              {"name": "t", "multivalued": True, "pooling": "mean", "max_length": 6},
                              {"name": "h", "multivalued": True, "pooling": "sum", "max_length": 4,
                               "embedding_dim": 5},
                              {"name": "w", "embedding_dim": 2}]},
    "one_dim_lists": {"format": "parquet", "label": "y", "hash_buckets": 5000, "embedding_dim": 4,
                      "dense": [{"name": "a", "transform": "none"}],
                      "categorical": [{"name": "u"}, {"name": "t", "multivalued": True, "pooling": "mean"},
                                      {"name": "h", "multivalued": True, "pooling": "sum", "max_length": 3}]},
    "no_dense": {"format": "csv", "header": True, "label": "y", "hash_buckets": 5000, "embedding_dim": 4,
                 "categorical": [{"name": "u"}, {"name": "s"},
                                 {"name": "t", "multivalued": True, "pooling": "mean", "max_length": 5}]},
    "no_categorical": {"format": "csv", "header": True, "label": "y",
                       "dense": [{"name": "a", "transform": "none"}, {"name": "b", "transform": "none"}]},
    "lists_only": {"format": "parquet", "label": "y", "hash_buckets": 5000, "embedding_dim": 4,
                   "categorical": [{"name": "t", "multivalued": True, "pooling": "sum", "max_length": 4}]},
}
FAMILIES = [("dnn", {}), ("wide_deep", {}), ("deepfm", {}), ("dcn_v2", {"cross_layers": 2, "low_rank": 0}),
            ("dcn_v2", {"cross_layers": 2, "low_rank": 3})]


def _cases():
    for spec_name, doc in SPECS.items():
        spec = spec_from_dict(doc)
        for model, mc in FAMILIES:
            dims = {c.embedding_dim for c in spec.categorical} if not spec.is_criteo else {4}
            if model == "deepfm" and len(dims) > 1:
                continue            # refused before training: one dim for every slot
            if model in ("wide_deep", "deepfm") and not spec.categorical:
                continue            # their sparse term needs a slot (the families' numpy forward)
            yield pytest.param(spec_name, model, mc, id=f"{spec_name}-{model}{'-rank' if mc.get('low_rank') else ''}")


def _scorer(spec_doc: dict, model: str, model_config: dict, seed: int = 0) -> Scorer:
    return random_scorer(spec_from_dict(spec_doc), model, model_config, seed=seed)


def _rows(scorer: Scorer, rng) -> pa.Table:
    """Prepped rows: dense numbers, ids half seen in training, some unseen, a few negative (as int64);
    multi-valued rows of 1..max_length ids (prep never writes an empty one)."""
    spec = scorer.features
    layout = layout_of(spec)
    cols = {d: rng.normal(0, 1, ROWS).astype(np.float32) for d in layout.dense}
    table_of = {s: k for k, t in enumerate(scorer.tables) for s in t.slots}

    def ids(slot: int, n: int) -> np.ndarray:
        seen = scorer.table_arrays(table_of[slot])[0].astype(np.int64)
        out = np.where(rng.random(n) < 0.7, rng.choice(seen, n), rng.integers(0, 2 ** 40, n))
        out[rng.random(n) < 0.02] = -5
        return out

    for name, slot in zip(layout.ids, layout.single_slots):
        cols[name] = ids(slot, ROWS)
    for (name, length), slot in zip(layout.padded, layout.multi_slots):
        lengths = rng.integers(1, length + 1, ROWS)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        cols[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids(slot, int(lengths.sum()))))
    return pa.table(cols)


def _session(model):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("spec_name,model,model_config", list(_cases()))
def test_graph_is_the_numpy_scorer(spec_name, model, model_config):
    scorer = _scorer(SPECS[spec_name], model, model_config)
    table = _rows(scorer, np.random.default_rng(1))
    graph = build_graph(scorer)
    layout = layout_of(scorer.features)
    assert [i.name for i in graph.graph.input] == [name for name, _, _ in layout.inputs()]
    (served,) = _session(graph).run(["probability"], feeds(layout, table))
    expected = scorer.predict(table)
    assert served.dtype == np.float64 and served.shape == (ROWS,)
    assert np.abs(served - expected).max() <= 1e-6, np.abs(served - expected).max()
    assert expected.std() > 1e-3                       # every row scores differently: the terms act


def test_no_dense_spec_has_no_dense_input_and_no_categorical_spec_no_ids():
    assert [i.name for i in build_graph(_scorer(SPECS["no_dense"], "wide_deep", {})).graph.input] == ["ids", "t"]
    assert [i.name for i in build_graph(_scorer(SPECS["no_categorical"], "dnn", {})).graph.input] == ["dense"]
    assert [i.name for i in build_graph(_scorer(SPECS["lists_only"], "deepfm", {})).graph.input] == ["t"]


def test_pad_ids_add_nothing_and_mean_counts_only_real_ids():
    """A row's ids padded further, or the same ids listed as a shorter row, score alike; a row of pads
    only (which prep never writes) pools to the zero vector, not NaN."""
    scorer = _scorer(SPECS["one_dim_lists"], "deepfm", {})
    layout = layout_of(scorer.features)
    table = _rows(scorer, np.random.default_rng(2))
    feed = feeds(layout, table)
    sess = _session(build_graph(scorer))
    (base,) = sess.run(["probability"], feed)
    assert (feed["t"] == PAD_ID).any() and (feed["t"] != PAD_ID).all(axis=1).any()
    empty = dict(feed, t=np.full_like(feed["t"], PAD_ID))
    (pads_only,) = sess.run(["probability"], empty)
    assert np.isfinite(pads_only).all() and not np.allclose(pads_only, base)


def test_padding_places_each_row_left_aligned_and_refuses_a_longer_row():
    out = padded(np.array([0, 2, 2, 5]), np.array([7, 8, 9, 10, 11]), 3)
    assert out.tolist() == [[7, 8, PAD_ID], [PAD_ID] * 3, [9, 10, 11]]
    with pytest.raises(ValueError, match=r"t\[2\] has 3 ids, more than its max_length 2"):
        padded(np.array([0, 2, 2, 5]), np.arange(5), 2, "t")


def test_config_pbtxt_names_every_input(tmp_path):
    scorer = _scorer(SPECS["mixed"], "dnn", {})
    from ctr_model.onnx_export import graph_layout

    write_repository(str(tmp_path), b"x", graph_layout(scorer))
    text = (tmp_path / "serving" / "ctr" / "config.pbtxt").read_text()
    assert 'name: "dense" data_type: TYPE_FP32 dims: [ -1, 2 ]' in text
    assert 'name: "ids" data_type: TYPE_INT64 dims: [ -1, 3 ]' in text
    assert 'name: "t" data_type: TYPE_INT64 dims: [ -1, 6 ]' in text
    assert 'name: "h" data_type: TYPE_INT64 dims: [ -1, 4 ]' in text
    assert 'name: "probability" data_type: TYPE_FP64' in text


def test_the_size_limit_still_refuses_with_the_way_out():
    with pytest.raises(OnnxTooLarge, match=r"over the 0 MiB one ONNX file can hold.*hash_buckets"):
        build_graph(_scorer(SPECS["mixed"], "wide_deep", {}), max_bytes=2 ** 16)


def test_a_list_feature_named_as_a_fixed_input_is_refused_naming_it():
    doc = dict(SPECS["one_dim_lists"], categorical=[{"name": "u"}, {"name": "ids", "multivalued": True}])
    with pytest.raises(NotServable, match="categorical='ids': a multi-valued feature would be the graph's input"):
        build_graph(_scorer(doc, "dnn", {}))
