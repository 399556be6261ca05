"""The top layer: the pipeline catalogue, the ``kfp.local`` runner, compile, submit, back-fill and
the ``ctr-volcano`` command line. Nothing below imports it."""

__all__: list[str] = []
