"""Serving an exported model of any family and feature spec: raw request columns to the ONNX graph's
inputs with prep's own transforms (``raw``), the KServe V2 model and server (``kserve_model``,
``server``; the ``serve`` extra), and the InferenceService manifest (``inference_service``)."""
