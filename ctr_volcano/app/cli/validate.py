"""``ctr-volcano validate``: a day's data (or what the server saw) against a reference profile.

The same checks the pipelines run before training (:mod:`ctr_volcano.validation`), from the command
line: on prepped data (``--data``), or on a model server's request log (``--serving-log``: training /
serving skew). A ``fail`` verdict exits 2 with the failures in one line, as the pipeline step fails.
"""
from __future__ import annotations

import argparse
import json
from typing import Optional

__all__ = ["register"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="compare data (or a server's request log) with a reference profile: pass/warn/fail",
        description="Compare the profile prep wrote for DIR (or the profile of a model server's request log) "
                    "with a reference: a prep output, a profile.json, or an exported model (its training "
                    "data's profile). Checks the schema, row count, label rate and, per feature, missing "
                    "rate, drift (Jensen-Shannon for dense, L-infinity for categorical features) and new "
                    "ids (docs/validation.md). Prints the verdict and one line per finding; exits 2 on "
                    "fail (or on warn with --fail-on warn).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", metavar="DIR", help="prepped data: a prep output directory, a split "
                                                      "directory or a profile.json")
    source.add_argument("--serving-log", metavar="FILE", help="a model server's request log (ctr-volcano serve "
                                                              "--request-log), compared with --reference "
                                                              "(the served model)")
    p.add_argument("--reference", metavar="DIR|MODEL", default=None,
                   help="the reference: a prep output, a profile.json or an exported model (required with "
                        "--serving-log; without it, --data is checked alone)")
    p.add_argument("--feature-spec", metavar="FILE", default=None,
                   help="the spec whose validation: section sets the thresholds (default: the one the data "
                        "was prepped with)")
    p.add_argument("--thresholds", metavar="JSON|FILE", default=None,
                   help="thresholds over the spec's, in the shape of its validation: section, e.g. "
                        "'{\"js_divergence\": 0.5, \"features\": {\"C3\": {\"new_id_rate\": off}}}'")
    p.add_argument("--out", metavar="DIR", default=None, help="write validation.json and validation.html here")
    p.add_argument("--fail-on", choices=("fail", "warn"), default="fail",
                   help="the verdict that exits 2 (default fail)")
    p.add_argument("--json", action="store_true", help="print the whole validation.json")
    p.set_defaults(func=_validate)


def _spec(args: argparse.Namespace, doc: dict):
    from ctr_model.feature_spec import spec_from_dict
    from ctr_volcano.data.spec_input import read_feature_spec

    if args.feature_spec:
        return read_feature_spec(args.feature_spec)
    return spec_from_dict(doc["feature_spec"]) if doc.get("feature_spec") else None


def _validate(args: argparse.Namespace) -> int:
    from ctr_volcano.data.profile import DataProfile, profile_path_of, read_profile
    from ctr_volcano.errors import BadInput
    from ctr_volcano.validation.validate import judge, refuse_failed, thresholds_for, write_outputs

    ref: Optional[DataProfile] = None
    ref_doc: Optional[dict] = None
    if args.reference:
        ref, ref_doc = read_profile(args.reference)
    if args.serving_log:
        if ref_doc is None:
            raise BadInput("--reference", None, "give the served model (or its training data's profile) to "
                                                "compare the request log with")
        from ctr_volcano.validation.serving_log import log_profile

        day, day_doc = log_profile(args.serving_log, _spec(args, ref_doc))
        day_path = args.serving_log
    else:
        day, day_doc = read_profile(args.data)
        day_path = profile_path_of(args.data)
    levels = thresholds_for(_spec(args, day_doc), args.thresholds)
    result = judge(day, day_doc, ref, ref_doc, levels, day_path=day_path, serving=bool(args.serving_log),
                   reference_path=profile_path_of(args.reference) if args.reference else None)
    if args.serving_log:
        result["data"]["mean_probability"] = day_doc["source"].get("mean_probability")
    if args.out:
        write_outputs(result, args.out)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['verdict']}: {len(result['findings'])} finding(s); data {day_path} ({day.rows} rows), "
              f"reference {result['reference']['path'] or 'none'}")
        for f in result["findings"]:
            print(f"  {f['severity']}: {f['line']}")
    if args.fail_on == "warn" and result["verdict"] == "warn":
        raise BadInput("data", day_path, "data validation warned (--fail-on warn): "
                       + "; ".join(f["line"] for f in result["findings"]))
    refuse_failed(result, day_path)
    return 0
