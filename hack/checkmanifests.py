"""checkov on every manifest we ship, with our waivers (``make lint``).

Scans ``config/`` and, when a ``helm`` binary is given, both charts rendered with
their default values and with every optional part on (webhook with the certificate
Job and with cert-manager, ServiceMonitor, dashboard, the namespaced manager). Fails
when checkov reports a finding that ``hack/checkov-waivers.yaml`` does not waive, or
when a waiver matches nothing (so fixed findings leave the list). checkov runs from
its own virtualenv (``.venv-checkov``; its ``packaging<24`` pin conflicts with
pytest's).

    python -m hack.checkmanifests --checkov .venv-checkov/bin/checkov [--helm PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WAIVERS = ROOT / "hack" / "checkov-waivers.yaml"

# Chart renders scanned besides the defaults: every optional part switched on.
CHART_VARIANTS: dict[str, list[list[str]]] = {
    "gpu-orchestrator": [
        [],
        ["--set", "webhook.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
         "--set", "grafana.dashboard.enabled=true"],
        ["--set", "webhook.enabled=true", "--set", "webhook.certificates.mode=certManager"],
        ["--set", "manager.namespaces={team-a,team-b}", "--set", "metrics.secure=false"],
    ],
    "gpu-scheduler-check": [[]],
}


@dataclass(frozen=True)
class Finding:
    check: str
    name: str
    resource: str  # Kind.name
    where: str

    def __str__(self) -> str:
        return f"{self.check} {self.resource} ({self.where}): {self.name}"


def load_waivers(path: Path = WAIVERS) -> dict[tuple[str, str], str]:
    """(check, Kind.name) -> reason; every entry must say why."""
    doc = yaml.safe_load(path.read_text())
    out: dict[tuple[str, str], str] = {}
    for w in doc["waivers"]:
        reason = (w.get("reason") or "").strip()
        if not reason:
            raise SystemExit(f"{path}: waiver {w['check']} has no reason")
        resources = w["resource"] if isinstance(w["resource"], list) else [w["resource"]]
        for r in resources:
            out[(w["check"], r)] = reason
    return out


def resource_key(checkov_resource: str) -> str:
    """checkov's ``Kind.namespace.name[.labels]`` -> ``Kind.name``."""
    parts = checkov_resource.split(".")
    return f"{parts[0]}.{parts[2]}" if len(parts) >= 3 else checkov_resource


def run_checkov(checkov: str, directory: Path, label: str) -> list[Finding]:
    proc = subprocess.run(
        [checkov, "-d", str(directory), "--framework", "kubernetes", "-o", "json", "--quiet",
         "--skip-download"], capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise SystemExit(f"checkov failed on {label} ({proc.returncode}):\n{proc.stderr[-3000:]}")
    reports = json.loads(proc.stdout)
    if isinstance(reports, dict):
        reports = [reports]
    found = []
    for report in reports:
        for f in report.get("results", {}).get("failed_checks", []):
            found.append(Finding(f["check_id"], f.get("check_name", ""),
                                 resource_key(f["resource"]), f"{label}{f['file_path']}"))
    return found


def render_charts(helm: str, out: Path) -> None:
    for chart, variants in CHART_VARIANTS.items():
        for i, extra in enumerate(variants):
            proc = subprocess.run(
                [helm, "template", "gpu", str(ROOT / "charts" / chart), "--namespace",
                 "gpu-orchestrator-system", *extra], capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"helm template {chart} {' '.join(extra)}:\n{proc.stderr}")
            (out / f"{chart}-{i}.yaml").write_text(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.checkmanifests", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkov", required=True)
    p.add_argument("--helm", default="", help="render and scan the charts too")
    a = p.parse_args(argv)
    waivers = load_waivers()
    findings = run_checkov(a.checkov, ROOT / "config", "")
    if a.helm:
        with tempfile.TemporaryDirectory() as tmp:
            render_charts(a.helm, Path(tmp))
            findings += run_checkov(a.checkov, Path(tmp), "charts:")
    used = set()
    bad = []
    for f in findings:
        key = (f.check, f.resource)
        if key in waivers:
            used.add(key)
        else:
            bad.append(f)
    stale = sorted(set(waivers) - used)
    for f in sorted(set(bad), key=str):
        print(f"checkov: {f}", file=sys.stderr)
    for check, res in stale:
        print(f"checkov: waiver {check} {res} matches no finding any more: remove it from "
              f"{WAIVERS.relative_to(ROOT)}", file=sys.stderr)
    waived = len(findings) - len(bad)
    print(f"checkov: {len(findings)} finding(s), {waived} waived with a reason, "
          f"{len(set(bad))} not waived, {len(stale)} stale waiver(s)")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())
