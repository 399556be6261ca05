"""Raw request columns -> the graph's inputs: Criteo's the same numbers as prep's per-line transform, a
spec's the same as the transforms' per-value reference forms, every encoding of a value (text,
numbers, JSON lists, the log's own separator) alike, and every malformed input named with its row."""
from __future__ import annotations

import numpy as np
import pytest

from ctr_model.feature_spec import criteo_spec, spec_from_dict
from ctr_model.features import transform_line
from ctr_model.onnx_inputs import PAD_ID
from ctr_model.transforms import categorical_ids, dense_value
from ctr_volcano.errors import BadInput
from ctr_volcano.serving.raw import RAW_INPUTS, multivalued_ids
from ctr_volcano.serving.raw import model_inputs as feed
from tests.serving_fixtures import raw_lines

BUCKETS = 1 << 20


def model_inputs(columns, buckets):
    """(dense, ids) of the Criteo model's feed."""
    out = feed(criteo_spec(buckets), columns)
    return out["dense"], out["ids"]


def _columns(rows):
    return {name: ("BYTES", np.array([r[1 + j] for r in rows], dtype=object)) for j, name in enumerate(RAW_INPUTS)}


def test_inputs_equal_preps_transform_of_the_same_lines(sample_dir):
    rows = raw_lines(sample_dir, 500)
    dense, ids = model_inputs(_columns(rows), BUCKETS)
    parsed = [transform_line("\t".join(r), BUCKETS) for r in rows]
    assert np.array_equal(dense, np.stack([p[1] for p in parsed]))
    assert np.array_equal(ids, np.stack([p[2] for p in parsed]))


def test_numeric_dense_columns_equal_their_text(sample_dir):
    rows = raw_lines(sample_dir, 200)
    cols = _columns(rows)
    for name in RAW_INPUTS[:13]:
        text = cols[name][1]
        cols[name] = ("FP64", np.array([float(v) if v != "" else np.nan for v in text]))
    assert np.array_equal(model_inputs(cols, BUCKETS)[0], model_inputs(_columns(rows), BUCKETS)[0])


@pytest.mark.parametrize("edit,field", [
    (lambda c: c.pop("I13"), "inputs"),
    (lambda c: c.update(extra=("BYTES", np.array(["1", "2"], dtype=object))), "inputs"),
    (lambda c: c.update(C3=("BYTES", np.array([1, 2], dtype=object))), "C3[0]"),
    (lambda c: c.update(I2=("BYTES", np.array(["1.5", "2"], dtype=object))), "I2[0]"),
    (lambda c: c.update(C1=("FP32", np.array([1.0, 2.0]))), "C1"),
    (lambda c: c.update(I1=("BYTES", np.array([["1", "2"]], dtype=object))), "I1"),
])
def test_malformed_columns_are_named(edit, field):
    cols = _columns([["0"] + ["1"] * 13 + ["abcd0123"] * 26] * 2)
    edit(cols)
    with pytest.raises(BadInput) as info:
        model_inputs(cols, BUCKETS)
    assert info.value.field == field and "\n" not in str(info.value)


SPEC = spec_from_dict({"format": "csv", "header": True, "label": "clicked", "ignore": ["other"],
                       "dense": [{"name": "visits", "transform": "criteo"}, {"name": "price", "fill": 2.0},
                                 {"name": "age", "transform": "standardize", "mean": 30.0, "std": 5.0}],
                       "categorical": [{"name": "user", "hash_buckets": 1000},
                                       {"name": "items", "multivalued": True, "separator": "|",
                                        "pooling": "mean", "max_length": 3}]})
TEXT = {"visits": ["3", "", "-4"], "price": ["1.5", "", "1e2"], "age": ["31", "", "29.5"],
        "user": ["u1", "", "123"], "items": ["a|b", "", "7|a|b|c"]}


def _text_columns(**change):
    cols = {k: ("BYTES", np.array(v, dtype=object)) for k, v in TEXT.items()}
    cols.update(change)
    return cols


def test_a_spec_row_is_transformed_by_the_reference_forms():
    """Each value as ``ctr_model.transforms``' per-value reference form gives it (empty: the fill; a
    list cut at max_length; an empty list: the feature's empty id), then padded."""
    out = feed(SPEC, _text_columns())
    for j, d in enumerate(SPEC.dense):
        assert out["dense"][:, j].tolist() == [dense_value(d, v) for v in TEXT[d.name]]
    user, items = SPEC.categorical
    assert out["ids"][:, 0].tolist() == [categorical_ids(SPEC, user, v)[0] for v in TEXT["user"]]
    for i, v in enumerate(TEXT["items"]):
        ids = categorical_ids(SPEC, items, v)
        assert out["items"][i].tolist() == ids + [PAD_ID] * (3 - len(ids))
    assert out["items"][1].tolist() == [1, PAD_ID, PAD_ID]       # slot 2's empty id


def test_other_encodings_of_the_same_values_give_the_same_inputs():
    base = feed(SPEC, _text_columns())
    numbers = _text_columns(visits=("FP64", np.array([3.0, np.nan, -4.0])),
                            price=("FP64", np.array([1.5, np.nan, 100.0])),
                            age=("FP32", np.array([31, np.nan, 29.5], dtype=np.float32)))
    jsons = _text_columns(items=("BYTES", np.array(['["a", "b"]', "[]", '[7, "a", "b", "c"]'], dtype=object)))
    mixed = _text_columns(items=("BYTES", np.array(['["a","b"]', "", "7|a|b|c"], dtype=object)))
    as_bytes = _text_columns(user=("BYTES", np.array([b"u1", b"", b"123"], dtype=object)))
    with_log_columns = _text_columns(clicked=("BYTES", np.array(["0", "1", "0"], dtype=object)),
                                     other=("BYTES", np.array(["x", "y", "z"], dtype=object)))
    for cols in (numbers, jsons, mixed, as_bytes, with_log_columns):
        out = feed(SPEC, cols)
        assert all(np.array_equal(out[k], base[k]) for k in base), cols
    ints = feed(SPEC, _text_columns(user=("INT64", np.array([5, 123, 7]))))
    assert ints["ids"][1, 0] == base["ids"][2, 0]                # 123 and "123" are one id
    # the ids unpadded (what the request log's profile counts; the transform cuts at max_length), in row order
    items = SPEC.categorical[1]
    offsets, ids = multivalued_ids(SPEC, items, np.array(TEXT["items"], dtype=object))
    assert offsets.tolist() == [0, 2, 3, 6] and ids[3:].tolist() == categorical_ids(SPEC, items, "7|a|b|c")
    for cols in (jsons, mixed):
        got = multivalued_ids(SPEC, items, cols["items"][1])
        assert got[0].tolist() == offsets.tolist() and got[1].tolist() == ids.tolist(), cols["items"]


@pytest.mark.parametrize("change,field,fix", [
    ({"price": ("BYTES", np.array(["1", "x", ""], dtype=object))}, "price[1]='x'", "not a number"),
    ({"visits": ("BYTES", np.array(["1", "2", "2.5"], dtype=object))}, "visits[2]='2.5'", "integer text"),
    ({"items": ("BYTES", np.array(["a", '["a", 1.5]', ""], dtype=object))}, "items[1]=", "send each id as text or an integer"),
    ({"items": ("BYTES", np.array(["a", "[broken", ""], dtype=object))}, "items[1]='[broken'", "not a JSON list"),
    ({"items": ("INT64", np.array([1, 2, 3]))}, "items='INT64'", "BYTES"),
    ({"user": ("BYTES", np.array(["a", 3, "b"], dtype=object))}, "user[1]=3", "INT64"),
    ({"price": ("BYTES", np.array(["1", "2"], dtype=object))}, "price='shape [2]'", "[3]"),
    ({"extra": ("BYTES", np.array(["1", "2", "3"], dtype=object))}, "inputs=['extra']", "takes only"),
])
def test_malformed_spec_inputs_are_named_with_the_row_and_the_fix(change, field, fix):
    with pytest.raises(BadInput) as info:
        feed(SPEC, _text_columns(**change))
    assert str(info.value).startswith(field) and fix in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_input_is_named():
    cols = _text_columns()
    del cols["age"]
    with pytest.raises(BadInput, match=r"inputs=\['age'\]: send one input per raw column"):
        feed(SPEC, cols)


def test_serve_refuses_a_directory_that_is_no_model_in_one_line(tmp_path, capsys):
    from ctr_volcano.app.cli import main as cli

    rc = cli.main(["serve", "--model", str(tmp_path), "--port", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"ctr-volcano serve: error: --model='{tmp_path}': ") and "Traceback" not in err
    assert "no model_meta.json: pass the model/ directory" in err and len(err.strip().splitlines()) == 1


def test_integral_floats_under_criteo_are_its_integers():
    floats = feed(SPEC, _text_columns(visits=("BYTES", np.array(["260.0", "1e3", ""], dtype=object))))
    ints = feed(SPEC, _text_columns(visits=("BYTES", np.array(["260", "1000", ""], dtype=object))))
    assert np.array_equal(floats["dense"], ints["dense"])
