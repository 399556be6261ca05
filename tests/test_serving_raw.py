"""Raw request columns -> model inputs: the same numbers as prep's per-line transform, numeric dense
columns (NaN = missing) equal to their text form, and every malformed column named."""
from __future__ import annotations

import numpy as np
import pytest

from ctr_model.features import transform_line
from ctr_volcano.errors import BadInput
from ctr_volcano.serving.raw import RAW_INPUTS, model_inputs
from tests.serving_fixtures import raw_lines

BUCKETS = 1 << 20


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
    (lambda c: c.update(C1=("INT64", np.array([1, 2]))), "C1"),
    (lambda c: c.update(I1=("BYTES", np.array([["1", "2"]], dtype=object))), "I1"),
])
def test_malformed_columns_are_named(edit, field):
    cols = _columns([["0"] + ["1"] * 13 + ["abcd0123"] * 26] * 2)
    edit(cols)
    with pytest.raises(BadInput) as info:
        model_inputs(cols, BUCKETS)
    assert info.value.field == field and "\n" not in str(info.value)
