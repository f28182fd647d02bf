"""The generated admission policies: each bound, each refusal explained. (What they
refuse is tried on the real API server in tests/integration/controller/
test_tenant_isolation.py.)"""

from __future__ import annotations

from api.v1alpha1 import crd
from api.v1alpha1.policies import security_policies


def test_every_policy_is_bound_denies_and_explains_itself() -> None:
    docs = security_policies() + crd.admission_policy()
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"]: d for d in docs
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings)
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Fail", name
        assert bindings[name]["spec"]["validationActions"] == ["Deny"], name
        for v in policy["spec"]["validations"]:
            assert v.get("message") or v.get("messageExpression"), (name, v["expression"])


def test_the_capacity_policy_reads_every_node_as_a_param() -> None:
    docs = {d["kind"]: d for d in security_policies()
            if d["metadata"]["name"].startswith("gpunode-capacity")}
    assert docs["ValidatingAdmissionPolicy"]["spec"]["paramKind"] == {
        "apiVersion": "v1", "kind": "Node"}
    assert docs["ValidatingAdmissionPolicyBinding"]["spec"]["paramRef"] == {
        "selector": {}, "parameterNotFoundAction": "Allow"}

