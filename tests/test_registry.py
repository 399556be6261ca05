"""The model registry on a directory: versions, lineage, the atomic champion pointer."""
from __future__ import annotations

import json
import os

import pytest

from ctr_volcano.errors import BadInput
from ctr_volcano.retraining.registry import CHAMPION_FILE, VERSION_FILE, ModelRegistry


def _model(tmp_path, name, payload=b"w"):
    d = tmp_path / name
    (d / "warm_start").mkdir(parents=True)
    (d / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
    (d / "warm_start" / "table.gz").write_bytes(payload)
    return str(d)


def test_register_promote_and_lineage(tmp_path):
    reg = ModelRegistry(str(tmp_path / "reg"), "ctr-dnn")
    assert reg.champion() is None and reg.versions() == []
    v1 = reg.register(_model(tmp_path, "m1"), "111", metrics={"challenger_auc": 0.7},
                      window={"dates": ["2026-01-01"]}, decision={"publish": True})
    reg.promote("111")
    v2 = reg.register(_model(tmp_path, "m2", b"v2"), "222", metrics={"challenger_auc": 0.6},
                      parent="111", decision={"publish": False, "reason": "worse"})
    assert reg.champion().version == "111"           # registered, not promoted
    assert [v.version for v in reg.versions()] == ["111", "222"]
    assert reg.get("222").meta["parent"] == "111" and reg.get("222").meta["decision"]["reason"] == "worse"
    pointer = reg.promote("222")
    assert pointer["previous"] == "111" and reg.champion().version == "222"
    got = reg.download(reg.champion(), str(tmp_path / "dl"))
    assert open(os.path.join(got, "warm_start", "table.gz"), "rb").read() == b"v2"
    assert v1.model_uri.endswith("ctr-dnn/versions/111/model") and v2.meta["window"] == {}
    # the pointer is replaced by rename: no temp files are left next to it
    assert sorted(os.listdir(tmp_path / "reg" / "ctr-dnn")) == [CHAMPION_FILE, "versions"]


def test_incomplete_version_is_ignored_and_cannot_be_promoted(tmp_path):
    reg = ModelRegistry(str(tmp_path), "m")
    reg.register(_model(tmp_path, "m1"), "1", metrics={})
    os.remove(tmp_path / "m" / "versions" / "1" / VERSION_FILE)   # as if the writer died
    assert reg.versions() == [] and reg.get("1") is None
    with pytest.raises(BadInput, match="register it first"):
        reg.promote("1")


def test_reregistering_a_version_replaces_it(tmp_path):
    reg = ModelRegistry(str(tmp_path), "m")
    reg.register(_model(tmp_path, "a", b"first"), "7", metrics={"x": 1})
    reg.register(_model(tmp_path, "b", b"second"), "7", metrics={"x": 2})   # a retried step
    (v,) = reg.versions()
    assert v.meta["metrics"] == {"x": 2}
    assert open(os.path.join(v.model_uri, "warm_start", "table.gz"), "rb").read() == b"second"


def test_bad_names_and_dangling_pointer(tmp_path):
    with pytest.raises(BadInput, match="model_name"):
        ModelRegistry(str(tmp_path), "../evil")
    reg = ModelRegistry(str(tmp_path), "m")
    with pytest.raises(BadInput, match="version"):
        reg.register(_model(tmp_path, "a"), "a/b", metrics={})
    with pytest.raises(BadInput, match="model_meta"):
        reg.register(str(tmp_path), "9", metrics={})
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / CHAMPION_FILE).write_text(json.dumps({"version": "gone"}))
    with pytest.raises(BadInput, match="'gone'"):
        reg.champion()
