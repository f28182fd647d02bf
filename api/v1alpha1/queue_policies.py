"""ValidatingAdmissionPolicies that keep a tenant within its GPUQueue (docs/queues.md,
docs/security.md). Generated with the others of ``api/v1alpha1/policies.py``.

=================================  =========================================================
policy                             what it refuses
=================================  =========================================================
``queue-namespaces``               a GPUWorkload whose ``spec.queueName`` names a GPUQueue
                                   whose ``namespaceSelector`` does not select the
                                   workload's namespace (another team's queue)
``queue-gpu-pods``                 in a namespace a GPUQueue selects: a Pod that requests
                                   ``nvidia.com/gpu`` (any container or init container),
                                   unless the manager creates it, or the job controller
                                   makes it from a Job of ours (it carries our workload
                                   label); cluster admins (``system:masters``) may
``workload-jobs``                  a Job whose pod template comes to carry our workload
                                   label (created so, or the label added), written by
                                   anyone but the manager or a cluster admin (so that
                                   label cannot open ``queue-gpu-pods``' door)
=================================  =========================================================

``queue-gpu-pods`` never matches kube-system, kube-public or kube-node-lease: a GPUQueue
selecting one of them does not hold its pods (see ``queue_gpu_pods`` for why).

Both queue policies take every GPUQueue as a param (``paramRef.selector: {}``): the API
server evaluates the rule once per queue, and a request passes only if every
evaluation does. With no GPUQueue at all nothing is refused
(``parameterNotFoundAction: Allow``). A workload naming a queue that does not exist
yet is let through: it waits ``QueueNotFound``, and the gate refuses it
(``QueueNotAllowed``) if the queue, once created, does not select its namespace.

The label selector is evaluated in CEL as ``GPUQueueNamespaceSelector.selects`` does
in Python (``api/v1alpha1/queues.py``): an unset selector selects no namespace, ``{}``
every one.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GPU_RESOURCE, WORKLOAD_LABEL
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
QUEUE_PARAM = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue"}
EVERY_QUEUE = {"paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"}}

#: the namespace's labels (``kubernetes.io/metadata.name`` is always one)
_LABELS = ("has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : "
           "{'kubernetes.io/metadata.name': namespaceObject.metadata.name}")
#: does ``params`` (a GPUQueue) select the namespace (``variables.labels``)?
_SELECTS = (
    "has(params.spec.namespaceSelector) && "
    "(!has(params.spec.namespaceSelector.matchLabels) || "
    " params.spec.namespaceSelector.matchLabels.all(k, k in variables.labels && "
    "  variables.labels[k] == params.spec.namespaceSelector.matchLabels[k])) && "
    "(!has(params.spec.namespaceSelector.matchExpressions) || "
    " params.spec.namespaceSelector.matchExpressions.all(e, "
    "  e.operator == 'In' ? (e.key in variables.labels && has(e.values) && "
    "                        variables.labels[e.key] in e.values) : "
    "  e.operator == 'NotIn' ? (!(e.key in variables.labels) || !has(e.values) || "
    "                           !(variables.labels[e.key] in e.values)) : "
    "  e.operator == 'Exists' ? e.key in variables.labels : "
    "  !(e.key in variables.labels)))"
)


def _asks_gpu(containers: str) -> str:
    """CEL: does any of ``containers`` (a pod's list) request or limit a GPU above 0?"""
    amount = ("has(c.resources) && ("
              f"(has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits && "
              f"quantity(c.resources.limits['{GPU_RESOURCE}']).isGreaterThan(quantity('0'))) || "
              f"(has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests && "
              f"quantity(c.resources.requests['{GPU_RESOURCE}']).isGreaterThan(quantity('0'))))")
    return f"{containers}.exists(c, {amount})"


def _not_trusted() -> str:
    return (f"request.userInfo.username != '{MANAGER_SERVICE_ACCOUNT}' && "
            f"!(has(request.userInfo.groups) && '{ADMINS_GROUP}' in request.userInfo.groups)")


#: matchConstraints.namespaceSelector: every namespace but the system ones
NOT_SYSTEM_NAMESPACES: dict[str, Any] = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
     "values": list(SYSTEM_NAMESPACES)}]}


def queue_namespaces() -> list[dict[str, Any]]:
    return policy_pair(f"queue-namespaces.{GROUP}", {
        "paramKind": QUEUE_PARAM,
        "matchConstraints": {"resourceRules": [
            resource_rule(GROUP, VERSION, ["gpuworkloads"], ["CREATE"])]},
        "matchConditions": [{"name": "names-a-queue", "expression":
                             "has(object.spec) && has(object.spec.queueName)"}],
        "variables": [{"name": "labels", "expression": _LABELS}],
        "validations": [{
            "expression": f"params.metadata.name != object.spec.queueName || ({_SELECTS})",
            "messageExpression": (
                "'GPUQueue ' + params.metadata.name + ' does not admit namespace ' + "
                "namespaceObject.metadata.name + ' (its namespaceSelector does not select "
                "it): a workload may use only a queue of its own namespace'"),
            "reason": "Forbidden",
        }],
    }, EVERY_QUEUE)


def queue_gpu_pods() -> list[dict[str, Any]]:
    users = ", ".join(f"'{u}'" for u in JOB_CONTROLLER_USERS)
    from_our_job = (f"request.userInfo.username in [{users}] && "
                    f"has(object.metadata.labels) && '{WORKLOAD_LABEL}' in object.metadata.labels")
    asks = (f"{_asks_gpu('object.spec.containers')} || (has(object.spec.initContainers) && "
            f"{_asks_gpu('object.spec.initContainers')})")
    return policy_pair(f"queue-gpu-pods.{GROUP}", {
        "paramKind": QUEUE_PARAM,
        # never the system namespaces: a policy whose paramKind is a CRD is a
        # configuration error (failurePolicy Fail: every request it matches is denied)
        # while the API server's admission has not discovered GPUQueue, up to 30 s after
        # a kube-apiserver restart on a busy machine (python -m hack.admission_window);
        # kube-system's pods must never wait on that
        "matchConstraints": {"resourceRules": [resource_rule("", "v1", ["pods"], ["CREATE"])],
                             "namespaceSelector": NOT_SYSTEM_NAMESPACES},
        "matchConditions": [
            {"name": "not-trusted", "expression": _not_trusted()},
            {"name": "not-our-jobs-pod", "expression": f"!({from_our_job})"},
            {"name": "asks-for-gpus", "expression": asks},
        ],
        "variables": [{"name": "labels", "expression": _LABELS}],
        "validations": [{
            "expression": f"!({_SELECTS})",
            "messageExpression": (
                f"'namespace ' + namespaceObject.metadata.name + ' is in GPUQueue ' + "
                f"params.metadata.name + ': a pod may not request {GPU_RESOURCE} here "
                "outside the queue; create a GPUWorkload (its quota is checked when it is "
                "placed)'"),
            "reason": "Forbidden",
        }],
    }, EVERY_QUEUE)


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
    return [*queue_namespaces(), *queue_gpu_pods(), *workload_jobs()]
