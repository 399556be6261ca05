"""The registry and the data window on the object store, against the real S3 server (SeaweedFS).

Both reach ``s3://`` through :func:`ctr_model.store.filesystem_for`, so they honour ``CTR_S3_ENDPOINT``
and the AWS keys exactly as training and the hand-off do; pyarrow's own ``FileSystem.from_uri``
would have gone to AWS whatever the environment said.
"""
from __future__ import annotations

import json

import pytest

from ctr_model import store as s3
from ctr_volcano.errors import BadInput
from ctr_volcano.retraining.registry import ModelRegistry
from ctr_volcano.retraining.window import WINDOW_FILE, copy_window, resolve_window


def _model(tmp_path, name, payload):
    d = tmp_path / name
    (d / "warm_start").mkdir(parents=True)
    (d / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
    (d / "warm_start" / "table.gz").write_bytes(payload)
    return str(d)


def test_registry_on_the_object_store(s3_bucket, store_client, tmp_path):
    root = s3.join(s3_bucket, "registry")
    reg = ModelRegistry(root, "ctr-dnn")
    reg.register(_model(tmp_path, "m1", b"one"), "111", metrics={"challenger_auc": 0.7})
    reg.promote("111")
    reg.register(_model(tmp_path, "m2", b"two"), "222", metrics={"challenger_auc": 0.71}, parent="111")
    reg.promote("222")
    # what landed in the store, read with an independent client
    pointer = json.loads(store_client.read_bytes(s3.join(root, "ctr-dnn", "champion.json")))
    assert pointer["version"] == "222" and pointer["previous"] == "111"
    assert store_client.read_bytes(s3.join(root, "ctr-dnn", "versions", "222", "model", "warm_start", "table.gz")) == b"two"
    # and a fresh registry object (another step's process) reads it back
    again = ModelRegistry(root, "ctr-dnn")
    champion = again.champion()
    assert champion.version == "222" and champion.model_uri == s3.join(root, "ctr-dnn/versions/222/model")
    got = again.download(champion, str(tmp_path / "dl"))
    assert (tmp_path / "dl" / "warm_start" / "table.gz").read_bytes() == b"two" and got


def test_data_window_on_the_object_store(s3_bucket, store_client, tmp_path):
    for day in ("2026-01-01", "2026-01-02"):
        store_client.write_bytes(s3.join(s3_bucket, f"clicks/day={day}/part-0.tsv"), f"{day}\n".encode())
    window = resolve_window(s3.join(s3_bucket, "clicks/day={date}"), run_date="2026-01-02", window_days=2)
    copied = copy_window(window, str(tmp_path / "raw"))
    assert copied == ["2026-01-01-part-0.tsv", "2026-01-02-part-0.tsv"]
    assert (tmp_path / "raw" / "2026-01-02-part-0.tsv").read_text() == "2026-01-02\n"
    assert json.loads((tmp_path / "raw" / WINDOW_FILE).read_text())["files"] == copied
    missing = resolve_window(s3.join(s3_bucket, "clicks/day={date}"), run_date="2026-01-05")
    with pytest.raises(BadInput, match="no data for 2026-01-05"):
        copy_window(missing, str(tmp_path / "raw2"))
