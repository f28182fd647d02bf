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



def test_every_cel_rule_says_what_is_wrong_in_words() -> None:
    """Issue 23: no rule may leave the user with CEL's own words ("type conversion
    error", `Invalid value: "object"` alone): every rule of the CRDs and of every
    admission policy carries a message."""
    import yaml

    from api.v1alpha1.crd import render

    rules: list[dict] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("x-kubernetes-validations", "validations") and isinstance(value, list):
                    rules.extend(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path, text in render().items():
        if path.suffix == ".yaml":
            for doc in yaml.safe_load_all(text):
                walk(doc)
    assert len(rules) > 40
    silent = [r.get("rule") or r.get("expression") for r in rules
              if not (r.get("message") or r.get("messageExpression"))]
    assert silent == []


def test_the_new_policies_are_generated() -> None:
    from api.v1alpha1.pod_devices import pod_devices
    from api.v1alpha1.priority_policies import priority_policies

    names = [d["metadata"]["name"] for d in [*pod_devices(), *priority_policies()]
             if d["kind"] == "ValidatingAdmissionPolicy"]
    assert names == ["pod-devices.gpu.orchestrator.dev",
                     "workload-priority-ceiling.gpu.orchestrator.dev",
                     "workload-priority-class.gpu.orchestrator.dev"]


def test_the_priority_ceiling_is_matched_only_in_a_labelled_namespace() -> None:
    """Every other namespace's GPUWorkloads cost the API server no CEL for it: the
    namespace's labels decide the match."""
    from api.v1alpha1.priority_policies import MAX_PRIORITY_LABEL, priority_ceiling

    policy = next(d for d in priority_ceiling() if d["kind"] == "ValidatingAdmissionPolicy")
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == {
        "matchExpressions": [{"key": MAX_PRIORITY_LABEL, "operator": "Exists"}]}


def test_no_policy_takes_a_custom_resource_as_a_param() -> None:
    """A policy whose paramKind is a CRD is a configuration error while the API
    server's admission has not discovered it (after a restart, or while the CRD is
    not served): with failurePolicy Fail it denies every request it matches, before
    any match condition can exempt one. Params may only be built-in kinds."""
    from api.v1alpha1.finalizer_policy import finalizer_policy
    from api.v1alpha1.pod_devices import pod_devices
    from api.v1alpha1.priority_policies import priority_policies

    docs = [*security_policies(), *crd.admission_policy(), *pod_devices(),
            *priority_policies(), *finalizer_policy()]
    kinds = {d["metadata"]["name"]: d["spec"]["paramKind"] for d in docs
             if d["kind"].endswith("AdmissionPolicy") and "paramKind" in d["spec"]}
    groups = {n: k["apiVersion"].rpartition("/")[0] for n, k in kinds.items()}
    assert all(g == "" or g.endswith(".k8s.io") for g in groups.values()), groups


def test_the_queue_policies_match_only_namespaces_the_manager_marked() -> None:
    """A pod or GPUWorkload in any other namespace is not even evaluated; no system
    namespace is matched, marked or not."""
    from api.v1alpha1.keys import QUEUED_LABEL
    from api.v1alpha1.policies import SYSTEM_NAMESPACES
    from api.v1alpha1.queue_policies import queue_gpu_pods, queue_namespaces

    for make in (queue_gpu_pods, queue_namespaces):
        policy = next(d for d in make() if d["kind"] == "ValidatingAdmissionPolicy")
        assert policy["spec"]["matchConstraints"]["namespaceSelector"] == {
            "matchLabels": {QUEUED_LABEL: "true"},
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": list(SYSTEM_NAMESPACES)}]}


def _policies_of_a_plain_create(docs: list[dict]) -> list[str]:
    """The ValidatingAdmissionPolicies without parameters that a GPUWorkload create in
    a namespace without our labels goes through (no namespace selector to skip it)."""
    out = []
    for d in docs:
        if not d or d["kind"] != "ValidatingAdmissionPolicy" or "paramKind" in d["spec"]:
            continue
        match = d["spec"]["matchConstraints"]
        if match.get("namespaceSelector"):
            continue
        if any("gpuworkloads" in r["resources"] and "CREATE" in r["operations"]
               for r in match["resourceRules"]):
            out.append(d["metadata"]["name"])
    return out


def test_a_gpuworkload_create_goes_through_one_policy_of_ours() -> None:
    """The API server builds a policy's CEL inputs (the object copied, the request and
    the namespace converted) three times for each request the policy matches, whatever
    its rules: the names, the template and the map are one policy, not two (round 8 of
    bench/README.md measured the create)."""
    import yaml

    from api.v1alpha1.crd import CRD_DIR

    docs = [d for f in sorted(CRD_DIR.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    assert _policies_of_a_plain_create(docs) == ["gpuworkload-scheduling-map.gpu.orchestrator.dev"]


def test_the_one_policy_still_checks_names_on_kubectl_scale() -> None:
    from api.v1alpha1.door import NAME_RULES

    policy = crd.admission_policy()[0]
    assert [r["resources"] for r in policy["spec"]["matchConstraints"]["resourceRules"]] == [
        ["gpuworkloads", "gpuworkloads/scale"]]
    # first: a create refused for its name and for its template hears of its name, as
    # when the names were a policy of their own (gpuworkload-names sorted first)
    assert policy["spec"]["validations"][:len(NAME_RULES)] == NAME_RULES


def test_the_one_policy_is_gated_by_all_its_rules() -> None:
    """A create it admits costs one expression (the gate), not each rule's and each
    message's: the gate is true exactly when one of the validations is false, so a
    refused create goes on to the same validations and the same messages."""
    from api.v1alpha1.door import GATE, template_gate, template_rules

    spec = crd.admission_policy()[0]["spec"]
    (gate,) = [c for c in spec["matchConditions"] if c["name"] == GATE]
    # the template's rules are read together (door.template_gate), the others as written
    template = {r["expression"] for r in template_rules()}
    others = [f"({v['expression']})" for v in spec["validations"]
              if v["expression"] not in template]
    assert len(others) == len(spec["validations"]) - len(template)
    assert gate["expression"] == "!(" + " && ".join([*others, template_gate()]) + ")"
    assert spec["failurePolicy"] == "Fail"  # a gate that errs refuses, as a rule that errs did
