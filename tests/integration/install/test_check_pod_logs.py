"""The check pods' own logs on the local control plane (hack/testenv/checkpods.py):
``kubectl logs`` of a running gpu-scheduler-check pod prints what our check service
writes with the pod's environment; the process stops when the pod is deleted; a pod
of any other image gets no process, runs nothing, and kwok says it has no logs."""

from __future__ import annotations

import json
from pathlib import Path

from hack.testenv import ControlPlane
from tests.waiting import eventually


def _pod(name: str, image: str, **container) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "node2", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "check", "image": image, **container}]}}


def _running(cluster: ControlPlane, ns: str, name: str) -> bool:
    code, pod = cluster.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return code == 200 and pod["status"].get("phase") == "Running"


def test_logs_of_a_check_pod_and_its_end(cluster: ControlPlane, namespace: str) -> None:
    pod = _pod("check-7", "registry.example.com/team/gpu-scheduler-check:0.1.0",
               args=["--interval=1"],
               env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "2,3"},
                    {"name": "NODE_NAME",
                     "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD_NAME",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    eventually(lambda: _running(cluster, namespace, "check-7"), timeout=30, what="Running")

    def two_lines() -> list[str] | None:
        out = cluster.kubectl("logs", "-n", namespace, "check-7", check=False).stdout
        lines = out.splitlines()
        return lines if len(lines) >= 2 else None

    lines = eventually(two_lines, timeout=30, what="two log lines")
    assert "event=gpu_check node=node2 pod=check-7 CUDA_VISIBLE_DEVICES=2,3 count=1" in lines[0]
    assert "count=2" in lines[1]

    files = list((cluster.dir / "pod-logs").glob(f"{namespace}_check-7_*/check.log"))
    assert len(files) == 1
    cluster.kubectl("delete", "-n", namespace, "pod", "check-7", "--wait=false")
    # The service got SIGTERM at the deletion, as from a kubelet, and said so.
    eventually(lambda: "event=gpu_check_stopped" in files[0].read_text(), timeout=30,
               what="the check process stopped")
    eventually(lambda: cluster.kubectl("get", "logs.kwok.x-k8s.io", "-n", namespace,
                                       "-o", "name").stdout == "",
               timeout=30, what="its kwok Logs object removed")


def test_other_images_run_nothing(cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    pod = _pod("other", "busybox:1.36", command=["sh", "-c", f"echo ran > {marker}"])
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    eventually(lambda: _running(cluster, namespace, "other"), timeout=30, what="Running")
    proc = cluster.kubectl("logs", "-n", namespace, "other", check=False)
    assert proc.returncode != 0
    assert 'no logs found for container "check"' in proc.stderr
    assert not marker.exists()
    assert cluster.kubectl("get", "logs.kwok.x-k8s.io", "-n", namespace, "-o",
                           "name").stdout == ""
    assert not list((cluster.dir / "pod-logs").glob(f"{namespace}_other_*"))
