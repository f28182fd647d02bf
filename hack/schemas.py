"""JSON schemas for kubeconform (``make lint``, hack/kubeconform.py), made here: there is
no download of schemas.

- The built-in kinds come from ``/openapi/v2`` of the pinned kube-apiserver
  (hack/testenv; started alone with etcd for a few seconds), written once into the
  binaries' cache directory, which is keyed by the Kubernetes version.
- Our CRDs come from the ``openAPIV3Schema`` of config/crd, on every run.

Both are laid out as ``<group>/<kind>-<version>.json`` (the core group as ``v1``),
kubeconform's ``-schema-location DIR/{{ .Group }}/{{ .ResourceKind }}-{{
.ResourceAPIVersion }}.json``. Every schema is strict: an object with declared
properties accepts no other (a misspelt field fails), as the API server's own field
validation does.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

LOCATION = "{{ .Group }}/{{ .ResourceKind }}-{{ .ResourceAPIVersion }}.json"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


def _path(out: Path, group: str, version: str, kind: str) -> Path:
    return out / (group or version) / f"{kind.lower()}-{version}.json"


MAPS = ("properties", "patternProperties", "definitions")  # name -> schema
ONE = ("items", "additionalProperties", "not")  # schema (or bool)
MANY = ("allOf", "anyOf", "oneOf", "items")  # [schema]


def _strict(node: Any) -> Any:
    """The schema with int-or-string made explicit, nullable spelt as JSON schema
    does, and ``additionalProperties: false`` on every object with properties (not
    where unknown fields are kept on purpose). Walks schemas only: a property's name
    (JSONSchemaProps has one called ``x-kubernetes-int-or-string``) is no keyword."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in MAPS and isinstance(v, dict):
            out[k] = {name: _strict(s) for name, s in v.items()}
        elif k in MANY and isinstance(v, list):
            out[k] = [_strict(s) for s in v]
        elif k in ONE and isinstance(v, dict):
            out[k] = _strict(v)
        else:
            out[k] = v
    if out.get("format") == "int-or-string" or out.pop("x-kubernetes-int-or-string", None) is True:
        out.pop("type", None)
        out.pop("format", None)
        out.update(INT_OR_STRING)
    if out.pop("nullable", None) is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref.removeprefix("#/definitions/"))
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def _closure(name: str, defs: dict[str, Any]) -> dict[str, Any]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in defs:
            continue
        seen.add(n)
        found: set[str] = set()
        _refs(defs[n], found)
        todo.extend(found - seen)
    return {n: defs[n] for n in sorted(seen)}


def from_openapi_v2(doc: dict[str, Any], out: Path) -> int:
    """One standalone schema per kind of the document; returns how many."""
    defs = {n: _strict(d) for n, d in doc["definitions"].items()}
    if QUANTITY in defs:  # "1" and 1 are both quantities
        defs[QUANTITY] = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    count = 0
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            schema = {**d, "definitions": _closure(name, defs)}
            p = _path(out, gvk["group"], gvk["version"], gvk["kind"])
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(schema))
            count += 1
    return count


def from_crds(crd_files: list[Path], out: Path) -> int:
    count = 0
    for f in crd_files:
        for crd in yaml.safe_load_all(f.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for v in spec["versions"]:
                schema = _strict(v["schema"]["openAPIV3Schema"])
                props = schema.setdefault("properties", {})
                props.setdefault("apiVersion", {"type": "string"})
                props.setdefault("kind", {"type": "string"})
                props["metadata"] = {"type": "object"}
                p = _path(out, spec["group"], v["name"], spec["names"]["kind"])
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(json.dumps(schema))
                count += 1
    return count


def builtin(bin_dir: Path) -> Path:
    """The built-in kinds' schemas of the kube-apiserver in ``bin_dir`` (made once,
    kept beside the binaries)."""
    out = bin_dir / "schemas-openapi-v2"
    if (out / ".complete").exists():
        return out
    from hack.testenv import ControlPlane  # only when they have to be made

    with tempfile.TemporaryDirectory(prefix="schemas-") as tmp:
        with ControlPlane(Path(tmp) / "cp", bin_dir=bin_dir, api_only=True) as cp:
            status, body = cp.api("GET", "/openapi/v2")
        if status != 200:
            raise SystemExit(f"kube-apiserver /openapi/v2: HTTP {status}")
        staging = Path(tmp) / "schemas"
        n = from_openapi_v2(body, staging)
        (staging / ".complete").write_text(f"{n} kinds\n")
        # Into place in one rename: a concurrent run (lint beside the tests) sees the
        # whole directory or none, and the loser of the race drops its copy.
        part = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=bin_dir))
        shutil.copytree(staging, part, dirs_exist_ok=True)
        if out.exists() and not (out / ".complete").exists():
            shutil.rmtree(out, ignore_errors=True)  # a leftover of an interrupted run
        try:
            part.rename(out)
        except OSError:
            shutil.rmtree(part, ignore_errors=True)
    return out
