"""The object store (SeaweedFS, the real server) restarted in the middle of a hand-off.

A private ``weed`` per test (the session's server serves the other tests and is never restarted),
killed and started again on the same ports and data while an upload runs. Uploads retry each
object whole, with bounded backoff (``ctr_model.store.retrying``); the registry's champion stays the
old version until the new one is complete, and a store down for longer than the budget fails the
registration without a half version.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest

from tests.s3store import restart_when_written

KIB = 1024


def _store(server, monkeypatch):
    from ctr_model import store as s3

    env = {"CTR_S3_ENDPOINT": server.endpoint, "CTR_S3_REGION": server.region,
           "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return s3.Store(s3.StoreConfig.from_env(env))


def _tree(root: Path, files: int, size: int) -> Dict[str, str]:
    """``files`` random files of ``size`` bytes under ``root``; returns their sha256 by path."""
    sums = {}
    for i in range(files):
        path = root / f"part-{i:04d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        path.write_bytes(data)
        sums[path.name] = hashlib.sha256(data).hexdigest()
    return sums


def _sums(fs, prefix: str) -> Dict[str, str]:
    import pyarrow.fs as pafs

    out = {}
    for info in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as fh:
                out[info.path[len(prefix) + 1:]] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_an_upload_survives_the_store_restarting_mid_way(own_s3, monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ctr_model.store")
    store = _store(own_s3, monkeypatch)
    bucket = own_s3.create_bucket("faults")
    sums = _tree(tmp_path / "ckpt", files=120, size=256 * KIB)
    seen: dict = {}
    killer = threading.Thread(target=restart_when_written, daemon=True,
                              args=(own_s3, "faults/ckpt", 2.0, seen))
    killer.start()
    started = time.monotonic()
    store.upload(str(tmp_path / "ckpt"), f"{bucket}/ckpt")
    took = time.monotonic() - started
    killer.join(60)
    retries = [r.getMessage() for r in caplog.records if "; retry " in r.getMessage()]
    print(f"\nupload of 120 x 256 KiB: {took:.1f}s; weed unreachable {seen.get('unreachable_s', 0):.1f}s "
          f"with {seen.get('written_at_kill')} objects written; {len(retries)} retries")
    assert 0 < seen["written_at_kill"] < 120, seen      # killed in the middle of the upload
    assert retries, "the upload never saw the store down"
    assert _sums(own_s3.filesystem(), "faults/ckpt") == sums   # every object whole, none missing


def _model(root: Path, files: int, size: int) -> Path:
    _tree(root, files, size)
    (root / "model_meta.json").write_text('{"format": "ctr-dnn-ps-v1"}')
    return root


def test_the_champion_stays_until_the_new_model_is_complete_across_a_restart(own_s3, monkeypatch, tmp_path):
    from ctr_volcano.retraining.registry import ModelRegistry

    _store(own_s3, monkeypatch)
    own_s3.create_bucket("reg")
    reg = ModelRegistry("s3://reg/registry", "ctr")
    reg.register(str(_model(tmp_path / "v1", 2, 4 * KIB)), "run-1", metrics={"challenger_auc": 0.7})
    reg.promote("run-1")
    v2 = _model(tmp_path / "v2", 60, 256 * KIB)
    seen: dict = {}
    killer = threading.Thread(target=restart_when_written, daemon=True,
                              args=(own_s3, "reg/registry/ctr/versions/run-2", 2.0, seen))
    killer.start()
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(v=reg.register(str(v2), "run-2", metrics={})),
                              daemon=True)
    started = time.monotonic()
    worker.start()
    champions: List[str] = []
    while worker.is_alive():
        try:
            champions.append(ModelRegistry("s3://reg/registry", "ctr").champion().version)
        except OSError:
            pass   # the store is down: nobody reads anything
        time.sleep(0.05)
    worker.join()
    killer.join(60)
    print(f"\nregister of 60 x 256 KiB: {time.monotonic() - started:.1f}s; weed unreachable "
          f"{seen.get('unreachable_s', 0):.1f}s with {seen.get('written_at_kill')} objects written; "
          f"{len(champions)} champion reads meanwhile")
    assert 0 < seen["written_at_kill"] < 61, seen
    assert "v" in box, "register failed"
    assert champions and set(champions) == {"run-1"}
    assert reg.champion().version == "run-1"        # registered is not promoted
    expected = {f"model/{p.relative_to(v2)}": hashlib.sha256(p.read_bytes()).hexdigest()
                for p in v2.rglob("*") if p.is_file()}
    got = {k: v for k, v in _sums(own_s3.filesystem(), "reg/registry/ctr/versions/run-2").items()
           if k.startswith("model/")}
    assert got == expected
    assert reg.promote("run-2")["previous"] == "run-1"
    assert reg.champion().version == "run-2"


def test_a_store_down_past_the_retry_budget_registers_nothing(own_s3, monkeypatch, tmp_path):
    from ctr_volcano.retraining.registry import ModelRegistry

    _store(own_s3, monkeypatch)
    own_s3.create_bucket("reg")
    reg = ModelRegistry("s3://reg/registry", "ctr")
    reg.register(str(_model(tmp_path / "v1", 2, 4 * KIB)), "run-1", metrics={})
    reg.promote("run-1")
    monkeypatch.setenv("CTR_S3_RETRY_S", "2")
    seen: dict = {}
    killer = threading.Thread(target=restart_when_written, daemon=True,
                              args=(own_s3, "reg/registry/ctr/versions/run-2", 8.0, seen))
    killer.start()
    started = time.monotonic()
    with pytest.raises(OSError):
        reg.register(str(_model(tmp_path / "v2", 60, 256 * KIB)), "run-2", metrics={})
    failed_after = time.monotonic() - started
    killer.join(60)
    print(f"\nstore down {seen.get('unreachable_s', 0):.1f}s, budget 2 s: register failed after {failed_after:.1f}s")
    assert failed_after < 8
    monkeypatch.setenv("CTR_S3_RETRY_S", "60")   # the checks below read a store that just came back
    assert reg.get("run-2") is None and [v.version for v in reg.versions()] == ["run-1"]
    assert reg.champion().version == "run-1"


#: What SeaweedFS answered an UploadPart right after it restarted (through pyarrow's S3 filesystem).
_RESTART_ANSWER = ("When uploading part for key 'ckpt/pserver-1/shard-3.gz' in bucket 'models': AWS Error "
                   "INTERNAL_FAILURE during UploadPart operation: We encountered an internal error, please try again.")


def test_an_internal_failure_just_after_a_restart_is_retried_and_a_refusal_is_not():
    from ctr_model import store as s3

    assert s3.is_transient(OSError(_RESTART_ANSWER))
    refusal = OSError("When uploading part for key 'k' in bucket 'models': AWS Error ACCESS_DENIED during "
                      "UploadPart operation: Access Denied")
    assert not s3.is_transient(refusal)

    answers = [OSError(_RESTART_ANSWER), OSError(_RESTART_ANSWER), "uploaded"]

    def call():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def refused():
        raise refusal

    assert s3.retrying("upload shard-3.gz", call, budget_s=10) == "uploaded" and not answers
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        s3.retrying("upload k", refused, budget_s=10)
