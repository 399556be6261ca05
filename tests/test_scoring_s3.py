"""``ctr-volcano score --input s3://...`` on the real S3 server (SeaweedFS on loopback): a prefix of
plain and gzip files and a single object score as the same rows read locally, each shard and rejected
row named by its object's URI, the copies gone afterwards; a URI with nothing under it is refused in
one line naming ``--input`` before any output exists."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_volcano.app.cli.main import main as cli
from tests.scoring_fixtures import avazu_model, candidates, write_csv

ROWS = 1200


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    root = tmp_path_factory.mktemp("avazu-s3")
    cols = candidates(ROWS)
    return cols, avazu_model(root, cols)


def _shards(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])


def test_a_prefix_and_an_object_on_the_store_score_as_the_local_files(day, tmp_path, s3_bucket, store_env,
                                                                      store_client):
    cols, model = day
    local = tmp_path / "day"
    local.mkdir()
    write_csv(local / "a.csv", cols, 0, 500)
    plain = write_csv(tmp_path / "b.csv", cols, 500, ROWS)
    lines = plain.read_text().splitlines()
    lines.insert(3, lines[3] + ",extra")                      # file line 4 of b: too many fields
    plain.write_text("\n".join(lines) + "\n")
    with open(plain, "rb") as src, gzip.open(local / "b.csv.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    store_client.upload(str(local), f"{s3_bucket}/candidates/day=1")
    store_client.upload(str(local / "a.csv"), f"{s3_bucket}/one/a.csv")

    near, far = tmp_path / "near", tmp_path / "far"
    assert cli(["score", "--model", model, "--input", str(local), "--out", str(near), "--keep", "id"]) == 0
    assert cli(["score", "--model", model, "--input", f"{s3_bucket}/candidates/day=1/", f"{s3_bucket}/one/a.csv",
                "--out", str(far), "--keep", "id"]) == 0
    ids = _shards(far).column("id").to_pylist()
    assert ids == cols["id"] + cols["id"][:500]                # the prefix's files in order, then the object
    assert _shards(far).slice(0, ROWS).equals(_shards(near))
    doc = json.loads((far / "scores.json").read_text())
    prefix = f"{s3_bucket}/candidates/day=1"
    assert doc["inputs"] == [f"{prefix}/a.csv", f"{prefix}/b.csv.gz", f"{s3_bucket}/one/a.csv"]
    assert [s["file"] for s in doc["shards"]] == doc["inputs"]
    assert (doc["rows_in"], doc["rows_scored"], doc["rows_rejected"]) == (ROWS + 501, ROWS + 500, 1)
    rejects = [json.loads(line) for line in (far / "rejects.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r["reason"]) for r in rejects] == [(f"{prefix}/b.csv.gz", 4, "wrong field count")]
    assert not (far / ".inputs").exists() and not (far / ".scoring").exists()


def test_a_uri_with_nothing_under_it_is_refused_naming_the_flag(day, tmp_path, s3_bucket, store_env, capsys):
    _, model = day
    out = tmp_path / "out"
    assert cli(["score", "--model", model, "--input", f"{s3_bucket}/no/such/day/", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--input" in err[0] and f"{s3_bucket}/no/such/day/" in err[0], err
    assert not list(out.glob("part-*")) and not (out / "scores.json").exists()
