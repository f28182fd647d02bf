"""The MutatingAdmissionPolicy that puts our finalizer on a GPUWorkload as it is created.

Without it the controller adds ``gpu.orchestrator.dev/children`` with a merge patch
of its own when it first places the workload: one more write per workload, which
costs the API server more than the create itself. With it the finalizer arrives in
the create body, evaluated in kube-apiserver (CEL, no webhook call), and the
controller's patch is skipped because the finalizer is already there.

The mutation is an apply configuration (merged into the object by its schema,
``metadata.finalizers`` a set), not a JSON patch: a JSON patch has kube-apiserver
encode the whole object to JSON, patch it and decode it back, which took about 190
more allocations (13 KiB) per create (bench/README.md, round 11).

Generated into ``config/admission-finalizer/`` by ``python -m api.v1alpha1.crd``
(``make manifests``), apart from ``config/crd``: the API
(``admissionregistration.k8s.io/v1beta1``) is served only where kube-apiserver runs
with ``--feature-gates=MutatingAdmissionPolicy=true`` and
``--runtime-config=admissionregistration.k8s.io/v1beta1=true`` (beta, off by default
in Kubernetes 1.34), and applying it elsewhere fails. The chart installs it when the
cluster serves the API. Where it is absent, or does not apply (``failurePolicy:
Ignore``), the controller's patch is the fallback: a workload gets the finalizer
either way, and deleting one still returns once its pods are gone.

It applies in every namespace, so it is for a manager of every namespace only: with
``--namespaces`` (``config/namespaced``) a workload elsewhere would keep a finalizer
that no manager removes, and the chart leaves the policy out.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import CHILDREN_FINALIZER, GROUP

MUTATING_ADMISSION = "admissionregistration.k8s.io/v1beta1"
NAME = "gpuworkload-children-finalizer"

#: CEL: an apply configuration that puts the finalizer in metadata.finalizers, a set:
#: merged, it is added once, beside any other, and never twice (a re-created object
#: from ``kubectl get -o yaml``, a reinvocation)
ADD_FINALIZER = f"Object{{metadata: Object.metadata{{finalizers: ['{CHILDREN_FINALIZER}']}}}}"


def finalizer_policy() -> list[dict[str, Any]]:
    """The policy and its binding, in the order they are written to YAML."""
    return [
        {"apiVersion": MUTATING_ADMISSION, "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": NAME},
         "spec": {
             "matchConstraints": {"resourceRules": [{
                 "apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE"],
                 "resources": ["gpuworkloads"]}]},
             # not applied (API server trouble): the controller's patch adds it
             "failurePolicy": "Ignore",
             "reinvocationPolicy": "Never",
             "mutations": [{"patchType": "ApplyConfiguration",
                            "applyConfiguration": {"expression": ADD_FINALIZER}}],
         }},
        {"apiVersion": MUTATING_ADMISSION, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": NAME},
         "spec": {"policyName": NAME}},
    ]
