"""The ``ctr-volcano`` command line.

Each area of the product owns a module exposing ``register(subparsers)``; this file only assembles
them, so adding a verb never touches another area's code. Every verb's handler returns an exit code.
An error of the product's families (:mod:`ctr_volcano.errors`) is printed as one line (no traceback)
and the process exits with its family's code (:func:`~ctr_volcano.errors.exit_code_of`): 2 for bad
input, 75 for an outage that outlasted its retries, 1 for a failed job; 128 + N after signal N.
``--debug`` shows the traceback. docs/cli.md lists the codes.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
from typing import List, Optional

from ctr_model.logs import setup_logging

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: Modules that contribute verbs. Each defines ``register(subparsers) -> None`` and sets
#: ``func`` on the sub-parser it adds (``parser.set_defaults(func=handler)``).
COMMAND_MODULES = (
    "ctr_volcano.app.cli.data",      # gen-data, prep
    "ctr_volcano.app.cli.train",     # train
    "ctr_volcano.app.cli.volcano",   # render-job, rbac
    "ctr_volcano.app.cli.queue",     # render-queue
    "ctr_volcano.app.cli.evaluate",  # evaluate
    "ctr_volcano.app.cli.validate",  # validate
    "ctr_volcano.app.cli.serving",   # export, serve, render-inference-service
    "ctr_volcano.app.cli.scoring",   # score
    "ctr_volcano.app.cli.pipeline",  # compile, run, submit
    "ctr_volcano.app.cli.cluster",   # minicluster helpers (build, up)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctr-volcano",
        description="Distributed CTR training with PaddlePaddle on Kubernetes + Volcano, "
                    "as Kubeflow Pipelines components.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


#: Library field names, other than the training step's, whose flag is spelled differently: flag, dest.
_FLAG_OF_FIELD = {"gpu": ("--gpus", "gpus"), "model_dir": ("--model-out", "model_out"),
                  "data_dir": ("--data", "data")}


def _in_flag_terms(exc: BaseException, args: argparse.Namespace) -> str:
    """The error's text, naming the flag the user typed where a library field has one."""
    from ctr_volcano.app.cli.step_flags import dest_of, flag_of
    from ctr_volcano.errors import BadInput

    text = str(exc)
    if not isinstance(exc, BadInput) or text != f"{exc.field}={exc.value!r}: {exc.fix}" or exc.field.startswith("-"):
        return text
    name = exc.field.rsplit(".", 1)[-1]
    for flag, dest in (_FLAG_OF_FIELD.get(name, (None, None)), (flag_of(name), dest_of(name)),
                       ("--" + name.replace("_", "-"), name)):
        if flag and dest in vars(args):
            return str(BadInput(flag, exc.value, exc.fix))
    return text


def _raise_interrupted(signum: int, _frame: object) -> None:
    from ctr_volcano.errors import Interrupted

    raise Interrupted(signum)


def main(argv: Optional[List[str]] = None) -> int:
    from ctr_volcano.errors import CtrVolcanoError, Interrupted, exit_code_of

    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(logging.DEBUG if args.debug else logging.INFO)
    # SIGTERM (``kill PID``, a supervisor, a notebook kernel restart) unwinds like Ctrl-C, so every
    # verb's cleanup runs; the exit code is 128 + signal either way.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted) if in_main else None
    try:
        return int(args.func(args) or 0)
    except CtrVolcanoError as exc:
        if args.debug:
            raise
        print(f"ctr-volcano {args.command}: error: {_in_flag_terms(exc, args)}", file=sys.stderr)
        return exit_code_of(exc)
    except KeyboardInterrupt as exc:
        detail = str(exc)
        print(f"ctr-volcano {args.command}: interrupted" + (f" ({detail})" if detail else ""),
              file=sys.stderr)
        return exit_code_of(exc) if isinstance(exc, Interrupted) else 130
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
