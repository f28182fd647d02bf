"""Writes config/prometheus/prometheusrule.yaml from config/prometheus/rules.yaml.

rules.yaml (a plain Prometheus rules file) is the source: promtool checks and tests
it. The PrometheusRule carries the same ``groups`` as its ``spec`` for the Prometheus
Operator. tests/unit/prometheus checks the two agree.

    python -m hack.prometheusrule          # rewrite
    python -m hack.prometheusrule --check  # exit 1 when out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "config" / "prometheus" / "rules.yaml"
OUT = ROOT / "config" / "prometheus" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from rules.yaml by `python -m hack.prometheusrule`; edit rules.yaml.
# Needs the Prometheus Operator's CRDs (monitoring.coreos.com/v1). Runbooks:
# docs/alerts.md.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-orchestrator",
            "namespace": "gpu-orchestrator-system",
            "labels": {"app.kubernetes.io/name": "gpu-orchestrator",
                       "app.kubernetes.io/component": "alerts"},
        },
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: python -m hack.prometheusrule", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
