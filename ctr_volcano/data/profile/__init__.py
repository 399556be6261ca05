"""Data profiles: per-column sketches prep computes in its single pass (:mod:`.sketches`), merged into
``profile.json`` (:mod:`.profile`), compared by :mod:`ctr_volcano.validation`."""
from ctr_volcano.data.profile.profile import (
    MODEL_PROFILE_FILE,
    PROFILE_FILE,
    PROFILE_VERSION,
    QUANTILES,
    TOP_K,
    DataProfile,
    attach_to_model,
    criteo_piece,
    profile_path_of,
    read_profile,
    spec_piece,
)

__all__ = ["DataProfile", "PROFILE_FILE", "MODEL_PROFILE_FILE", "PROFILE_VERSION", "QUANTILES", "TOP_K",
           "criteo_piece", "spec_piece", "read_profile", "attach_to_model", "profile_path_of"]
