"""The object-store hand-off against a real S3 server (SeaweedFS, see ``tests/s3store.py``).

The gang reads ``s3://`` data and writes checkpoints, model and metrics to an ``s3://`` prefix; no
role shares a directory with another (each works in its own scratch). Bad locations fail at the
boundary with one line, exit 2, in seconds.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

import pytest

from ctr_model import store as s3
from ctr_volcano.app.cli.main import main
from ctr_volcano.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT
from ctr_volcano.training.local.backend import train_local
from tests.gang_helpers import SMALL, gang_job_id, job_processes, parent_pid, write_small_planted


@pytest.fixture(scope="module")
def planted_local(tmp_path_factory):
    return write_small_planted(tmp_path_factory.mktemp("planted"))


@pytest.fixture
def planted_uri(planted_local, s3_bucket, store_client):
    uri = s3.join(s3_bucket, "prep")
    store_client.upload(planted_local[0], uri)
    return uri


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------- store client
def test_store_streams_a_tree_both_ways(store_client, s3_bucket, tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "big.bin").write_bytes(os.urandom(9 << 20))   # > 2 copy chunks
    (src / "top.txt").write_text("hello")
    store_client.upload(str(src), s3.join(s3_bucket, "t"))
    assert store_client.list(s3.join(s3_bucket, "t")) == [("a", True), ("top.txt", False)]
    store_client.download(s3.join(s3_bucket, "t"), str(tmp_path / "back"))
    assert (tmp_path / "back" / "a" / "b" / "big.bin").read_bytes() == (src / "a" / "b" / "big.bin").read_bytes()
    assert store_client.read_bytes(s3.join(s3_bucket, "t/top.txt")) == b"hello"
    assert store_client.read_bytes(s3.join(s3_bucket, "t/none")) is None
    store_client.delete(s3.join(s3_bucket, "t"))
    # no object is left (SeaweedFS removes the emptied directories asynchronously)
    assert [n for n, is_dir in store_client.list(s3.join(s3_bucket, "t"), recursive=True) if not is_dir] == []


# -------------------------------------------------------------------------- bad input, via the CLI
def _train_cli(tmp_path, data, *extra):
    t0 = time.monotonic()
    rc = main(["train", "--data", data, "--model-out", str(tmp_path / "m"), "--workdir",
               str(tmp_path / "w"), *extra])
    return rc, time.monotonic() - t0


@pytest.mark.parametrize("case", ["wrong-credentials", "missing-bucket", "missing-prefix",
                                  "unreachable-endpoint", "not-a-prep-output", "output-bucket"])
def test_bad_store_locations_fail_at_the_boundary(case, planted_uri, s3_bucket, store_client, tmp_path,
                                                  monkeypatch, capsys):
    data, extra = planted_uri, []
    if case == "wrong-credentials":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        expect = "refused the credentials"
    elif case == "missing-bucket":
        data = "s3://no-such-bucket-ctr/prep"
        expect = "does not exist"
    elif case == "missing-prefix":
        data = s3.join(s3_bucket, "nothing-here")
        expect = "nothing under this prefix"
    elif case == "unreachable-endpoint":
        monkeypatch.setenv("CTR_S3_ENDPOINT", f"http://127.0.0.1:{_free_port()}")
        expect = "cannot reach the store"
    elif case == "not-a-prep-output":
        store_client.write_bytes(s3.join(s3_bucket, "other/readme.txt"), b"not data")
        data = s3.join(s3_bucket, "other")
        expect = "ctr-volcano prep"
    else:
        extra = ["--output", "s3://no-such-bucket-ctr/run"]
        expect = "does not exist"
    rc, seconds = _train_cli(tmp_path, data, *extra)
    err = capsys.readouterr().err.strip()
    # a store that refuses is bad input (2); one that cannot be reached is an outage (75), not the user's fault
    assert rc == (EXIT_TRANSIENT if case == "unreachable-endpoint" else EXIT_BAD_INPUT), err
    assert len(err.splitlines()) == 1, err
    assert expect in err and "s3://" in err, err
    assert seconds < 15, f"took {seconds:.1f}s"
    assert not (tmp_path / "w").exists(), "a gang was started"


# ------------------------------------------------------------------------------- real gangs
@pytest.fixture
def job_id():
    yield from gang_job_id("s3test", grace_s=10, poll_s=0.2)


@pytest.mark.slow
def test_gang_trains_from_the_store_into_the_store(planted_uri, planted_local, s3_bucket, store_client,
                                                    store_env, job_id, tmp_path):
    out = s3.join(s3_bucket, "run")
    result = train_local(planted_uri, str(tmp_path / "model"), {**SMALL, "epochs": 2}, max_retry=0,
                         workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None,
                         output_dir=out, store_env=store_env)
    m = result.metrics
    assert [e["epoch"] for e in m["epochs"]] == [1, 2]
    assert m["epochs"][0]["examples"] == 16_000            # each trainer fetched its own shards
    assert m["test"]["auc"] > 0.7, m["test"]
    names = {n for n, _ in store_client.list(out)}
    assert {"model", "checkpoints", "metrics.json"} <= names
    ckpts = {n for n, _ in store_client.list(s3.join(out, "checkpoints"))}
    assert ckpts == {"epoch-1", "epoch-2"}
    epoch2 = {n for n, _ in store_client.list(s3.join(out, "checkpoints/epoch-2"), recursive=True)}
    assert {"_COMPLETE", "meta.json", "000", "001"} <= epoch2
    # both pservers' parts of the sparse table reached the store (each uploaded its own) and the model
    # (its warm-start copy of the final checkpoint, from which trainer 0 exported sparse.npz)
    names = {n for n, _ in store_client.list(s3.join(out, "model"))}
    assert {"sparse.npz", "dense.npz", "model_meta.json", "warm_start"} <= names, names
    parts = [n for n, _ in store_client.list(s3.join(out, "model/warm_start/000"))]
    assert {p.split("-")[1] for p in parts if p.startswith("part-")} == {"000", "001"}, parts
    from ctr_model.infer import load_model

    assert load_model(result.model_dir).meta["hash_buckets"] == 100_003
    # nothing was shared through the local filesystem, and every role removed its scratch
    assert not (tmp_path / "w" / "output").exists()
    gang = tmp_path / "w" / "gang"
    assert not any(p.name == "scratch" for p in gang.rglob("scratch")), list(gang.rglob("*"))


@pytest.mark.slow
def test_killed_trainer_resumes_from_the_store(planted_uri, s3_bucket, store_client, store_env, job_id,
                                               tmp_path):
    out = s3.join(s3_bucket, "run")
    box: dict = {}

    def kill_after_first_checkpoint():
        marker = s3.join(out, "checkpoints/epoch-1/_COMPLETE")
        deadline = time.time() + 240
        while time.time() < deadline and "killed_at" not in box:
            if store_client.exists(marker):
                pids = [p for p in job_processes(job_id, "CTR_ROLE=trainer", "VC_TASK_INDEX=1")
                        if b"ctr_model.train" in open(f"/proc/{p}/cmdline", "rb").read()]
                roots = [p for p in pids if parent_pid(p) not in pids]   # not gloo's helper children
                if roots:
                    os.kill(roots[0], signal.SIGKILL)
                    box["killed_at"] = time.time()
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_first_checkpoint)
    killer.start()
    result = train_local(planted_uri, str(tmp_path / "model"), {**SMALL, "epochs": 3}, max_retry=1,
                         workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None,
                         output_dir=out, store_env=store_env)
    killer.join()
    assert "killed_at" in box
    assert result.attempts == 2
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    assert result.metrics["test"]["auc"] > 0.6
    # the restarted pservers took their tables from the store, not from a shared directory
    for i in (0, 1):
        log = (tmp_path / "w" / "gang" / "attempt-2" / f"pserver-{i}.log").read_text()
        assert f"fetched {out}/checkpoints/epoch-" in log, log[-2000:]


@pytest.mark.slow
def test_gang_trains_a_feature_spec_from_the_store(s3_bucket, store_client, store_env, job_id, tmp_path):
    """Data prepped with a feature spec (Parquet with a list column) trains from the store: every
    role, pservers included, reads the spec from the store's ``schema.json``, nothing else travels."""
    import json

    from tests.test_train_spec_local import FEATURES, LAYOUTS, MAX_GAP

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(dict(FEATURES, **LAYOUTS["parquet-list"])))
    assert main(["gen-data", "--feature-spec", str(spec), "--rows", "100000", "--files", "2", "--seed", "3",
                 "--out", str(tmp_path / "raw"), "--oracle-rows", "100000"]) == 0
    assert main(["prep", "--feature-spec", str(spec), "--input", str(tmp_path / "raw"), "--out",
                 str(tmp_path / "prep"), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    data = s3.join(s3_bucket, "spec-prep")
    store_client.upload(str(tmp_path / "prep"), data)
    out = s3.join(s3_bucket, "spec-run")
    result = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 3}, max_retry=0,
                         workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None,
                         output_dir=out, store_env=store_env)
    oracle = json.loads((tmp_path / "raw" / "oracle.json").read_text())["auc"]
    auc = result.metrics["test"]["auc"]
    logging.getLogger(__name__).info("parquet-list from the store: test AUC %.4f, oracle %.4f", auc, oracle)
    assert oracle - MAX_GAP < auc <= oracle + 0.01, (auc, oracle)
    from ctr_model.infer import load_model

    meta = load_model(result.model_dir).meta
    assert [c["name"] for c in meta["feature_spec"]["categorical"]] == ["user", "items", "site"]
    for i in (0, 1):   # the pservers served the spec's program (its dense width), read from the store
        log = (tmp_path / "w" / "gang" / "attempt-1" / f"pserver-{i}.log").read_text()
        assert "Traceback" not in log, log[-2000:]


def test_gzip_files_travel_byte_for_byte(store_client, s3_bucket, tmp_path):
    """The sparse-table files are ``.gz``: pyarrow's default ``compression="detect"`` gunzipped them on
    read and gzipped them again on write (slow, and not the same bytes). Both ways must copy bytes."""
    import gzip

    src = tmp_path / "up"
    src.mkdir()
    payload = gzip.compress(b"1\t0.5 0.25\n" * 20000, compresslevel=1, mtime=0)
    (src / "part-000-00000.gz").write_bytes(payload)
    uri = s3.join(s3_bucket, "gz")
    store_client.upload(str(src), uri)
    with store_client.fs.open_input_stream(store_client._path(uri + "/part-000-00000.gz"), compression=None) as fh:
        assert fh.read() == payload                      # stored as given, not re-compressed
    store_client.download(uri, str(tmp_path / "down"))
    assert (tmp_path / "down" / "part-000-00000.gz").read_bytes() == payload
