"""The range checks every validated boundary makes (configs, specs, step parameters, CLI verbs).

Predicates only: each caller raises its own error family (``ConfigError`` in the trainer image,
``BadInput`` elsewhere) with its own field name and fix, so messages stay specific while the
checks themselves (a ``bool`` is not a number, numpy integers are whole numbers) are written once.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional

__all__ = ["is_int", "is_positive", "is_real"]


def is_int(value: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> bool:
    """A whole number (``int`` or a numpy integer, never ``bool``) within ``[lo, hi]`` (bounds optional)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    number = int(value)
    return (lo is None or number >= lo) and (hi is None or number <= hi)


def is_positive(value: Any) -> bool:
    """A real number (never ``bool``) greater than zero."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and float(value) > 0


def is_real(value: Any, lo: float, hi: float) -> bool:
    """A finite real number (never ``bool``) within ``[lo, hi]``."""
    return (not isinstance(value, bool) and isinstance(value, numbers.Real)
            and lo <= float(value) <= hi)
