"""The data checks: a day's profile against a reference profile, as a verdict with one finding per
threshold crossed. :func:`decide` is the rule alone (pure, like :func:`ctr_volcano.retraining.gate.decide`);
:mod:`.validate` reads the profiles and writes the outputs.

The statistics (docs/validation.md has their defaults and how to tune them):

* schema: the features, their kinds, transforms and id spaces must match the reference's (a finding
  without a threshold: a missing or re-typed feature fails, a changed transform warns);
* ``rows_drop``: ``1 - rows / reference rows`` (0 when the day has more);
* ``label_rate_shift``: ``max(r / r0, r0 / r) - 1`` of the label rates (1.0: doubled or halved);
* ``missing_rate_jump``: ``|m - m0|`` of a feature's share of empty values;
* ``js_divergence``: Jensen-Shannon divergence (bits, 0..1) of a dense feature's histograms of
  ``sign(x) log1p(|x|)`` in bins of 1/4 (a unit change x1000 moves every non-zero value by 27 bins);
* ``linf_distance``: the largest difference in frequency of an id among either side's 100 most
  frequent ids (TFDV's L-infinity drift), less three standard errors of the row samples' noise
  (:func:`linf_distance`);
* ``new_id_rate``: the share of the day's rows (with a value) whose id the reference never saw (TFDV's
  ``min_domain_mass`` seen from the other side), estimated from both sides' sketches
  (:func:`new_id_rate`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ctr_model.validation_spec import Thresholds
from ctr_volcano.data.profile import TOP_K, DataProfile
from ctr_volcano.data.profile.sketches import TOP_KEEP, DenseSketch, IdSketch, js_divergence, kmv_hash

__all__ = ["Finding", "Verdict", "decide", "new_id_rate", "linf_distance", "label_rate_shift", "VERDICTS"]

#: The verdicts, mildest first.
VERDICTS = ("pass", "warn", "fail")
_TWO64 = float(1 << 64)
#: A frequent id seen this many times in the day's row sample, and that the reference's would have shown as
#: often, is new if the reference does not have it.
SURE_COUNT = 10
#: Standard errors of the row samples' noise taken off an L-infinity difference (:func:`linf_distance`).
LINF_NOISE_Z = 3.0


@dataclass(frozen=True)
class Finding:
    """One threshold crossed (or one schema difference).

    Attributes:
        severity: ``warn`` or ``fail``.
        feature: the feature, or ``(rows)``/``(label)`` for the dataset's statistics.
        statistic: the statistic's name (``schema`` for a schema difference).
        value: its value (the difference's description for ``schema``).
        threshold: the level it crossed (``None`` for ``schema``).
        detail: the figures behind it, both sides.
    """

    severity: str
    feature: str
    statistic: str
    value: Any
    threshold: Optional[float]
    detail: str

    def line(self) -> str:
        """``feature: statistic value > severity threshold (detail)``."""
        if self.threshold is None:
            return f"{self.feature}: {self.statistic}: {self.value} ({self.severity})"
        return (f"{self.feature}: {self.statistic} {self.value:.4g} > {self.severity} threshold "
                f"{self.threshold:g} ({self.detail})")


@dataclass(frozen=True)
class Verdict:
    """The outcome: ``verdict`` (``pass``/``warn``/``fail``), the findings (failures first) and every
    statistic computed, per feature (``statistics[feature][statistic] = value``)."""

    verdict: str
    findings: Tuple[Finding, ...]
    statistics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    reference: bool = True

    def summary(self) -> str:
        """One line: the verdict and every finding."""
        if not self.findings:
            return f"{self.verdict}: no finding" + ("" if self.reference else " (no reference: schema only)")
        return f"{self.verdict}: " + "; ".join(f.line() for f in self.findings)

    def to_dict(self) -> Dict[str, Any]:
        return {"verdict": self.verdict, "findings": [dict(asdict(f), line=f.line()) for f in self.findings],
                "statistics": {k: dict(v) for k, v in self.statistics.items()}, "reference": self.reference}


# ------------------------------------------------------------------------------------------------
# statistics


def label_rate_shift(rate: float, reference: float) -> float:
    """``max(r / r0, r0 / r) - 1``: 1.0 when the label rate doubled or halved (inf when one is 0)."""
    if rate == reference:
        return 0.0
    if rate <= 0.0 or reference <= 0.0:
        return float("inf")
    return max(rate / reference, reference / rate) - 1.0


def linf_distance(day: IdSketch, ref: IdSketch, k: int = TOP_K) -> Tuple[float, float, int]:
    """The largest difference in frequency of an id among either side's ``k`` most frequent ids beyond
    the sampling noise, the difference itself, and that id.

    Frequencies are shares of the rows with a value, from the row samples (an id outside a side's
    candidates counts as 0 there), so each difference carries the noise of two samples of
    ``sample_rows`` rows: ``|p - q|`` less :data:`LINF_NOISE_Z` standard errors of it, at least 0, is
    what is compared with the threshold. The standard error is the two-proportion test's, from the
    pooled frequency: an id a small day's sample happened not to hold (``p = 0``) still carries the
    noise of the share it would have had. On a day of millions of rows that is TFDV's L-infinity
    distance within a few thousandths; on a small column (a few hundred sampled values) it keeps the
    row sample's noise from raising an alarm."""
    def freq(s: IdSketch) -> Dict[int, float]:
        if not s.sample_rows:
            return {}
        return {int(i): int(c) / s.sample_rows for i, c in zip(s.top_ids, s.top_counts)}
    p, q = freq(day), freq(ref)
    ids = sorted({i for i, _ in day.top(k)} | {i for i, _ in ref.top(k)})
    if not ids:
        return 0.0, 0.0, -1

    n, m = max(day.sample_rows, 1), max(ref.sample_rows, 1)

    def beyond_noise(i: int) -> float:
        a, b = p.get(i, 0.0), q.get(i, 0.0)
        pooled = (a * n + b * m) / (n + m)
        var = pooled * (1 - pooled) * (1 / n + 1 / m)
        return max(0.0, abs(a - b) - LINF_NOISE_Z * var ** 0.5)
    worst = max(ids, key=lambda i: (beyond_noise(i), abs(p.get(i, 0.0) - q.get(i, 0.0))))
    return beyond_noise(worst), abs(p.get(worst, 0.0) - q.get(worst, 0.0)), worst


def _surely_absent(day: IdSketch, ref: IdSketch, ids: List[int], shares: List[float]) -> np.ndarray:
    """Which of a day's frequent ids (not among the reference's known ids) the reference would hold if
    it had them: under the reach of its hash sample; or seen :data:`SURE_COUNT` times in the day's row
    sample and, had the reference their share, as often in its row sample and above the counts its
    frequent-id summary pruned (an id seen once or twice in a small day's sample is no evidence)."""
    reach = kmv_hash(np.asarray(ids, dtype=np.int64)).astype(np.float64) / _TWO64 <= ref.kmv_threshold
    floor = float(ref.top_counts.min()) if ref.top_ids.size >= TOP_KEEP else 0.0
    share = np.asarray(shares)
    frequent = (share * day.sample_rows >= SURE_COUNT) & (share * ref.sample_rows >= max(float(SURE_COUNT), 2 * floor))
    return reach | frequent


def new_id_rate(day: IdSketch, ref: IdSketch, k: int = TOP_K) -> float:
    """The share of the day's rows with a value whose id the reference never saw, estimated.

    The day's ``k`` most frequent ids (shares from its row sample) are looked up one by one: known if
    the reference has them among its frequent or hash-sampled ids; new if not, and the reference would
    hold them if it had them (:func:`_surely_absent`); otherwise undecided (an id the reference's row
    sample may have missed). The rest of the rows, the undecided ones included, are estimated on the
    ids both hash samples cover (coordinated sampling): with the same hash, every id of either side
    whose hash is below the smaller of the two samples' reaches is in both samples if it occurs on both
    sides, so among the day's sampled ids below it that were not decided (weighted by their exact row
    counts), one missing from the reference's sample is new for sure.
    """
    if not day.sample_rows:
        return 0.0
    if not ref.n:
        return 1.0
    known_ref = set(ref.top_ids.tolist()) | set(ref.kmv_ids.tolist())
    head = day.top(k)
    known = [i for i, _ in head if i in known_ref]
    unknown = [(i, f) for i, f in head if i not in known_ref]
    absent = _surely_absent(day, ref, [i for i, _ in unknown], [f for _, f in unknown]).tolist() if unknown else []
    new = [(i, f) for (i, f), sure in zip(unknown, absent) if sure]
    decided_share = sum(f for i, f in head if i in known_ref) + sum(f for _, f in new)
    new_share = sum(f for _, f in new)
    cut = min(day.kmv_threshold, ref.kmv_threshold)
    below = kmv_hash(day.kmv_ids).astype(np.float64) / _TWO64 <= cut
    rest = below & ~np.isin(day.kmv_ids, known + [i for i, _ in new]) & (day.kmv_counts > 0)
    rows = float(day.kmv_counts[rest].sum())
    unseen = float(day.kmv_counts[rest & ~np.isin(day.kmv_ids, ref.kmv_ids)].sum())
    rest_rate = unseen / rows if rows else (new_share / decided_share if decided_share else 0.0)
    return min(1.0, new_share + max(0.0, 1.0 - decided_share) * rest_rate)


# ------------------------------------------------------------------------------------------------
# the rule


def _check(findings: List[Finding], thresholds: Thresholds, stats: Dict[str, Dict[str, float]], feature: str,
           statistic: str, value: float, detail: str, level_feature: Optional[str] = None) -> None:
    stats.setdefault(feature, {})[statistic] = value
    level = thresholds.level(statistic, level_feature)
    severity = level.severity(value)
    if severity is not None:
        threshold = level.fail if severity == "fail" else level.warn
        findings.append(Finding(severity, feature, statistic, value, threshold, detail))


def _schema(day: DataProfile, day_spec: Optional[Mapping[str, Any]], ref: DataProfile,
            ref_spec: Optional[Mapping[str, Any]]) -> List[Finding]:
    """Features, kinds, transforms and id spaces of the day against the reference."""
    out: List[Finding] = []
    kinds = {**{n: "dense" for n in day.dense}, **{n: "categorical" for n in day.categorical}}
    ref_kinds = {**{n: "dense" for n in ref.dense}, **{n: "categorical" for n in ref.categorical}}
    for name, kind in ref_kinds.items():
        if name not in kinds:
            out.append(Finding("fail", name, "schema", f"missing: a {kind} feature of the reference", None, ""))
        elif kinds[name] != kind:
            out.append(Finding("fail", name, "schema", f"{kinds[name]}, {kind} in the reference", None, ""))
    for name, kind in kinds.items():
        if name not in ref_kinds:
            out.append(Finding("fail", name, "schema", f"new {kind} feature: not in the reference", None, ""))
    if day.label != ref.label:
        out.append(Finding("fail", day.label, "schema", f"label column, {ref.label!r} in the reference", None, ""))
    out += _spec_changes(day_spec or {}, ref_spec or {})
    return out


def _spec_changes(day: Mapping[str, Any], ref: Mapping[str, Any]) -> List[Finding]:
    """Per feature: another id space fails (no id means the same), another transform warns."""
    out: List[Finding] = []
    for kind, key, severity in (("categorical", "hash_buckets", "fail"), ("dense", "transform", "warn"),
                                ("categorical", "multivalued", "fail")):
        before = {f["name"]: f.get(key) for f in ref.get(kind) or []}
        for f in day.get(kind) or []:
            if f["name"] in before and before[f["name"]] != f.get(key):
                out.append(Finding(severity, f["name"], "schema", f"{key} {f.get(key)!r}, {before[f['name']]!r} in "
                                                                  f"the reference", None, ""))
    return out


def _dense_checks(findings: List[Finding], thresholds: Thresholds, stats: Dict[str, Dict[str, float]],
                  name: str, day: DenseSketch, ref: DenseSketch) -> None:
    m, m0 = day.missing / day.rows if day.rows else 0.0, ref.missing / ref.rows if ref.rows else 0.0
    _check(findings, thresholds, stats, name, "missing_rate_jump", abs(m - m0),
           f"missing rate {m:.4f}, reference {m0:.4f}", name)
    q, q0 = day.quantiles([0.5, 0.99]), ref.quantiles([0.5, 0.99])
    _check(findings, thresholds, stats, name, "js_divergence", js_divergence(day.histogram(), ref.histogram()),
           f"median {_num(q[0])}, reference {_num(q0[0])}; p99 {_num(q[1])}, reference {_num(q0[1])}", name)


def _id_checks(findings: List[Finding], thresholds: Thresholds, stats: Dict[str, Dict[str, float]],
               name: str, day: IdSketch, ref: IdSketch) -> None:
    m, m0 = day.missing / day.rows if day.rows else 0.0, ref.missing / ref.rows if ref.rows else 0.0
    _check(findings, thresholds, stats, name, "missing_rate_jump", abs(m - m0),
           f"missing rate {m:.4f}, reference {m0:.4f}", name)
    distance, raw, worst = linf_distance(day, ref)
    _check(findings, thresholds, stats, name, "linf_distance", distance,
           f"id {worst}: frequency {raw:.4f} apart, {day.sample_rows} and {ref.sample_rows} rows sampled", name)
    rate = new_id_rate(day, ref)
    _check(findings, thresholds, stats, name, "new_id_rate", rate,
           f"{day.distinct()} distinct ids, reference {ref.distinct()}", name)


def _num(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


def decide(day: DataProfile, reference: Optional[DataProfile], thresholds: Optional[Thresholds] = None, *,
           day_spec: Optional[Mapping[str, Any]] = None, reference_spec: Optional[Mapping[str, Any]] = None,
           with_label: bool = True, with_rows: bool = True) -> Verdict:
    """Compare ``day`` with ``reference`` and decide (see the module docstring).

    Args:
        day: the profile to judge.
        reference: the profile it should look like; ``None`` (no champion yet): nothing to compare,
            the verdict is ``pass``.
        thresholds: the levels (default: :data:`ctr_model.validation_spec.DEFAULT_LEVELS`).
        day_spec, reference_spec: the feature specs the two were prepped with (their
            ``feature_spec`` entries), for the schema check.
        with_label: check the label rate (off for serving requests, which have none).
        with_rows: check the row count (off for serving requests: a log's size says nothing).
    """
    thresholds = thresholds if thresholds is not None else Thresholds()
    if reference is None:
        return Verdict("pass", (), {}, reference=False)
    findings = _schema(day, day_spec, reference, reference_spec)
    stats: Dict[str, Dict[str, float]] = {}
    if with_rows:
        _check(findings, thresholds, stats, "(rows)", "rows_drop", max(0.0, 1.0 - day.rows / max(reference.rows, 1)),
               f"{day.rows} rows, reference {reference.rows}")
    if with_label:
        _check(findings, thresholds, stats, "(label)", "label_rate_shift",
               label_rate_shift(day.label_rate, reference.label_rate),
               f"label rate {day.label_rate:.4f}, reference {reference.label_rate:.4f}")
    for name, sketch in day.dense.items():
        if name in reference.dense:
            _dense_checks(findings, thresholds, stats, name, sketch, reference.dense[name])
    for name, ids in day.categorical.items():
        if name in reference.categorical:
            _id_checks(findings, thresholds, stats, name, ids, reference.categorical[name])
    findings.sort(key=lambda f: (f.severity != "fail", -(f.value if isinstance(f.value, float) else 2.0)))
    verdict = "fail" if any(f.severity == "fail" for f in findings) else "warn" if findings else "pass"
    return Verdict(verdict, tuple(findings), stats)
