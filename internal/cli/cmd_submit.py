"""``kubectl gpu submit FILE``: creates the GPUWorkload(s) of a YAML/JSON file
(``-`` for stdin), after checking them against the API's own rules (the models, the
admission policies' name and template rules in api/v1alpha1/door.py, the controller's
map check), so a mistake is reported with the field's name before anything reaches
the cluster. As ``kubectl apply``: the request asks for ``fieldValidation=Strict`` (an
unknown field is refused, not dropped), and a document whose namespace is not
``-n``'s is refused."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from api.v1alpha1 import door
from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import API_VERSION, GPUWorkload
from internal.cli.kube import EXIT_ERROR, CliError, Kube
from internal.cli.output import Printer
from internal.scheduling.mapparser import MapParseError, check_map_against, parse_scheduling_map

HELP = "create the GPUWorkload(s) of a YAML file ('-' reads stdin)"
#: objects go to one namespace: -A is refused
ALL_NAMESPACES = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML or JSON file with one or more GPUWorkloads; - for stdin")
    p.add_argument("--dry-run", action="store_true", help="server-side dry run")


def yaml_problem(e: yaml.YAMLError) -> str:
    """One line: ``line 3, column 7: mapping values are not allowed here``."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def load(path: str) -> list[dict]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_ERROR) from e
    except UnicodeDecodeError as e:
        raise CliError(f"{path} is not a YAML or JSON file: not UTF-8 text (byte "
                       f"0x{e.object[e.start]:02x} at offset {e.start})", EXIT_ERROR) from e
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise CliError(f"{path} is not valid YAML: {yaml_problem(e)}", EXIT_ERROR) from e
    out: list[dict] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "List":
            out.extend(d.get("items") or [])
        else:
            out.append(d)
    if not out:
        raise CliError(f"{path} holds no object", EXIT_ERROR)
    for i, d in enumerate(out):
        where = f"{path} (document {i + 1})"
        if not isinstance(d, dict):
            raise CliError(f"{where}: not an object", EXIT_ERROR)
        if d.get("kind") != "GPUWorkload" or d.get("apiVersion") != API_VERSION:
            raise CliError(f"{where}: expected apiVersion {API_VERSION}, kind GPUWorkload; "
                           f"got {d.get('apiVersion')}, {d.get('kind')}", EXIT_ERROR)
        if not (d.get("metadata") or {}).get("name") and not (d.get("metadata") or {}).get(
                "generateName"):
            raise CliError(f"{where}: metadata.name is required", EXIT_ERROR)
        try:
            GPUWorkload.model_validate(d)
        except ValidationError as e:
            lines = "".join(f"\n  spec.{'.'.join(str(x) for x in err['loc'][1:])}: {err['msg']}"
                            if err["loc"] and err["loc"][0] == "spec"
                            else f"\n  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
                            for err in e.errors())
            raise CliError(f"{where}: invalid GPUWorkload:{lines}", EXIT_ERROR) from e
        problems = door.refusals(d) + map_problems(d)
        if problems:
            raise CliError(f"{where}: " + "; ".join(problems), EXIT_ERROR)
        d.pop("status", None)
    return out


def map_problems(d: dict) -> list[str]:
    """The controller's map check (spec.schedulingMap, else the annotation): what it
    would answer with InvalidMap."""
    spec = d.get("spec") or {}
    field, text = "spec.schedulingMap", spec.get("schedulingMap")
    if not text:
        field = f"metadata.annotations[{SCHEDULING_MAP_ANNOTATION}]"
        text = ((d.get("metadata") or {}).get("annotations") or {}).get(
            SCHEDULING_MAP_ANNOTATION)
    if not isinstance(text, str) or not text.strip():
        return []
    try:
        entries = parse_scheduling_map(text)
    except MapParseError as e:
        return [f"{field}: {e}"]
    return [f"{field}: {p}" for p in check_map_against(entries, int(spec.get("replicas", 1)))]


def check_namespace(docs: list[dict], namespace: str | None) -> None:
    """kubectl's rule: with ``-n``, every document names that namespace or none."""
    for d in docs:
        own = (d.get("metadata") or {}).get("namespace")
        if namespace and own and own != namespace:
            raise CliError(f'the namespace from the provided object "{own}" does not match '
                           f'the namespace "{namespace}". You must pass '
                           f"'--namespace={own}' to perform this operation.", EXIT_ERROR)


def check(args: argparse.Namespace) -> None:
    """The file is read and checked before any request."""
    args.docs = load(args.file)
    check_namespace(args.docs, args.namespace)


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    docs = args.docs if getattr(args, "docs", None) is not None else load(args.file)
    kube.require_crds()
    created = []
    for d in docs:
        ns = args.namespace or (d.get("metadata") or {}).get("namespace") or kube.namespace
        d.setdefault("metadata", {})["namespace"] = ns
        obj = kube.create(d, ns, dry_run=args.dry_run, field_validation="Strict")
        created.append(obj)
        if not out.structured:
            suffix = " (server dry run)" if args.dry_run else ""
            out.line(f"gpuworkload.gpu.orchestrator.dev/{obj['metadata']['name']} created in "
                     f"namespace {ns}{suffix}")
    if out.structured:
        out.data(created[0] if len(created) == 1 else
                 {"apiVersion": "v1", "kind": "List", "items": created})
    return 0
