"""A full hand-off volume (a real ENOSPC from a tiny tmpfs): one line naming the path, the bytes
to write and the bytes free; nothing half-written left behind; the registry's champion untouched.

Each case runs the product in a private mount namespace whose ``$VOLUME`` is a tmpfs too small for
the write (``tests/tinyvolume.py``) and prints what it saw as JSON.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.tinyvolume import last_json, needs_mount_namespaces, python_on_tiny_volume

pytestmark = needs_mount_namespaces

KIB = 1024


def _model(directory: Path, payload_bytes: int) -> Path:
    """A directory shaped like an exported model: model_meta.json plus one payload file."""
    directory.mkdir(parents=True)
    (directory / "model_meta.json").write_text(json.dumps({"format": "ctr-dnn-ps-v1"}))
    (directory / "sparse.npz").write_bytes(os.urandom(payload_bytes))
    return directory


def _assert_one_line(text: str, path: str, needed: int) -> int:
    """The message is one line naming ``path`` and ``needed``; returns the free bytes it gives."""
    assert "\n" not in text.strip(), text
    assert path in text and f"{needed} bytes to write" in text, text
    free = int(text.split(" bytes free")[0].rsplit(" ", 1)[1])
    return free


def test_a_copy_into_a_full_volume_names_path_and_bytes_and_leaves_nothing(tmp_path):
    src = _model(tmp_path / "src", 300 * KIB)
    needed = (src / "sparse.npz").stat().st_size + (src / "model_meta.json").stat().st_size
    script = f"""
import json, os
from ctr_model.space import NoSpace, copy_tree
dst = os.path.join(os.environ["VOLUME"], "copy")
try:
    copy_tree({str(src)!r}, dst)
    print(json.dumps({{"error": None}}))
except NoSpace as exc:
    print(json.dumps({{"error": str(exc), "errno": exc.errno, "left": os.listdir(os.environ["VOLUME"])}}))
"""
    seen = last_json(python_on_tiny_volume(tmp_path / "vol", "128k", script))
    assert seen["error"] is not None, "the copy fitted: the volume is not tiny"
    free = _assert_one_line(seen["error"], str(tmp_path / "vol" / "copy"), needed)
    assert seen["errno"] == 28
    assert seen["left"] == []                   # the half copy is gone ...
    assert 100 * KIB <= free <= 128 * KIB       # ... so the whole volume is free again


def test_registering_onto_a_full_volume_keeps_the_champion_and_registers_nothing(tmp_path):
    small, big = _model(tmp_path / "small", 8 * KIB), _model(tmp_path / "big", 400 * KIB)
    script = f"""
import json, os
from ctr_volcano.errors import VolumeFull
from ctr_volcano.retraining.registry import ModelRegistry
root = os.path.join(os.environ["VOLUME"], "registry")
reg = ModelRegistry(root, "ctr")
reg.register({str(small)!r}, "run-1", metrics={{"challenger_auc": 0.7}})
reg.promote("run-1")
try:
    reg.register({str(big)!r}, "run-2", metrics={{"challenger_auc": 0.8}})
    error = None
except VolumeFull as exc:
    error = str(exc)
print(json.dumps({{"error": error, "champion": reg.champion().version,
                  "versions": [v.version for v in reg.versions()],
                  "dirs": sorted(os.listdir(os.path.join(root, "ctr", "versions")))}}))
"""
    seen = last_json(python_on_tiny_volume(tmp_path / "vol", "256k", script))
    assert seen["error"] is not None, "the big model fitted: the volume is not tiny"
    assert seen["error"].startswith("registry=")
    _assert_one_line(seen["error"], str(tmp_path / "vol" / "registry" / "ctr" / "versions" / "run-2"),
                     400 * KIB + len(json.dumps({"format": "ctr-dnn-ps-v1"})))
    assert seen["champion"] == "run-1"
    assert seen["versions"] == ["run-1"]
    assert seen["dirs"] == ["run-1"]            # no half version of run-2 left


def test_the_steps_copies_onto_and_off_the_claim_fail_in_one_line(tmp_path):
    """The PVC hand-off: the data copied onto a full claim, and the model copied into a full
    model output, each fail with one BadInput line naming the parameter and the path."""
    data, model = _model(tmp_path / "prep", 300 * KIB), _model(tmp_path / "model", 300 * KIB)
    out = tmp_path / "claim-out"
    (out / "output").mkdir(parents=True)
    (out / "output" / "model").symlink_to(model)
    script = f"""
import json, os
from ctr_volcano.errors import VolumeFull
from ctr_volcano.training.volcano.handoff import copy_model_out, prepare_run_dir
vol = os.environ["VOLUME"]
seen = {{}}
try:
    prepare_run_dir(vol, "job-a", {str(data)!r})
except VolumeFull as exc:
    seen["claim"] = str(exc)
seen["claim_left"] = sorted(os.listdir(os.path.join(vol, "ctr-runs", "job-a")))
try:
    copy_model_out({str(out / "output")!r}, os.path.join(vol, "model-output"))
except VolumeFull as exc:
    seen["model"] = str(exc)
seen["model_left"] = os.listdir(os.path.join(vol, "model-output"))
print(json.dumps(seen))
"""
    seen = last_json(python_on_tiny_volume(tmp_path / "vol", "128k", script))
    needed = 300 * KIB + len(json.dumps({"format": "ctr-dnn-ps-v1"}))
    assert seen["claim"].startswith("pvc_mount_path="), seen
    _assert_one_line(seen["claim"], str(tmp_path / "vol" / "ctr-runs" / "job-a" / "data"), needed)
    assert seen["claim_left"] == ["output"]     # no data.tmp-* left on the claim
    assert seen["model"].startswith("model_dir="), seen
    _assert_one_line(seen["model"], str(tmp_path / "vol" / "model-output"), needed)
    assert seen["model_left"] == []


def test_a_full_disk_on_download_names_the_local_path_not_the_store(tmp_path, s3_bucket, store_client):
    """``Store.download`` from the real S3 server onto a full disk: NoSpace with the objects' size,
    not a StoreError blaming the store."""
    src = _model(tmp_path / "objects", 300 * KIB)
    store_client.upload(str(src), f"{s3_bucket}/model")
    script = f"""
import json, os
from ctr_model.space import NoSpace
from ctr_model.store import Store, StoreConfig
try:
    Store(StoreConfig.from_env()).download("{s3_bucket}/model", os.path.join(os.environ["VOLUME"], "model"))
    print(json.dumps({{"error": None}}))
except NoSpace as exc:
    print(json.dumps({{"error": str(exc)}}))
"""
    seen = last_json(python_on_tiny_volume(tmp_path / "vol", "128k", script))
    assert seen["error"] is not None
    _assert_one_line(seen["error"], str(tmp_path / "vol" / "model"),
                     300 * KIB + len(json.dumps({"format": "ctr-dnn-ps-v1"})))


@pytest.fixture
def gang_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("fulltest", grace_s=10, poll_s=0.2)


@pytest.mark.slow
def test_a_gang_whose_volume_fills_during_the_export_fails_in_one_line(tmp_path, gang_id):
    """A real 1x1 gang on the local backend, its output directory a 64 MiB volume (the role logs
    are elsewhere, as on a cluster), trains once (measuring its export);
    then, with the volume filled to leave half the export's room, the same workdir resumes from
    its complete checkpoint straight into the export: trainer 0 exits 2 with one line naming the
    model directory and a lower bound of the bytes it needed, the gang is not restarted, no half
    model is left, and the checkpoint stays complete for a later run."""
    from tests.gang_helpers import SMALL, write_small_planted

    data, _ = write_small_planted(tmp_path / "planted")
    script = f"""
import json, os, shutil, subprocess
from ctr_model.space import tree_bytes
from ctr_volcano.training.api import RoleRefused
from ctr_volcano.training.local.backend import train_local
vol = os.environ["VOLUME"]   # the hand-off volume: the gang's output directory (logs elsewhere)
work = os.path.dirname(vol)
model = os.path.join(vol, "model")
def train(out):
    return train_local({data!r}, out, {{**{SMALL!r}, "epochs": 1}}, pservers=1, trainers=1,
                       max_retry=1, workdir=work, job_id={gang_id!r})
train({str(tmp_path / "first")!r})
export = tree_bytes(model, allocated=True)
shutil.rmtree(model)   # the second export would remove it first anyway
st = os.statvfs(vol)
leave = export // 2
subprocess.run(["fallocate", "-l", str(st.f_bavail * st.f_frsize - leave), os.path.join(vol, "filler")],
               check=True)
out = {{"export": export, "left": os.statvfs(vol).f_bavail * os.statvfs(vol).f_frsize}}
try:
    train({str(tmp_path / "second")!r})
except RoleRefused as exc:   # a role's exit 2, in the BadInput family on both backends
    out.update(error=str(exc).splitlines()[0], phase=exc.phase, role=exc.role, exit_code=exc.exit_code,
               tail=exc.log_tail[-3000:])
out.update(model_left=os.path.exists(model), model_out=os.listdir({str(tmp_path / "second")!r}),
           checkpoint=sorted(os.listdir(os.path.join(vol, "checkpoints", "epoch-1"))))
print(json.dumps(out))
"""
    started = time.monotonic()
    seen = last_json(python_on_tiny_volume(tmp_path / "w" / "output", "64m", script, timeout=600))
    print(f"\nfull-volume gang: {seen} after {time.monotonic() - started:.1f}s")
    assert seen.get("error"), f"the export fitted into {seen['left']} bytes: {seen}"
    assert seen["phase"] == "BadInput" and seen["exit_code"] == 2 and seen["role"] == "trainer-0", seen
    model_dir = str(tmp_path / "w" / "output" / "model")
    assert f"path={model_dir!r}: no space left on device: more than " in seen["error"], seen
    lower_bound = int(seen["error"].split(": more than ")[1].split(" ")[0])
    free = int(seen["error"].split(" bytes free there")[0].rsplit(" ", 1)[1])
    assert free < seen["export"] and lower_bound <= seen["export"], seen   # honest figures
    assert seen["model_left"] is False and seen["model_out"] == []
    assert "_COMPLETE" in seen["checkpoint"]
