"""The ledger rebuilt after a restart, as the cache hands it over: a workload whose
spec no longer validates keeps the devices its status names (by index, on its node),
with its GPU count read from what is left of the spec; a bound, running GPU pod the
controller did not create takes what its containers ask for, as the kubelet counts."""

from __future__ import annotations

from typing import Any

import pytest

from internal.scheduling import Ledger, pod_gpu_request

NODES = {"n1": range(4), "n2": range(8)}


def raw_workload(name: str, placements: list[dict[str, Any]], *, ns: str | None = "ns",
                 phase: str | None = "Running", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    status: dict[str, Any] = {"placements": placements}
    if phase is not None:
        status["phase"] = phase
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": meta, "spec": spec, "status": status}


def gpu_pod(name: str, node: str | None, *, ns: str = "team", phase: str = "Running",
            containers: list[dict[str, Any]] | None = None,
            init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or []}
    if node is not None:
        spec["nodeName"] = node
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec,
            "status": {"phase": phase}}


def limits(n: Any) -> dict[str, Any]:
    return {"resources": {"limits": {"nvidia.com/gpu": n}}}


def requests(n: Any) -> dict[str, Any]:
    return {"resources": {"requests": {"nvidia.com/gpu": n}}}


# ------------------------------------------------ workloads whose spec went bad


def test_a_workload_with_an_invalid_spec_keeps_its_devices() -> None:
    bad = raw_workload("bad", [{"index": 0, "node": "n1", "devices": [1, 3]},
                               {"index": 1, "node": "n2", "devices": [7]}],
                       schedulingStrategy="fastest", gpusPerReplica=2)
    led, problems = Ledger.rebuild([bad], (), NODES)
    assert [led.holder("n1", d) for d in range(4)] == [None, "ns/bad", None, "ns/bad"]
    assert led.holder("n2", 7) == "ns/bad" and led.holder("n2", 6) is None
    assert (led.free_count("n1"), led.free_count("n2")) == (2, 7)
    assert led.is_committed("ns/bad")
    assert len(problems) == 1
    assert problems[0].startswith("ns/bad: invalid spec, placements kept: ")
    assert "Input should be" in problems[0]  # pydantic's reason, for the log:
    assert "\n" not in problems[0] and "validation error" not in problems[0]  # one line


@pytest.mark.parametrize(
    ("spec", "held"),
    [
        ({"gpusPerReplica": 3, "replicas": -1}, 3),
        ({"gpuCount": 2, "replicas": -1}, 2),  # the seed's name for it
        ({"replicas": -1}, 1),
    ],
)
def test_an_invalid_device_plugin_workload_keeps_its_count(spec: dict, held: int) -> None:
    bad = raw_workload("dp", [{"index": 0, "node": "n2", "devices": []}], **spec)
    led, problems = Ledger.rebuild([bad], (), NODES)
    assert led.free_count("n2") == 8 - held
    assert problems[0].startswith("ns/dp: invalid spec, placements kept: ")


def test_an_invalid_workload_without_phase_or_namespace_still_holds() -> None:
    bad = raw_workload("w", [{"index": 0, "node": "n1", "devices": [0]}], ns=None,
                       phase=None, replicas=-1)
    led, problems = Ledger.rebuild([bad], (), NODES)
    assert led.holder("n1", 0) == "default/w"
    assert problems[0].startswith("default/w: invalid spec, placements kept: ")


def test_an_invalid_workload_that_finished_holds_nothing() -> None:
    for phase in ("Succeeded", "Failed"):
        bad = raw_workload("w", [{"index": 0, "node": "n1", "devices": [0]}], phase=phase,
                           replicas=-1)
        led, problems = Ledger.rebuild([bad], (), NODES)
        assert led.free_count("n1") == 4 and led.holder("n1", 0) is None
        assert len(problems) == 1


def test_an_unreadable_workload_is_reported_and_ignored() -> None:
    bad = raw_workload("w", [{"index": 0, "node": "n1", "devices": ["x"]}], replicas=-1)
    ugly = raw_workload("v", [], gpusPerReplica="many", replicas=-1)
    led, problems = Ledger.rebuild([bad, ugly], (), NODES)
    assert led.free_count("n1") == 4
    assert [p.split(":")[0] for p in problems] == ["ns/w", "ns/v"]
    assert all(": unreadable, ignored: " in p for p in problems)


def test_valid_and_invalid_workloads_side_by_side() -> None:
    good = raw_workload("good", [{"index": 0, "node": "n1", "devices": [0]}], gpusPerReplica=1)
    bad = raw_workload("bad", [{"index": 0, "node": "n1", "devices": [2]}], replicas=-1)
    led, problems = Ledger.rebuild([good, bad], (), NODES)
    assert (led.holder("n1", 0), led.holder("n1", 2)) == ("ns/good", "ns/bad")
    assert len(problems) == 1 and problems[0].startswith("ns/bad:")


# ------------------------------------------------------------- other GPU pods


def test_a_running_gpu_pod_takes_what_it_asks_for() -> None:
    pods = [gpu_pod("p", "n2", containers=[limits("2"), requests(1)])]
    led, problems = Ledger.rebuild([], pods, NODES)
    assert led.free_count("n2") == 5 and problems == []


@pytest.mark.parametrize(
    ("containers", "init", "gpus"),
    [
        ([limits(1), limits("2")], None, 3),  # containers add up
        ([limits(1)], [limits(4), limits(2)], 4),  # the largest init container counts
        ([limits(3)], [limits(2)], 3),
        ([{"resources": {"limits": {"nvidia.com/gpu": "0"},
                         "requests": {"nvidia.com/gpu": "2"}}}], None, 0),  # limits first
        ([requests("2")], None, 2),
        ([{}], None, 0),
        ([limits("lots")], None, 0),
    ],
)
def test_gpus_a_pod_takes(containers: list, init: list | None, gpus: int) -> None:
    pod = gpu_pod("p", "n2", containers=containers, init=init)
    assert pod_gpu_request(pod) == gpus
    led, _ = Ledger.rebuild([], [pod], NODES)
    assert led.free_count("n2") == 8 - gpus


def test_pods_that_hold_nothing() -> None:
    pods = [
        gpu_pod("unbound", None, containers=[limits(2)]),
        gpu_pod("done", "n2", phase="Succeeded", containers=[limits(2)]),
        gpu_pod("failed", "n2", phase="Failed", containers=[limits(2)]),
        gpu_pod("cpu", "n2", containers=[{"resources": {"limits": {"cpu": "2"}}}]),
    ]
    led, _ = Ledger.rebuild([], pods, NODES)
    assert led.free_count("n2") == 8


def test_pending_and_unknown_phase_pods_still_hold() -> None:
    pods = [gpu_pod("a", "n2", phase="Pending", containers=[limits(1)]),
            gpu_pod("b", "n2", phase="Unknown", containers=[limits(2)])]
    led, _ = Ledger.rebuild([], pods, NODES)
    assert led.free_count("n2") == 5


def test_same_named_pods_of_two_namespaces_both_hold() -> None:
    pods = [gpu_pod("p", "n1", ns="a", containers=[limits(1)]),
            gpu_pod("p", "n1", ns="b", containers=[limits(2)])]
    led, _ = Ledger.rebuild([], pods, NODES)
    assert led.free_count("n1") == 1
