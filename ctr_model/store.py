"""Object-store I/O: ``s3://bucket/prefix`` URIs through ``pyarrow.fs.S3FileSystem``.

Why: many clusters have no ReadWriteMany volume, but every KFP install has an object store. The
gang can then hand its data and results over S3 instead of a shared directory: trainers download
their own shards to local scratch, every role publishes what it wrote, and the next attempt resumes
from what is in the store. Paddle itself only ever sees local paths.

The client's settings, the URIs and the two error families (a refusal is a :class:`StoreError`, bad
input; an outage a :class:`StoreUnreachable`) are :mod:`ctr_model.store_config`'s, re-exported here.

Copies stream in fixed-size chunks (``COPY_CHUNK``), so memory stays bounded whatever the file size.
Every failure has a one-line message naming the URI and the fix; a store that stays unreachable
through the retries (:func:`retrying`) is a :class:`StoreUnreachable`.
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Mapping, Optional, Tuple, TypeVar
from urllib.parse import urlparse

from ctr_model.space import NoSpace, free_bytes, is_enospc
from ctr_model.store_config import (
    ADDRESSING,
    ENV_ACCESS_KEY,
    ENV_ADDRESSING,
    ENV_ENDPOINT,
    ENV_REGION,
    ENV_RETRY,
    ENV_SECRET_KEY,
    RETRY_BUDGET_S,
    StoreConfig,
    StoreError,
    StoreUnreachable,
    check_addressing,
    check_endpoint,
    is_uri,
    join,
    retry_budget_s,
    split_uri,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["StoreError", "StoreUnreachable", "StoreConfig", "check_endpoint", "check_addressing", "is_uri",
           "split_uri", "join", "Store", "COPY_CHUNK", "ENV_ENDPOINT", "ENV_REGION", "ENV_RETRY", "RETRY_BUDGET_S",
           "retrying", "is_transient", "retry_budget_s", "copy_stream", "ENV_ADDRESSING", "ENV_ACCESS_KEY",
           "ENV_SECRET_KEY", "ADDRESSING", "UPLOAD_THREADS", "filesystem_for"]

#: Bytes per read/write when copying between the store and local files.
COPY_CHUNK = 4 << 20
#: Files uploaded at once (memory stays below UPLOAD_THREADS x COPY_CHUNK plus the SDK's buffers).
UPLOAD_THREADS = 4
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.5, 8.0
#: Words of pyarrow's (AWS SDK's) messages for a store that is down, restarting or overloaded.
_TRANSIENT = ("couldn't connect", "could not connect", "connection refused", "connection reset",
              "connection was reset", "timeout was reached", "timed out", "curl error",
              "network connection", "failed to connect", "broken pipe", "empty reply",
              "http status 500", "http status 502", "http status 503", "http status 504",
              "internalerror", "serviceunavailable", "slowdown", "service unavailable",
              "unexpected eof", "recv failure", "send failure", "network_connection",
              "failed to flush response stream",   # a GET cut off while SeaweedFS came back up
              "internal_failure", "internal error")  # SeaweedFS's UploadPart just after a restart


def is_transient(exc: BaseException) -> bool:
    """Whether a store error may pass when retried (down, restarting, overloaded), not a refusal."""
    if not isinstance(exc, OSError) or isinstance(exc, FileNotFoundError) or is_enospc(exc):
        return False
    low = " ".join(str(exc).split()).lower()
    return any(word in low for word in _TRANSIENT)


def retrying(what: str, call: Callable[[], T], budget_s: Optional[float] = None) -> T:
    """``call()``, retried with doubling backoff (0.5 s up to 8 s) while the store is unreachable
    or answers 5xx, for at most ``budget_s`` seconds; then its last error is raised.

    Only whole idempotent operations go through here (one object's PUT from its start, one GET), so
    a retry never leaves half an object: a store sees the complete object or none.
    """
    budget = retry_budget_s() if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delay, failures = _BACKOFF_FIRST_S, 0
    while True:
        try:
            result = call()
        except OSError as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                if failures:
                    log.warning(f"store: {what}: giving up after {failures + 1} attempts in "
                                f"{budget - (deadline - time.monotonic()):.1f}s (budget {budget:g}s, {ENV_RETRY})")
                raise
            failures += 1
            log.warning(f"store: {what}: {' '.join(str(exc).split())[:160]}; retry {failures} in {delay:g}s")
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)
            continue
        if failures:
            log.info(f"store: {what}: succeeded after {failures} retries")
        return result


def _explain(exc: BaseException, uri: str, config: StoreConfig, field: str = "uri") -> Exception:
    """One line naming the URI and the fix, from pyarrow's (AWS SDK's) multi-line message: a
    :class:`StoreUnreachable` for a store that is down or failing (the retries are spent by now), a
    :class:`StoreError` for one that refused."""
    text = " ".join(str(exc).split())
    low = text.lower()
    where = config.endpoint or "AWS S3"
    if any(s in low for s in ("invalidaccesskeyid", "signaturedoesnotmatch", "accessdenied",
                              "access_denied", "access denied", "http status 403", "forbidden")):
        why = (f"the store at {where} refused the credentials: check {ENV_ACCESS_KEY}/"
               f"{ENV_SECRET_KEY} (the Secret's keys) and the identity's permissions")
    elif "nosuchbucket" in low or "bucket does not exist" in low or "bucket not found" in low:
        why = f"the bucket does not exist at {where}: create it or fix the URI"
    elif any(s in low for s in ("couldn't connect", "could not connect", "connection refused",
                                "timeout was reached", "timed out", "resolve host", "curl error",
                                "network connection", "failed to connect")):
        return StoreUnreachable(uri, f"cannot reach the store at {where}: check {ENV_ENDPOINT} (scheme, "
                                     f"host, port) and that the server is up")
    elif isinstance(exc, FileNotFoundError):
        why = "no such object or prefix: check the URI (a prep output has train/schema.json)"
    elif is_transient(exc):
        return StoreUnreachable(uri, f"the store at {where} kept failing: {text[:300]}; check that it is up "
                                     f"and not overloaded")
    else:
        why = f"the store at {where} failed: {text[:300]}"
    return StoreError(field, uri, why)


class Store:
    """A thin client over one S3 filesystem; every method takes full ``s3://`` URIs."""

    def __init__(self, config: StoreConfig):
        from pyarrow import fs as pafs

        self.config = config
        kwargs = dict(region=config.region, connect_timeout=config.connect_timeout_s,
                      request_timeout=config.request_timeout_s,
                      retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
                      force_virtual_addressing=config.addressing == "virtual")
        if config.endpoint:
            parsed = urlparse(config.endpoint)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
        if config.access_key:
            kwargs.update(access_key=config.access_key, secret_key=config.secret_key)
        else:
            kwargs.update(anonymous=True)
        self.fs = pafs.S3FileSystem(**kwargs)
        self.local = pafs.LocalFileSystem()

    @staticmethod
    def _path(uri: str) -> str:
        bucket, key = split_uri(uri)
        return f"{bucket}/{key}" if key else bucket

    # -------------------------------------------------------------------------------- checks
    def check_prefix(self, uri: str, field: str = "uri") -> None:
        """Fail fast, with one line, unless the bucket is reachable with these credentials and
        something exists under ``uri``; ``field`` is the caller's name for ``uri`` in the error.

        Raises:
            StoreError: naming ``field``: refused credentials, no such bucket, nothing there.
            StoreUnreachable: the store stayed unreachable through the retries.
        """
        from pyarrow import fs as pafs

        bucket, key = split_uri(uri)
        try:
            info = self.fs.get_file_info(bucket)
        except OSError as exc:
            raise _explain(exc, uri, self.config, field) from None
        if info.type == pafs.FileType.NotFound:
            raise StoreError(field, uri, f"bucket {bucket!r} does not exist at "
                                         f"{self.config.endpoint or 'AWS S3'}: create it or fix the URI")
        if key and not self._exists(uri, field):
            raise StoreError(field, uri, "nothing under this prefix: check the URI (the output of "
                                         "`ctr-volcano prep`, uploaded as is)")

    def check_bucket(self, uri: str, field: str = "uri") -> None:
        """Fail fast unless the bucket of ``uri`` exists and the credentials may list it (errors as
        :meth:`check_prefix`'s)."""
        from pyarrow import fs as pafs

        bucket, _ = split_uri(uri)
        try:
            info = self.fs.get_file_info(bucket)
            if info.type != pafs.FileType.NotFound:
                self.fs.get_file_info(pafs.FileSelector(bucket, recursive=False))
        except OSError as exc:
            raise _explain(exc, uri, self.config, field) from None
        if info.type == pafs.FileType.NotFound:
            raise StoreError(field, uri, f"bucket {bucket!r} does not exist at "
                                         f"{self.config.endpoint or 'AWS S3'}: create it or fix the URI")

    # ---------------------------------------------------------------------------------- reads
    def exists(self, uri: str) -> bool:
        return self._exists(uri, "uri")

    def _exists(self, uri: str, field: str) -> bool:
        from pyarrow import fs as pafs

        try:
            info = self._info(self.fs, self._path(uri))
        except OSError as exc:
            raise _explain(exc, uri, self.config, field) from None
        return info.type != pafs.FileType.NotFound

    def list(self, uri: str, recursive: bool = False) -> List[Tuple[str, bool]]:
        """``[(relative name, is_dir), ...]`` under ``uri``, sorted; empty when nothing is there."""
        from pyarrow import fs as pafs

        base = self._path(uri).rstrip("/")
        try:
            infos = self._info(self.fs, pafs.FileSelector(base, recursive=recursive,
                                                            allow_not_found=True))
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None
        out = [(i.path[len(base) + 1:], i.type == pafs.FileType.Directory) for i in infos]
        return sorted(out)

    def read_bytes(self, uri: str) -> Optional[bytes]:
        """A small object's bytes, or ``None`` when it does not exist."""
        def get() -> bytes:
            with self.fs.open_input_stream(self._path(uri), compression=None) as fh:
                return fh.read()

        try:
            return retrying(f"get {uri}", get, self.config.retry_s)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None

    def mtime(self, uri: str) -> Optional[float]:
        """An object's modification time (seconds since the epoch), or ``None``."""
        from pyarrow import fs as pafs

        try:
            info = self._info(self.fs, self._path(uri))
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            return None
        return info.mtime.timestamp()

    # --------------------------------------------------------------------------------- writes
    def write_bytes(self, uri: str, data: bytes) -> None:
        """Put one small object (a single PUT: readers see all of it or nothing)."""
        def put() -> None:
            with self.fs.open_output_stream(self._path(uri), compression=None) as fh:
                fh.write(data)

        try:
            retrying(f"put {uri}", put, self.config.retry_s)
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None

    def _copy(self, src_fs, src: str, dst_fs, dst: str) -> None:
        """:func:`copy_stream`, retried whole while the store is down (see :func:`retrying`)."""
        retrying(f"copy {src} -> {dst}", lambda: copy_stream(src_fs, src, dst_fs, dst), self.config.retry_s)

    def _info(self, fs, what: Any) -> Any:
        """``fs.get_file_info(what)``, retried while the store restarts (local files: once)."""
        if fs is self.local:
            return fs.get_file_info(what)
        return retrying(f"list {getattr(what, 'base_dir', what)}", lambda: fs.get_file_info(what),
                        self.config.retry_s)

    def _tree(self, fs, base: str) -> List[str]:
        """Relative paths of the files under ``base`` (``[""]`` when ``base`` is a file)."""
        from pyarrow import fs as pafs

        info = self._info(fs, base)
        if info.type == pafs.FileType.File:
            return [""]
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(base)
        infos = self._info(fs, pafs.FileSelector(base, recursive=True))
        return sorted(i.path[len(base.rstrip("/")) + 1:] for i in infos if i.type == pafs.FileType.File)

    def download(self, uri: str, local_path: str) -> None:
        """Stream one object, or every object under a prefix, to ``local_path``."""
        src = self._path(uri).rstrip("/")
        dst = os.path.abspath(local_path)
        try:
            for rel in self._tree(self.fs, src):
                target = os.path.join(dst, rel) if rel else dst
                os.makedirs(os.path.dirname(target), exist_ok=True)
                self._copy(self.fs, f"{src}/{rel}" if rel else src, self.local, target)
        except OSError as exc:
            if is_enospc(exc):   # the local disk, not the store: name it and the room needed
                raise NoSpace(dst, self._bytes(src), free_bytes(dst)) from None
            raise _explain(exc, uri, self.config) from None

    def _bytes(self, path: str) -> int:
        """Bytes of the object or the objects under ``path`` (a store path, no scheme)."""
        from pyarrow import fs as pafs

        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            return int(info.size or 0)
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sum(int(i.size or 0) for i in infos if i.type == pafs.FileType.File)

    def upload(self, local_path: str, uri: str) -> None:
        """Stream one file, or a directory tree, from ``local_path`` to ``uri``."""
        src = os.path.abspath(local_path)
        dst = self._path(uri).rstrip("/")
        try:
            rels = self._tree(self.local, src)
            # a checkpoint is many small files: a few PUTs in flight hide the per-request latency
            with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(rels) or 1)) as pool:
                for future in [pool.submit(self._copy, self.local, os.path.join(src, rel) if rel else src,
                                           self.fs, f"{dst}/{rel}" if rel else dst) for rel in rels]:
                    future.result()
        except FileNotFoundError as exc:
            raise StoreError("local_path", local_path, f"nothing to upload ({exc})") from None
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None

    def delete(self, uri: str) -> None:
        """Delete one object or everything under a prefix (missing is fine)."""
        from pyarrow import fs as pafs

        path = self._path(uri)
        try:
            info = self._info(self.fs, path)
            if info.type == pafs.FileType.File:
                retrying(f"delete {uri}", lambda: self.fs.delete_file(path), self.config.retry_s)
            elif info.type == pafs.FileType.Directory:
                retrying(f"delete {uri}", lambda: self.fs.delete_dir(path), self.config.retry_s)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _explain(exc, uri, self.config) from None


def copy_stream(src_fs, src: str, dst_fs, dst: str) -> None:
    """Stream one file between pyarrow filesystems in ``COPY_CHUNK`` pieces; closes the output explicitly, so an upload
    the server refuses raises here (a stream closed by its destructor only logs the error).
    Bytes as they are: pyarrow's default ``compression="detect"`` would gunzip every ``.gz`` (the
    sparse-table files) on read and gzip it again on write -- at a few MB/s, most of what the
    object store cost a 1M-row run (bench/train.py --store s3)."""
    with src_fs.open_input_stream(src, compression=None) as fin:
        out = dst_fs.open_output_stream(dst, compression=None)
        try:
            while True:
                chunk = fin.read(COPY_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
        except BaseException:
            try:
                out.close()
            except OSError:
                pass
            raise
        out.close()


def filesystem_for(location: str, env: Optional[Mapping[str, str]] = None,
                   field: str = "location") -> Tuple[Any, str]:
    """The pyarrow filesystem holding ``location``, and its path there.

    A local path is itself; an ``s3://`` (or KFP's ``minio://``) URI is on the store the ``CTR_S3_*``
    variables and the AWS keys of ``env`` (default: this process's) name, the same store every
    :class:`Store` reaches (pyarrow's own ``FileSystem.from_uri`` would ignore ``CTR_S3_ENDPOINT``
    and go to AWS); any other scheme pyarrow knows (``gs://``, ``hdfs://``) is pyarrow's.

    Raises:
        StoreError: bad store settings (naming the variable), or a scheme pyarrow cannot open
            (naming ``field``, the caller's name for ``location``, and the URI).
    """
    from pyarrow import fs as pafs

    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    scheme, rest = location.split("://", 1)
    if scheme in ("s3", "minio"):
        return Store(StoreConfig.from_env(env)).fs, Store._path("s3://" + rest)
    try:
        return pafs.FileSystem.from_uri(location)
    except Exception as exc:  # pyarrow raises ArrowInvalid/ValueError/OSError for unknown schemes
        raise StoreError(field, location, f"cannot open it ({exc}); use a local path or an s3://, "
                                               f"gs:// or hdfs:// URI") from None

