"""The data profile prep writes (``ctr_volcano.data.profile``): its sketches against exact figures on
real data, merges that do not depend on how the data was cut, and the same ``profile.json`` from a
one-process, a multi-lane and a fanned-out prep."""
from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from ctr_volcano.data.prep import PrepConfig, prep
from ctr_volcano.data.prep.fanout import prep_fanout
from ctr_volcano.data.profile import DataProfile, read_profile
from ctr_volcano.data.profile.sketches import KMV_K, DenseSketch, IdSketch, js_divergence, kmv_hash


def _raw_columns(sample_dir, rows=None):
    """The committed sample's lines (the first ``rows``) and their dense fields as numbers (NaN = empty)."""
    lines = [ln for p in sorted(sample_dir.glob("part-*")) for ln in gzip.open(p, "rt").read().splitlines()][:rows]
    fields = [line.split("\t") for line in lines]
    dense = np.array([[float(f[j]) if f[j] else np.nan for j in range(1, 14)] for f in fields])
    return lines, dense


@pytest.fixture(scope="module")
def sample_profile(sample_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("profiled")
    stats = prep([str(sample_dir)], str(out), PrepConfig(workers=1, shards=2))
    profile, doc = read_profile(str(out))
    return out, stats, profile, doc


def test_dense_sketch_is_exact_where_it_can_be_and_its_quantiles_within_3_percent():
    rng = np.random.default_rng(0)
    x = np.round(rng.lognormal(2.0, 2.0, 50_000))
    x[:500] = -rng.integers(1, 50, 500)
    x[rng.random(x.size) < 0.2] = np.nan
    s = DenseSketch.of(x)
    v = x[~np.isnan(x)]
    assert (s.rows, s.missing) == (x.size, int(np.isnan(x).sum()))
    assert s.mean == pytest.approx(v.mean(), rel=1e-12) and s.std == pytest.approx(v.std(), rel=1e-9)
    assert (s.min, s.max) == (v.min(), v.max())
    for q, got in zip((0.01, 0.1, 0.5, 0.9, 0.99), s.quantiles((0.01, 0.1, 0.5, 0.9, 0.99))):
        want = np.quantile(v, q, method="lower")
        assert abs(got - want) <= 0.033 * (1 + abs(want)), (q, got, want)
    assert int(s.count.sum()) == v.size


def test_criteo_transform_path_and_the_generic_one_bin_alike(sample_dir):
    """Prep's Criteo path builds the sketch from the arrays its transform computes; a spec's path from
    the raw numbers: the same bins, counts and sums."""
    from ctr_volcano.data.prep.parse import parse_block, transform

    lines, dense = _raw_columns(sample_dir, 8_000)
    text = ("\n".join(lines) + "\n").encode()
    table, _, _ = parse_block(text, len(lines))
    sketches: list = []
    transform(table, 1000001, sketches)
    for j, s in enumerate(sketches):
        ref = DenseSketch.of(dense[:, j])
        assert (s.rows, s.missing, s.min, s.max) == (ref.rows, ref.missing, ref.min, ref.max), j
        assert s.total == pytest.approx(ref.total) and s.squares == pytest.approx(ref.squares)
        assert s.index.tolist() == ref.index.tolist() and s.count.tolist() == ref.count.tolist(), j


def _cut(n, parts, rng):
    bounds = np.sort(rng.choice(np.arange(1, n), parts - 1, replace=False))
    return np.split(np.arange(n), bounds)


def test_merged_sketches_do_not_depend_on_how_the_data_was_cut():
    rng = np.random.default_rng(1)
    x = rng.normal(50, 30, 40_000)
    x[rng.random(x.size) < 0.1] = np.nan
    ids = (np.floor(rng.pareto(0.8, 40_000) * 7).astype(np.int64) * 7919 + 26) % 10_000_019
    ids[rng.random(ids.size) < 0.05] = 4
    whole = DenseSketch.of(x)
    for parts in (2, 7, 31):
        pieces = _cut(x.size, parts, rng)
        merged = DenseSketch.merged([DenseSketch.of(x[p]) for p in pieces])
        assert merged.index.tolist() == whole.index.tolist() and merged.count.tolist() == whole.count.tolist()
        assert (merged.rows, merged.missing, merged.min, merged.max) == (whole.rows, whole.missing, whole.min,
                                                                          whole.max)
        assert merged.mean == pytest.approx(whole.mean, rel=1e-12)
        id_parts = [IdSketch.of(ids[p], 4, 26) for p in pieces]
        # in any grouping (pairs, then all at once): the hash sample is the same set
        by_pairs = IdSketch.merged([IdSketch.merged(id_parts[i:i + 2]) for i in range(0, len(id_parts), 2)])
        at_once = IdSketch.merged(id_parts)
        assert by_pairs.kmv_ids.tolist() == at_once.kmv_ids.tolist()
        assert by_pairs.kmv_counts.tolist() == at_once.kmv_counts.tolist()
        assert at_once.missing == int((ids == 4).sum()) and at_once.rows == ids.size


def test_hash_sample_is_the_bottom_k_of_the_ids_under_the_cut_and_counts_distinct():
    from ctr_volcano.data.profile.sketches import KMV_RATE

    rng = np.random.default_rng(2)
    for distinct in (3, 300, 3_000, 200_000):
        vocab = np.unique(rng.integers(26, 1 << 40, distinct * 2))[:distinct]
        ids = vocab[np.minimum(rng.zipf(1.2, 300_000) - 1, distinct - 1)] if distinct < 200_000 \
            else rng.choice(vocab, 300_000)
        s = IdSketch.merged([IdSketch.of(p, 0, 26) for p in np.array_split(ids, 9)])
        seen = np.unique(ids)
        under = seen[kmv_hash(seen).astype(np.float64) < 2.0 ** 64 / KMV_RATE]
        want = np.sort(under[np.argsort(kmv_hash(under))[:KMV_K]])
        assert s.kmv_ids.tolist() == want.tolist(), distinct
        # the frequent ids the row sample saw, plus the others estimated from the hash sample: exact
        # when the row sample sees every id, else unbiased with sd sqrt(unseen * (KMV_RATE - 1))
        unseen = np.setdiff1d(seen, s.top_ids).size
        if len(s.kmv_ids) < KMV_K:
            assert abs(s.distinct() - seen.size) <= 4 * math.sqrt(unseen * (KMV_RATE - 1)), (distinct, s.distinct())
        else:    # a full KMV sample: within ~4/sqrt(k)
            assert abs(s.distinct() - seen.size) <= 0.25 * seen.size, (distinct, s.distinct(), seen.size)
        if distinct == 3:
            assert s.distinct() == 3


def _id_sketch_by_definition(ids, slots):
    """A piece's id sketch from its definition, with ``np.unique``: the row sample's counts of the ids
    that are not empty (the 100 largest, ties to the smaller id) and the hash sample's (the ``KMV_K``
    of smallest hash among the ids under the cut) with their rows."""
    from ctr_volcano.data.profile.sketches import KMV_RATE, TOP_KEEP_PIECE, sample_rows

    sample = ids[sample_rows(ids.size)]
    sample = sample[sample >= slots]
    top, top_n = np.unique(sample, return_counts=True)
    keep = np.sort(np.lexsort((top, -top_n))[:TOP_KEEP_PIECE])
    live = ids[ids >= slots]
    under = live[kmv_hash(live).astype(np.float64) < 2.0 ** 64 / KMV_RATE]
    kmv, kmv_n = np.unique(under, return_counts=True)
    small = np.sort(np.argsort(kmv_hash(kmv))[:KMV_K])
    return sample.size, top[keep], top_n[keep], kmv[small], kmv_n[small]


def test_a_pieces_columns_sketched_together_are_each_sketched_by_definition():
    """``IdSketch.of_columns`` counts all columns' samples end to end: no column's ids, empty ids or
    counts leak into another's, whatever the columns' lengths (multi-valued ones differ)."""
    rng = np.random.default_rng(4)
    slots = 5
    columns = [26 + rng.zipf(1.3, 20_000) % 3000,                         # frequent ids, > 100 distinct
               rng.integers(slots, 1 << 40, 20_000),                      # all distinct: a full hash sample
               np.full(20_000, 2),                                        # every row empty
               np.where(rng.random(7_000) < 0.3, 3, 26 + rng.integers(0, 40, 7_000)),   # shorter, some empty
               np.zeros(0, np.int64),                                     # no values
               np.where(rng.random(20_000) < 0.5, rng.integers(0, slots, 20_000), 26 + rng.integers(0, 9, 20_000))]
    columns[0][:50] = 0
    sketches = IdSketch.of_columns(columns, slots)
    for k, (ids, s) in enumerate(zip(columns, sketches)):
        assert (s.rows, s.missing) == (ids.size, int((ids == k).sum())), k
        if s.rows == s.missing:
            assert s.sample_rows == 0 and s.top_ids.size == 0 and s.kmv_ids.size == 0, k
            continue
        sampled, top, top_n, kmv, kmv_n = _id_sketch_by_definition(ids, slots)
        assert s.sample_rows == sampled, k
        assert s.top_ids.tolist() == top.tolist() and s.top_counts.tolist() == top_n.tolist(), k
        assert s.kmv_ids.tolist() == kmv.tolist() and s.kmv_counts.tolist() == kmv_n.tolist(), k
    assert sketches[1].kmv_ids.size == KMV_K and sketches[0].top_ids.size == 100


def test_frequent_ids_from_the_row_sample():
    rng = np.random.default_rng(3)
    ids = 26 + np.minimum(rng.zipf(1.3, 200_000), 5000) * 1009
    s = IdSketch.merged([IdSketch.of(p, 0, 26) for p in np.array_split(ids, 12)])
    values, counts = np.unique(ids, return_counts=True)
    truth = dict(zip(values.tolist(), (counts / ids.size).tolist()))
    top = s.top(20)
    assert [i for i, _ in top[:5]] == values[np.argsort(-counts)][:5].tolist()
    for i, f in top:
        assert abs(f - truth[i]) < 0.01, (i, f, truth[i])


def test_the_frequent_id_candidates_kept_are_the_largest_counts_ties_to_the_smaller_id():
    from ctr_volcano.data.profile.sketches import _top

    rng = np.random.default_rng(4)
    ids = np.unique(rng.integers(26, 1 << 40, 3_000))
    for counts in (rng.integers(1, 4, ids.size), rng.zipf(1.5, ids.size), np.ones(ids.size, np.int64)):
        for keep in (1, 7, 100, 400, ids.size - 1, ids.size):
            kept, kept_counts = _top(ids, counts.copy(), keep)
            want = np.sort(sorted(range(ids.size), key=lambda i: (-counts[i], ids[i]))[:keep])
            assert kept.tolist() == ids[want].tolist() and kept_counts.tolist() == counts[want].tolist()


def test_a_pickled_profile_is_the_same_profile():
    """A forked prep lane returns its pieces' profiles pickled (a packed form, not per array)."""
    import pickle

    rng = np.random.default_rng(5)
    x = rng.normal(0, 100, 5_000)
    x[:100] = np.nan
    profile = DataProfile(label="click", rows=5_000, positives=123,
                          dense={"a": DenseSketch.of(x), "empty": DenseSketch.of(np.full(10, np.nan))},
                          categorical={"c": IdSketch.of(26 + rng.zipf(1.3, 5_000) * 7, 0, 26),
                                       "gone": IdSketch.of(np.ones(50, np.int64), 1, 26)})
    back = pickle.loads(pickle.dumps(profile))
    assert back.to_state() == profile.to_state() and list(back.dense) == ["a", "empty"]
    assert back.dense["empty"].min == math.inf and back.label == "click"
    assert pickle.loads(pickle.dumps(DataProfile())).to_state() == DataProfile().to_state()


def test_js_divergence():
    a = {0: 10, 1: 30, 2: 60}
    assert js_divergence(a, a) == 0.0
    assert js_divergence(a, {7: 5, 8: 5}) == pytest.approx(1.0)
    b = {0: 20, 1: 30, 2: 50}
    assert js_divergence(a, b) == pytest.approx(js_divergence(b, a)) and 0 < js_divergence(a, b) < 0.05


def test_sample_profile_agrees_with_the_data_and_stats(sample_profile, sample_dir):
    out, stats, profile, doc = sample_profile
    assert profile.rows == stats["rows_train"] + stats["rows_test"] == doc["rows"]
    assert profile.label_rate == pytest.approx(stats["positive_rate"])
    for name, rate in stats["missing_rate"].items():
        assert doc["dense" if name.startswith("I") else "categorical"][name]["missing_rate"] == pytest.approx(rate)
    _, dense = _raw_columns(sample_dir)
    back = DataProfile.from_doc(json.loads(json.dumps(doc)))     # the document reads back whole
    other = json.loads(json.dumps(doc))
    other["sketches"]["kmv_rate"] *= 2                            # sketches of other parameters: not comparable
    with pytest.raises(ValueError, match="kmv_rate"):
        DataProfile.from_doc(other)
    assert back.dense["I5"].index.tolist() == profile.dense["I5"].index.tolist()
    for j in (0, 4, 12):
        got = doc["dense"][f"I{j + 1}"]
        values = dense[:, j][~np.isnan(dense[:, j])]
        assert got["mean"] == pytest.approx(values.mean()) and got["std"] == pytest.approx(values.std())
        for q in (0.05, 0.5, 0.95):
            want = np.quantile(values, q, method="lower")
            assert abs(got["quantiles"][f"p{round(q * 100):02d}"] - want) <= 0.033 * (1 + abs(want)), (j, q)
    assert doc["feature_spec"]["format"] == "criteo"
    assert (out / "train" / "profile.json").read_bytes() == (out / "profile.json").read_bytes()
    freqs = [f for _, f in doc["categorical"]["C1"]["top"]]
    assert 0 < len(freqs) <= 100 and freqs == sorted(freqs, reverse=True)


def test_fanned_out_prep_writes_the_one_process_profile_byte_for_byte(sample_dir, tmp_path):
    """N workers per phase (processes here, pods on a cluster), 1 lane or 2: one profile.json."""
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = gzip.open(sorted(sample_dir.glob("part-*"))[0], "rt").read().splitlines()[:30_000]
    (raw / "a.tsv").write_text("\n".join(lines[:17_000]) + "\n")
    with gzip.open(raw / "b.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines[17_000:]) + "\n")
    config = PrepConfig(hash_buckets=100_003, block_bytes=1 << 18, shards=2, workers=1)
    prep([str(raw)], str(tmp_path / "one"), config)
    expected = (tmp_path / "one" / "profile.json").read_bytes()
    prep([str(raw)], str(tmp_path / "lanes"), PrepConfig(**{**config.__dict__, "workers": 2}))
    assert (tmp_path / "lanes" / "profile.json").read_bytes() == expected
    for workers in (1, 3):
        prep_fanout([str(raw)], str(tmp_path / f"fan{workers}"), config, workers=workers)
        assert (tmp_path / f"fan{workers}" / "profile.json").read_bytes() == expected, workers
        assert (tmp_path / f"fan{workers}" / "train" / "profile.json").read_bytes() == expected
    assert json.loads(expected)["rows"] == 30_000


def test_profile_off_writes_none(sample_dir, tmp_path):
    prep([str(sorted(sample_dir.glob("part-*"))[0])], str(tmp_path / "o"), PrepConfig(profile=False, shards=1))
    assert not (tmp_path / "o" / "profile.json").exists() and not (tmp_path / "o" / "train" / "profile.json").exists()


def test_a_spec_s_profile_has_its_features(tmp_path):
    """A CSV spec with string ids, a multi-valued column and no dense feature at all."""
    spec = {"format": "csv", "header": True, "label": "click",
            "categorical": [{"name": "user"}, {"name": "tags", "multivalued": True, "separator": "|"}],
            "ignore": ["ts"]}
    rows = ["click,user,tags,ts"] + [f"{i % 3 == 0:d},u{i % 50},t{i % 7}|t{i % 5},{i}" for i in range(30_000)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    from ctr_model.feature_spec import spec_from_dict

    prep([str(tmp_path / "d.csv")], str(tmp_path / "out"), PrepConfig(shards=1), spec=spec_from_dict(spec))
    profile, doc = read_profile(str(tmp_path / "out"))
    assert list(profile.categorical) == ["user", "tags"] and not profile.dense
    assert profile.label == "click" and profile.rows == 30_000
    assert profile.label_rate == pytest.approx(1 / 3)
    assert profile.categorical["user"].distinct() == 50      # a period of 50 rows: all seen
    assert profile.categorical["tags"].rows == 60_000      # two values a row
    assert profile.categorical["tags"].distinct() == 7
