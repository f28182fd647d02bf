"""Priority an admin controls: the admission policies that bound a GPUWorkload's
``spec.priority`` by what a tenant cannot change on its own.

================================  ======================================================
policy                            refuses
================================  ======================================================
``workload-priority-ceiling``     in a namespace labelled
                                  ``gpu.orchestrator.dev/max-priority=<n>`` (namespaces
                                  are an admin's; ``edit`` cannot label them): a
                                  GPUWorkload whose priority is above ``n``; a label
                                  that is not an integer refuses every GPUWorkload there
``workload-priority-class``       a GPUWorkload naming a PriorityClass
                                  (``spec.priorityClassName``) whose ``spec.priority``
                                  differs from the class's value (PriorityClasses are
                                  cluster-scoped, an admin's; ResourceQuota scopes on
                                  them limit who may use which)
================================  ======================================================

The controller adds the rule admission cannot state (it cannot see every
PriorityClass at once): a workload preempts workloads of another namespace only when
its priority comes from a PriorityClass that exists with exactly that value
(``controllers/placement/state.py``); any other priority preempts only in its own
namespace.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GROUP
from api.v1alpha1.policies import policy_pair, resource_rule
from api.v1alpha1.types import PRIORITY_NAMES, VERSION

#: Namespace label an admin sets: the highest spec.priority allowed there.
MAX_PRIORITY_LABEL = f"{GROUP}/max-priority"

#: CEL: the workload's priority as an integer (int-or-string; unset is 0).
PRIORITY = (
    "(!has(object.spec) || !has(object.spec.priority) ? 0 : "
    "type(object.spec.priority) == int ? object.spec.priority : "
    + " : ".join(f"object.spec.priority == '{k}' ? {v}" for k, v in PRIORITY_NAMES.items())
    + " : 0)"
)

_GW_RULES = [resource_rule(GROUP, VERSION, ["gpuworkloads"], ["CREATE", "UPDATE"])]


def priority_ceiling() -> list[dict[str, Any]]:
    labels = "namespaceObject.metadata.labels"
    ceiling = f"{labels}['{MAX_PRIORITY_LABEL}']"
    labelled = f"has({labels}) && '{MAX_PRIORITY_LABEL}' in {labels}"
    return policy_pair(f"workload-priority-ceiling.{GROUP}", {
        # only in a labelled namespace: the API server decides that from the
        # namespace's labels, with no CEL, so a GPUWorkload anywhere else costs it no
        # evaluation (a matchCondition cannot read namespaceObject); the validations
        # still say "unless labelled" themselves
        "matchConstraints": {
            "resourceRules": _GW_RULES,
            "namespaceSelector": {
                "matchExpressions": [{"key": MAX_PRIORITY_LABEL, "operator": "Exists"}]},
        },
        "validations": [
            {
                "expression": f"!({labelled}) || {ceiling}.matches('^[0-9]{{1,10}}$')",
                "messageExpression": (
                    f"'the namespace\\'s {MAX_PRIORITY_LABEL} label (' + {ceiling} + ') is "
                    "not an integer: no GPUWorkload is admitted here until an admin fixes it'"),
                "reason": "Forbidden",
            },
            {
                "expression": (f"!({labelled}) || !{ceiling}.matches('^[0-9]{{1,10}}$') || "
                               f"{PRIORITY} <= int({ceiling})"),
                "messageExpression": (
                    f"'priority ' + string({PRIORITY}) + ' is above this namespace\\'s "
                    f"ceiling of ' + {ceiling} + ' (namespace label {MAX_PRIORITY_LABEL}, "
                    "set by an admin); ask for a PriorityClass or a higher ceiling'"),
                "reason": "Forbidden",
            },
        ],
    })


def priority_class() -> list[dict[str, Any]]:
    named = "has(object.spec) && has(object.spec.priorityClassName)"
    return policy_pair(f"workload-priority-class.{GROUP}", {
        "paramKind": {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"},
        "matchConstraints": {"resourceRules": _GW_RULES},
        "matchConditions": [{"name": "names-a-class", "expression": named}],
        "validations": [{
            "expression": (f"params.metadata.name != object.spec.priorityClassName || "
                           f"{PRIORITY} == params.value"),
            "messageExpression": (
                "'priorityClassName ' + params.metadata.name + ' has the value ' + "
                "string(params.value) + ': spec.priority must be ' + string(params.value) + "
                f"' (it is ' + string({PRIORITY}) + ')'"),
            "reason": "Invalid",
        }],
    }, {"paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"}})


def priority_policies() -> list[dict[str, Any]]:
    return [*priority_ceiling(), *priority_class()]

