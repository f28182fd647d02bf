"""Refused at the door: the CEL rules that turn away, at admission and in words, a
GPUWorkload whose children the API server would refuse later.

A child is made from the workload's name and its template: ``<name>-<index>`` Pods
or Jobs (a Job's name and every pod's ``gpu.orchestrator.dev/workload`` label value
are at most 63 characters), and for a gang a headless Service named ``<name>``
(a DNS-1035 label: it starts with a letter) and pods whose ``hostname`` is
``<name>-<index>`` and ``subdomain`` is ``<name>`` (DNS-1123 labels). Without these
rules such a workload is accepted and every attempt ends in ``ChildCreateFailed``.

=========================  ==========================================  ==============
rule                       refuses                                     where
=========================  ==========================================  ==============
``NAME_RULES``             a name longer than its children allow; a    the
                           gang's name that is not a DNS-1035 label    ``gpuworkload-
                           (on create, and when replicas change, also  names`` policy
                           through ``kubectl scale``)                  (CRD CEL cannot
                                                                       bound a name)
``MAP_INDEX_RULE``         a map index at or above replicas (an index  CRD (spec)
                           that is not ASCII digits is left to the
                           map's syntax rule, which says so in words)
``MAP_STRATEGY_RULE``      ``schedulingMap`` with another strategy     CRD (spec)
``template_rules()``       container names that are not DNS-1123       admission
                           labels, an empty image, a Job template      policy (the
                           with ``restartPolicy: Always``              template is
                                                                       schemaless)
=========================  ==========================================  ==============
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GROUP
from api.v1alpha1.policies import policy_pair, resource_rule
from api.v1alpha1.types import MAX_CHILD_NAME, VERSION, SchedulingStrategy, WorkloadKind

#: RE2: a DNS-1035 label (Service names) and a DNS-1123 label (container names,
#: hostnames), length checked apart so the message can say which is wrong.
DNS1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123 = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

_REPLICAS = "(has(object.spec) && has(object.spec.replicas) ? object.spec.replicas : 1)"
_GANG = f"{_REPLICAS} > 1"
_OLD_REPLICAS = ("(has(oldObject.spec) && has(oldObject.spec.replicas) ? "
                 "oldObject.spec.replicas : 1)")
#: an update that keeps replicas (the manager's finalizer patch, a label) is not
#: refused for a name stored before these rules
_SAME_REPLICAS = f"(request.operation == 'UPDATE' && {_REPLICAS} == {_OLD_REPLICAS})"
#: the longest child name: <name>-<highest index>
_LONGEST = f"size(object.metadata.name) + 1 + size(string({_REPLICAS} - 1))"

NAME_RULES: list[dict[str, Any]] = [
    {
        "expression": f"{_SAME_REPLICAS} || {_LONGEST} <= {MAX_CHILD_NAME}",
        "message": (f"metadata.name is too long: its children are named <name>-<index>, at "
                    f"most {MAX_CHILD_NAME} characters"),
        "messageExpression": (
            f"'metadata.name is too long: its children are named <name>-<index> "
            f"(' + object.metadata.name + '-' + string({_REPLICAS} - 1) + ' here), at most "
            f"{MAX_CHILD_NAME} characters, so the name may have at most ' + "
            f"string({MAX_CHILD_NAME} - 1 - size(string({_REPLICAS} - 1))) + ' (it has ' + "
            "string(size(object.metadata.name)) + ')'"
        ),
        "reason": "Invalid",
    },
    {
        "expression": (f"{_SAME_REPLICAS} || !({_GANG}) || "
                       f"object.metadata.name.matches('{DNS1035}')"),
        "message": ("a gang's metadata.name must be a DNS-1035 label (it names the headless "
                    "Service of its replicas): lowercase letters, digits and -, starting "
                    "with a letter"),
        "messageExpression": (
            "'metadata.name ' + object.metadata.name + ' cannot name a gang: its replicas "
            "find each other through a headless Service of the same name, which must be "
            "a DNS-1035 label (lowercase letters, digits and -, starting with a letter), "
            "e.g. ' + (object.metadata.name.matches('^[0-9]') ? 'w' + object.metadata.name : "
            "'my-gang')"
        ),
        "reason": "Invalid",
    },
]

# Index < replicas on the text map: each line with an '=' must start with an index
# below replicas (more than 9 digits is never below it). A line whose index is not
# ASCII digits is the syntax rule's to report (CEL's int() would answer "type
# conversion error", or overflow on 20 digits).
MAP_INDEX_RULE = {
    "rule": (
        "!has(self.schedulingMap) || self.schedulingMap.split('\\n').all(l, "
        "!l.contains('=') || !l.split('=')[0].trim().matches('^[0-9]+$') || "
        "(l.split('=')[0].trim().matches('^[0-9]{1,9}$') && "
        "int(l.split('=')[0].trim()) < self.replicas))"
    ),
    "message": "every index in schedulingMap must be < replicas",
}

_MAP = SchedulingStrategy.ANNOTATION_MAP.value
MAP_STRATEGY_RULE = {
    "rule": (
        "!has(self.schedulingMap) || self.schedulingMap.trim() == '' || "
        f"(has(self.schedulingStrategy) && self.schedulingStrategy == '{_MAP}')"
    ),
    "message": f"schedulingMap is read only with schedulingStrategy {_MAP}",
    "messageExpression": (
        f"'schedulingMap is read only with schedulingStrategy {_MAP}, not ' + "
        "(has(self.schedulingStrategy) ? self.schedulingStrategy : 'the default') + "
        f"': set schedulingStrategy: {_MAP}, or remove schedulingMap'"
    ),
    "fieldPath": ".schedulingMap",
    "reason": "FieldValueInvalid",
}


def _containers(kind: str) -> str:
    return f"object.spec.template.spec.{kind}"


def _has_template_list(kind: str) -> str:
    return ("has(object.spec) && has(object.spec.template) && "
            f"has(object.spec.template.spec) && has({_containers(kind)})")


def _name_ok(c: str) -> str:
    return f"(has({c}.name) && size({c}.name) <= 63 && {c}.name.matches('{DNS1123}'))"


def _image_ok(c: str) -> str:
    return f"(has({c}.image) && {c}.image.trim() != '')"


#: an update that keeps the template is not refused for one stored before these rules
_SAME_TEMPLATE = (
    "(request.operation == 'UPDATE' && has(object.spec) && has(oldObject.spec) && "
    "has(object.spec.template) == has(oldObject.spec.template) && "
    "(!has(object.spec.template) || object.spec.template == oldObject.spec.template))"
)


def template_rules() -> list[dict[str, Any]]:
    """Admission-policy validations: the template checked as the API server would
    check the child it becomes (the rules a user meets most; the rest still ends the
    attempt with ChildCreateFailed, naming the API server's reason)."""
    out: list[dict[str, Any]] = []
    for kind in ("containers", "initContainers"):
        cs = _containers(kind)
        name = "(has(c.name) ? '\"' + string(c.name) + '\"' : '(none)')"
        out.append({
            "expression": (f"{_SAME_TEMPLATE} || !({_has_template_list(kind)}) || "
                           f"{cs}.all(c, {_name_ok('c')})"),
            "messageExpression": (
                f"'spec.template.spec.{kind}: every name must be a DNS-1123 label "
                "(lowercase letters, digits and -, at most 63 characters), not ' + "
                f"{cs}.filter(c, !{_name_ok('c')}).map(c, {name}).join(', ')"
            ),
            "reason": "Invalid",
        })
        out.append({
            "expression": (f"{_SAME_TEMPLATE} || !({_has_template_list(kind)}) || "
                           f"{cs}.all(c, {_image_ok('c')})"),
            "messageExpression": (
                f"'spec.template.spec.{kind}: every container needs an image; ' + "
                f"{cs}.filter(c, !{_image_ok('c')}).map(c, {name}).join(', ') + "
                "' has none'"
            ),
            "reason": "Invalid",
        })
    job = WorkloadKind.JOB.value
    out.append({
        "expression": (
            f"{_SAME_TEMPLATE} || !has(object.spec) || !has(object.spec.workloadKind) || "
            f"object.spec.workloadKind != '{job}' || !has(object.spec.template) || "
            "!has(object.spec.template.spec) || "
            "!has(object.spec.template.spec.restartPolicy) || "
            "object.spec.template.spec.restartPolicy != 'Always'"
        ),
        "message": (
            f"workloadKind {job}: spec.template.spec.restartPolicy must be Never or "
            "OnFailure (a Job's pod may not restart Always); leave it unset for Never"
        ),
        "reason": "Invalid",
    })
    return out


def names_policy() -> list[dict[str, Any]]:
    """NAME_RULES on GPUWorkloads and on their scale subresource (whose object is a
    Scale: ``metadata.name`` and ``spec.replicas``, all these rules read)."""
    return policy_pair(f"gpuworkload-names.{GROUP}", {
        "matchConstraints": {"resourceRules": [
            resource_rule(GROUP, VERSION, ["gpuworkloads", "gpuworkloads/scale"],
                          ["CREATE", "UPDATE"])]},
        "validations": NAME_RULES,
    })
