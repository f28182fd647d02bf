"""ValidatingAdmissionPolicies that keep a tenant within its GPUQueue (docs/queues.md,
docs/security.md). Generated with the others of ``api/v1alpha1/policies.py``.

=================================  =========================================================
policy                             what it refuses
=================================  =========================================================
``queue-namespaces``               in a namespace a GPUQueue selects: a GPUWorkload whose
                                   ``spec.queueName`` names a queue that does not select
                                   it (another team's queue, or none)
``queue-gpu-pods``                 in a namespace a GPUQueue selects: a Pod that requests
                                   ``nvidia.com/gpu`` (any container or init container),
                                   unless the manager creates it, or the job controller
                                   makes it from a Job of ours (it carries our workload
                                   label), or it is a pod group member for
                                   ``gpu-scheduler`` not bound at creation (its
                                   queue admits it when it is placed); cluster
                                   admins (``system:masters``) may
``queue-namespace-marks``          a Namespace write that sets, changes or removes the
                                   ``gpu.orchestrator.dev/queued`` label or the
                                   ``gpu.orchestrator.dev/queues`` annotation, by anyone
                                   but the manager or a cluster admin; a Namespace write
                                   by the manager that changes anything else
``workload-jobs``                  a Job whose pod template comes to carry our workload
                                   label (created so, or the label added), written by
                                   anyone but the manager or a cluster admin (so that
                                   label cannot open ``queue-gpu-pods``' door)
=================================  =========================================================

**No policy takes a GPUQueue as a param.** A policy whose ``paramKind`` is a custom
resource is a configuration error while the API server's admission has not
discovered that resource (up to 30 s after a kube-apiserver restart on a busy
machine, ``python -m hack.admission_window``; for as long as the CRD is not served
when the policy is configured, as at an install or a reinstall),
and with ``failurePolicy: Fail`` it then denies every request it matches, before any
match condition can exempt one. Instead the manager marks each namespace a GPUQueue
selects (``controllers/queues/marks.py``): the label ``gpu.orchestrator.dev/queued=true``,
which the two queue policies match on (``matchConstraints.namespaceSelector``: a
request in any other namespace is not even evaluated), and the annotation
``gpu.orchestrator.dev/queues`` with the selecting queues by name, which they read
(``namespaceObject``). Both are built-in fields the API server always knows.

What that costs: a GPUQueue holds its namespaces at admission only once the manager
has marked them (it must be running; the gate holds GPUWorkloads to their queue
either way, and counts GPU pods that got through against it). A workload naming a
queue that does not exist yet is let through in a namespace no queue selects (it
waits ``QueueNotFound``, and the gate refuses it, ``QueueNotAllowed``, if the queue
does not select its namespace), and refused in one a queue selects.

``queue-gpu-pods`` never matches kube-system, kube-public or kube-node-lease, and the
manager never marks them: a GPUQueue selecting one of them does not hold its pods.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GPU_RESOURCE, QUEUED_LABEL, QUEUES_ANNOTATION, WORKLOAD_LABEL
from api.v1alpha1.policies import (
    MANAGER_SERVICE_ACCOUNT,
    SYSTEM_NAMESPACES,
    policy_pair,
    resource_rule,
)
from api.v1alpha1.types import GROUP, VERSION

#: Who makes the pods of a Job: the job controller's own service account, or the
#: controller manager's identity when it runs without per-controller credentials.
JOB_CONTROLLER_USERS = ("system:serviceaccount:kube-system:job-controller",
                        "system:kube-controller-manager")
ADMINS_GROUP = "system:masters"
#: the value of ``QUEUED_LABEL`` on a namespace a GPUQueue selects
QUEUED = "true"
#: a pod group member for the pod binding (docs/podgroups.md): its scheduler name
#: (the pod binding's default) and the labels that name a group
#: (``internal/scheduling/podgroups.py``: explicit, Kueue, JobSet, LeaderWorkerSet;
#: an Indexed Job's pods carry none). Its queue admits it when it is placed
#: (``controllers/podbinding/groupquota.py``), as a GPUWorkload's.
GROUP_SCHEDULER = "gpu-scheduler"
GROUP_LABELS = ("gpu.orchestrator.dev/pod-group", "kueue.x-k8s.io/pod-group-name",
                "jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name")

#: matchConstraints.namespaceSelector: every namespace but the system ones
NOT_SYSTEM_NAMESPACES: dict[str, Any] = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
     "values": list(SYSTEM_NAMESPACES)}]}
#: matchConstraints.namespaceSelector: the namespaces the manager marked, but the
#: system ones (which it never marks)
MARKED_NAMESPACES: dict[str, Any] = {"matchLabels": {QUEUED_LABEL: QUEUED},
                                     **NOT_SYSTEM_NAMESPACES}

#: CEL: the queues that select the namespace (its annotation), by name
_QUEUES = (f"has(namespaceObject.metadata.annotations) && "
           f"'{QUEUES_ANNOTATION}' in namespaceObject.metadata.annotations ? "
           f"namespaceObject.metadata.annotations['{QUEUES_ANNOTATION}'].split(',') : []")
_QUEUES_VARIABLE = {"name": "queues", "expression": _QUEUES}


def _asks_gpu(containers: str) -> str:
    """CEL: does any of ``containers`` (a pod's list) request or limit a GPU above 0?"""
    amount = ("has(c.resources) && ("
              f"(has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits && "
              f"quantity(c.resources.limits['{GPU_RESOURCE}']).isGreaterThan(quantity('0'))) || "
              f"(has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests && "
              f"quantity(c.resources.requests['{GPU_RESOURCE}']).isGreaterThan(quantity('0'))))")
    return f"{containers}.exists(c, {amount})"


def _group_member() -> str:
    """CEL: a pod group member the pod binding is to place (not bound at creation:
    a pod that names its node would skip its queue)."""
    labels = ", ".join(f"'{k}'" for k in GROUP_LABELS)
    return ("has(object.spec.schedulerName) && "
            f"object.spec.schedulerName == '{GROUP_SCHEDULER}' && "
            "(!has(object.spec.nodeName) || object.spec.nodeName == '') && "
            f"has(object.metadata.labels) && [{labels}].exists(k, k in object.metadata.labels)")


def _is_manager() -> str:
    return f"request.userInfo.username == '{MANAGER_SERVICE_ACCOUNT}'"


def _is_admin() -> str:
    return f"(has(request.userInfo.groups) && '{ADMINS_GROUP}' in request.userInfo.groups)"


def _not_trusted() -> str:
    return (f"request.userInfo.username != '{MANAGER_SERVICE_ACCOUNT}' && "
            f"!{_is_admin()}")


def queue_namespaces() -> list[dict[str, Any]]:
    return policy_pair(f"queue-namespaces.{GROUP}", {
        "matchConstraints": {
            "resourceRules": [resource_rule(GROUP, VERSION, ["gpuworkloads"], ["CREATE"])],
            "namespaceSelector": MARKED_NAMESPACES},
        "matchConditions": [{"name": "names-a-queue", "expression":
                             "has(object.spec) && has(object.spec.queueName)"}],
        "variables": [_QUEUES_VARIABLE],
        "validations": [{
            "expression": "object.spec.queueName in variables.queues",
            "messageExpression": (
                "'GPUQueue ' + object.spec.queueName + ' does not admit namespace ' + "
                "namespaceObject.metadata.name + ' (the GPUQueues that select it: ' + "
                "variables.queues.join(', ') + '): a workload may use only a queue of its "
                "own namespace'"),
            "reason": "Forbidden",
        }],
    })


def queue_gpu_pods() -> list[dict[str, Any]]:
    users = ", ".join(f"'{u}'" for u in JOB_CONTROLLER_USERS)
    from_our_job = (f"request.userInfo.username in [{users}] && "
                    f"has(object.metadata.labels) && '{WORKLOAD_LABEL}' in object.metadata.labels")
    asks = (f"{_asks_gpu('object.spec.containers')} || (has(object.spec.initContainers) && "
            f"{_asks_gpu('object.spec.initContainers')})")
    return policy_pair(f"queue-gpu-pods.{GROUP}", {
        # only in a namespace the manager marked: a pod anywhere else is not evaluated
        "matchConstraints": {"resourceRules": [resource_rule("", "v1", ["pods"], ["CREATE"])],
                             "namespaceSelector": MARKED_NAMESPACES},
        "matchConditions": [
            {"name": "not-trusted", "expression": _not_trusted()},
            {"name": "not-our-jobs-pod", "expression": f"!({from_our_job})"},
            {"name": "not-a-pod-group-member", "expression": f"!({_group_member()})"},
            {"name": "asks-for-gpus", "expression": asks},
        ],
        "variables": [_QUEUES_VARIABLE],
        "validations": [{
            "expression": "false",
            "messageExpression": (
                "'namespace ' + namespaceObject.metadata.name + ' is in GPUQueue ' + "
                "(size(variables.queues) > 0 ? variables.queues[0] : '(unnamed)') + "
                f"': a pod may not request {GPU_RESOURCE} here outside the queue; create a "
                "GPUWorkload (its quota is checked when it is placed)'"),
            "reason": "Forbidden",
        }],
    })


def _mark(obj: str) -> str:
    """CEL: the label's and the annotation's values on ``obj`` as one string."""
    def value(field: str, key: str) -> str:
        m = f"{obj}.metadata.{field}"
        return f"(has({m}) && '{key}' in {m} ? {m}['{key}'] : '')"
    return f"{value('labels', QUEUED_LABEL)} + '|' + {value('annotations', QUEUES_ANNOTATION)}"


def _kept_but(field: str, key: str) -> str:
    """CEL: every entry of ``metadata.<field>`` but ``key`` is as it was."""
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    return (f"(!has({new}) || {new}.all(k, k == '{key}' || (has({old}) && k in {old} && "
            f"{old}[k] == {new}[k]))) && "
            f"(!has({old}) || {old}.all(k, k == '{key}' || (has({new}) && k in {new})))")


def _same(path: str) -> str:
    new, old = f"object.{path}", f"oldObject.{path}"
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


def queue_namespace_marks() -> list[dict[str, Any]]:
    """The marks the queue policies read are the manager's: only it (or a cluster
    admin) writes them, and it writes nothing else of a Namespace."""
    old_mark = f"(oldObject == null ? '|' : {_mark('oldObject')})"
    only_marks = " && ".join([
        _kept_but("labels", QUEUED_LABEL), _kept_but("annotations", QUEUES_ANNOTATION),
        _same("spec"), _same("metadata.finalizers")])
    return policy_pair(f"queue-namespace-marks.{GROUP}", {
        "matchConstraints": {"resourceRules": [
            resource_rule("", "v1", ["namespaces"], ["CREATE", "UPDATE"])]},
        # any other Namespace write costs one comparison
        "matchConditions": [{"name": "marks-changed-or-manager", "expression":
                             f"{_mark('object')} != {old_mark} || {_is_manager()}"}],
        "variables": [
            {"name": "changed", "expression": f"{_mark('object')} != {old_mark}"},
            {"name": "manager", "expression": _is_manager()},
        ],
        "validations": [
            {
                "expression": f"!variables.changed || variables.manager || {_is_admin()}",
                "message": (
                    f"the label {QUEUED_LABEL} and the annotation {QUEUES_ANNOTATION} of a "
                    "Namespace are written only by the gpu-orchestrator manager: they say "
                    "which GPUQueues select it (change a GPUQueue's namespaceSelector "
                    "instead), and a write of the Namespace must keep them as they are"),
                "reason": "Forbidden",
            },
            {
                "expression": (f"!variables.manager || (request.operation == 'UPDATE' && "
                               f"{only_marks})"),
                "message": (f"the gpu-orchestrator manager changes only the label "
                            f"{QUEUED_LABEL} and the annotation {QUEUES_ANNOTATION} of a "
                            "Namespace"),
                "reason": "Forbidden",
            },
        ],
    })


def _template_labelled(job: str) -> str:
    return (f"has({job}.spec.template.metadata) && has({job}.spec.template.metadata.labels) "
            f"&& '{WORKLOAD_LABEL}' in {job}.spec.template.metadata.labels")


def workload_jobs() -> list[dict[str, Any]]:
    return policy_pair(f"workload-jobs.{GROUP}", {
        "matchConstraints": {"resourceRules": [
            resource_rule("batch", "v1", ["jobs"], ["CREATE", "UPDATE"])]},
        "matchConditions": [{"name": "not-trusted", "expression": _not_trusted()}],
        "variables": [
            {"name": "labelled", "expression": _template_labelled("object")},
            {"name": "was_labelled", "expression":
             f"oldObject != null && {_template_labelled('oldObject')}"},
        ],
        # an update that keeps the label (the garbage collector's, say) is let through
        "validations": [{
            "expression": "!variables.labelled || variables.was_labelled",
            "message": (f"the pod template label {WORKLOAD_LABEL} is set only by the "
                        "gpu-orchestrator manager on the Jobs it makes for GPUWorkloads"),
            "reason": "Forbidden",
        }],
    })


def queue_policies() -> list[dict[str, Any]]:
    return [*queue_namespaces(), *queue_gpu_pods(), *queue_namespace_marks(),
            *workload_jobs()]
