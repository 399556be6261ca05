"""The MLMD gRPC front's dispatch (``tools/kfpserver/mlmd_front.py``) with a stand-in library: bytes
pass through untouched, a library status aborts the call with its message, a method the library
lacks is left unimplemented. The real library (and grpcio) behind it run in the cluster tier."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "kfpserver"))

import mlmd_front


class _Library:
    """The library's calling convention: ``Method(store, request_bytes) -> [response, message, code]``."""

    def __init__(self):
        self.seen = []

    def PutContexts(self, store, request):
        self.seen.append((store, request))
        return [b"resp:" + request, b"", 0]

    def GetContextByTypeAndName(self, store, request):
        return [b"", b"Given node already exists", 6]

    def CreateMetadataStore(self, config, migration):
        raise AssertionError("never served as an RPC")


class _Aborted(Exception):
    pass


class _Context:
    def abort(self, code, details):
        raise _Aborted(code, details)


def test_bytes_pass_through_to_the_method_of_the_same_name():
    lib = _Library()
    front = mlmd_front.BytesFront(lib, store="S")
    assert front.method("PutContexts")(b"\x0a\x01x", _Context()) == b"resp:\x0a\x01x"
    assert lib.seen == [("S", b"\x0a\x01x")] and front.calls == 1


def test_unknown_methods_and_the_constructor_are_not_served():
    front = mlmd_front.BytesFront(_Library(), store="S")
    assert front.method("GetLineageGraph") is None
    assert front.method("CreateMetadataStore") is None
    assert front.method("seen") is None


def test_a_library_status_aborts_the_call_with_that_status_and_message():
    front = mlmd_front.BytesFront(_Library(), store="S", status_of=lambda code: f"status-{code}")
    with pytest.raises(_Aborted) as info:
        front.method("GetContextByTypeAndName")(b"", _Context())
    assert info.value.args == ("status-6", "Given node already exists")
