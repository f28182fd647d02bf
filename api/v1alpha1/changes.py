"""What may change in a GPUWorkload's spec once it exists, field by field.

One table, :data:`SPEC_CHANGES`, is the single source of the decision: the CRD's
transition rules (CEL with ``oldSelf``, refused at admission) and the "Changing a
workload" section of ``docs/api.md`` are both generated from it.

Three outcomes for an edit of a spec field:

- ``RESTART``: accepted; the controller stops the workload's children and places it
  again under the new spec (a gang restarts as a whole), with the ``Scheduled``
  condition at reason :data:`SPEC_CHANGED_REASON` and an Event of the same reason
  while it does. ``replicas`` (also through the ``scale`` subresource) and
  ``template``.
- ``IN_PLACE``: accepted; nothing is restarted, the new value is used from the next
  decision that reads it (``retryPolicy``: the next retry; ``modelName``: display).
- ``REFUSED``: the API server refuses the update with a message that says what to do
  instead. Every field that decides which devices a replica holds, or whether it
  may take them from others.

Guarantee: every field of :class:`~api.v1alpha1.types.GPUWorkloadSpec` has exactly
one entry (checked by the unit tests), so a new field cannot be left undecided.

Where a refused field's rule lives decides what every write of the workload costs the
kube-apiserver, status writes included: the CRD's rules run on every write, and each
``self.<field>`` read on the spec (an object of some twenty properties) costs a few
microseconds there (kube-apiserver 1.34 rebuilds the spec's property table on every
read; ``python -m bench.apiserver_profile`` shows it). So a refused field is
compared on the field itself (``self == oldSelf``, evaluated only when both versions
hold it, without reading the spec), and the spec keeps one cheap rule per field that
has no default: it is neither added nor removed (:func:`presence_rules`). A field
with a default is never absent, so its own rule covers it. Same refusals, same
messages and field paths; ``bench/README.md`` ("Throughput II, round 5") has the cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import SchedulingStrategy

#: Scheduled=False reason and Event reason while a spec change is being applied.
SPEC_CHANGED_REASON = "SpecChanged"

_REDO = "delete and re-create it"


class Change(StrEnum):
    RESTART = "restart"
    IN_PLACE = "in place"
    REFUSED = "refused"


@dataclass(frozen=True)
class FieldChange:
    """The decision for one spec field (its wire name)."""

    field: str
    change: Change
    why: str
    #: CEL on the spec (``self``, ``oldSelf``) that holds when the edit is allowed;
    #: None for fields that may change or are compared on the field (``same``).
    rule: str | None = None
    message: str | None = None
    #: CEL on the field's own value (``self``, ``oldSelf``) that holds when the edit
    #: is allowed; evaluated when both versions hold the field. Its presence is
    #: held by :func:`presence_rules`.
    same: str | None = None


def _refused(field: str, why: str, *, rule: str | None = None,
             same: str = "self == oldSelf", hint: str = _REDO) -> FieldChange:
    """A refused field: compared on the field (``same``) unless a spec-level ``rule``
    (one that reads other fields too) decides it."""
    return FieldChange(
        field,
        Change.REFUSED,
        why,
        rule=rule,
        same=None if rule else same,
        message=f"{field} cannot change while the workload exists; {hint}",
    )


def _effective_gpus(obj: str) -> str:
    return (
        f"(has({obj}.gpusPerReplica) ? {obj}.gpusPerReplica : "
        f"(has({obj}.gpuCount) ? {obj}.gpuCount : 1))"
    )


_MAP = SchedulingStrategy.ANNOTATION_MAP.value

_GPUS = _refused(
    "gpusPerReplica",
    "Decides how many devices each replica holds. gpuCount, its seed spelling, "
    "may be swapped for it as long as the number stays the same.",
    rule=f"{_effective_gpus('self')} == {_effective_gpus('oldSelf')}",
)

SPEC_CHANGES: tuple[FieldChange, ...] = (
    FieldChange(
        "replicas",
        Change.RESTART,
        "The gang is stopped and placed again with the new size (WORLD_SIZE and RANK "
        "change for every replica). Also through `kubectl scale`. Refused for the "
        f"{_MAP} strategy, whose map fixes the replicas.",
        rule=(
            f"!has(self.schedulingStrategy) || self.schedulingStrategy != '{_MAP}' || "
            "self.replicas == oldSelf.replicas"
        ),
        message=(
            f"replicas of an {_MAP} workload cannot change (its schedulingMap names "
            "every replica); delete and re-create it with a new map"
        ),
    ),
    _GPUS,
    FieldChange(
        "gpuCount",
        Change.REFUSED,
        "Seed spelling of gpusPerReplica; the same rule (and message) covers both.",
        rule=_GPUS.rule,
        message=_GPUS.message,
    ),
    _refused("minGPUMemoryMiB", "Decides which devices are eligible."),
    _refused("gpuShare", "Is what each replica holds of its device."),
    _refused("migProfile", "Decides which MIG instances are eligible."),
    _refused(
        "priority",
        "Decides what this workload may preempt and what may preempt it.",
        # int-or-string: compare the spelling (an int and a string never compare equal)
        same="string(self) == string(oldSelf)",
    ),
    _refused("priorityClassName", "Decides the priority, and whether it may preempt "
             "workloads of other namespaces."),
    _refused("schedulingStrategy", "Decides the placement."),
    _refused(
        "schedulingMap",
        "Is the placement. The gpu-scheduling-map annotation of a GPUWorkload is "
        "held to the same rule by the ValidatingAdmissionPolicy.",
    ),
    _refused("nodeSelector", "Decides which nodes are eligible."),
    _refused("topology", "Decides which device sets are eligible."),
    _refused("workloadKind", "Pods and Jobs are different children."),
    _refused("deviceExposure", "Decides how devices are named to the container."),
    FieldChange(
        "template",
        Change.RESTART,
        "The children are created from it: the gang is stopped and placed again, "
        "each replica from the new template (e.g. a new image).",
    ),
    FieldChange(
        "retryPolicy",
        Change.IN_PLACE,
        "Used from the next retry on; retries already spent stay spent.",
    ),
    _refused("queueName", "Decides whose quota the workload's devices count against."),
    FieldChange("modelName", Change.IN_PLACE, "Shown, never interpreted."),
)


def transition_rules() -> list[dict[str, Any]]:
    """The spec-level ``x-kubernetes-validations`` that refuse forbidden edits which
    read more than one field (``replicas`` of a map, the GPU count under either
    spelling). Each names the field (``fieldPath``) and says ``Forbidden``."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for c in SPEC_CHANGES:
        if c.rule is None or c.rule in seen:
            continue  # gpuCount shares gpusPerReplica's rule
        seen.add(c.rule)
        out.append(_forbidden(c.rule, c, field_path=True))
    return out


def field_rules() -> dict[str, dict[str, Any]]:
    """Per refused field compared on itself, its ``x-kubernetes-validations`` entry
    (a transition rule on the field's schema; the error names ``spec.<field>``)."""
    return {c.field: _forbidden(c.same, c, field_path=False)
            for c in SPEC_CHANGES if c.same is not None}


def presence_rules(defaulted: set[str]) -> list[dict[str, Any]]:
    """Spec-level rules: a refused field compared on itself is neither added nor
    removed. Not for the ``defaulted`` fields (the API server fills them in on every
    write, so they are never absent)."""
    return [_forbidden(f"has(self.{c.field}) == has(oldSelf.{c.field})", c, field_path=True)
            for c in SPEC_CHANGES if c.same is not None and c.field not in defaulted]


def _forbidden(rule: str, c: FieldChange, *, field_path: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rule": rule, "message": c.message}
    if field_path:
        out["fieldPath"] = f".{c.field}"
    out["reason"] = "FieldValueForbidden"
    return out


def annotation_unchanged_expression() -> str:
    """VAP expression: on UPDATE the gpu-scheduling-map annotation keeps its value
    (CRD rules cannot read annotations; see crd.py)."""
    ann = SCHEDULING_MAP_ANNOTATION

    def value(obj: str) -> str:
        return (
            f"((has({obj}.metadata.annotations) && '{ann}' in {obj}.metadata.annotations)"
            f" ? {obj}.metadata.annotations['{ann}'] : '')"
        )

    return f"oldObject == null || {value('object')} == {value('oldObject')}"


ANNOTATION_MESSAGE = (
    f"the {SCHEDULING_MAP_ANNOTATION} annotation cannot change while the workload "
    f"exists; {_REDO}"
)
