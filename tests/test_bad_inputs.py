"""Bad inputs are refused up front, with one line naming the field, the value and the fix.

Each test here was written against a defect found by trying the product as a new user would: the
error came only after the long work, or not at all.
"""
from __future__ import annotations

import json
import time

import pytest

from ctr_model.synthetic import write_planted_prep
from ctr_volcano.errors import BadInput
from ctr_volcano.training import train_local


@pytest.fixture(scope="module")
def prep_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("prep")
    write_planted_prep(str(d), train_rows=200, test_rows=50, shards=2)
    return d


def _copy_with_test_schema_version(prep_dir, tmp_path, version):
    import shutil

    dst = tmp_path / "prep"
    shutil.copytree(prep_dir, dst)
    schema = dst / "test" / "schema.json"
    doc = json.loads(schema.read_text())
    doc["schema_version"] = version
    schema.write_text(json.dumps(doc))
    return dst


def test_train_refuses_a_bad_test_split_before_training(prep_dir, tmp_path):
    data = _copy_with_test_schema_version(prep_dir, tmp_path, 7)
    t0 = time.time()
    with pytest.raises(BadInput, match=r"test.*schema_version"):
        train_local(str(data), str(tmp_path / "model"), workdir=str(tmp_path / "work"), log=lambda m: None)
    assert time.time() - t0 < 10
    assert not (tmp_path / "work" / "gang").exists(), "a gang was started for unusable data"
