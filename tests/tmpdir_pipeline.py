"""A one-step pipeline that reports its step's ``TMPDIR``: what ``run_in_kfp_local`` hands down."""
from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def tmpdir_of_step() -> str:
    import os

    return os.environ.get("TMPDIR", "")


@dsl.pipeline(name="tmpdir-of-step")
def tmpdir_pipeline() -> str:
    return tmpdir_of_step().output
