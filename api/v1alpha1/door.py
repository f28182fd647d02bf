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
``NAME_RULES``             a name longer than its children allow; a    admission
                           gang's name that is not a DNS-1035 label    policy, also on
                           (on create, and when replicas change, also  the scale
                           through ``kubectl scale``)                  subresource
                                                                       (CRD CEL cannot
                                                                       bound a name)
``MAP_INDEX_RULE``         a map index at or above replicas (an index  CRD (spec)
                           that is not ASCII digits is left to the
                           map's syntax rule, which says so in words)
``MAP_STRATEGY_RULE``      ``schedulingMap`` with another strategy     CRD (spec)
``template_rules()``       container names that are not DNS-1123       admission
                           labels, an empty image, an image that is    policy (the
                           not a reference (``IMAGE_PATTERN``: the     template is
                           kubelet would answer InvalidImageName), a   schemaless)
                           Job template with ``restartPolicy: Always``
=========================  ==========================================  ==============

"Admission policy" is one: ``gpuworkload-scheduling-map`` (api/v1alpha1/crd.py
``admission_policy``) holds these rules beside the map's, behind the gate of
:func:`gated`: the API server builds a matching policy's CEL inputs (the object
copied, the request and the namespace converted) once per pass, and evaluates every
``messageExpression`` on every request. The two together took 0.39 ms (median of 8
paired rounds) off each GPUWorkload create's 2.8 ms of kube-apiserver CPU
(bench/README.md, round 8).

``refusals(obj)`` applies ``NAME_RULES`` and ``template_rules()`` in Python, with the
same words, for ``kubectl gpu submit`` to refuse before any request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from api.v1alpha1.types import MAX_CHILD_NAME, SchedulingStrategy, WorkloadKind

#: RE2: a DNS-1035 label (Service names) and a DNS-1123 label (container names,
#: hostnames), length checked apart so the message can say which is wrong.
DNS1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123 = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

# An image reference as the kubelet parses it (distribution's reference grammar:
# [domain[:port]/]path[/path...][:tag][@digest], the path in lower case). RE2 and
# Python read it alike; it holds no escape but '\[' and '\]'.
_ALNUM = "[a-z0-9]+"
_PATH = f"{_ALNUM}(?:(?:[._]|__|[-]+){_ALNUM})*"
_DOMAIN_PART = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = f"(?:{_DOMAIN_PART}(?:[.]{_DOMAIN_PART})*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = f"^(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::{_TAG})?(?:@{_DIGEST})?$"
#: the same pattern inside a CEL string literal (a backslash written twice)
_IMAGE_CEL = IMAGE_PATTERN.replace("\\", "\\\\")
IMAGE_HINT = ("a reference such as registry.example.com/team/image:tag, its path in "
              "lower case")


def image_problem(image: object) -> str | None:
    """Why the kubelet would refuse ``image`` (None: it would pull it)."""
    if not isinstance(image, str) or not image.strip():
        return "the image must not be empty"
    if not re.fullmatch(IMAGE_PATTERN, image):
        return f"image {image!r} is not a valid image reference: {IMAGE_HINT}"
    return None


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


def _reference_ok(c: str) -> str:
    return f"(!has({c}.image) || {c}.image.trim() == '' || {c}.image.matches('{_IMAGE_CEL}'))"


#: an update that keeps the template is not refused for one stored before these rules
_SAME_TEMPLATE = (
    "(request.operation == 'UPDATE' && has(object.spec) && has(oldObject.spec) && "
    "has(object.spec.template) == has(oldObject.spec.template) && "
    "(!has(object.spec.template) || object.spec.template == oldObject.spec.template))"
)


_JOB_RESTARTS_OK = (
    "!has(object.spec) || !has(object.spec.workloadKind) || "
    f"object.spec.workloadKind != '{WorkloadKind.JOB.value}' || "
    "!has(object.spec.template) || !has(object.spec.template.spec) || "
    "!has(object.spec.template.spec.restartPolicy) || "
    "object.spec.template.spec.restartPolicy != 'Always'"
)


def template_gate() -> str:
    """What :func:`template_rules`' expressions say together, as the gate reads them:
    each list of containers walked once for its three checks, not three times, and
    the unchanged-template test made once (``(S || a) && (S || b)`` is ``S || (a &&
    b)``; ``all(x) && all(y)`` is ``all(x && y)``)."""
    kinds = [f"(!({_has_template_list(kind)}) || {_containers(kind)}.all(c, "
             f"{_name_ok('c')} && {_image_ok('c')} && {_reference_ok('c')}))"
             for kind in ("containers", "initContainers")]
    return f"({_SAME_TEMPLATE} || ({' && '.join([*kinds, f'({_JOB_RESTARTS_OK})'])}))"


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
        out.append({
            "expression": (f"{_SAME_TEMPLATE} || !({_has_template_list(kind)}) || "
                           f"{cs}.all(c, {_reference_ok('c')})"),
            "messageExpression": (
                f"'spec.template.spec.{kind}: every image must be {IMAGE_HINT} (the kubelet "
                "would answer InvalidImageName), not ' + "
                f"{cs}.filter(c, !{_reference_ok('c')}).map(c, '\"' + string(c.image) + "
                "'\"').join(', ')"
            ),
            "reason": "Invalid",
        })
    job = WorkloadKind.JOB.value
    out.append({
        "expression": f"{_SAME_TEMPLATE} || {_JOB_RESTARTS_OK}",
        "message": (
            f"workloadKind {job}: spec.template.spec.restartPolicy must be Never or "
            "OnFailure (a Job's pod may not restart Always); leave it unset for Never"
        ),
        "reason": "Invalid",
    })
    return out


#: the gate's name (a matchCondition of the policy it guards)
GATE = "refuses-something"


def gated(policy: dict[str, Any], joined: Sequence[tuple[list[dict[str, Any]], str]] = ()
          ) -> dict[str, Any]:
    """``policy`` with a matchCondition that is true only when one of its validations is
    false: the negation of all of them joined with ``&&``.

    The API server evaluates a policy that matches a request in three passes, each
    with its CEL inputs built afresh (the object copied, the request and the namespace
    converted): every validation, then every ``messageExpression`` (on every request,
    passing or not), then the audit annotations (none here). A matchCondition is one
    pass with one expression. So a request the policy admits costs that one
    expression, and a request it refuses goes on to the same validations, which
    refuse it with the same messages (a rule that would err errs in the gate first,
    and the policy's failurePolicy Fail refuses it too, in CEL's words).

    ``joined``: (validations, one expression true exactly when all of them are) pairs;
    the gate reads that expression where the first of them stood, and none of the
    others (:func:`template_gate`)."""
    spec = policy["spec"]
    terms: list[str] = []
    for v in spec["validations"]:
        group = next((g for g in joined if v["expression"] in
                      {r["expression"] for r in g[0]}), None)
        if group is None:
            terms.append(f"({v['expression']})")
        elif group[1] not in terms:
            terms.append(group[1])
    every = " && ".join(terms)
    gate = {"name": GATE, "expression": f"!({every})"}
    return {**policy, "spec": {**spec, "matchConditions": [*spec.get("matchConditions", []),
                                                           gate]}}


def refusals(obj: Mapping[str, Any]) -> list[str]:
    """What ``NAME_RULES`` and ``template_rules()`` refuse in ``obj`` (a GPUWorkload
    being created), in their words: for a client to refuse before any request."""
    md, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name, replicas = str(md.get("name") or ""), spec.get("replicas", 1)
    replicas = replicas if isinstance(replicas, int) else 1
    out = []
    longest = f"{name}-{replicas - 1}"
    if name and len(longest) > MAX_CHILD_NAME:
        out.append(f"metadata.name is too long: its children are named <name>-<index> "
                   f"({longest} here), at most {MAX_CHILD_NAME} characters, so the name may "
                   f"have at most {MAX_CHILD_NAME - 1 - len(str(replicas - 1))} (it has "
                   f"{len(name)})")
    if name and replicas > 1 and not re.match(DNS1035, name):
        out.append(f"metadata.name {name} cannot name a gang: its replicas find each other "
                   "through a headless Service of the same name, which must be a DNS-1035 "
                   "label (lowercase letters, digits and -, starting with a letter), e.g. "
                   + ("w" + name if re.match("^[0-9]", name) else "my-gang"))
    pod = (spec.get("template") or {}).get("spec") or {}
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(pod.get(kind) or []):
            c = c if isinstance(c, Mapping) else {}
            where = f"spec.template.spec.{kind}[{i}]"
            cname = c.get("name")
            if not (isinstance(cname, str) and len(cname) <= 63 and re.match(DNS1123, cname)):
                out.append(f"{where}.name: every name must be a DNS-1123 label (lowercase "
                           f"letters, digits and -, at most 63 characters), not {cname!r}")
            problem = image_problem(c.get("image"))
            if problem is not None:
                out.append(f"{where}.image: " + ("every container needs an image"
                                                 if "empty" in problem else problem))
    if spec.get("workloadKind") == WorkloadKind.JOB.value and pod.get(
            "restartPolicy") == "Always":
        out.append(f"workloadKind {WorkloadKind.JOB.value}: spec.template.spec.restartPolicy "
                   "must be Never or OnFailure (a Job's pod may not restart Always); leave "
                   "it unset for Never")
    return out
