"""The ``validation:`` section of a feature spec: the thresholds of the data checks, per statistic and
per feature, with defaults (docs/validation.md says what each statistic measures and why its default).

Why in the spec: the thresholds belong to the data's layout (a column known to be noisy, an id column
that churns), so they travel with it; a pipeline parameter (``validation_thresholds``, the same shape
as JSON) overrides them for one run. Every problem is reported with the spec's others, in one line.

Shape::

    validation:
      rows_drop: {warn: 0.3, fail: 0.5}   # a level may be null (never)
      js_divergence: 0.4                  # a number: the fail level, warn at half of it
      new_id_rate: off                    # off (or null): not checked
      features:
        I5: {js_divergence: 0.6}
        C3: {new_id_rate: {warn: 0.4, fail: 0.8}}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_model.checks import is_real

__all__ = ["STATISTICS", "DEFAULT_LEVELS", "Level", "Thresholds", "check_section", "merge_sections"]

#: Every statistic a threshold can be set for, and what it applies to.
STATISTICS: Dict[str, str] = {
    "rows_drop": "dataset",
    "label_rate_shift": "dataset",
    "missing_rate_jump": "feature",
    "js_divergence": "dense",
    "linf_distance": "categorical",
    "new_id_rate": "categorical",
}

#: (warn, fail) of each statistic when neither the spec nor the run sets it (docs/validation.md).
DEFAULT_LEVELS: Dict[str, Tuple[Optional[float], Optional[float]]] = {
    "rows_drop": (0.3, 0.5),
    "label_rate_shift": (0.3, 0.5),
    "missing_rate_jump": (0.05, 0.2),
    "js_divergence": (0.1, 0.3),
    "linf_distance": (0.1, 0.3),
    "new_id_rate": (0.2, 0.5),
}

_OFF = ("off", None)


@dataclass(frozen=True)
class Level:
    """When a statistic's value becomes a finding: above ``warn`` a warning, above ``fail`` a failure
    (``None``: never)."""

    warn: Optional[float]
    fail: Optional[float]

    def severity(self, value: float) -> Optional[str]:
        """``"fail"``, ``"warn"`` or ``None`` for ``value``."""
        if self.fail is not None and value > self.fail:
            return "fail"
        if self.warn is not None and value > self.warn:
            return "warn"
        return None


def _level(value: Any) -> Level:
    """The level a checked section value stands for."""
    if isinstance(value, str) or value is None:
        return Level(None, None)
    if isinstance(value, Mapping):
        return Level(*(None if value.get(k) in _OFF else float(value[k]) for k in ("warn", "fail")))
    return Level(float(value) / 2.0, float(value))


class Thresholds:
    """The resolved thresholds of one validation: defaults, then the spec's section, then the run's
    override (each given as a checked section)."""

    def __init__(self, *sections: Optional[Mapping[str, Any]]):
        merged = merge_sections(*sections)
        self.section = merged
        self._global = {s: Level(*DEFAULT_LEVELS[s]) for s in STATISTICS}
        self._global.update({k: _level(v) for k, v in merged.items() if k in STATISTICS})
        self._features = {name: {k: _level(v) for k, v in per.items()}
                          for name, per in (merged.get("features") or {}).items()}

    def level(self, statistic: str, feature: Optional[str] = None) -> Level:
        """The level of ``statistic`` (for ``feature``, if it sets its own)."""
        if feature is not None and statistic in self._features.get(feature, {}):
            return self._features[feature][statistic]
        return self._global[statistic]

    def to_dict(self) -> Dict[str, Any]:
        """The levels in force: every statistic's, and the features' own."""
        def doc(level: Level) -> Dict[str, Optional[float]]:
            return {"warn": level.warn, "fail": level.fail}
        return {"statistics": {s: doc(level) for s, level in self._global.items()},
                "features": {f: {s: doc(level) for s, level in per.items()} for f, per in self._features.items()}}


def merge_sections(*sections: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Later sections over earlier ones; ``features`` merged per feature and statistic."""
    out: Dict[str, Any] = {}
    features: Dict[str, Dict[str, Any]] = {}
    for section in sections:
        for key, value in (section or {}).items():
            if key == "features":
                for name, per in (value or {}).items():
                    features.setdefault(name, {}).update(per)
            else:
                out[key] = value
    if features:
        out["features"] = features
    return out


def _check_value(value: Any, where: str, problems: List[Tuple[str, Any, str]]) -> None:
    fix = "use a number (the fail level; warn at half), {warn: W, fail: F} (either may be null) or off"
    if value in _OFF:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k not in ("warn", "fail"):
                problems.append((f"{where}.{k}", v, "unknown key; use warn and fail"))
            elif v not in _OFF and not (is_real(v, 0.0, 1e9)):
                problems.append((f"{where}.{k}", v, "use a number >= 0, or null"))
        warn, fail = value.get("warn"), value.get("fail")
        if is_real(warn, 0.0, 1e9) and is_real(fail, 0.0, 1e9) and warn > fail:   # type: ignore[operator]
            problems.append((where, dict(value), "warn above fail: the warning could never show; set warn <= fail"))
        return
    if not is_real(value, 0.0, 1e9):
        problems.append((where, value, fix))


def check_section(section: Any, dense: Sequence[str], categorical: Sequence[str],
                  where: str = "validation") -> List[Tuple[str, Any, str]]:
    """Every problem of a ``validation:`` section as ``(key, value, fix)``: unknown statistics,
    features the spec does not declare, a statistic that does not apply to a feature's kind, values
    that are not thresholds."""
    import difflib

    problems: List[Tuple[str, Any, str]] = []
    if section is None:
        return problems
    if not isinstance(section, Mapping):
        return [(where, section, "write a mapping of statistics (and features) to thresholds")]
    kinds = {**{n: "dense" for n in dense}, **{n: "categorical" for n in categorical}}
    for key, value in section.items():
        if key == "features":
            _check_features(value, kinds, f"{where}.features", problems)
        elif key in STATISTICS:
            _check_value(value, f"{where}.{key}", problems)
        else:
            close = difflib.get_close_matches(str(key), list(STATISTICS) + ["features"], n=1)
            problems.append((f"{where}.{key}", value, f"unknown statistic; {'did you mean ' + repr(close[0]) + '?' if close else 'use one of ' + ', '.join(STATISTICS)}"))
    return problems


def _check_features(value: Any, kinds: Mapping[str, str], where: str, problems: List[Tuple[str, Any, str]]) -> None:
    if not isinstance(value, Mapping):
        problems.append((where, value, "write a mapping of feature names to {statistic: threshold}"))
        return
    for name, per in value.items():
        if name not in kinds:
            problems.append((f"{where}.{name}", per, "not a feature of this spec; name a dense or categorical feature"))
            continue
        if not isinstance(per, Mapping):
            problems.append((f"{where}.{name}", per, "write a mapping of statistics to thresholds"))
            continue
        for stat, v in per.items():
            applies = STATISTICS.get(stat)
            if applies not in ("feature", kinds[name]):
                own = [s for s, a in STATISTICS.items() if a in ("feature", kinds[name])]
                problems.append((f"{where}.{name}.{stat}", v, f"not a statistic of a {kinds[name]} feature; use "
                                 f"{', '.join(own)}"))
            else:
                _check_value(v, f"{where}.{name}.{stat}", problems)
