"""The V2 infer route for plain JSON requests, placed ahead of KServe's own.

KServe's ``POST /v2/models/{name}/infer`` validates the request into pydantic models, decodes it into an
``InferRequest``, times the model's stages and encodes the answer back through pydantic: about
0.4 ms a request on this project's 2-core machine, half of what the transforms and onnxruntime take
for one row (docs/serving.md). This route answers the common request -- a JSON body whose inputs each
carry ``name``, ``datatype``, ``shape`` and ``data`` -- with the same scoring
(:meth:`~ctr_volcano.serving.kserve_model.CtrModel.score`) and the same JSON, byte for byte but the
``id`` KServe draws when the request has none.

Every other request goes to KServe's route unchanged, with the body it sent: the binary tensor
extension (an ``Inference-Header-Content-Length`` header), request or input ``parameters``,
requested ``outputs``, another model's name, a model not ready, a body this route cannot read, and
any request the model refuses (so every error answer is KServe's, as before).
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable, Dict, MutableMapping, Optional, Tuple

import numpy as np
import orjson
from kserve.utils.numpy_codec import to_np_dtype

from ctr_volcano.errors import BadInput

__all__ = ["JsonInferRoute", "install", "INFER_PATH"]

_log = logging.getLogger(__name__)

INFER_PATH = "/v2/models/{model_name}/infer"
_INPUT_KEYS = {"name", "datatype", "shape", "data"}
_PASSED = "ctr_volcano.json_infer.passed"      # in a scope routed again: this route does not match

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


class NotOurs(Exception):
    """The request is one this route leaves to KServe's."""


def read_columns(body: bytes) -> Tuple[Optional[str], Dict[str, Tuple[str, np.ndarray]]]:
    """``(request id, {input: (datatype, values)})`` of a plain JSON V2 request, the values as
    KServe's ``InferInput.as_numpy`` gives them.

    Raises:
        NotOurs: anything else (see the module docstring).
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise NotOurs("not JSON") from None
    if not isinstance(doc, dict) or set(doc) - {"id", "inputs"} or not isinstance(doc.get("inputs"), list):
        raise NotOurs("not a plain request")
    rid = doc.get("id")
    if rid is not None and not isinstance(rid, str):
        raise NotOurs("id")
    columns: Dict[str, Tuple[str, np.ndarray]] = {}
    for item in doc["inputs"]:
        if not isinstance(item, dict) or set(item) != _INPUT_KEYS:
            raise NotOurs("not a plain input")
        name, datatype, shape, data = item["name"], item["datatype"], item["shape"], item["data"]
        dtype = to_np_dtype(datatype) if isinstance(datatype, str) else None     # as_numpy's own map
        if (not isinstance(name, str) or name in columns or dtype is None or not isinstance(data, list)
                or not isinstance(shape, list) or not all(type(d) is int for d in shape)):
            raise NotOurs("input fields")
        try:
            columns[name] = (datatype, np.array(data, dtype=dtype).reshape(shape))
        except (ValueError, TypeError, OverflowError):
            raise NotOurs("data") from None
    return rid, columns


def answer(model_name: str, rid: Optional[str], names: Any, results: Any) -> bytes:
    """The JSON KServe answers for these outputs (FP64, shape ``[N]``), field for field."""
    return orjson.dumps({
        "model_name": model_name, "model_version": None, "id": rid or str(uuid.uuid4()), "parameters": None,
        "outputs": [{"name": name, "shape": [len(probs)], "datatype": "FP64", "parameters": None,
                     "data": np.asarray(probs, dtype=np.float64).tolist()} for name, probs in zip(names, results)]})


class JsonInferRoute:
    """An ASGI app for :data:`INFER_PATH`: plain JSON requests for ``model`` answered here, the rest
    routed again by ``router`` (the app's, where this route then does not match: KServe's answers)
    with their body replayed."""

    def __init__(self, model: Any, router: Any):
        self.model, self.router = model, router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._may_take(scope):
            return await self._pass(scope, receive, send)
        body = await _body(receive)
        if body is None:            # the client went away before sending it all: nothing to answer
            return None
        try:
            rid, columns = read_columns(body)
            names, results = self.model.score(columns)
        except (NotOurs, BadInput) as exc:      # KServe's route answers, as it always did
            _log.debug("infer request left to KServe's route: %s", exc)
            return await self._pass(scope, _replay(body, receive), send)
        data = answer(self.model.name, rid, names, results)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(data)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    def _may_take(self, scope: Scope) -> bool:
        if scope.get("method") != "POST" or not self.model.ready:
            return False
        if scope.get("path_params", {}).get("model_name") != self.model.name:
            return False
        return not any(k.lower() == b"inference-header-content-length" for k, _ in scope.get("headers", ()))

    async def _pass(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.router({**scope, _PASSED: True}, receive, send)


async def _body(receive: Receive) -> Optional[bytes]:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":       # http.disconnect
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body it already gave handed out once more, first."""
    sent = False

    async def replay() -> Dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()          # what comes after the body (a disconnect), as it comes
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replay


def install(app: Any, model: Any) -> JsonInferRoute:
    """Put the route ahead of every other in ``app`` (KServe's FastAPI app); returns it."""
    from starlette.routing import Match, Route

    class _Route(Route):
        def matches(self, scope: Scope) -> Tuple[Match, Scope]:
            return (Match.NONE, {}) if scope.get(_PASSED) else super().matches(scope)

    route = JsonInferRoute(model, app.router)
    app.router.routes.insert(0, _Route(INFER_PATH, route, methods=["POST"]))
    return route
