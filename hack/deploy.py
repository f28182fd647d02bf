"""``make deploy``: a kustomize overlay that installs config/ with your images.

Writes ``<out>/kustomization.yaml`` with ``resources: [../config]`` (and
``../config/webhook`` with ``--webhook``) and an ``images:`` entry per image, as
kubebuilder's ``make deploy IMG=...`` does with ``kustomize edit set image``, but
without editing config/. ``kubectl apply -k <out>`` then installs it.

    python -m hack.deploy --img registry.example.com/gpu-orchestrator:0.1.0 --out .deploy
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def image_entry(name: str, ref: str) -> dict[str, str]:
    """kustomize's images: entry that replaces image ``name`` with ``ref``
    (``repo``, ``repo:tag`` or ``repo@sha256:...``; the repository may have a port)."""
    if not ref or any(c.isspace() for c in ref):
        raise ValueError(f"not an image reference: {ref!r}")
    entry = {"name": name}
    if "@" in ref:
        repo, digest = ref.split("@", 1)
        if not digest.startswith("sha256:"):
            raise ValueError(f"{ref!r}: a digest is sha256:<hex>")
        entry.update(newName=repo, digest=digest)
        return entry
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        entry.update(newName=repo, newTag=tag)
    else:
        entry["newName"] = ref
    return entry


def overlay(img: str, check_img: str, out: Path, webhook: bool) -> dict:
    rel = Path(os.path.relpath(ROOT / "config", out.resolve()))
    resources = [str(rel)] + ([str(rel / "webhook")] if webhook else [])
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": resources,
        "images": [image_entry("gpu-orchestrator", img),
                   image_entry("gpu-scheduler-check", check_img)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.deploy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--img", required=True)
    p.add_argument("--check-img", default="gpu-scheduler-check:0.1.0")
    p.add_argument("--webhook", action="store_true", help="also install config/webhook")
    p.add_argument("--out", type=Path, default=Path(".deploy"))
    a = p.parse_args(argv)
    try:
        doc = overlay(a.img, a.check_img, a.out, a.webhook)
    except ValueError as exc:
        print(f"deploy: IMG: {exc}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "kustomization.yaml").write_text(
        "# Written by `make deploy` (python -m hack.deploy); regenerated each time.\n"
        + yaml.safe_dump(doc, sort_keys=False))
    print(f"deploy: {a.out}/kustomization.yaml: gpu-orchestrator -> {a.img}"
          + (" (with the webhook)" if a.webhook else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
