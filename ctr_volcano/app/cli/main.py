"""The ``ctr-volcano`` command line.

Each area of the product owns a module exposing ``register(subparsers)``; this file only assembles
them, so adding a verb never touches another area's code. Every verb's handler returns an exit code.
Errors of the :class:`~ctr_volcano.errors.CtrVolcanoError` family are printed as one clear line
(no traceback) and exit 2; ``--debug`` shows the traceback.
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
    "ctr_volcano.app.cli.serving",   # export, serve, render-inference-service
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


#: Library field names whose command-line flag is spelled differently.
_FLAG_OF_FIELD = {"learning_rate": "--lr", "gpu": "--gpus", "ttl_seconds_after_finished": "--ttl",
                  "schedule_timeout_s": "--schedule-timeout", "stall_timeout_s": "--stall-timeout",
                  "model_dir": "--model-out", "data_dir": "--data"}


def _in_flag_terms(exc: Exception, args: argparse.Namespace) -> str:
    """The error's text, naming the flag the user typed where a library field has one."""
    from ctr_volcano.errors import BadInput

    if not isinstance(exc, BadInput) or exc.field.startswith("-"):
        return str(exc)
    name = exc.field.rsplit(".", 1)[-1]
    flag = _FLAG_OF_FIELD.get(name, "--" + name.replace("_", "-"))
    if flag[2:].replace("-", "_") not in vars(args):
        return str(exc)
    return str(BadInput(flag, exc.value, exc.fix))


def _raise_interrupted(signum: int, _frame: object) -> None:
    from ctr_volcano.errors import Interrupted

    raise Interrupted(signum)


def main(argv: Optional[List[str]] = None) -> int:
    from ctr_volcano.errors import CtrVolcanoError

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
        return 2
    except KeyboardInterrupt as exc:
        detail = str(exc)
        print(f"ctr-volcano {args.command}: interrupted" + (f" ({detail})" if detail else ""),
              file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
