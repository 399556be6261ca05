"""``tools/kfpserver/protogen.py``: the descriptors it reads out of protoc-generated ``*_pb2.py`` files.

The build regenerates KFP's ``api``/``kubernetes_platform`` Go code from these descriptors; here the
reader is checked on the installed kfp packages' real pb2 files against what protobuf registered.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "kfpserver"))

import protogen


@pytest.mark.parametrize("module", ["kfp.pipeline_spec.pipeline_spec_pb2",
                                    "kfp.kubernetes.kubernetes_executor_config_pb2"])
def test_reads_the_descriptor_protobuf_registers(module):
    import importlib

    pb2 = importlib.import_module(module)
    fdp = protogen.descriptor_from_pb2_source(inspect.getsource(pb2))
    assert fdp.SerializeToString() == pb2.DESCRIPTOR.serialized_pb
    assert fdp.name in protogen.PB2_FILES.values()
    assert fdp.options.go_package.startswith("github.com/kubeflow/pipelines/")


def test_refuses_a_file_that_is_not_protoc_output():
    with pytest.raises(ValueError, match="AddSerializedFile"):
        protogen.descriptor_from_pb2_source("DESCRIPTOR = None\n")
