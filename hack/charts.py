"""Copies the parts of config/ that the gpu-orchestrator chart uses as they are into
charts/gpu-orchestrator/files/config/, so that config/ stays the one source of them.

A chart can read only its own files, so the copies are committed; this module
rewrites them and ``--check`` fails when one differs from config/ (run by
``make lint`` and tests/unit/install). The chart's Deployments, DaemonSet, Services
and webhook configuration are templates (they take values); a test renders the
chart and compares them with ``kubectl kustomize config``
(tests/integration/install/test_chart_matches_config.py).

    python -m hack.charts          # rewrite the copies
    python -m hack.charts --check  # exit 1 when a copy is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART_FILES = ROOT / "charts" / "gpu-orchestrator" / "files" / "config"

# Paths under config/ copied byte for byte.
# What stays a template instead (it takes values): the Deployments, the DaemonSet, the
# Services, the webhook configuration, the certificate Job and CronJob of
# webhook/certs_job.yaml (image, namespace; the file's RBAC and Secret are copied),
# the manager's NetworkPolicy (who scrapes) and config/namespaced's RoleBindings (one
# per namespace in manager.namespaces).
COPIED = (
    "crd/gpu.orchestrator.dev_gpunodes.yaml",
    "crd/gpu.orchestrator.dev_gpuqueues.yaml",
    "crd/gpu.orchestrator.dev_gpuworkloads.yaml",
    "crd/gpuworkload-validating-admission-policy.yaml",
    "crd/tenant-isolation-admission-policies.yaml",
    "admission-finalizer/gpuworkload-finalizer-policy.yaml",
    "rbac/service_account.yaml",
    "rbac/role.yaml",
    "rbac/children_role.yaml",
    "rbac/role_binding.yaml",
    "rbac/user_roles.yaml",
    "rbac/dra_role.yaml",
    "agent/service_account.yaml",
    "agent/role.yaml",
    "agent/role_binding.yaml",
    "webhook/rbac.yaml",
    "webhook/certs_job.yaml",
    "webhook/network_policy.yaml",
    "prometheus/rules.yaml",
    "grafana/gpu-orchestrator.json",
)


def stale() -> list[str]:
    """The copies that differ from config/ (or are missing), and stray files."""
    out = []
    for rel in COPIED:
        src, dst = ROOT / "config" / rel, CHART_FILES / rel
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            out.append(rel)
    known = {CHART_FILES / rel for rel in COPIED}
    out += [str(p.relative_to(CHART_FILES)) for p in sorted(CHART_FILES.rglob("*"))
            if p.is_file() and p not in known]
    return out


def write() -> None:
    for rel in COPIED:
        dst = CHART_FILES / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((ROOT / "config" / rel).read_bytes())
    known = {CHART_FILES / rel for rel in COPIED}
    for p in CHART_FILES.rglob("*"):
        if p.is_file() and p not in known:
            p.unlink()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        bad = stale()
        if bad:
            print("charts/gpu-orchestrator/files/config differs from config/ for: "
                  + ", ".join(bad) + "\nrun `python -m hack.charts` (make charts)",
                  file=sys.stderr)
            return 1
        return 0
    if args:
        print(__doc__, file=sys.stderr)
        return 2
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
