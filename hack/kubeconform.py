"""kubeconform on every manifest we ship (``make lint``): an independent check that each
object is what the API server of the pinned Kubernetes accepts, field by field.

Validated: ``kubectl kustomize`` of config/ and of each of its other entry points
(config/webhook with and without its cert-manager component, config/prometheus,
config/namespaced, the samples and the monitoring samples), the seed StatefulSet
sample, and both charts rendered as hack/checkmanifests.py renders them for checkov
(defaults, every optional part on), including the ``helm test`` hooks.

Schemas are made locally (hack/schemas.py): the built-in kinds from the pinned
kube-apiserver's ``/openapi/v2``, our CRDs from config/crd; nothing is downloaded.
The kinds of other projects' CRDs (the Prometheus Operator's, cert-manager's) have no
schema here: they are listed in SKIPPED and skipped by name, and any other kind
without a schema fails.

    python -m hack.kubeconform --kubeconform PATH --testenv DIR [--helm PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hack import schemas
from hack.checkmanifests import render_charts

ROOT = Path(__file__).resolve().parent.parent

# apiVersion/Kind of the objects whose CRDs belong to other projects.
SKIPPED = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "monitoring.coreos.com/v1alpha1/AlertmanagerConfig",
    "cert-manager.io/v1/Issuer",
    "cert-manager.io/v1/Certificate",
)

KUSTOMIZED = ("config", "config/webhook", "config/prometheus", "config/namespaced",
              "config/samples", "config/samples/monitoring")
PLAIN = ("config/samples/gpu-scheduler-check-statefulset.yaml",)


def kustomize(path: Path | str) -> str:
    proc = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kubectl kustomize {path}:\n{proc.stderr}")
    return proc.stdout


def write_manifests(out: Path, helm: str) -> list[Path]:
    """Every manifest to validate, one file per source, in ``out``."""
    files = []
    for rel in KUSTOMIZED:
        f = out / (rel.replace("/", "_") + ".yaml")
        f.write_text(kustomize(ROOT / rel))
        files.append(f)
    # config/webhook with its cert-manager component, as its header says to use it.
    comp = out / "certmanager"
    comp.mkdir()
    base = Path(os.path.relpath(ROOT / "config" / "webhook", comp))
    (comp / "kustomization.yaml").write_text(json.dumps(
        {"resources": [str(base)], "components": [str(base / "certmanager")]}))
    f = out / "config_webhook_certmanager.yaml"
    f.write_text(kustomize(comp))
    files.append(f)
    for rel in PLAIN:
        f = out / rel.replace("/", "_")
        f.write_text((ROOT / rel).read_text())
        files.append(f)
    if helm:
        charts = out / "charts"
        charts.mkdir()
        render_charts(helm, charts)
        files += sorted(charts.glob("*.yaml"))
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.kubeconform", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconform", required=True, help="hack/testenv/kubeconform.sh builds it")
    p.add_argument("--testenv", required=True, type=Path,
                   help="the pinned control-plane binaries (hack/testenv/build.sh)")
    p.add_argument("--helm", default="", help="render and validate the charts too")
    a = p.parse_args(argv)
    builtin = schemas.builtin(a.testenv)
    with tempfile.TemporaryDirectory(prefix="kubeconform-") as tmp:
        crds = Path(tmp) / "crd-schemas"
        schemas.from_crds(sorted((ROOT / "config" / "crd").glob("*.yaml")), crds)
        manifests = Path(tmp) / "manifests"
        manifests.mkdir()
        files = write_manifests(manifests, a.helm)
        proc = subprocess.run(
            [a.kubeconform, "-strict", "-summary", "-output", "text",
             "-schema-location", f"{builtin}/{schemas.LOCATION}",
             "-schema-location", f"{crds}/{schemas.LOCATION}",
             "-skip", ",".join(SKIPPED), *map(str, files)],
            capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).replace(str(manifests) + "/", "")
    print(out.rstrip())
    if proc.returncode != 0:
        print(f"kubeconform: failed (exit {proc.returncode}); skipped by kind, having no "
              f"schema here: {', '.join(SKIPPED)}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
