"""Defaults that the pipelines' signatures and the CLI show, kept free of heavy imports.

Why a module of its own: ``components/`` and ``pipelines/`` are imported at compile time on a laptop,
where only the standard library and kfp may load; :mod:`ctr_model.features` needs numpy. Each value
here is named once and imported wherever it is a default (the pods' env contract, the Volcano Job
spec, ``render-job``'s flags, the evaluation component's signature).
"""

__all__ = ["DEFAULT_HASH_BUCKETS", "DEFAULT_EPOCHS", "DEFAULT_BATCH_SIZE", "DEFAULT_LEARNING_RATE",
           "DEFAULT_MODEL", "DEFAULT_PS_PORT", "DEFAULT_GLOO_PORT", "DEFAULT_SCORE_BATCH"]

#: Hash buckets of the categorical ids when the user names none (a prime just above one million).
DEFAULT_HASH_BUCKETS = 1_000_001
#: Passes over the training data, for the trainer (``TrainConfig``) and every entry point of the
#: training step (``StepParams``: the CLI, the component, both pipelines). Three, not two: on 1M
#: generated rows a 2x2 gang reached the data's ceiling within three epochs (test AUC 0.7735 against
#: the generating model's 0.7775, docs/training.md); two stopped short of it. The demo on the 200k-line
#: sample (``ctr-volcano run``) overrides it with one epoch of small batches (docs/local.md).
DEFAULT_EPOCHS = 3
#: Examples per batch and per trainer thread.
DEFAULT_BATCH_SIZE = 512
#: Adam's step size (PaddleRec's; 0.002 and 0.005 did worse on the 1M-row data, docs/training.md).
DEFAULT_LEARNING_RATE = 0.001
#: The model family trained when the user names none.
DEFAULT_MODEL = "dnn"
#: The pservers' port (in a Volcano pod; the local gang picks free ports). Far from the ports
#: Kubernetes and Volcano use on a node, and the same in every pod, so the svc plugin's host names are
#: the whole endpoint list.
DEFAULT_PS_PORT = 36001
#: Paddle's Gloo HTTP rendezvous port, served by pserver 0, beside the pservers' port.
DEFAULT_GLOO_PORT = 36100
#: Rows scored per batch by evaluation and the champion/challenger gate: big enough to amortize the
#: scorer's per-batch overhead, small enough for a step pod's memory.
DEFAULT_SCORE_BATCH = 8192
