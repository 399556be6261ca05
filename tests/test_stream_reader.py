"""The ``stream`` reader (issue 24): Paddle pipes each Parquet shard through ``ctr_model.slot_stream``.

The pipe is checked as Paddle runs it (``cat shard | <pipe_command>`` in a shell) against the
on-disk conversion; a bad shard reaches the trainer as its one line; and a real 2x2 gang trains
with it to the same rows and AUC as with the default reader.
"""
from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model import slot_stream
from ctr_model.data import DataError, parquet_to_slots
from ctr_model.errors import EXIT_BAD_INPUT
from ctr_model.infer import auc, load_model
from ctr_volcano.training.local.backend import train_local
from tests.gang_helpers import SMALL, gang_job_id, write_small_planted

BUCKETS = 100_003


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return write_small_planted(tmp_path_factory.mktemp("planted"))


def _shards(data: str, split: str = "train"):
    return sorted(glob.glob(os.path.join(data, split, "*.parquet")))


def _pipe(shard: str, errors: Path, **kw) -> subprocess.CompletedProcess:
    """The shard through the pipe command exactly as Paddle's reader runs it, from another cwd."""
    cmd = slot_stream.pipe_command(BUCKETS, str(errors), spec_file=None, seed=kw.get("seed", 7),
                                   epoch=kw.get("epoch", 1), shuffle=kw.get("shuffle", False))
    return subprocess.run(f"cat {shard} | {cmd}", shell=True, capture_output=True, cwd="/", timeout=120)


def test_the_pipe_writes_the_bytes_of_the_disk_conversion(planted, tmp_path):
    shard = _shards(planted[0])[0]
    rows = parquet_to_slots(shard, str(tmp_path / "disk.slots"), BUCKETS)
    out = _pipe(shard, tmp_path / "errors")
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == (tmp_path / "disk.slots").read_bytes()
    assert out.stdout.count(b"\n") == rows
    assert not (tmp_path / "errors").exists()


def test_shuffled_rows_are_the_same_rows_in_an_order_of_the_epoch(planted, tmp_path):
    shard = _shards(planted[0])[0]
    plain = _pipe(shard, tmp_path / "e").stdout.splitlines()
    one = _pipe(shard, tmp_path / "e", shuffle=True, epoch=1).stdout.splitlines()
    again = _pipe(shard, tmp_path / "e", shuffle=True, epoch=1).stdout.splitlines()
    two = _pipe(shard, tmp_path / "e", shuffle=True, epoch=2).stdout.splitlines()
    assert sorted(one) == sorted(plain) == sorted(two)
    assert one == again                              # deterministic per epoch ...
    assert one != plain and one != two               # ... and another order each epoch


def test_the_shard_order_changes_by_epoch_and_keeps_every_shard():
    files = [f"s{i}.parquet" for i in range(8)]
    orders = [slot_stream.epoch_order(files, 3, e, True) for e in (1, 2, 1)]
    assert sorted(orders[0]) == sorted(files) and orders[0] == orders[2] and orders[0] != orders[1]
    assert slot_stream.epoch_order(files[::-1], 3, 1, False) == files


def test_a_bad_shard_fails_the_epoch_with_its_one_line(planted, tmp_path):
    table = pq.read_table(_shards(planted[0])[0])
    ids = np.asarray(table.column("C3")).copy()
    ids[5] = BUCKETS + 9                              # outside the table
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("C3"), "C3", pa.array(ids)), bad)
    out = _pipe(str(bad), tmp_path / "errors")
    assert out.returncode == EXIT_BAD_INPUT            # the shard's data is bad: its family's exit code
    with pytest.raises(DataError) as info:
        slot_stream.check_epoch(str(tmp_path / "errors"), examples=0, rows=table.num_rows, epoch=1)
    line = str(info.value)
    assert "\n" not in line and "C3 ids" in line and f"outside [0, {BUCKETS})" in line, line


def test_an_epoch_short_of_rows_is_refused_naming_both_counts(tmp_path):
    with pytest.raises(DataError, match="data='epoch 2': read 90 examples of this trainer's 100 rows"):
        slot_stream.check_epoch(str(tmp_path), examples=90, rows=100, epoch=2)
    slot_stream.check_epoch(str(tmp_path), examples=100, rows=100, epoch=2)


@pytest.fixture
def job_id():
    yield from gang_job_id("sttest", grace_s=10, poll_s=0.2)


@pytest.mark.slow
def test_a_gang_trains_from_the_stream_every_row_no_slot_copy(planted, job_id, tmp_path):
    """2x2 on the local backend with ``reader: stream``: every row each epoch, no conversion to slot
    text, and a model that learned on the test split."""
    data, oracle = planted
    logs = []
    result = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 2, "reader": "stream"},
                         pservers=2, trainers=2, max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id,
                         log=logs.append)
    assert result.attempts == 1
    assert [e["examples"] for e in result.metrics["epochs"]] == [16_000, 16_000]
    assert any("rows streamed from Parquet (no slot-text copy)" in line for line in logs), logs
    assert not any("converted to slot text" in line for line in logs)
    scorer = load_model(result.model_dir)
    ys, ps = zip(*scorer.predict_files(_shards(data, "test"), batch_size=1000))
    test_auc = auc(np.concatenate(ys), np.concatenate(ps))
    assert test_auc > 0.7, f"did not learn: test AUC {test_auc:.3f} (oracle {oracle:.3f})"
    print(f"\nstream reader 2x2: test AUC {test_auc:.4f}, oracle {oracle:.4f}")
