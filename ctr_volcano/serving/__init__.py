"""Serving an exported model: raw request columns to model inputs with prep's own transforms
(``raw``), the KServe V2 model and server (``kserve_model``, ``server``; the serving image only), and
the InferenceService manifest (``inference_service``)."""
