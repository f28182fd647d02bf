"""A replica holding part of a device: what its pod is told and what it carries."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.gpuworkload import children as ch
from internal.scheduling.pods import pod_holding

RAW = {"metadata": {"name": "w", "namespace": "ns", "uid": "u1"}}


def _pod(spec: dict[str, Any], p: Placement,
         mode: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES) -> dict[str, Any]:
    w = GPUWorkload.model_validate({"metadata": RAW["metadata"], "spec": spec})
    return ch.build_child(w, RAW, p, mode, lambda n, d: [f"GPU-{n}-{i}" for i in d])


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_mig_replica_sees_its_instance_by_uuid() -> None:
    p = Placement(index=0, node="n1", devices=[3], mig="MIG-abc")
    env = _env(_pod({"migProfile": "1g.10gb"}, p))
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-abc"
    env = _env(_pod({"migProfile": "1g.10gb"}, p, DeviceExposure.NVIDIA_VISIBLE_DEVICES))
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"]) == ("MIG-abc", "0")


def test_an_mps_share_gets_its_limits_and_time_slicing_gets_none() -> None:
    p = Placement(index=0, node="n1", devices=[2], share="memory=20480Mi")
    env = _env(_pod({"gpuShare": {"memory": "20Gi", "mode": "mps"}}, p))
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    p = Placement(index=0, node="n1", devices=[2], share="fraction=0.25")
    env = _env(_pod({"gpuShare": {"fraction": "0.25", "mode": "mps"}}, p))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    env = _env(_pod({"gpuShare": {"fraction": "0.25"}}, p))
    assert not any(k.startswith("CUDA_MPS") for k in env)


def test_the_pod_says_what_it_holds_and_the_ledger_reads_it_back() -> None:
    p = Placement(index=0, node="n1", devices=[2], share="fraction=0.25")
    pod = _pod({"gpuShare": {"fraction": "0.25"}}, p)
    pod["metadata"]["uid"] = "p1"
    h = pod_holding(pod)
    assert h is not None and (h.devices, h.share) == ((2,), "fraction=0.25")
    pod = _pod({"migProfile": "1g.10gb"}, Placement(index=0, node="n1", devices=[0],
                                                     mig="MIG-x"))
    h = pod_holding(pod)
    assert h is not None and (h.devices, h.mig) == ((0,), "MIG-x")
