"""Data validation: a day's profile (:mod:`ctr_volcano.data.profile`) against a reference's -- the
champion's training data, a pinned baseline, or what the server saw -- as a verdict with one finding
per threshold crossed (:mod:`.checks`, pure), with its files (:mod:`.validate`) and report
(:mod:`.report`). docs/validation.md lists the checks, their statistics and default thresholds."""
from ctr_volcano.validation.checks import VERDICTS, Finding, Verdict, decide
from ctr_volcano.validation.validate import (
    REPORT_FILE,
    VALIDATION_FILE,
    read_result,
    refuse_failed,
    thresholds_for,
    validate_profiles,
)

__all__ = ["decide", "Finding", "Verdict", "VERDICTS", "validate_profiles", "thresholds_for", "refuse_failed",
           "read_result", "VALIDATION_FILE", "REPORT_FILE"]
