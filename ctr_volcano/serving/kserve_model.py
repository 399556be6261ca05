"""The KServe model: a V2 (Open Inference Protocol) request of raw columns in, probabilities out.

It runs in the serving image (dockerfiles/Dockerfile.serving, serving/requirements.txt: kserve,
onnxruntime, no Paddle), so it imports only the light modules: the transforms through :mod:`.raw`
and the manifest the export wrote. KServe's stock Paddle runtime reads a single float input and
Triton would need the client to hash ids itself; this model takes what the service's log has.
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Dict, Optional

import kserve
import numpy as np
import onnxruntime as ort
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from ctr_model.onnx_export import ONNX_FILE, read_manifest
from ctr_volcano.errors import BadInput
from ctr_volcano.serving.raw import model_inputs
from ctr_volcano.serving.request_log import RequestLog

__all__ = ["CtrModel", "MODEL_NAME"]

MODEL_NAME = "ctr"


def session(model_dir: str, threads: int = 1) -> "ort.InferenceSession":
    """An onnxruntime session on the model; one intra-op thread: requests are small and a server
    runs several at once."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(os.path.join(model_dir, ONNX_FILE), sess_options=opts,
                                providers=["CPUExecutionProvider"])


class CtrModel(kserve.Model):
    """The exported model served as ``ctr`` (inputs ``I1..I13``, ``C1..C26``; output ``probability``)."""

    def __init__(self, model_dir: str, name: str = MODEL_NAME, request_log: Optional[RequestLog] = None):
        super().__init__(name)
        self.model_dir = model_dir
        self.request_log = request_log
        self.hash_buckets = 0
        self._session: Optional[ort.InferenceSession] = None

    def load(self) -> bool:
        manifest = read_manifest(self.model_dir)
        if "feature_spec" in manifest:
            raise BadInput("model_dir", self.model_dir, "this server takes Criteo's raw columns, but the model "
                                                        "was trained on a feature spec: serve its model.onnx "
                                                        "with onnxruntime or Triton directly (serving.json "
                                                        "names its inputs)")
        self.hash_buckets = int(manifest["hash_buckets"])
        self._session = session(self.model_dir)
        self.ready = True
        return self.ready

    def predict(self, payload: Any, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("request: send a V2 inference request (inputs I1..I13, C1..C26)")
        try:
            columns = {i.name: (i.datatype, i.as_numpy()) for i in payload.inputs}
        except ValueError as exc:
            raise InvalidInput(f"request: {exc}: the data does not fit the input's shape") from None
        try:
            dense, ids = model_inputs(columns, self.hash_buckets)
        except BadInput as exc:
            raise InvalidInput(str(exc)) from None
        assert self._session is not None
        probs = self._session.run(["probability"], {"dense": dense, "ids": ids})[0]
        if self.request_log is not None:
            self.request_log.log(columns, probs)
        out = InferOutput(name="probability", shape=[len(probs)], datatype="FP64")
        out.set_data_from_numpy(np.asarray(probs, dtype=np.float64), binary_data=_wants_binary(payload))
        return InferResponse(response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=[out])


def _wants_binary(payload: InferRequest) -> bool:
    """Answer in the binary tensor extension when the request used it."""
    return any(getattr(i, "_raw_data", None) is not None for i in payload.inputs)
