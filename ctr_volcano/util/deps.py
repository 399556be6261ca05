"""Optional dependencies, checked where a command first needs them.

Why: the base install (``pip install ctr-volcano``) composes, compiles and submits pipelines, renders
Jobs, preps and evaluates without Paddle, so it installs into a notebook whose numpy, pyarrow and kfp
it must not move. Only the local training backend runs Paddle in this environment; it asks for it
here, before any work starts, and a missing one is one line naming the extra that brings it.
"""
from __future__ import annotations

import importlib.util
from typing import Any

from ctr_volcano.errors import BadInput

__all__ = ["MissingDependency", "require", "TRAIN_EXTRA"]

#: The extra that installs the training stack (Paddle and the numpy/protobuf it needs).
TRAIN_EXTRA = "train"


class MissingDependency(BadInput):
    """A command needs a package this environment lacks; the fix is the install command."""


def require(module: str, field: str, value: Any, purpose: str, extra: str = TRAIN_EXTRA) -> None:
    """Refuse, as :class:`MissingDependency`, unless ``module`` can be imported here.

    Args:
        module: the top-level module needed (``paddle``).
        field: the parameter or flag whose value needs it (``backend``).
        value: that value (``local``).
        purpose: what needs it, for the message (``the local backend trains with Paddle here``).
        extra: the ``ctr-volcano`` extra that installs it.
    """
    if importlib.util.find_spec(module) is None:
        raise MissingDependency(field, value, f"{purpose}, and {module} is not installed: "
                                              f"pip install 'ctr-volcano[{extra}]'")
