"""Where a feature spec enters the product: a file path (YAML or JSON) or a JSON string (a pipeline
parameter), empty meaning Criteo. Turns :class:`ctr_model.feature_spec.SpecError` into
:class:`BadInput`, so the CLI exits 2 with one line listing every bad key."""
from __future__ import annotations

import os
from typing import Optional

from ctr_model.feature_spec import FeatureSpec, SpecError, load_spec, spec_from_text
from ctr_volcano.errors import BadInput

__all__ = ["read_feature_spec"]


def read_feature_spec(value: Optional[str]) -> Optional[FeatureSpec]:
    """The spec ``value`` names: ``None``/``""`` -> ``None`` (Criteo); text starting with ``{`` is
    JSON; anything else is a file path.

    Raises:
        BadInput: an unreadable file or an invalid spec (every problem in one line).
    """
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        if text.startswith("{"):
            return spec_from_text(text)
        if not os.path.isfile(text):
            raise BadInput("feature_spec", text, "no such file; give the path of a YAML or JSON "
                           "spec, or the spec itself as JSON (docs/features.md)")
        return load_spec(text)
    except SpecError as exc:
        fixes = "; ".join(f"{key}={bad!r}: {fix}" for key, bad, fix in exc.problems)
        raise BadInput("feature_spec", text if len(text) < 80 else text[:77] + "...",
                       f"{len(exc.problems)} problem(s): {fixes}") from None
