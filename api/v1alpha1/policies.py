"""ValidatingAdmissionPolicies that keep one tenant from writing another's GPUs.

Generated into ``config/crd/`` next to the CRDs by ``python -m api.v1alpha1.crd``
(``make manifests``). Each policy is enforced by kube-apiserver itself (CEL, GA in
Kubernetes 1.30), so a compromised or buggy client cannot skip it.

=================================  =========================================================
policy                             what it refuses
=================================  =========================================================
``gpunode-identity``               a GPUNode whose ``spec.nodeName`` differs from its name
                                   (for everyone); a GPUNode write by a token bound to a
                                   node (the agent's) for any GPUNode but that node's, and
                                   a write by the agent's service account whose token is
                                   not bound to a node at all (as the kubelet's
                                   NodeRestriction does with ``system:node:<name>``)
``gpunode-capacity``               a GPUNode reporting more devices, or a device index at or
                                   above, the ``nvidia.com/gpu`` capacity of the Node of the
                                   same name (where that Node lists one above 0)
``node-agent``                     a Node update by the agent for any node but its own, or
                                   one that changes anything but our own
                                   ``gpu.orchestrator.dev/`` labels
``annotation-map-namespaces``      in a namespace labelled
                                   ``gpu.orchestrator.dev/annotation-map=forbidden``: a
                                   GPUWorkload with ``schedulingStrategy: annotationMap``
                                   or the ``gpu-scheduling-map`` annotation, and a Pod with
                                   that annotation (the seed path)
``manager-writes``                 a GPUWorkload update by the manager that changes more
                                   than its finalizers (status goes through /status)
``manager-namespaces``             any pod, binding, eviction, Service or Job write by
                                   the manager in kube-system, kube-public, kube-node-lease
=================================  =========================================================

The queues' policies (``queue-namespaces``, ``queue-gpu-pods``, ``workload-jobs``) are
in ``queue_policies.py``.

What CEL cannot do: read an object other than the one written, its namespace and
its params. ``gpunode-capacity`` therefore takes every Node as a param (``paramKind:
Node``, ``paramRef.selector: {}``) and checks the one of the same name; the API server
evaluates the rule once per Node for each GPUNode write, so its cost grows with the
number of nodes (see docs/security.md for when to drop it). A Node without an
``nvidia.com/gpu`` capacity bounds nothing (the agent is then the only source), nor
does one that lists it at 0: the kubelet keeps a device plugin's resource at 0 once
the plugin is gone, which says nothing of how many GPUs the node has.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GPU_RESOURCE, GROUP, SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import VERSION, SchedulingStrategy

#: The agent's service account (config/agent); its tokens are bound to its pod, and so
#: carry the node the pod runs on.
AGENT_SERVICE_ACCOUNT = "system:serviceaccount:gpu-orchestrator-system:gpu-orchestrator-agent"
#: The manager's service account (config/rbac).
MANAGER_SERVICE_ACCOUNT = "system:serviceaccount:gpu-orchestrator-system:gpu-orchestrator"
#: Namespaces the manager never writes in, whatever RBAC grants.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
#: Set by kube-apiserver on a service-account token bound to a pod on a node.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
#: Node label prefix the agent owns (internal/agent/status.py node_labels).
AGENT_LABEL_PREFIX = f"{GROUP}/"
#: Namespace label an admin sets to forbid annotationMap placements there.
ANNOTATION_MAP_NAMESPACE_LABEL = f"{GROUP}/annotation-map"
ANNOTATION_MAP_FORBIDDEN = "forbidden"
ADMISSION = "admissionregistration.k8s.io/v1"


def policy_pair(name: str, spec: dict[str, Any], binding: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    return [
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name}, "spec": {"failurePolicy": "Fail", **spec}},
        {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"], **(binding or {})}},
    ]


def resource_rule(group: str, version: str, resources: list[str], operations: list[str]
          ) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": [version], "operations": operations,
            "resources": resources}


def gpunode_identity() -> list[dict[str, Any]]:
    node_of_token = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"
    has_node = (f"has(request.userInfo.extra) && "
                f"'{NODE_NAME_EXTRA}' in request.userInfo.extra")
    return policy_pair(f"gpunode-identity.{GROUP}", {
        "matchConstraints": {"resourceRules": [
            resource_rule(GROUP, VERSION, ["gpunodes", "gpunodes/status"], ["CREATE", "UPDATE"])]},
        "validations": [
            {
                "expression": ("!has(object.spec) || !has(object.spec.nodeName) || "
                               "object.spec.nodeName == object.metadata.name"),
                "messageExpression": (
                    "'spec.nodeName must equal metadata.name: a GPUNode describes the node "
                    "of its own name (got name ' + object.metadata.name + ', nodeName ' + "
                    "object.spec.nodeName + ')'"),
                "reason": "Invalid",
            },
            {
                "expression": f"request.userInfo.username != '{AGENT_SERVICE_ACCOUNT}' || "
                              f"{has_node}",
                "message": ("the GPU agent may write GPUNodes only with a token bound to its "
                            "pod on a node (a projected service-account token)"),
                "reason": "Forbidden",
            },
            {
                "expression": f"!({has_node}) || size({node_of_token}) == 1 && "
                              f"{node_of_token}[0] == object.metadata.name",
                "messageExpression": (
                    f"'a token bound to node ' + {node_of_token}.join(',') + ' may write only "
                    "the GPUNode of that node, not ' + object.metadata.name"),
                "reason": "Forbidden",
            },
        ],
    })


def gpunode_capacity() -> list[dict[str, Any]]:
    cap = f"params.status.capacity['{GPU_RESOURCE}']"
    limit = f"quantity({cap}).asInteger()"
    # a capacity of 0 is a device plugin that ran and is gone (the kubelet keeps the
    # resource at 0): it counts nothing, so it bounds nothing, as no capacity does
    bounded = (f"params.metadata.name != object.metadata.name || !has(params.status) || "
               f"!has(params.status.capacity) || !('{GPU_RESOURCE}' in params.status.capacity) "
               f"|| {limit} == 0")
    return policy_pair(f"gpunode-capacity.{GROUP}", {
        "paramKind": {"apiVersion": "v1", "kind": "Node"},
        "matchConstraints": {"resourceRules": [
            resource_rule(GROUP, VERSION, ["gpunodes", "gpunodes/status"], ["CREATE", "UPDATE"])]},
        "validations": [
            {
                "expression": (
                    f"{bounded} || !has(object.status) || ("
                    f"(!has(object.status.devices) || size(object.status.devices) <= {limit} "
                    f"&& object.status.devices.all(d, d.index < {limit})) && "
                    f"(!has(object.status.deviceCount) || object.status.deviceCount <= {limit}))"
                ),
                "messageExpression": (
                    f"'GPUNode ' + object.metadata.name + ' reports devices beyond its Node\\'s "
                    f"{GPU_RESOURCE} capacity of ' + string({limit}) + ' (at most that many "
                    "devices, indices 0 to capacity-1)'"),
                "reason": "Invalid",
            },
        ],
    }, {"paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"}})


def node_agent() -> list[dict[str, Any]]:
    node_of_token = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"
    has_node = (f"has(request.userInfo.extra) && "
                f"'{NODE_NAME_EXTRA}' in request.userInfo.extra")
    p = AGENT_LABEL_PREFIX
    labels_kept = (
        "(!has(object.metadata.labels) || object.metadata.labels.all(k, "
        f"k.startsWith('{p}') || (has(oldObject.metadata.labels) && "
        "k in oldObject.metadata.labels && "
        "oldObject.metadata.labels[k] == object.metadata.labels[k]))) && "
        "(!has(oldObject.metadata.labels) || oldObject.metadata.labels.all(k, "
        f"k.startsWith('{p}') || (has(object.metadata.labels) && "
        "k in object.metadata.labels)))"
    )
    return policy_pair(f"node-agent.{GROUP}", {
        "matchConstraints": {"resourceRules": [resource_rule("", "v1", ["nodes"], ["UPDATE"])]},
        "matchConditions": [{"name": "is-agent", "expression":
                             f"request.userInfo.username == '{AGENT_SERVICE_ACCOUNT}'"}],
        "validations": [
            {
                "expression": f"{has_node} && size({node_of_token}) == 1 && "
                              f"{node_of_token}[0] == object.metadata.name",
                "messageExpression": (
                    f"'the GPU agent may update only the Node it runs on (' + ({has_node} ? "
                    f"{node_of_token}.join(',') : 'none in its token') + '), not ' + "
                    "object.metadata.name"),
                "reason": "Forbidden",
            },
            {
                "expression": (
                    f"{labels_kept} && object.spec == oldObject.spec && "
                    "has(object.metadata.annotations) == has(oldObject.metadata.annotations) && "
                    "(!has(object.metadata.annotations) || "
                    "object.metadata.annotations == oldObject.metadata.annotations)"
                ),
                "message": (f"the GPU agent may change only the {p}* labels of its Node "
                            "(not its spec, taints, annotations or other labels)"),
                "reason": "Forbidden",
            },
        ],
    })


def annotation_map_namespaces() -> list[dict[str, Any]]:
    ann = SCHEDULING_MAP_ANNOTATION
    strategy = SchedulingStrategy.ANNOTATION_MAP.value
    label = ANNOTATION_MAP_NAMESPACE_LABEL
    why = (f"annotationMap placements are forbidden in this namespace (label "
           f"{label}={ANNOTATION_MAP_FORBIDDEN}): a map names nodes and devices directly, "
           "bypassing the strategies' choice; ask your cluster admin")
    no_annotation = (f"!has(object.metadata.annotations) || "
                     f"!('{ann}' in object.metadata.annotations)")
    return policy_pair(f"annotation-map-namespaces.{GROUP}", {
        "matchConstraints": {
            "namespaceSelector": {"matchLabels": {label: ANNOTATION_MAP_FORBIDDEN}},
            "resourceRules": [
                resource_rule(GROUP, VERSION, ["gpuworkloads"], ["CREATE", "UPDATE"]),
                resource_rule("", "v1", ["pods"], ["CREATE"]),
            ],
        },
        "validations": [
            {"expression": no_annotation, "message": why, "reason": "Forbidden"},
            {
                "expression": (
                    "request.resource.resource != 'gpuworkloads' || "
                    "!has(object.spec) || !has(object.spec.schedulingStrategy) || "
                    f"object.spec.schedulingStrategy != '{strategy}'"),
                "message": why,
                "reason": "Forbidden",
            },
        ],
    })


def manager_writes() -> list[dict[str, Any]]:
    """The manager may patch a GPUWorkload only for its finalizer: RBAC cannot limit a
    patch to one field, this can."""
    return policy_pair(f"manager-writes.{GROUP}", {
        "matchConstraints": {"resourceRules": [
            resource_rule(GROUP, VERSION, ["gpuworkloads"], ["UPDATE"])]},
        "matchConditions": [{"name": "is-manager", "expression":
                             f"request.userInfo.username == '{MANAGER_SERVICE_ACCOUNT}'"}],
        "validations": [{
            "expression": (
                "object.spec == oldObject.spec && "
                "has(object.metadata.labels) == has(oldObject.metadata.labels) && "
                "(!has(object.metadata.labels) || "
                "object.metadata.labels == oldObject.metadata.labels) && "
                "has(object.metadata.annotations) == has(oldObject.metadata.annotations) && "
                "(!has(object.metadata.annotations) || "
                "object.metadata.annotations == oldObject.metadata.annotations)"),
            "message": ("the gpu-orchestrator manager changes only a GPUWorkload's status "
                        "and its own finalizer"),
            "reason": "Forbidden",
        }],
    })


def manager_namespaces() -> list[dict[str, Any]]:
    """The manager never creates, changes or deletes anything in the system
    namespaces, even where its RBAC is bound cluster-wide."""
    return policy_pair(f"manager-namespaces.{GROUP}", {
        "matchConstraints": {
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "In",
                "values": list(SYSTEM_NAMESPACES)}]},
            "resourceRules": [
                resource_rule("", "v1", ["pods", "pods/binding", "pods/eviction", "services"],
                      ["CREATE", "UPDATE", "DELETE"]),
                resource_rule("batch", "v1", ["jobs"], ["CREATE", "UPDATE", "DELETE"]),
            ],
        },
        "matchConditions": [{"name": "is-manager", "expression":
                             f"request.userInfo.username == '{MANAGER_SERVICE_ACCOUNT}'"}],
        "validations": [{
            "expression": "false",
            "messageExpression": ("'the gpu-orchestrator manager does not write in ' + "
                                  "request.namespace + ' (a system namespace)'"),
            "reason": "Forbidden",
        }],
    })


def security_policies() -> list[dict[str, Any]]:
    """Every policy and its binding, in the order they are written to YAML (the
    queues' own, in ``queue_policies.py``, last; imported here because they build on
    this module's helpers)."""
    from api.v1alpha1.queue_policies import queue_policies

    return [*gpunode_identity(), *gpunode_capacity(), *node_agent(),
            *annotation_map_namespaces(), *manager_writes(), *manager_namespaces(),
            *queue_policies()]
