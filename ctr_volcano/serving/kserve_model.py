"""The KServe model: a V2 (Open Inference Protocol) request of raw columns in, probabilities out.

It runs wherever ``pip install "ctr-volcano[serve]"`` went (the Quick start's environment, the
serving image, dockerfiles/Dockerfile.serving): kserve and onnxruntime beside the package, no Paddle
needed. Any exported model is served, of any family and feature spec: the request names the spec's
raw columns (:mod:`.raw` turns them into the graph's inputs with prep's transforms) and the graph is
the export's ``model.onnx``, or built in memory from the model directory when the export did not
write one (a model exported before every family and spec had a graph). KServe's stock Paddle runtime
reads a single float input and Triton would need the client to transform and hash itself; this model
takes what the service's log has.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Dict, List, Optional, Tuple

import kserve
import numpy as np
import onnxruntime as ort
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from ctr_model.feature_spec import FeatureSpec
from ctr_model.infer import ModelError
from ctr_model.onnx_export import servable
from ctr_model.onnx_inputs import layout_of
from ctr_volcano.errors import BadInput
from ctr_volcano.serving.raw import model_inputs, raw_inputs, request_spec
from ctr_volcano.serving.request_log import RequestLog

__all__ = ["CtrModel", "MODEL_NAME", "session"]

MODEL_NAME = "ctr"
_log = logging.getLogger(__name__)


def session(model: bytes, threads: int = 1) -> "ort.InferenceSession":
    """An onnxruntime session on the serialized graph; one intra-op thread: requests are small and a
    server runs several at once."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])


def load_served(model_dir: str) -> Tuple[FeatureSpec, "ort.InferenceSession"]:
    """The spec whose raw columns the model takes, and a session on its graph.

    Raises:
        ModelError: not a model directory, or a graph whose inputs are not the spec's layout.
    """
    manifest, data, source = servable(model_dir)
    spec = request_spec(manifest)
    sess = session(data)
    want = [name for name, _, _ in layout_of(spec).inputs()]
    have = [i.name for i in sess.get_inputs()]
    if have != want:
        raise ModelError("model", source, f"its inputs {have} are not the {want} its feature spec implies: "
                                          f"run `ctr-volcano export --model {model_dir}` again")
    _log.info("model %s (%s): raw inputs %s; graph from %s", model_dir, manifest.get("model", "dnn"),
              ", ".join(raw_inputs(spec)), source)
    return spec, sess


class CtrModel(kserve.Model):
    """The exported model served as ``ctr``: one input per raw column of its feature spec (Criteo:
    ``I1..I13``, ``C1..C26``), output ``probability`` (a multi-task model's first task), then one
    ``probability_<task>`` per later task, each over impressions, as the graph's outputs are."""

    def __init__(self, model_dir: str, name: str = MODEL_NAME, request_log: Optional[RequestLog] = None):
        super().__init__(name)
        self.model_dir = model_dir
        self.spec: Optional[FeatureSpec] = None
        self.request_log = request_log
        self._session: Optional[ort.InferenceSession] = None
        self._outputs: List[str] = []

    def load(self) -> bool:
        self.spec, self._session = load_served(self.model_dir)
        self._outputs = [o.name for o in self._session.get_outputs()]
        self.ready = True
        return self.ready

    def score(self, columns: Dict[str, Tuple[str, Any]]) -> Tuple[List[str], List[np.ndarray]]:
        """The graph's output names (probability first, then a task each) and their values for the
        raw ``{input: (V2 datatype, values)}``; the scored rows go to the request log.

        Raises:
            BadInput: an input the model cannot take (:func:`~ctr_volcano.serving.raw.model_inputs`).
        """
        assert self._session is not None and self.spec is not None
        feed = model_inputs(self.spec, columns)
        results = self._session.run(self._outputs, feed)
        if self.request_log is not None:
            self.request_log.log(columns, results[0])
        return self._outputs, results

    def predict(self, payload: Any, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        assert self._session is not None and self.spec is not None
        if not isinstance(payload, InferRequest):
            raise InvalidInput(f"request: send a V2 inference request (inputs {', '.join(raw_inputs(self.spec)[:8])})")
        try:
            columns = {i.name: (i.datatype, i.as_numpy()) for i in payload.inputs}
        except ValueError as exc:
            raise InvalidInput(f"request: {exc}: the data does not fit the input's shape") from None
        try:
            names, results = self.score(columns)
        except BadInput as exc:
            raise InvalidInput(str(exc)) from None
        outs = []
        for name, probs in zip(names, results):
            out = InferOutput(name=name, shape=[len(probs)], datatype="FP64")
            out.set_data_from_numpy(np.asarray(probs, dtype=np.float64), binary_data=_wants_binary(payload))
            outs.append(out)
        return InferResponse(response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=outs)


def _wants_binary(payload: InferRequest) -> bool:
    """Answer in the binary tensor extension when the request used it."""
    return any(getattr(i, "_raw_data", None) is not None for i in payload.inputs)
