"""Regenerate the Go code of KFP's ``api`` and ``kubernetes_platform`` modules for one KFP release.

Why: the KFP API server's own module (``github.com/kubeflow/pipelines``) is served by the Go module
proxy at the release commit, but its two in-tree sub-modules are not (KFP's go.mod replaces them
with ``./api`` and ``./kubernetes_platform``; an importer gets the older pseudo-versions KFP's go.mod
lists, which lack fields the 2.14.3 server uses). Both sub-modules hold nothing but protoc-gen-go
output. The same release's Python packages on PyPI (``kfp-pipeline-spec``, ``kfp-kubernetes``) carry
the compiled ``FileDescriptorProto`` of each ``.proto`` file, so this script feeds those descriptors
to ``protoc-gen-go`` (built from the protobuf module of the server's own build graph) as a
``CodeGeneratorRequest`` -- protoc's plugin protocol -- and writes the generated files. No source is
copied from anywhere; comments of the .proto files are absent (descriptors carry none), and the
``json_name`` of each field, which protoc fills in and the pb2 files omit, is filled in the same way,
so the descriptor embedded in the Go code matches the upstream file's byte for byte.

The serialized descriptors are read out of the wheels' ``*_pb2.py`` files with :mod:`ast` (not
imported: the installed kfp has other versions of the same files registered).

Usage: python protogen.py --protoc-gen-go BIN --out DIR WHEEL...
  writes DIR/<go import path>/<file>.pb.go for pipeline_spec.proto and kubernetes_executor_config.proto.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

from google.protobuf import any_pb2, descriptor_pb2, duration_pb2, struct_pb2
from google.protobuf.compiler import plugin_pb2
from google.rpc import status_pb2

__all__ = ["descriptor_from_pb2_source", "generate"]

#: pb2 modules inside the wheels -> the .proto file they were compiled from.
PB2_FILES = {
    "kfp/pipeline_spec/pipeline_spec_pb2.py": "pipeline_spec.proto",
    "kfp/kubernetes/kubernetes_executor_config_pb2.py": "kubernetes_executor_config.proto",
}


def descriptor_from_pb2_source(source: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` a protoc-generated ``*_pb2.py`` registers (``AddSerializedFile(b'...')``)."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args):
            return descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(node.args[0]))
    raise ValueError("no AddSerializedFile(b'...') call: not a protoc-generated *_pb2.py")


def json_name(field_name: str) -> str:
    """protoc's default JSON name of a field (``ToJsonName``): drop each ``_``, capitalise what follows."""
    out, upper = [], False
    for ch in field_name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def _with_json_names(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """Fill ``json_name`` as protoc does before it calls a plugin (Python's pb2 files omit it), so the
    descriptor embedded in the Go code is byte-for-byte the one protoc would have passed."""
    def fill(messages) -> None:
        for msg in messages:
            for f in list(msg.field) + list(msg.extension):
                if not f.HasField("json_name"):
                    f.json_name = json_name(f.name)
            fill(msg.nested_type)

    fill(fdp.message_type)
    for f in fdp.extension:
        if not f.HasField("json_name"):
            f.json_name = json_name(f.name)
    return fdp


def _well_known() -> List[descriptor_pb2.FileDescriptorProto]:
    out = []
    for module in (any_pb2, duration_pb2, struct_pb2, status_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        out.append(fdp)
    return out


def generate(wheels: List[Path], protoc_gen_go: Path, out: Path) -> List[Path]:
    """Generate Go code for every descriptor in :data:`PB2_FILES` found in ``wheels``; returns the files written."""
    found: Dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for member, proto in PB2_FILES.items():
                if member in zf.namelist():
                    fdp = descriptor_from_pb2_source(zf.read(member).decode("utf-8"))
                    if fdp.name != proto:
                        raise ValueError(f"{wheel}:{member} describes {fdp.name}, expected {proto}")
                    found[proto] = _with_json_names(fdp)
    missing = sorted(set(PB2_FILES.values()) - set(found))
    if missing:
        raise ValueError(f"descriptors {missing} not found in {[str(w) for w in wheels]}")
    request = plugin_pb2.CodeGeneratorRequest()
    request.file_to_generate.extend(PB2_FILES.values())
    # Dependencies before dependants, as protoc sends them.
    request.proto_file.extend(_with_json_names(f) for f in _well_known())
    request.proto_file.extend(found[p] for p in PB2_FILES.values())
    proc = subprocess.run([str(protoc_gen_go)], input=request.SerializeToString(), capture_output=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{protoc_gen_go} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    response = plugin_pb2.CodeGeneratorResponse.FromString(proc.stdout)
    if response.error:
        raise RuntimeError(f"protoc-gen-go: {response.error}")
    written = []
    for f in response.file:
        dst = out / f.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(f.content)
        written.append(dst)
    return written


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protoc-gen-go", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("wheels", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for path in generate(args.wheels, args.protoc_gen_go, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
