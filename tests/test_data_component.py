"""``prepare_ctr_data`` for real under ``kfp.local`` (SubprocessRunner, no venv).

Raw data enters the way the pipeline feeds it: ``dsl.importer`` on a pipeline parameter holding a
local path (a directory or a single .gz file). The outputs are compared with the library function
run directly on the same input.
"""

import json
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kfp import dsl, local
from kfp.dsl import Dataset, Metrics

from components.data_prep import prepare_ctr_data
from ctr_model import features as F
from ctr_volcano.data.prep import PrepConfig, prep

Out = NamedTuple("Out", [("train", Dataset), ("test", Dataset), ("stats", Metrics)])


@dsl.pipeline(name="prep-only")
def prep_only(raw_uri: str, hash_buckets: int, shards: int, max_bad_fraction: float) -> Out:
    raw = dsl.importer(artifact_uri=raw_uri, artifact_class=Dataset, reimport=False)
    task = prepare_ctr_data(raw_data=raw.output, hash_buckets=hash_buckets, shards=shards,
                            max_bad_fraction=max_bad_fraction, seed=3)
    return Out(train=task.outputs["train_data"], test=task.outputs["test_data"],
               stats=task.outputs["stats"])


def _init(root):
    # A fresh workspace per run: kfp.local deletes workspace_root when a run ends.
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "outputs"),
               workspace_root=str(root / "workspace"))


def _table(split_dir):
    return pa.concat_tables([pq.read_table(f) for f in F.shard_files(split_dir)])


def test_prepare_ctr_data_under_kfp_local(sample_dir, tmp_path):
    _init(tmp_path / "run")
    res = prep_only(raw_uri=str(sample_dir), hash_buckets=10007, shards=3, max_bad_fraction=0.001)
    train, test, stats = res.outputs["train"], res.outputs["test"], res.outputs["stats"]

    direct = prep([str(sample_dir)], str(tmp_path / "direct"),
                  PrepConfig(hash_buckets=10007, shards=3, seed=3))
    assert stats.metadata["rows_in"] == direct["rows_in"] > 20_000
    assert stats.metadata["rows_train"] == direct["rows_train"]
    assert stats.metadata["rows_test"] == direct["rows_test"]
    assert stats.metadata["rows_rejected"] == 0
    assert stats.metadata["positive_rate"] == pytest.approx(direct["positive_rate"])
    # the Metrics artifact has a file (keeps kfp.local caching working) with the full stats
    on_file = json.loads(open(stats.path).read())
    assert on_file["rows_in"] == direct["rows_in"] and "missing_rate" in on_file

    for artifact, split in ((train, "train"), (test, "test")):
        schema = F.check_split_schema(artifact.path, expected_buckets=10007)
        assert schema["rows"] == direct[f"rows_{split}"]
        assert artifact.metadata["rows"] == direct[f"rows_{split}"]
        assert artifact.metadata["schema_version"] == F.SCHEMA_VERSION
        assert _table(artifact.path).equals(_table(str(tmp_path / "direct" / split)))
    assert len(F.shard_files(train.path)) == 3 and len(F.shard_files(test.path)) == 2


def test_prepare_ctr_data_fails_the_step_on_bad_input(sample_dir, tmp_path):
    lines = (tmp_path / "raw.tsv")
    good = "0\t1\t-1\t\t2\t5\t\t1\t1\t\t1\t0\t\t2" + "\t68fd1e64" * 26
    lines.write_text("\n".join([good] * 50 + ["1\tnot-a-number"] * 5) + "\n")
    _init(tmp_path / "run")
    with pytest.raises(RuntimeError, match="prepare-ctr-data"):
        prep_only(raw_uri=str(lines), hash_buckets=1000, shards=2, max_bad_fraction=0.001)
    _init(tmp_path / "run2")
    res = prep_only(raw_uri=str(lines), hash_buckets=1000, shards=2, max_bad_fraction=0.5)
    assert res.outputs["stats"].metadata["rows_rejected"] == 5
    assert res.outputs["stats"].metadata["rows_in"] == 55


def test_the_components_hash_bucket_default_is_the_librarys():
    """The component spells its default as a literal (KFP runs the function's source alone, where a
    module constant is undefined); it must still be the one default the library and pipelines use."""
    import inspect

    from ctr_model.defaults import DEFAULT_HASH_BUCKETS
    from pipelines.ctr_retraining_pipeline import ctr_retraining_pipeline
    from pipelines.ctr_training_pipeline import ctr_training_pipeline

    defaults = {inspect.signature(f).parameters["hash_buckets"].default
                for f in (prepare_ctr_data.python_func, ctr_training_pipeline.pipeline_func,
                          ctr_retraining_pipeline.pipeline_func)}
    assert defaults == {DEFAULT_HASH_BUCKETS} == {PrepConfig().hash_buckets}


@dsl.pipeline(name="prep-spec")
def prep_spec_only(raw_uri: str, feature_spec: str) -> Out:
    raw = dsl.importer(artifact_uri=raw_uri, artifact_class=Dataset, reimport=False)
    task = prepare_ctr_data(raw_data=raw.output, shards=2, seed=3, feature_spec=feature_spec)
    return Out(train=task.outputs["train_data"], test=task.outputs["test_data"],
               stats=task.outputs["stats"])


def test_prepare_ctr_data_with_a_feature_spec_under_kfp_local(tmp_path):
    from ctr_model.feature_spec import spec_from_dict, split_spec
    from ctr_volcano.data.synthetic_spec import generate_spec

    doc = {"format": "csv", "header": True, "label": "clicked",
           "dense": [{"name": "price"}, {"name": "age", "transform": "standardize"}],
           "categorical": [{"name": "user"}, {"name": "items", "multivalued": True}]}
    generate_spec(str(tmp_path / "raw"), spec_from_dict(doc), rows=2000, seed=1, oracle_rows=1000)
    _init(tmp_path / "run")
    res = prep_spec_only(raw_uri=str(tmp_path / "raw"), feature_spec=json.dumps(doc))
    train, stats = res.outputs["train"], res.outputs["stats"]
    assert stats.metadata["rows_in"] == 2000 and stats.metadata["rows_rejected"] == 0
    written = split_spec(F.check_split_schema(train.path, any_spec=True))
    assert written.format == "csv" and written.dense[1].std > 0
    assert _table(train.path).schema.field("items").type == pa.list_(pa.int64())
    _init(tmp_path / "run2")
    with pytest.raises(RuntimeError, match="prepare-ctr-data"):
        prep_spec_only(raw_uri=str(tmp_path / "raw"), feature_spec='{"format": "csv", "colour": 1}')


@dsl.pipeline(name="prep-fanned-out")
def prep_fanned_out(raw_uri: str, fanout: int) -> Out:
    raw = dsl.importer(artifact_uri=raw_uri, artifact_class=Dataset, reimport=False)
    task = prepare_ctr_data(raw_data=raw.output, hash_buckets=10007, shards=3, seed=3, fanout=fanout)
    return Out(train=task.outputs["train_data"], test=task.outputs["test_data"], stats=task.outputs["stats"])


def test_prepare_ctr_data_fanned_out_to_processes_under_kfp_local(sample_dir, tmp_path):
    """``fanout`` without a claim: the step's N worker processes write the one-process prep's shards,
    byte for byte (the pods' path, on a claim, is tests/cluster/test_prep_pods.py)."""
    _init(tmp_path / "run")
    res = prep_fanned_out(raw_uri=str(sample_dir), fanout=2)
    direct = prep([str(sample_dir)], str(tmp_path / "direct"), PrepConfig(hash_buckets=10007, shards=3, seed=3))
    stats = json.loads(open(res.outputs["stats"].path).read())
    assert stats["fanout"] is True and stats["workers"] == 2 and stats["rows_in"] == direct["rows_in"]
    for artifact, split in ((res.outputs["train"], "train"), (res.outputs["test"], "test")):
        for ours, theirs in zip(F.shard_files(artifact.path), F.shard_files(str(tmp_path / "direct" / split)),
                                strict=True):
            assert open(ours, "rb").read() == open(theirs, "rb").read(), ours
        assert F.check_split_schema(artifact.path)["rows"] == direct[f"rows_{split}"]
