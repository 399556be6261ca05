"""Every error class of ``ctr_model`` belongs to a family of ``ctr_model.errors``, raised by its real
raise sites: bad input names the field, the value and the fix (exit 2), an outage is transient (exit
75), a failure exits 1; each pickles with its attributes, and what callers relied on stays."""
from __future__ import annotations

import errno
import json
import pickle
import socket

import pytest

from ctr_model.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_TRANSIENT,
    BadInput,
    JobFailed,
    TrainingJobFailed,
    TransientError,
    VolumeFull,
    exit_code_of,
    family_of,
    family_of_exit,
)


def _raised(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _contract_error():
    from ctr_model.contract import parse_role_env

    return _raised(lambda: parse_role_env({"CTR_ROLE": "trainer", "CTR_PS_PORT": "x"}))


def _config_error():
    from ctr_model.config import TrainConfig

    return _raised(lambda: TrainConfig.from_dict({"epochs": 0}))


def _data_error(tmp_path):
    from ctr_model.data import resolve_split

    return _raised(lambda: resolve_split(str(tmp_path)))


def _schema_mismatch(tmp_path):
    from ctr_model.features import check_split_schema

    (tmp_path / "schema.json").write_text(json.dumps({"schema_version": 0}))
    return _raised(lambda: check_split_schema(str(tmp_path)))


def _spec_error(tmp_path):
    from ctr_model.feature_spec import load_spec

    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"format": "csv", "header": True, "label": "y", "colour": "red",
                                "dense": [{"name": "a"}]}))
    return _raised(lambda: load_spec(str(path)))


def _bad_row():
    from ctr_model.features import parse_int_field

    return _raised(lambda: parse_int_field("12x"))


def _model_error(tmp_path):
    from ctr_model.infer import load_model

    return _raised(lambda: load_model(str(tmp_path)))


def _warm_start_error(tmp_path):
    from ctr_model.warm_start import read_init_model

    return _raised(lambda: read_init_model(str(tmp_path)))


def _store_error():
    from ctr_model.store import StoreConfig

    return _raised(lambda: StoreConfig(endpoint="minio:9000"))


def _onnx_errors():
    from ctr_model.onnx_export import NotServable, OnnxTooLarge

    return (NotServable("model", "deepfm", "ONNX export covers the dnn family; score it with load_model"),
            OnnxTooLarge("hash_buckets", 10 ** 9, "the model would be about 9 GiB as ONNX; train with fewer"))


def _no_space(tmp_path):
    from ctr_model.space import one_line_if_full

    def fill():
        with one_line_if_full(str(tmp_path), needed=10 ** 6):
            raise OSError(errno.ENOSPC, "No space left on device")

    return _raised(fill)


@pytest.fixture
def bad_inputs(tmp_path):
    dirs = {name: tmp_path / name for name in ("data", "schema", "spec", "model", "init", "full")}
    for d in dirs.values():
        d.mkdir()
    return {"ContractError": _contract_error(), "ConfigError": _config_error(),
            "DataError": _data_error(dirs["data"]), "SchemaMismatch": _schema_mismatch(dirs["schema"]),
            "SpecError": _spec_error(dirs["spec"]), "BadRow": _bad_row(), "ModelError": _model_error(dirs["model"]),
            "WarmStartError": _warm_start_error(dirs["init"]), "StoreError": _store_error(),
            "NotServable": _onnx_errors()[0], "OnnxTooLarge": _onnx_errors()[1],
            "NoSpace": _no_space(dirs["full"])}


def test_every_bad_input_class_is_a_bad_input_naming_field_value_and_fix(bad_inputs):
    assert len(bad_inputs) == 12
    for name, exc in bad_inputs.items():
        assert type(exc).__name__ == name, (name, exc)
        assert isinstance(exc, BadInput) and family_of(exc) is BadInput, name
        assert exit_code_of(exc) == EXIT_BAD_INPUT, name
        assert exc.field and exc.fix and exc.value is not None, (name, exc.field, exc.value, exc.fix)
        assert str(exc) == f"{exc.field}={exc.value!r}: {exc.fix}", name
        assert "\n" not in str(exc), name
        again = pickle.loads(pickle.dumps(exc))   # across process pools and subprocesses
        assert type(again) is type(exc) and str(again) == str(exc) and again.field == exc.field, name


def test_the_fields_are_the_ones_users_know(bad_inputs, tmp_path):
    fields = {name: exc.field for name, exc in bad_inputs.items()}
    assert fields == {"ContractError": "environment", "ConfigError": "config.epochs", "DataError": "data",
                      "SchemaMismatch": "data", "SpecError": "feature_spec", "BadRow": "row", "ModelError": "model",
                      "WarmStartError": "init_model", "StoreError": "CTR_S3_ENDPOINT", "NotServable": "model",
                      "OnnxTooLarge": "hash_buckets", "NoSpace": "path"}
    assert bad_inputs["ContractError"].value == ["VC_TASK_INDEX", "VC_PSERVER_HOSTS", "VC_TRAINER_HOSTS",
                                                 "CTR_JOB_ID", "CTR_GLOO_PORT", "CTR_OUTPUT_DIR", "CTR_DATA_DIR",
                                                 "CTR_PS_PORT"]   # every bad variable at once
    assert "invalid: CTR_PS_PORT='x' is not an integer" in bad_inputs["ContractError"].fix
    assert bad_inputs["SpecError"].value == str(tmp_path / "spec" / "spec.json")
    assert "colour='red': unknown key" in bad_inputs["SpecError"].fix


def test_what_callers_relied_on_stays(bad_inputs):
    spec_error, bad_row, no_space = bad_inputs["SpecError"], bad_inputs["BadRow"], bad_inputs["NoSpace"]
    assert [key for key, _value, _fix in spec_error.problems] == ["colour"]
    assert bad_row.reason == "not an integer: '12x'" and isinstance(bad_row, ValueError)
    assert isinstance(no_space, VolumeFull) and isinstance(no_space, OSError) and no_space.errno == errno.ENOSPC
    assert no_space.needed == 10 ** 6 and no_space.path.endswith("full")
    caught = pickle.loads(pickle.dumps(no_space))
    assert isinstance(caught, OSError) and caught.errno == errno.ENOSPC and caught.needed == 10 ** 6
    for name in ("ConfigError", "DataError", "ModelError", "StoreError", "WarmStartError"):
        assert isinstance(bad_inputs[name], ValueError), name   # ``except ValueError`` still catches


def test_an_unreachable_store_is_an_outage_not_bad_input(monkeypatch):
    """The real client against a port nobody listens on, its retries spent: a TransientError."""
    from ctr_model.store import Store, StoreConfig, StoreError, StoreUnreachable

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = Store(StoreConfig(endpoint=f"http://127.0.0.1:{port}", retry_s=1.0))
    exc = _raised(lambda: client.read_bytes("s3://b/x/schema.json"))
    assert isinstance(exc, StoreUnreachable) and not isinstance(exc, (BadInput, StoreError))
    assert family_of(exc) is TransientError and exit_code_of(exc) == EXIT_TRANSIENT
    assert "s3://b/x/schema.json" in str(exc) and "cannot reach the store" in str(exc)
    assert pickle.loads(pickle.dumps(exc)).uri == "s3://b/x/schema.json"


def test_peers_unreachable_is_a_failure_of_the_gang():
    from ctr_model.contract import RoleSpec
    from ctr_model.train.peers import PeersUnreachable

    spec = RoleSpec(role="trainer", index=1, job_id="g", pserver_hosts=("p",), trainer_hosts=("t", "u"),
                    ps_port=7000, ps_port_stride=0, gloo_port=7100, data_dir="d", output_dir="o")
    exc = PeersUnreachable(spec, "the pservers", ["p:7000"], 600)
    assert isinstance(exc, JobFailed) and family_of(exc) is JobFailed and exit_code_of(exc) == EXIT_FAILED
    assert exc.role == "trainer-1" and "did not accept connections within 600s (p:7000" in str(exc)


@pytest.mark.parametrize("code,family,exit_code", [(2, BadInput, 2), (75, TransientError, 75), (1, JobFailed, 1),
                                                   (137, JobFailed, 1), (None, JobFailed, 1)])
def test_a_job_that_failed_takes_the_family_of_its_roles_exit(code, family, exit_code):
    exc = TrainingJobFailed("j", "Failed", "why", role="trainer-0", exit_code=code)
    assert family_of_exit(code) is family and family_of(exc) is family and exit_code_of(exc) == exit_code
    assert family_of(ValueError("a bug")) is JobFailed and exit_code_of(ValueError("a bug")) == EXIT_FAILED
