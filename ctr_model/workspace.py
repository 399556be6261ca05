"""Where a gang's roles meet: a shared directory, or an object-store prefix plus local scratch.

The training code writes everything (checkpoints, model, metrics, coordination files) under
:attr:`Workspace.root`, a local path, and then tells the workspace what it wrote:

* :class:`SharedDirWorkspace` (a volume every role mounts): ``root`` is the output directory itself;
  publishing and fetching are no-ops, small files are plain files.
* :class:`StoreWorkspace` (``CTR_OUTPUT_DIR=s3://...``): ``root`` is the *relative* path ``out`` under
  the role's own scratch directory (the process's working directory). Paddle sends checkpoint and
  model paths from trainer 0 to the pservers verbatim, so a relative path lands in each role's own
  scratch, on a cluster and on one machine alike. What a role writes reaches the store only when it
  calls :meth:`publish`; pservers, whose writes trainer 0 triggers over RPC, publish on request
  (:meth:`StoreWorkspace.request_publish` / :class:`PublishResponder`), and trainer 0 waits for
  every pserver's acknowledgement before it marks a checkpoint complete.

Input data is staged the same way: :func:`stage_split` downloads one trainer's own shards.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from typing import Callable, List, Mapping, Optional, Sequence

from ctr_model import atomic
from ctr_model import store as s3

logger = logging.getLogger(__name__)

__all__ = ["Workspace", "SharedDirWorkspace", "StoreWorkspace", "PublishResponder",
           "open_workspace", "remote_split", "stage_split", "GANG_DIR", "PUBLISH_DIR", "STOP_FILE",
           "LOCAL_ROOT", "write_stop", "stopped_by_trainer0", "stop_written_since"]

#: Per-run coordination files inside the output (nonces, progress, the stop file, publish requests).
GANG_DIR = "_gang"
#: Coordination objects of the publish protocol, under the gang directory.
PUBLISH_DIR = f"{GANG_DIR}/publish"
#: Written by trainer 0 once training is done: the nonces of the pservers it stopped, one a line.
STOP_FILE = f"{GANG_DIR}/stop"
#: The output's local mirror, relative to the role's scratch (= working) directory.
LOCAL_ROOT = "out"


class Workspace:
    """The interface both kinds implement; paths are relative to the output root."""

    #: local directory the role writes into (what Paddle is given)
    root: str
    #: where the outputs end up (a local directory or an ``s3://`` URI)
    location: str

    def local(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def publish(self, rel: str) -> None:
        """Make the local file or tree ``rel`` visible to every role and to later attempts."""

    def fetch(self, rel: str) -> bool:
        """Bring ``rel`` (file or tree) from the shared output into the local root; ``False`` if absent."""
        return os.path.exists(self.local(rel))

    def read_text(self, rel: str) -> Optional[str]:
        raise NotImplementedError

    def write_text(self, rel: str, text: str) -> None:
        raise NotImplementedError

    def mtime(self, rel: str) -> Optional[float]:
        raise NotImplementedError

    def remove(self, rel: str) -> None:
        raise NotImplementedError

    def request_publish(self, rel: str, roles: Sequence[str], timeout_s: float = 600.0) -> None:
        """Ask ``roles`` to publish their local ``rel`` and wait until they have (at most
        ``timeout_s``; a shared directory needs no publishing)."""


class SharedDirWorkspace(Workspace):
    """Every role sees the same directory."""

    def __init__(self, output_dir: str):
        self.root = self.location = output_dir

    def read_text(self, rel: str) -> Optional[str]:
        try:
            with open(self.local(rel), encoding="utf-8") as fh:
                return fh.read()
        except OSError:
            return None

    def write_text(self, rel: str, text: str) -> None:
        path = self.local(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic.write_text(path, text)

    def mtime(self, rel: str) -> Optional[float]:
        try:
            return os.path.getmtime(self.local(rel))
        except OSError:
            return None

    def remove(self, rel: str) -> None:
        path = self.local(rel)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.remove(path)


class StoreWorkspace(Workspace):
    """Outputs under an ``s3://`` prefix; each role works in its own local scratch copy."""

    def __init__(self, uri: str, client: "s3.Store", root: str = LOCAL_ROOT):
        self.location = uri.rstrip("/")
        self.store = client
        self.root = root

    def uri(self, rel: str) -> str:
        return s3.join(self.location, rel)

    def publish(self, rel: str) -> None:
        path = self.local(rel)
        if os.path.exists(path):
            self.store.upload(path, self.uri(rel))

    def fetch(self, rel: str) -> bool:
        if not self.store.exists(self.uri(rel)):
            return False
        self.store.download(self.uri(rel), self.local(rel))
        return True

    def read_text(self, rel: str) -> Optional[str]:
        data = self.store.read_bytes(self.uri(rel))
        return None if data is None else data.decode("utf-8")

    def write_text(self, rel: str, text: str) -> None:
        path = self.local(rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        self.store.write_bytes(self.uri(rel), text.encode("utf-8"))

    def mtime(self, rel: str) -> Optional[float]:
        return self.store.mtime(self.uri(rel))

    def remove(self, rel: str) -> None:
        shutil.rmtree(self.local(rel), ignore_errors=True)
        self.store.delete(self.uri(rel))

    def list(self, rel: str) -> List[str]:
        return [name for name, _ in self.store.list(self.uri(rel))]

    def request_publish(self, rel: str, roles: Sequence[str], timeout_s: float = 600.0) -> None:
        token = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
        self.store.write_bytes(self.uri(f"{PUBLISH_DIR}/{token}.json"),
                               json.dumps({"path": rel}).encode())
        waiting = set(roles)
        deadline = time.monotonic() + timeout_s
        while waiting:
            names = {n for n, _ in self.store.list(self.uri(PUBLISH_DIR))}
            waiting = {r for r in waiting if f"{token}.{r}.done" not in names}
            failed = sorted(r for r in roles if f"{token}.{r}.failed" in names)
            if failed:
                reason = self.read_text(f"{PUBLISH_DIR}/{token}.{failed[0]}.failed")
                raise RuntimeError(f"{failed[0]} could not upload {rel} to {self.uri(rel)}: {reason}")
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sorted(waiting)} did not upload {rel} to {self.uri(rel)} "
                                   f"within {timeout_s:.0f}s (CTR_PUBLISH_TIMEOUT_S); see their logs")
            time.sleep(0.05)


class PublishResponder:
    """A pserver's helper: uploads what trainer 0 asks for, then acknowledges.

    A separate process, because a pserver's main thread blocks inside Paddle's ``run_server``
    without releasing the GIL, which starves any Python thread of the pserver. It runs
    ``python -m ctr_model.workspace`` in the same working directory and environment (so it sees the
    pserver's scratch and the store's credentials), and exits when the pserver does. Requests
    present when it starts belong to earlier attempts and are ignored.
    """

    def __init__(self, workspace: StoreWorkspace, role: str, interval_s: float = 0.1):
        self.ws, self.role, self.interval_s = workspace, role, interval_s
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        import sys

        seen = sorted(n for n in self.ws.list(PUBLISH_DIR) if n.endswith(".json"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ctr_model.workspace", "--uri", self.ws.location, "--root",
             self.ws.root, "--role", self.role, "--parent", str(os.getpid()),
             "--interval", str(self.interval_s), "--seen", ",".join(seen)],
            stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _respond(ws: StoreWorkspace, role: str, parent: int, interval_s: float, seen: set) -> int:
    """The responder's loop (see :class:`PublishResponder`)."""
    while os.getppid() == parent:
        time.sleep(interval_s)
        try:
            names = [n for n in ws.list(PUBLISH_DIR) if n.endswith(".json")]
        except Exception as exc:   # a transient store error: try again on the next tick
            logger.warning("%s: listing publish requests failed: %s", role, exc)
            continue
        for name in sorted(set(names) - seen):
            seen.add(name)
            token = name[:-len(".json")]
            try:
                rel = json.loads(ws.read_text(f"{PUBLISH_DIR}/{name}") or "{}")["path"]
                t = time.time()
                ws.publish(rel)
                ws.store.write_bytes(ws.uri(f"{PUBLISH_DIR}/{token}.{role}.done"), b"ok")
                logger.info("%s: uploaded %s to %s in %.1fs", role, rel, ws.uri(rel), time.time() - t)
            except Exception as exc:
                ws.store.write_bytes(ws.uri(f"{PUBLISH_DIR}/{token}.{role}.failed"), str(exc).encode())
    return 0


def write_stop(ws: Workspace, nonces: Sequence[Optional[str]]) -> None:
    """Trainer 0: record that it stops the pservers whose ``nonces`` are given (missing ones skipped)."""
    ws.write_text(STOP_FILE, "\n".join(n.strip() for n in nonces if n) + "\n")


def stopped_by_trainer0(ws: Workspace, nonce: str) -> bool:
    """A pserver whose server loop returned: was it trainer 0 that stopped this very pserver?"""
    stop = ws.read_text(STOP_FILE)
    return stop is not None and nonce in stop.split()


def stop_written_since(ws: Workspace, since: float) -> bool:
    """The supervisor: did trainer 0 write the stop file at or after ``since`` (this attempt's start)?"""
    try:
        mtime = ws.mtime(STOP_FILE)
    except (OSError, ValueError, s3.StoreUnreachable):   # unreadable now: asked again next poll
        return False
    return mtime is not None and mtime >= since


def open_workspace(output_dir: str, env: Optional[Mapping[str, str]] = None,
                   store: Optional["s3.StoreConfig"] = None) -> Workspace:
    """The workspace for ``CTR_OUTPUT_DIR``: a store prefix for ``s3://``, else a shared dir.

    Args:
        output_dir: a local directory or an ``s3://`` URI.
        env: the store's variables (:mod:`ctr_model.store`); default ``os.environ``.
        store: the store's settings, read already (a role's :attr:`RoleSpec.store`); ``env`` is then
            not read.
    """
    if s3.is_uri(output_dir):
        client = s3.Store(store or s3.StoreConfig.from_env(env))
        client.check_bucket(output_dir)
        return StoreWorkspace(output_dir, client)
    return SharedDirWorkspace(output_dir)


def remote_split(client: "s3.Store", data_uri: str, split: str):
    """``(split URI, sorted shard names, schema document)`` of a prep output in the store, or
    ``None`` if it has no such split (``test`` is optional; a split URI itself is accepted for
    ``train``). Only listings and ``schema.json`` are read.

    Raises:
        StoreError: refused credentials, missing bucket or empty prefix.
        StoreUnreachable: the store stayed unreachable through the retries.
        DataError, SchemaMismatch: the prefix is not a prep output, its schema is not this code's,
            or the split has no shards.
    """
    from ctr_model.data import DataError
    from ctr_model.features import SCHEMA_FILE, check_schema_doc, is_shard_name

    client.check_prefix(data_uri)
    candidate = s3.join(data_uri, split)
    if client.exists(s3.join(candidate, SCHEMA_FILE)):
        src = candidate
    elif split == "train" and client.exists(s3.join(data_uri, SCHEMA_FILE)):
        src = data_uri
    elif split == "train":
        raise DataError("data", data_uri, f"neither {split}/{SCHEMA_FILE} nor {SCHEMA_FILE} is there: pass "
                                          f"the output of `ctr-volcano prep` (uploaded as is)")
    else:
        return None
    raw = client.read_bytes(s3.join(src, SCHEMA_FILE)) or b""
    try:
        schema = json.loads(raw)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise DataError("data", f"{src}/{SCHEMA_FILE}", "unreadable (not a JSON object): re-run "
                                                        "`ctr-volcano prep` and upload its output as is")
    check_schema_doc(schema, src, any_spec=True)
    remote = sorted(n for n, is_dir in client.list(src) if not is_dir and is_shard_name(n))
    if not remote:
        raise DataError("data", src, "no part-*.parquet shards: re-run `ctr-volcano prep`")
    return src, remote, schema


def stage_split(client: "s3.Store", data_uri: str, split: str, local_dir: str,
                select: Callable[[List[str]], List[str]]):
    """Check ``split`` of a prep output in the store and plan the download of the shards ``select``
    picks; returns ``(SplitInfo of the local copy, shards in the store, download)`` or ``None``
    when the prep output has no such split.

    ``download()`` streams the selected shards (bounded memory) and returns their local paths; it is
    separate so a trainer can overlap it with Paddle's start-up. A prefix that is not a prep output,
    or of another schema version, is refused before anything is downloaded.
    """
    from ctr_model.data import SplitInfo, positive_rate, trainable_features
    from ctr_model.features import SCHEMA_FILE

    found = remote_split(client, data_uri, split)
    if found is None:
        return None
    src, remote, schema = found
    chosen = select(remote)
    os.makedirs(local_dir, exist_ok=True)
    with open(os.path.join(local_dir, SCHEMA_FILE), "w", encoding="utf-8") as fh:
        json.dump(schema, fh)
    files = tuple(os.path.join(local_dir, name) for name in chosen)

    def download() -> List[str]:
        for name, path in zip(chosen, files):
            client.download(s3.join(src, name), path)
        return list(files)

    info = SplitInfo(path=src, hash_buckets=int(schema.get("hash_buckets", 0)),
                     rows=int(schema.get("rows", -1)), files=files,
                     features=trainable_features(schema, src), positive_rate=positive_rate(schema))
    return info, len(remote), download


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ctr_model.workspace``: a pserver's publish responder (not for users)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ctr_model.workspace")
    parser.add_argument("--uri", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--seen", default="")
    args = parser.parse_args(argv)
    from ctr_model.contract import parse_role_env
    from ctr_model.errors import exit_code_of
    from ctr_model.logs import setup_logging

    setup_logging()
    try:
        store = parse_role_env().store   # the pserver's environment, read by the contract as the pserver's was
        assert store is not None, "the responder runs for an object-store output only"
        ws = StoreWorkspace(args.uri, s3.Store(store), root=args.root)
    except Exception as exc:
        logger.error("%s: error: publish responder: %s", args.role, exc)
        return exit_code_of(exc)
    return _respond(ws, args.role, args.parent, args.interval, set(filter(None, args.seen.split(","))))


if __name__ == "__main__":
    import sys

    sys.exit(main())
