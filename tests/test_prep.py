"""Prep on real tiny data: the committed sample, hand-written Kaggle-format lines, malformed files."""
from __future__ import annotations

import glob
import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model import features as F
from ctr_volcano.app.cli.main import main
from ctr_volcano.data.prep import PrepConfig, StratifiedSplit, prep, resolve_inputs
from ctr_volcano.errors import BadInput

# Lines in the exact Kaggle Display Advertising format: negative integers, empty integer and
# categorical fields, and empty trailing fields (the line ends in tabs).
KAGGLE_LINES = [
    "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t"
    "25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t"
    "1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\t"
    "c5c50484\te8b83407\t9727dd16",
    "0\t2\t0\t44\t1\t102\t8\t2\t2\t4\t1\t1\t\t4\t68fd1e64\tf0cf0024\t6f67f7e5\t41274cd7\t"
    "25c83c98\tfe6b92e5\t922afcc0\t0b153874\ta73ee510\t2b53e5fb\t4f1b46f3\t623049e6\td7020589\t"
    "b28479f6\te6c5b5cd\tc92f3b61\t07c540c4\tb04e4670\t21ddcdc9\t5840adea\t60f6221e\t\t3a171ecb\t"
    "43f13e8b\te8b83407\t731c3655",
    "1\t\t-1\t\t\t12\t\t0\t0\t0\t\t0\t\t\t05db9164\t38a947a1\t\t\t25c83c98\t7e0ccccf\t"
    "3f4ec687\t0b153874\ta73ee510\t3b08e48b\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "0\t\t-2\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "1\t0\t-3\t1\t1\t4\t1\t1\t1\t1\t0\t1\t0\t1\t8cf07265\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"
    "\t\t\t\t\t\t\t\t\t",
]


def _read_split(split_dir) -> pa.Table:
    files = sorted(glob.glob(os.path.join(split_dir, "part-*.parquet")))
    return pa.concat_tables([pq.read_table(f) for f in files])


def _assert_invariant(stats):
    assert stats["rows_in"] == stats["rows_train"] + stats["rows_test"] + stats["rows_rejected"]


def _good_and_bad_file(tmp_path, good_lines):
    """A file mixing good lines with one of each kind of bad line; returns (path, {line: reason})."""
    def with_field(line, k, value):
        fields = line.split("\t")
        fields[k] = value
        return "\t".join(fields)

    bad = {
        3: ("1\t2\t3", "wrong field count"),
        6: (good_lines[1] + "\textra", "wrong field count"),
        9: (with_field(good_lines[2], 1, "1.5"), "non-integer in integer column"),
        12: (with_field(good_lines[3], 0, "2"), "label not 0/1"),
        15: (with_field(good_lines[4], 0, ""), "label not 0/1"),
        18: ("", "empty line"),
        21: (good_lines[5].replace("\t", "\tx\r\t", 1), "carriage return inside line"),
    }
    lines, g = [], iter(good_lines)
    for n in range(1, 25):
        lines.append(bad[n][0] if n in bad else next(g))
    path = tmp_path / "mixed.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path, {n: reason for n, (_, reason) in bad.items()}, len(lines) - len(bad)


@pytest.fixture(scope="module")
def sample_prep(tmp_path_factory, sample_dir):
    out = tmp_path_factory.mktemp("sample_prep")
    stats = prep([str(sample_dir)], str(out), PrepConfig(hash_buckets=100_003, seed=5))
    return out, stats


def test_sample_prep_layout_counts_and_types(sample_prep, sample_dir):
    out, stats = sample_prep
    on_disk = json.loads((out / "stats.json").read_text())
    assert on_disk == stats
    _assert_invariant(stats)
    oracle = json.loads((sample_dir / "oracle.json").read_text())
    assert stats["rows_in"] == oracle["rows"] and stats["rows_rejected"] == 0
    assert abs(stats["rows_test"] / stats["rows_in"] - 0.1) < 0.01
    assert abs(stats["positive_rate"] - oracle["data_positive_rate"]) < 1e-9
    for key in ("schema_version", "hash_buckets", "rejected_examples", "missing_rate"):
        assert key in stats
    assert set(stats["missing_rate"]) == set(F.RAW_COLUMNS[1:])
    assert 0.35 < stats["missing_rate"]["I1"] < 0.55 and stats["missing_rate"]["I2"] == 0
    for split, shards, rows in (("train", 8, stats["rows_train"]), ("test", 2, stats["rows_test"])):
        schema = F.check_split_schema(str(out / split), expected_buckets=100_003)
        assert schema["rows"] == rows and schema["schema_version"] == F.SCHEMA_VERSION
        files = F.shard_files(str(out / split))
        assert [os.path.basename(f) for f in files] == [f"part-{k:05d}.parquet" for k in range(shards)]
        sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
        assert sum(sizes) == rows and max(sizes) - min(sizes) <= 1
        table = _read_split(out / split)
        assert table.schema.names == list(F.RAW_COLUMNS)
        assert table.schema == F.arrow_schema()
        sparse = np.stack([table.column(c).to_numpy() for c in F.SPARSE_COLUMNS])
        assert sparse.min() >= 0 and sparse.max() < 100_003
        dense = np.stack([table.column(c).to_numpy() for c in F.DENSE_COLUMNS])
        assert dense.min() >= 0 and np.isfinite(dense).all()
        assert set(np.unique(table.column("label").to_numpy())) == {0, 1}


def test_rows_match_the_reference_line_transform(sample_dir, tmp_path):
    """Vectorised prep == ctr_model.features.transform_line on every line, in line order."""
    (src,) = sorted(sample_dir.glob("part-00000.*"))[:1]
    lines = gzip.open(src, "rt").read().splitlines()[:800] + KAGGLE_LINES
    raw = tmp_path / "raw.tsv"
    raw.write_text("\n".join(lines) + "\n")
    stats = prep([str(raw)], str(tmp_path / "out"), PrepConfig(hash_buckets=5003, seed=9))
    assert stats["rows_rejected"] == 0
    is_test = StratifiedSplit(9, 0.1).is_test(np.array([F.transform_line(line, 5003)[0] for line in lines]))
    for split, mask in (("train", ~is_test), ("test", is_test)):
        table = _read_split(tmp_path / "out" / split)
        expected = [F.transform_line(line, 5003) for line, m in zip(lines, mask) if m]
        assert table.num_rows == len(expected)
        np.testing.assert_array_equal(table.column("label").to_numpy(), [e[0] for e in expected])
        got_dense = np.stack([table.column(c).to_numpy() for c in F.DENSE_COLUMNS], axis=1)
        np.testing.assert_array_equal(got_dense, np.stack([e[1] for e in expected]))
        got_sparse = np.stack([table.column(c).to_numpy() for c in F.SPARSE_COLUMNS], axis=1)
        np.testing.assert_array_equal(got_sparse, np.stack([e[2] for e in expected]))


def test_kaggle_format_lines_parse_with_zero_rejects(tmp_path):
    raw = tmp_path / "kaggle.txt"
    raw.write_text("\n".join(KAGGLE_LINES * 40) + "\n")
    stats = prep([str(raw)], str(tmp_path / "out"), PrepConfig(max_bad_fraction=0.0))
    assert stats["rows_rejected"] == 0 and stats["rows_in"] == len(KAGGLE_LINES) * 40
    _assert_invariant(stats)
    assert stats["missing_rate"]["C26"] == pytest.approx(3 / 5)
    # no trailing newline and CRLF endings are fine too
    raw2 = tmp_path / "crlf.txt"
    raw2.write_bytes(("\r\n".join(KAGGLE_LINES)).encode())
    stats2 = prep([str(raw2)], str(tmp_path / "out2"), PrepConfig(max_bad_fraction=0.0))
    assert stats2["rows_in"] == len(KAGGLE_LINES) and stats2["rows_rejected"] == 0


def test_bad_lines_are_counted_and_reported_with_line_numbers(sample_dir, tmp_path):
    good = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:40]
    path, bad, n_good = _good_and_bad_file(tmp_path, good)
    stats = prep([str(path)], str(tmp_path / "out"), PrepConfig(max_bad_fraction=1.0))
    _assert_invariant(stats)
    assert stats["rows_in"] == 24 and stats["rows_rejected"] == len(bad)
    assert stats["rows_train"] + stats["rows_test"] == n_good
    reported = {e["line"]: e["reason"] for e in stats["rejected_examples"]}
    assert set(reported) == set(bad)
    assert all(reported[n].startswith(r) for n, r in bad.items()), reported
    assert all(e["file"] == str(path) for e in stats["rejected_examples"])
    by_reason = {}
    for r in bad.values():
        by_reason[r] = by_reason.get(r, 0) + 1
    assert stats["rejected_by_reason"] == by_reason
    assert any("I1" in e["reason"] and "1.5" in e["reason"] for e in stats["rejected_examples"])


def test_bad_lines_across_many_blocks(sample_dir, tmp_path):
    """Small blocks: exact line numbers across block boundaries; output equals one big block."""
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:2500]
    bad_at = {7, 300, 301, 1234, 2499}
    for n in bad_at:
        lines[n - 1] = lines[n - 1].replace("\t", "\tnope\t", 1)
    raw = tmp_path / "raw.tsv"
    raw.write_text("\n".join(lines) + "\n")
    small = prep([str(raw)], str(tmp_path / "small"), PrepConfig(block_bytes=1 << 16,
                                                                 max_bad_fraction=0.01))
    big = prep([str(raw)], str(tmp_path / "big"), PrepConfig(max_bad_fraction=0.01))
    for s in (small, big):
        _assert_invariant(s)
        assert s["rows_rejected"] == len(bad_at)
        assert sorted(e["line"] for e in s["rejected_examples"]) == sorted(bad_at)
    for split in ("train", "test"):
        a, b = _read_split(tmp_path / "small" / split), _read_split(tmp_path / "big" / split)
        assert a.num_rows == b.num_rows
        # shard order differs with block size; the set of rows must not
        key = lambda t: sorted(map(tuple, np.stack([t.column(c).to_numpy()  # noqa: E731
                                                      for c in F.SPARSE_COLUMNS], axis=1)))
        assert key(a) == key(b)


def test_too_many_bad_lines_fails_naming_file_line_and_reason(sample_dir, tmp_path):
    good = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:40]
    path, bad, _ = _good_and_bad_file(tmp_path, good)
    with pytest.raises(BadInput) as err:
        prep([str(path)], str(tmp_path / "out"))
    msg = str(err.value)
    assert err.value.field == "max_bad_fraction"
    assert f"{path}:3" in msg and "wrong field count" in msg and "--max-bad-fraction" in msg
    # nothing half-written is left that looks like a finished split
    assert not glob.glob(str(tmp_path / "out" / "*" / "*"))
    assert not (tmp_path / "out" / "stats.json").exists()


def test_gzip_glob_and_directory_inputs_agree(sample_dir, tmp_path):
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:1000]
    d = tmp_path / "raw"
    d.mkdir()
    (d / "a.tsv").write_text("\n".join(lines[:600]) + "\n")
    with gzip.open(d / "b.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines[600:]) + "\n")
    (d / "notes.md").write_text("not data")
    (d / "oracle.json").write_text("{}")
    plain = tmp_path / "all.tsv"
    plain.write_text("\n".join(lines) + "\n")
    assert resolve_inputs([str(d)]) == [str(d / "a.tsv"), str(d / "b.tsv.gz")]
    assert resolve_inputs([str(d / "*.tsv*")]) == [str(d / "a.tsv"), str(d / "b.tsv.gz")]
    outs = []
    for name, inp in (("dir", [str(d)]), ("glob", [str(d / "*.tsv*")]), ("plain", [str(plain)])):
        s = prep(inp, str(tmp_path / name), PrepConfig(hash_buckets=1000))
        assert s["rows_in"] == 1000 and s["rows_rejected"] == 0
        outs.append(_read_split(tmp_path / name / "train"))
    # two files are two blocks, so rows sit in other shards; the rows themselves are the same
    rows = [sorted(zip(*[t.column(c).to_pylist() for c in F.RAW_COLUMNS])) for t in outs]
    assert rows[0] == rows[1] == rows[2]


def test_split_is_deterministic_and_seeded(sample_dir, tmp_path):
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:2000]
    raw = tmp_path / "raw.tsv"
    raw.write_text("\n".join(lines) + "\n")
    a = prep([str(raw)], str(tmp_path / "a"), PrepConfig(seed=1, test_fraction=0.3))
    b = prep([str(raw)], str(tmp_path / "b"), PrepConfig(seed=1, test_fraction=0.3))
    prep([str(raw)], str(tmp_path / "c"), PrepConfig(seed=2, test_fraction=0.3))
    assert a["rows_test"] == b["rows_test"]
    assert _read_split(tmp_path / "a" / "test").equals(_read_split(tmp_path / "b" / "test"))
    assert not _read_split(tmp_path / "a" / "test").equals(_read_split(tmp_path / "c" / "test"))
    assert abs(a["rows_test"] / 2000 - 0.3) < 0.05


def test_rerun_with_fewer_shards_leaves_no_stale_shards(sample_dir, tmp_path):
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:500]
    raw = tmp_path / "raw.tsv"
    raw.write_text("\n".join(lines) + "\n")
    prep([str(raw)], str(tmp_path / "out"), PrepConfig(shards=8))
    prep([str(raw)], str(tmp_path / "out"), PrepConfig(shards=3))
    assert len(F.shard_files(str(tmp_path / "out" / "train"))) == 3


def test_a_spark_output_directory_is_read_without_its_markers(sample_dir, tmp_path):
    """Spark and Hadoop leave ``_SUCCESS`` (empty, no extension, as Criteo's ``day_0``), ``_committed_*``
    and hidden ``.crc`` files beside the parts: skipped, as Arrow's datasets skip them."""
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:300]
    out = tmp_path / "spark"
    out.mkdir()
    (out / "part-00000").write_text("\n".join(lines) + "\n")
    (out / "_SUCCESS").write_bytes(b"")
    (out / "_committed_123").write_text("{}")
    (out / ".part-00000.crc").write_bytes(b"\x00" * 12)
    assert resolve_inputs([str(out)]) == [str(out / "part-00000")] == resolve_inputs([str(out / "*")])
    assert prep([str(out)], str(tmp_path / "o"))["rows_in"] == 300


def test_clear_errors_for_missing_empty_and_broken_inputs(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        prep([str(tmp_path / "nope.tsv")], str(tmp_path / "o1"))
    with pytest.raises(BadInput, match="glob matches no file"):
        prep([str(tmp_path / "*.nothing")], str(tmp_path / "o2"))
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(BadInput, match="directory holds no"):
        prep([str(tmp_path / "emptydir")], str(tmp_path / "o3"))
    (tmp_path / "emptydir" / "dt=1").mkdir()
    with pytest.raises(BadInput, match=r"subdirectories such as 'dt=1' are not read: give a glob such as .*emptydir/\*/\*"):
        prep([str(tmp_path / "emptydir")], str(tmp_path / "o3"))
    (tmp_path / "empty.tsv").write_bytes(b"")
    with pytest.raises(BadInput, match="no lines found"):
        prep([str(tmp_path / "empty.tsv")], str(tmp_path / "o4"))
    (tmp_path / "junk.gz").write_bytes(b"\x1f\x8b" + os.urandom(2000))
    with pytest.raises(BadInput, match="junk.gz.*gzip"):
        prep([str(tmp_path / "junk.gz")], str(tmp_path / "o5"))
    full = gzip.compress(("\n".join(KAGGLE_LINES * 200) + "\n").encode())
    (tmp_path / "truncated.gz").write_bytes(full[: len(full) // 2])
    with pytest.raises(BadInput, match="truncated.gz"):
        prep([str(tmp_path / "truncated.gz")], str(tmp_path / "o6"))
    (tmp_path / "binary.bin").write_bytes(os.urandom(1 << 21).replace(b"\n", b"x"))
    with pytest.raises(BadInput, match="Criteo"):
        prep([str(tmp_path / "binary.bin")], str(tmp_path / "o7"))
    with pytest.raises(BadInput, match="at least one"):
        prep([], str(tmp_path / "o8"))


@pytest.mark.parametrize("field, value", [
    ("hash_buckets", 10), ("test_fraction", 0.0), ("test_fraction", 1.0), ("shards", 0),
    ("max_bad_fraction", -0.1), ("seed", -1), ("test_fraction", float("nan")), ("shards", 2.5),
    ("workers", -1), ("workers", 1025), ("workers", True),
])
def test_config_is_validated_at_the_boundary(field, value):
    with pytest.raises(BadInput) as err:
        PrepConfig(**{field: value})
    assert err.value.field == field


def test_cli_prep_and_gen_data(tmp_path, capsys, sample_dir):
    assert main(["gen-data", "--rows", "300", "--out", str(tmp_path / "raw"), "--seed", "11",
                 "--files", "2", "--oracle-rows", "20000"]) == 0
    assert "oracle auc=" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "raw")) == ["oracle.json", "part-00000.tsv", "part-00001.tsv"]
    assert main(["prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "out"),
                 "--hash-buckets", "1000", "--shards", "2", "--test-fraction", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "rows_in=300" in out and "rows_rejected=0" in out
    assert F.check_split_schema(str(tmp_path / "out" / "train"), 1000)["rows"] > 0
    assert main(["prep", "--input", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctr-volcano prep: error: --input=") and "Traceback" not in err
    assert main(["prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "o"),
                 "--test-fraction", "2"]) == 2
    assert "--test-fraction=2.0" in capsys.readouterr().err
    assert main(["prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "o9"),
                 "--workers", "-1"]) == 2
    assert "--workers=-1" in capsys.readouterr().err
    assert not (tmp_path / "o9").exists()   # refused before any work


def test_prep_and_the_reference_line_parser_agree_on_odd_fields(tmp_path):
    """Accept/reject and values of odd integer spellings match ctr_model.features.transform_line."""
    base = KAGGLE_LINES[0].split("\t")
    lines = []
    for value in (" 5 ", "0x10", "0X1f", "010", "-0", "1_000", "\uff11", "-0x10", "+5", "1.5",
                  "1e3", "9223372036854775807", "9223372036854775808", "- 5", "0x"):
        f = list(base)
        f[3] = value
        lines.append("\t".join(f))
    for label in ("0", " 1", "0x1", "2", "", "-1", "01"):
        f = list(base)
        f[0] = label
        lines.append("\t".join(f))
    raw = tmp_path / "odd.tsv"
    raw.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    stats = prep([str(raw)], str(tmp_path / "out"),
                 PrepConfig(max_bad_fraction=1.0, test_fraction=0.01, seed=0, max_examples=100))
    rejected = {e["line"] for e in stats["rejected_examples"]}
    expected_ok = []
    for n, line in enumerate(lines, start=1):
        try:
            expected_ok.append(F.transform_line(line))
            assert n not in rejected, (n, line[:20])
        except F.BadRow:
            assert n in rejected, (n, line[:20])
    _assert_invariant(stats)
    table = pa.concat_tables([_read_split(tmp_path / "out" / s) for s in ("train", "test")])
    got = sorted(zip(table.column("label").to_pylist(), table.column("I3").to_pylist()))
    assert got == sorted((e[0], float(e[1][2])) for e in expected_ok)


def _split_contents(out_dir):
    """{relative path: parquet table or file text} of a prep output, and its stats minus timing."""
    files = {}
    for split in ("train", "test"):
        for name in sorted(os.listdir(out_dir / split)):
            path = out_dir / split / name
            files[f"{split}/{name}"] = (pq.read_table(path) if name.endswith(".parquet")
                                        else path.read_text())
    stats = json.loads((out_dir / "stats.json").read_text())
    for key in ("seconds", "input_mb_per_s", "workers"):
        stats.pop(key)
    stats["config"].pop("workers")
    return files, stats


def test_workers_do_not_change_the_output(sample_dir, tmp_path):
    """One process or several: the same shards, row for row, and the same stats and rejects.

    Small blocks (64 KiB, cut into 16 KiB pieces for the workers) so results cross many blocks and
    pieces; bad lines of every kind, a plain file, a gzip file and a file without a final newline.
    """
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:3000]
    for n, bad in ((10, ""), (400, "2" + lines[400][1:]), (401, lines[401] + "\textra"),
                   (1500, "\t".join(lines[1500].split("\t")[:1] + ["1.5"]
                                     + lines[1500].split("\t")[2:])),
                   (2100, lines[2100].replace("\t", "\tx\r\t", 1))):
        lines[n] = bad
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.tsv").write_text("\n".join(lines[:1800]) + "\n")
    with gzip.open(raw / "b.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines[1800:2700]) + "\n")
    (raw / "c.tsv").write_text("\n".join(lines[2700:]))        # no final newline
    outputs = {}
    for workers in (1, 2):
        stats = prep([str(raw)], str(tmp_path / f"w{workers}"),
                     PrepConfig(block_bytes=1 << 16, max_bad_fraction=0.01, shards=3,
                                workers=workers))
        assert stats["workers"] == workers
        assert stats["rows_in"] == 3000 and stats["rows_rejected"] == 5
        outputs[workers] = _split_contents(tmp_path / f"w{workers}")
    (files1, stats1), (files2, stats2) = outputs[1], outputs[2]
    assert files1.keys() == files2.keys()
    for name in files1:
        assert files1[name] == files2[name] if isinstance(files1[name], str) \
            else files1[name].equals(files2[name]), name
    assert stats1 == stats2
    assert stats1["rejected_by_reason"] == {"carriage return inside line": 1, "empty line": 1,
                                            "label not 0/1": 1, "non-integer in integer column": 1,
                                            "wrong field count": 1}


def test_an_empty_line_in_an_otherwise_good_block_is_an_empty_line(sample_dir, tmp_path):
    """pyarrow reads a lone empty line as a row of nulls; it is still reported as an empty line."""
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:50]
    lines[20] = ""
    (tmp_path / "raw.tsv").write_text("\n".join(lines) + "\n")
    stats = prep([str(tmp_path / "raw.tsv")], str(tmp_path / "out"),
                 PrepConfig(max_bad_fraction=0.1, workers=1))
    assert stats["rejected_by_reason"] == {"empty line": 1}
    assert stats["rejected_examples"][0]["line"] == 21


def test_workers_fall_back_to_pickling_when_a_piece_does_not_fit_its_slot(sample_dir, tmp_path,
                                                                          monkeypatch):
    """Lines far shorter than Criteo's make a piece's output bigger than its shared-memory slot;
    such results come back through the pool instead, with the same output."""
    import ctr_volcano.data.prep as prep_module

    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:1500]
    (tmp_path / "raw.tsv").write_text("\n".join(lines) + "\n")
    config = dict(block_bytes=1 << 16, shards=2)
    one = prep([str(tmp_path / "raw.tsv")], str(tmp_path / "w1"), PrepConfig(workers=1, **config))
    real_slots = prep_module.Slots
    monkeypatch.setattr(prep_module, "Slots", lambda count, size: real_slots(count, 4096))
    two = prep([str(tmp_path / "raw.tsv")], str(tmp_path / "w2"), PrepConfig(workers=2, **config))
    assert two["workers"] == 2 and one["rows_train"] == two["rows_train"]
    files1, stats1 = _split_contents(tmp_path / "w1")
    files2, stats2 = _split_contents(tmp_path / "w2")
    assert stats1 == stats2 and files1.keys() == files2.keys()
    for name in files1:
        assert files1[name] == files2[name] if isinstance(files1[name], str) \
            else files1[name].equals(files2[name]), name
