"""The synthetic data generator and the committed sample it made."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from ctr_model import features as F
from ctr_volcano.data import synthetic as datagen
from ctr_volcano.errors import BadInput

#: The sample's size bound: 200k lines, the fewest at which the demo's log loss is within 0.01 of the
#: generating model's (docs/training.md, "Calibration and the demo").
SAMPLE_LIMIT_BYTES = 18_000_000


def _lines(directory):
    out = []
    for path in sorted(directory.glob("part-*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            out.extend(fh.read().splitlines())
    return out


def test_generate_is_deterministic_and_independent_of_file_count(tmp_path):
    a = datagen.generate(str(tmp_path / "a"), rows=2500, seed=11, files=1, oracle_rows=20_000)
    b = datagen.generate(str(tmp_path / "b"), rows=2500, seed=11, files=3, oracle_rows=20_000)
    c = datagen.generate(str(tmp_path / "c"), rows=2500, seed=12, files=1, oracle_rows=20_000)
    assert _lines(tmp_path / "a") == _lines(tmp_path / "b")
    assert _lines(tmp_path / "a") != _lines(tmp_path / "c")
    assert a["auc"] == b["auc"] and a["files"] == ["part-00000.tsv"]
    assert b["files"] == ["part-00000.tsv", "part-00001.tsv", "part-00002.tsv"]
    sizes = [len(_lines_of(tmp_path / "b" / f)) for f in b["files"]]
    assert sizes == [833, 833, 834]
    assert json.loads((tmp_path / "a" / "oracle.json").read_text()) == a
    assert c["seed"] == 12


def _lines_of(path):
    return path.read_text().splitlines()


def test_lines_are_criteo_format_with_realistic_gaps(tmp_path):
    datagen.generate(str(tmp_path), rows=4000, seed=11, oracle_rows=20_000)
    lines = _lines(tmp_path)
    assert len(lines) == 4000
    fields = [line.split("\t") for line in lines]
    assert {len(f) for f in fields} == {40}
    assert {f[0] for f in fields} == {"0", "1"}
    dense = [[f[1 + j] for f in fields] for j in range(F.NUM_DENSE)]
    for col in dense:
        assert all(v == "" or int(v) == int(v) for v in col)
    assert any(v.startswith("-") for v in dense[1])                      # I2 has negatives
    assert 0.35 < sum(v == "" for v in dense[0]) / 4000 < 0.55           # I1 ~45% missing
    cats = [[f[14 + c] for f in fields] for c in range(F.NUM_SPARSE)]
    for col in cats:
        assert all(v == "" or (len(v) == 8 and int(v, 16) >= 0 and v == v.lower()) for v in col)
    assert 0.65 < sum(v == "" for v in cats[21]) / 4000 < 0.85          # C22 ~76% missing
    # skewed frequencies: the most common value of C1 is far more common than uniform
    values, counts = np.unique([v for v in cats[0] if v], return_counts=True)
    assert counts.max() > 20 * 4000 / datagen._VOCAB[0]
    labels = np.array([int(f[0]) for f in fields])
    assert 0.2 < labels.mean() < 0.3


def test_oracle_is_measured_and_sane(tmp_path):
    oracle = datagen.generate(str(tmp_path), rows=100, seed=11, oracle_rows=50_000)
    assert 0.74 < oracle["auc"] < 0.81
    assert oracle["logloss"] < oracle["prior_logloss"] - 0.05
    assert oracle["oracle_sample_rows"] == 50_000
    # the oracle really is the generating model: a noisier score must do worse on the same sample
    model = datagen.planted_model(11)
    s = model.sample(np.random.default_rng(1), 50_000)
    noisy = s["p"] + np.random.default_rng(2).normal(0, 0.2, len(s["p"]))
    assert datagen.auc_score(s["label"], noisy) < datagen.auc_score(s["label"], s["p"]) - 0.02


def test_auc_and_logloss_helpers_match_sklearn():
    from sklearn.metrics import log_loss, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 5000)
    p = np.round(rng.random(5000), 2)  # many ties
    assert datagen.auc_score(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert datagen.logloss_score(y, p) == pytest.approx(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)),
                                                        abs=1e-9)
    assert np.isnan(datagen.auc_score(np.ones(3), np.arange(3)))


@pytest.mark.parametrize("kwargs, field", [
    ({"rows": 0}, "rows"), ({"rows": 10, "files": 0}, "files"), ({"rows": 2, "files": 3}, "files"),
    ({"rows": 10, "seed": -1}, "seed"), ({"rows": 10, "gzip_level": 11}, "gzip_level"),
    ({"rows": 10, "oracle_rows": 5}, "oracle_rows"),
])
def test_generate_validates_arguments(tmp_path, kwargs, field):
    with pytest.raises(BadInput) as err:
        datagen.generate(str(tmp_path), **kwargs)
    assert err.value.field == field


def test_committed_sample_is_what_gen_data_makes(sample_dir, tmp_path):
    oracle = json.loads((sample_dir / "oracle.json").read_text())
    files = sorted(p.name for p in sample_dir.glob("part-*"))
    assert files == oracle["files"] and all(f.endswith(".tsv.gz") for f in files)
    total = sum(p.stat().st_size for p in sample_dir.iterdir())
    assert total <= SAMPLE_LIMIT_BYTES and oracle["rows"] >= 200_000
    # (a small oracle sample keeps this fast; the data does not depend on it)
    again = datagen.generate(str(tmp_path), rows=oracle["rows"], seed=oracle["seed"],
                             files=len(files), gzip_level=9, oracle_rows=20_000)
    assert _lines(tmp_path) == _lines(sample_dir)
    measured = ("auc", "logloss", "positive_rate", "prior_logloss", "oracle_sample_rows")
    assert {k: v for k, v in again.items() if k not in measured} == \
        {k: v for k, v in oracle.items() if k not in measured}
    assert abs(again["auc"] - oracle["auc"]) < 0.015
    for name in files:  # gzip header has a fixed timestamp: bytes are reproducible
        assert (tmp_path / name).read_bytes() == (sample_dir / name).read_bytes()


def test_sample_is_learnable_after_prep(sample_dir, tmp_path):
    """A plain logistic regression on the prepped sample gets visibly close to the oracle."""
    import pyarrow.parquet as pq
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from ctr_volcano.data.prep import PrepConfig, prep

    prep([str(sample_dir)], str(tmp_path), PrepConfig(test_fraction=0.2, seed=1))
    split = {s: pq.read_table(F.shard_files(str(tmp_path / s))) for s in ("train", "test")}
    ids = {s: np.stack([t.column(c).to_numpy() for c in F.SPARSE_COLUMNS], 1)
           for s, t in split.items()}
    vocab, inverse = np.unique(np.concatenate([ids["train"], ids["test"]]).ravel(),
                               return_inverse=True)
    inverse = inverse.reshape(-1, F.NUM_SPARSE)

    def design(s, rows):
        t = split[s]
        one_hot = sp.csr_matrix((np.ones(rows.size), (np.repeat(np.arange(len(rows)), F.NUM_SPARSE),
                                                     rows.ravel())), shape=(len(rows), len(vocab)))
        dense = np.stack([t.column(c).to_numpy() for c in F.DENSE_COLUMNS], 1) / 5.0
        return sp.hstack([one_hot, sp.csr_matrix(dense)]).tocsr()

    n_train = split["train"].num_rows
    x_train, x_test = design("train", inverse[:n_train]), design("test", inverse[n_train:])
    y_train = split["train"].column("label").to_numpy()
    y_test = split["test"].column("label").to_numpy()
    model = LogisticRegression(C=0.05, solver="liblinear").fit(x_train, y_train)
    auc = datagen.auc_score(y_test, model.predict_proba(x_test)[:, 1])
    oracle = json.loads((sample_dir / "oracle.json").read_text())["auc"]
    assert oracle - 0.04 < auc <= oracle + 0.02, (auc, oracle)


#: sha256 of ``generate(rows=2000, seed=7, oracle_rows=20_000)``'s part-00000.tsv and oracle.json,
#: computed with the generator as it was before ``vocab_scale`` existed (scale 1 must not move). The
#: oracle's digest changed once since, with its ``generator`` field only (the module moved from
#: ``ctr_volcano.datagen`` to ``ctr_volcano.data.synthetic``; with the old name it hashes to 47aae0b4...).
SCALE1_TSV_SHA256 = "ea2da0e3fb9c7c0e1b79b04f3241afa49d69624683b929e4c3cab80650f47962"
SCALE1_ORACLE_SHA256 = "622df0469d970f05207f6030bad7a11509807850ac726c27189a962bd25c6306"


def test_vocab_scale_1_output_is_unchanged(tmp_path):
    import hashlib

    oracle = datagen.generate(str(tmp_path), rows=2000, seed=7, oracle_rows=20_000, vocab_scale=1)
    assert "vocab_scale" not in oracle
    digest = {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
              for name in ("part-00000.tsv", "oracle.json")}
    assert digest == {"part-00000.tsv": SCALE1_TSV_SHA256, "oracle.json": SCALE1_ORACLE_SHA256}


def _distinct_per_column(directory):
    fields = [line.split("\t") for line in _lines(directory)]
    return [len({f[14 + c] for f in fields} - {""}) for c in range(F.NUM_SPARSE)]


def test_vocab_scale_grows_the_distinct_ids_with_the_rows(tmp_path):
    seen = {}
    for scale, rows in ((1, 20_000), (100, 10_000), (100, 20_000), (100, 40_000)):
        out = tmp_path / f"s{scale}-{rows}"
        oracle = datagen.generate(str(out), rows=rows, seed=3, oracle_rows=20_000, vocab_scale=scale)
        assert oracle.get("vocab_scale", 1) == scale
        seen[scale, rows] = _distinct_per_column(out)
    wide = [c for c in range(F.NUM_SPARSE) if datagen._VOCAB[c] >= 300]
    assert all(seen[100, 20_000][c] > seen[1, 20_000][c] for c in wide), seen
    assert sum(seen[100, 20_000]) > 2 * sum(seen[1, 20_000])
    # (seed 3: 55,016 -> 92,069 -> 151,656 distinct values in all; scale 1 at 20k rows: 23,444)
    assert sum(seen[100, 20_000]) > 1.4 * sum(seen[100, 10_000])
    assert sum(seen[100, 40_000]) > 1.4 * sum(seen[100, 20_000])
    assert 0.7 < oracle["auc"] < 0.85 and 0.2 < oracle["positive_rate"] < 0.3


def test_vocab_strings_are_8_lowercase_hex_digits_and_unique_per_column():
    import pyarrow.compute as pc

    model = datagen.planted_model(3, vocab_scale=100)
    assert model.vocab_scale == 100
    for c, vocab in enumerate(model.vocab):
        assert len(vocab) == datagen._VOCAB[c] * 100 == pc.count_distinct(vocab).as_py()
        assert pc.all(pc.match_substring_regex(vocab, "^[0-9a-f]{8}$")).as_py()
    # the vectorised formatting is the plain one
    codes = datagen._mix32(np.arange(5000, dtype=np.uint32) + np.uint32(2 ** 32 - 2500))
    assert datagen._hex8(codes).to_pylist() == [f"{int(v):08x}" for v in codes]


@pytest.mark.parametrize("value", ["0", "-1", "1001"])
def test_cli_refuses_a_bad_vocab_scale_before_any_work(tmp_path, capsys, value):
    from ctr_volcano.app.cli.main import main

    out = tmp_path / "out"
    assert main(["gen-data", "--rows", "10", "--out", str(out), f"--vocab-scale={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--vocab-scale={value}" in err and "1..1000" in err
    assert not out.exists()


def test_interactions_0_output_is_unchanged(tmp_path):
    import hashlib

    oracle = datagen.generate(str(tmp_path), rows=2000, seed=7, oracle_rows=20_000, interactions=0)
    assert "interactions" not in oracle
    digest = {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
              for name in ("part-00000.tsv", "oracle.json")}
    assert digest == {"part-00000.tsv": SCALE1_TSV_SHA256, "oracle.json": SCALE1_ORACLE_SHA256}


def test_interactions_carry_signal_a_sum_of_per_feature_effects_misses(tmp_path):
    oracle = datagen.generate(str(tmp_path), rows=1000, seed=7, oracle_rows=100_000, interactions=6)
    pairs = oracle["interactions"]
    assert len(pairs) == 6 and len({tuple(p) for p in pairs}) == 6
    noise = set(oracle["noise_columns"])
    assert all(a != b and a not in noise and b not in noise for a, b in pairs)
    assert 0.2 < oracle["positive_rate"] < 0.3
    # the planted log-odds without the pair terms ranks worse than the oracle
    model = datagen.planted_model(7, interactions=6)
    s = model.sample(np.random.default_rng(1), 50_000)
    linear = model.raw_logit(s["dense"], s["dense_missing"], s["ranks"]) - sum(
        i.term(s["ranks"]) for i in model.interactions)
    full, without = datagen.auc_score(s["label"], s["p"]), datagen.auc_score(s["label"], linear)
    assert full - without > 0.015, (full, without)
    assert oracle["auc"] == pytest.approx(full, abs=0.01)


def test_interactions_are_a_factorization_machine_over_a_clique_of_columns():
    """K = 6 is every pair of 4 columns, and a column's latent vectors are the same in all its
    pairs: the inner products of one embedding per id can represent the planted term exactly."""
    model = datagen.planted_model(7, interactions=6)
    columns = {c for i in model.interactions for c in (i.a, i.b)}
    assert len(columns) == 4
    assert {frozenset((i.a, i.b)) for i in model.interactions} == {
        frozenset((a, b)) for a in columns for b in columns if a != b}
    latent = {}
    for i in model.interactions:
        for c, table in ((i.a, i.u), (i.b, i.v)):
            assert np.array_equal(latent.setdefault(c, table), table), c
    # K = 8 continues with a fifth column's first two pairs
    more = datagen.planted_model(7, interactions=8).interactions
    assert [(i.a, i.b) for i in more[:6]] == [(i.a, i.b) for i in model.interactions]
    assert len({c for i in more for c in (i.a, i.b)}) == 5


def test_planted_p_scores_prepped_rows_as_the_generator_drew_them():
    """The bench's oracle on a test split: prep's ids mapped back to the planted values give the
    probability each row was drawn with."""
    model = datagen.planted_model(7, interactions=6)
    s = model.sample(np.random.default_rng(3), 20_000)
    dense = np.where(s["dense_missing"], 0.0, F.dense_transform(s["dense"].ravel()).reshape(s["dense"].shape))
    ids = np.stack([F.hash_categorical(_values(model, s["ranks"][:, c], c), c + 1, 1_000_001)
                    for c in range(F.NUM_SPARSE)], axis=1)
    p = datagen.planted_p(model, dense.astype(np.float32), ids, 1_000_001)
    # two values of a column that hash to one id (a few per column at 1M buckets) are one id to
    # any model too; every other row is scored exactly
    shared = np.zeros(len(p), dtype=bool)
    for c in range(F.NUM_SPARSE):
        keys, counts = np.unique(F.hash_categorical(model.vocab[c], c + 1, 1_000_001), return_counts=True)
        shared |= np.isin(ids[:, c], keys[counts > 1])
    assert shared.mean() < 0.05
    np.testing.assert_allclose(p[~shared], s["p"][~shared], rtol=0, atol=1e-6)


def _values(model, ranks, c):
    import pyarrow as pa

    return model.vocab[c].take(pa.array(ranks, mask=ranks < 0))   # a null index takes a null (empty)


@pytest.mark.parametrize("argv,fix", [(["--interactions=101"], "0..100"),
                                      (["--interactions=3", "--days", "2"], "with --days")])
def test_cli_refuses_bad_interactions_before_any_work(tmp_path, capsys, argv, fix):
    from ctr_volcano.app.cli.main import main

    out = tmp_path / "out"
    assert main(["gen-data", "--rows", "10", "--out", str(out)] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--interactions=" in err and fix in err, err
    assert not out.exists()
