"""What waits for what, and what is a conflict, when a device holds shares or MIG
instances: compatible holders of other owners neither block a booking nor make a
conflict; a nomination still waits for its victims, compatible or not; a booking
counting GPUs never waits for its own pods."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from tests.unit.scheduling.helpers import cluster, gpunode, node

GI = 1024
MIG = ["MIG-n1-0-0", "MIG-n1-0-1"]


def ledger(mig: bool = False) -> Ledger:
    g = gpunode("n1", memory=80 * GI)
    if mig:
        g["status"]["devices"][0].update(migMode=True, migInstances=[
            {"uuid": u, "profile": "1g.10gb", "memoryTotalMiB": 9984} for u in MIG])
    return cluster(node("n1"), gpunodes=(g,))[1]


def pod(uid: str, devices: str, *, owner: str | None = None, **ann: str) -> dict[str, Any]:
    annotations = {"gpu.orchestrator.dev/devices": devices}
    annotations.update({f"gpu.orchestrator.dev/{k}": v for k, v in ann.items()})
    meta: dict[str, Any] = {"name": uid, "namespace": "ns", "uid": uid,
                            "annotations": annotations}
    if owner:
        meta["ownerReferences"] = [{"kind": "GPUWorkload", "uid": owner, "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def share(dev: int, text: str) -> Placement:
    return Placement(index=0, node="n1", devices=[dev], share=text)


def test_a_share_booking_does_not_wait_for_another_owners_compatible_share() -> None:
    led = ledger()
    assert led.sync_pod(pod("p1", "0", share="fraction=0.5")) == []
    led.assume("ns/w", [share(0, "fraction=0.25")], owner="w#0")
    assert led.blockers("ns/w") == {}
    # a whole holder that came to the device afterwards is waited for
    led.sync_pod(pod("p2", "0"))
    assert led.blockers("ns/w") == {"n1": ["ns/p2"]}


def test_shares_of_two_owners_on_one_device_are_no_conflict() -> None:
    led = ledger()
    assert led.sync_pod(pod("p1", "1", share="memory=20480Mi")) == []
    assert led.sync_pod(pod("p2", "1", share="fraction=0.5")) == []
    conflicts = led.sync_pod(pod("p3", "1"))  # held whole beside them: a conflict
    assert conflicts and "device 1 also held by" in conflicts[0]


def test_mig_pods_on_distinct_instances_are_no_conflict() -> None:
    led = ledger(mig=True)
    assert led.sync_pod(pod("m1", "0", mig=MIG[0])) == []
    assert led.sync_pod(pod("m2", "0", mig=MIG[1])) == []
    conflicts = led.sync_pod(pod("m3", "0", mig=MIG[0]))  # the same instance twice
    assert conflicts and "device 0 also held by" in conflicts[0]


def test_a_nomination_waits_for_its_victims_even_where_they_could_share() -> None:
    led = ledger()
    led.sync_pod(pod("v", "2", owner="victim", share="fraction=0.5"))
    led.assume("ns/pre", [share(2, "fraction=0.5")], owner="pre#0", overlap=["victim#0"])
    assert led.blockers("ns/pre") == {"n1": ["ns/v"]}


def test_a_counting_booking_never_waits_for_its_own_pods() -> None:
    led = Ledger()
    led.set_node_devices("n1", range(2))
    led.assume("ns/w", [Placement(index=0, node="n1", devices=[])], gpus_per_replica=2,
               owner="w#0")
    c = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}], "nodeName": "n1"}
    mine = {"metadata": {"name": "w-0", "namespace": "ns", "uid": "u-w-0",
                         "ownerReferences": [{"kind": "GPUWorkload", "uid": "w",
                                              "controller": True}],
                         "labels": {"gpu.orchestrator.dev/attempt": "0"}},
            "spec": c, "status": {"phase": "Running"}}
    other = {"metadata": {"name": "x", "namespace": "ns", "uid": "u-x"},
             "spec": {**c, "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
             "status": {"phase": "Running"}}
    led.sync_pod(mine)
    assert led.blockers("ns/w") == {}
    led.sync_pod(other)  # the node now lacks a GPU: the other pod is waited for, not mine
    assert led.blockers("ns/w") == {"n1": ["ns/x"]}


def test_share_use_says_how_much_of_each_shared_device_is_taken() -> None:
    from fractions import Fraction

    led = ledger(mig=True)
    led.sync_pod(pod("a", "1", share="memory=20480Mi"))
    led.sync_pod(pod("b", "1", share="fraction=0.5"))
    led.sync_pod(pod("whole", "2"))
    led.sync_pod(pod("m", "0", mig=MIG[0]))
    # device 1 only: device 2 is held whole, device 0 by a MIG instance
    assert led.share_use("n1") == {1: (Fraction(3, 4), 80 * GI)}
