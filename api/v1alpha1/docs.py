"""Render docs/api.md from the pydantic models (written by ``python -m api.v1alpha1.crd``)."""

from __future__ import annotations

import typing
from enum import Enum
from typing import Any

from pydantic import BaseModel

from api.v1alpha1 import changes, crd
from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.sharing import DOC_SECTION, SHARING_RULES
from api.v1alpha1.types import (
    API_VERSION,
    PRIORITY_NAMES,
    GPUDevice,
    GPUNode,
    GPUWorkload,
    GPUWorkloadSpec,
)


def _type_name(schema: dict[str, Any], tp: Any) -> str:
    tp = crd._strip_optional(tp)
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "enum"
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return f"list of {_type_name({}, item)}"
    if origin is dict:
        _k, v = typing.get_args(tp)
        return "object" if v is Any else f"map of {_type_name({}, v)}"
    if not schema:
        schema = crd.type_schema(tp)
    t = schema.get("type", "")
    fmt = schema.get("format")
    return "time (RFC 3339)" if fmt == "date-time" else (t or "object")


def _nested(tp: Any) -> list[type[BaseModel]]:
    tp = crd._strip_optional(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    out: list[type[BaseModel]] = []
    for a in typing.get_args(tp):
        out += _nested(a)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _model_section(model: type[BaseModel]) -> list[str]:
    lines = [f"### {model.__name__}", "", " ".join((model.__doc__ or "").split()), ""]
    lines += ["| field | type | default | rules | description |", "| --- | --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        schema = crd.field_schema(model, name, info)
        rules = []
        if "enum" in schema:
            rules.append("one of " + ", ".join(f"`{e}`" for e in schema["enum"]))
        for k, word in (("minimum", ">="), ("maximum", "<="), ("maxLength", "length <=")):
            if k in schema:
                rules.append(f"{word} {schema[k]}")
        if info.is_required():
            rules.append("required")
        for r in schema.get("x-kubernetes-validations", []):
            rules.append(r["message"])
        default = schema.get("default")
        lines.append(
            "| `{}` | {} | {} | {} | {} |".format(
                info.alias or name,
                _type_name(schema, info.annotation),
                "" if default is None else f"`{default}`",
                _cell("; ".join(rules)),
                _cell(info.description or ""),
            )
        )
    rules = _model_rules(model)
    if rules:
        lines += ["", "Cross-field rules:", ""]
        lines += [f"- {r['message']} (`{r['rule']}`)" for r in rules]
        if model is GPUWorkloadSpec:
            lines += ["", "In the CRD the rules above with no field of their own (all but "
                      "the schedulingMap strategy's) are one CEL rule "
                      "(api/v1alpha1/spec_rules.py): a spec breaking several of them is "
                      "refused once, with the message of each, joined by `; `."]
    lines.append("")
    return lines


def _model_rules(model: type[BaseModel]) -> list[dict[str, str]]:
    extra = model.model_config.get("json_schema_extra")
    rules = list(extra.get("x-kubernetes-validations", [])) if isinstance(extra, dict) else []
    if model is GPUWorkloadSpec:
        rules += [crd.MAP_INDEX_RULE, crd.MAP_STRATEGY_RULE, *SHARING_RULES]
    from api.v1alpha1.queues import QUEUE_RULES, GPUQueueSpec

    if model is GPUQueueSpec:
        rules += QUEUE_RULES
    return rules


def _columns_section() -> list[str]:
    """What ``kubectl get gw`` prints, from the CRD's printer columns."""
    cols = crd.workload_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    rows = [f"| {c['name'].upper()} | `{c['jsonPath']}` | {_cell(c.get('description', ''))} |"
            for c in cols if not c.get("priority")]
    wide = [f"| {c['name'].upper()} (`-o wide`) | `{c['jsonPath']}` | "
            f"{_cell(c.get('description', ''))} |" for c in cols if c.get("priority")]
    return ["## `kubectl get gw`", "",
            "| column | from | what |", "| --- | --- | --- |", *rows, *wide, ""]


def _changes_section() -> list[str]:
    """'Changing a workload', from the table in changes.py."""
    out = [
        "## Changing a workload",
        "",
        "Every edit of a spec field is either applied or refused; none is ignored. "
        "Refused edits fail at admission (`kubectl edit`, `apply`, `patch` all get the "
        "message below, naming the field) and change nothing. Applied edits that need "
        "new children restart the workload: the controller deletes its Pods (or Jobs), "
        "places it again under the new spec, and creates new children. While it does, "
        f"the `Scheduled` condition is `False` with reason `{changes.SPEC_CHANGED_REASON}` "
        "and a message naming what changed (e.g. `replicas 2 -> 3`), a "
        f"`{changes.SPEC_CHANGED_REASON}` Event is recorded, `status.observedGeneration` "
        "moves to the new generation, and `status.replicas` never exceeds "
        "`spec.replicas`. The restart is bounded: one per accepted change, it does not "
        "spend a retry of `retryPolicy`, and if the new spec does not fit, the workload "
        "is Pending with the usual per-node reasons and retries.",
        "",
        "`kubectl scale gw <name> --replicas=N` works through the `scale` subresource "
        "(`.spec.replicas`; `.status.replicas` counts placed replicas; `.status.selector` "
        "selects the workload's pods).",
        "",
        "| field | change while the workload exists | why | message when refused |",
        "| --- | --- | --- | --- |",
    ]
    for c in changes.SPEC_CHANGES:
        what = {
            changes.Change.RESTART: "applied: restart onto a new placement",
            changes.Change.IN_PLACE: "applied in place (no restart)",
            changes.Change.REFUSED: "refused",
        }[c.change]
        if c.change is changes.Change.RESTART and c.message:
            what += " (see why)"
        out.append(
            f"| `{c.field}` | {what} | {_cell(c.why)} | {_cell(c.message or '')} |"
        )
    out += [
        "",
        "Metadata is not spec: labels and annotations may change, except "
        f"`{SCHEDULING_MAP_ANNOTATION}` (refused like `schedulingMap`: "
        f"\"{changes.ANNOTATION_MESSAGE}\").",
        "",
    ]
    return out


def _failure_section() -> list[str]:
    return [
        "## When a replica fails or is deleted",
        "",
        "A workload with more than one replica is a gang: its replicas are placed "
        "together and run together, so one replica lost means the gang is restarted "
        "as a whole (its other children are deleted, it is placed again, all "
        "replicas start again with the same WORLD_SIZE). The `Scheduled` condition "
        "and an Event say which replica and why:",
        "",
        "| what happened to a replica | reason | spends a retry of `maxRetries` |",
        "| --- | --- | --- |",
        "| its Pod (or Job) failed: phase `Failed`, or the Job's `Failed` condition "
        "| `ReplicaFailed` | yes |",
        "| its Pod (or Job) was deleted by someone other than the controller (a user's "
        "`kubectl delete pod`, an eviction, a node removed) | `ReplicaDeleted` | no |",
        "| the spec changed (see above) | `SpecChanged` | no |",
        "",
        "`maxRetries` counts failures of the workload itself: unschedulable attempts "
        "and failed replicas. `maxRetries: 0` marks the workload `Failed` on the first "
        "unschedulable attempt or failed replica, with no retry; `maxRetries: N` allows "
        "N more attempts after the first. A deleted replica does not spend one: "
        "deleting a pod is how a user asks for a restart, and an eviction says nothing "
        "about the workload. `status.retries` counts the retries spent.",
        "",
        "A single-replica workload follows the same rules (its one replica is its "
        "gang). A workload whose replicas all succeeded is `Succeeded` and is not "
        "restarted. A workload that gave up is `Failed` with `Failed=True` and "
        "`Scheduled=False`, both with the reason (`Unschedulable`, `ReplicaFailed`, ...); "
        "an unschedulable one's last Event is a `FailedScheduling` like every try before.",
        "",
        "A `deviceExposure: dra` workload whose manager runs without DRA is left running as "
        "it is, none of the above applies to it (a failed or deleted replica is reported, "
        "not acted on): `Managed=False DRAUnavailable` until the manager runs with DRA "
        "([dra.md](dra.md#a-restart-without-dra-never-tears-down-running-work)).",
        "",
    ]


def _walk(root: type[BaseModel], seen: list[type[BaseModel]]) -> None:
    if root in seen:
        return
    seen.append(root)
    for info in root.model_fields.values():
        for m in _nested(info.annotation):
            _walk(m, seen)


def render_markdown() -> str:
    out = [
        "<!-- Generated by `python -m api.v1alpha1.crd` (make manifests). Do not edit. -->",
        "",
        f"# API reference: `{API_VERSION}`",
        "",
        "Three kinds: `GPUWorkload` (namespaced, short name `gw`), `GPUNode` "
        "(cluster-scoped, short name `gn`, one per node, written by the NVML agent) and "
        "`GPUQueue` (cluster-scoped, short name `gq`, a team's quota: "
        "[queues.md](queues.md)). "
        "`kubectl explain gpuworkload.spec` shows the same descriptions.",
        "",
        "Named priorities: "
        + ", ".join(f"`{k}` = {v}" for k, v in PRIORITY_NAMES.items())
        + ". The scheduling map may also come from the "
        f"`{SCHEDULING_MAP_ANNOTATION}` annotation; with `schedulingStrategy: annotationMap` "
        "one of the two is required (checked by a ValidatingAdmissionPolicy, since CRD "
        "validation rules cannot read annotations).",
        "",
        "Priority an admin controls: a workload preempts workloads of other namespaces "
        "only when `spec.priorityClassName` names a PriorityClass (cluster-scoped, an "
        "admin's) whose value is exactly `spec.priority` (the "
        "`workload-priority-class` policy refuses any other value; the class is copied "
        "to the children's pods); otherwise it preempts only in its own namespace. An "
        "admin may also cap a namespace with the label `gpu.orchestrator.dev/max-priority="
        "<n>` (the `workload-priority-ceiling` policy refuses a higher priority there). "
        "`kubectl get gw -o wide` shows the priority. See security.md.",
        "",
        "Refused at the door: the names a child will carry (`<name>-<index>`, at most 63 "
        "characters; a gang's name is a DNS-1035 label, for its headless Service), the "
        "template's container names (DNS-1123 labels) and images, and a Job template's "
        "`restartPolicy: Always` are checked by the ValidatingAdmissionPolicy "
        "`gpuworkload-scheduling-map` (the names also on `kubectl scale`) when "
        "a workload is created or its template or replicas change. The rest the API "
        "server checks on a Pod or Job: before a spec's first placement the controller "
        "creates its child with `dryRun=All`, and reports a refusal (and a template over "
        "1 MiB as JSON) as `Scheduled=False InvalidSpec`, in the API server's words, "
        "spending no retry.",
        "",
        "Example (the seed's annotation map):",
        "",
        "```yaml",
        f"apiVersion: {API_VERSION}",
        "kind: GPUWorkload",
        "metadata:",
        "  name: seed",
        "spec:",
        "  replicas: 5",
        "  schedulingStrategy: annotationMap",
        "  schedulingMap: |",
        "    0=node1:0,1",
        "    1=node2:2",
        "    2=node3:0,1,2",
        "    3=node4:3",
        "    4=node4:3",
        "```",
        "",
        "It names no `template`, so each replica runs the default: one container `main`, "
        "image `busybox:1.36`, with the image's own command (a shell that exits at once, "
        "so on a real node the workload soon turns `Succeeded`); a `DefaultTemplate` Event "
        "says so when it is placed. Give a `template` with your container for real work. "
        "The default is kept, not refused at admission, because a spec without a template "
        "is how placements are tried (the samples, `kubectl gpu template`, the seed's "
        "maps), and refusing it would break every such manifest already applied. It holds "
        "7 GPUs (`status.gpus`: distinct devices; replicas 3 and 4 share node4's device "
        "3, and replica 2 has three).",
        "",
    ]
    out += DOC_SECTION + _columns_section() + _changes_section() + _failure_section()
    from api.v1alpha1.queue_crd import columns_section, waiting_section
    from api.v1alpha1.queues import GPUQueue

    out += waiting_section() + columns_section()
    for kind in (GPUWorkload, GPUNode, GPUQueue):
        out += [f"## {kind.__name__}", ""]
        models: list[type[BaseModel]] = []
        for f in ("spec", "status"):
            _walk(kind.model_fields[f].annotation, models)  # type: ignore[arg-type]
        if kind is GPUNode and GPUDevice not in models:
            models.append(GPUDevice)
        for m in models:
            out += _model_section(m)
    return "\n".join(out).rstrip() + "\n"
