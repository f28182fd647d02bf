"""The local control plane is a real one: authn/authz, CRDs, kwok nodes and pods,
Jobs and garbage collection by kube-controller-manager, and clean process handling."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from hack.testenv import ControlPlane
from hack.testenv.controlplane import POD_CIDR
from hack.testenv.process import alive
from tests.waiting import eventually

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_nodes_are_fake_gpu_nodes_with_loopback_addresses(cluster: ControlPlane) -> None:
    code, nodes = cluster.api("GET", "/api/v1/nodes")
    assert code == 200
    by_name = {n["metadata"]["name"]: n for n in nodes["items"]}
    seeded = ["node1", "node2", "node3", "node4"]  # other tests add nodes of their own
    assert set(seeded) <= set(by_name)
    for node in (by_name[n] for n in seeded):
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
        ips = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert ips and all(ip.startswith("127.") for ip in ips)
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"


def test_anonymous_request_is_refused(cluster: ControlPlane) -> None:
    code, body = cluster.api("GET", "/api/v1/namespaces/default/pods", client_cert=False)
    assert code == 403
    assert "system:anonymous" in body["message"]


def test_service_account_without_rbac_is_forbidden(cluster: ControlPlane, namespace: str) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}}
    assert cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)[0] == 201
    code, req = cluster.api(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 600}})
    assert code == 201, req
    bearer = {"Authorization": f"Bearer {req['status']['token']}"}

    # The token authenticates (so what follows is authorization, not authentication) ...
    code, review = cluster.api(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        headers=bearer, client_cert=False)
    assert code == 201, review
    user = review["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{namespace}:nobody"
    # ... and RBAC refuses what no role grants.
    code, body = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods",
                             headers=bearer, client_cert=False)
    assert code == 403
    assert user in body["message"]


def test_config_installs_the_gpuworkload_crd(cluster: ControlPlane, namespace: str) -> None:
    cluster.kubectl("apply", "-k", os.path.join(ROOT, "config"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev")
    crd = json.loads(cluster.kubectl(
        "get", "crd", "gpuworkloads.gpu.orchestrator.dev", "-o", "json").stdout)
    assert crd["spec"]["group"] == "gpu.orchestrator.dev"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"]["status"] == {}

    empty = eventually(lambda: cluster.kubectl(
        "get", "gpuworkloads", "-n", namespace, check=False), what="gpuworkloads served")
    assert empty.returncode == 0, empty.stderr
    assert "No resources found" in empty.stdout + empty.stderr

    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=textwrap.dedent("""
        apiVersion: gpu.orchestrator.dev/v1alpha1
        kind: GPUWorkload
        metadata: {name: hello}
        spec: {gpusPerReplica: 1}
    """))
    listed = cluster.kubectl("get", "gw", "-n", namespace, "-o", "name").stdout.split()
    assert listed == ["gpuworkload.gpu.orchestrator.dev/hello"]
    # Status is a subresource: written separately from spec.
    path = f"/apis/gpu.orchestrator.dev/v1alpha1/namespaces/{namespace}/gpuworkloads/hello"
    code, _ = cluster.api("PATCH", path + "/status", {"status": {"phase": "Pending"}},
                          content_type="application/merge-patch+json")
    assert code == 200
    assert cluster.api("GET", path)[1]["status"]["phase"] == "Pending"


def _pod(name: str, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}


def test_pod_bound_to_node3_runs_through_kwok(cluster: ControlPlane, namespace: str) -> None:
    code, body = cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                             _pod("bound", nodeName="node3"))
    assert code == 201, body

    def running() -> dict | None:
        pod = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/bound")[1]
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    pod = eventually(running, what="pod Running")
    assert pod["spec"]["nodeName"] == "node3"
    assert pod["status"]["hostIP"] == "127.0.0.1"
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(
        POD_CIDR, strict=False)
    # kwok keeps it Running: it only ends when a test says so.
    cluster.set_pod_phase(namespace, "bound", "Failed")


def test_headless_service_of_kwok_pods_gets_its_endpoints(cluster: ControlPlane,
                                                          namespace: str) -> None:
    """A gang's headless Service (the shape controllers/gpuworkload/children.py creates) lists its
    running pods, without the endpoint controllers failing and warning forever (they
    did while kwok's pod IPs were loopback addresses)."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "gang"},
           "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                    "selector": {"app": "gang"},
                    "ports": [{"name": "master", "port": 29500}]}}
    code, body = cluster.api("POST", f"/api/v1/namespaces/{namespace}/services", svc)
    assert code == 201, body
    pod = _pod("gang-0", nodeName="node1")
    pod["metadata"]["labels"] = {"app": "gang"}
    code, body = cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert code == 201, body

    def addresses() -> list[str] | None:
        _, slices = cluster.api(
            "GET", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                   "?labelSelector=kubernetes.io/service-name=gang")
        found = [a for s in slices.get("items") or () for e in s.get("endpoints") or ()
                 for a in e.get("addresses") or ()]
        return found or None

    (address,) = eventually(addresses, what="the headless Service's EndpointSlice")
    ip = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/gang-0")[1]["status"]["podIP"]
    assert address == ip
    _, events = cluster.api("GET", f"/api/v1/namespaces/{namespace}/events"
                                   "?fieldSelector=involvedObject.kind=Service")
    assert not [e["message"] for e in events["items"] if e.get("type") == "Warning"]


def test_job_completes_when_its_pod_succeeds(cluster: ControlPlane, namespace: str) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "nodeName": "node2",
               "containers": [{"name": "main", "image": "busybox"}]}}}}
    code, body = cluster.api("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    assert code == 201, body

    def job_pod_running() -> dict | None:
        pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods"
                                  "?labelSelector=job-name%3Dtrain")[1]["items"]
        return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None

    pod = eventually(job_pod_running, what="the Job's pod Running")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    job_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/train"
    assert not cluster.api("GET", job_path)[1]["status"].get("succeeded")

    cluster.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")

    def complete() -> bool:
        conds = cluster.api("GET", job_path)[1]["status"].get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)

    eventually(complete, what="Job Complete")


def test_deleting_an_owner_garbage_collects_its_children(
        cluster: ControlPlane, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    code, owner = cluster.api("POST", base, {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "owner"}})
    assert code == 201
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"]}
    for i in range(3):
        child = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"child-{i}", "ownerReferences": [ref]}}
        assert cluster.api("POST", base, child)[0] == 201

    assert cluster.api("DELETE", f"{base}/owner")[0] == 200

    def children_gone() -> bool:
        names = {c["metadata"]["name"] for c in cluster.api("GET", base)[1]["items"]}
        return not names & {"child-0", "child-1", "child-2"}

    eventually(children_gone, what="children garbage-collected")


def test_control_plane_leaves_no_process_behind_when_interrupted(
        cluster: ControlPlane, tmp_path) -> None:
    """A control plane in another Python process, killed by SIGTERM while running:
    every process it started is gone afterwards."""
    script = textwrap.dedent(f"""
        import json, sys, time
        from pathlib import Path
        from hack.testenv import ControlPlane, signals_stop
        with signals_stop():
            with ControlPlane(Path({str(tmp_path)!r}), nodes=1, gpus=1,
                              bin_dir=Path({str(cluster.bin)!r})) as cp:
                print(json.dumps(cp.pids()), flush=True)
                time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(child.stdout.readline())
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kwok",
                             "check-pods", "admitter"}
        assert all(alive(pid) for pid in pids.values())
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [n for n, p in pids.items() if alive(p)] == []
