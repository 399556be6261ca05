"""The feature spec (validated once, every problem at once) and its transforms (vectorised == reference,
the Criteo preset == today's code)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from ctr_model import features as F
from ctr_model.feature_spec import (
    CategoricalFeature,
    DenseFeature,
    FeatureSpec,
    SpecError,
    criteo_spec,
    load_spec,
    spec_from_dict,
    spec_from_text,
)
from ctr_model.transforms import (
    categorical_column,
    categorical_ids,
    dense_column,
    dense_value,
    multivalued_column,
    standardize_stats,
)

CSV_SPEC = {
    "format": "csv", "header": True, "label": "clicked",
    "dense": [{"name": "price", "transform": "log1p", "fill": 1.0},
              {"name": "age", "transform": "standardize"},
              {"name": "score", "transform": "none", "fill": -1.0},
              {"name": "count", "transform": "criteo"}],
    "categorical": [{"name": "user_id", "hash_buckets": 5000, "embedding_dim": 8},
                    {"name": "recent_items", "multivalued": True, "separator": "|",
                     "pooling": "mean", "max_length": 3}],
    "ignore": ["second_label"], "hash_buckets": 997,
}


def test_criteo_preset_is_todays_layout():
    spec = FeatureSpec()
    assert spec == criteo_spec() and spec.is_criteo
    assert spec.output_columns == F.RAW_COLUMNS and spec.columns == F.RAW_COLUMNS
    assert [d.transform for d in spec.dense] == ["criteo"] * F.NUM_DENSE
    assert {c.hash_buckets for c in spec.categorical} == {F.DEFAULT_HASH_BUCKETS}
    assert spec_from_dict({}) == spec
    assert spec_from_dict({"format": "criteo", "hash_buckets": 1000}) == criteo_spec(1000)
    assert spec_from_dict(json.loads(json.dumps(criteo_spec(1000).to_dict()))) == criteo_spec(1000)


def test_spec_round_trips_through_json_and_yaml(tmp_path):
    spec = spec_from_dict(CSV_SPEC)
    assert spec.delimiter == "," and spec.categorical[1].hash_buckets == 997
    assert spec.categorical[0].embedding_dim == 8 and spec.categorical[1].embedding_dim == 10
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    path = tmp_path / "spec.yaml"
    path.write_text("format: tsv\ncolumns: [y, a, tags]\nlabel: y\ndense: [{name: a}]\n"
                    "categorical:\n  - {name: tags, multivalued: true, separator: ','}\n")
    tsv = load_spec(str(path))
    assert tsv.delimiter == "\t" and tsv.categorical[0].multivalued and tsv.columns == ("y", "a", "tags")


def _problems(doc):
    with pytest.raises(SpecError) as info:
        spec_from_dict(doc)
    assert "\n" not in str(info.value)
    return {key: fix for key, _value, fix in info.value.problems}


def test_every_bad_key_is_reported_at_once():
    bad = dict(CSV_SPEC, colour="red", delimiter=";;",
               dense=[{"name": "price", "transform": "sqrt"}, {"name": "user_id"},
                      {"name": "x", "transform": "none", "mean": 1.0}, {"nme": "y"}],
               categorical=[{"name": "user_id", "hash_buckets": 1, "pooling": "max", "bogus": 1},
                            {"name": "t", "multivalued": "yes", "max_length": 0}])
    problems = _problems(bad)
    assert set(problems) >= {"colour", "delimiter", "dense[0].transform", "dense[2].mean", "dense[3]",
                             "categorical[0].bogus", "categorical[0].hash_buckets",
                             "categorical[0].pooling", "categorical[1].multivalued",
                             "categorical[1].max_length", "categorical[0].name"}
    assert "duplicated" in problems["categorical[0].name"]
    assert "sqrt" not in problems["dense[0].transform"] and "standardize" in problems["dense[0].transform"]


def test_columns_must_match_the_declared_roles():
    doc = {"format": "tsv", "columns": ["y", "a", "b", "a"], "label": "y",
           "dense": [{"name": "a"}], "categorical": [{"name": "c"}]}
    problems = _problems(doc)
    assert "unknown column" in problems["categorical[0].name"]
    assert "columns" in problems
    assert "no role" in _problems(dict(doc, columns=["y", "a", "c", "z"]))["columns"]
    assert "needs columns" in _problems({"format": "tsv", "label": "y", "dense": [{"name": "a"}]})["columns"]
    assert "remove columns" in _problems({"format": "parquet", "columns": ["y", "a"], "label": "y",
                                          "dense": [{"name": "a"}]})["columns"]


def test_layout_rules_per_format():
    assert "fixed Criteo layout" in _problems({"format": "criteo", "label": "click"})["label"]
    assert "other than the delimiter" in _problems(dict(CSV_SPEC, categorical=[
        {"name": "user_id"}, {"name": "recent_items", "multivalued": True, "separator": ","}]))[
        "categorical[1].separator"]
    assert "tab-separated" in _problems({"format": "tsv", "delimiter": ",", "columns": ["y", "a"],
                                         "label": "y", "dense": [{"name": "a"}]})["delimiter"]
    assert "format" in _problems({"format": "xlsx", "label": "y", "dense": [{"name": "a"}]})
    with pytest.raises(SpecError, match="not valid YAML or JSON"):
        spec_from_text("format: [csv")
    with pytest.raises(SpecError, match="cannot read it"):
        load_spec("/nonexistent/spec.yaml")


def test_criteo_preset_transforms_equal_todays_code():
    spec = criteo_spec(1000)
    raw = pa.array([b"68fd1e64", b"", None, b"abc", b"0123456789"] * 3, type=pa.binary())
    for j in (1, 7, 26):
        assert np.array_equal(categorical_column(spec, spec.categorical[j - 1], raw),
                              F.hash_categorical(raw, j, 1000))
    dense = pa.array([None, 0, 5, -3, 10 ** 9], type=pa.int64())
    assert np.array_equal(dense_column(spec.dense[0], dense), F.dense_transform(dense))
    assert dense_value(spec.dense[0], "5") == F.dense_value("5")


def test_dense_transforms_vectorised_equal_reference():
    spec = spec_from_dict(CSV_SPEC)
    price, age, score, count = spec.dense
    age = DenseFeature("age", "standardize", mean=30.0, std=4.0)
    raw = ["", "0", "2.5", "-7", "1e3", None]
    numbers = pa.array([None, 0.0, 2.5, -7.0, 1000.0, None])
    for feature in (price, age, score):
        vector = dense_column(feature, numbers)
        assert vector.dtype == np.float32
        assert [float(v) for v in vector] == [dense_value(feature, r) for r in raw]
    assert dense_value(price, "") == pytest.approx(np.log1p(1.0))
    assert dense_value(score, None) == -1.0
    assert dense_value(age, "34") == 1.0
    assert dense_value(count, 12) == F.dense_value("12")
    with pytest.raises(F.BadRow, match="not a number"):
        dense_value(price, "abc")
    with pytest.raises(ValueError, match="standardize without mean"):
        dense_column(spec.dense[1], numbers)
    assert standardize_stats(pa.array([1.0, 3.0, None]), fill=2.0) == (2.0, pytest.approx(np.sqrt(2 / 3)))
    assert standardize_stats(np.array([5.0, 5.0])) == (5.0, 1.0)


def test_categorical_ids_strings_and_integers_agree():
    spec = spec_from_dict(CSV_SPEC)
    user = spec.categorical[0]
    ints = categorical_column(spec, user, pa.array([1, None, 123456789012], type=pa.int64()))
    text = categorical_column(spec, user, pa.array(["1", "", "123456789012"]))
    assert np.array_equal(ints, text)
    assert [categorical_ids(spec, user, v) for v in (1, None, "123456789012")] == [[int(i)] for i in ints]
    assert ints[1] == 0 and ints.min() >= 0 and ints.max() < 5000 and 0 not in (ints[0], ints[2])
    other = spec_from_dict(dict(CSV_SPEC, categorical=list(reversed(CSV_SPEC["categorical"]))))
    moved = categorical_column(other, other.categorical[1], pa.array(["1"]))
    assert moved[0] != ints[0], "each feature has its own salt"


def test_multivalued_lists_and_split_strings_agree_with_reference():
    spec = spec_from_dict(CSV_SPEC)
    items = spec.categorical[1]
    lists = [["a", "b", "c", "d"], [], None, ["", "x"], ["q"], [7, 8]]
    texts = ["a|b|c|d", "", None, "|x", "q", "7|8"]
    from_lists = multivalued_column(spec, items, pa.array([[str(v) for v in row] if row else row
                                                           for row in lists]))
    from_text = multivalued_column(spec, items, pa.array(texts))
    assert from_lists.to_pylist() == from_text.to_pylist()
    expected = [categorical_ids(spec, items, row) for row in lists]
    assert from_lists.to_pylist() == expected
    assert [len(ids) for ids in expected] == [3, 1, 1, 1, 1, 2]
    assert expected[1] == expected[2] == [1], "an empty list is the feature's empty id"
    assert expected[0] == [categorical_ids(spec, items, v)[0] for v in "abc"]
    assert categorical_ids(spec, items, "a|b|c|d") == expected[0]


def test_dataclass_is_frozen_and_validated_on_construction():
    spec = criteo_spec()
    with pytest.raises(Exception):
        spec.format = "csv"  # type: ignore[misc]
    with pytest.raises(SpecError, match="hash_buckets"):
        FeatureSpec(format="parquet", columns=(), label="y",
                    categorical=(CategoricalFeature("a", hash_buckets=1),), dense=())
