"""Helpers shared by the alert and dashboard tests: the metric names a PromQL
expression selects, and the series names the code exports."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

# Series Prometheus itself makes (scrape health), not the code.
PROMETHEUS_BUILTINS = frozenset({"up", "scrape_duration_seconds", "ALERTS"})

_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "atan2", "inf", "nan", "Inf", "NaN",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$\w+")
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*,")


def metric_names(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (Grafana variables allowed)."""
    s = _GRAFANA_VAR.sub("1", expr)
    s = _STRING.sub('""', s)
    s = _BRACES.sub("", s)
    s = _BRACKETS.sub("", s)
    s = _GROUPING.sub("", s)
    names = set()
    for m in _IDENT.finditer(s):
        name, call = m.group(1), m.group(2)
        if call or name in _KEYWORDS:
            continue
        names.add(name)
    return names


def label_values_metric(query: str) -> set[str]:
    """The metric of a Grafana ``label_values(metric, label)`` variable query."""
    return set(_LABEL_VALUES.findall(query))


def _series_names(registry: CollectorRegistry) -> set[str]:
    out: set[str] = set()
    for fam in registry.collect():
        if fam.type == "counter":
            out.add(fam.name + "_total")
        elif fam.type == "histogram":
            out |= {fam.name + s for s in ("_bucket", "_sum", "_count")}
        elif fam.type == "summary":
            out |= {fam.name, fam.name + "_sum", fam.name + "_count"}
        else:
            out.add(fam.name)
    return out


def exported_names() -> set[str]:
    """Series names the manager (framework + domain metrics) and the agent export,
    read from their registries, not from a hand-kept list."""
    from prometheus_client import REGISTRY

    import internal.metrics  # noqa: F401  (registers the domain metrics)
    import runtime.metrics  # noqa: F401  (registers the framework metrics)
    from internal.agent.metrics import AgentMetrics
    from internal.metrics.domain import METRIC_NAMES

    names = _series_names(REGISTRY) | set(METRIC_NAMES)
    names |= _series_names(AgentMetrics("node-test").registry)
    return names


def histogram_base(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
