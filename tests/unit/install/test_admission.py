"""The local control plane's kubelet admission (hack/testenv/admission.py): the
kubelet's reasons and messages, in its order, against the pods it admitted."""

from __future__ import annotations

from hack.testenv.admission import admit, admitted, requests


def node(cpu="64", memory="512Gi", pods="110", gpus="4", labels=None, taints=None):
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, "nvidia.com/gpu": gpus}
    return {"metadata": {"name": "node1", "labels": {"kubernetes.io/hostname": "node1",
                                                      **(labels or {})}},
            "spec": {"taints": taints or []},
            "status": {"capacity": alloc, "allocatable": alloc}}


def pod(cpu=None, memory=None, gpus=None, **spec):
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpus)) if v}
    return {"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": req}}], **spec}}


def test_out_of_cpu_in_the_kubelets_words():
    others = [admitted(pod(cpu="30")), admitted(pod(cpu="30"))]
    why = admit(pod(cpu="8"), node(), others)
    assert why is not None and why.reason == "OutOfcpu"
    assert why.status_message == ("Pod was rejected: Node didn't have enough resource: cpu, "
                                  "requested: 8000, used: 60000, capacity: 64000")
    assert admit(pod(cpu="4"), node(), others) is None


def test_memory_gpus_and_the_pod_count():
    assert admit(pod(memory="1Ti"), node(), []).reason == "OutOfmemory"
    assert admit(pod(gpus="2"), node(), [admitted(pod(gpus="3"))]).reason == "OutOfnvidia.com/gpu"
    why = admit(pod(), node(pods="2"), [admitted(pod()), admitted(pod())])
    assert why.reason == "OutOfpods"
    assert why.message == ("Node didn't have enough resource: pods, requested: 1, used: 2, "
                           "capacity: 2")


def test_an_extended_resource_the_node_does_not_list_is_not_checked():
    p = pod()
    p["spec"]["containers"][0]["resources"]["requests"]["example.com/widget"] = "3"
    assert admit(p, node(), []) is None


def test_node_affinity_selector_and_terms():
    assert admit(pod(nodeSelector={"zone": "a"}), node(), []).reason == "NodeAffinity"
    assert admit(pod(nodeSelector={"zone": "a"}), node(labels={"zone": "a"}), []) is None
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node4"]}]}]}}}
    why = admit(pod(affinity=aff), node(), [])
    assert why.message == ("Predicate NodeAffinity failed: node(s) didn't match Pod's node "
                           "affinity/selector")


def test_host_ports_and_noexecute_taints_only():
    web = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    other = admitted({"spec": web})
    assert admit({"spec": web}, node(), [other]).reason == "NodePorts"
    assert admit({"spec": web}, node(), []) is None
    nosched = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert admit(pod(), node(taints=nosched), []) is None  # the scheduler's, not the kubelet's
    noexec = [{"key": "k", "value": "v", "effect": "NoExecute"}]
    assert admit(pod(), node(taints=noexec), []).reason == "TaintToleration"
    tol = [{"key": "k", "operator": "Exists"}]
    assert admit(pod(tolerations=tol), node(taints=noexec), []) is None


def test_requests_as_kube_scheduler_counts_them():
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}},
                           {"name": "b", "resources": {"limits": {"cpu": "500m"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}},
                               {"name": "s", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "100m"}}
    # containers 1.5 + sidecar 1 = 2.5 against init 3: 3, plus overhead
    assert requests(spec)["cpu"] == 3100
