"""``python -m ctr_volcano.serving.server --model DIR``: the KServe model server on one port.

KServe's ModelServer binds 0.0.0.0 itself; here the REST server is handed a socket already bound to
``--host`` (127.0.0.1 unless asked), so a local ``ctr-volcano serve`` is not reachable from the
network; the image passes ``--host 0.0.0.0``. gRPC is off (it would bind ``[::]``). Plain JSON infer
requests are answered by :mod:`.json_infer`'s route, every other request by KServe's.
"""
from __future__ import annotations

import argparse
import logging
import socket
from typing import Any, List, Optional

__all__ = ["serve", "main"]

_log = logging.getLogger(__name__)


def serve(model_dir: str, host: str = "127.0.0.1", port: int = 8080, request_log: Optional[str] = None,
          log_sample: float = 1.0) -> None:
    """Load the model and serve V2 on ``host:port`` until SIGTERM/SIGINT; with ``request_log``, append a
    ``log_sample`` share of the scored rows to it (:mod:`.request_log`)."""
    from kserve import ModelServer

    from ctr_volcano.serving.kserve_model import CtrModel
    from ctr_volcano.serving.request_log import RequestLog

    model = CtrModel(model_dir, request_log=RequestLog(request_log, log_sample) if request_log else None)
    model.load()
    server = ModelServer(http_port=port, enable_grpc=False, workers=1)
    server.register_model(model)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    _log.info("serving %s as model %r on http://%s:%d (V2: /v2/health/ready, /v2/models/%s/infer)%s",
              model_dir, model.name, host, sock.getsockname()[1], model.name,
              f"; logging {log_sample:g} of the rows to {request_log}" if request_log else "")
    rest = _rest_server(model, server.dataplane, server.model_repository_extension, port)
    rest.run(sockets=[sock])


def _rest_server(model: Any, dataplane: Any, model_repository_extension: Any, port: int) -> Any:
    """KServe's REST server on its FastAPI app, with :mod:`.json_infer`'s route for ``model`` ahead of
    KServe's infer route."""
    from kserve.model_server import FASTAPI_APP_IMPORT_STRING
    from kserve.protocol.rest.server import RESTServer
    from uvicorn.importer import import_from_string

    from ctr_volcano.serving.json_infer import install

    class RestServer(RESTServer):
        def create_application(self) -> None:
            super().create_application()
            install(import_from_string(FASTAPI_APP_IMPORT_STRING), model)
    return RestServer(FASTAPI_APP_IMPORT_STRING, dataplane, model_repository_extension, port)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="ctr-serve", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, metavar="DIR", help="model directory (model_meta.json, dense.npz, sparse.npz; model.onnx if exported)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument("--request-log", default=None, metavar="FILE", help="append a sample of the scored rows here")
    p.add_argument("--log-sample", type=float, default=0.01, metavar="RATE", help="share of rows logged (default 0.01)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    serve(args.model, args.host, args.port, args.request_log, args.log_sample)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
