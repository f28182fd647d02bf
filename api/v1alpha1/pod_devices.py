"""The ``pod-devices`` admission policy: only the controller and the webhook give pods
devices.

The ledger books whatever a pod's ``gpu.orchestrator.dev/devices`` annotation names
(docs/architecture.md, invariant 1), and a container runs on whatever its
``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` say. A tenant who writes them
could reserve free GPUs, run on another's, or book more by editing the annotation;
one who writes ``gpu.orchestrator.dev/device-uuids`` could point a member's
``NVIDIA_VISIBLE_DEVICES`` reference at any GPU of its node.
This policy refuses, outside the system namespaces and ``gpu-orchestrator-system``
(the agent's DaemonSet sets ``NVIDIA_VISIBLE_DEVICES=all`` for NVML):

=====================  ==============================================================
write                  refused unless
=====================  ==============================================================
Pod CREATE with the    the manager creates it (a GPUWorkload's child); or the Job
annotation or a        controller creates it for a Job carrying a workload's UID
device env             label (Job mode; such Jobs are the manager's, below); or it is
                       a seed-path pod (``schedulerName: gpu-scheduler``, no
                       ``nodeName``, a ``gpu-scheduling-map`` that names the devices
                       its annotation names): the webhook wrote them from the map and
                       the pod binding books the map. A ``CUDA_VISIBLE_DEVICES``
                       that is exactly a fieldRef to the pod's own devices
                       annotation, or an ``NVIDIA_VISIBLE_DEVICES`` that is exactly
                       one to its ``device-uuids`` annotation, is no device env (it
                       resolves to what the binder wrote: a pod group's member,
                       docs/podgroups.md), here and in a Job's template; a value,
                       or a reference to anything else, is one
Pod UPDATE that        never (the manager binds through ``pods/binding``, which this
changes the            does not match); ``kubectl annotate --overwrite`` is refused
annotation
Pod CREATE or UPDATE   never: a pod group leader's ``gpu.orchestrator.dev/group-slots``
that sets or changes   (the devices reserved for its workers) is written by the pod
the group slots        binding's Binding alone, and booked again after a restart: a
annotation             tenant who wrote it would reserve free devices
Pod CREATE or UPDATE   never: ``gpu.orchestrator.dev/device-uuids`` (the UUIDs of a
that sets or changes   pod's devices) is written by the pod binding's Binding alone;
the device UUIDs       a tenant who wrote it would choose the GPUs its
annotation             ``NVIDIA_VISIBLE_DEVICES`` reference resolves to
Job CREATE whose       the manager creates it (a CronJob's Jobs are made by the
                       CronJob controller: refused too)
template has the
devices or device
UUIDs annotation, a
device env or the
workload UID label
=====================  ==============================================================

Cluster admins (``system:masters``) are trusted (docs/security.md's threat model) and not
matched, nor are namespaces an admin labels ``gpu.orchestrator.dev/pod-devices=trusted``
(the GPU operator's, whose DaemonSets set ``NVIDIA_VISIBLE_DEVICES=all``). Where the
policy is missing, the manager evicts such pods (``controllers/gpuworkload/intruders.py``,
``--evict-conflicting-pods``).
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import (
    DEVICE_UUIDS_ANNOTATION,
    DEVICE_UUIDS_FIELD_PATH,
    DEVICES_ANNOTATION,
    DEVICES_FIELD_PATH,
    GROUP,
    GROUP_SLOTS_ANNOTATION,
    SCHEDULING_MAP_ANNOTATION,
    WORKLOAD_UID_LABEL,
)
from api.v1alpha1.policies import ADMISSION, MANAGER_SERVICE_ACCOUNT, SYSTEM_NAMESPACES

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
SEED_SCHEDULER = "gpu-scheduler"
#: Namespace label an admin sets on infrastructure namespaces whose pods set device
#: env themselves (the NVIDIA GPU operator's device plugin and DCGM exporter
#: DaemonSets set NVIDIA_VISIBLE_DEVICES=all): the policy does not match there.
TRUSTED_NAMESPACE_LABEL = f"{GROUP}/pod-devices"
TRUSTED = "trusted"
#: CEL: our own namespace (the agent's DaemonSet sets NVIDIA_VISIBLE_DEVICES=all for
#: NVML), read from the manager's service account, so that the chart's renaming of
#: that account (another release namespace) reaches it too
OUR_NAMESPACE = f"'{MANAGER_SERVICE_ACCOUNT}'.split(':')[2]"


#: the device env admitted as exactly a reference: each variable, the one path it may
#: read (what the binder wrote: internal/webhook/groupexposure.py)
REFERENCES = ((DEVICE_ENV[0], DEVICES_FIELD_PATH), (DEVICE_ENV[1], DEVICE_UUIDS_FIELD_PATH))


def _reference(name: str, path: str) -> str:
    """CEL: env entry ``e`` is ``name`` as exactly a fieldRef to ``path`` (no value, no
    other field, no other source, apiVersion v1)."""
    return (f"(e.name == '{name}' && !has(e.value) && has(e.valueFrom) && "
            f"has(e.valueFrom.fieldRef) && e.valueFrom.fieldRef.fieldPath == \"{path}\" && "
            f"(!has(e.valueFrom.fieldRef.apiVersion) || "
            f"e.valueFrom.fieldRef.apiVersion == 'v1'))")


def _env_free(spec: str) -> str:
    """CEL: no container, init container or ephemeral container of the pod spec at
    ``spec`` sets a device env, but for ``CUDA_VISIBLE_DEVICES`` as exactly a
    reference to the pod's own devices annotation and ``NVIDIA_VISIBLE_DEVICES`` as
    exactly one to its device UUIDs annotation (``REFERENCES``: what they resolve to
    is what the binder wrote; the webhook gives them to pod groups' members)."""
    names = "[" + ", ".join(f"'{n}'" for n in DEVICE_ENV) + "]"
    reference = "(" + " || ".join(_reference(n, p) for n, p in REFERENCES) + ")"
    parts = [f"(!has({spec}.{k}) || {spec}.{k}.all(c, !has(c.env) || "
             f"c.env.all(e, !(e.name in {names}) || {reference})))"
             for k in ("containers", "initContainers", "ephemeralContainers")]
    return " && ".join(parts)


def _annotated(meta: str, key: str = DEVICES_ANNOTATION) -> str:
    return f"(has({meta}.annotations) && '{key}' in {meta}.annotations)"


def _seed_pod() -> str:
    ann = "object.metadata.annotations"
    return (
        f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{SEED_SCHEDULER}' "
        f"&& !has(object.spec.nodeName) && has({ann}) && '{SCHEDULING_MAP_ANNOTATION}' in {ann} "
        f"&& (!('{DEVICES_ANNOTATION}' in {ann}) || {ann}['{SCHEDULING_MAP_ANNOTATION}']"
        f".replace(' ', '').contains(':' + {ann}['{DEVICES_ANNOTATION}'].replace(' ', ''))))"
    )


def _our_job_pod() -> str:
    return (f"(request.userInfo.username == '{JOB_CONTROLLER}' && "
            f"has(object.metadata.labels) && '{WORKLOAD_UID_LABEL}' in object.metadata.labels)")


WHY = ("only the gpu-orchestrator controller and webhook give pods GPU devices: a pod may "
       "not set the " + DEVICES_ANNOTATION + " annotation, CUDA_VISIBLE_DEVICES or "
       "NVIDIA_VISIBLE_DEVICES itself (CUDA_VISIBLE_DEVICES only as a fieldRef to "
       "metadata.annotations['" + DEVICES_ANNOTATION + "'], NVIDIA_VISIBLE_DEVICES only as "
       "one to metadata.annotations['" + DEVICE_UUIDS_ANNOTATION + "']). Run it as a "
       "GPUWorkload, or as a gpu-scheduler pod with a gpu-scheduling-map or in a pod "
       "group (the webhook injects them)")


def _binder_only(key: str, what: str) -> dict[str, str]:
    """The validation refusing a pod CREATE that sets annotation ``key`` and an UPDATE
    that adds, changes or removes it: the pod binding's Binding writes it (``what``
    it records), and ``pods/binding`` is not matched."""
    old, new = f"oldObject.metadata.annotations['{key}']", f"object.metadata.annotations['{key}']"
    return {
        "expression": (
            "!(request.resource.resource == 'pods') || (request.operation == 'CREATE' ? "
            f"!{_annotated('object.metadata', key)} : "
            f"({_annotated('object.metadata', key)} == {_annotated('oldObject.metadata', key)}"
            f" && (!{_annotated('object.metadata', key)} || {new} == {old})))"),
        "message": (f"the {key} annotation of a pod is written by the pod binding alone "
                    f"({what}): it cannot be set, changed or removed"),
        "reason": "Forbidden",
    }


def pod_devices() -> list[dict[str, Any]]:
    name = f"pod-devices.{GROUP}"
    is_pod = "request.resource.resource == 'pods'"
    is_job = "request.resource.resource == 'jobs'"
    old_ann = f"oldObject.metadata.annotations['{DEVICES_ANNOTATION}']"
    new_ann = f"object.metadata.annotations['{DEVICES_ANNOTATION}']"
    tpl = "object.spec.template"
    return [
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {
             "failurePolicy": "Fail",
             "matchConstraints": {
                 "namespaceSelector": {"matchExpressions": [
                     {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                      "values": list(SYSTEM_NAMESPACES)},
                     {"key": TRUSTED_NAMESPACE_LABEL, "operator": "NotIn",
                      "values": [TRUSTED]}]},
                 "resourceRules": [
                     {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                      "operations": ["CREATE", "UPDATE"]},
                     {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                      "operations": ["CREATE"]},
                 ]},
             "matchConditions": [
                 {"name": "not-our-namespace",
                  "expression": f"request.namespace != {OUR_NAMESPACE}"},
                 {"name": "not-the-manager",
                  "expression": f"request.userInfo.username != '{MANAGER_SERVICE_ACCOUNT}'"},
                 {"name": "not-a-cluster-admin",
                  "expression": "!has(request.userInfo.groups) || "
                                "!('system:masters' in request.userInfo.groups)"},
             ],
             "validations": [
                 {
                     "expression": (
                         f"!({is_pod}) || request.operation != 'CREATE' || "
                         f"(!{_annotated('object.metadata')} && {_env_free('object.spec')}) || "
                         f"{_seed_pod()} || {_our_job_pod()}"),
                     "message": WHY,
                     "reason": "Forbidden",
                 },
                 {
                     "expression": (
                         f"!({is_pod}) || request.operation != 'UPDATE' || "
                         f"({_annotated('object.metadata')} == {_annotated('oldObject.metadata')}"
                         f" && (!{_annotated('object.metadata')} || {new_ann} == {old_ann}))"),
                     "message": (f"the {DEVICES_ANNOTATION} annotation of a pod cannot be "
                                 "added, changed or removed: it records the devices the pod "
                                 "was given when it was made"),
                     "reason": "Forbidden",
                 },
                 _binder_only(GROUP_SLOTS_ANNOTATION,
                              "the devices reserved for a pod group's workers"),
                 _binder_only(DEVICE_UUIDS_ANNOTATION,
                              "the UUIDs of the devices it was bound to, which its "
                              "NVIDIA_VISIBLE_DEVICES reads"),
                 {
                     "expression": (
                         f"!({is_job}) || !has({tpl}) || ("
                         f"(!has({tpl}.metadata) || (!{_annotated(f'{tpl}.metadata')} && "
                         f"!{_annotated(f'{tpl}.metadata', DEVICE_UUIDS_ANNOTATION)} && "
                         f"(!has({tpl}.metadata.labels) || "
                         f"!('{WORKLOAD_UID_LABEL}' in {tpl}.metadata.labels)))) && "
                         f"(!has({tpl}.spec) || ({_env_free(f'{tpl}.spec')})))"),
                     "message": (WHY + f"; nor may a Job's pod template, or carry the "
                                 f"{DEVICE_UUIDS_ANNOTATION} annotation or the "
                                 f"{WORKLOAD_UID_LABEL} label (only GPUWorkload Jobs do)"),
                     "reason": "Forbidden",
                 },
             ],
         }},
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"]}},
    ]
