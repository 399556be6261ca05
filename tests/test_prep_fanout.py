"""Fanned-out prep (``ctr_volcano.data.prep.fanout``) on real data, its workers real processes: the
shards are byte-identical for 1 and 3 workers and to the one-process prep's, every count and reject
the same, and a bad input fails in the one line the one-process prep gives, before any shard."""
from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os

import pytest

from ctr_volcano.app.cli.main import main
from ctr_volcano.data.prep import PrepConfig, prep
from ctr_volcano.data.prep.fanout import WORK_DIR, plan_units, prep_fanout
from ctr_volcano.errors import BadInput

#: Small blocks, so the ~3 MB inputs make dozens of blocks and each worker gets many.
CONFIG = PrepConfig(hash_buckets=10_007, block_bytes=1 << 17, shards=3, test_shards=2, workers=1, seed=4)


def _digests(out) -> dict:
    return {os.path.relpath(p, out): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in sorted(glob.glob(os.path.join(out, "*", "*")))}


def _without_timing(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k not in ("seconds", "input_mb_per_s", "workers", "fanout")}


@pytest.fixture(scope="module")
def raw(tmp_path_factory, sample_dir):
    """A plain file with bad lines mixed in, a gzip file, and an empty file, in that order."""
    d = tmp_path_factory.mktemp("fanout_raw")
    (src,) = sorted(sample_dir.glob("part-00000.*"))[:1]
    lines = gzip.open(src, "rt").read().splitlines()[:24_000]
    for k in range(0, 12_000, 997):
        lines[k] = "1\t2\t3" if k % 2 else lines[k].replace("\t", "\t1.5\t", 1)
    (d / "a.tsv").write_text("\n".join(lines[:12_000]) + "\n")
    with gzip.open(d / "b.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines[12_000:]) + "\n")
    (d / "c.tsv").write_text("")
    return d


@pytest.fixture(scope="module")
def one_process(raw, tmp_path_factory):
    out = tmp_path_factory.mktemp("one_process")
    return out, prep([str(raw)], str(out), CONFIG)


def test_units_are_the_blocks_of_plain_files_and_whole_gzip_files(raw):
    files = [str(raw / "a.tsv"), str(raw / "b.tsv.gz"), str(raw / "c.tsv")]
    units = plan_units(files, CONFIG.block_bytes)
    plain = [u for u in units if u["file"] == 0]
    assert len(plain) > 10 and plain[0]["start"] == 0
    assert all(a["end"] == b["start"] for a, b in zip(plain, plain[1:]))
    assert plain[-1]["end"] == os.path.getsize(files[0])
    assert [u for u in units if u["file"] == 1] == [{"file": 1, "gzip": True}]
    assert not [u for u in units if u["file"] == 2]


@pytest.mark.parametrize("workers", [1, 3])
def test_fanout_writes_the_one_process_shards_byte_for_byte(raw, one_process, tmp_path, workers):
    out, expected = one_process
    stats = prep_fanout([str(raw)], str(tmp_path / "out"), CONFIG, workers=workers)
    assert expected["rows_rejected"] == 13 and expected["rows_in"] == 24_000
    assert _without_timing(stats) == _without_timing(expected)
    assert _digests(tmp_path / "out") == _digests(out)
    assert not os.path.exists(tmp_path / "out" / WORK_DIR)
    on_disk = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert on_disk["workers"] == workers and on_disk["fanout"] is True


def test_too_many_bad_lines_fail_in_prep_s_line_before_any_shard(raw, tmp_path):
    config = PrepConfig(**{**CONFIG.__dict__, "max_bad_fraction": 0.0001})
    with pytest.raises(BadInput) as one:
        prep([str(raw)], str(tmp_path / "one"), config)
    with pytest.raises(BadInput) as fanned:
        prep_fanout([str(raw)], str(tmp_path / "fan"), config, workers=3)
    assert str(fanned.value) == str(one.value)
    assert not glob.glob(str(tmp_path / "fan" / "*" / "*")) and not os.path.exists(tmp_path / "fan" / WORK_DIR)


def test_a_worker_s_refusal_is_raised_as_the_worker_raised_it(raw, tmp_path):
    """A truncated gzip file is found by the worker that reads it: its BadInput comes back whole."""
    bad = tmp_path / "raw"
    bad.mkdir()
    (bad / "a.tsv").write_bytes((raw / "a.tsv").read_bytes())
    whole = (raw / "b.tsv.gz").read_bytes()
    (bad / "b.tsv.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(BadInput) as one:
        prep([str(bad)], str(tmp_path / "one"), CONFIG)
    with pytest.raises(BadInput) as fanned:
        prep_fanout([str(bad)], str(tmp_path / "fan"), CONFIG, workers=2)
    assert fanned.value.field == one.value.field == "input" and str(fanned.value) == str(one.value)


def test_a_line_longer_than_a_block_names_its_line(tmp_path):
    raw = tmp_path / "long.tsv"
    raw.write_text("0" + "\t1" * 13 + "\tab" * 26 + "\n" + "0\t" + "x" * (3 << 17) + "\n")
    with pytest.raises(BadInput, match=r"long.tsv:2'?: line longer than the block size") as one:
        prep([str(raw)], str(tmp_path / "one"), CONFIG)
    with pytest.raises(BadInput) as fanned:
        prep_fanout([str(raw)], str(tmp_path / "out"), CONFIG, workers=2)
    assert str(fanned.value) == str(one.value)


def test_cli_prep_fanout(raw, tmp_path, capsys):
    args = ["prep", "--input", str(raw), "--hash-buckets", "10007", "--block-mb", "1", "--seed", "4"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    assert main(args + ["--out", str(tmp_path / "fan"), "--fanout", "2"]) == 0
    assert _digests(tmp_path / "fan") == _digests(tmp_path / "one")
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "x"), "--fanout", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fanout=0" in err[0]
