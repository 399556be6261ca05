"""A minimal V2 (Open Inference Protocol) JSON client for the model server: raw rows in, the
request body and the probabilities out. Used by the tests and bench/serve.py; any V2 client
(tritonclient.http, KServe's InferenceRESTClient) speaks the same protocol."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Dict, List, Sequence, Tuple

from ctr_volcano.serving.raw import BYTES, RAW_INPUTS

__all__ = ["rows_to_body", "columns_to_body", "raw_to_body", "infer", "V2Error"]


class V2Error(RuntimeError):
    """The server answered with an error status; ``status`` and the server's ``error`` text."""

    def __init__(self, status: int, error: str):
        self.status = status
        self.error = error
        super().__init__(f"HTTP {status}: {error}")


def rows_to_body(rows: Sequence[Sequence[str]]) -> Dict[str, Any]:
    """The V2 request for raw TSV rows (``label, I1..I13, C1..C26`` each; the label is dropped): one
    BYTES input per raw column, the log's text as is."""
    columns = list(zip(*[r[1:1 + len(RAW_INPUTS)] for r in rows])) if rows else [()] * len(RAW_INPUTS)
    return {"inputs": [{"name": name, "datatype": BYTES, "shape": [len(rows)], "data": list(col)}
                       for name, col in zip(RAW_INPUTS, columns)]}


def columns_to_body(columns: Dict[str, Tuple[str, Sequence[Any]]]) -> Dict[str, Any]:
    """The V2 request of ``{input: (datatype, values)}``, one value per row each."""
    return {"inputs": [{"name": name, "datatype": datatype, "shape": [len(values)], "data": list(values)}
                       for name, (datatype, values) in columns.items()]}


def raw_to_body(values: Dict[str, Sequence[Any]]) -> Dict[str, Any]:
    """The V2 request of a log's raw values, column by column, as its client would send them: text
    as is; numbers and integer ids as their text (``""`` for None); lists as JSON (``[]`` for None).
    All BYTES: the server applies the feature spec's transforms."""
    import json as _json

    out: Dict[str, Tuple[str, Sequence[Any]]] = {}
    for name, column in values.items():
        if any(isinstance(v, (list, tuple)) for v in column):
            out[name] = (BYTES, [_json.dumps(list(v or [])) for v in column])
        else:
            out[name] = (BYTES, [_text(v) for v in column])
    return columns_to_body(out)


def _text(value: Any) -> str:
    """A raw value's text: a float's shortest round-trip form, an integer's decimal form."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    import numbers

    return str(int(value)) if isinstance(value, numbers.Integral) else repr(float(value))


def infer(url: str, body: Dict[str, Any], model: str = "ctr", timeout: float = 60.0) -> Tuple[List[float], Dict[str, Any]]:
    """POST ``body`` to ``{url}/v2/models/{model}/infer``; ``(probabilities, the whole response)``.

    Raises:
        V2Error: a 4xx/5xx answer, with the server's error message.
    """
    req = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            out = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        try:
            text = json.loads(text).get("error", text)
        except ValueError:
            pass
        raise V2Error(exc.code, text) from None
    return list(out["outputs"][0]["data"]), out


def rows_to_binary(rows: Sequence[Sequence[str]]) -> Tuple[bytes, int]:
    """The same request in the binary tensor extension: a JSON header whose inputs carry
    ``binary_data_size``, then each BYTES tensor as 4-byte little-endian lengths + the bytes.
    Returns ``(body, header length)`` (the ``Inference-Header-Content-Length`` value)."""
    import struct

    header: Dict[str, Any] = {"inputs": [], "outputs": [{"name": "probability", "parameters": {"binary_data": True}}]}
    blobs = []
    for j, name in enumerate(RAW_INPUTS):
        blob = b"".join(struct.pack("<I", len(v)) + v
                        for v in (str(r[1 + j]).encode("utf-8") for r in rows))
        header["inputs"].append({"name": name, "datatype": BYTES, "shape": [len(rows)],
                                 "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    head = json.dumps(header).encode()
    return head + b"".join(blobs), len(head)


def infer_binary(url: str, rows: Sequence[Sequence[str]], model: str = "ctr", timeout: float = 60.0) -> List[float]:
    """POST raw rows in the binary tensor extension; the probabilities (FP64) from the binary answer."""
    import numpy as np

    body, head_len = rows_to_binary(rows)
    req = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=body, method="POST",
                                 headers={"Content-Type": "application/octet-stream",
                                          "Inference-Header-Content-Length": str(head_len)})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read()
            length = int(resp.headers.get("Inference-Header-Content-Length", len(data)))
    except urllib.error.HTTPError as exc:
        raise V2Error(exc.code, exc.read().decode("utf-8", "replace")) from None
    out = json.loads(data[:length])["outputs"][0]
    if length == len(data):
        return list(out["data"])
    return np.frombuffer(data[length:], dtype="<f8").tolist()
