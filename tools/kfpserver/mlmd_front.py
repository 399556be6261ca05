"""A gRPC front for the real ML Metadata store library: the ``metadata-grpc-service`` of the tier.

Why this exists: KFP 2.14.3's driver and launcher record every execution, artifact and context in
ML Metadata (MLMD) over gRPC (``ml_metadata.MetadataStoreService``). MLMD's server is a C++/Bazel
binary that nothing here can build or pull, but the ``ml-metadata`` wheel (1.17.1, the newest with a
Python 3.11 wheel) ships the store itself -- schema, queries, migrations, type checks -- as a pybind
library whose methods take a serialized request and return a serialized response. This front only
moves bytes: each gRPC call's request bytes go to the library method of the same name and its
response bytes (or its status code and message) go back. No message is parsed here, so the store
logic and the wire format are MLMD's own.

The library keeps one connection; calls are serialized with a lock (MLMD's own server runs one
transaction per call, too). Runs in its own virtual environment (the wheel pins protobuf < 5, which
the project's environment does not have): stdlib + ``grpcio`` + ``ml_metadata``.

Usage: ``python mlmd_front.py --port P [--sqlite FILE | --mysql HOST:PORT/DB]``; it prints
``mlmd front serving on 127.0.0.1:P`` once it accepts calls, and stops on SIGTERM.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from concurrent import futures
from typing import Any, Callable, List, Optional

__all__ = ["SERVICE", "connection_config", "grpc_status", "BytesFront", "main"]

LOG = logging.getLogger("mlmd_front")
SERVICE = "ml_metadata.MetadataStoreService"


def connection_config(sqlite: Optional[str], mysql: Optional[str]) -> Any:
    """The MLMD ``ConnectionConfig`` for a SQLite file or ``HOST:PORT/DB`` (user root, no password).

    Raises:
        ValueError: neither or both are given, or ``mysql`` is not ``HOST:PORT/DB``.
    """
    from ml_metadata.proto import metadata_store_pb2

    if bool(sqlite) == bool(mysql):
        raise ValueError("give exactly one of --sqlite FILE and --mysql HOST:PORT/DB")
    config = metadata_store_pb2.ConnectionConfig()
    if sqlite:
        config.sqlite.filename_uri = sqlite
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        return config
    hostport, _, database = str(mysql).partition("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not database:
        raise ValueError(f"--mysql {mysql!r}: expected HOST:PORT/DB, e.g. 127.0.0.1:3306/metadb")
    config.mysql.host, config.mysql.port, config.mysql.database = host, int(port), database
    config.mysql.user = "root"
    config.mysql.skip_db_creation = False
    return config


def grpc_status(code: int) -> Any:
    """The ``grpc.StatusCode`` of an MLMD status code (absl's codes, which are gRPC's by number)."""
    import grpc

    return next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)


class BytesFront:
    """Dispatches raw gRPC calls of :data:`SERVICE` to the library (see the module docstring).

    Args:
        library: the pybind module (``metadata_store_extension.metadata_store``) or anything with
            the same ``Method(store, request_bytes) -> [response_bytes, message, code]`` functions.
        store: the handle ``library.CreateMetadataStore`` returned.
        status_of: MLMD status code -> the gRPC status to abort with (default :func:`grpc_status`).
    """

    def __init__(self, library: Any, store: Any, status_of: Optional[Callable[[int], Any]] = None) -> None:
        self.library = library
        self.store = store
        self.status_of = status_of or grpc_status
        self.lock = threading.Lock()
        self.calls = 0

    def method(self, name: str) -> Optional[Callable[[bytes, Any], bytes]]:
        """The handler of RPC ``name``, or None when the library has no such method."""
        fn = getattr(self.library, name, None)
        if fn is None or not name[:1].isupper() or name == "CreateMetadataStore":
            return None

        def handle(request: bytes, context: Any) -> bytes:
            with self.lock:
                self.calls += 1
                response, message, code = fn(self.store, request)
            if code != 0:
                text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
                LOG.info("%s: status %s: %s", name, code, text)
                context.abort(self.status_of(code), text)
            return response

        return handle


def _serve(front: BytesFront, port: int, workers: int = 8) -> Any:
    import grpc

    class Handler(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            service, _, name = details.method.lstrip("/").partition("/")
            if service != SERVICE:
                return None
            handle = front.method(name)
            if handle is None:
                return None   # UNIMPLEMENTED, as MLMD's server answers for a method it lacks
            return grpc.unary_unary_rpc_method_handler(handle)   # bytes in, bytes out

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         options=[("grpc.max_receive_message_length", 100 << 20),
                                  ("grpc.max_send_message_length", 100 << 20)])
    server.add_generic_rpc_handlers((Handler(),))
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    server.start()
    return server


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="gRPC front for the ML Metadata store library.")
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--sqlite", help="SQLite database file (created if missing)")
    parser.add_argument("--mysql", help="HOST:PORT/DB of a MySQL/MariaDB server (user root)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from ml_metadata.metadata_store.pywrap.metadata_store_extension import metadata_store as library
    from ml_metadata.proto import metadata_store_pb2

    try:
        config = connection_config(args.sqlite, args.mysql)
    except ValueError as exc:
        parser.error(str(exc))
    migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
    store = library.CreateMetadataStore(config.SerializeToString(), migration.SerializeToString())
    front = BytesFront(library, store)
    server = _serve(front, args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    LOG.info("mlmd front serving on 127.0.0.1:%d (%s)", args.port,
             f"sqlite {args.sqlite}" if args.sqlite else f"mysql {args.mysql}")
    stop.wait()
    server.stop(grace=2).wait()
    LOG.info("stopped after %d calls", front.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
